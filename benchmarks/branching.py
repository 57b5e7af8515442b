"""Branching: 20 branches forked at step 100 of the agent run, 50 steps each.

The agent run (``benchmarks.workload.AgentRun``, seed ``seed``) runs ``Scale.fork_at``
steps on ``main``. Then ``Scale.branches`` branches are forked there; branch ``k``
continues a deep copy of the step-``fork_at`` state with ``AgentRun(seed=seed + k)``
for ``Scale.branch_steps`` steps. Each system's stored bytes are recorded at the fork,
after branch 1 (one branch alone: ``fork_at`` + ``branch_steps`` steps) and after every
branch, and set against the ideal of sharing the fork's state: the bytes at the fork
plus each branch's own increment.

- ``snapvc``: ``repo.branch(name, at="main")``, then one commit per step on the branch;
  every branch must check out equal to its state in memory;
- ``peers``: LangGraph's ``SqliteSaver`` and ``InMemorySaver``, where a fork is a new
  thread whose first checkpoint holds the values of ``main``'s step-``fork_at``
  checkpoint (``get_tuple``), and git, where it is ``git checkout -b name main``.
"""

from __future__ import annotations

import copy
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import snapvc
from benchmarks import peers as peer_bench
from benchmarks.measure import (
    PartResult,
    Scale,
    Section,
    StoreFigures,
    Table,
    check,
    key_value_table,
    measure_store,
    size,
    store_files,
    summary_row,
    tree_size,
)
from benchmarks.workload import AgentRun

__all__ = ["NAME", "TITLE", "RESULTS", "Forks", "BranchingFigures", "parts", "run", "section"]

NAME = "branching"
TITLE = "Branching"


@dataclass
class Forks:
    """One system's sizes: at the fork, one branch alone, all branches. Bytes."""

    name: str
    fork_bytes: int
    single_bytes: int
    all_bytes: int
    branches: int
    detail: str = ""
    checks: list[str] = field(default_factory=list)

    @property
    def ideal_bytes(self) -> int:
        """The fork's bytes plus each branch's own increment: what sharing the fork costs."""
        return self.fork_bytes + self.branches * (self.single_bytes - self.fork_bytes)


@dataclass
class BranchingFigures:
    """snapvc's part: its sizes, and the common figures of the last branch, ``branch``."""

    forks: Forks
    figures: StoreFigures
    branch: str


RESULTS = {"snapvc": BranchingFigures, "peers": list[Forks]}


def parts(scale: Scale, peers: bool) -> list[str]:
    return ["snapvc", "peers"] if peers else ["snapvc"]


def _steps(scale: Scale, seed: int) -> tuple[AgentRun, Callable[[int], AgentRun]]:
    size_args = {"documents": scale.documents, "doc_size": scale.doc_size}
    return AgentRun(seed=seed, **size_args), lambda k: AgentRun(seed=seed + k, **size_args)


def _trunk(scale: Scale, seed: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """Steps 0 to ``fork_at`` of ``main``: (step, state), the state changed in place."""
    run, _ = _steps(scale, seed)
    state = run.initial_state()
    yield 0, state
    for i in range(1, scale.fork_at + 1):
        yield i, run.step(state, i)


def _branch(scale: Scale, seed: int, k: int, fork_state: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Branch ``k``'s steps from a deep copy of the fork's state."""
    run = _steps(scale, seed)[1](k)
    state = copy.deepcopy(fork_state)
    for i in range(scale.fork_at + 1, scale.fork_at + scale.branch_steps + 1):
        yield i, run.step(state, i)


def run(part: str, scale: Scale, seed: int, say: Callable[[str], None]) -> Any:
    with tempfile.TemporaryDirectory(prefix="snapvc-branching-") as tmp:
        if part == "snapvc":
            return _run_snapvc(scale, seed, Path(tmp), say)
        results = [_run_saver(kind, scale, seed, Path(tmp), say) for kind in ("sqlite", "memory")]
        if shutil.which("git"):
            results.append(_run_git(scale, seed, Path(tmp), say))
        return results


def _closed_size(path: Path) -> int:
    return sum(store_files(path).values())


def _run_snapvc(scale: Scale, seed: int, folder: Path, say: Callable[[str], None]) -> BranchingFigures:
    checks: list[str] = []
    path = folder / "branches.snapvc"
    repo = snapvc.open(str(path))
    for i, state in _trunk(scale, seed):
        repo.commit(state, branch="main", message=f"step {i}")
    fork_state = copy.deepcopy(state)
    sizes = []  # after close: at the fork, after branch 1 (one branch alone)

    def close_and_measure() -> snapvc.Repository:
        repo.close()
        sizes.append(_closed_size(path))
        return snapvc.open(str(path))

    repo = close_and_measure()
    finals: dict[str, dict[str, Any]] = {}
    times: list[float] = []
    for k in range(1, scale.branches + 1):
        name = f"branch-{k:02d}"
        repo.branch(name, at="main")
        for i, state in _branch(scale, seed, k, fork_state):
            t0 = time.perf_counter()
            repo.commit(state, branch=name, message=f"step {i}", metadata={"step": i})
            times.append(time.perf_counter() - t0)
        finals[name] = state
        if k == 1:
            repo = close_and_measure()
        say(f"  snapvc: {name} done")
    check(all(repo.checkout(name) == want for name, want in finals.items()), checks,
          f"each of the {len(finals)} branches checks out equal to its state in memory")  # fmt: skip
    figures = measure_store(
        repo, path, name, finals[name], ("messages", len(finals[name]["messages"]) - 1), times, checks,
        scale.repeats, commits=scale.fork_at + 1 + scale.branch_steps,
    )  # fmt: skip
    forks = Forks("snapvc", sizes[0], sizes[1], figures.closed_bytes, scale.branches,
                  "SQLite file after close", checks)  # fmt: skip
    return BranchingFigures(forks, figures, name)


def _run_saver(kind: str, scale: Scale, seed: int, folder: Path, say: Callable[[str], None]) -> Forks:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.sqlite import SqliteSaver

    name = "LangGraph SqliteSaver" if kind == "sqlite" else "LangGraph InMemorySaver"
    path = folder / f"{kind}.sqlite"
    conn = sqlite3.connect(str(path), check_same_thread=False) if kind == "sqlite" else None
    saver = SqliteSaver(conn) if conn is not None else InMemorySaver()

    def stored() -> int:
        if conn is None:
            return sum(peer_bench.memory_saver_bytes(saver))
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the WAL folded in, as after close
        return _closed_size(path)

    main = peer_bench.SaverThread(saver, "main")
    for i, state in _trunk(scale, seed):
        main.put(state, i)
    sizes = [stored()]
    fork_values = saver.get_tuple(main.config).checkpoint["channel_values"]
    for k in range(1, scale.branches + 1):
        thread = peer_bench.SaverThread(saver, f"branch-{k:02d}")
        thread.put(copy.deepcopy(fork_values), scale.fork_at)
        for i, state in _branch(scale, seed, k, fork_values):
            thread.put(state, i)
        latest = saver.get_tuple(thread.config).checkpoint["channel_values"]
        check(latest == state, [], f"{name}: branch-{k:02d}'s latest checkpoint equals its state")
        if k == 1:
            sizes.append(stored())
    sizes.append(stored())
    if conn is not None:
        conn.close()
    say(f"  {name} done")
    detail = "file after a WAL checkpoint" if kind == "sqlite" else "serialized channel blobs and checkpoints"
    checks = [f"{name}: each of {scale.branches} threads' latest checkpoint equals its state in memory"]
    return Forks(name, *sizes, scale.branches, detail, checks)


def _run_git(scale: Scale, seed: int, folder: Path, say: Callable[[str], None]) -> Forks:
    checks: list[str] = []
    repo = peer_bench.GitRepo(folder / "git")
    repo.git("checkout", "-q", "-b", "main")
    for i, state in _trunk(scale, seed):
        repo.commit(state, f"step {i}")
    sizes = [tree_size(repo.path / ".git")]
    fork_state = copy.deepcopy(state)
    for k in range(1, scale.branches + 1):
        repo.fork(f"branch-{k:02d}", "main", fork_state)
        for i, state in _branch(scale, seed, k, fork_state):
            repo.commit(state, f"step {i}")
        if k == 1:
            sizes.append(tree_size(repo.path / ".git"))
    check(peer_bench.git_head_state(repo, state) == state, checks,
          "git: the last branch's files equal its state in memory")  # fmt: skip
    sizes.append(tree_size(repo.path / ".git"))
    say("  git done")
    return Forks("git", *sizes, scale.branches, ".git before gc", checks)


def section(results: dict[str, PartResult], scale: Scale, seed: int) -> Section:
    value: BranchingFigures = results["snapvc"].value
    figures = value.figures
    systems: list[Forks] = [value.forks, *(results["peers"].value if "peers" in results else [])]
    n = scale.branches
    table = Table(
        ["system", f"at the fork (step {scale.fork_at})", "one branch alone", f"{n} branches",
         f"{n} branches / one alone", "ideal (fork + each branch's increment)", f"{n} branches / ideal"],
        [[s.name, size(s.fork_bytes), size(s.single_bytes), size(s.all_bytes), f"{s.all_bytes / s.single_bytes:.2f}x",
          size(s.ideal_bytes), f"{s.all_bytes / s.ideal_bytes:.2f}x"] for s in systems],
        f"Stored bytes: {n} branches of {scale.branch_steps} steps forked at step {scale.fork_at}",
    )  # fmt: skip
    ratios = Table(
        ["snapvc / peer", f"{n} branches"],
        [[s.name, f"{systems[0].all_bytes / s.all_bytes:.3g}x"] for s in systems[1:]],
    )
    rows = [*figures.rows(), ("peak RSS (process)", size(results["snapvc"].maxrss_bytes))]
    checks = [c for s in systems for c in s.checks]
    return Section(
        NAME,
        f"{TITLE}: {n} branches of {scale.branch_steps} steps from step {scale.fork_at}",
        f"The agent run commits {scale.fork_at} steps on `main`; then {n} branches are forked "
        f"there, and branch k continues a copy of that state for {scale.branch_steps} steps with "
        "`AgentRun(seed=k)`. Each system's stored bytes are recorded at the fork, after branch 1 "
        f"(one branch alone: {scale.fork_at} + {scale.branch_steps} steps) and after every branch, "
        "and set against the ideal of sharing the fork: its bytes plus each branch's own "
        "increment. For LangGraph's "
        "savers a fork is a new thread whose first checkpoint holds the values of `main`'s "
        f"step-{scale.fork_at} checkpoint; for git, `git checkout -b`. Sizes: "
        + "; ".join(f"{s.name}: {s.detail}" for s in systems)
        + f". snapvc's figures below are for `{value.branch}` (commits: every branch's).",
        [table, *([ratios] if len(systems) > 1 else []), key_value_table(rows, "snapvc")],
        checks=checks,
        summary=[summary_row(f"branching, {n} branches", figures, results["snapvc"])],
    )
