"""A LangGraph ``StateGraph`` running the agent run: 500 supersteps on three checkpointers.

The graph has one node, ``agent``, that loops on itself until ``Scale.agent_steps``
steps are done. Step ``i`` makes the changes ``benchmarks.workload.AgentRun`` makes
(seed ``seed``): two new messages, three scratchpad notes replaced, every 10th step one
document edited, the counters bumped. The node returns only what it changed, as a
LangGraph node does; ``messages`` is a channel with an add reducer, so LangGraph holds
the whole history and the savers see it grow by two messages a step. One ``invoke``
with ``durability="sync"`` runs every step: ``steps + 2`` checkpoints (the input, the
first loop checkpoint, one per step).

Parts, each with the same graph and steps:

- ``snapvc``: ``SnapvcSaver`` on a new repository file;
- ``sqlite``: LangGraph's ``SqliteSaver`` on a new SQLite file;
- ``delta``: ``SqliteSaver`` with ``messages`` and ``documents`` as LangGraph's
  ``DeltaChannel`` (beta; the node then returns only the changed document, and a
  snapshot of each channel is stored every 100 updates, LangGraph's default).

Each part times every ``put`` (the saver's own call; the median of the last 50),
``graph.get_state`` on the open saver (median of ``Scale.repeats``) and
``list(graph.get_state_history)`` (median of 3; once for ``delta``, which takes
seconds), and records the stored bytes after the saver is closed. It checks that the
latest state equals the agent run's state in memory and that the history holds every
checkpoint.
"""

from __future__ import annotations

import operator
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypedDict

import snapvc
from benchmarks.measure import (
    PartResult,
    Scale,
    Section,
    StoreFigures,
    Table,
    check,
    duration,
    measure_store,
    median_time,
    percentile,
    ratio,
    size,
    store_files,
    summary_row,
)
from benchmarks.workload import AgentRun

__all__ = ["NAME", "TITLE", "RESULTS", "SaverFigures", "SnapvcFigures", "parts", "run", "section", "build_graph"]

NAME = "langgraph"
TITLE = "LangGraph: a StateGraph on SnapvcSaver and SqliteSaver"
WINDOW = 50
HISTORY_REPEATS = 3
THREAD = "run-1"
SYSTEMS = {"snapvc": "SnapvcSaver", "sqlite": "SqliteSaver", "delta": "SqliteSaver + DeltaChannel"}


@dataclass
class SaverFigures:
    """One saver's figures. Bytes and seconds."""

    name: str
    checkpoints: int
    stored_bytes: int
    put_median_s: float
    put_p99_s: float
    get_state_s: float
    history_s: float
    history_repeats: int
    checks: list[str] = field(default_factory=list)


@dataclass
class SnapvcFigures:
    """The snapvc part: its saver figures and the repository's common figures."""

    saver: SaverFigures
    figures: StoreFigures
    branches: list[str]


RESULTS = {"snapvc": SnapvcFigures, "sqlite": SaverFigures, "delta": SaverFigures}


def parts(scale: Scale, peers: bool) -> list[str]:
    return ["snapvc", "sqlite", "delta"] if peers else ["snapvc"]


# --- the graph -------------------------------------------------------------------------


def _add_all(state: list[Any] | None, writes: Sequence[Any]) -> list[Any]:
    """The DeltaChannel reducer of ``messages``: a node writes ``{"append": [...]}``,
    the graph's input a list."""
    out = list(state or [])
    for batch in writes:
        out += batch["append"] if isinstance(batch, dict) else batch
    return out


def _merge_all(state: dict[str, Any] | None, writes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out = dict(state or {})
    for update in writes:
        out.update(update)
    return out


def build_graph(run: AgentRun, steps: int, *, delta: bool = False) -> Any:
    """The graph (not compiled): ``agent`` makes step ``i`` of ``run`` until ``steps``."""
    from langgraph.graph import END, START, StateGraph

    # The functional form: its annotations are evaluated here, where the names are.
    if delta:
        from langgraph.channels import DeltaChannel

        messages: Any = Annotated[list, DeltaChannel(_add_all)]
        documents: Any = Annotated[dict, DeltaChannel(_merge_all)]
    else:
        messages, documents = Annotated[list, operator.add], dict
    schema = TypedDict("AgentState", {"messages": messages, "scratchpad": dict, "documents": documents,  # type: ignore[misc]  # noqa: UP013
                                      "counters": dict, "task": dict})

    def agent(state: dict[str, Any]) -> dict[str, Any]:
        i = state["counters"]["step"] + 1
        # The step works on shallow copies: the node changes nothing it was given.
        work = {"messages": [], "scratchpad": dict(state["scratchpad"]), "documents": dict(state["documents"]),
                "counters": dict(state["counters"]), "task": state["task"]}
        run.step(work, i)
        # A DeltaChannel turns message dicts in a list into LangChain messages, which the
        # agent run's tool calls are not: its writes are {"append": [...]} instead.
        new = {"append": work["messages"]} if delta else work["messages"]
        update = {"messages": new, "scratchpad": work["scratchpad"], "counters": work["counters"]}
        changed = [k for k, doc in work["documents"].items() if doc is not state["documents"][k]]
        if changed:
            update["documents"] = {k: work["documents"][k] for k in changed} if delta else work["documents"]
        return update

    def again(state: dict[str, Any]) -> str:
        return END if state["counters"]["step"] >= steps else "agent"

    builder = StateGraph(schema)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", again, ["agent", END])
    return builder


def timed_saver(cls: type) -> type:
    """``cls`` with every ``put`` timed into ``put_times``."""

    class Timed(cls):  # type: ignore[misc, valid-type]
        put_times: list[float]

        def put(self, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            out = super().put(*args, **kwargs)
            self.put_times.append(time.perf_counter() - t0)
            return out

    Timed.__name__ = cls.__name__
    return Timed


def _expected(scale: Scale, seed: int) -> dict[str, Any]:
    run = AgentRun(seed=seed, documents=scale.documents, doc_size=scale.doc_size)
    state = run.initial_state()
    for i in range(1, scale.agent_steps + 1):
        run.step(state, i)
    return state


# --- the parts -------------------------------------------------------------------------


def run(part: str, scale: Scale, seed: int, say: Callable[[str], None]) -> Any:
    with tempfile.TemporaryDirectory(prefix="snapvc-langgraph-") as tmp:
        return _run(part, scale, seed, Path(tmp), say)


def _run(part: str, scale: Scale, seed: int, folder: Path, say: Callable[[str], None]) -> Any:
    from langgraph.checkpoint.sqlite import SqliteSaver

    from snapvc.integrations.langgraph import SnapvcSaver

    name = SYSTEMS[part]
    steps = scale.agent_steps
    run_ = AgentRun(seed=seed, documents=scale.documents, doc_size=scale.doc_size)
    graph_builder = build_graph(run_, steps, delta=part == "delta")
    path = folder / ("graph.snapvc" if part == "snapvc" else "graph.sqlite")
    if part == "snapvc":
        repo = snapvc.open(str(path))  # measure_store measures and closes it
        saver: Any = timed_saver(SnapvcSaver)(repo)
    else:
        conn = sqlite3.connect(str(path), check_same_thread=False)
        saver = timed_saver(SqliteSaver)(conn)
    saver.put_times = []
    graph = graph_builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": THREAD}, "recursion_limit": steps + 10}
    say(f"  {name}: {steps} supersteps")
    graph.invoke(run_.initial_state(), config, durability="sync")
    checks: list[str] = []
    expected = _expected(scale, seed)
    latest = graph.get_state(config)
    check(latest.values == expected, checks, f"{name}: the latest state equals the agent run's state in memory")
    get_state_s = median_time(scale.repeats, lambda: graph.get_state(config))
    repeats = 1 if part == "delta" else HISTORY_REPEATS
    history: list[Any] = []
    history_s = median_time(repeats, lambda: history.__setitem__(slice(None), graph.get_state_history(config)))
    check(len(history) == steps + 2, checks, f"{name}: get_state_history lists {steps + 2} checkpoints")
    check([h.metadata["step"] for h in history] == list(range(steps, -2, -1)), checks,
          f"{name}: the history is newest first, steps {steps} to -1")  # fmt: skip
    middle = history[len(history) // 2]
    check(len(middle.values["messages"]) == 2 * middle.metadata["step"], checks,
          f"{name}: a checkpoint in the middle of the history holds the messages of its step")  # fmt: skip
    put_times = saver.put_times
    figures = None
    branches: list[str] = []
    if part == "snapvc":
        branches = sorted(repo.branches())
        want = dict(saver.get_tuple(config).checkpoint["channel_values"])
        check({k: want[k] for k in expected} == expected, checks,
              f"{name}: the thread's branch holds the graph's channels, equal to the state in memory")  # fmt: skip
        saver.close()
        figures = measure_store(repo, path, THREAD, want, ("messages", len(expected["messages"]) - 1), put_times,
                                checks, scale.repeats, commits=steps + 2)  # fmt: skip
    else:
        saver.conn.close()
    stored = sum(store_files(path).values())
    say(f"  {name}: {size(stored)}, get_state {duration(get_state_s)}, history {duration(history_s)}")
    result = SaverFigures(name, len(history), stored, statistics.median(put_times[-WINDOW:]),
                          percentile(put_times, 99), get_state_s, history_s, repeats, checks)
    if part == "snapvc":
        assert figures is not None
        return SnapvcFigures(result, figures, branches)
    return result


# --- the section -----------------------------------------------------------------------


def section(results: dict[str, PartResult], scale: Scale, seed: int) -> Section:
    snap: SnapvcFigures = results["snapvc"].value
    savers = [snap.saver] + [results[p].value for p in ("sqlite", "delta") if p in results]
    header = ["saver", "stored bytes", f"put (median of last {WINDOW})", "put p99",
              f"get_state (median of {scale.repeats})", "get_state_history"]  # fmt: skip
    rows = [[s.name, size(s.stored_bytes), duration(s.put_median_s), duration(s.put_p99_s), duration(s.get_state_s),
             f"{duration(s.history_s)} ({s.checkpoints} checkpoints, median of {s.history_repeats})"]
            for s in savers]  # fmt: skip
    for other in savers[1:]:
        rows.append([f"SnapvcSaver / {other.name}", ratio(snap.saver.stored_bytes, other.stored_bytes),
                     ratio(snap.saver.put_median_s, other.put_median_s), ratio(snap.saver.put_p99_s, other.put_p99_s),
                     ratio(snap.saver.get_state_s, other.get_state_s), ratio(snap.saver.history_s, other.history_s)])
    checks = [c for s in savers for c in s.checks]
    return Section(
        name=NAME,
        title=TITLE,
        intro=(f"A StateGraph of {scale.agent_steps} supersteps (seed {seed}): one node making the agent run's "
               "changes, messages on an add reducer, one checkpoint per superstep; stored bytes after close."),
        body=[
            Table(header, rows, f"LangGraph savers, {scale.agent_steps} supersteps"),
            "Branches of the SnapvcSaver repository: " + ", ".join(f"`{b}`" for b in snap.branches) + ".",
        ],
        notes=[f"The repository's figures below are those of the thread's branch `{THREAD}`."],
        checks=checks,
        summary=[summary_row("langgraph, SnapvcSaver", snap.figures, results["snapvc"])],
    )
