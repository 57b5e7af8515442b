"""SnapvcSaver: LangGraph's conformance suite, real StateGraphs on it, and the thread as
snapvc sees it (the API and the ``snapvc`` command)."""

from __future__ import annotations

import asyncio
import operator
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES, EXTENDED_CAPABILITIES
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Send, interrupt

import snapvc
from snapvc.integrations.langgraph import SnapvcSaver
from snapvc.integrations.langgraph.saver import KEY
from snapvc.integrations.langgraph.values import SERIALIZED

ROOT = Path(__file__).resolve().parent.parent

# --- LangGraph's conformance suite -----------------------------------------------------


def _conformance(location: Any) -> Any:
    @checkpointer_test(name="SnapvcSaver")
    async def saver() -> AsyncIterator[SnapvcSaver]:
        with SnapvcSaver(location()) as made:
            yield made

    return asyncio.run(validate(saver))


@pytest.mark.parametrize("where", ["file", "memory"])
def test_langgraph_conformance_suite_passes_every_base_and_extended_test(where: str, tmp_path: Path) -> None:
    files = iter(range(100))
    report = _conformance((lambda: tmp_path / f"c{next(files)}.snapvc") if where == "file" else (lambda: "memory://"))
    results = report.results
    assert {cap.value for cap in BASE_CAPABILITIES | EXTENDED_CAPABILITIES} == set(results)
    failures = {cap: r.failures for cap, r in results.items() if not r.passed}
    assert failures == {}
    assert report.passed_all_base() and report.passed_all()
    assert sum(r.tests_passed for r in results.values()) == 81  # langgraph-checkpoint-conformance 0.0.2
    assert sum(r.tests_failed for r in results.values()) == 0


# --- graphs ----------------------------------------------------------------------------


class Chat(TypedDict):
    messages: Annotated[list, add_messages]
    notes: dict


def _reply(state: Chat) -> dict[str, Any]:
    n = len(state["messages"])
    return {"messages": [AIMessage(content=f"reply {n}", id=f"ai-{n}")], "notes": {"turns": n}}


def _chat_graph(saver: SnapvcSaver) -> Any:
    builder = StateGraph(Chat)
    builder.add_node("reply", _reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


def _said(text: str, n: int) -> dict[str, Any]:
    return {"messages": [HumanMessage(content=text, id=f"human-{n}")]}


def test_a_chat_keeps_langchain_messages_exactly_and_reopens(tmp_path: Path) -> None:
    path = tmp_path / "chat.snapvc"
    config = {"configurable": {"thread_id": "chat 1/a"}}  # escaped into a branch name
    with SnapvcSaver(path) as saver:
        graph = _chat_graph(saver)
        graph.invoke({**_said("hi", 0), "notes": {}}, config)
        graph.invoke(_said("again", 2), config)
        state = graph.get_state(config)
        values = state.values
        assert [type(m) for m in values["messages"]] == [HumanMessage, AIMessage, HumanMessage, AIMessage]
        assert values["messages"][3] == AIMessage(content="reply 3", id="ai-3")
        assert values["notes"] == {"turns": 3}
        assert [s.metadata["step"] for s in graph.get_state_history(config)] == [4, 3, 2, 1, 0, -1]
        assert sorted(saver.repo.branches()) == ["chat%201%2Fa", "chat%201%2Fa/+writes"]
    with SnapvcSaver.from_conn_string(path) as again:  # another process would see the same
        reopened = _chat_graph(again).get_state(config)
        assert reopened.values == values and reopened.config == state.config
    # Messages are plain dicts in the repository: the command shows them without LangChain.
    shown = subprocess.run([sys.executable, "-m", "snapvc", "checkout", "chat%201%2Fa", "--path", "messages",
                            "--repo", str(path)], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert '"langchain_message": "AIMessage"' in shown.stdout and '"content": "reply 3"' in shown.stdout


def test_time_travel_and_a_fork_keep_both_lines(tmp_path: Path) -> None:
    with SnapvcSaver(tmp_path / "fork.snapvc") as saver:
        graph = _chat_graph(saver)
        config = {"configurable": {"thread_id": "t"}}
        graph.invoke({**_said("one", 0), "notes": {}}, config)
        graph.invoke(_said("two", 2), config)
        first = next(s for s in graph.get_state_history(config) if s.metadata["step"] == 1)
        assert len(first.values["messages"]) == 2

        forked = graph.update_state(first.config, {"notes": {"forked": True}})
        graph.invoke(_said("three", 2), forked)
        latest = graph.get_state(config)
        assert [m.content for m in latest.values["messages"]] == ["one", "reply 1", "three", "reply 3"]
        assert latest.values["notes"] == {"turns": 3}

        repo = saver.repo
        (fork,) = [b for b in repo.branches() if b.startswith("t/+fork/")]
        abandoned = [c.metadata["step"] for c in repo.log(fork)]
        assert abandoned == [4, 3, 2, 1, 0, -1]  # the line before the fork, whole
        assert [c.metadata["source"] for c in repo.log("t")] == ["loop", "loop", "input", "update", "loop", "loop",
                                                                 "input"]
        # Every checkpoint of both lines is listed, newest first by checkpoint id.
        ids = [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(config)]
        assert len(ids) == 10 and ids == sorted(ids, reverse=True)

        # Running on from the end of the old line makes it the thread's line again.
        old_tip = next(s for s in graph.get_state_history(config) if s.metadata["step"] == 4
                       and s.values["notes"] == {"turns": 3} and s.values["messages"][2].content == "two")
        graph.invoke(_said("four", 4), old_tip.config)
        assert [m.content for m in graph.get_state(config).values["messages"]][-2:] == ["four", "reply 5"]
        (other,) = [b for b in repo.branches() if "+fork" in b]  # now the line of the fork is the one left
        assert other != fork and [c.metadata["source"] for c in repo.log(other)][:3] == ["loop", "loop", "input"]


def test_an_interrupt_and_its_resume_go_through_the_pending_writes(tmp_path: Path) -> None:
    class Review(TypedDict):
        draft: str
        verdict: str

    def ask(state: Review) -> dict[str, Any]:
        return {"verdict": interrupt({"question": f"approve {state['draft']!r}?"})}

    builder = StateGraph(Review)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    with SnapvcSaver(tmp_path / "review.snapvc") as saver:
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "review"}}
        out = graph.invoke({"draft": "v1", "verdict": ""}, config)
        assert out["__interrupt__"][0].value == {"question": "approve 'v1'?"}
        waiting = saver.get_tuple(config)
        assert [w[1] for w in waiting.pending_writes] == ["__interrupt__"]
        assert graph.invoke(Command(resume="yes"), config) == {"draft": "v1", "verdict": "yes"}


def test_values_snapvc_cannot_store_go_through_the_serializer_and_never_pickle(tmp_path: Path) -> None:
    class Fan(TypedDict):
        tags: set
        done: Annotated[list, operator.add]

    def start(state: Fan) -> dict[str, Any]:
        return {"tags": state["tags"] | {"started"}}

    builder = StateGraph(Fan)
    builder.add_node("start", start)
    builder.add_node("work", lambda arg: {"done": [arg["i"]]})
    builder.add_edge(START, "start")
    builder.add_conditional_edges("start", lambda s: [Send("work", {"i": i}) for i in range(3)], ["work"])
    builder.add_edge("work", END)
    with SnapvcSaver(tmp_path / "fan.snapvc") as saver:
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "fan"}}
        assert graph.invoke({"tags": {"new"}, "done": []}, config) == {"tags": {"new", "started"}, "done": [0, 1, 2]}
        stored = saver.repo.checkout("fan")
        assert stored["done"] == [0, 1, 2]  # a list: stored as itself
        assert set(stored["tags"]) == {SERIALIZED, "data"} and isinstance(stored["tags"]["data"], bytes)

        class Opaque:
            pass

        tip = saver.repo.resolve("fan")
        with pytest.raises(snapvc.UnsupportedValueError, match=r"thread 'fan', checkpoint .*'tags'.*Opaque"):
            graph.update_state(config, {"tags": Opaque()})
        assert saver.repo.resolve("fan") == tip  # nothing written
    with pytest.raises(ValueError, match="never pickles"):
        SnapvcSaver("memory://", serde=JsonPlusSerializer(pickle_fallback=True))


def test_a_delta_channel_is_rebuilt_from_the_writes_of_its_ancestors(tmp_path: Path) -> None:
    from langgraph.channels import DeltaChannel

    def append_all(state: list[Any] | None, writes: list[list[int]]) -> list[Any]:
        return [*(state or []), *(x for batch in writes for x in batch)]

    # The functional form, as LangGraph reads the schema's annotations: a class body's would be
    # strings here (annotations are postponed), naming DeltaChannel and append_all, which are local.
    Log = TypedDict("Log", {"items": Annotated[list, DeltaChannel(append_all, snapshot_frequency=4)]})  # noqa: UP013
    builder = StateGraph(Log)
    builder.add_node("add", lambda s: {"items": [len(s["items"])]})
    builder.add_edge(START, "add")
    builder.add_conditional_edges("add", lambda s: END if len(s["items"]) >= 10 else "add", ["add", END])
    with SnapvcSaver(tmp_path / "delta.snapvc") as saver:
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "d"}, "recursion_limit": 50}
        graph.invoke({"items": []}, config)
        assert graph.get_state(config).values == {"items": list(range(10))}
        by_step = {s.metadata["step"]: s.values.get("items") for s in graph.get_state_history(config)}
        assert by_step[5] == list(range(5)) and by_step[10] == list(range(10))


def test_the_async_api_runs_a_graph(tmp_path: Path) -> None:
    async def main() -> tuple[Any, list[Any]]:
        async with SnapvcSaver(tmp_path / "async.snapvc") as saver:
            graph = _chat_graph(saver)
            config = {"configurable": {"thread_id": "a"}}
            await graph.ainvoke({**_said("hi", 0), "notes": {}}, config)
            await graph.ainvoke(_said("again", 2), config)
            return await graph.aget_state(config), [s async for s in graph.aget_state_history(config)]

    latest, history = asyncio.run(main())
    assert [m.content for m in latest.values["messages"]] == ["hi", "reply 1", "again", "reply 3"]
    assert len(history) == 6


# --- what a put stores and what a listing shares ----------------------------------------


def _checkpoint(n: int, values: dict[str, Any], versions: dict[str, int]) -> dict[str, Any]:
    return {"v": 4, "id": f"1f000000-0000-6000-8000-{n:012d}", "ts": f"2026-01-01T00:00:{n:02d}+00:00",
            "channel_values": values, "channel_versions": versions, "versions_seen": {}, "updated_channels": None}


def test_a_put_stores_what_changed_not_the_whole_history(tmp_path: Path) -> None:
    saver = SnapvcSaver(tmp_path / "cost.snapvc")
    messages = [{"role": "user", "content": f"message {i} " + "words " * 40} for i in range(2000)]
    config = {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}
    config = saver.put(config, _checkpoint(1, {"messages": messages, "plan": "x"}, {"messages": 1, "plan": 1}),
                       {"source": "loop", "step": 1}, {"messages": 1, "plan": 1})
    store = saver.repo.store
    before = set(store.iter_ids())
    grown = messages + [{"role": "assistant", "content": "one more"}]  # a new list, as an add reducer makes
    saver.put(config, _checkpoint(2, {"messages": grown, "plan": "x"}, {"messages": 2, "plan": 1}),
              {"source": "loop", "step": 2}, {"messages": 2})
    new = set(store.iter_ids()) - before
    assert 0 < len(new) <= 6  # the last leaf, the spine above it, the root
    assert saver.get_tuple(config | {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}).checkpoint[
        "channel_values"]["messages"] == grown
    saver.close()


def test_a_serialized_write_that_grows_each_step_is_stored_as_what_changed(tmp_path: Path,
                                                                         chunks_hashed: list[int]) -> None:
    # A ReAct agent's Send carries the whole history to the tool node: serialized, a long
    # bytes value that differs from the step before's near its start (the call) and at
    # its end (the new messages). Its chunks in between are taken as they were.
    hashed = chunks_hashed
    history = [f"message {i}: " + " ".join(f"word{(i * 7 + j) % 997}" for j in range(60)) for i in range(2400)]
    with SnapvcSaver(tmp_path / "sends.snapvc") as saver:
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        for step in (1, 2, 3):
            config = saver.put(config, _checkpoint(step, {"n": step}, {"n": step}), {"source": "loop", "step": step},
                               {"n": step})
            sent = Send("tools", {"call": f"call-{step}", "history": history[: 2300 + 40 * step]})
            hashed.clear()
            saver.put_writes(config, [("messages", f"asked {step}"), ("__pregel_tasks", sent)], f"task-{step}")
        assert 0 < len(hashed) <= 16, len(hashed)  # of a value of about 120 chunks
        writes = saver.get_tuple(config).pending_writes
        assert writes == [("task-3", "messages", "asked 3"), ("task-3", "__pregel_tasks", sent)]


def test_puts_on_the_tip_store_appends_replacements_and_removals_exactly(tmp_path: Path) -> None:
    with SnapvcSaver(tmp_path / "puts.snapvc") as saver:
        config: Any = {"configurable": {"thread_id": "p", "checkpoint_ns": ""}}
        history = [{"role": "user", "content": "a"}]
        notes = {"plan": "x"}
        steps = [
            {"messages": history, "notes": notes},
            {"messages": history + [{"role": "assistant", "content": "b"}], "notes": notes},  # appended
            {"messages": [{"role": "system", "content": "summary"}], "notes": notes},  # replaced by a shorter list
            {"messages": [{"role": "system", "content": "summary"}], "notes": {"plan": "y"}},  # a new dict
            {"messages": [{"role": "system", "content": "summary"}]},  # a channel gone
        ]
        for n, values in enumerate(steps, start=1):
            versions = {k: n for k in values}
            config = saver.put(config, _checkpoint(n, values, versions), {"step": n}, versions)
            assert saver.get_tuple(config).checkpoint["channel_values"] == values
            assert saver.repo.checkout(saver.repo.resolve("p")) == values
        notes_now = saver.get_tuple(config)
        assert "notes" not in notes_now.checkpoint["channel_values"]
        assert [c.metadata["step"] for c in saver.repo.log("p")] == [5, 4, 3, 2, 1]


def test_messages_anywhere_in_a_value_come_back_exactly(tmp_path: Path) -> None:
    ai = AIMessage(content="x", id="a1", tool_calls=[{"name": "search", "args": {"q": "y"}, "id": "c1"}])
    values = {"messages": [HumanMessage(content="q", id="h1"), ai], "last": ai, "deep": {"reply": ai},
              "pair": (ai, "note")}
    with SnapvcSaver(tmp_path / "messages.snapvc") as saver:
        config = {"configurable": {"thread_id": "m", "checkpoint_ns": ""}}
        versions = {k: 1 for k in values}
        config = saver.put(config, _checkpoint(1, values, versions), {"step": 1}, versions)
        saver.put_writes(config, [("messages", [ai])], "task")
        got = saver.get_tuple(config)
        assert got.checkpoint["channel_values"] == values and got.pending_writes == [("task", "messages", [ai])]
        restored = got.checkpoint["channel_values"]
        assert type(restored["pair"]) is tuple and restored["last"].model_fields_set == ai.model_fields_set
        stored = saver.repo.checkout("m")
        assert stored["last"] == {"langchain_message": "AIMessage", "fields": stored["messages"][1]["fields"]}
        assert isinstance(stored["deep"]["reply"], AIMessage)  # deeper: a typed value


def test_a_listing_shares_unchanged_values_between_its_checkpoints_never_between_calls(tmp_path: Path) -> None:
    with SnapvcSaver(tmp_path / "share.snapvc") as saver:
        config = {"configurable": {"thread_id": "s", "checkpoint_ns": ""}}
        history: list[dict[str, Any]] = []
        for n in range(1, 200):  # a history of many leaves
            history = history + [{"role": "user", "content": f"turn {n} " + "words " * 20}]
            config = saver.put(config, _checkpoint(n, {"messages": history}, {"messages": n}), {"step": n},
                               {"messages": n})
        newest, older, *_ = list(saver.list(config | {"configurable": {"thread_id": "s"}}))
        a, b = newest.checkpoint["channel_values"]["messages"], older.checkpoint["channel_values"]["messages"]
        assert a is not b and a[0] is b[0]  # the same message object in both: its leaf was read once
        a[0]["content"] = "changed by the caller"
        again = saver.get_tuple(newest.config).checkpoint["channel_values"]["messages"]
        assert again[0]["content"].startswith("turn 1 ") and again == history


def test_deleting_a_run_in_the_middle_keeps_the_checkpoints_after_it_on_its_parent(tmp_path: Path) -> None:
    with SnapvcSaver(tmp_path / "runs.snapvc") as saver:
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        stored = []
        for n, run in enumerate(["r1", "r2", "r3"], start=1):
            config = saver.put(config, _checkpoint(n, {"log": ["x"] * n}, {"log": n}), {"step": n, "run_id": run},
                               {"log": n})
            saver.put_writes(config, [("log", [n])], f"task-{n}")
            stored.append(config)
        saver.repo.switch("t")  # HEAD on the thread's branch stays there
        saver.delete_for_runs(["r2"])
        listed = list(saver.list({"configurable": {"thread_id": "t"}}))
        assert [t.metadata["run_id"] for t in listed] == ["r3", "r1"]
        r3, r1 = listed
        assert r3.parent_config["configurable"]["checkpoint_id"] == r1.config["configurable"]["checkpoint_id"]
        assert r3.checkpoint["channel_values"] == {"log": ["x"] * 3} and r3.pending_writes == [("task-3", "log", [3])]
        assert saver.get_tuple(stored[1]) is None and saver.repo.head == "t"
        assert [c.metadata["run_id"] for c in saver.repo.log("t")] == ["r3", "r1"]
        kept_writes = saver.repo.checkout("t/+writes")["writes"]  # the deleted checkpoint's writes went with it
        assert sorted(kept_writes) == sorted(stored[i]["configurable"]["checkpoint_id"] for i in (0, 2))

        saver.put(stored[0], _checkpoint(9, {"log": ["fork"]}, {"log": 9}), {"step": 2, "run_id": "r4"}, {"log": 9})
        assert any("+fork/" in b for b in saver.repo.branches())
        saver.prune(["t"])
        (only,) = saver.list({"configurable": {"thread_id": "t"}})
        assert only.metadata["run_id"] == "r4" and only.checkpoint["channel_values"] == {"log": ["fork"]}
        assert sorted(saver.repo.branches()) == ["t", "t/+writes"] and only.parent_config is None


# --- the thread in snapvc ----------------------------------------------------------------


def test_snapvc_reads_a_thread_as_branches_and_commits(tmp_path: Path) -> None:
    with SnapvcSaver(tmp_path / "api.snapvc") as saver:
        graph = _chat_graph(saver)
        config = {"configurable": {"thread_id": "run-1"}}
        graph.invoke({**_said("hi", 0), "notes": {}}, config)
        saver.put({"configurable": {"thread_id": "run-1", "checkpoint_ns": "child:1"}},
                  _checkpoint(1, {"x": 1}, {"x": 1}), {"step": 0, "source": "loop"}, {"x": 1})
        repo = saver.repo
        assert [(t.id, t.namespace) for t in repo.threads()] == [("run-1", ""), ("run-1", "child:1")]
        (step1,) = repo.log("run-1", where={"step": 1})
        assert step1.message == "loop step 1" and step1.metadata[KEY]["id"] == graph.get_state(config).config[
            "configurable"]["checkpoint_id"]
        assert [str(c) for c in repo.diff("run-1~1", "run-1", paths="notes")] == ["+ notes.turns: 1"]
        repo.checkout("run-1")  # HEAD moves to the thread's branch, as `snapvc checkout run-1` does
        saver.delete_thread("run-1")
        assert repo.branches() == {} and repo.head == "main"
        assert graph.get_state(config).values == {}


def test_bad_input_gets_errors_that_name_what_was_wrong(tmp_path: Path) -> None:
    with SnapvcSaver("memory://") as saver:
        with pytest.raises(ValueError, match="thread_id"):
            saver.get_tuple({"configurable": {}})
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        with pytest.raises(ValueError, match=r"thread 't', checkpoint .*'langgraph'"):
            saver.put(config, _checkpoint(1, {}, {}), {"langgraph": 1}, {})
        with pytest.raises(ValueError, match=r"thread 't', checkpoint .*metadata must be JSON"):
            saver.put(config, _checkpoint(1, {}, {}), {"when": object()}, {})
        stored = saver.put(config, _checkpoint(1, {}, {}), {"step": 0}, {})
        with pytest.raises(ValueError, match="already stored"):
            saver.put(stored, _checkpoint(1, {}, {}), {"step": 1}, {})
        with pytest.raises(ValueError, match="names no checkpoint_id"):
            saver.put_writes(config, [("ch", 1)], "task")
        saver.copy_thread("t", "u")
        with pytest.raises(ValueError, match=r"cannot copy thread 't' to 'u': the target already has checkpoints"):
            saver.copy_thread("t", "u")
        with pytest.raises(ValueError, match="strategy must be 'keep_latest' or 'delete', got 'all'"):
            saver.prune(["t"], strategy="all")


# --- the command line on a LangGraph thread, and the page that shows it ----------------


def _page() -> tuple[str, list[str]]:
    text = (ROOT / "docs" / "langgraph.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", text, re.S)
    (shell,) = re.findall(r"```bash\n(.*?)```", text, re.S)
    commands = [line.split("#")[0].strip() for line in shell.splitlines() if line.strip()]
    return code, commands


def test_the_page_runs_and_its_snapvc_commands_read_the_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, commands = _page()
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/langgraph.md", "exec", dont_inherit=True), {"__name__": "langgraph_page"})
    assert commands == ["snapvc log --graph", "snapvc diff chat-1~2 chat-1", "snapvc checkout chat-1 --path messages"]
    out = {}
    for command in commands:
        done = subprocess.run([sys.executable, "-m", "snapvc", *command.split()[1:]], cwd=tmp_path, capture_output=True,
                              text=True, timeout=60, env={"SNAPVC_CEILING_DIRECTORIES": str(tmp_path.parent),
                                                          "PATH": "/usr/bin:/bin", "NO_COLOR": "1"})
        assert done.returncode == 0, (command, done.stderr)  # diff too, as git's: differences are no failure
        out[command.split()[1]] = done.stdout
    graph = out["log"]
    assert "(chat-1) loop step 4" in graph and "(chat-1/+writes) writes to" in graph
    assert re.search(r"\(chat-1/\+fork/[0-9a-f]{12}\) loop step 3", graph)
    assert "update step 2" in graph and "input step -1" in graph
    assert '+ [3]: {"content": "thought 3", "role": "assistant"}' in out["diff"]  # values as JSON
    assert '~ plan: "by train" → "step 3"' in out["diff"]
    assert "- ['branch:to:think']: null" in out["diff"]  # LangGraph's trigger channel, gone at the end
    assert '"content": "thought 3"' in out["checkout"]


def test_plain_writes_are_stored_once_and_a_serialized_one_is_kept_for_the_next(tmp_path: Path) -> None:
    # Only a write serialized to bytes (a Send carries the whole history) is kept again
    # under "latest", for the next such write to be stored as a delta of it; a plain
    # write (a message) is encoded once, under its checkpoint, and "latest" stays.
    message = {"role": "assistant", "content": "an answer", "meta": {"model": "m", "usage": {"in": 3, "out": 5}}}
    with SnapvcSaver(tmp_path / "writes.snapvc") as saver:
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        config = saver.put(config, _checkpoint(1, {"n": 1}, {"n": 1}), {"source": "loop", "step": 1}, {"n": 1})
        sent = Send("tools", {"history": [f"message {i}" for i in range(50)]})
        saver.put_writes(config, [("__pregel_tasks", sent)], "task-1")
        kept = saver.repo.checkout("t/+writes")["latest"]
        config = saver.put(config, _checkpoint(2, {"n": 2}, {"n": 2}), {"source": "loop", "step": 2}, {"n": 2})
        saver.put_writes(config, [("messages", [message])], "task-2")
        stored = saver.repo.checkout("t/+writes")
        assert stored["latest"] == kept and stored["writes"]["1f000000-0000-6000-8000-000000000002"][0][2] == [message]
        assert saver.get_tuple(config).pending_writes == [("task-2", "messages", [message])]
