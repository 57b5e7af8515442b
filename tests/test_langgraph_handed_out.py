"""SnapvcSaver recognises the values it handed out: each ``invoke`` begins with a
``get_tuple`` whose fresh objects come back to the next put, grown by a reducer, and
that put appends only the new elements. What is stored stays exactly what LangGraph
holds: a message changed in place (before or after a ``get_tuple``) or replaced is
stored, and a branch another writer moved is never extended with values read before.

Each graph runs on InMemorySaver and on SnapvcSaver with ``durability="sync"`` (see
``test_langgraph_stale_state``); the SnapvcSaver side is read back by a saver opened
again on the file, so what is compared is what was stored."""

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from snapvc.integrations.langgraph import SnapvcSaver
from snapvc.integrations.langgraph.values import Watch, fresh_copies

CONFIG = {"configurable": {"thread_id": "t"}}


class Chat(TypedDict):
    messages: Annotated[list, add_messages]


def _react(saver: BaseCheckpointSaver, edit: Callable[[list[Any], int], None] | None = None) -> Any:
    """A ReAct turn as ``create_react_agent`` makes it, with ids fixed so that two runs
    are equal: the model asks for a tool, the tool answers, the model answers.
    ``edit(messages, turn)``, if given, runs in the model node first (a node changing
    the state it was given in place)."""

    def model(state: Chat) -> dict[str, Any]:
        messages = state["messages"]
        turn = sum(isinstance(m, HumanMessage) for m in messages)
        if edit is not None and not isinstance(messages[-1], ToolMessage):
            edit(messages, turn)
        if isinstance(messages[-1], ToolMessage):
            return {"messages": [AIMessage(f"answer {turn}", id=f"answer-{turn}")]}
        call = {"name": "search", "args": {"query": f"q{turn}", "options": {"top": turn}}, "id": f"call-{turn}"}
        return {"messages": [AIMessage(f"thinking {turn}", tool_calls=[call], id=f"ask-{turn}")]}

    def tools(state: Chat) -> dict[str, Any]:
        call = state["messages"][-1].tool_calls[0]
        return {"messages": [ToolMessage(f"found {call['args']['query']}", tool_call_id=call["id"],
                                         id=f"tool-{call['id']}")]}

    def route(state: Chat) -> str:
        return "tools" if state["messages"][-1].tool_calls else END

    builder = StateGraph(Chat)
    builder.add_node("model", model)
    builder.add_node("tools", tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route, ["tools", END])
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=saver)


def _turn(graph: Any, turn: int) -> None:
    graph.invoke({"messages": [HumanMessage(f"question {turn}", id=f"human-{turn}")]}, CONFIG, durability="sync")


def _history(graph: Any) -> list[tuple[int, Any, tuple[str, ...]]]:
    return [(s.metadata["step"], s.values, s.next) for s in graph.get_state_history(CONFIG)]


def _stored(path: Path, build: Callable[[BaseCheckpointSaver], Any]) -> list[tuple[int, Any, tuple[str, ...]]]:
    with SnapvcSaver(path) as reopened:
        return _history(build(reopened))


def _run(build: Callable[[BaseCheckpointSaver], Any], saver: BaseCheckpointSaver, turns: int) -> Any:
    """The graph ``build`` makes on ``saver``, after ``turns`` turns."""
    graph = build(saver)
    for turn in range(turns):
        _turn(graph, turn)
    return graph


def _in_memory(build: Callable[[BaseCheckpointSaver], Any], turns: int) -> list[tuple[int, Any, tuple[str, ...]]]:
    return _history(_run(build, InMemorySaver(), turns))


def _on_file(path: Path, build: Callable[[BaseCheckpointSaver], Any], turns: int) -> None:
    """``turns`` turns of the graph ``build`` makes, on one SnapvcSaver at ``path``."""
    with SnapvcSaver(path) as saver:
        _run(build, saver, turns)


def test_turns_on_one_saver_and_after_reloads_store_what_in_memory_saver_holds(tmp_path: Path) -> None:
    expected = _in_memory(_react, 5)
    one = tmp_path / "one.snapvc"
    _on_file(one, _react, 5)  # each invoke's get_tuple hands out the history again
    reloaded = tmp_path / "reloaded.snapvc"
    for turn in range(5):  # a new saver for every turn, as a new process would be
        with SnapvcSaver(reloaded) as saver:
            _turn(_react(saver), turn)
    assert _stored(one, _react) == expected
    assert _stored(reloaded, _react) == expected
    assert len(expected[0][1]["messages"]) == 20


def _edit_first(messages: list[Any], turn: int) -> None:
    """Change old messages in place: a field set, a nested dict changed."""
    if turn >= 2:
        messages[0].content = f"question 0, edited in turn {turn}"
        messages[1].tool_calls[0]["args"]["options"]["top"] = 100 + turn


def test_a_message_changed_in_place_is_stored(tmp_path: Path) -> None:
    def build(saver: BaseCheckpointSaver) -> Any:
        return _react(saver, _edit_first)

    expected = _in_memory(build, 4)
    path = tmp_path / "edit.snapvc"
    _on_file(path, build, 4)
    stored = _stored(path, build)
    assert stored == expected
    latest = stored[0][1]["messages"]
    assert latest[0].content == "question 0, edited in turn 4"
    assert latest[1].tool_calls[0]["args"]["options"]["top"] == 104


def _replacing(saver: BaseCheckpointSaver) -> Any:
    """Each turn first replaces the first question, as LangGraph's reducer does it: a new
    message object with the id of the old one, at its place in a new list."""

    def replace(state: Chat) -> dict[str, Any]:
        turn = sum(isinstance(m, HumanMessage) for m in state["messages"])
        return {"messages": [HumanMessage(f"question 0, replaced in turn {turn}", id="human-0")]}

    def answer(state: Chat) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(f"answer {n}", id=f"answer-{n}")]}

    builder = StateGraph(Chat)
    builder.add_node("replace", replace)
    builder.add_node("answer", answer)
    builder.add_edge(START, "replace")
    builder.add_edge("replace", "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=saver)


def test_a_message_replaced_after_a_get_tuple_is_stored(tmp_path: Path) -> None:
    expected = _in_memory(_replacing, 3)
    path = tmp_path / "replace.snapvc"
    _on_file(path, _replacing, 3)
    stored = _stored(path, _replacing)
    assert stored == expected
    assert stored[0][1]["messages"][0].content == "question 0, replaced in turn 3"


# --- what get_tuple hands out again -------------------------------------------------------


def _messages(saver: SnapvcSaver, config: Any = CONFIG) -> list[Any]:
    return saver.get_tuple(config).checkpoint["channel_values"]["messages"]


def test_the_tip_just_put_is_handed_out_as_copies_of_what_was_put_not_rebuilt(tmp_path: Path) -> None:
    with SnapvcSaver(tmp_path / "again.snapvc") as saver:
        graph = _react(saver)
        for turn in range(3):
            _turn(graph, turn)
        held = graph.invoke({"messages": [HumanMessage("question 3", id="human-3")]}, CONFIG,
                            durability="sync")["messages"]
        first, second = _messages(saver), _messages(saver)
        assert first == second == held and len(held) == 16
        for a, b, put in zip(first, second, held):
            # Copies of the objects the last put got: their text is those very str objects
            # (a message built from the stored objects has its text decoded anew) ...
            assert a.content is b.content is put.content and a.id is put.id
            # ... and every object that can change in place is a fresh one in each answer.
            assert a is not put and b is not a and a.__dict__ is not put.__dict__
            assert a.additional_kwargs is not put.additional_kwargs and a.additional_kwargs is not b.additional_kwargs
        asked = [(a, b, put) for a, b, put in zip(first, second, held) if isinstance(put, AIMessage) and put.tool_calls]
        assert asked and all(a.tool_calls[0]["args"] is not put.tool_calls[0]["args"] is not b.tool_calls[0]["args"]
                             for a, b, put in asked)
        first[1].tool_calls[0]["args"]["options"]["top"] = 99  # what a caller does to its answer
        assert held[1].tool_calls[0]["args"]["options"]["top"] == second[1].tool_calls[0]["args"]["options"]["top"] == 1
        older = list(saver.list(CONFIG))[2]  # not the working copy's commit: built from what was stored
        assert not any(a.content is b.content for a, b in zip(_messages(saver, older.config), held))
        _turn(graph, 4)  # the next put recognises the copies and stores only what was added
    with SnapvcSaver(tmp_path / "again.snapvc") as reopened:
        stored = _messages(reopened)
        assert stored[:16] == held and len(stored) == 20
    assert _stored(tmp_path / "again.snapvc", _react) == _in_memory(_react, 5)


def test_a_message_changed_in_place_after_its_put_is_read_from_what_was_stored(tmp_path: Path) -> None:
    with SnapvcSaver(tmp_path / "changed.snapvc") as saver:
        graph = _react(saver)
        held = graph.invoke({"messages": [HumanMessage("question 0", id="human-0")]}, CONFIG,
                            durability="sync")["messages"]
        held[1].tool_calls[0]["args"]["options"]["top"] = 99  # the caller changes what the run returned
        held[0].content = "changed by the caller"
        handed = _messages(saver)
        assert not any(a is b for a, b in zip(handed, held))
        assert handed[0].content == "question 0" and handed[1].tool_calls[0]["args"]["options"]["top"] == 1
        assert _messages(saver)[0] is not held[0]  # and never after
        _turn(graph, 1)
    expected = _in_memory(_react, 2)
    assert _stored(tmp_path / "changed.snapvc", _react) == expected


# --- another writer between the get_tuple and the put ------------------------------------


def _child(parent: Any, messages: list[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(checkpoint, new versions) of a checkpoint after ``parent`` whose messages are
    ``messages``, at the next version, as LangGraph makes one."""
    checkpoint = parent.checkpoint
    version = checkpoint["channel_versions"]["messages"] + 1
    child = {**checkpoint, "id": str(uuid6(clock_seq=-2)), "channel_values": {"messages": messages},
             "channel_versions": {**checkpoint["channel_versions"], "messages": version}}
    return child, {"messages": version}


def _put(saver: SnapvcSaver, parent_config: Any, checkpoint: dict[str, Any], versions: dict[str, Any],
         step: int) -> Any:
    return saver.put(parent_config, checkpoint, {"source": "loop", "step": step, "parents": {}}, versions)


def _two_turns(path: Path) -> None:
    with SnapvcSaver(path) as saver:
        graph = _react(saver)
        for turn in range(2):
            _turn(graph, turn)


def test_a_branch_moved_by_another_writer_is_not_extended_with_what_was_read_before(tmp_path: Path) -> None:
    path = tmp_path / "moved.snapvc"
    _two_turns(path)
    with SnapvcSaver(path) as mine, SnapvcSaver(path) as other:
        read = mine.get_tuple(CONFIG)
        handed = read.checkpoint["channel_values"]["messages"]
        # Another writer commits a checkpoint whose history is different ...
        theirs = other.get_tuple(CONFIG)
        rewritten = [HumanMessage("a different history", id="other-0")]
        checkpoint, versions = _child(theirs, rewritten)
        their_config = _put(other, theirs.config, checkpoint, versions, 100)
        # ... and a put on it brings the list read before theirs, grown.
        grown = [*handed, AIMessage("one more", id="more")]
        checkpoint, versions = _child(read, grown)
        mine_config = _put(mine, their_config, checkpoint, versions, 101)
        assert mine.get_tuple(mine_config).checkpoint["channel_values"]["messages"] == grown
    with SnapvcSaver(path) as reopened:
        assert reopened.get_tuple(mine_config).checkpoint["channel_values"]["messages"] == grown
        assert reopened.get_tuple(their_config).checkpoint["channel_values"]["messages"] == rewritten


def test_a_put_after_another_writer_moved_the_branch_forks_from_what_was_read(tmp_path: Path) -> None:
    path = tmp_path / "fork.snapvc"
    _two_turns(path)
    with SnapvcSaver(path) as mine, SnapvcSaver(path) as other:
        read = mine.get_tuple(CONFIG)
        theirs = other.get_tuple(CONFIG)
        checkpoint, versions = _child(theirs, [*theirs.checkpoint["channel_values"]["messages"],
                                               AIMessage("theirs", id="theirs")])
        their_config = _put(other, theirs.config, checkpoint, versions, 100)
        grown = [*read.checkpoint["channel_values"]["messages"], AIMessage("mine", id="mine")]
        checkpoint, versions = _child(read, grown)
        mine_config = _put(mine, read.config, checkpoint, versions, 100)  # a child of what it read: a fork
    with SnapvcSaver(path) as reopened:
        assert reopened.get_tuple(CONFIG).config == mine_config
        assert reopened.get_tuple(mine_config).checkpoint["channel_values"]["messages"] == grown
        theirs_now = reopened.get_tuple(their_config).checkpoint["channel_values"]["messages"]
        assert theirs_now[-1].content == "theirs" and len(theirs_now) == len(grown)


def test_an_older_checkpoint_read_is_not_taken_for_the_tip(tmp_path: Path) -> None:
    path = tmp_path / "older.snapvc"
    _two_turns(path)
    with SnapvcSaver(path) as saver:
        saver.get_tuple(CONFIG)  # the tip handed out too
        older = list(saver.list(CONFIG))[3]
        read = saver.get_tuple(older.config)
        grown = [*read.checkpoint["channel_values"]["messages"], AIMessage("from the past", id="past")]
        checkpoint, versions = _child(read, grown)
        config = _put(saver, read.config, checkpoint, versions, 100)
    with SnapvcSaver(path) as reopened:
        assert reopened.get_tuple(CONFIG).config == config
        assert reopened.get_tuple(config).checkpoint["channel_values"]["messages"] == grown


# --- the watch ---------------------------------------------------------------------------


def test_a_watch_sees_every_change_made_in_place() -> None:
    def fresh() -> list[Any]:
        call = {"name": "search", "args": {"query": "q", "options": {"top": 1}}, "id": "c"}
        return [HumanMessage("hi", id="h"), AIMessage("ask", tool_calls=[call], id="a"),
                {"plain": ["dict", {"deep": 1}]}, ("a", "tuple", ["with", "a", "list"])]

    changes: list[Callable[[list[Any]], None]] = [
        lambda v: setattr(v[0], "content", "changed"),
        lambda v: setattr(v[0], "name", "a name"),  # a field not set before: the fields set changes too
        lambda v: v[1].tool_calls[0]["args"]["options"].update(top=2),
        lambda v: v[1].tool_calls.append({"name": "x", "args": {}, "id": "d"}),
        lambda v: v[1].additional_kwargs.update(extra=1),
        lambda v: v[2]["plain"][1].update(deep=2),
        lambda v: v[2].update(more=1),
        lambda v: v[3][2].append("!"),
    ]
    for change in changes:
        values = fresh()
        watch = Watch()
        assert watch.add(values)
        assert watch.same()
        change(values)
        assert not watch.same()


def test_a_watch_refuses_what_it_cannot_prove_unchanged() -> None:
    class Opaque:
        pass

    assert not Watch().add([{"held": Opaque()}])
    assert Watch().add([1, "two", None, b"three", (4.0,)])


def test_fresh_copies_share_only_what_cannot_change_in_place() -> None:
    call = {"name": "search", "args": {"query": "q", "options": {"top": 1}}, "id": "c"}
    values = [AIMessage("ask", tool_calls=[call], id="a", additional_kwargs={"k": [1, {"deep": "x"}]}),
              {"plain": ["dict", {"deep": 1}]}, ("a", "tuple", ["with", "a", "list"]), "text", 3]
    copies = fresh_copies(values)
    assert copies == values and [type(c) for c in copies] == [type(v) for v in values]
    message, copied = values[0], copies[0]
    assert copied.model_fields_set == message.model_fields_set and copied.content is message.content
    mutable = [lambda v: v[0], lambda v: v[0].__dict__, lambda v: v[0].tool_calls, lambda v: v[0].tool_calls[0]["args"],
               lambda v: v[0].additional_kwargs["k"][1], lambda v: v[1]["plain"][1], lambda v: v[2][2],
               lambda v: v[0].__pydantic_fields_set__]
    assert all(part(copies) is not part(values) for part in mutable)
    assert copies[3] is values[3] and copies[2][0] is values[2][0]

    class Opaque:
        pass

    assert fresh_copies([{"held": Opaque()}]) is None  # only what is known is copied
    assert fresh_copies([Watch()]) is None


def test_a_turn_checks_as_many_stored_entries_at_turn_40_as_at_turn_10(tmp_path: Path,
                                                                       entries_checked: list[int]) -> None:
    # The writes branch keeps a map of every checkpoint's writes, one key more at each
    # put_writes; the encoder places the new key instead of walking the map's entries.
    checked = entries_checked
    per_turn = []
    with SnapvcSaver(tmp_path / "t.snapvc") as saver:
        graph = _react(saver)
        for turn in range(41):
            checked.clear()
            _turn(graph, turn)
            per_turn.append(len(checked))
    assert per_turn[40] <= per_turn[10] + 8, per_turn  # not 20 entries more a turn (5 checkpoints, 4 writes)
