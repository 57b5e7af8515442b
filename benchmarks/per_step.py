"""Every step, side by side: what an agent pays its checkpointer at each step, in CPU time,
snapvc and LangGraph's savers measured in the same run.

For each run length in ``Scale.per_step_steps`` (500 and 2,000 steps), the agent-run
workload (``benchmarks.workload.AgentRun``) is committed with the state rebuilt at every
step (``AgentRun.step_rebuilt``, as LangGraph's reducers hand it over) to a snapvc
repository on the embedded store; at the first length, the same states are put into
LangGraph's ``SqliteSaver`` (a file) and ``InMemorySaver`` the way LangGraph's loop puts
them (``benchmarks.peers.SaverThread``). Then, for each length:

- commit: the CPU time of each ``repo.commit`` (median of all, and of the last 50);
- fork: the first commit on a new branch made at the tip (the next step's state, from
  the state in memory), median over ``FORKS`` forks, against the last-50 commit median;
- checkout of the latest state on the open repository against ``get_tuple`` of the
  latest checkpoint, interleaved call by call (median of ``REPEATS`` each);
- in a fresh process (one per sample, imports done before the clock starts):
  ``snapvc.open`` + ``checkout`` against ``sqlite3.connect`` + ``SqliteSaver.get_tuple``,
  and ``snapvc.open`` + one message through ``repo.snapshot`` (median of
  ``Scale.per_step_fresh``);
- the store's size while the repository is open (file, ``-wal`` and ``-shm``) and after
  ``close``;

and at the first length, each in a process of its own: the peak RSS of the whole run with
a read every tenth step, snapvc against SqliteSaver (and the RSS above what the imports
took). What a closed repository keeps is the ``lifetime`` workload's figure.

CPU time (``time.process_time``) rather than wall time: the machine may be shared, and
snapvc and the peers are measured in turn, so both see the same conditions. Every read is
checked against the state in memory; a mismatch raises ``BenchmarkFailure``.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3
import orjson

import snapvc
from benchmarks import peers as peer_bench
from benchmarks.measure import (
    PartResult,
    Scale,
    Section,
    Table,
    check,
    duration,
    key_value_table,
    process_memory,
    ratio,
    size,
    store_files,
)
from benchmarks.workload import AgentRun

__all__ = ["NAME", "TITLE", "RESULTS", "PerStepFigures", "parts", "run", "section"]

NAME = "per-step"
TITLE = "Every step, side by side"
BRANCH = "main"
WINDOW = 50  # the last commits whose median is compared across run lengths
FORKS = 9
REPEATS = 31
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class LengthFigures:
    """One run length's figures; times are CPU seconds, peers' None when not run."""

    steps: int
    commit_median_s: float
    commit_last_s: float
    commit_thread_median_s: float  # the committing thread's CPU alone (no background sealing)
    commit_thread_last_s: float
    fork_first_s: float
    checkout_s: float
    fresh_checkout_s: float
    fresh_read_s: float
    stored_open_bytes: int
    stored_closed_bytes: int
    sqlite_put_s: float | None = None
    memory_put_s: float | None = None
    sqlite_get_s: float | None = None
    memory_get_s: float | None = None
    sqlite_fresh_get_s: float | None = None


@dataclass
class PerStepFigures:
    lengths: list[LengthFigures]
    rss_bytes: int  # peak RSS of the run with reads, snapvc
    rss_run_bytes: int  # of which above the imports
    sqlite_rss_bytes: int | None
    sqlite_rss_run_bytes: int | None
    checks: list[str] = field(default_factory=list)


RESULTS = {"snapvc": PerStepFigures, "with-peers": PerStepFigures}


def parts(scale: Scale, peers: bool) -> list[str]:
    return ["with-peers" if peers else "snapvc"]


def _cpu(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[float, Any]:
    """The CPU time ``fn(*args, **kwargs)`` took, and what it returned."""
    t0 = time.process_time()
    out = fn(*args, **kwargs)
    return time.process_time() - t0, out


def _digest(value: Any) -> str:
    return blake3.blake3(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()


def run(part: str, scale: Scale, seed: int, say: Callable[[str], None]) -> PerStepFigures:
    peers = part == "with-peers"
    checks: list[str] = []
    lengths = []
    rss: tuple[int, int, int | None, int | None] | None = None
    with tempfile.TemporaryDirectory(prefix="snapvc-per-step-") as tmp:
        for n, steps in enumerate(scale.per_step_steps):
            workload = AgentRun(seed, scale.documents, scale.doc_size)
            folder = Path(tmp) / f"steps-{steps}"
            folder.mkdir()
            lengths.append(_length(workload, steps, folder, peers and n == 0, scale.per_step_fresh, checks, say))
            if n == 0:
                say(f"  peak RSS of a {steps}-step run with reads")
                rss = _rss_figures(seed, scale, steps, folder, peers, checks)
    assert rss is not None
    return PerStepFigures(lengths, *rss, checks=checks)


def _length(workload: AgentRun, steps: int, folder: Path, peers: bool, fresh: int, checks: list[str], say: Callable[[str], None]) -> LengthFigures:
    say(f"  {steps} steps, the state rebuilt each step" + (", and into LangGraph's savers" if peers else ""))
    path = folder / "run.snapvc"
    repo = snapvc.open(str(path))
    sqlite_thread = memory_thread = None
    conn = None
    if peers:
        from langgraph.checkpoint.memory import InMemorySaver
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(str(folder / "sqlite-saver.db"), check_same_thread=False)
        sqlite_thread = peer_bench.SaverThread(SqliteSaver(conn))
        memory_thread = peer_bench.SaverThread(InMemorySaver())
    sqlite_puts: list[float] = []
    memory_puts: list[float] = []
    commits: list[float] = []
    thread_commits: list[float] = []
    state = workload.initial_state()
    for i in range(steps + 1):
        if i:
            state = workload.step_rebuilt(state, i)
        t0 = time.thread_time()
        spent, _ = _cpu(repo.commit, state, branch=BRANCH, message=f"step {i}")
        if i:
            commits.append(spent)
            thread_commits.append(time.thread_time() - t0)
        if sqlite_thread is not None and memory_thread is not None:
            sqlite_puts.append(sqlite_thread.put(state, i, time.process_time))
            memory_puts.append(memory_thread.put(state, i, time.process_time))
    expected = _digest(state)
    message_at = len(state["messages"]) // 2
    expected_message = _digest(state["messages"][message_at])

    forks = []
    forks_equal = True
    for f in range(FORKS):
        name = f"fork-{f}"
        repo.branch(name, at=BRANCH)
        forked = workload.step_rebuilt(state, steps + 1 + f)
        forks.append(_cpu(repo.commit, forked, branch=name, message="first on the fork")[0])
        forks_equal = forks_equal and _digest(repo.checkout(name)) == _digest(forked)
    check(forks_equal, checks, f"{steps} steps: each fork's first commit checks out equal to the state committed")

    checkouts, sqlite_gets, memory_gets = [], [], []
    for _ in range(REPEATS):
        spent, got = _cpu(repo.checkout, BRANCH)
        checkouts.append(spent)
        if sqlite_thread is not None and memory_thread is not None:
            sqlite_gets.append(_cpu(sqlite_thread.saver.get_tuple, peer_bench.THREAD)[0])
            memory_gets.append(_cpu(memory_thread.saver.get_tuple, peer_bench.THREAD)[0])
    check(_digest(got) == expected, checks, f"{steps} steps: checkout equals the state in memory")
    if sqlite_thread is not None and memory_thread is not None:
        for saver_name, thread in (("SqliteSaver", sqlite_thread), ("InMemorySaver", memory_thread)):
            latest = thread.saver.get_tuple(peer_bench.THREAD)
            check(
                latest is not None and _digest(latest.checkpoint["channel_values"]) == expected,
                checks,
                f"{steps} steps: {saver_name}'s latest checkpoint equals the state in memory",
            )
    stored_open = sum(store_files(path).values())
    repo.close()
    stored_closed = sum(store_files(path).values())
    if conn is not None:
        conn.close()

    fresh_checkouts, fresh_reads, fresh_gets = [], [], []
    digests: dict[str, set[str]] = {"checkout": set(), "read": set(), "sqlite-get": set()}
    for _ in range(fresh):
        spent, digest = _child("checkout", str(path))
        fresh_checkouts.append(spent)
        digests["checkout"].add(digest)
        spent, digest = _child("read", str(path), str(message_at))
        fresh_reads.append(spent)
        digests["read"].add(digest)
        if peers:
            spent, digest = _child("sqlite-get", str(folder / "sqlite-saver.db"))
            fresh_gets.append(spent)
            digests["sqlite-get"].add(digest)
    check(digests["checkout"] == {expected}, checks, f"{steps} steps: each fresh process checks out the state in memory")
    check(digests["read"] == {expected_message}, checks, f"{steps} steps: each fresh process reads through a snapshot the message in memory")
    if peers:
        check(digests["sqlite-get"] == {expected}, checks, f"{steps} steps: SqliteSaver in each fresh process gets the state in memory")
    median = statistics.median
    return LengthFigures(
        steps=steps,
        commit_median_s=median(commits),
        commit_last_s=median(commits[-WINDOW:]),
        commit_thread_median_s=median(thread_commits),
        commit_thread_last_s=median(thread_commits[-WINDOW:]),
        fork_first_s=median(forks),
        checkout_s=median(checkouts),
        fresh_checkout_s=median(fresh_checkouts),
        fresh_read_s=median(fresh_reads),
        stored_open_bytes=stored_open,
        stored_closed_bytes=stored_closed,
        sqlite_put_s=median(sqlite_puts[1:]) if sqlite_puts else None,
        memory_put_s=median(memory_puts[1:]) if memory_puts else None,
        sqlite_get_s=median(sqlite_gets) if sqlite_gets else None,
        memory_get_s=median(memory_gets) if memory_gets else None,
        sqlite_fresh_get_s=median(fresh_gets) if fresh_gets else None,
    )


def _rss_figures(seed: int, scale: Scale, steps: int, folder: Path, peers: bool, checks: list[str]) -> tuple[int, int, int | None, int | None]:
    args = [str(seed), str(scale.documents), str(scale.doc_size), str(steps)]
    peak, above = _child("rss-snapvc", str(folder / "rss.snapvc"), *args)
    sqlite_peak = sqlite_above = None
    if peers:
        sqlite_peak, sqlite_above = _child("rss-sqlite", str(folder / "rss-saver.db"), *args)
    return peak, above, sqlite_peak, sqlite_above


# --- the child processes ---------------------------------------------------------------


def _child(kind: str, *args: str) -> tuple[Any, Any]:
    """Run ``python -m benchmarks.per_step KIND ARGS`` in a fresh process: its two figures."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.per_step", kind, *args], cwd=ROOT,
                         capture_output=True, text=True)  # fmt: skip
    if out.returncode != 0:
        raise AssertionError(f"per-step child {kind} failed:\n{out.stderr}")
    first, second = json.loads(out.stdout)
    return first, second


def _child_main(kind: str, args: list[str]) -> tuple[Any, Any]:
    if kind == "checkout":
        t0 = time.process_time()
        repo = snapvc.open(args[0])
        state = repo.checkout(BRANCH)
        spent = time.process_time() - t0
        repo.close()
        return spent, _digest(state)
    if kind == "read":
        t0 = time.process_time()
        repo = snapvc.open(args[0])
        message = repo.snapshot(BRANCH)["messages"][int(args[1])]
        spent = time.process_time() - t0
        plain = snapvc.to_jsonable(message)
        repo.close()
        return spent, _digest(plain)
    if kind == "sqlite-get":
        from langgraph.checkpoint.sqlite import SqliteSaver

        t0 = time.process_time()
        conn = sqlite3.connect(args[0], check_same_thread=False)
        latest = SqliteSaver(conn).get_tuple(peer_bench.THREAD)
        spent = time.process_time() - t0
        conn.close()
        return spent, _digest(latest.checkpoint["channel_values"]) if latest else None
    if kind in ("rss-snapvc", "rss-sqlite"):
        path, seed, documents, doc_size, steps = args[0], *map(int, args[1:])
        workload = AgentRun(seed, documents, doc_size)
        if kind == "rss-snapvc":
            repo = snapvc.open(path)
            put: Callable[[dict[str, Any], int], Any] = lambda s, i: repo.commit(s, branch=BRANCH)  # noqa: E731
            get: Callable[[], Any] = lambda: repo.checkout(BRANCH)  # noqa: E731
        else:
            from langgraph.checkpoint.sqlite import SqliteSaver

            thread = peer_bench.SaverThread(SqliteSaver(sqlite3.connect(path, check_same_thread=False)))
            put = thread.put
            get = lambda: thread.saver.get_tuple(peer_bench.THREAD)  # noqa: E731
        base = process_memory("VmRSS")
        state = workload.initial_state()
        for i in range(steps + 1):
            if i:
                state = workload.step_rebuilt(state, i)
            put(state, i)
            if i % 10 == 0:
                get()
        peak = process_memory("VmHWM")
        return peak, peak - base
    raise AssertionError(f"unknown per-step child {kind!r}")


# --- the section -----------------------------------------------------------------------


def section(results: dict[str, PartResult], scale: Scale, seed: int) -> Section:
    part = next(iter(results.values()))
    value: PerStepFigures = part.value
    head = ["figure (CPU time)"] + [f"{f.steps:,} steps" for f in value.lengths]
    first = value.lengths[0]

    def row(name: str, get: Callable[[LengthFigures], str]) -> list[str]:
        return [name] + [get(f) for f in value.lengths]

    def peer(ours: float, theirs: float | None) -> str:
        return f"{duration(ours)} ({ratio(ours, theirs)})" if theirs else duration(ours)

    rows = [
        row("commit, median of every step", lambda f: duration(f.commit_median_s)),
        row(f"commit, median of the last {WINDOW}", lambda f: duration(f.commit_last_s)),
        row("commit, median of every step, the committing thread's CPU (no background sealing)",
            lambda f: duration(f.commit_thread_median_s)),
        row(f"commit, median of the last {WINDOW}, the committing thread's CPU",
            lambda f: duration(f.commit_thread_last_s)),
        row(
            f"first commit on a new branch (median of {FORKS} forks)",
            lambda f: f"{duration(f.fork_first_s)} ({ratio(f.fork_first_s, f.commit_last_s)} a commit)",
        ),
        row(f"checkout of the latest state, open repository (median of {REPEATS})", lambda f: duration(f.checkout_s)),
        row(f"open + checkout in a fresh process (median of {scale.per_step_fresh})", lambda f: duration(f.fresh_checkout_s)),
        row("open + one message via snapshot, fresh process", lambda f: duration(f.fresh_read_s)),
        row("stored while open (file, -wal, -shm)", lambda f: size(f.stored_open_bytes)),
        row("stored after close", lambda f: size(f.stored_closed_bytes)),
    ]
    tables: list[Table | str] = [Table(head, rows, "snapvc")]
    if first.sqlite_get_s is not None:
        peer_rows = [
            ["commit / put, median of the rest", duration(first.commit_median_s),
             peer(first.sqlite_put_s or 0, None), duration(first.memory_put_s or 0),
             ratio(first.commit_median_s, first.sqlite_put_s), ratio(first.commit_median_s, first.memory_put_s)],
            ["checkout / get_tuple, open (interleaved)", duration(first.checkout_s),
             duration(first.sqlite_get_s), duration(first.memory_get_s or 0),
             ratio(first.checkout_s, first.sqlite_get_s), ratio(first.checkout_s, first.memory_get_s)],
            ["open + checkout / connect + get_tuple, fresh process", duration(first.fresh_checkout_s),
             duration(first.sqlite_fresh_get_s or 0), "-", ratio(first.fresh_checkout_s, first.sqlite_fresh_get_s),
             "-"],
            ["peak RSS of the run with reads", size(value.rss_bytes), size(value.sqlite_rss_bytes or 0), "-",
             ratio(value.rss_bytes, value.sqlite_rss_bytes), "-"],
            ["  of which above the imports", size(value.rss_run_bytes), size(value.sqlite_rss_run_bytes or 0),
             "-", ratio(value.rss_run_bytes, value.sqlite_rss_run_bytes), "-"],
        ]  # fmt: skip
        tables.append(Table(["figure (CPU time)", "snapvc", "SqliteSaver", "InMemorySaver", "/ SqliteSaver",
                             "/ InMemorySaver"], peer_rows, f"Side by side, {first.steps:,} steps"))  # fmt: skip
    tables.append(key_value_table([
        (f"peak RSS, {first.steps:,}-step run with a checkout every 10th step", size(value.rss_bytes)),
        (f"commit, last-{WINDOW} median: {value.lengths[-1].steps:,} steps / {first.steps:,}",
         ratio(value.lengths[-1].commit_last_s, first.commit_last_s)),
        (f"commit, the committing thread's CPU, last-{WINDOW} median: {value.lengths[-1].steps:,} steps / "
         f"{first.steps:,}", ratio(value.lengths[-1].commit_thread_last_s, first.commit_thread_last_s)),
    ], "Memory and growth"))  # fmt: skip
    return Section(
        NAME,
        f"{TITLE}: {', '.join(f'{f.steps:,}' for f in value.lengths)} steps",
        "What an agent pays its checkpointer at each step, in CPU time, snapvc and LangGraph's savers in the "
        "same run: the agent-run workload with the state rebuilt at every step (as LangGraph's reducers hand it "
        "over), committed to snapvc and put into SqliteSaver and InMemorySaver; checkouts interleaved call by "
        "call with get_tuple; fresh-process reads each in a new process after its imports; memory in processes "
        "of their own.",
        tables,
        checks=value.checks,
    )


if __name__ == "__main__":
    print(json.dumps(_child_main(sys.argv[1], sys.argv[2:])))
