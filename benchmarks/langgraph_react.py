"""A LangGraph ReAct agent, turn after turn on one thread, on three checkpointers.

The agent is LangGraph's own: ``langgraph.prebuilt.create_react_agent`` with a
``ToolNode`` of two tools (``search`` and ``read_file``) and a scripted chat model
(``ScriptedChatModel``, a ``langchain_core`` fake chat model whose ``bind_tools``
returns itself). Each turn is one ``graph.invoke`` with a new ``HumanMessage`` on the
same thread (``durability="sync"``): the model answers with an ``AIMessage`` holding one
tool call, the tool node runs the tool and adds its ``ToolMessage``, the model answers
the question. Four messages a turn, five checkpoints a turn; the history grows by
``add_messages``, which copies the list and appends, so a saver sees a new list holding
the same message objects at every checkpoint. Every text (question, the model's words,
the tool's call arguments and result, the answer) is drawn from ``TextGenerator`` with
the seed and the turn, with realistic lengths, and every message has an id made from its
turn: same seed, same messages, in every process.

Parts, each in a process of its own, the same turns on each saver:

- ``snapvc``: ``SnapvcSaver`` on a new repository file;
- ``memory``: LangGraph's ``InMemorySaver``;
- ``sqlite``: LangGraph's ``SqliteSaver`` on a new SQLite file.

Each part times every turn (``invoke``, wall and CPU time) and every ``put``, then ``graph.get_state`` and
the first item of the saver's own ``list`` (medians of ``Scale.repeats``), the first item
of ``graph.get_state_history`` and the full ``list(graph.get_state_history(config))``
(once each: LangGraph reads the saver's whole list before yielding a first item, and a
listing takes seconds to a minute on the peers), and the stored bytes after the saver is closed
(``InMemorySaver``: its serialized blobs and checkpoints). It checks that the thread's
messages are the script's, that the history holds every checkpoint with the messages of
its place in the run, and the section checks that every saver ends with the same messages.
"""

# No ``from __future__ import annotations`` here: the tools are defined in a function,
# after LangGraph is imported, and LangChain reads their annotations (``InjectedToolCallId``)
# as objects.

import hashlib
import json
import random
import sqlite3
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import snapvc
from benchmarks.langgraph_graph import timed_saver
from benchmarks.measure import (
    BenchmarkFailure,
    PartResult,
    Scale,
    Section,
    StoreFigures,
    Table,
    check,
    duration,
    measure_store,
    median_time,
    ratio,
    size,
    store_files,
    summary_row,
)
from benchmarks.workload import TextGenerator

__all__ = ["NAME", "TITLE", "RESULTS", "ReactFigures", "SnapvcReactFigures", "Script", "parts", "run", "section",
           "build_agent"]  # fmt: skip

NAME = "langgraph-react"
TITLE = "LangGraph: a ReAct agent on SnapvcSaver, InMemorySaver and SqliteSaver"
THREAD = "react-1"
WINDOW = 50
CHECKPOINTS_PER_TURN = 5  # the input, the turn's first loop step, the model, the tools, the model
MESSAGES_PER_TURN = 4
SYSTEMS = {"snapvc": "SnapvcSaver", "memory": "InMemorySaver", "sqlite": "SqliteSaver"}
TOOL_NAMES = ("search", "read_file")


# --- the script ------------------------------------------------------------------------


@dataclass
class _Turn:
    question: str
    tool: str
    arguments: dict[str, Any]
    said: str  # the model's words beside its tool call
    result: str  # the tool's result
    answer: str


class Script:
    """The conversation of ``turns`` turns drawn from ``seed``: what the user asks, what
    the model says and calls, what the tool returns, what the model answers. Turn ``t``
    draws from its own generator, so it is the same however many turns are made."""

    def __init__(self, seed: int, turns: int) -> None:
        text = TextGenerator(seed)
        self.turns: list[_Turn] = []
        for t in range(turns):
            rng = random.Random(seed * 1_000_003 + t)
            tool = rng.choice(TOOL_NAMES)
            if tool == "search":
                arguments: dict[str, Any] = {"query": text.phrase(rng, 12, 60), "limit": rng.randint(3, 20)}
            else:
                arguments = {"path": "/".join(text.words(rng, rng.randint(2, 4))) + ".md"}
            self.turns.append(_Turn(
                question=text.text(rng, rng.randint(50, 400)),
                tool=tool,
                arguments=arguments,
                said=text.text(rng, rng.randint(100, 1500)),
                result=text.text(rng, rng.randint(200, 3000)),
                answer=text.text(rng, rng.randint(200, 2000)),
            ))  # fmt: skip

    def human(self, t: int) -> Any:
        from langchain_core.messages import HumanMessage

        return HumanMessage(content=self.turns[t].question, id=f"human-{t}")

    def tool_call(self, t: int) -> Any:
        from langchain_core.messages import AIMessage

        turn = self.turns[t]
        call = {"name": turn.tool, "args": turn.arguments, "id": f"call_{t}", "type": "tool_call"}
        return AIMessage(content=turn.said, id=f"ai-{t}-call", tool_calls=[call])

    def tool_result(self, call_id: str) -> Any:
        from langchain_core.messages import ToolMessage

        t = int(call_id.removeprefix("call_"))
        return ToolMessage(content=self.turns[t].result, tool_call_id=call_id, id=f"tool-{t}")

    def answer(self, t: int) -> Any:
        from langchain_core.messages import AIMessage

        return AIMessage(content=self.turns[t].answer, id=f"ai-{t}-answer")

    def messages(self, turns: int) -> list[Any]:
        """The thread's messages after ``turns`` turns."""
        out = []
        for t in range(turns):
            out += [self.human(t), self.tool_call(t), self.tool_result(f"call_{t}"), self.answer(t)]
        return out


def _scripted_model(script: Script) -> Any:
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import HumanMessage, ToolMessage

    class ScriptedChatModel(FakeMessagesListChatModel):
        """The script's replies in order: a tool call after each question, an answer after
        each tool result. A reply asked for at any other point of the conversation raises
        ``BenchmarkFailure`` (the agent did not run as scripted)."""

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self  # the script knows its tools

        def _generate(self, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
            t, answering = divmod(self.i, 2)
            last = messages[-1]
            due = (isinstance(last, ToolMessage) and last.tool_call_id == f"call_{t}") if answering else (
                isinstance(last, HumanMessage) and last.id == f"human-{t}")  # fmt: skip
            if not due:
                raise BenchmarkFailure(f"the scripted model was asked for reply {self.i} after {last!r}")
            return super()._generate(messages, *args, **kwargs)

    responses = []
    for t in range(len(script.turns)):
        responses += [script.tool_call(t), script.answer(t)]
    return ScriptedChatModel(responses=responses)


def build_agent(script: Script, checkpointer: Any) -> Any:
    """``create_react_agent`` with the scripted model and a ``ToolNode`` of two tools,
    compiled with ``checkpointer``."""
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import InjectedToolCallId, tool
    from langgraph.prebuilt import ToolNode, create_react_agent

    # The tools return the script's ToolMessage, with its id, so every saver stores the
    # same messages (ToolNode would give a plain result a random id).
    @tool
    def search(query: str, limit: int, tool_call_id: Annotated[str, InjectedToolCallId]) -> ToolMessage:
        """Search the web for ``query``; at most ``limit`` results."""
        return script.tool_result(tool_call_id)

    @tool
    def read_file(path: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> ToolMessage:
        """Read the text file at ``path``."""
        return script.tool_result(tool_call_id)

    with warnings.catch_warnings():
        # LangGraph 1.x points to ``langchain.agents.create_agent``; the prebuilt agent is
        # the one this benchmark means to measure, and langchain is not a dependency.
        warnings.filterwarnings("ignore", message="create_react_agent has been moved")
        return create_react_agent(_scripted_model(script), ToolNode([search, read_file]), checkpointer=checkpointer)


def messages_digest(messages: list[Any]) -> str:
    """A digest of messages (every field, as LangChain dumps it): equal digests, equal messages."""
    dumped = [{"type": type(m).__name__, **m.model_dump()} for m in messages]
    return hashlib.sha256(json.dumps(dumped, sort_keys=True, default=repr).encode()).hexdigest()


# --- figures ---------------------------------------------------------------------------


@dataclass
class ReactFigures:
    """One saver's figures. Bytes and seconds."""

    name: str
    turns: int
    checkpoints: int
    turn_times: list[float]  # each turn's invoke
    turn_cpu: list[float]  # each turn's invoke, CPU time of the process
    put_times: list[float]  # each put
    get_state_s: float
    history_s: float  # the whole list(graph.get_state_history(config)), once
    history_first_s: float  # next(iter(graph.get_state_history(config))), once
    list_first_s: float  # next(iter(saver.list(config))), median of Scale.repeats
    stored_bytes: int
    messages_digest: str
    checks: list[str] = field(default_factory=list)

    def window(self) -> int:
        return min(WINDOW, max(1, self.turns // 2))

    def first_turns_s(self) -> float:
        return statistics.median(self.turn_times[: self.window()])

    def last_turns_s(self) -> float:
        return statistics.median(self.turn_times[-self.window() :])

    def first_cpu_s(self) -> float:
        return statistics.median(self.turn_cpu[: self.window()])

    def last_cpu_s(self) -> float:
        return statistics.median(self.turn_cpu[-self.window() :])

    def put_last_s(self) -> float:
        """The median put of the last window's turns."""
        return statistics.median(self.put_times[-self.window() * 3 :])


@dataclass
class SnapvcReactFigures:
    """The snapvc part: its saver figures and the repository's common figures."""

    saver: ReactFigures
    figures: StoreFigures


RESULTS = {"snapvc": SnapvcReactFigures, "memory": ReactFigures, "sqlite": ReactFigures}


def parts(scale: Scale, peers: bool) -> list[str]:
    return list(SYSTEMS) if peers else ["snapvc"]


# --- the parts -------------------------------------------------------------------------


def run(part: str, scale: Scale, seed: int, say: Callable[[str], None]) -> Any:
    with tempfile.TemporaryDirectory(prefix="snapvc-react-") as tmp:
        return _run(part, scale, seed, Path(tmp), say)


def _run(part: str, scale: Scale, seed: int, folder: Path, say: Callable[[str], None]) -> Any:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.sqlite import SqliteSaver

    from benchmarks.peers import memory_saver_bytes
    from snapvc.integrations.langgraph import SnapvcSaver
    from snapvc.integrations.langgraph.values import from_stored

    name = SYSTEMS[part]
    turns = scale.react_turns
    script = Script(seed, turns)
    path = folder / ("react.snapvc" if part == "snapvc" else "react.sqlite")
    if part == "snapvc":
        repo = snapvc.open(str(path))  # measure_store measures and closes it
        saver: Any = timed_saver(SnapvcSaver)(repo)
    elif part == "sqlite":
        conn = sqlite3.connect(str(path), check_same_thread=False)
        saver = timed_saver(SqliteSaver)(conn)
    else:
        saver = timed_saver(InMemorySaver)()
    saver.put_times = []
    graph = build_agent(script, saver)
    config = {"configurable": {"thread_id": THREAD}}
    turn_times = []
    turn_cpu = []
    say(f"  {name}: {turns} turns")
    for t in range(turns):
        t0, c0 = time.perf_counter(), time.process_time()
        graph.invoke({"messages": [script.human(t)]}, config, durability="sync")
        turn_times.append(time.perf_counter() - t0)
        turn_cpu.append(time.process_time() - c0)
        if (t + 1) % max(1, turns // 6) == 0:
            say(f"  {name}: turn {t + 1}/{turns}, {duration(turn_times[-1])}")
    checks: list[str] = []
    latest = graph.get_state(config)
    messages = latest.values["messages"]
    check(messages == script.messages(turns), checks, f"{name}: the thread's messages are the script's {turns} turns")
    get_state_s = median_time(scale.repeats, lambda: graph.get_state(config))
    list_first_s = median_time(scale.repeats, lambda: _first(saver.list(config)))
    say(f"  {name}: the whole history")
    # Once: LangGraph's get_state_history reads the saver's whole list before its first
    # item ("eagerly consume list() to avoid holding up the db cursor"), so this costs
    # about a full listing.
    history_first_s = median_time(1, lambda: _first(graph.get_state_history(config)))
    t0 = time.perf_counter()
    history = list(graph.get_state_history(config))
    history_s = time.perf_counter() - t0
    want = turns * CHECKPOINTS_PER_TURN
    check(len(history) == want and len({h.config["configurable"]["checkpoint_id"] for h in history}) == want, checks,
          f"{name}: get_state_history lists {want} checkpoints")  # fmt: skip
    # Oldest first, the k-th checkpoint of turn t holds 4t + k messages.
    counts = [len(h.values.get("messages", [])) for h in reversed(history)]
    check(counts == [MESSAGES_PER_TURN * (k // CHECKPOINTS_PER_TURN) + k % CHECKPOINTS_PER_TURN for k in range(want)],
          checks, f"{name}: each checkpoint in the history holds the messages of its place in the run")  # fmt: skip
    check(history[0].values["messages"] == messages, checks, f"{name}: the newest checkpoint is the thread's state")
    digest = messages_digest(messages)
    figures = None
    if part == "snapvc":
        saver.close()
        # The thread's branch holds the channels as stored (messages as marked plain dicts):
        # what measure_store checks out again must be that.
        expected = repo.checkout(THREAD)
        check(from_stored(expected["messages"]) == messages, checks,
              f"{name}: the thread's branch checks out to the thread's messages")  # fmt: skip
        commits = sum(1 for _ in repo.log(THREAD))
        figures = measure_store(repo, path, THREAD, expected, ("messages", len(messages) - 1), saver.put_times,
                                checks, scale.repeats, commits=commits)  # fmt: skip
        stored = sum(store_files(path).values())
    elif part == "sqlite":
        conn.close()
        stored = sum(store_files(path).values())
    else:
        stored = sum(memory_saver_bytes(saver))
    say(f"  {name}: {size(stored)}, get_state {duration(get_state_s)}, history {duration(history_s)}")
    result = ReactFigures(name, turns, len(history), turn_times, turn_cpu, saver.put_times, get_state_s, history_s,
                          history_first_s, list_first_s, stored, digest, checks)  # fmt: skip
    if part == "snapvc":
        assert figures is not None
        return SnapvcReactFigures(result, figures)
    return result


def _first(items: Any) -> Any:
    """The first item of an iterator; a generator is then closed (a SQLite saver's
    generator holds its connection's lock until it is)."""
    try:
        return next(items)
    finally:
        if isinstance(items, Generator):
            items.close()


# --- the section -----------------------------------------------------------------------


def section(results: dict[str, PartResult], scale: Scale, seed: int) -> Section:
    snap: SnapvcReactFigures = results["snapvc"].value
    ours = snap.saver
    savers = [ours] + [results[p].value for p in ("memory", "sqlite") if p in results]
    checks = [c for s in savers for c in s.checks]
    if len({s.messages_digest for s in savers}) != 1:
        raise BenchmarkFailure("the savers end the thread with different messages: "
                               + ", ".join(f"{s.name} {s.messages_digest[:12]}" for s in savers))  # fmt: skip
    if len(savers) > 1:
        checks.append("every saver ends the thread with the same messages")
    w = ours.window()
    header = ["saver", f"turn, median of first {w}", f"turn, median of last {w}", "last / first",
              f"put, median (last {w} turns)", f"get_state (median of {scale.repeats})",
              f"saver.list, first item (median of {scale.repeats})", "get_state_history, first item",
              "get_state_history, all", "stored bytes"]  # fmt: skip
    rows = [[s.name, duration(s.first_turns_s()), duration(s.last_turns_s()),
             f"{s.last_turns_s() / s.first_turns_s():.2f}x",
             duration(s.put_last_s()), duration(s.get_state_s), duration(s.list_first_s), duration(s.history_first_s),
             f"{duration(s.history_s)} ({s.checkpoints:,} checkpoints)", size(s.stored_bytes)]
            for s in savers]  # fmt: skip
    for other in savers[1:]:
        rows.append([f"SnapvcSaver / {other.name}", ratio(ours.first_turns_s(), other.first_turns_s()),
                     ratio(ours.last_turns_s(), other.last_turns_s()), "", ratio(ours.put_last_s(), other.put_last_s()),
                     ratio(ours.get_state_s, other.get_state_s), ratio(ours.list_first_s, other.list_first_s),
                     ratio(ours.history_first_s, other.history_first_s),
                     ratio(ours.history_s, other.history_s), ratio(ours.stored_bytes, other.stored_bytes)])  # fmt: skip
    cpu_rows = [[s.name, duration(s.first_cpu_s()), duration(s.last_cpu_s()), f"{s.last_cpu_s() / s.first_cpu_s():.2f}x"]
                for s in savers]  # fmt: skip
    for other in savers[1:]:
        cpu_rows.append([f"SnapvcSaver / {other.name}", ratio(ours.first_cpu_s(), other.first_cpu_s()),
                         ratio(ours.last_cpu_s(), other.last_cpu_s()), ""])  # fmt: skip
    turns = ours.turns
    return Section(
        name=NAME,
        title=TITLE,
        intro=(f"LangGraph's prebuilt ReAct agent (`create_react_agent`, a `ToolNode` of two tools, a scripted "
               f"chat model from `langchain_core`) for {turns} turns on one thread (seed {seed}): each turn one "
               "`invoke` with a new question, the model's tool call, the tool's result and the model's answer: "
               f"{MESSAGES_PER_TURN} messages and {CHECKPOINTS_PER_TURN} checkpoints a turn, "
               f"{turns * MESSAGES_PER_TURN:,} messages and {turns * CHECKPOINTS_PER_TURN:,} checkpoints in all. "
               "Each saver runs in a process of its own; stored bytes after close."),
        body=[
            Table(header, rows, f"LangGraph ReAct agent, {turns} turns"),
            "\n".join([
                "A turn is the wall time of one `graph.invoke` (model, tools and the saver's puts and",
                "reads); \"last / first\" is how much a turn slowed down over the run. The full history",
                "listing and its first item are timed once: LangGraph's `get_state_history` reads the",
                "saver's whole `list` before it yields its first item, so that costs about a full",
                "listing; `saver.list`'s own first item and `get_state` are medians. `add_messages` hands",
                "the saver a new message list at every checkpoint, holding the same message objects as",
                "the last one plus the new ones. InMemorySaver's stored bytes are its serialized blobs",
                "and checkpoints.",
            ]),
            Table(["saver", f"turn CPU, median of first {w}", f"turn CPU, median of last {w}", "last / first"], cpu_rows,
                  f"CPU time of the process per turn, {turns} turns"),
            "\n".join([
                "The same turns in CPU time (`time.process_time`, every thread of the process): what",
                "the machine's other work adds to the wall times above does not count here.",
            ]),
        ],
        checks=checks,
        summary=[summary_row("langgraph ReAct agent, SnapvcSaver", snap.figures, results["snapvc"])],
    )
