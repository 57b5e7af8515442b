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
import json
import os
import platform
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import tracemalloc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import snapvc
from benchmarks.workload import AgentRun

__all__ = [
    "BenchmarkFailure",
    "Report",
    "run_agent_benchmark",
    "environment",
    "format_table",
    "format_markdown",
    "DOCS_PATH",
]

DOCS_PATH = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
BRANCH = "main"
# Commit times are reported as the median of the first and of the last this many steps.
COMMIT_WINDOW = 50
# Checkout, open and one-message reads are reported as the median of this many runs.
REPEATS = 20
LOG_REPEATS = 5
STATS_FIELDS = ("objects", "stored_bytes", "logical_bytes", "dedup_ratio")


class BenchmarkFailure(AssertionError):
    """The store gave back something other than what was committed: no figures are reported."""


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
    commit_total_s: float
    checkout_s: float
    checkout_fresh_s: float
    open_s: float
    read_message_s: float
    read_message_index: int
    log_s: float
    log_cold_s: float
    tracemalloc_peak_bytes: int
    maxrss_bytes: int
    stats: Any
    checks: list[str] = field(default_factory=list)

    @property
    def correct(self) -> bool:
        """Whether every read-back check passed (a run that fails one raises instead)."""
        return bool(self.checks)

    @property
    def stats_text(self) -> str:
        return str(self.stats)

    def rows(self) -> list[tuple[str, str]]:
        """The report as ``(figure, value)`` rows, in the order both tables print them."""
        files = " + ".join(f"{name} {_size(n)}" for name, n in self.store_files.items())
        first = min(COMMIT_WINDOW, self.steps)
        rows = [
            (
                "workload",
                f"{self.steps} steps, {self.documents} documents of {self.doc_size:,} characters, "
                f"seed {self.seed}",
            ),
            ("commits", f"{self.commits}"),
            ("final state (JSON)", _size(self.final_state_bytes)),
            ("every commit as a full copy (JSON)", _size(self.full_copy_bytes)),
            ("store on disk after the run", f"{_size(self.store_bytes)} ({files})"),
            ("store on disk after close (WAL folded in)", _size(self.store_bytes_closed)),
            ("full copies / store after close", f"{self.full_copy_bytes / self.store_bytes_closed:.1f}x"),
            (f"commit, median of steps 1-{first}", _duration(self.commit_first_s)),
            (f"commit, median of the last {first} steps", _duration(self.commit_last_s)),
            (f"all {self.commits} commits", _duration(self.commit_total_s)),
            (f"checkout latest, open repository (median of {REPEATS})", _duration(self.checkout_s)),
            (f"checkout latest, freshly opened (median of {REPEATS})", _duration(self.checkout_fresh_s)),
            (f"snapvc.open (median of {REPEATS})", _duration(self.open_s)),
            (
                f"read messages[{self.read_message_index}] via snapshot, freshly opened "
                f"(median of {REPEATS})",
                _duration(self.read_message_s),
            ),
            (f"list(log) of {self.commits} commits, freshly opened (first walk)", _duration(self.log_cold_s)),
            (f"list(log) of {self.commits} commits, again (median of {LOG_REPEATS})", _duration(self.log_s)),
            ("peak memory, tracemalloc (second run)", _size(self.tracemalloc_peak_bytes)),
            ("peak memory, ru_maxrss (process)", _size(self.maxrss_bytes)),
        ]
        for name in STATS_FIELDS:
            value = getattr(self.stats, name, None)
            if value is None:
                continue
            if name.endswith("_bytes"):
                shown = _size(value)
            elif isinstance(value, float):
                shown = f"{value:.2f}"
            else:
                shown = f"{value}"
            rows.append((f"repo.stats().{name}", shown))
        return rows

    def as_dict(self) -> dict[str, Any]:
        """The figures as plain JSON values (``stats`` as its fields and text)."""
        out = {k: v for k, v in self.__dict__.items() if k != "stats"}
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
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Run the agent workload for ``steps`` steps on a new repository and measure it.

    The repository lives in ``folder`` (a new temporary folder when ``None``, removed
    afterwards). Raises ``BenchmarkFailure`` if what the store gives back differs from
    what was committed.
    """
    if steps < 1:
        raise ValueError("steps must be at least 1")
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="snapvc-bench-") as tmp:
            return run_agent_benchmark(
                steps, documents=documents, doc_size=doc_size, seed=seed, folder=tmp,
                measure_memory=measure_memory, progress=progress,
            )  # fmt: skip
    say = progress or (lambda message: None)
    folder = Path(folder)
    path = folder / "agent.snapvc"
    if path.exists():
        raise FileExistsError(f"{path} exists: the benchmark needs a new repository")
    workload = AgentRun(seed=seed, documents=documents, doc_size=doc_size)
    checks: list[str] = []

    run = _timed_run(workload, path, steps, checks, say)
    say("reading back")
    reads = _fresh_reads(path, run.state, checks)
    fresh = snapvc.open(str(path))
    try:
        t0 = time.perf_counter()
        list(fresh.log(BRANCH))
        log_cold_s = time.perf_counter() - t0
        log_s = _median(LOG_REPEATS, lambda: list(fresh.log(BRANCH)))
        log = list(fresh.log(BRANCH))
        _check(len(log) == steps + 1, checks, f"the log holds {steps + 1} commits")
        _check(bool(log) and log[0].id == run.last_id, checks, "the log starts at the last commit")
        stats = fresh.stats()
    finally:
        fresh.close()
    peak = 0
    if measure_memory:
        say("measuring memory")
        peak = _traced_peak(workload, folder / "agent-memory.snapvc", steps)

    times = run.commit_times
    return Report(
        steps=steps,
        documents=documents,
        doc_size=doc_size,
        seed=seed,
        commits=len(log),
        store_bytes=sum(run.store_files.values()),
        store_files=run.store_files,
        store_bytes_closed=sum(_store_files(path).values()),
        full_copy_bytes=run.full_copy_bytes,
        final_state_bytes=_json_size(run.state),
        commit_first_s=statistics.median(times[1 : COMMIT_WINDOW + 1]),
        commit_last_s=statistics.median(times[1:][-COMMIT_WINDOW:]),
        commit_total_s=sum(times),
        checkout_s=run.checkout_s,
        checkout_fresh_s=statistics.median(reads.checkout),
        open_s=statistics.median(reads.open),
        read_message_s=statistics.median(reads.read),
        read_message_index=reads.index,
        log_s=log_s,
        log_cold_s=log_cold_s,
        tracemalloc_peak_bytes=peak,
        maxrss_bytes=_maxrss(),
        stats=stats,
        checks=checks,
    )


@dataclass
class _Run:
    state: dict[str, Any]
    last_id: Any
    commit_times: list[float]  # [0] is the initial state's commit, [i] step i's
    full_copy_bytes: int
    checkout_s: float
    store_files: dict[str, int]


def _timed_run(
    workload: AgentRun, path: Path, steps: int, checks: list[str], say: Callable[[str], None]
) -> _Run:
    """Commit the initial state and every step's, timing each commit; then time checkouts."""
    state = workload.initial_state()
    commit_times: list[float] = []
    repo = snapvc.open(str(path))
    try:
        for i in range(steps + 1):
            if i:
                state = workload.step(state, i)
            t0 = time.perf_counter()
            last = repo.commit(state, branch=BRANCH, message=f"step {i}", metadata={"step": i})
            commit_times.append(time.perf_counter() - t0)
            if i and (i % 50 == 0 or i == steps):
                say(f"step {i}/{steps}")
        checkout_s = _median(REPEATS, lambda: repo.checkout(BRANCH))
        _check(repo.checkout(BRANCH) == state, checks, "checkout after the run equals the state in memory")
        store_files = _store_files(path)
    finally:
        repo.close()
    # What a checkpointer that re-stores the whole state would write: counted in a replay
    # of the same run, so that serializing the whole state does not sit between commits.
    replay = workload.initial_state()
    full_copy = _json_size(replay)
    for i in range(1, steps + 1):
        replay = workload.step(replay, i)
        full_copy += _json_size(replay)
    return _Run(state, last.id, commit_times, full_copy, checkout_s, store_files)


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
            message = _plain(repo.snapshot(BRANCH)["messages"][k])
            reads.read.append(time.perf_counter() - t0)
        finally:
            repo.close()
    _check(restored == state, checks, "checkout on a freshly opened repository equals the state in memory")
    _check(message == state["messages"][k], checks, f"snapshot['messages'][{k}] equals the message in memory")
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


def _check(ok: bool, checks: list[str], what: str) -> None:
    if not ok:
        raise BenchmarkFailure(f"check failed: {what}")
    checks.append(what)


def _median(repeats: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _store_files(path: Path) -> dict[str, int]:
    """Sizes of the repository file and of its ``-wal`` and ``-shm`` files that exist."""
    out = {}
    for suffix in ("", "-wal", "-shm"):
        p = Path(f"{path}{suffix}")
        if p.exists():
            out[suffix.lstrip("-") or "file"] = p.stat().st_size
    return out


def _json_size(state: Any) -> int:
    return len(json.dumps(state, ensure_ascii=False, separators=(",", ":")).encode())


def _plain(value: Any) -> Any:
    """A lazily loaded value as plain dicts and lists (forces every part of it to load)."""
    if isinstance(value, (str, bytes, bytearray)):
        return value
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _maxrss() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024


# --- reporting -------------------------------------------------------------------------


def environment() -> dict[str, str]:
    """The machine and library versions a report was measured with."""
    return {
        "platform": platform.platform(),
        "cpu": _cpu_name(),
        "cpus": str(os.cpu_count()),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "sqlite": sqlite3.sqlite_version,
        "snapvc": _snapvc_version(),
        "blake3": _version("blake3"),
        "zstandard": _version("zstandard"),
        "msgpack": _version("msgpack"),
    }


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        module = __import__(distribution)
        return str(getattr(module, "__version__", getattr(module, "version", "unknown")))


def _snapvc_version() -> str:
    version = getattr(snapvc, "__version__", None)
    if version is None:
        try:
            version = metadata.version("snapvc")
        except metadata.PackageNotFoundError:
            version = "unknown"
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(snapvc.__file__).resolve().parent,
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        rev = ""
    return f"{version} ({rev})" if rev else str(version)


def format_table(report: Report) -> str:
    """The report as an aligned plain-text table, with ``repo.stats()`` as it prints."""
    rows = report.rows()
    width = max(len(name) for name, _ in rows)
    lines = [f"{name.ljust(width)}  {value}" for name, value in rows]
    lines.append("")
    lines.append("repo.stats():")
    lines.extend("  " + line for line in report.stats_text.splitlines())
    lines.append("")
    lines.append("checks passed: " + "; ".join(report.checks))
    return "\n".join(lines)


def format_markdown(
    report: Report, env: Mapping[str, str], command: str, peers: Sequence[str] | None = None
) -> str:
    """The report as the Markdown page ``docs/benchmarks.md``; ``peers``: lines of a "Peers" section."""
    out = [
        "# Benchmarks",
        "",
        "## Agent run",
        "",
        textwrap.fill(
            "A simulated agent (`benchmarks/workload.py`) keeps a message history, a scratchpad and "
            f"a library of {report.documents} documents of {report.doc_size:,} characters. Each step "
            "appends two messages (an assistant message with a tool call, and the tool's result), "
            "rewrites 3 scratchpad notes, and every 10th step replaces 300 characters in the middle "
            "of one document; the state is committed after every step to the embedded default store "
            "(one SQLite file). The run checks that what it reads back equals what it committed.",
            width=88,
        ),
        "",
        "| figure | value |",
        "|---|---|",
    ]
    out.extend(f"| {name} | {value} |" for name, value in report.rows())
    out += [
        "",
        "`repo.stats()`:",
        "",
        "```text",
        report.stats_text,
        "```",
        "",
        "\"Every commit as a full copy\" is the uncompressed JSON of the whole state summed over",
        "all commits: what a checkpointer that re-stores the whole state at every step writes.",
        "Times are medians of wall-clock intervals. Between two commits the run does an agent",
        "step's work, as a real loop does, so CPU caches are not warm for the commit; commits",
        "timed back to back come out faster. \"Freshly opened\" is a new `snapvc.open`",
        "(snapvc's caches are cold; the operating system's file cache is warm). The tracemalloc",
        "peak is measured in a second, identical run, so its overhead does not touch the times;",
        "it includes the workload's own state.",
        "",
        *(peers or ()),
        "## Machine",
        "",
        "| | |",
        "|---|---|",
    ]
    out.extend(f"| {name} | {value} |" for name, value in env.items())
    out += [
        "",
        "## Command",
        "",
        "```sh",
        command,
        "```",
        "",
    ]
    return "\n".join(out)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _duration(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"

