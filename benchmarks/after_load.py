"""The first commit after a load: an agent run picked up again in a new process.

An agent that resumes (after a crash, on another worker, in the next request) opens the
repository, loads the latest state and goes on. Its first commit meets values that snapvc
itself handed out, and should cost the change, not the state. ``measure_after_load``
measures that on a repository an agent run left (``benchmarks.agent_run``), each way in
a process of its own, so no cache of the run is warm:

- ``commit``: ``snapvc.open``, ``repo.checkout(branch)`` (a plain dict), step ``N + 1`` of
  ``AgentRun`` applied to it in place, and the time of ``repo.commit(state)``; then step
  ``N + 2`` and the time of the next commit, for comparison;
- ``state``: ``snapvc.open``, ``repo.state(branch)``, the same step made through the
  working copy (``state.extend("messages", ...)``, ``state.set(("scratchpad", key), ...)``
  and the like), and the time of ``state.snapshot()``; then step ``N + 2`` likewise.

Each way commits on a branch of its own made at the run's last commit; the two must end
at the same trees, and the parent checks the plain dict's last commit against the run's
state after the same two steps.

Run as ``python -m benchmarks.after_load ...`` by ``measure_after_load``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import snapvc
from benchmarks.measure import BenchmarkFailure, from_json, to_json
from benchmarks.workload import AgentRun

__all__ = ["AfterLoad", "measure_after_load", "apply_step"]

ROOT = Path(__file__).resolve().parent.parent
COMMIT_BRANCH = "after-load/commit"
STATE_BRANCH = "after-load/state"


@dataclass
class AfterLoad:
    """Times in seconds, each measured in a new process on the repository a run left."""

    step: int  # the step applied first: the run's steps + 1
    open_s: float  # snapvc.open, in the plain-dict process
    checkout_s: float  # repo.checkout of the run's last state
    commit_s: float  # the first repo.commit after the checkout
    next_commit_s: float  # the commit after it (one more step)
    state_load_s: float  # repo.state(branch)
    snapshot_s: float  # the first state.snapshot after loading
    next_snapshot_s: float  # the snapshot after it (one more step)


@dataclass
class _Child:
    """What one process measured: its times and the tree of each of its two commits."""

    open_s: float
    load_s: float
    first_s: float
    next_s: float
    trees: list[str]


def apply_step(workload: AgentRun, state: snapvc.State, i: int) -> None:
    """Make step ``i`` of ``workload`` through the working copy ``state``, as an agent
    does there: the new messages with ``state.extend``, every changed note, document and
    counter with ``state.set`` (tuple paths: keys may hold dots)."""
    parts = ("scratchpad", "documents", "counters")
    before = {part: dict(state[part]) for part in parts}
    work = {"messages": [], **{part: dict(values) for part, values in before.items()}, "task": state["task"]}
    workload.step(work, i)
    state.extend("messages", work["messages"])
    for part in parts:
        for key, value in work[part].items():
            if before[part].get(key) is not value:
                state.set((part, key), value)


def measure_after_load(path: Path, branch: str, workload: AgentRun, steps: int, expected: dict[str, Any],
                       checks: list[str]) -> AfterLoad:  # fmt: skip
    """Measure the first commit after a load on the closed repository at ``path``, whose
    ``branch`` holds ``steps`` steps of ``workload``. ``expected`` is that run's state in
    memory: it is changed in place by the two steps the children make. Records what it
    checked in ``checks``; raises ``BenchmarkFailure`` if the two ways disagree."""
    with snapvc.open(str(path)) as repo:
        for name in (COMMIT_BRANCH, STATE_BRANCH):
            repo.branch(name, at=branch)
    plain = _in_child(path, COMMIT_BRANCH, "commit", workload, steps + 1)
    through_state = _in_child(path, STATE_BRANCH, "state", workload, steps + 1)
    if plain.trees != through_state.trees:
        raise BenchmarkFailure("after a load, the plain dict and the State working copy end at different trees")
    checks.append("after a load in a new process, the plain dict and the State working copy commit the same trees")
    workload.step(expected, steps + 1)
    workload.step(expected, steps + 2)
    with snapvc.open(str(path)) as repo:
        restored = repo.checkout(COMMIT_BRANCH)
    if restored != expected:
        raise BenchmarkFailure(f"after a load, {COMMIT_BRANCH} does not check out to the run's state two steps on")
    checks.append("after a load, the commits check out equal to the run's state two steps on")
    return AfterLoad(steps + 1, plain.open_s, plain.load_s, plain.first_s, plain.next_s, through_state.load_s,
                     through_state.first_s, through_state.next_s)  # fmt: skip


def _in_child(path: Path, branch: str, how: str, workload: AgentRun, step: int) -> _Child:
    with tempfile.TemporaryDirectory(prefix="snapvc-after-load-") as tmp:
        result = Path(tmp) / "result.json"
        command = [sys.executable, "-m", "benchmarks.after_load", str(path), branch, how, str(step),
                   "--seed", str(workload.seed), "--documents", str(workload.documents),
                   "--doc-size", str(workload.doc_size), "--result", str(result)]  # fmt: skip
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0 or not result.exists():
            raise BenchmarkFailure(f"after a load ({how}): the process failed (exit code {done.returncode}): "
                                   f"{done.stderr.strip()[-2000:]}")  # fmt: skip
        return from_json(json.loads(result.read_text(encoding="utf-8")), _Child)


def _measure(path: Path, branch: str, how: str, workload: AgentRun, step: int) -> _Child:
    """In this process: open, load, make two steps and time their commits."""
    t0 = time.perf_counter()
    repo = snapvc.open(str(path))
    open_s = time.perf_counter() - t0
    times, trees = [], []
    try:
        if how == "commit":
            t0 = time.perf_counter()
            state = repo.checkout(branch)
            load_s = time.perf_counter() - t0
            for i in (step, step + 1):
                workload.step(state, i)
                t0 = time.perf_counter()
                commit = repo.commit(state, branch=branch, message=f"step {i}", metadata={"step": i})
                times.append(time.perf_counter() - t0)
                trees.append(commit.tree.hex)
        else:
            t0 = time.perf_counter()
            working = repo.state(branch)
            load_s = time.perf_counter() - t0
            for i in (step, step + 1):
                apply_step(workload, working, i)
                t0 = time.perf_counter()
                working.snapshot(message=f"step {i}", metadata={"step": i})
                times.append(time.perf_counter() - t0)
                trees.append(repo.get_commit(repo.resolve(branch)).tree.hex)
    finally:
        repo.close()
    return _Child(open_s, load_s, times[0], times[1], trees)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.after_load", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("path", type=Path)
    parser.add_argument("branch")
    parser.add_argument("how", choices=["commit", "state"])
    parser.add_argument("step", type=int)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--documents", type=int, required=True)
    parser.add_argument("--doc-size", type=int, required=True)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args(argv)
    workload = AgentRun(seed=args.seed, documents=args.documents, doc_size=args.doc_size)
    child = _measure(args.path, args.branch, args.how, workload, args.step)
    args.result.write_text(json.dumps(to_json(child)), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
