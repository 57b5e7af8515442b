"""The growth curve: stored bytes after 100, 250, 500, 1,000 and 2,000 agent steps.

snapvc stores what changed, so its size grows by about the same amount every step
(linear). A checkpointer that stores every channel's whole value whenever it changes
stores the whole, ever longer message history again at every step, so its per-step
increment grows with the step (quadratic total).

- ``snapvc``: the agent run (``benchmarks.agent_run``) for the last point's number of
  steps, closing the repository at each point to record its size on disk and opening it
  again; its full report follows the curve, with the same steps through the ``State``
  working copy and rebuilt each step, and the first commit after reopening the run in a
  new process;
- ``sqlite``, ``memory``, ``git``: the same steps through LangGraph's ``SqliteSaver``
  (its file after a WAL checkpoint), ``InMemorySaver`` (serialized channel blobs and checkpoints) and
  git (``.git`` before gc), as ``benchmarks.peers`` drives them. A peer runs to the next
  point only if the time it is predicted to take fits in ``Scale.peer_budget_s`` (its
  per-step time grows with the step: the prediction scales the last interval's time per
  step by the ratio of the intervals' mean steps); where it stops, the table says so.
"""

from __future__ import annotations

import copy
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import peers as peer_bench
from benchmarks.agent_run import Report, report_blocks, run_agent_benchmark
from benchmarks.measure import (
    PartResult,
    Scale,
    Section,
    Table,
    check,
    duration,
    size,
    store_files,
    summary_row,
    tree_size,
)
from benchmarks.workload import AgentRun

__all__ = ["NAME", "TITLE", "RESULTS", "Curve", "parts", "run", "section", "peer_curve"]

NAME = "growth"
TITLE = "Growth"
PEERS = {"sqlite": "LangGraph SqliteSaver", "memory": "LangGraph InMemorySaver", "git": "git (.git before gc)"}


@dataclass
class Curve:
    """Stored bytes after each point a system reached, and the time it had taken."""

    name: str
    sizes: dict[int, int] = field(default_factory=dict)
    elapsed: dict[int, float] = field(default_factory=dict)
    stopped: str = ""  # why the curve ends before the last point, if it does
    checks: list[str] = field(default_factory=list)


RESULTS = {"snapvc": Report, "sqlite": Curve, "memory": Curve, "git": Curve}


def parts(scale: Scale, peers: bool) -> list[str]:
    peer_parts = ["sqlite", "memory"] + (["git"] if shutil.which("git") else [])
    return ["snapvc", *peer_parts] if peers else ["snapvc"]


def run(part: str, scale: Scale, seed: int, say: Callable[[str], None]) -> Any:
    workload = AgentRun(seed=seed, documents=scale.documents, doc_size=scale.doc_size)
    if part == "snapvc":
        return run_agent_benchmark(
            scale.growth_steps[-1], documents=scale.documents, doc_size=scale.doc_size, seed=seed,
            measure_memory=False, growth_at=(0, *scale.growth_steps), progress=say,
        )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="snapvc-growth-") as tmp:
        return peer_curve(part, workload, scale.growth_steps, scale.peer_budget_s, Path(tmp), say)


def peer_curve(
    kind: str, workload: AgentRun, points: tuple[int, ...], budget_s: float, folder: Path,
    say: Callable[[str], None],
) -> Curve:  # fmt: skip
    """Run ``workload`` through one peer, recording its stored bytes at each point."""
    curve = Curve(PEERS[kind])
    sink = _Sink(kind, folder)
    state = workload.initial_state()
    sink.put(state, 0)
    curve.sizes[0] = sink.size()
    done = 0
    start = time.perf_counter()
    try:
        for point in points:
            elapsed = time.perf_counter() - start
            predicted = _predict(curve.elapsed, done, point)
            if elapsed + predicted > budget_s:
                curve.stopped = (
                    f"stopped after {done:,} steps ({duration(elapsed)}): {point:,} steps were predicted "
                    f"to take {duration(predicted)} more, past its {duration(budget_s)} budget"
                )
                break
            for i in range(done + 1, point + 1):
                state = workload.step(state, i)
                sink.put(state, i)
            done = point
            curve.sizes[point] = sink.size()
            curve.elapsed[point] = time.perf_counter() - start
            say(f"  {curve.name}: {point} steps, {size(curve.sizes[point])}")
        check(sink.latest(state) == state, curve.checks, f"{curve.name}: the latest state equals the state in memory")
    finally:
        sink.close()
    return curve


def _predict(elapsed: dict[int, float], done: int, point: int) -> float:
    """Time to go from ``done`` steps to ``point``: the last interval's time per step,
    scaled by the ratio of the two intervals' mean steps (per-step time grows with the step)."""
    if len(elapsed) < 1:
        return 0.0
    marks = [0, *elapsed]
    times = [0.0, *elapsed.values()]
    a, b = marks[-2], marks[-1]
    per_step = (times[-1] - times[-2]) / (b - a)
    return per_step * (point - done) * (done + point) / (a + b)


class _Sink:
    """One peer, put to step by step."""

    def __init__(self, kind: str, folder: Path) -> None:
        self.kind = kind
        self.path = folder / kind
        self.conn: sqlite3.Connection | None = None
        if kind == "git":
            self.git = peer_bench.GitRepo(self.path)
            return
        if kind == "sqlite":
            from langgraph.checkpoint.sqlite import SqliteSaver

            self.conn = sqlite3.connect(str(self.path), check_same_thread=False)
            self.saver = SqliteSaver(self.conn)
        else:
            from langgraph.checkpoint.memory import InMemorySaver

            self.saver = InMemorySaver()
        self.thread = peer_bench.SaverThread(self.saver)

    def put(self, state: dict[str, Any], step: int) -> None:
        if self.kind == "git":
            self.git.commit(state, f"step {step}")
        else:
            self.thread.put(state, step)

    def size(self) -> int:
        if self.kind == "git":
            return tree_size(self.path / ".git")
        if self.kind == "sqlite":
            assert self.conn is not None
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the WAL folded in, as after close
            return sum(store_files(self.path).values())
        return sum(peer_bench.memory_saver_bytes(self.saver))

    def latest(self, state: dict[str, Any]) -> dict[str, Any]:
        if self.kind == "git":
            return peer_bench.git_head_state(self.git, state)
        return copy.deepcopy(self.saver.get_tuple(self.thread.config).checkpoint["channel_values"])

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


# --- reporting -------------------------------------------------------------------------


def section(results: dict[str, PartResult], scale: Scale, seed: int) -> Section:
    report = results["snapvc"].value
    snap = Curve("snapvc", sizes=dict(report.growth))
    curves = [snap] + [results[kind].value for kind in PEERS if kind in results]
    points = [0, *scale.growth_steps]
    header = ["steps"]
    for curve in curves:
        header += [curve.name, "per step"]
    rows = []
    for k, point in enumerate(points):
        row = [f"{point:,}"]
        for curve in curves:
            if point not in curve.sizes:
                row += ["not run (over budget)", "-"]
                continue
            if not k:
                row += [size(curve.sizes[point]), "-"]
                continue
            previous = points[k - 1]
            row += [size(curve.sizes[point]), size((curve.sizes[point] - curve.sizes[previous]) / (point - previous))]
        rows.append(row)
    # How much the per-step increment grew from the first interval to the last one reached.
    growth_row = ["last / first per-step increment"]
    for curve in curves:
        reached = [p for p in points if p in curve.sizes]
        if len(reached) < 3:
            growth_row += ["-", "-"]
            continue
        first = (curve.sizes[reached[1]] - curve.sizes[0]) / reached[1]
        a, b = reached[-2], reached[-1]
        last = (curve.sizes[b] - curve.sizes[a]) / (b - a)
        if first <= 0:  # a quick run's first interval may fit in the pages the file had already
            growth_row += ["-", ""]
            continue
        growth_row += [f"{last / first:.2f}x (to {b:,} steps)", ""]
    rows.append(growth_row)
    common = [p for p in points if all(p in c.sizes for c in curves)]
    if common and len(curves) > 1:
        at = common[-1]
        ratio_row = [f"snapvc / peer at {at:,} steps", "", ""]
        for curve in curves[1:]:
            ratio_row += [f"{snap.sizes[at] / curve.sizes[at]:.3g}x", ""]
        rows.append(ratio_row)
    notes = [
        "snapvc: the SQLite file after close, at each point (the repository is then opened again, "
        "so the next commit encodes the whole state again); SqliteSaver: its file after "
        "`PRAGMA wal_checkpoint(TRUNCATE)`; InMemorySaver: serialized channel blobs and checkpoints.",
        "steps 0: the initial state alone. per step: the increment since the previous point "
        "divided by the steps between them; linear growth keeps it flat, quadratic growth makes "
        "it grow with the step (by about the ratio of the intervals' mean steps).",
    ]
    checks = list(report.checks)
    for curve in curves[1:]:
        reached = ", ".join(f"{p:,} steps at {duration(t)}" for p, t in curve.elapsed.items())
        notes.append(f"{curve.name}: time to reach each point: {reached}." + (f" {curve.stopped}." if curve.stopped else ""))
        checks += curve.checks
    body = [
        Table(header, rows, f"Stored bytes after each number of steps (seed {seed})"),
        *report_blocks(report),
    ]
    return Section(
        NAME,
        f"{TITLE}: stored bytes from {points[1]:,} to {points[-1]:,} steps",
        "The agent run of the previous section, continued to "
        f"{points[-1]:,} steps, with the stored bytes recorded after {', '.join(f'{p:,}' for p in points[1:])} "
        "steps for snapvc and for each peer (each peer in its own process; a peer stops where "
        f"its next point is predicted to take it past {duration(scale.peer_budget_s)}, and the "
        "table says so: nothing is extrapolated). Below the curve, snapvc's full report of the "
        f"{points[-1]:,}-step run (no tracemalloc run at this length), with its commit times "
        "through the `State` working copy and with the state rebuilt each step, and the first "
        "commit after reopening it in a new process.",
        body,
        notes=notes,
        checks=checks,
        summary=[summary_row(f"agent run, {report.steps:,} steps", report.figures(), results["snapvc"])],
    )
