"""Peers: the agent-run workload stored by LangGraph's checkpointers and by git.

``run_peers`` replays the same ``benchmarks.workload.AgentRun`` (same seed, documents,
document size and steps) as ``benchmarks.agent_run`` and stores the state after every
step in:

- LangGraph's ``SqliteSaver`` (one SQLite file in a temporary folder) and
  ``InMemorySaver``, driven the way LangGraph's own loop drives a checkpointer: each
  top-level key of the state is a channel; a channel's version is bumped (with the
  saver's ``get_next_version``) only when its value differs from its value at the
  previous step (``==`` against a deep copy kept from that step); once per step
  ``saver.put(config, checkpoint, metadata, new_versions)`` gets a checkpoint holding
  every channel's value, the channel versions and the versions the node has seen, and
  the config ``put`` returns is passed to the next ``put``;
- a git repository driven by the ``git`` command: each step writes one JSON file per
  top-level key (one text file per document, ``documents/doc-00.txt``), rewriting only
  the files whose content changed, then runs ``git add -A`` and ``git commit``.
  Automatic gc is off (``gc.auto=0``), so the size before gc is what the commits wrote;
  ``git gc --aggressive --prune=now`` is then run and timed;
- the floor: the zstd level-3 size of every distinct message (compact JSON), document
  version and scratchpad value, each compressed on its own, summed: what storing each
  distinct value once, compressed, and nothing else would cost.

Each peer checks that the latest state it gives back equals the state in memory;
otherwise ``BenchmarkFailure`` is raised and no figures are reported. Times are medians
of ``time.perf_counter`` intervals. The LangGraph packages are imported only when a run
asks for them (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import copy
import json
import shutil
import sqlite3
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.measure import (
    Table,
    check,
    duration,
    median_time,
    ratio,
    size,
    store_files,
    tree_size,
)
from benchmarks.workload import AgentRun

if TYPE_CHECKING:
    from benchmarks.agent_run import Report

__all__ = [
    "INSTALL_HINT",
    "PeerResult",
    "PeersReport",
    "peers_available",
    "run_peers",
    "peers_blocks",
    "SaverThread",
    "GitRepo",
    "git_head_state",
    "memory_saver_bytes",
    "peer_versions",
]

INSTALL_HINT = "peer comparison skipped: the LangGraph checkpointers are not installed (pip install -e '.[bench]')"
# Put and commit times are the median of the last this many steps.
WINDOW = 50
GET_REPEATS = 20
LIST_REPEATS = 3
GIT_READ_REPEATS = 5
ZSTD_LEVEL = 3
THREAD = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
NODE = "agent"
GIT_AUTHOR = ["-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]


def peers_available() -> bool:
    """Whether the LangGraph checkpointers can be imported."""
    try:
        import langgraph.checkpoint.memory  # noqa: F401
        import langgraph.checkpoint.sqlite  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class PeerResult:
    """One system's figures. Sizes are bytes, times seconds; ``None`` means not measured."""

    name: str
    stored_bytes: int | None
    stored_detail: str
    commit_s: float | None
    latest_s: float | None
    latest_what: str
    history_s: float | None
    history_what: str
    settled_bytes: int | None = None  # after close (SQLite) or after gc (git)
    extra: dict[str, str] = field(default_factory=dict)


@dataclass
class PeersReport:
    steps: int
    documents: int
    doc_size: int
    seed: int
    results: list[PeerResult]
    floor_bytes: int
    floor_detail: str
    versions: dict[str, str]
    checks: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "floor_bytes": self.floor_bytes,
            "floor_detail": self.floor_detail,
            "versions": self.versions,
            "checks": self.checks,
            "results": [r.__dict__ for r in self.results],
        }


def run_peers(
    steps: int = 500,
    *,
    documents: int = 50,
    doc_size: int = 20_000,
    seed: int = 0,
    with_git: bool = True,
    progress: Callable[[str], None] | None = None,
) -> PeersReport:
    """Run the agent workload through every peer and compute the floor."""
    say = progress or (lambda message: None)
    workload = AgentRun(seed=seed, documents=documents, doc_size=doc_size)
    checks: list[str] = []
    results: list[PeerResult] = []
    with tempfile.TemporaryDirectory(prefix="snapvc-peers-") as tmp:
        say("peers: LangGraph SqliteSaver")
        results.append(_run_sqlite_saver(workload, steps, Path(tmp) / "checkpoints.sqlite", checks, say))
        say("peers: LangGraph InMemorySaver")
        results.append(_run_memory_saver(workload, steps, checks, say))
        if with_git and shutil.which("git"):
            say("peers: git")
            results.append(_run_git(workload, steps, Path(tmp) / "git-repo", checks, say))
    say("peers: the zstd floor")
    floor_bytes, floor_detail = _floor(workload, steps)
    return PeersReport(
        steps=steps, documents=documents, doc_size=doc_size, seed=seed, results=results,
        floor_bytes=floor_bytes, floor_detail=floor_detail, versions=peer_versions(), checks=checks,
    )  # fmt: skip


def peer_versions() -> dict[str, str]:
    """Versions of the peers measured."""
    out = {}
    for dist in ("langgraph-checkpoint", "langgraph-checkpoint-sqlite"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    try:
        done = subprocess.run(["git", "--version"], capture_output=True, text=True, check=True)
        out["git"] = done.stdout.strip().removeprefix("git version ")
    except (OSError, subprocess.SubprocessError):
        out["git"] = "not installed"
    return out


# --- LangGraph checkpointers -----------------------------------------------------------


class SaverThread:
    """One LangGraph thread fed to a checkpointer the way LangGraph's loop feeds it."""

    def __init__(self, saver: Any, thread_id: str = "t") -> None:
        self.saver = saver
        self.config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        self.previous: dict[str, Any] = {}
        self.versions: dict[str, Any] = {}
        self.puts = 0

    def put(self, state: dict[str, Any], step: int, clock: Callable[[], float] = time.perf_counter) -> float:
        """Put ``state`` as the next checkpoint (``step`` for the metadata); the time the
        saver's ``put`` took, by ``clock`` (the channel comparison before it not counted)."""
        from langgraph.checkpoint.base import empty_checkpoint
        from langgraph.checkpoint.base.id import uuid6

        previous, versions = self.previous, self.versions
        changed = [key for key in state if key not in previous or previous[key] != state[key]]
        new_versions = {}
        for key in changed:
            versions[key] = self.saver.get_next_version(versions.get(key), None)
            new_versions[key] = versions[key]
            previous[key] = copy.deepcopy(state[key])
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=self.puts))
        checkpoint["channel_values"] = {key: state[key] for key in state}
        checkpoint["channel_versions"] = dict(versions)
        checkpoint["versions_seen"] = {NODE: dict(versions)}
        checkpoint["updated_channels"] = sorted(changed)
        meta = {"source": "input" if self.puts == 0 else "loop", "step": step - 1, "parents": {}}
        t0 = clock()
        self.config = self.saver.put(self.config, checkpoint, meta, new_versions)
        self.puts += 1
        return clock() - t0


def memory_saver_bytes(saver: Any) -> tuple[int, int]:
    """What an ``InMemorySaver`` keeps, serialized: (channel blobs, checkpoints + metadata)."""
    blobs = sum(len(data) for _, data in saver.blobs.values())
    saved = sum(
        len(ck[1]) + len(md[1])
        for namespaces in saver.storage.values()
        for entries in namespaces.values()
        for ck, md, _parent in entries.values()
    )  # fmt: skip
    return blobs, saved


def _drive_saver(
    saver: Any, workload: AgentRun, steps: int, say: Callable[[str], None]
) -> tuple[dict[str, Any], list[float]]:
    """Put the initial state and every step's into ``saver`` as LangGraph's loop does."""
    thread = SaverThread(saver)
    state = workload.initial_state()
    put_times: list[float] = []
    for i in range(steps + 1):
        if i:
            state = workload.step(state, i)
        put_times.append(thread.put(state, i))
        if i and (i % 100 == 0 or i == steps):
            say(f"  step {i}/{steps}")
    return state, put_times


def _check_saver(saver: Any, state: dict[str, Any], steps: int, checks: list[str], name: str) -> None:
    latest = saver.get_tuple(THREAD)
    check(latest is not None and latest.checkpoint["channel_values"] == state, checks,
           f"{name}: the latest checkpoint equals the state in memory")  # fmt: skip
    check(len(list(saver.list(THREAD))) == steps + 1, checks, f"{name}: lists {steps + 1} checkpoints")


def _saver_reads(saver: Any) -> tuple[float, float]:
    latest_s = median_time(GET_REPEATS, lambda: saver.get_tuple(THREAD))
    history_s = median_time(LIST_REPEATS, lambda: list(saver.list(THREAD)))
    return latest_s, history_s


def _run_sqlite_saver(
    workload: AgentRun, steps: int, path: Path, checks: list[str], say: Callable[[str], None]
) -> PeerResult:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        state, puts = _drive_saver(saver, workload, steps, say)
        files = store_files(path)
        _check_saver(saver, state, steps, checks, "SqliteSaver")
        latest_s, history_s = _saver_reads(saver)
    finally:
        conn.close()
    closed = sum(store_files(path).values())
    detail = " + ".join(f"{name} {size(n)}" for name, n in files.items())
    return PeerResult(
        name="LangGraph SqliteSaver",
        stored_bytes=sum(files.values()),
        stored_detail=f"{detail}; {size(closed)} after close",
        commit_s=statistics.median(puts[-WINDOW:]),
        latest_s=latest_s,
        latest_what=f"get_tuple, latest (median of {GET_REPEATS})",
        history_s=history_s,
        history_what=f"list(saver.list(config)) (median of {LIST_REPEATS})",
        settled_bytes=closed,
        extra={"all puts": duration(sum(puts))},
    )


def _run_memory_saver(workload: AgentRun, steps: int, checks: list[str], say: Callable[[str], None]) -> PeerResult:
    from langgraph.checkpoint.memory import InMemorySaver

    saver = InMemorySaver()
    state, puts = _drive_saver(saver, workload, steps, say)
    _check_saver(saver, state, steps, checks, "InMemorySaver")
    latest_s, history_s = _saver_reads(saver)
    # Its storage holds serialized bytes: checkpoints and metadata, and one blob per
    # channel version. Their sum is what it keeps (Python object overhead not counted).
    blobs, saved = memory_saver_bytes(saver)
    return PeerResult(
        name="LangGraph InMemorySaver",
        stored_bytes=blobs + saved,
        stored_detail=f"serialized, in memory: channel blobs {size(blobs)} + checkpoints {size(saved)}",
        commit_s=statistics.median(puts[-WINDOW:]),
        latest_s=latest_s,
        latest_what=f"get_tuple, latest (median of {GET_REPEATS})",
        history_s=history_s,
        history_what=f"list(saver.list(config)) (median of {LIST_REPEATS})",
        extra={"all puts": duration(sum(puts))},
    )


# --- git -------------------------------------------------------------------------------


def _git_files(state: Mapping[str, Any]) -> dict[str, str]:
    """The state as files: one JSON file per top-level key, one text file per document."""
    files = {}
    for key, value in state.items():
        if key == "documents":
            for name, text in value.items():
                files[f"documents/{name}.txt"] = text
        else:
            files[f"{key}.json"] = json.dumps(value, ensure_ascii=False, indent=1)
    return files


class GitRepo:
    """A git repository driven by the ``git`` command, committing states as files."""

    def __init__(self, path: Path) -> None:
        path.mkdir()
        (path / "documents").mkdir()
        self.path = path
        self.git("init", "-q")
        self.git("config", "gc.auto", "0")
        self._written: dict[str, str] = {}

    def git(self, *args: str) -> str:
        return subprocess.run(
            ["git", *GIT_AUTHOR, *args], cwd=self.path, check=True, capture_output=True, text=True
        ).stdout  # fmt: skip

    def commit(self, state: Mapping[str, Any], message: str) -> float:
        """Write the files whose content changed, ``git add -A``, ``git commit``; the time taken."""
        t0 = time.perf_counter()
        for name, content in _git_files(state).items():
            if self._written.get(name) != content:
                (self.path / name).write_text(content, encoding="utf-8")
                self._written[name] = content
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return time.perf_counter() - t0

    def fork(self, branch: str, at: str, state: Mapping[str, Any]) -> None:
        """``git checkout -b branch at``; ``state`` is the state committed at ``at``."""
        self.git("checkout", "-q", "-b", branch, at)
        self._written = _git_files(state)


def git_head_state(repo: GitRepo, like: Mapping[str, Any], rev: str = "HEAD") -> dict[str, Any]:
    """The state committed at ``rev``, read back from its files (``like`` names the documents)."""
    state: dict[str, Any] = {}
    for key in like:
        if key == "documents":
            state[key] = {name: repo.git("show", f"{rev}:documents/{name}.txt") for name in like["documents"]}
        else:
            state[key] = json.loads(repo.git("show", f"{rev}:{key}.json"))
    return state


def _run_git(
    workload: AgentRun, steps: int, path: Path, checks: list[str], say: Callable[[str], None]
) -> PeerResult:
    repo = GitRepo(path)
    git = repo.git
    state = workload.initial_state()
    commit_times: list[float] = []
    for i in range(steps + 1):
        if i:
            state = workload.step(state, i)
        commit_times.append(repo.commit(state, f"step {i}"))
        if i and (i % 100 == 0 or i == steps):
            say(f"  step {i}/{steps}")

    def log_lines() -> int:
        return len(git("log", "--oneline").splitlines())

    def archive() -> None:
        subprocess.run(["git", "archive", "HEAD"], cwd=path, check=True, stdout=subprocess.DEVNULL)

    check(log_lines() == steps + 1, checks, f"git: the log holds {steps + 1} commits")
    restored = git_head_state(repo, state)
    check(restored == state, checks, "git: HEAD's files equal the state in memory")
    before = tree_size(path / ".git")
    log_s = median_time(LIST_REPEATS, log_lines)
    archive_s = median_time(GIT_READ_REPEATS, archive)
    say("  git gc --aggressive --prune=now")
    t0 = time.perf_counter()
    git("gc", "-q", "--aggressive", "--prune=now")
    gc_s = time.perf_counter() - t0
    after = tree_size(path / ".git")
    log_gc_s = median_time(LIST_REPEATS, log_lines)
    archive_gc_s = median_time(GIT_READ_REPEATS, archive)
    return PeerResult(
        name="git",
        stored_bytes=before,
        stored_detail=f".git {size(before)} before gc, {size(after)} after gc --aggressive",
        commit_s=statistics.median(commit_times[-WINDOW:]),
        latest_s=archive_s,
        latest_what=f"git archive HEAD, every file of the latest commit (median of {GIT_READ_REPEATS})",
        history_s=log_s,
        history_what=f"git log --oneline, all lines (median of {LIST_REPEATS})",
        settled_bytes=after,
        extra={
            "gc --aggressive time": duration(gc_s),
            "all commits (write + add + commit)": duration(sum(commit_times)),
            "git archive HEAD after gc": duration(archive_gc_s),
            "git log --oneline after gc": duration(log_gc_s),
        },
    )


# --- the floor -------------------------------------------------------------------------


def _floor(workload: AgentRun, steps: int) -> tuple[int, str]:
    """zstd level-3 bytes of every distinct message, document version and scratchpad value."""
    import zstandard

    state = workload.initial_state()
    messages: set[str] = set()
    documents: set[str] = set(state["documents"].values())
    notes: set[str] = set(state["scratchpad"].values())
    for i in range(1, steps + 1):
        state = workload.step(state, i)
        messages.update(_compact(m) for m in state["messages"][-2:])
        documents.update(state["documents"].values())
        notes.update(state["scratchpad"].values())
    compress = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress
    sizes = {
        kind: sum(len(compress(value.encode("utf-8"))) for value in values)
        for kind, values in (("messages", messages), ("documents", documents), ("scratchpad", notes))
    }
    counts = {"messages": len(messages), "documents": len(documents), "scratchpad": len(notes)}
    detail = " + ".join(f"{counts[k]} {k} {size(n)}" for k, n in sizes.items())
    return sum(sizes.values()), detail


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


# --- reporting -------------------------------------------------------------------------


def _peer_rows(snap: Report, peers: PeersReport) -> tuple[list[str], list[list[str]]]:
    """The comparison as a header and rows: absolute figures, then snapvc/peer ratios."""
    header = ["system", "stored bytes", f"commit/put (median of last {WINDOW})", "latest checkout/get",
              "history listing"]  # fmt: skip
    rows = [
        [
            "snapvc",
            f"{size(snap.store_bytes)}; {size(snap.store_bytes_closed)} settled",
            duration(snap.commit_last_s),
            duration(snap.checkout_s),
            duration(snap.log_s),
        ]
    ]
    for r in peers.results:
        rows.append([
            r.name,
            (size(r.stored_bytes) if r.stored_bytes is not None else "-")
            + (f"; {size(r.settled_bytes)} settled" if r.settled_bytes else ""),
            duration(r.commit_s) if r.commit_s is not None else "-",
            duration(r.latest_s) if r.latest_s is not None else "-",
            duration(r.history_s) if r.history_s is not None else "-",
        ])  # fmt: skip
    rows.append(["zstd-3 floor (distinct values)", size(peers.floor_bytes), "-", "-", "-"])
    for r in peers.results:
        rows.append([
            f"snapvc / {r.name}",
            ratio(snap.store_bytes, r.stored_bytes)
            + (f"; {ratio(snap.store_bytes_closed, r.settled_bytes)} settled" if r.settled_bytes else ""),
            ratio(snap.commit_last_s, r.commit_s),
            ratio(snap.checkout_s, r.latest_s),
            ratio(snap.log_s, r.history_s),
        ])  # fmt: skip
    rows.append(["snapvc / zstd-3 floor", ratio(snap.store_bytes_closed, peers.floor_bytes) + " settled",
                 "-", "-", "-"])  # fmt: skip
    return header, rows


def _notes(snap: Report, peers: PeersReport) -> list[str]:
    lines = [
        "stored bytes: as the run leaves them, then \"settled\": SQLite files after close "
        "(WAL folded in), .git after gc --aggressive --prune=now. Ratios are snapvc / peer.",
        "snapvc: store on disk after the run (file + wal + shm); commit median of the last "
        f"{WINDOW} steps; checkout latest on the open repository (median of 20); "
        "list(log), again (median of 5).",
    ]
    for r in peers.results:
        lines.append(f"{r.name}: {r.stored_detail}; latest = {r.latest_what}; history = {r.history_what}.")
        lines.extend(f"  {name}: {value}" for name, value in r.extra.items())
    lines.append(f"zstd-3 floor: {peers.floor_detail}.")
    return lines


def peers_blocks(snap: Report, peers: PeersReport) -> list[Table | str]:
    """The comparison as a table and, for the Markdown page, what it measured and the versions."""
    header, rows = _peer_rows(snap, peers)
    notes = [f"  - {line.strip()}" if line.startswith("  ") else f"- {line}" for line in _notes(snap, peers)]
    return [
        "\n".join([
            "### Peers",
            "",
            "The same workload (same seed, same steps) stored, in the same run, by LangGraph's",
            "`SqliteSaver` and `InMemorySaver` (driven as LangGraph's loop drives them: one channel",
            "per top-level key, a channel's version bumped only when its value changed, one `put`",
            "per step holding every channel's value), by `git` (one JSON file per top-level key,",
            "one text file per document, `git add -A` and `git commit` per step, automatic gc off),",
            "and the floor: every distinct message, document version and scratchpad value",
            "compressed with zstd level 3 on its own, summed (`benchmarks/peers.py`). Ratios are",
            "snapvc / peer: below 1 means snapvc is smaller or faster. `get_tuple` and `list`",
            "return whole deserialized checkpoints; `git log --oneline` reads only the commits.",
        ]),
        Table(header, rows, f"Peers: the same workload ({peers.steps} steps, seed {peers.seed})"),
        "\n".join(notes),
        Table(["peer", "version"], [[name, version] for name, version in peers.versions.items()]),
    ]  # fmt: skip
