"""A large state: about 220 MB of documents and one binary blob, one document changed per commit.

The state is ``{"documents": {"doc-0000": str, ...}, "blob": bytes}``:
``Scale.large_documents`` documents of ``Scale.large_doc_size`` characters
(``benchmarks.workload.library``) and one ``Scale.large_blob``-byte blob that zstd
shrinks about 1.9x (``benchmarks.workload.compressible_bytes``).

- ``snapvc``: commits the state (all of it new: the throughput of a first commit), then
  ``Scale.large_commits`` commits that each replace one document by a copy with 1,000
  characters rewritten in its middle, twice: through a plain dict and
  ``repo.commit`` on ``main``, and through the ``State`` working copy
  (``repo.state(...)``, ``state.set("documents.doc-0042", text)``,
  ``state.snapshot(...)``) on a branch forked at the first commit, after one snapshot
  right after loading (which encodes the loaded state once). Both must end at the same
  tree. Checkout throughput is the state's bytes over the full ``repo.checkout``.
  Then the first snapshot after a load: a new ``repo.state`` of the last state (on a
  branch forked there), one document set, and the time of ``state.snapshot()``; once on
  the open repository, once on a freshly opened one.
- ``limits``: this machine's blake3, zstd and orjson speeds on the same data
  (``benchmarks.limits``), in a process of its own.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import snapvc
from benchmarks.limits import ZSTD_LEVEL, Limits, measure_limits
from benchmarks.measure import (
    PartResult,
    Scale,
    Section,
    StoreFigures,
    Table,
    check,
    duration,
    key_value_table,
    measure_store,
    percentile,
    rate,
    size,
    summary_row,
)
from benchmarks.workload import TextGenerator, compressible_bytes, library

__all__ = ["NAME", "TITLE", "RESULTS", "LargeStateFigures", "parts", "run", "section", "large_state", "edits", "state_available"]

NAME = "large-state"
TITLE = "Large state"
BRANCH = "main"
WORKING_COPY = "working-copy"
AFTER_LOAD = "after-load"
EDIT = 1_000
NOT_AVAILABLE = "State working copy not available"


@dataclass
class LargeStateFigures:
    """snapvc's part. ``data_bytes``: the state's own bytes; times are seconds: each commit
    after the first through a plain dict (``dict_times``) and through the ``State`` working
    copy (``state_times``, empty where there is none)."""

    data_bytes: int
    first_commit_s: float
    dict_times: list[float]
    state_times: list[float]
    figures: StoreFigures
    checks: list[str] = field(default_factory=list)
    # the first snapshot after loading the last state, one document set: repo.state and
    # state.snapshot times, on the open repository and on a freshly opened one
    load_s: float | None = None
    first_snapshot_s: float | None = None
    load_fresh_s: float | None = None
    first_snapshot_fresh_s: float | None = None


RESULTS = {"snapvc": LargeStateFigures, "limits": Limits}


def large_state(scale: Scale, seed: int) -> dict[str, Any]:
    return {
        "documents": library(seed, scale.large_documents, scale.large_doc_size),
        "blob": compressible_bytes(seed, scale.large_blob),
    }


def edits(scale: Scale, seed: int, documents: dict[str, str]) -> Iterator[tuple[str, str]]:
    """For each commit, a document key and its new text: ``EDIT`` characters rewritten in
    its middle half. ``documents`` is updated as the edits are drawn."""
    text = TextGenerator(seed)
    rng = random.Random(seed * 7919 + 17)
    keys = sorted(documents)
    for _ in range(scale.large_commits):
        key = rng.choice(keys)
        old = documents[key]
        splice = min(EDIT, len(old) // 4)
        offset = rng.randint(len(old) // 4, 3 * len(old) // 4 - splice)
        documents[key] = new = old[:offset] + text.text(rng, splice) + old[offset + splice :]
        yield key, new


def state_available() -> bool:
    """Whether this snapvc has the ``State`` working copy (``repo.state``)."""
    return callable(getattr(snapvc.Repository, "state", None))


def data_bytes(state: dict[str, Any]) -> int:
    """The state's own bytes: every document as UTF-8, and the blob."""
    return sum(len(doc.encode()) for doc in state["documents"].values()) + len(state["blob"])


def parts(scale: Scale, peers: bool) -> list[str]:
    return ["snapvc", "limits"]


def run(part: str, scale: Scale, seed: int, say: Callable[[str], None]) -> Any:
    say(f"{NAME}: generating {scale.large_documents:,} documents and a {size(scale.large_blob)} blob")
    state = large_state(scale, seed)
    if part == "limits":
        values = [doc.encode() for doc in state["documents"].values()] + [state["blob"]]
        return measure_limits(values, state["documents"])
    with tempfile.TemporaryDirectory(prefix="snapvc-large-") as tmp:
        return _run_snapvc(state, scale, seed, Path(tmp) / "large.snapvc", say)


def _run_snapvc(
    state: dict[str, Any], scale: Scale, seed: int, path: Path, say: Callable[[str], None]
) -> LargeStateFigures:
    checks: list[str] = []
    nbytes = data_bytes(state)
    repo = snapvc.open(str(path))
    t0 = time.perf_counter()
    repo.commit(state, branch=BRANCH, message="fresh", metadata={"step": 0})
    first_s = time.perf_counter() - t0
    say(f"{NAME}: first commit {duration(first_s)}")
    repo.branch(WORKING_COPY, at=BRANCH)
    changes = list(edits(scale, seed, dict(state["documents"])))
    dict_times = []
    for j, (key, text) in enumerate(changes, 1):
        state["documents"][key] = text
        t0 = time.perf_counter()
        repo.commit(state, branch=BRANCH, message=f"edit {key}", metadata={"step": j})
        dict_times.append(time.perf_counter() - t0)
    state_times: list[float] = []
    if state_available():
        working = repo.state(WORKING_COPY)
        working.snapshot(message="loaded")  # the first snapshot after loading encodes the loaded state once
        for j, (key, text) in enumerate(changes, 1):
            working.set(f"documents.{key}", text)
            t0 = time.perf_counter()
            working.snapshot(message=f"edit {key}", metadata={"step": j})
            state_times.append(time.perf_counter() - t0)
        del working
        tree = repo.get_commit(repo.resolve(BRANCH)).tree
        check(repo.get_commit(repo.resolve(WORKING_COPY)).tree == tree, checks,
              "the State working copy ends at the same tree as the plain-dict commits")  # fmt: skip
        say(f"{NAME}: the first snapshot after a load")
        after_load = _first_snapshots(repo, path, scale, seed, state, checks)
    else:
        say(f"{NAME}: {NOT_AVAILABLE}")
    say(f"{NAME}: reading back")
    figures = measure_store(
        repo, path, BRANCH, state, ("documents", changes[-1][0] if changes else "doc-0000"),
        dict_times or [first_s], checks, min(scale.repeats, 3), commits=len(changes) + 1,
    )  # fmt: skip
    if state_times:
        figures.state_commit_median_s = percentile(state_times, 50)
        figures.state_commit_p99_s = percentile(state_times, 99)
        figures.after_load_snapshot_s = after_load[3]  # freshly opened
    return LargeStateFigures(nbytes, first_s, dict_times, state_times, figures, checks,
                             *(after_load if state_times else (None, None, None, None)))  # fmt: skip


def _first_snapshots(repo: snapvc.Repository, path: Path, scale: Scale, seed: int, state: dict[str, Any],
                     checks: list[str]) -> tuple[float, float, float, float]:  # fmt: skip
    """Load the last state on ``BRANCH`` with a new ``repo.state`` (on a branch forked at
    it), set one document, and time the first ``state.snapshot()``: on the open ``repo``,
    then on a freshly opened repository. Each must store exactly that one change.
    Returns (load, snapshot, load freshly opened, snapshot freshly opened) in seconds."""
    edit = replace(scale, large_commits=1)
    times = []
    for k, fresh in enumerate((False, True)):
        branch = f"{AFTER_LOAD}-{'fresh' if fresh else 'open'}"
        key, text = next(edits(edit, seed + 1 + k, dict(state["documents"])))
        repo.branch(branch, at=BRANCH)
        on = snapvc.open(str(path)) if fresh else repo
        try:
            t0 = time.perf_counter()
            working = on.state(branch)
            times.append(time.perf_counter() - t0)
            working.set(("documents", key), text)
            t0 = time.perf_counter()
            working.snapshot(message=f"edit {key}")
            times.append(time.perf_counter() - t0)
            del working
        finally:
            if fresh:
                on.close()
        changes = repo.diff(BRANCH, branch)
        where = "freshly opened" if fresh else "open"
        check([(c.path, c.new) for c in changes] == [(("documents", key), text)], checks,
              f"the first snapshot after a load ({where} repository) stores the one document set")  # fmt: skip
    return times[0], times[1], times[2], times[3]


# --- reporting -------------------------------------------------------------------------


def section(results: dict[str, PartResult], scale: Scale, seed: int) -> Section:
    snap: LargeStateFigures = results["snapvc"].value
    limits: Limits = results["limits"].value
    figures = snap.figures
    nbytes = snap.data_bytes

    def commits(times: list[float]) -> tuple[str, str]:
        if not times:
            return NOT_AVAILABLE, NOT_AVAILABLE
        return duration(percentile(times, 50)), duration(percentile(times, 99))

    dict_median, dict_p99 = commits(snap.dict_times)
    state_median, state_p99 = commits(snap.state_times)
    commit_rows = [
        [f"plain dict, repo.commit ({len(snap.dict_times)} commits)", dict_median, dict_p99],
        [f"State working copy, state.snapshot ({len(snap.state_times)} commits)", state_median, state_p99],
    ]
    if snap.first_snapshot_s is not None and snap.first_snapshot_fresh_s is not None:
        commit_rows += [
            ["first state.snapshot after a new repo.state, open repository", duration(snap.first_snapshot_s), "-"],
            ["first state.snapshot after a new repo.state, freshly opened", duration(snap.first_snapshot_fresh_s), "-"],
        ]
    commit_table = Table(["one document changed per commit", "median", "p99"], commit_rows,
                         "Commit time, one document changed")
    limit_table = Table(
        ["this machine, one core, same data", "throughput"],
        [
            ["blake3", rate(limits.blake3_bps)],
            [f"zstd level {ZSTD_LEVEL} compress (one value per call)", rate(limits.zstd_compress_bps)],
            ["zstd decompress", rate(limits.zstd_decompress_bps)],
            ["blake3 then zstd compress", rate(limits.hash_and_compress_bps)],
            ["orjson.dumps (the documents)", rate(limits.orjson_dumps_bps)],
            ["orjson.loads (the documents)", rate(limits.orjson_loads_bps)],
        ],
        "Limits",
    )
    first_bps = nbytes / snap.first_commit_s
    checkout_bps = nbytes / figures.checkout_s
    fresh_bps = nbytes / figures.checkout_fresh_s
    comparisons = [
        ("first commit (all data new)", first_bps, "blake3 then zstd compress", limits.hash_and_compress_bps),
        ("first commit (all data new)", first_bps, "zstd compress", limits.zstd_compress_bps),
        ("first commit (all data new)", first_bps, "orjson.dumps", limits.orjson_dumps_bps),
        ("checkout, open repository", checkout_bps, "zstd decompress", limits.zstd_decompress_bps),
        ("checkout, open repository", checkout_bps, "orjson.loads", limits.orjson_loads_bps),
        ("checkout, freshly opened", fresh_bps, "zstd decompress", limits.zstd_decompress_bps),
    ]
    throughput = Table(
        ["snapvc", "throughput", "limit", "limit throughput", "snapvc / limit"],
        [[what, rate(ours), limit, rate(theirs), f"{ours / theirs:.0%}"] for what, ours, limit, theirs in comparisons],
        f"Throughput on {nbytes / 1e6:,.0f} MB (the goal: at least 50% of the limit)",
    )
    rows = [
        ("state", f"{scale.large_documents:,} documents of {scale.large_doc_size:,} characters "
                  f"+ one blob of {size(scale.large_blob)}: {nbytes / 1e6:,.1f} MB"),
        ("state, compressed alone with zstd-3 (each value on its own)", size(limits.compressed_bytes)),
        ("first commit", duration(snap.first_commit_s)),
        *([("repo.state of the last state, open repository", duration(snap.load_s))] if snap.load_s else []),
        *([("repo.state of the last state, freshly opened", duration(snap.load_fresh_s))] if snap.load_fresh_s else []),
        *figures.rows(),
        ("peak RSS (process)", size(results["snapvc"].maxrss_bytes)),
    ]  # fmt: skip
    return Section(
        NAME,
        f"{TITLE}: {nbytes / 1e6:,.0f} MB, one document changed per commit",
        f"A state of {scale.large_documents:,} documents of {scale.large_doc_size:,} characters "
        f"(prose-like text from `benchmarks.workload.library`) and one {size(scale.large_blob)} "
        "binary blob that zstd shrinks about 1.9x. The first commit stores it all; then each of "
        f"{scale.large_commits} commits replaces one document by a copy with {EDIT:,} characters "
        "rewritten in its middle, once through a plain dict and `repo.commit`, once through the "
        "`State` working copy (`state.set(\"documents.doc-0042\", text)`, `state.snapshot(...)`) on a "
        "branch forked at the first commit; both must end at the same tree. Then a new "
        "`repo.state` of the last state, on the open repository and on a freshly opened one, one "
        "document set, and its first `state.snapshot()`. Throughputs are the "
        "state's bytes (documents as UTF-8, and the blob) per second, next to this machine's "
        "limits measured on the same data in the same run (`benchmarks/limits.py`).",
        [throughput, limit_table, commit_table, key_value_table(rows, "snapvc")],
        checks=snap.checks,
        summary=[summary_row(f"large state, {nbytes / 1e6:,.0f} MB", figures, results["snapvc"])],
    )
