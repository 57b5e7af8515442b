"""The agent-run benchmark: commit a simulated agent's state at every step, then read it back.

``run_agent_benchmark`` drives ``benchmarks.workload.AgentRun`` for ``steps`` steps on
the embedded default store (one SQLite file in a temporary folder), committing the
state after each step, and measures:

- the store's size on disk (the file plus its ``-wal`` and ``-shm`` files) against the
  bytes a checkpointer that re-stores the whole state at every step would write;
- commit time (median of the first and of the last 50 steps: flat means O(change));
- checkout of the latest state, on the open repository and on a freshly opened one;
- reading one message through a lazy snapshot on a freshly opened repository;
- walking the whole log;
- reading history: ``repo.diff`` of adjacent commits, ``repo.history`` of one scratchpad
  note over every commit and ``repo.log(paths=...)`` of the same note, on the open
  repository after the run and on a freshly opened one;
- commit time through the ``State`` working copy: the same steps driven through
  ``repo.state(...)`` (``state.extend("messages", ...)``, ``state.set(("scratchpad",
  key), ...)``, ``state.snapshot(...)``) on a repository of its own, which must end at
  the same tree;
- commit time of the state rebuilt each step (``AgentRun.step_rebuilt``: new containers
  holding the same element objects, as LangGraph's reducers and immutable-update loops
  hand over), on a repository of its own, which must end at the same tree;
- the first commit after a load, in a new process (``benchmarks.after_load``): a
  checkout or ``repo.state`` of the run's last state, one more step, and its commit;
- peak memory: the tracemalloc peak of an identical second run (tracemalloc slows
  allocation, so the timed run does without it) and the process's ``ru_maxrss``.

It checks its own results first: the state checked out after the run must equal the
state in memory, so a broken store raises ``BenchmarkFailure`` instead of reporting
good numbers. Times are medians of ``time.perf_counter`` intervals; "freshly opened"
means a new ``snapvc.open`` (snapvc's caches are cold, the OS page cache is not).
Between commits the run does a step's work (and sizes the state as JSON), as an agent
loop does between checkpoints, so a commit does not find the CPU caches warm.
"""

from __future__ import annotations

import gc
import os
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

import snapvc
from benchmarks import peers as peer_bench
from benchmarks.after_load import AfterLoad, measure_after_load
from benchmarks.measure import (
    BenchmarkFailure,
    PartResult,
    Scale,
    Section,
    StoreFigures,
    Table,
    check,
    duration,
    key_value_table,
    median_time,
    percentile,
    plain,
    process_memory,
    size,
    store_files,
    summary_row,
    timed_log,
    timed_snapshots,
    to_json,
)
from benchmarks.workload import AgentRun

__all__ = [
    "RESULTS",
    "BenchmarkFailure",
    "Report",
    "run_agent_benchmark",
    "report_blocks",
]

BRANCH = "main"
# Commit times are reported as the median of the first and of the last this many steps.
COMMIT_WINDOW = 50
# Checkout, open and one-message reads are reported as the median of this many runs.
REPEATS = 20
LOG_REPEATS = 5
# The scratchpad note whose history is read.
HISTORY_KEY = "note-07"
REBUILT = "plain dict rebuilt each step, repo.commit(state)"
STATS_FIELDS = ("objects", "stored_bytes", "logical_bytes", "dedup_ratio")


@dataclass
class Report:
    """Figures of one agent run. Sizes are bytes, times seconds."""

    steps: int
    documents: int
    doc_size: int
    seed: int
    commits: int
    store_bytes: int
    store_files: dict[str, int]
    store_bytes_closed: int
    full_copy_bytes: int
    final_state_bytes: int
    commit_first_s: float
    commit_last_s: float
    commit_median_s: float
    commit_p99_s: float
    commit_total_s: float
    checkout_s: float
    checkout_fresh_s: float
    open_s: float
    read_message_s: float
    read_message_index: int
    log_s: float
    log_cold_s: float
    diff_s: float  # repo.diff of adjacent commits, open repository: median over every pair
    diff_fresh_s: float  # the same, each pair on a freshly opened repository (median of REPEATS)
    history_s: float  # repo.history of scratchpad.HISTORY_KEY over every commit, open repository
    history_fresh_s: float
    history_entries: int
    log_paths_s: float  # list(repo.log(paths=scratchpad.HISTORY_KEY)), open repository
    log_paths_fresh_s: float
    tracemalloc_peak_bytes: int
    maxrss_bytes: int
    stats: snapvc.RepoStats
    checks: list[str] = field(default_factory=list)
    # store on disk after close (WAL folded in) after each of these steps
    growth: dict[int, int] = field(default_factory=dict)
    # the same steps through the State working copy, on a repository of its own (if run)
    state_commit_first_s: float | None = None
    state_commit_last_s: float | None = None
    state_commit_median_s: float | None = None
    state_commit_p99_s: float | None = None
    state_commit_total_s: float | None = None
    state_store_bytes_closed: int | None = None
    # the same steps with the state rebuilt each step, on a repository of its own (if run)
    rebuilt_commit_first_s: float | None = None
    rebuilt_commit_last_s: float | None = None
    rebuilt_commit_median_s: float | None = None
    rebuilt_commit_p99_s: float | None = None
    rebuilt_commit_total_s: float | None = None
    rebuilt_store_bytes_closed: int | None = None
    # the first commits after reopening the run in a new process (if run)
    after_load: AfterLoad | None = None

    @property
    def correct(self) -> bool:
        """Whether every read-back check passed (a run that fails one raises instead)."""
        return bool(self.checks)

    @property
    def stats_text(self) -> str:
        return str(self.stats)

    def rows(self) -> list[tuple[str, str]]:
        """The report as ``(figure, value)`` rows, in the order both tables print them."""
        files = " + ".join(f"{name} {size(n)}" for name, n in self.store_files.items())
        first = min(COMMIT_WINDOW, self.steps)
        rows = [
            (
                "workload",
                f"{self.steps} steps, {self.documents} documents of {self.doc_size:,} characters, "
                f"seed {self.seed}",
            ),
            ("commits", f"{self.commits}"),
            ("final state (JSON)", size(self.final_state_bytes)),
            ("every commit as a full copy (JSON)", size(self.full_copy_bytes)),
            ("store on disk after the run", f"{size(self.store_bytes)} ({files})"),
            ("store on disk after close (WAL folded in)", size(self.store_bytes_closed)),
            ("full copies / store after close", f"{self.full_copy_bytes / self.store_bytes_closed:.1f}x"),
            (f"commit, median of steps 1-{first}", duration(self.commit_first_s)),
            (f"commit, median of the last {first} steps", duration(self.commit_last_s)),
            ("commit, median of every step", duration(self.commit_median_s)),
            ("commit, p99 of every step", duration(self.commit_p99_s)),
            (f"all {self.commits} commits", duration(self.commit_total_s)),
            (f"checkout latest, open repository (median of {REPEATS})", duration(self.checkout_s)),
            (f"checkout latest, freshly opened (median of {REPEATS})", duration(self.checkout_fresh_s)),
            (f"snapvc.open (median of {REPEATS})", duration(self.open_s)),
            (
                f"read messages[{self.read_message_index}] via snapshot, freshly opened "
                f"(median of {REPEATS})",
                duration(self.read_message_s),
            ),
            (f"list(log) of {self.commits} commits, freshly opened (first walk)", duration(self.log_cold_s)),
            (f"list(log) of {self.commits} commits, again (median of {LOG_REPEATS})", duration(self.log_s)),
            (f"repo.diff of adjacent commits, open repository (median of {self.commits - 1} pairs)",
             duration(self.diff_s)),
            (f"repo.diff of adjacent commits, freshly opened (median of {min(REPEATS, self.commits - 1)} pairs)",
             duration(self.diff_fresh_s)),
            (f"repo.history of scratchpad.{HISTORY_KEY} over {self.commits} commits ({self.history_entries} "
             f"entries), open repository (median of {LOG_REPEATS})", duration(self.history_s)),
            (f"repo.history of scratchpad.{HISTORY_KEY}, freshly opened (median of {LOG_REPEATS})",
             duration(self.history_fresh_s)),
            (f"list(log(paths=\"scratchpad.{HISTORY_KEY}\")), open repository (median of {LOG_REPEATS})",
             duration(self.log_paths_s)),
            (f"list(log(paths=\"scratchpad.{HISTORY_KEY}\")), freshly opened (median of {LOG_REPEATS})",
             duration(self.log_paths_fresh_s)),
            *self._after_load_rows(),
            *([("peak memory, tracemalloc (second run)", size(self.tracemalloc_peak_bytes))]
              if self.tracemalloc_peak_bytes else []),
            ("peak memory, RSS (process)", size(self.maxrss_bytes)),
        ]
        for name in STATS_FIELDS:
            value = getattr(self.stats, name, None)
            if value is None:
                continue
            if name.endswith("_bytes"):
                shown = size(value)
            elif isinstance(value, float):
                shown = f"{value:.2f}"
            else:
                shown = f"{value}"
            rows.append((f"repo.stats().{name}", shown))
        return rows

    def _after_load_rows(self) -> list[tuple[str, str]]:
        a = self.after_load
        if a is None:
            return []
        return [
            (f"after a load in a new process: repo.checkout of step {a.step - 1:,}", duration(a.checkout_s)),
            (f"after a load: first repo.commit (step {a.step:,})", duration(a.commit_s)),
            (f"after a load: the commit after it (step {a.step + 1:,})", duration(a.next_commit_s)),
            ("after a load in a new process: repo.state", duration(a.state_load_s)),
            (f"after a load: first state.snapshot (step {a.step:,})", duration(a.snapshot_s)),
            (f"after a load: the snapshot after it (step {a.step + 1:,})", duration(a.next_snapshot_s)),
        ]

    def figures(self) -> StoreFigures:
        """The figures every workload reports, for the summary table."""
        return StoreFigures(
            commits=self.commits,
            open_bytes=self.store_bytes,
            open_files=self.store_files,
            closed_bytes=self.store_bytes_closed,
            commit_median_s=self.commit_median_s,
            commit_p99_s=self.commit_p99_s,
            commit_total_s=self.commit_total_s,
            checkout_s=self.checkout_s,
            checkout_fresh_s=self.checkout_fresh_s,
            open_s=self.open_s,
            read_s=self.read_message_s,
            read_what=f"['messages'][{self.read_message_index}]",
            log_s=self.log_s,
            log_cold_s=self.log_cold_s,
            repeats=REPEATS,
            state_commit_median_s=self.state_commit_median_s,
            state_commit_p99_s=self.state_commit_p99_s,
            rebuilt_commit_median_s=self.rebuilt_commit_median_s,
            after_load_commit_s=self.after_load.commit_s if self.after_load else None,
            after_load_snapshot_s=self.after_load.snapshot_s if self.after_load else None,
        )

    def commit_table(self) -> Table | None:
        """Commit times of the plain-dict run, the State run and the rebuilt run, side by
        side (``None`` if only the plain-dict run was made)."""
        first = min(COMMIT_WINDOW, self.steps)
        header = ["one commit per step", f"median, steps 1-{first}", f"median, last {first} steps",
                  "median", "p99", "store after close"]  # fmt: skip
        runs = [
            ("plain dict, repo.commit(state)", self.commit_first_s, self.commit_last_s, self.commit_median_s,
             self.commit_p99_s, self.store_bytes_closed),
            ("State working copy, state.snapshot()", self.state_commit_first_s, self.state_commit_last_s,
             self.state_commit_median_s, self.state_commit_p99_s, self.state_store_bytes_closed),
            (REBUILT, self.rebuilt_commit_first_s, self.rebuilt_commit_last_s, self.rebuilt_commit_median_s,
             self.rebuilt_commit_p99_s, self.rebuilt_store_bytes_closed),
        ]  # fmt: skip
        rows = [[how, *(duration(t) for t in times), size(stored)] for how, *times, stored in runs
                if stored is not None]  # fmt: skip
        if len(rows) < 2:
            return None
        return Table(header, rows, f"Commit time over {self.steps} steps, the same changes handed over each way")

    def as_dict(self) -> dict[str, Any]:
        """The figures as plain JSON values (``stats`` as its fields and text, ``after_load``
        as its fields)."""
        out = {k: v for k, v in self.__dict__.items() if k not in ("stats", "after_load")}
        out["after_load"] = to_json(self.after_load)
        stats = {name: getattr(self.stats, name) for name in STATS_FIELDS if hasattr(self.stats, name)}
        stats["text"] = self.stats_text
        out["stats"] = stats
        out["correct"] = self.correct
        return out


# --- the run ---------------------------------------------------------------------------


def run_agent_benchmark(
    steps: int = 500,
    *,
    documents: int = 50,
    doc_size: int = 20_000,
    seed: int = 0,
    folder: str | os.PathLike[str] | None = None,
    measure_memory: bool = True,
    with_state: bool = True,
    with_rebuilt: bool = True,
    after_load: bool = True,
    growth_at: Sequence[int] = (),
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Run the agent workload for ``steps`` steps on a new repository and measure it.

    The repository lives in ``folder`` (a new temporary folder when ``None``, removed
    afterwards). ``growth_at``: steps after which to close the repository, record its size
    on disk and open it again (the next commit then encodes the whole state again).
    ``with_state``: also drive the same steps through the ``State`` working copy, on a
    second repository in ``folder``, and time its snapshots. ``with_rebuilt``: also commit
    the same steps rebuilt each step (``AgentRun.step_rebuilt``) to a third repository.
    ``after_load``: at the end, time the first commit after reopening the run's repository
    in a new process (``benchmarks.after_load``). Raises ``BenchmarkFailure`` if what the
    store gives back differs from what was committed.
    """
    if steps < 1:
        raise ValueError("steps must be at least 1")
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="snapvc-bench-") as tmp:
            return run_agent_benchmark(
                steps, documents=documents, doc_size=doc_size, seed=seed, folder=tmp,
                measure_memory=measure_memory, with_state=with_state, with_rebuilt=with_rebuilt,
                after_load=after_load, growth_at=growth_at, progress=progress,
            )  # fmt: skip
    say = progress or (lambda message: None)
    folder = Path(folder)
    path = folder / "agent.snapvc"
    if path.exists():
        raise FileExistsError(f"{path} exists: the benchmark needs a new repository")
    workload = AgentRun(seed=seed, documents=documents, doc_size=doc_size)
    checks: list[str] = []

    run = _timed_run(workload, path, steps, checks, say, set(growth_at))
    say("reading back")
    reads = _fresh_reads(path, run.state, checks)
    say("reading history")
    fresh_history = _history_reads(path, run, checks)
    log_cold_s, log_s, log = timed_log(path, BRANCH, LOG_REPEATS)
    check(len(log) == steps + 1, checks, f"the log holds {steps + 1} commits")
    check(bool(log) and log[0].id == run.last_id, checks, "the log starts at the last commit")
    with snapvc.open(str(path)) as fresh:
        stats = fresh.stats()
    through_state: list[float] = []
    state_closed = None
    if with_state:
        say("the same steps through the State working copy")
        state_path = folder / "agent-state.snapvc"
        through_state = _state_run(workload, state_path, steps, run.tree, checks, say)
        state_closed = sum(store_files(state_path).values())
    rebuilt: list[float] = []
    rebuilt_closed = None
    if with_rebuilt:
        say("the same steps with the state rebuilt each step")
        rebuilt_path = folder / "agent-rebuilt.snapvc"
        rebuilt = _rebuilt_run(workload, rebuilt_path, steps, run.tree, checks, say)
        rebuilt_closed = sum(store_files(rebuilt_path).values())
    peak = 0
    if measure_memory:
        say("measuring memory")
        peak = _traced_peak(workload, folder / "agent-memory.snapvc", steps)
    final_state_bytes = _json_size(run.state)
    loaded = None
    if after_load:  # last: it adds branches to the run's repository and steps run.state on
        say("the first commit after a load, in a new process")
        loaded = measure_after_load(path, BRANCH, workload, steps, run.state, checks)

    times = run.commit_times
    return Report(
        steps=steps,
        documents=documents,
        doc_size=doc_size,
        seed=seed,
        commits=len(log),
        store_bytes=sum(run.store_files.values()),
        store_files=run.store_files,
        store_bytes_closed=sum(store_files(path).values()),
        full_copy_bytes=run.full_copy_bytes,
        final_state_bytes=final_state_bytes,
        commit_first_s=statistics.median(times[1 : COMMIT_WINDOW + 1]),
        commit_last_s=statistics.median(times[1:][-COMMIT_WINDOW:]),
        commit_median_s=statistics.median(times[1:]),
        commit_p99_s=percentile(times[1:], 99),
        commit_total_s=sum(times),
        checkout_s=run.checkout_s,
        checkout_fresh_s=statistics.median(reads.checkout),
        open_s=statistics.median(reads.open),
        read_message_s=statistics.median(reads.read),
        read_message_index=reads.index,
        log_s=log_s,
        log_cold_s=log_cold_s,
        diff_s=run.history.diff,
        diff_fresh_s=fresh_history.diff,
        history_s=run.history.history,
        history_fresh_s=fresh_history.history,
        history_entries=run.history.entries,
        log_paths_s=run.history.log_paths,
        log_paths_fresh_s=fresh_history.log_paths,
        tracemalloc_peak_bytes=peak,
        maxrss_bytes=_maxrss(),
        stats=stats,
        checks=checks,
        growth=run.growth,
        state_commit_first_s=statistics.median(through_state[:COMMIT_WINDOW]) if through_state else None,
        state_commit_last_s=statistics.median(through_state[-COMMIT_WINDOW:]) if through_state else None,
        state_commit_median_s=statistics.median(through_state) if through_state else None,
        state_commit_p99_s=percentile(through_state, 99) if through_state else None,
        state_commit_total_s=sum(through_state) if through_state else None,
        state_store_bytes_closed=state_closed,
        rebuilt_commit_first_s=statistics.median(rebuilt[:COMMIT_WINDOW]) if rebuilt else None,
        rebuilt_commit_last_s=statistics.median(rebuilt[-COMMIT_WINDOW:]) if rebuilt else None,
        rebuilt_commit_median_s=statistics.median(rebuilt) if rebuilt else None,
        rebuilt_commit_p99_s=percentile(rebuilt, 99) if rebuilt else None,
        rebuilt_commit_total_s=sum(rebuilt) if rebuilt else None,
        rebuilt_store_bytes_closed=rebuilt_closed,
        after_load=loaded,
    )


@dataclass
class _HistoryTimes:
    """Medians, in seconds, of reading history (``_timed_history``, ``_history_reads``)."""

    diff: float
    history: float
    log_paths: float
    entries: int = 0


@dataclass
class _Run:
    state: dict[str, Any]
    last_id: Any
    tree: Any  # the last commit's tree
    commit_times: list[float]  # [0] is the initial state's commit, [i] step i's
    full_copy_bytes: int
    checkout_s: float
    store_files: dict[str, int]
    growth: dict[int, int]
    ids: list[Any]  # every commit's id, the initial state's first
    note_changes: list[int]  # the steps at which scratchpad[HISTORY_KEY] got a new value, newest first
    history: _HistoryTimes


def _timed_run(
    workload: AgentRun, path: Path, steps: int, checks: list[str], say: Callable[[str], None],
    growth_at: set[int],
) -> _Run:
    """Commit the initial state and every step's, timing each commit; then time checkouts."""
    state = workload.initial_state()
    commit_times: list[float] = []
    growth: dict[int, int] = {}
    ids = []
    repo = snapvc.open(str(path))
    try:
        for i in range(steps + 1):
            if i:
                state = workload.step(state, i)
            t0 = time.perf_counter()
            last = repo.commit(state, branch=BRANCH, message=f"step {i}", metadata={"step": i})
            commit_times.append(time.perf_counter() - t0)
            ids.append(last.id)
            if i in growth_at:  # the size after close, then on with a newly opened repository
                repo.close()
                growth[i] = sum(store_files(path).values())
                repo = snapvc.open(str(path))
            if i and (i % 50 == 0 or i == steps):
                say(f"step {i}/{steps}")
        checkout_s = median_time(REPEATS, lambda: repo.checkout(BRANCH))
        check(repo.checkout(BRANCH) == state, checks, "checkout after the run equals the state in memory")
        files = store_files(path)
        # What a checkpointer that re-stores the whole state would write: counted in a
        # replay of the same run, so that serializing the whole state does not sit
        # between commits. The replay also notes when the note read below changed.
        replay = workload.initial_state()
        full_copy = _json_size(replay)
        note_changes = [0]
        for i in range(1, steps + 1):
            before = replay["scratchpad"][HISTORY_KEY]
            replay = workload.step(replay, i)
            full_copy += _json_size(replay)
            if replay["scratchpad"][HISTORY_KEY] != before:
                note_changes.insert(0, i)
        history = _timed_history(repo, ids, note_changes, state["scratchpad"][HISTORY_KEY], checks)
    finally:
        repo.close()
    return _Run(state, last.id, last.tree, commit_times, full_copy, checkout_s, files, growth, ids, note_changes,
                history)  # fmt: skip


def _timed_history(repo: snapvc.Repository, ids: list[Any], note_changes: list[int], note: str,
                   checks: list[str]) -> _HistoryTimes:  # fmt: skip
    """Time ``repo.diff`` of every pair of adjacent commits, ``repo.history`` of one
    scratchpad note over every commit and ``repo.log(paths=...)`` of it (medians of
    ``LOG_REPEATS``), checking what they give. A step's diff must name the two messages
    it appended; the history must list exactly the steps at which the note changed
    (``note_changes``), ending at its latest value ``note``, and the log the same commits."""
    diff_times = []
    for i in range(1, len(ids)):
        t0 = time.perf_counter()
        changes = repo.diff(ids[i - 1], ids[i])
        diff_times.append(time.perf_counter() - t0)
        added = {c.path for c in changes if c.path[0] == "messages"}
        if added != {("messages", 2 * i - 2), ("messages", 2 * i - 1)}:
            raise BenchmarkFailure(f"the diff of steps {i - 1} and {i} does not name the two messages appended")
    path = f"scratchpad.{HISTORY_KEY}"
    times = []
    for _ in range(LOG_REPEATS):
        t0 = time.perf_counter()
        entries = list(repo.history(BRANCH, path))
        times.append(time.perf_counter() - t0)
    steps = [ids.index(e.commit.id) for e in entries]
    check(steps == note_changes and entries[0].value == note, checks,
          f"repo.history of {path} lists the {len(steps)} steps that changed it")  # fmt: skip
    log_times = []
    for _ in range(LOG_REPEATS):
        t0 = time.perf_counter()
        logged = list(repo.log(BRANCH, paths=path))
        log_times.append(time.perf_counter() - t0)
    check([c.id for c in logged] == [e.commit.id for e in entries], checks,
          f"repo.log(paths={path!r}) lists the commits repo.history does")  # fmt: skip
    return _HistoryTimes(statistics.median(diff_times), statistics.median(times), statistics.median(log_times),
                         len(entries))  # fmt: skip


def _history_reads(path: Path, run: _Run, checks: list[str]) -> _HistoryTimes:
    """The reads of ``_timed_history``, each first on a freshly opened repository: the
    median of ``REPEATS`` diffs (a new ``snapvc.open`` for each) and of ``LOG_REPEATS``
    histories and logs (a new ``snapvc.open`` for each)."""
    ids = run.ids
    diff_times = []
    for i in range(1, len(ids))[:: max(1, (len(ids) - 1) // REPEATS)][:REPEATS]:
        with snapvc.open(str(path)) as repo:
            t0 = time.perf_counter()
            repo.diff(ids[i - 1], ids[i])
            diff_times.append(time.perf_counter() - t0)
    history_times, log_times = [], []
    for _ in range(LOG_REPEATS):
        with snapvc.open(str(path)) as repo:
            t0 = time.perf_counter()
            entries = list(repo.history(BRANCH, f"scratchpad.{HISTORY_KEY}"))
            history_times.append(time.perf_counter() - t0)
        with snapvc.open(str(path)) as repo:
            t0 = time.perf_counter()
            logged = list(repo.log(BRANCH, paths=f"scratchpad.{HISTORY_KEY}"))
            log_times.append(time.perf_counter() - t0)
    check([c.id for c in logged] == [e.commit.id for e in entries] and len(entries) == len(run.note_changes), checks,
          "repo.history and repo.log(paths=...) on a freshly opened repository list the same commits")  # fmt: skip
    return _HistoryTimes(statistics.median(diff_times), statistics.median(history_times), statistics.median(log_times),
                         len(entries))  # fmt: skip


def _state_run(
    workload: AgentRun, path: Path, steps: int, tree: snapvc.ObjectId, checks: list[str],
    say: Callable[[str], None],
) -> list[float]:  # fmt: skip
    """Drive the same steps through the ``State`` working copy on a repository of its own
    and time each ``state.snapshot`` (step 1's first). The step changes a plain dict, as in
    the plain run; the changes then go to the working copy the way an agent makes them
    there: new messages with ``state.extend`` (the working copy keeps a copy and only the
    new elements are dirty), changed notes, documents and counters with ``state.set``
    (tuple paths: keys may hold dots). The last snapshot must be the plain run's tree."""
    plain_state = workload.initial_state()

    def change(state: snapvc.State, i: int) -> None:
        known = len(plain_state["messages"])
        before = {part: dict(plain_state[part]) for part in ("scratchpad", "documents")}
        workload.step(plain_state, i)
        state.extend("messages", plain_state["messages"][known:])
        for part, old in before.items():
            for key, value in plain_state[part].items():
                if old.get(key) is not value:
                    state.set((part, key), value)
        for key, value in plain_state["counters"].items():
            state.set(("counters", key), value)

    return timed_snapshots(path, BRANCH, workload.initial_state(), change, steps, tree, checks, say)


def _rebuilt_run(
    workload: AgentRun, path: Path, steps: int, tree: snapvc.ObjectId, checks: list[str],
    say: Callable[[str], None],
) -> list[float]:  # fmt: skip
    """Commit the same steps with the state rebuilt at each one (``AgentRun.step_rebuilt``:
    a new state dict, a new message list holding the old messages and two new ones, new
    scratchpad, library and counters dicts) to a
    repository of its own, and time each commit (step 1's first). The last commit must
    have ``tree``, the in-place run's last tree."""
    state = workload.initial_state()
    times = []
    with snapvc.open(str(path)) as repo:
        last = repo.commit(state, branch=BRANCH, message="step 0", metadata={"step": 0})
        for i in range(1, steps + 1):
            state = workload.step_rebuilt(state, i)
            t0 = time.perf_counter()
            last = repo.commit(state, branch=BRANCH, message=f"step {i}", metadata={"step": i})
            times.append(time.perf_counter() - t0)
            if i % max(1, steps // 5) == 0:
                say(f"  rebuilt each step: commit {i:,}/{steps:,}")
    check(last.tree == tree, checks, "the state rebuilt each step ends at the same tree as the in-place commits")
    return times


@dataclass
class _Reads:
    index: int
    open: list[float] = field(default_factory=list)
    checkout: list[float] = field(default_factory=list)
    read: list[float] = field(default_factory=list)


def _fresh_reads(path: Path, state: dict[str, Any], checks: list[str]) -> _Reads:
    """Time open, checkout and a one-message lazy read, each on a newly opened repository."""
    reads = _Reads(index=len(state["messages"]) // 2)
    k = reads.index
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        repo = snapvc.open(str(path))
        reads.open.append(time.perf_counter() - t0)
        try:
            t0 = time.perf_counter()
            restored = repo.checkout(BRANCH)
            reads.checkout.append(time.perf_counter() - t0)
        finally:
            repo.close()
        repo = snapvc.open(str(path))
        try:
            t0 = time.perf_counter()
            message = plain(repo.snapshot(BRANCH)["messages"][k])
            reads.read.append(time.perf_counter() - t0)
        finally:
            repo.close()
    check(restored == state, checks, "checkout on a freshly opened repository equals the state in memory")
    check(message == state["messages"][k], checks, f"snapshot['messages'][{k}] equals the message in memory")
    return reads


def _traced_peak(workload: AgentRun, path: Path, steps: int) -> int:
    """The tracemalloc peak of building the state, committing every step and checking out."""
    gc.collect()
    tracemalloc.start()
    try:
        state = workload.initial_state()
        repo = snapvc.open(str(path))
        try:
            repo.commit(state, branch=BRANCH, message="step 0", metadata={"step": 0})
            for i in range(1, steps + 1):
                state = workload.step(state, i)
                repo.commit(state, branch=BRANCH, message=f"step {i}", metadata={"step": i})
            restored = repo.checkout(BRANCH)
        finally:
            repo.close()
        if restored != state:
            raise BenchmarkFailure("checkout after the memory run differs from the state in memory")
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _json_size(state: Any) -> int:
    """Bytes of the state as compact UTF-8 JSON (orjson: what ``json.dumps`` with compact
    separators and ``ensure_ascii=False`` writes, ten times faster)."""
    return len(orjson.dumps(state))


def _maxrss() -> int:
    """This process's peak RSS: ``VmHWM`` where there is one (Linux), else ``ru_maxrss``."""
    peak = process_memory("VmHWM")
    if peak:
        return peak
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024


# --- reporting -------------------------------------------------------------------------


def report_blocks(report: Report) -> list[Any]:
    """The report as a table of figures and, for the Markdown page, ``repo.stats()`` and
    what the figures mean."""
    commits = report.commit_table()
    return [
        key_value_table(report.rows()),
        "\n".join(["`repo.stats()`:", "", "```text", report.stats_text, "```"]),
        *([commits, _STATE_NOTE] if commits is not None else []),
        "\n".join([
            "\"Every commit as a full copy\" is the uncompressed JSON of the whole state summed over",
            "all commits: what a checkpointer that re-stores the whole state at every step writes.",
            "Times are medians of wall-clock intervals. Between two commits the run does an agent",
            "step's work, as a real loop does, so CPU caches are not warm for the commit; commits",
            "timed back to back come out faster. \"Freshly opened\" is a new `snapvc.open`",
            "(snapvc's caches are cold; the operating system's file cache is warm). The tracemalloc",
            "peak is measured in a second, identical run, so its overhead does not touch the times;",
            "it includes the workload's own state.",
        ]),
    ]  # fmt: skip


_STATE_NOTE = "\n".join([
    "The State row drives the same steps through `repo.state(\"main\")` on a repository of its",
    "own: each step's two messages with `state.extend(\"messages\", ...)`, the changed notes,",
    "document and counters with `state.set((\"scratchpad\", key), value)` and the like, then",
    "`state.snapshot(...)`; its last snapshot has the same tree as the plain run's last commit.",
    "`repo.commit(state)` of a plain dict checks every container of the state for in-place",
    "changes (about 0.1 µs each, see `docs/design.md`); a snapshot checks only the paths the",
    "working copy saw change. The rebuilt row commits the same steps made the way LangGraph's",
    "reducers and immutable-update loops make them (`AgentRun.step_rebuilt`): each step a new",
    "state `{**state, \"messages\": messages + [two new], ...}`, a copied scratchpad with three",
    "notes replaced, a copied library (one document replaced every 10th step), new counters;",
    "the old messages, notes and documents are the same objects as before. It too ends at the",
    "same tree.",
    "\"After a load\" rows are measured in a new process each, on the run's repository once it",
    "is closed: `repo.checkout(\"main\")` (or `repo.state(\"main\")`), one more step, and its",
    "commit (or snapshot), then one step more (`benchmarks/after_load.py`).",
])  # fmt: skip


# --- the workload, for ``benchmarks.suite`` ---------------------------------------------

NAME = "agent-run"
TITLE = "Agent run"


RESULTS = {"snapvc": Report, "peers": peer_bench.PeersReport}


def parts(scale: Scale, peers: bool) -> list[str]:
    return ["snapvc", "peers"] if peers else ["snapvc"]


def run(part: str, scale: Scale, seed: int, say: Callable[[str], None]) -> Any:
    size_args = {"documents": scale.documents, "doc_size": scale.doc_size, "seed": seed, "progress": say}
    if part == "snapvc":
        return run_agent_benchmark(scale.agent_steps, **size_args)
    return peer_bench.run_peers(scale.agent_steps, **size_args)


def section(results: dict[str, PartResult], scale: Scale, seed: int) -> Section:
    report: Report = results["snapvc"].value
    body = report_blocks(report)
    if "peers" in results:
        body += peer_bench.peers_blocks(report, results["peers"].value)
    checks = list(report.checks) + (results["peers"].value.checks if "peers" in results else [])
    return Section(
        NAME,
        f"{TITLE}: {report.steps} steps",
        "A simulated agent (`benchmarks/workload.py`) keeps a message history, a scratchpad and "
        f"a library of {report.documents} documents of {report.doc_size:,} characters. Each step "
        "appends two messages (an assistant message with a tool call, and the tool's result), "
        "rewrites 3 scratchpad notes, and every 10th step replaces 300 characters in the middle "
        "of one document; the state is committed after every step to the embedded default store "
        "(one SQLite file). Then it reads history: `repo.diff` of every pair of adjacent commits, "
        f"`repo.history(\"main\", \"scratchpad.{HISTORY_KEY}\")` over every commit and `repo.log` with "
        "`paths=` of the same note, each checked against the run. The run checks that what it reads "
        "back equals what it committed.",
        body,
        checks=checks,
        summary=[summary_row(f"agent run, {report.steps} steps", report.figures(), results["snapvc"])],
    )
