"""SnapvcSaver stores what LangGraph holds at every checkpoint, as InMemorySaver does:
threads another saver began (string channel versions), channels changed in place, and
values of classes defined again (a module reloaded, a notebook cell run again).

Each graph runs on InMemorySaver and on SnapvcSaver; the SnapvcSaver side is read back
from a saver opened again on the file, so what is compared is what was stored. The runs
put their checkpoints with ``durability="sync"``: in the background (LangGraph's
default), a put may run after the next step changed a value in place, on any saver, and
the histories would differ by when each put ran."""

import copy
import dataclasses
import importlib
import operator
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.channels import Topic
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from pydantic import BaseModel

import snapvc
from snapvc.integrations.langgraph import SnapvcSaver

Build = Callable[[BaseCheckpointSaver], Any]  # a saver -> a compiled graph on it


def _history(graph: Any, config: dict[str, Any]) -> list[tuple[int, Any, tuple[str, ...]]]:
    """(step, values, next nodes) of every checkpoint of the thread, newest first."""
    return [(s.metadata["step"], s.values, s.next) for s in graph.get_state_history(config)]


def _invoke(inputs: dict[str, Any]) -> Callable[[Any, dict[str, Any]], None]:
    """A run of the graph on ``inputs`` (a copy each time: a node may change them in place)."""
    return lambda graph, config: graph.invoke(copy.deepcopy(inputs), config, durability="sync")


def _run_on_both(tmp_path: Path, build: Build, steps: Callable[[Any, dict[str, Any]], None]) -> tuple[Any, Any]:
    """The thread's history as InMemorySaver keeps it, and as SnapvcSaver stored it (read
    by a saver opened again on the file)."""
    config = {"configurable": {"thread_id": "t"}}
    memory = build(InMemorySaver())
    steps(memory, config)
    path = tmp_path / "stale.snapvc"
    with SnapvcSaver(path) as saver:
        steps(build(saver), config)
    with SnapvcSaver(path) as reopened:
        return _history(memory, config), _history(build(reopened), config)


# --- a channel whose object stays the same while its value changes -----------------------


class Items(TypedDict):
    items: Annotated[list, operator.iadd]  # extends the channel's own list in place


def _iadd_graph(saver: BaseCheckpointSaver) -> Any:
    builder = StateGraph(Items)
    builder.add_node("one", lambda s: {"items": [len(s["items"])]})
    builder.add_node("two", lambda s: {"items": [len(s["items"])]})
    builder.add_edge(START, "one")
    builder.add_edge("one", "two")
    builder.add_edge("two", END)
    return builder.compile(checkpointer=saver)


def test_an_iadd_reducer_keeps_every_item(tmp_path: Path) -> None:
    memory, stored = _run_on_both(tmp_path, _iadd_graph, _invoke({"items": [0]}))
    assert stored == memory
    assert stored[0][1] == {"items": [0, 1, 2]}


class Topics(TypedDict):
    topic: Annotated[list, Topic(int, accumulate=True)]  # also grows its own list in place


def _topic_graph(saver: BaseCheckpointSaver) -> Any:
    builder = StateGraph(Topics)
    builder.add_node("one", lambda s: {"topic": 1})
    builder.add_node("two", lambda s: {"topic": [2, 3]})
    builder.add_edge(START, "one")
    builder.add_edge("one", "two")
    builder.add_edge("two", END)
    return builder.compile(checkpointer=saver)


def test_an_accumulating_topic_keeps_its_items(tmp_path: Path) -> None:
    memory, stored = _run_on_both(tmp_path, _topic_graph, _invoke({"topic": 0}))
    assert stored == memory
    assert stored[0][1] == {"topic": [0, 1, 2, 3]}


class Log(TypedDict):
    log: Annotated[list, operator.add]


def _join_graph(saver: BaseCheckpointSaver) -> Any:
    """``c`` waits for ``a`` and for ``b2``, which runs a step later: the join's barrier
    (a set of the nodes seen) changes in place, and the run stops before ``c``."""
    builder = StateGraph(Log)
    for name in ("a", "b", "b2", "c"):
        builder.add_node(name, lambda s, name=name: {"log": [name]})
    builder.add_edge(START, "a")
    builder.add_edge(START, "b")
    builder.add_edge("b", "b2")
    builder.add_edge(["a", "b2"], "c")
    builder.add_edge("c", END)
    return builder.compile(checkpointer=saver, interrupt_before=["c"])


def test_a_join_after_an_interrupt_runs_when_resumed(tmp_path: Path) -> None:
    def steps(graph: Any, config: dict[str, Any]) -> None:
        graph.invoke({"log": []}, config, durability="sync")
        assert graph.get_state(config).next == ("c",)
        graph.invoke(None, config, durability="sync")

    memory, stored = _run_on_both(tmp_path, _join_graph, steps)
    assert stored == memory
    assert stored[0][1] == {"log": ["a", "b", "b2", "c"]} and stored[0][2] == ()


class Tasks(TypedDict):
    tasks: Annotated[list, operator.add]


def _mark_done(state: Tasks) -> dict[str, Any]:
    state["tasks"][0]["done"] = True  # an element changed in place, and the channel written too
    return {"tasks": [{"name": f"task {len(state['tasks'])}", "done": False}]}


def _tasks_graph(saver: BaseCheckpointSaver) -> Any:
    builder = StateGraph(Tasks)
    builder.add_node("work", _mark_done)
    builder.add_edge(START, "work")
    builder.add_edge("work", END)
    return builder.compile(checkpointer=saver)


def test_an_element_changed_in_place_in_a_written_channel_is_stored(tmp_path: Path) -> None:
    memory, stored = _run_on_both(tmp_path, _tasks_graph, _invoke({"tasks": [{"name": "task 0", "done": False}]}))
    assert stored == memory
    assert stored[0][1]["tasks"][0] == {"name": "task 0", "done": True}


# --- a thread another saver began ---------------------------------------------------------


def test_a_thread_begun_on_another_saver_continues_with_its_string_versions(tmp_path: Path) -> None:
    config: Any = {"configurable": {"thread_id": "moved"}}
    with SqliteSaver.from_conn_string(str(tmp_path / "langgraph.sqlite")) as sqlite:
        _join_graph(sqlite).invoke({"log": []}, config, durability="sync")  # stops before c
        moved = list(reversed(list(sqlite.list(config))))
    with SnapvcSaver(tmp_path / "moved.snapvc") as saver:
        for old in moved:  # every checkpoint and its writes, oldest first
            put = saver.put(old.parent_config or config, old.checkpoint, old.metadata,
                            old.checkpoint["channel_versions"])
            for task_id, channel, value in old.pending_writes or ():
                saver.put_writes(put, [(channel, value)], task_id)
        graph = _join_graph(saver)
        assert graph.get_state(config).next == ("c",)
        assert graph.invoke(None, config, durability="sync") == {"log": ["a", "b", "b2", "c"]}
        versions = saver.get_tuple(config).checkpoint["channel_versions"]
        assert versions and all(type(v) is str for v in versions.values())

    after = saver.get_next_version("00000000000000000000000000000041.0.5", None)
    assert type(after) is str and after.startswith("00000000000000000000000000000042.")
    assert after > "00000000000000000000000000000041.0.9"
    assert (saver.get_next_version(None, None), saver.get_next_version(7, None)) == (1, 8)
    with pytest.raises(snapvc.InvalidArgumentError, match="'v3' is not a channel version"):
        saver.get_next_version("v3", None)


# --- classes defined again ------------------------------------------------------------------

_MODULE = """
import dataclasses
from pydantic import BaseModel

@dataclasses.dataclass
class Point:
    x: int
    y: int

class Inner(BaseModel):
    yo: int

class Outer(BaseModel):
    inner: Inner
"""


def test_values_come_back_as_the_live_class_after_a_module_reload(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "snapvc_reloaded_probe.py").write_text(textwrap.dedent(_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "snapvc_reloaded_probe", raising=False)
    probe = importlib.import_module("snapvc_reloaded_probe")
    try:
        repo = snapvc.open("memory://")
        repo.commit({"point": probe.Point(1, 2), "inner": probe.Inner(yo=1)}, branch="main")
        old_point, old_inner = probe.Point, probe.Inner
        importlib.reload(probe)  # as a hot reload, or a notebook cell run again, does
        assert probe.Point is not old_point and probe.Inner is not old_inner
        state = repo.checkout("main")
        assert type(state["point"]) is probe.Point and state["point"] == probe.Point(1, 2)
        assert type(state["inner"]) is probe.Inner
        assert probe.Outer(inner=state["inner"]).inner.yo == 1  # pydantic takes it: the live class
    finally:
        del sys.modules["snapvc_reloaded_probe"]


def _pydantic_graph(saver: BaseCheckpointSaver) -> tuple[Any, type]:
    """A graph whose state is a pydantic model holding another, both classes made anew
    at each call (as a notebook cell run again makes them)."""

    class Inner(BaseModel):
        yo: int

    class State(BaseModel):
        inner: Inner
        count: int = 0

    builder = StateGraph(State)
    builder.add_node("one", lambda s: {"count": s.count + 1})
    builder.add_node("two", lambda s: {"count": s.count + 1})
    builder.add_edge(START, "one")
    builder.add_edge("one", "two")
    builder.add_edge("two", END)
    return builder.compile(checkpointer=saver, interrupt_before=["two"]), Inner


def test_a_pydantic_state_of_classes_defined_again_validates(tmp_path: Path) -> None:
    with SnapvcSaver(tmp_path / "again.snapvc") as saver:
        for run in range(2):  # the second run has classes of the same names, new
            graph, inner = _pydantic_graph(saver)
            config = {"configurable": {"thread_id": f"run {run}"}}
            graph.invoke({"inner": inner(yo=run)}, config)
            assert type(graph.get_state(config).values["inner"]) is inner
            assert graph.invoke(None, config) == {"inner": inner(yo=run), "count": 2}


@dataclasses.dataclass
class _Plain:
    n: int


def test_a_registered_name_for_another_class_is_kept(tmp_path: Path) -> None:
    """A name given to ``register_type`` is the user's choice, kept even when a module
    holds a class of that name."""

    @dataclasses.dataclass
    class Legacy:
        n: int

    snapvc.register_type(Legacy, name=f"{__name__}:_Plain")
    repo = snapvc.open("memory://")
    repo.commit({"v": Legacy(3)}, branch="main")
    assert type(repo.checkout("main")["v"]) is Legacy
