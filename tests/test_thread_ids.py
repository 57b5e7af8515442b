"""The ids agent frameworks hand over, as branch names: every id that is Unicode text
makes a branch and reads back through every listing; an id that is not (a lone
surrogate) is refused where it enters, with a SnapvcError naming it; and a branch no id
makes (``x%FF``, whose escape is not UTF-8) is passed over by listings instead of
breaking them. The five entry points: ``repo.thread``, the OpenAI Agents session, the
ADK session service, the LangGraph saver and the Pydantic AI conversation store."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from google.adk.sessions.session import Session as AdkSession
from langgraph.checkpoint.base import empty_checkpoint
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import ModelRequest, UserPromptPart
from starlette.requests import Request

import snapvc
from snapvc import InvalidRefNameError, SnapvcError, parse_thread_branch, thread_branch
from snapvc.errors import InvalidArgumentError
from snapvc.integrations.adk import SnapvcSessionService
from snapvc.integrations.langgraph import SnapvcSaver
from snapvc.integrations.openai_agents import SnapvcSession
from snapvc.integrations.pydantic_ai import SnapvcConversations
from snapvc.refs.names import ref_name_problem
from snapvc.ui.api import Api

# Ids that are odd but valid text: each must make a valid branch and read back.
ODD_IDS = ["é🙂 ü", "100%", "%FF", "a/b", "..", ".", "x.lock", "-lead", "HEAD", "@", "@{u}", "a..b/", "~^:?*[\\",
           "\x00\x7f", "ü" * 3000]
LONE_SURROGATES = ["\ud800", "ok\udcff", "\udfff-end"]


@pytest.fixture
def repo(tmp_path: Path) -> snapvc.Repository:
    with snapvc.open(tmp_path / "ids.snapvc") as r:
        yield r


def _refused(caught: pytest.ExceptionInfo[SnapvcError], bad: str) -> None:
    """The error names the id (as its repr) and says what is wrong with it."""
    assert repr(bad) in str(caught.value) and "lone surrogate" in str(caught.value)


# -- the escaping itself -----------------------------------------------------------------


@pytest.mark.parametrize("thread_id", ODD_IDS)
def test_odd_ids_make_valid_branches_that_read_back(thread_id: str) -> None:
    for branch, back in ((thread_branch(thread_id), (thread_id, "")),
                         (thread_branch("t", thread_id), ("t", thread_id))):
        assert ref_name_problem(branch) is None, branch
        assert parse_thread_branch(branch) == back


@pytest.mark.parametrize("bad", LONE_SURROGATES)
def test_an_id_holding_a_lone_surrogate_is_refused_naming_it(bad: str) -> None:
    with pytest.raises(InvalidRefNameError) as caught:
        thread_branch(bad)
    _refused(caught, bad)
    with pytest.raises(InvalidRefNameError, match="namespace"):
        thread_branch("t", bad)


def test_a_branch_whose_escape_is_not_utf8_is_no_thread() -> None:
    with pytest.raises(InvalidRefNameError, match="x%FF"):
        parse_thread_branch("x%FF")
    with pytest.raises(InvalidRefNameError, match="%ED%A0%80"):
        parse_thread_branch("t/%ED%A0%80")  # the UTF-8-like form of a lone surrogate


# -- listings pass over a branch no id makes ---------------------------------------------


def test_a_branch_named_x_ff_does_not_break_the_thread_listings(repo: snapvc.Repository) -> None:
    repo.thread("kept").save({"n": 1}, metadata={"session_id": "s"})
    for name in ("x%FF", "y/%C3", "%ED%A0%80", "adk/app/%FF/s", "adk/app/u/%FF"):
        repo.commit({"n": 2}, branch=name)
    assert [t.id for t in repo.threads()] == ["kept"]
    assert [t.id for t in repo.session("s").threads()] == ["kept"]
    # The web view's thread list, as its JSON API serves it.
    request = Request({"type": "http", "method": "GET", "path": "/api/threads", "query_string": b"", "headers": []})
    assert [t["thread_id"] for t in Api(repo).threads(request)["threads"]] == ["kept"]
    # ADK's listing of the same repository passes over its own hand-made branches.
    service = SnapvcSessionService(repo)
    made = service.create_session_sync(app_name="app", user_id="u", session_id="s1")
    assert [s.id for s in service.list_sessions_sync(app_name="app").sessions] == [made.id]
    assert [s.id for s in service.list_sessions_page_sync(app_name="app").sessions] == [made.id]


# -- the five entry points: odd ids round trip, lone surrogates are refused ---------------


def test_threads_round_trip_odd_ids_and_refuse_lone_surrogates(repo: snapvc.Repository) -> None:
    for i, thread_id in enumerate(ODD_IDS):
        repo.thread(thread_id, session="sess/%").save({"i": i})
    assert sorted(t.id for t in repo.threads()) == sorted(ODD_IDS)
    assert sorted(t.id for t in repo.session("sess/%").threads()) == sorted(ODD_IDS)
    for i, thread_id in enumerate(ODD_IDS):
        assert repo.thread(thread_id).latest.values == {"i": i}
    for bad in LONE_SURROGATES:
        with pytest.raises(InvalidRefNameError) as caught:
            repo.thread(bad)
        _refused(caught, bad)
        with pytest.raises(InvalidRefNameError):
            repo.thread("t", namespace=bad)
        with pytest.raises(InvalidRefNameError):
            repo.thread(ODD_IDS[0]).fork(bad)
        with pytest.raises(InvalidArgumentError) as refused:
            repo.thread("t", session=bad)
        _refused(refused, bad)
        with pytest.raises(InvalidArgumentError) as refused:
            repo.session(bad)
        _refused(refused, bad)


def test_openai_sessions_round_trip_odd_ids_and_refuse_lone_surrogates(repo: snapvc.Repository) -> None:
    for session_id in ODD_IDS:
        SnapvcSession(session_id, repo).add_items_sync([{"role": "user", "content": session_id[:20]}])
    assert sorted(t.namespace for t in repo.threads()) == sorted(ODD_IDS)
    for session_id in ODD_IDS:
        assert SnapvcSession(session_id, repo).get_items_sync() == [{"role": "user", "content": session_id[:20]}]
    for bad in LONE_SURROGATES:
        with pytest.raises(InvalidArgumentError) as caught:
            SnapvcSession(bad, repo)
        assert caught.value.argument == "session_id"
        _refused(caught, bad)
        with pytest.raises(InvalidArgumentError) as caught:
            SnapvcSession("s", repo, prefix=bad)
        assert caught.value.argument == "prefix"


def test_adk_sessions_round_trip_odd_ids_and_refuse_lone_surrogates(repo: snapvc.Repository) -> None:
    service = SnapvcSessionService(repo)
    for app in ("app", "é/%"):
        made = {(user, sid) for user in ODD_IDS[:4] for sid in ODD_IDS}
        for user, sid in made:
            service.create_session_sync(app_name=app, user_id=user, session_id=sid, state={"user:u": user})
        listed = service.list_sessions_sync(app_name=app).sessions
        assert {(s.user_id, s.id) for s in listed} == made
        assert {s.state["user:u"] for s in listed} == set(ODD_IDS[:4])
        for user in ODD_IDS[:4]:
            assert {s.id for s in service.list_sessions_sync(app_name=app, user_id=user).sessions} == set(ODD_IDS)
        got = service.get_session_sync(app_name=app, user_id="a/b", session_id="ü" * 3000)
        assert got is not None and got.id == "ü" * 3000
    for bad in LONE_SURROGATES:
        for ids in ({"app_name": bad, "user_id": "u", "session_id": "s"},
                    {"app_name": "app", "user_id": bad, "session_id": "s"},
                    {"app_name": "app", "user_id": "u", "session_id": bad}):
            with pytest.raises(InvalidArgumentError) as caught:
                service.create_session_sync(**ids)
            _refused(caught, bad)
            with pytest.raises(InvalidArgumentError):
                service.get_session_sync(**ids)
            with pytest.raises(InvalidArgumentError):
                service.delete_session_sync(**ids)
            with pytest.raises(InvalidArgumentError):
                service.append_event_sync(AdkSession(id=ids["session_id"], app_name=ids["app_name"],
                                                     user_id=ids["user_id"]), _adk_event())
        with pytest.raises(InvalidArgumentError):
            service.list_sessions_sync(app_name="app", user_id=bad)


def _adk_event() -> Any:
    from google.adk.events import Event
    from google.genai import types

    return Event(author="user", content=types.Content(role="user", parts=[types.Part(text="hi")]))


def test_langgraph_threads_round_trip_odd_ids_and_refuse_lone_surrogates(repo: snapvc.Repository) -> None:
    saver = SnapvcSaver(repo)
    for thread_id in ODD_IDS:
        for ns in ("", "child:1/%"):
            config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
            saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
    listed = {(c.config["configurable"]["thread_id"], c.config["configurable"]["checkpoint_ns"])
              for c in saver.list(None)}
    assert listed == {(t, ns) for t in ODD_IDS for ns in ("", "child:1/%")}
    assert saver.get_tuple({"configurable": {"thread_id": "%FF", "checkpoint_ns": ""}}) is not None
    for bad in LONE_SURROGATES:
        for configurable in ({"thread_id": bad}, {"thread_id": "t", "checkpoint_ns": bad}):
            with pytest.raises(SnapvcError) as caught:
                saver.put({"configurable": configurable}, empty_checkpoint(), {}, {})
            _refused(caught, bad)
            with pytest.raises(SnapvcError):
                saver.get_tuple({"configurable": configurable})
        with pytest.raises(SnapvcError):
            list(saver.list({"configurable": {"thread_id": bad}}))
        # A namespace no branch can have lists nothing.
        assert list(saver.list({"configurable": {"thread_id": "%FF", "checkpoint_ns": bad}})) == []
        with pytest.raises(SnapvcError):
            saver.delete_thread(bad)
        with pytest.raises(SnapvcError):
            saver.copy_thread("%FF", bad)


def test_pydantic_ai_conversations_round_trip_odd_ids_and_refuse_lone_surrogates(repo: snapvc.Repository) -> None:
    store = SnapvcConversations(repo)

    async def scenario() -> None:
        for cid in ODD_IDS:
            await store.save(Conversation(conversation_id=cid,
                                          messages=[ModelRequest(parts=[UserPromptPart(cid[:20])])]))
        assert sorted(r.conversation_id for r in await store.list_conversations()) == sorted(ODD_IDS)
        for cid in ODD_IDS:
            loaded = await store.load(cid)
            assert loaded is not None and loaded.messages[0].parts[0].content == cid[:20]
        for bad in LONE_SURROGATES:
            with pytest.raises(InvalidRefNameError) as caught:
                await store.load(bad)
            _refused(caught, bad)
            with pytest.raises(SnapvcError):
                await store.save(Conversation(conversation_id=bad))

    asyncio.run(scenario())
