"""SnapvcSession: the OpenAI Agents SDK's Session on a snapvc repository.

The SDK's own session tests run on SnapvcSession in ``tests/test_openai_agents_suite.py``.
The tests here cover what those cannot see: the session as snapvc shows it (branch,
commits, metadata, diff), the cost of adding to a long session, real ``Runner.run``
turns whose items must come back exactly as the SDK's own SQLiteSession gives them,
concurrency, other processes, fork, cancellation and the errors. The protocol behaviours
mirror the SDK's ``tests/memory/test_session.py`` (add, get, pop, clear, limits, unicode,
separate sessions, concurrent access, cancellation) and ``tests/memory/test_session_limit.py``.
"""

from __future__ import annotations

import ast
import asyncio
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, SessionSettings, SQLiteSession, function_tool, set_tracing_disabled
from agents.memory import Session
from agents.testing import ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseReasoningItem
from openai.types.responses.response_reasoning_item import Summary

import snapvc
from snapvc.errors import (
    InvalidArgumentError,
    PathError,
    RefExistsError,
    RepositoryError,
    UnknownRevisionError,
)
from snapvc.integrations.openai_agents import SnapvcSession, session_branch

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _no_tracing() -> Any:
    """The SDK sends the traces of its runs to OpenAI when a key is set: not from tests."""
    set_tracing_disabled(True)
    yield
    set_tracing_disabled(False)


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _messages(repo: snapvc.Repository, branch: str) -> list[str]:
    return [c.message for c in repo.log(branch)]


# -- the protocol, as snapvc records it -----------------------------------------------------


def test_a_snapvc_session_is_an_sdk_session(tmp_path: Path) -> None:
    session = SnapvcSession("s", tmp_path / "a.snapvc")
    assert isinstance(session, Session)
    session.close()


def test_each_change_is_a_commit_with_the_items_as_plain_data() -> None:
    repo = snapvc.open("memory://")
    session = SnapvcSession("chat", repo)

    async def run() -> None:
        await session.add_items([_user("hi")])
        await session.add_items([{"role": "assistant", "content": "hello", "type": "message"},
                                 {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c1"}])
        assert await session.get_items() == [_user("hi"), {"role": "assistant", "content": "hello", "type": "message"},
                                             {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c1"}]
        popped = await session.pop_item()
        assert popped == {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c1"}
        await session.clear_session()
        assert await session.get_items() == []
        # Changing nothing commits nothing.
        await session.add_items([])
        assert await session.pop_item() is None
        await session.clear_session()

    asyncio.run(run())
    assert session.branch == "openai-agents/chat"
    assert _messages(repo, session.branch) == [
        "clear_session", "pop_item (2 items)", "add_items: assistant message, function_call (3 items)",
        "add_items: user message (1 item)"]
    metadata = [dict(c.metadata) for c in repo.log(session.branch)]
    assert metadata == [
        {"session_id": "chat", "operation": "clear_session", "items": 0},
        {"session_id": "chat", "operation": "pop_item", "items": 2, "removed": 1},
        {"session_id": "chat", "operation": "add_items", "items": 3, "added": 2},
        {"session_id": "chat", "operation": "add_items", "items": 1, "added": 1},
    ]
    # The state is plain data: what `snapvc checkout` shows.
    assert repo.checkout(f"{session.branch}~1") == {"items": [_user("hi"), {"role": "assistant", "content": "hello",
                                                                            "type": "message"}]}
    # And repo.session() finds the session's checkpoints by its id.
    assert len(repo.session("chat").checkpoints()) == 4


def test_items_handed_out_are_the_callers_own() -> None:
    session = SnapvcSession("s", "memory://")
    item = {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    session.add_items_sync([item])
    item["content"][0]["text"] = "changed after the add"
    got = session.get_items_sync()
    assert got == [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]
    got[0]["content"][0]["text"] = "changed after the get"
    assert session.get_items_sync(limit=1) == [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]


def test_appended_items_show_in_snapvc_diff() -> None:
    repo = snapvc.open("memory://")
    session = SnapvcSession("s", repo)
    session.add_items_sync([_user("one"), _user("two")])
    session.add_items_sync([_user("three")])
    changes = repo.diff(f"{session.branch}~1", session.branch)
    assert [(c.path, c.kind, c.new) for c in changes] == [(("items", 2), "added", _user("three"))]


def test_session_ids_become_branch_names_and_bad_ones_are_named() -> None:
    repo = snapvc.open("memory://")
    session = SnapvcSession("user 42/ä", repo)
    session.add_items_sync([_user("hi")])
    assert session.branch == session_branch("user 42/ä") == "openai-agents/user%2042%2F%C3%A4"
    assert session.branch in repo.branches()
    assert [(t.id, t.namespace) for t in repo.threads()] == [("openai-agents", "user 42/ä")]
    for bad in ("", None, 42):
        with pytest.raises(InvalidArgumentError, match=repr(bad)) as caught:
            SnapvcSession(bad, repo)  # type: ignore[arg-type]
        assert caught.value.argument == "session_id"


def test_unicode_and_hostile_text_round_trip() -> None:
    session = SnapvcSession("s", "memory://")
    items = [_user("こんにちは 😊👍"), _user("Robert'); DROP TABLE agent_messages;--"), _user("\x00 and \u2028")]
    session.add_items_sync(items)
    assert session.get_items_sync() == items


def test_separate_sessions_do_not_share_items(tmp_path: Path) -> None:
    repo = snapvc.open(tmp_path / "a.snapvc")
    one, two = SnapvcSession("one", repo), SnapvcSession("two", repo)
    one.add_items_sync([_user("for one")])
    two.add_items_sync([_user("for two")])
    assert one.pop_item_sync() == _user("for one")
    assert two.get_items_sync() == [_user("for two")]


# -- limits (the SDK's test_session_limit.py) ------------------------------------------------


def test_get_items_limit_and_the_session_settings() -> None:
    repo = snapvc.open("memory://")
    items = [_user(str(i)) for i in range(5)]
    session = SnapvcSession("s", repo)
    session.add_items_sync(items)
    assert session.get_items_sync(limit=2) == items[3:]
    assert session.get_items_sync(limit=10) == items
    assert session.get_items_sync(limit=0) == []
    assert session.get_items_sync(limit=-1) == items  # as SQLiteSession: a negative limit is none
    limited = SnapvcSession("s", repo, session_settings=SessionSettings(limit=3))
    assert limited.get_items_sync() == items[2:]
    assert limited.get_items_sync(limit=1) == items[4:]  # an explicit limit wins
    assert SnapvcSession("s", repo, session_settings={"limit": 4}).get_items_sync() == items[1:]
    with pytest.raises(InvalidArgumentError, match="limit"):
        session.get_items_sync(limit="2")  # type: ignore[arg-type]


# -- cost on a long session ---------------------------------------------------------------


def test_adding_to_a_long_session_reads_and_writes_only_its_end(tmp_path: Path) -> None:
    path = tmp_path / "long.snapvc"
    items = [{"role": "user" if i % 2 else "assistant", "type": "message", "content": f"message {i} " + "x" * 200}
             for i in range(2_000)]
    with snapvc.open(path) as repo:
        session = SnapvcSession("long", repo)
        for start in range(0, len(items), 100):
            session.add_items_sync(items[start:start + 100])

    def objects_read(work: Any) -> int:
        """How many objects ``work(session)`` reads from a fresh repository object (as
        in a new process: nothing of the session is cached)."""
        with snapvc.open(path) as repo:
            before = repo.loader.objects_read
            work(SnapvcSession("long", repo))
            return repo.loader.objects_read - before

    read_by_all = objects_read(lambda session: session.get_items_sync())
    read_by_tail = objects_read(lambda session: session.get_items_sync(limit=3))
    read_by_add = objects_read(lambda session: session.add_items_sync([_user("one more")]))
    # The whole list is many leaves; an add reads the inner nodes and the last leaf, and
    # so does reading the last few items.
    assert (read_by_all > 100, read_by_tail <= 12, read_by_add <= 12) == (True, True, True), \
        (read_by_all, read_by_tail, read_by_add)
    with snapvc.open(path) as repo:
        session = SnapvcSession("long", repo)
        assert session.get_items_sync(limit=3) == [*items[-2:], _user("one more")]
        # The spliced list is the list: the same tree as the whole list committed at once.
        tip = repo.get_commit(repo.resolve(session.branch))
        assert repo.commit_tree({"items": [*items, _user("one more")]}).tree == tip.tree


def test_popping_from_a_long_session() -> None:
    repo = snapvc.open("memory://")
    items = [_user(f"message {i} " + "y" * 40) for i in range(1_000)]
    session = SnapvcSession("long", repo)
    session.add_items_sync(items)
    assert session.pop_item_sync() == items[-1]
    assert session.pop_item_sync() == items[-2]
    assert session.get_items_sync() == items[:-2]
    assert repo.commit_tree({"items": items[:-2]}).tree == repo.get_commit(repo.resolve(session.branch)).tree


# -- real turns of an agent -----------------------------------------------------------------


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _script() -> list[Any]:
    reasoning = ResponseReasoningItem(id="rs_1", type="reasoning",
                                      summary=[Summary(text="the user wants the weather", type="summary_text")])
    return [
        [reasoning, function_call("get_weather", {"city": "Paris"}, call_id="call_1")],
        [assistant_message("It is sunny in Paris.", item_id="msg_1")],
        [assistant_message("You asked about Paris.", item_id="msg_2")],
    ]


async def _two_turns(session: Any) -> tuple[ScriptedModel, list[Any]]:
    model = ScriptedModel(_script())
    agent = Agent(name="weather", instructions="Answer briefly.", model=model, tools=[get_weather])
    first = await Runner.run(agent, "What is the weather in Paris?", session=session)
    assert first.final_output == "It is sunny in Paris."
    second = await Runner.run(agent, "Which city did I ask about?", session=session)
    assert second.final_output == "You asked about Paris."
    return model, await session.get_items()


def test_real_runs_store_the_sdks_items_exactly_as_its_sqlite_session_does(tmp_path: Path) -> None:
    repo = snapvc.open(tmp_path / "a.snapvc")
    model, ours = asyncio.run(_two_turns(SnapvcSession("weather", repo)))
    _, theirs = asyncio.run(_two_turns(SQLiteSession("weather")))
    assert ours == theirs
    kinds = [item.get("type", "message") for item in ours]
    assert kinds == ["message", "reasoning", "function_call", "function_call_output", "message", "message",
                     "message"]
    # The second turn saw the first: the model's last input is the history, then the question.
    last_input = model.calls[-1].input
    assert last_input[:len(ours) - 1] == ours[:-1]
    assert {c.metadata["operation"] for c in repo.log("openai-agents/weather")} == {"add_items"}


def test_two_sessions_run_at_once_and_tasks_share_one(tmp_path: Path) -> None:
    repo = snapvc.open(tmp_path / "a.snapvc")

    async def run() -> None:
        (_, one), (_, two) = await asyncio.gather(_two_turns(SnapvcSession("one", repo)),
                                                  _two_turns(SnapvcSession("two", repo)))
        assert one == two and len(one) == 7
        shared = SnapvcSession("shared", repo)
        await asyncio.gather(*(shared.add_items([_user(str(i))]) for i in range(20)))
        assert sorted(item["content"] for item in await shared.get_items()) == sorted(str(i) for i in range(20))
        assert len(list(repo.log(shared.branch))) == 20

    asyncio.run(run())


def test_writers_of_one_session_in_two_repository_objects_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "a.snapvc"
    snapvc.open(path).close()
    sessions = [SnapvcSession("s", path) for _ in range(2)]  # each opens the file: two writers

    def write(n: int) -> None:
        for i in range(25):
            sessions[n].add_items_sync([_user(f"{n}-{i}")])

    threads = [threading.Thread(target=write, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    got = sessions[0].get_items_sync()
    assert sorted(item["content"] for item in got) == sorted(f"{n}-{i}" for n in range(2) for i in range(25))
    for n in range(2):  # each writer's own items stay in its order
        assert [item["content"] for item in got if item["content"].startswith(f"{n}-")] == [f"{n}-{i}"
                                                                                            for i in range(25)]
    for session in sessions:
        session.close()


def test_a_session_written_in_another_process_is_read_here_and_back(tmp_path: Path) -> None:
    path = tmp_path / "a.snapvc"
    code = ("import asyncio, sys; from snapvc.integrations.openai_agents import SnapvcSession\n"
            "s = SnapvcSession('s', sys.argv[1])\n"
            "asyncio.run(s.add_items([{'role': 'user', 'content': 'from the child'}]))\n"
            "print(asyncio.run(s.get_items()))\n"
            "s.close()\n")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    session = SnapvcSession("s", path)
    assert session.get_items_sync() == [_user("from the child")]
    session.add_items_sync([_user("from the parent")])
    session.close()
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert ast.literal_eval(done.stdout) == [_user("from the child"), _user("from the parent"), _user("from the child")]


# -- fork -------------------------------------------------------------------------------------


def test_fork_after_an_item_shares_the_history_up_to_it() -> None:
    repo = snapvc.open("memory://")
    session = SnapvcSession("main", repo)
    session.add_items_sync([_user("a")])
    session.add_items_sync([_user("b"), _user("c")])
    session.add_items_sync([_user("d")])
    first_add = repo.resolve(f"{session.branch}~2")

    # After item 0: a commit held exactly [a]: the fork starts there, nothing new is written.
    other = session.fork("other", at=0)
    assert other.get_items_sync() == [_user("a")]
    assert repo.resolve(other.branch) == first_add
    # After item 1, which came in a batch with item 2: the fork drops item 2 in a commit of its own.
    batch = session.fork("batch", at=-3)
    assert batch.get_items_sync() == [_user("a"), _user("b")]
    tip = repo.get_commit(repo.resolve(batch.branch))
    assert dict(tip.metadata) == {"session_id": "batch", "operation": "fork", "items": 2, "forked_from": "main",
                                  "removed": 2}
    assert tip.parent == repo.resolve(session.branch)
    # The forks go their own ways; the session is untouched.
    other.add_items_sync([_user("other path")])
    assert other.get_items_sync() == [_user("a"), _user("other path")]
    assert session.get_items_sync() == [_user(x) for x in "abcd"]
    assert repo.merge_base(other.branch, session.branch) == first_add


def test_fork_at_a_commit_and_the_errors() -> None:
    repo = snapvc.open("memory://")
    session = SnapvcSession("main", repo)
    with pytest.raises(UnknownRevisionError, match="'main'.*no items"):
        session.fork("early")
    session.add_items_sync([_user("a")])
    session.add_items_sync([_user("b")])
    at_commit = session.fork("back", at=f"{session.branch}~1")
    assert at_commit.get_items_sync() == [_user("a")]
    assert session.fork("copy").get_items_sync() == [_user("a"), _user("b")]
    with pytest.raises(RefExistsError, match="openai-agents/back"):
        session.fork("back", at=0)
    with pytest.raises(InvalidArgumentError, match="'main' holds 2 items: it has no item 5"):
        session.fork("far", at=5)
    with pytest.raises(InvalidArgumentError, match="float"):
        session.fork("odd", at=1.0)  # type: ignore[arg-type]
    repo.commit({"x": 1}, branch="other")
    with pytest.raises(PathError, match="no list of session items"):
        session.fork("from-elsewhere", at="other")
    assert asyncio.run(session.afork("async-fork", at=0)).get_items_sync() == [_user("a")]


# -- errors, closing, cancellation -----------------------------------------------------------


def test_a_branch_holding_something_else_is_refused_by_name() -> None:
    repo = snapvc.open("memory://")
    repo.commit({"messages": []}, branch=session_branch("s"))
    session = SnapvcSession("s", repo)
    with pytest.raises(PathError, match=r"session 's', branch 'openai-agents/s'.*not a session's state"):
        session.get_items_sync()
    with pytest.raises(PathError):
        session.add_items_sync([_user("a")])
    assert repo.checkout(session.branch) == {"messages": []}  # nothing written


def test_items_that_are_not_a_list_or_not_storable_are_refused() -> None:
    session = SnapvcSession("s", "memory://")
    with pytest.raises(InvalidArgumentError, match="dict"):
        session.add_items_sync(_user("a"))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="'s': add_items takes a list of items, not dict"):
        asyncio.run(session.add_items(_user("a")))  # type: ignore[arg-type]
    with pytest.raises(snapvc.UnsupportedValueError, match="set"):
        session.add_items_sync([{"role": "user", "content": {1, 2}}])
    assert session.get_items_sync() == [] and session.tip is None


def test_closing(tmp_path: Path) -> None:
    owned = SnapvcSession("s", tmp_path / "a.snapvc")
    owned.close()
    owned.close()
    with pytest.raises(RepositoryError, match="session 's' is closed"):
        asyncio.run(owned.add_items([]))
    with pytest.raises(RepositoryError, match="is closed"):
        owned.repo.commit({}, branch="main")  # the session opened it: it is closed with it
    repo = snapvc.open("memory://")
    lent = SnapvcSession("s", repo)
    asyncio.run(lent.aclose())
    with pytest.raises(RepositoryError, match="session 's' is closed"):
        lent.get_items_sync()
    repo.commit({"still": "open"}, branch="main")  # a repository handed in stays open


def test_a_cancelled_change_still_ends_and_is_stored_once() -> None:
    repo = snapvc.open("memory://")
    session = SnapvcSession("s", repo)
    started, release = threading.Event(), threading.Event()
    real = session.add_items_sync

    def slow_add(items: list[Any]) -> None:
        started.set()
        assert release.wait(10)
        real(items)

    session.add_items_sync = slow_add  # type: ignore[method-assign]

    async def run() -> None:
        task = asyncio.ensure_future(session.add_items([_user("once")]))
        assert await asyncio.to_thread(started.wait, 10)
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()

    asyncio.run(run())
    assert session.get_items_sync() == [_user("once")]
    assert len(list(repo.log(session.branch))) == 1


def test_compaction_replaces_the_compacted_items_in_one_commit_unless_the_session_moved() -> None:
    repo = snapvc.open("memory://")
    session = SnapvcSession("s", repo)
    session.add_items_sync([_user(str(i)) for i in range(6)])

    async def run() -> None:
        snapshot = await session._get_compaction_snapshot(3)
        assert snapshot.items == [_user("3"), _user("4"), _user("5")] and not snapshot.complete
        assert await snapshot.replace_suffix(1, [{"type": "compaction", "summary": "4 and 5"}])
        assert await session.get_items() == [*(_user(str(i)) for i in range(4)),
                                             {"type": "compaction", "summary": "4 and 5"}]
        stale = await session._get_compaction_snapshot(2, prune_prefix=lambda item: item["content"] in "01")
        await session.add_items([_user("6")])
        assert not await stale.replace_suffix(0, [])  # the session moved since: nothing replaced
        fresh = await session._get_compaction_snapshot(2, prune_prefix=lambda item: item.get("content") in "01")
        assert await fresh.replace_suffix(0, [{"type": "compaction", "summary": "all"}])
        assert await session.get_items() == [_user("2"), _user("3"), {"type": "compaction", "summary": "all"}]

    asyncio.run(run())
    assert [c.metadata["operation"] for c in repo.log(session.branch, limit=3)] == ["compaction", "add_items",
                                                                                    "compaction"]
