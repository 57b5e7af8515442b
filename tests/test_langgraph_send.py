"""SnapvcSaver stores LangGraph's ``Send`` as snapvc values: the messages of a ``Send``
that carries the state (as ``create_react_agent`` sends each tool call) are stored as the
``messages`` channel's own, so one listing builds each message once and a checkpoint's
``Send`` shares them with its channel. What comes back is what InMemorySaver gives back:
an equal ``Send`` in the checkpoint's ``__pregel_tasks`` and in the pending writes, also
after a message was changed in place, after a reload, with a timeout, and with an
argument only LangGraph's serializer can store.

Each graph runs on InMemorySaver and on SnapvcSaver with ``durability="sync"``; the
SnapvcSaver side is read back by a saver opened again on the file."""

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Send

from snapvc.integrations.langgraph import SnapvcSaver

CONFIG = {"configurable": {"thread_id": "t"}}


class Chat(TypedDict):
    messages: Annotated[list, add_messages]


def _agent(saver: BaseCheckpointSaver, *, edit: Callable[[list[Any], int], None] | None = None,
           extra: Callable[[int], dict[str, Any]] | None = None) -> Any:
    """A ReAct loop as ``create_react_agent`` (v2) builds it: the model asks for a tool,
    the route sends the tool call to the tool node with the whole state in a ``Send``,
    the tool answers, the model answers. ``edit(messages, turn)`` runs in the model node
    first (changing old messages in place); ``extra(turn)`` adds to the Send's argument."""

    def model(state: Chat) -> dict[str, Any]:
        messages = state["messages"]
        turn = sum(isinstance(m, HumanMessage) for m in messages)
        if isinstance(messages[-1], ToolMessage):
            return {"messages": [AIMessage(f"answer {turn}", id=f"answer-{turn}")]}
        if edit is not None:
            edit(messages, turn)
        call = {"name": "search", "args": {"query": f"q{turn}"}, "id": f"call-{turn}", "type": "tool_call"}
        return {"messages": [AIMessage(f"thinking {turn}", tool_calls=[call], id=f"ask-{turn}")]}

    def route(state: Chat) -> Any:
        last = state["messages"][-1]
        if not last.tool_calls:
            return END
        turn = sum(isinstance(m, HumanMessage) for m in state["messages"])
        arg = {"__type": "tool_call_with_context", "tool_call": last.tool_calls[0], "state": state,
               **(extra(turn) if extra is not None else {})}
        return [Send("tools", arg)]

    def tools(arg: dict[str, Any]) -> dict[str, Any]:
        call = arg["tool_call"]
        seen = len(arg["state"]["messages"])
        return {"messages": [ToolMessage(f"found {call['args']['query']} after {seen}", tool_call_id=call["id"],
                                         id=f"tool-{call['id']}")]}

    builder = StateGraph(Chat)
    builder.add_node("model", model)
    builder.add_node("tools", tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route, ["tools", END])
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=saver)


def _turn(graph: Any, turn: int) -> None:
    # Long enough that a list of them is stored as an object of its own, not inline in
    # its parent (what a real history is).
    question = f"question {turn}: " + " ".join(f"word{turn}-{i}" for i in range(300))
    graph.invoke({"messages": [HumanMessage(question, id=f"human-{turn}")]}, CONFIG, durability="sync")


def _listing(saver: BaseCheckpointSaver) -> list[tuple[Any, list[tuple[str, Any]]]]:
    """Every checkpoint's channel values and its writes (channel and value: task ids are
    made from checkpoint ids, which differ from run to run)."""
    return [(t.checkpoint["channel_values"], [(w[1], w[2]) for w in t.pending_writes]) for t in saver.list(CONFIG)]


def _sends(listing: list[tuple[Any, list[tuple[str, Any]]]]) -> list[Send]:
    found = [v for values, _ in listing for v in values.get("__pregel_tasks", [])]
    return found + [value for _, writes in listing for channel, value in writes if type(value) is Send]


def _compare(tmp_path: Path, turns: int, build: Callable[[BaseCheckpointSaver], Any], *,
             reopen_each_turn: bool = False) -> list[tuple[Any, list[tuple[str, Any]]]]:
    memory = InMemorySaver()
    graph = build(memory)
    for turn in range(turns):
        _turn(graph, turn)
    expected = _listing(memory)
    path = tmp_path / "send.snapvc"
    if reopen_each_turn:  # a new saver for every turn, as a new process would be
        for turn in range(turns):
            with SnapvcSaver(path) as saver:
                _turn(build(saver), turn)
    else:
        with SnapvcSaver(path) as saver:
            graph = build(saver)
            for turn in range(turns):
                _turn(graph, turn)
    with SnapvcSaver(path) as reopened:
        stored = _listing(reopened)
    assert stored == expected
    sends = _sends(stored)
    assert len(sends) == 2 * turns and sends == _sends(expected)
    for got, want in zip(sends, _sends(expected)):
        assert type(got) is Send and got.timeout == want.timeout
        assert [type(m) for m in got.arg["state"]["messages"]] == [type(m) for m in want.arg["state"]["messages"]]
    return stored


def test_a_send_holding_the_state_comes_back_equal(tmp_path: Path) -> None:
    _compare(tmp_path, 4, _agent)


def test_a_send_comes_back_equal_when_each_turn_runs_on_a_new_saver(tmp_path: Path) -> None:
    _compare(tmp_path, 4, _agent, reopen_each_turn=True)


def test_a_listing_builds_the_messages_of_a_send_once_shared_with_its_channel(tmp_path: Path) -> None:
    stored = _compare(tmp_path, 3, _agent)
    # The checkpoint whose tasks hold the Send has the messages the Send carries: stored
    # as the same objects, they are built once and shared.
    for values, _ in stored:
        for send in values.get("__pregel_tasks", []):
            carried = send.arg["state"]["messages"]
            assert len(carried) == len(values["messages"]) >= 2
            assert all(a is b for a, b in zip(carried, values["messages"]))
    # And the write that made it, one checkpoint earlier, shares them too.
    written = [value for _, writes in stored for channel, value in writes if type(value) is Send]
    tasks = [send for values, _ in stored for send in values.get("__pregel_tasks", [])]
    assert len(written) == len(tasks) == 3
    for write, task in zip(written, tasks):
        assert all(a is b for a, b in zip(write.arg["state"]["messages"], task.arg["state"]["messages"]))


def _edit_old(messages: list[Any], turn: int) -> None:
    """Change old messages in place before the Send carries them: a field set, a nested dict changed."""
    if turn >= 2:
        messages[0].content = f"question 0, edited in turn {turn}"
        messages[1].tool_calls[0]["args"]["query"] = f"q0, edited in turn {turn}"


def test_a_message_changed_in_place_is_stored_as_changed_in_the_send(tmp_path: Path) -> None:
    stored = _compare(tmp_path, 4, lambda saver: _agent(saver, edit=_edit_old))
    latest = [s for s in _sends(stored)][0]
    assert latest.arg["state"]["messages"][0].content == "question 0, edited in turn 4"


def test_a_send_with_a_timeout_comes_back_with_it(tmp_path: Path) -> None:
    # A sync graph refuses timeouts: the checkpointer's own API puts the Send.
    from langgraph.checkpoint.base import empty_checkpoint

    send = Send("tools", {"state": {"messages": [HumanMessage("hi", id="h")]}}, timeout=30)
    got = []
    for saver in (InMemorySaver(), SnapvcSaver(tmp_path / "timeout.snapvc")):
        checkpoint = empty_checkpoint()
        config = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, checkpoint, {"step": 0}, {})
        saver.put_writes(config, [("__pregel_tasks", send)], "task-1")
        got.append(saver.get_tuple(config).pending_writes)
    assert got[0] == got[1] == [("task-1", "__pregel_tasks", send)]
    assert got[1][0][2].timeout == send.timeout and got[1][0][2].timeout is not None


def test_a_send_whose_argument_only_the_serializer_stores_comes_back_equal(tmp_path: Path) -> None:
    def build(saver: BaseCheckpointSaver) -> Any:
        return _agent(saver, extra=lambda turn: {"tags": {f"turn-{turn}", "tool"}})  # a set: snapvc refuses it

    stored = _compare(tmp_path, 3, build)
    assert all(type(send.arg["tags"]) is set for send in _sends(stored))
