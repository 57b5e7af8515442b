"""What every workload shares: scales, timing, sizes, the figures of a store, tables.

A workload measures snapvc through ``measure_store`` (the same figures for every
workload: stored bytes while open and after close, commit median and p99, checkout,
a one-key lazy read, the log) and describes its results as a ``Section`` of ``Table``
rows, which ``benchmarks.suite`` prints and writes to ``docs/benchmarks.md``.

A part's figures travel from the process that measured them as JSON: ``to_json`` turns
dataclasses, lists, tuples and dicts of numbers and strings into JSON values, and
``from_json`` rebuilds them from the type they were declared with (a dataclass's field
types say what each field holds).
"""

from __future__ import annotations

import math
import os
import platform
import sqlite3
import statistics
import subprocess
import textwrap
import time
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

import snapvc

__all__ = [
    "BenchmarkFailure",
    "Scale",
    "FULL",
    "QUICK",
    "StoreFigures",
    "Table",
    "Section",
    "PartResult",
    "summary_row",
    "key_value_table",
    "commit_table",
    "to_json",
    "from_json",
    "measure_store",
    "timed_commits",
    "timed_snapshots",
    "check",
    "median_time",
    "timed_log",
    "percentile",
    "store_files",
    "tree_size",
    "size",
    "duration",
    "rate",
    "ratio",
    "environment",
    "plain",
]


class BenchmarkFailure(AssertionError):
    """The store gave back something other than what was committed: no figures are reported."""


# --- scales ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Scale:
    """How big each workload is. ``FULL`` is what ``docs/benchmarks.md`` reports;
    ``QUICK`` is a smoke run of every code path in seconds."""

    name: str
    # agent run (benchmarks.workload.AgentRun)
    agent_steps: int = 500
    documents: int = 50
    doc_size: int = 20_000
    # growth curve: stored bytes after this many steps; peers stop once the next point
    # is predicted to take them past their time budget
    growth_steps: tuple[int, ...] = (100, 250, 500, 1000, 2000)
    peer_budget_s: float = 90.0
    # large state
    large_documents: int = 2000
    large_doc_size: int = 100_000
    large_blob: int = 20_000_000
    large_commits: int = 100
    # wide map
    wide_keys: int = 100_000
    wide_changes: int = 10
    wide_commits: int = 100
    diff_budget_s: float = 10.0
    # long list
    list_length: int = 1_000_000
    list_append: int = 10
    list_commits: int = 100
    # deep history
    history_commits: int = 10_000
    history_back: int = 9000
    # LangGraph ReAct agent: turns on one thread
    react_turns: int = 300
    # branching
    fork_at: int = 100
    branches: int = 20
    branch_steps: int = 50
    # every step, side by side: the run lengths measured (peers at the first)
    per_step_steps: tuple[int, ...] = (500, 2000)
    per_step_fresh: int = 9  # fresh processes per figure
    # repeats of checkouts, reads and log walks
    repeats: int = 5


FULL = Scale("full")
QUICK = replace(
    FULL,
    name="quick",
    agent_steps=20, documents=5, doc_size=2_000,
    growth_steps=(5, 10, 20), peer_budget_s=20.0,
    large_documents=20, large_doc_size=5_000, large_blob=200_000, large_commits=5,
    wide_keys=2_000, wide_commits=5, diff_budget_s=5.0,
    list_length=20_000, list_commits=5,
    history_commits=200, history_back=150,
    fork_at=5, branches=3, branch_steps=4,
    react_turns=6,
    per_step_steps=(20, 40), per_step_fresh=2,
    repeats=2,
)  # fmt: skip


# --- timing and checks -----------------------------------------------------------------


def check(ok: bool, checks: list[str], what: str) -> None:
    """Record ``what`` as checked, or raise ``BenchmarkFailure`` if it does not hold."""
    if not ok:
        raise BenchmarkFailure(f"check failed: {what}")
    checks.append(what)


def median_time(repeats: int, fn: Callable[[], object]) -> float:
    """The median wall-clock time of ``repeats`` calls of ``fn``."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def timed_log(path: Path, branch: str, repeats: int) -> tuple[float, float, list[snapvc.Commit]]:
    """``list(repo.log(branch))`` on a freshly opened repository: the first walk's time,
    the median of ``repeats`` more, and the commits."""
    fresh = snapvc.open(str(path))
    try:
        t0 = time.perf_counter()
        log = list(fresh.log(branch))
        cold = time.perf_counter() - t0
        return cold, median_time(repeats, lambda: list(fresh.log(branch))), log
    finally:
        fresh.close()


def process_memory(field: str) -> int:
    """This process's ``VmRSS`` (resident now) or ``VmHWM`` (its peak since it started),
    in bytes, from ``/proc/self/status``; 0 where there is none (not Linux). Not
    ``ru_maxrss`` for the peak: on Linux that starts at the peak of the process this one
    was forked from."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith(field + ":"))
    except (OSError, StopIteration):
        return 0


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank): the 99th of 100 values is the 99th smallest."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def store_files(path: Path) -> dict[str, int]:
    """Sizes of the repository file and of its ``-wal`` and ``-shm`` files that exist."""
    out = {}
    for suffix in ("", "-wal", "-shm"):
        p = Path(f"{path}{suffix}")
        if p.exists():
            out[suffix.lstrip("-") or "file"] = p.stat().st_size
    return out


def tree_size(folder: Path) -> int:
    """Bytes of every file under ``folder``."""
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            total += os.path.getsize(os.path.join(root, name))
    return total


def plain(value: Any) -> Any:
    """A lazily loaded value as plain dicts and lists (forces every part of it to load)."""
    if isinstance(value, (str, bytes, bytearray)):
        return value
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, tuple):
        return [plain(v) for v in value]
    return value


def timed_commits(
    repo: snapvc.Repository,
    branch: str,
    state: dict[str, Any],
    change: Callable[[int], object],
    count: int,
    say: Callable[[str], None],
) -> tuple[list[float], list[Any]]:
    """Commit ``state``, then ``count`` times call ``change(j)`` (which changes ``state``
    in place) and commit it. Returns every commit's time (the first: all data new) and
    the commits."""
    times, commits = [], []
    for j in range(count + 1):
        if j:
            change(j)
        t0 = time.perf_counter()
        commits.append(repo.commit(state, branch=branch, message=f"commit {j}", metadata={"step": j}))
        times.append(time.perf_counter() - t0)
        if j == 0 or j % max(1, count // 5) == 0:
            say(f"  {branch}: commit {j:,}/{count:,}")
    return times, commits


def timed_snapshots(
    path: Path,
    branch: str,
    initial: dict[str, Any],
    change: Callable[[snapvc.State, int], object],
    count: int,
    tree: snapvc.ObjectId,
    checks: list[str],
    say: Callable[[str], None],
) -> list[float]:
    """The same changes as ``timed_commits``, made through the ``State`` working copy on a
    new repository at ``path``: commit ``initial`` on ``branch``, load it with
    ``repo.state(branch)`` and snapshot once (the first snapshot after loading encodes the
    loaded state once), then ``count`` times call ``change(state, j)`` (which changes the
    working copy) and time ``state.snapshot``. The last snapshot must have ``tree``, the
    plain-dict commits' last tree. Returns each snapshot's time."""
    times = []
    repo = snapvc.open(str(path))
    try:
        repo.commit(initial, branch=branch, message="commit 0", metadata={"step": 0})
        state = repo.state(branch)
        state.snapshot(message="loaded")
        for j in range(1, count + 1):
            change(state, j)
            t0 = time.perf_counter()
            state.snapshot(message=f"commit {j}", metadata={"step": j})
            times.append(time.perf_counter() - t0)
            if j % max(1, count // 5) == 0:
                say(f"  {branch}, through State: snapshot {j:,}/{count:,}")
        check(repo.get_commit(repo.resolve(branch)).tree == tree, checks,
              "the State working copy ends at the same tree as the plain-dict commits")  # fmt: skip
    finally:
        repo.close()
    return times


# --- the figures every workload reports for snapvc -------------------------------------


@dataclass
class StoreFigures:
    """One snapvc repository after a workload. Sizes are bytes, times seconds."""

    commits: int
    open_bytes: int
    open_files: dict[str, int]
    closed_bytes: int
    commit_median_s: float
    commit_p99_s: float
    commit_total_s: float
    checkout_s: float  # on the open repository
    checkout_fresh_s: float  # on a newly opened one
    open_s: float
    read_s: float  # one key through a lazy snapshot, newly opened repository
    read_what: str
    log_s: float
    log_cold_s: float
    repeats: int
    # the same changes committed through the State working copy, where a workload does
    # (the summary table shows them; each section has its own table of them)
    state_commit_median_s: float | None = None
    state_commit_p99_s: float | None = None
    # the same changes with the state rebuilt each step (new containers, same elements)
    rebuilt_commit_median_s: float | None = None
    # the first commit after loading the latest state in a new process, as a plain dict
    # (repo.checkout, then repo.commit) and through the State working copy (repo.state,
    # then state.snapshot), where a workload measures it
    after_load_commit_s: float | None = None
    after_load_snapshot_s: float | None = None

    def rows(self) -> list[tuple[str, str]]:
        files = " + ".join(f"{name} {size(n)}" for name, n in self.open_files.items())
        n = self.repeats
        return [
            ("commits", f"{self.commits:,}"),
            ("store on disk, open", f"{size(self.open_bytes)} ({files})"),
            ("store on disk after close", size(self.closed_bytes)),
            ("commit, median", duration(self.commit_median_s)),
            ("commit, p99", duration(self.commit_p99_s)),
            ("all commits", duration(self.commit_total_s)),
            (f"checkout latest, open repository (median of {n})", duration(self.checkout_s)),
            (f"checkout latest, freshly opened (median of {n})", duration(self.checkout_fresh_s)),
            (f"snapvc.open (median of {n})", duration(self.open_s)),
            (f"read {self.read_what} via snapshot, freshly opened (median of {n})", duration(self.read_s)),
            (f"list(log) of {self.commits:,} commits, freshly opened", duration(self.log_cold_s)),
            (f"list(log), again (median of {n})", duration(self.log_s)),
        ]


def measure_store(
    repo: snapvc.Repository,
    path: Path,
    branch: str,
    expected: Mapping[str, Any],
    read: tuple[str | int, ...],
    commit_times: Sequence[float],
    checks: list[str],
    repeats: int,
    *,
    commits: int | None = None,
) -> StoreFigures:
    """Measure and check the open ``repo`` at ``path`` after a workload, then close it.

    The latest commit on ``branch`` must check out equal to ``expected`` (on the open
    repository and on a newly opened one), and ``read`` (a path of keys and indices)
    read lazily through ``repo.snapshot`` must equal the value at that path.
    """
    open_files = store_files(path)
    try:
        checkout_s = median_time(repeats, lambda: repo.checkout(branch))
        check(repo.checkout(branch) == expected, checks, f"{branch}: checkout equals the state in memory")
        logged = sum(1 for _ in repo.log(branch))
    finally:
        repo.close()
    check(commits is None or logged == commits, checks, f"{branch}: the log holds {commits} commits")
    closed = sum(store_files(path).values())
    want = expected
    for part in read:
        want = want[part]
    opens, checkouts, reads = [], [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fresh = snapvc.open(str(path))
        opens.append(time.perf_counter() - t0)
        try:
            t0 = time.perf_counter()
            restored = fresh.checkout(branch)
            checkouts.append(time.perf_counter() - t0)
        finally:
            fresh.close()
        fresh = snapvc.open(str(path))
        try:
            t0 = time.perf_counter()
            got: Any = fresh.snapshot(branch)
            for part in read:
                got = got[part]
            got = plain(got)
            reads.append(time.perf_counter() - t0)
        finally:
            fresh.close()
    check(restored == expected, checks, f"{branch}: checkout on a freshly opened repository equals the state")
    what = "".join(f"[{p!r}]" for p in read)
    check(got == want, checks, f"{branch}: snapshot{what} equals the value in memory")
    log_cold_s, log_s, _ = timed_log(path, branch, repeats)
    return StoreFigures(
        commits=logged,
        open_bytes=sum(open_files.values()),
        open_files=open_files,
        closed_bytes=closed,
        commit_median_s=statistics.median(commit_times),
        commit_p99_s=percentile(commit_times, 99),
        commit_total_s=sum(commit_times),
        checkout_s=checkout_s,
        checkout_fresh_s=statistics.median(checkouts),
        open_s=statistics.median(opens),
        read_s=statistics.median(reads),
        read_what=what,
        log_s=log_s,
        log_cold_s=log_cold_s,
        repeats=repeats,
    )


@dataclass
class PartResult:
    """What one part of a workload returned, and the peak RSS of the process that ran it."""

    value: Any
    maxrss_bytes: int
    wall_s: float


def summary_row(label: str, figures: StoreFigures, part: PartResult) -> tuple[str, StoreFigures, int]:
    return (label, figures, part.maxrss_bytes)


# --- formatting ------------------------------------------------------------------------


def size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def duration(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def rate(bytes_per_second: float) -> str:
    """A throughput in MB/s (10^6 bytes per second)."""
    return f"{bytes_per_second / 1e6:,.0f} MB/s"


def ratio(ours: float | None, theirs: float | None) -> str:
    if not ours or not theirs:
        return "-"
    return f"{ours / theirs:.3g}x"


@dataclass
class Table:
    """Rows of strings under a header; ``caption`` is printed above it."""

    header: list[str]
    rows: list[list[str]]
    caption: str = ""

    def text(self) -> str:
        widths = [max(len(row[c]) for row in [self.header, *self.rows]) for c in range(len(self.header))]

        def fmt(row: list[str]) -> str:
            return "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()

        lines = [self.caption] if self.caption else []
        lines += [fmt(self.header), fmt(["-" * w for w in widths])]
        lines.extend(fmt(row) for row in self.rows)
        return "\n".join(lines)

    def markdown(self) -> list[str]:
        lines = [self.caption, ""] if self.caption else []
        lines += ["| " + " | ".join(self.header) + " |", "|" + "---|" * len(self.header)]
        lines.extend("| " + " | ".join(row) + " |" for row in self.rows)
        return lines


@dataclass
class Section:
    """One workload's results: what it does, then its tables and Markdown paragraphs.

    ``body`` holds ``Table``s (printed and written) and strings (Markdown blocks that
    only the page shows). ``summary`` holds, per system measured, the figures of the
    summary table at the top of the page: ``(label, StoreFigures, peak RSS bytes)``.
    """

    name: str
    title: str
    intro: str
    body: list[Table | str]
    notes: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    summary: list[tuple[str, StoreFigures, int]] = field(default_factory=list)

    def tables(self) -> list[Table]:
        return [block for block in self.body if isinstance(block, Table)]

    def text(self) -> str:
        out = [self.title, "=" * len(self.title)]
        for table in self.tables():
            out += [table.text(), ""]
        out.extend(f"- {note}" for note in self.notes)
        out.append(f"checks passed ({len(self.checks)}): " + "; ".join(self.checks))
        return "\n".join(out)

    def markdown(self) -> list[str]:
        out = [f"## {self.title}", "", textwrap.fill(self.intro, width=88), ""]
        for block in self.body:
            out += [*(block.markdown() if isinstance(block, Table) else block.splitlines()), ""]
        if self.notes:
            out += [f"- {note}" for note in self.notes] + [""]
        return out


def key_value_table(rows: Sequence[tuple[str, str]], caption: str = "") -> Table:
    return Table(["figure", "value"], [[name, value] for name, value in rows], caption)


def commit_table(what: str, runs: Sequence[tuple[str, Sequence[float]]], caption: str) -> Table:
    """Commit times of the same changes committed different ways: ``(how, times)`` per
    row, shown as their median and p99."""
    rows = [[f"{how} ({len(times):,} commits)", duration(percentile(times, 50)), duration(percentile(times, 99))]
            for how, times in runs]  # fmt: skip
    return Table([what, "median", "p99"], rows, caption)


# --- figures as JSON -------------------------------------------------------------------


def to_json(value: Any) -> Any:
    """``value`` as JSON values: a dataclass as a dict of its fields, a tuple as a list,
    dict keys as strings. Anything but numbers, strings, booleans and None inside raises
    ``TypeError``."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"a {type(value).__name__} is not a figure: give its numbers and text instead")


def from_json(data: Any, kind: Any) -> Any:
    """The value of type ``kind`` that ``to_json`` turned into ``data``. ``kind`` is a
    dataclass, ``int``, ``float``, ``str``, ``bool``, ``None``, ``Any`` (taken as it is),
    or ``list``, ``tuple``, ``dict`` or ``X | None`` of those."""
    if kind is Any:
        return data
    if isinstance(kind, type) and is_dataclass(kind):
        hints = get_type_hints(kind)
        return kind(**{f.name: from_json(data[f.name], hints[f.name]) for f in fields(kind) if f.init})
    origin, args = get_origin(kind), get_args(kind)
    if origin in (Union, types.UnionType):
        if data is None and type(None) in args:
            return None
        (other,) = [a for a in args if a is not type(None)]  # only ``X | None`` is supported
        return from_json(data, other)
    if origin is list:
        return [from_json(v, args[0]) for v in data]
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_json(v, args[0]) for v in data)
        return tuple(from_json(v, a) for v, a in zip(data, args, strict=True))
    if origin is dict:
        key = int if args[0] is int else str
        return {key(k): from_json(v, args[1]) for k, v in data.items()}
    if kind is float and isinstance(data, (int, float)) and not isinstance(data, bool):
        return float(data)
    if kind in (int, str, bool, type(None)) and type(data) is kind:
        return data
    raise TypeError(f"cannot read {data!r} as {kind!r}")


# --- the machine -----------------------------------------------------------------------


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
        "orjson": _version("orjson"),
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
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "."],
            cwd=Path(snapvc.__file__).resolve().parent,
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        rev = dirty = ""
    if dirty:
        rev += ", with uncommitted changes"
    return f"{version} ({rev})" if rev else str(version)
