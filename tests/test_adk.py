"""``SnapvcSessionService`` (snapvc.integrations.adk): Google ADK's session service on a
repository.

The google-adk source distribution ships no tests; the behaviours of ADK's own
session-service suite (``tests/unittests/sessions/test_session_service.py`` of
github.com/google/adk-python, parametrized over its services) are tested here on ours,
each test naming the one it mirrors. The rest covers what is ours: the branches, the
commits, stale copies, paging, a real ``Runner`` with an ``LlmAgent`` on a scripted
model, a fresh process, and concurrent appends.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events import Event, EventActions
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.tools.tool_context import ToolContext
from google.genai import types

import snapvc
from snapvc.errors import InvalidArgumentError, SnapvcError, UnsupportedValueError
from snapvc.integrations.adk import (
    SnapvcSessionService,
    StaleSessionServiceError,
    session_branch,
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(params=["sqlite", "memory"])
def repo(request: pytest.FixtureRequest, tmp_path: Path) -> snapvc.Repository:
    location = str(tmp_path / "adk.snapvc") if request.param == "sqlite" else "memory://"
    return snapvc.open(location)


@pytest.fixture
def service(repo: snapvc.Repository) -> SnapvcSessionService:
    return SnapvcSessionService(repo)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def text_event(text: str, author: str = "user", **kwargs: Any) -> Event:
    return Event(invocation_id="invocation", author=author,
                 content=types.Content(role="user", parts=[types.Part(text=text)]), **kwargs)


# -- ADK's own suite, on this service ---------------------------------------------------------


def test_get_empty_session(service: SnapvcSessionService) -> None:
    # test_session_service.py::test_get_empty_session
    assert run(service.get_session(app_name="my_app", user_id="test_user", session_id="123")) is None


def test_create_get_session(service: SnapvcSessionService) -> None:
    # test_session_service.py::test_create_get_session
    session = run(service.create_session(app_name="my_app", user_id="test_user", state={"key": "value"}))
    assert (session.app_name, session.user_id, session.state) == ("my_app", "test_user", {"key": "value"})
    assert session.id
    assert run(service.get_session(app_name="my_app", user_id="test_user", session_id=session.id)) == session
    run(service.delete_session(app_name="my_app", user_id="test_user", session_id=session.id))
    assert run(service.get_session(app_name="my_app", user_id="test_user", session_id=session.id)) is None
    # Deleting it again (or one that never was) is no error, as in ADK's services.
    run(service.delete_session(app_name="my_app", user_id="test_user", session_id=session.id))


def test_create_and_list_sessions(service: SnapvcSessionService) -> None:
    # test_session_service.py::test_create_and_list_sessions
    ids = [f"session{i}" for i in range(5)]
    for session_id in ids:
        run(service.create_session(app_name="my_app", user_id="test_user", session_id=session_id,
                                   state={"n": session_id}))
    sessions = run(service.list_sessions(app_name="my_app", user_id="test_user")).sessions
    assert [s.id for s in sessions] == ids  # oldest update first
    assert [s.state for s in sessions] == [{"n": i} for i in ids]  # with state, no events, as ADK's
    assert all(s.events == [] for s in sessions)


def test_session_state(service: SnapvcSessionService) -> None:
    # test_session_service.py::test_session_state
    session_11 = run(service.create_session(app_name="my_app", user_id="user1", state={"key11": "value11"},
                                            session_id="session11"))
    run(service.create_session(app_name="my_app", user_id="user1", state={"key12": "value12"},
                               session_id="session12"))
    run(service.create_session(app_name="my_app", user_id="user2", session_id="session2"))
    event = text_event("text", actions=EventActions(state_delta={
        "app:key": "value", "user:key1": "value1", "temp:key": "temp", "key11": "value11_new"}))
    run(service.append_event(session=session_11, event=event))
    assert session_11.state["app:key"] == "value"
    assert session_11.state["key11"] == "value11_new"
    assert session_11.state["user:key1"] == "value1"
    assert session_11.state["temp:key"] == "temp"  # in memory for this invocation only
    assert "temp:key" not in event.actions.state_delta  # ...and never stored

    session_12 = run(service.get_session(app_name="my_app", user_id="user1", session_id="session12"))
    assert session_12.state == {"key12": "value12", "app:key": "value", "user:key1": "value1"}
    session_2 = run(service.get_session(app_name="my_app", user_id="user2", session_id="session2"))
    assert session_2.state == {"app:key": "value"}
    session_11 = run(service.get_session(app_name="my_app", user_id="user1", session_id="session11"))
    assert session_11.state == {"key11": "value11_new", "app:key": "value", "user:key1": "value1"}
    assert run(service.get_user_state(app_name="my_app", user_id="user1")) == {"key1": "value1"}
    assert run(service.get_user_state(app_name="my_app", user_id="nobody")) == {}


def test_create_new_session_will_merge_states(service: SnapvcSessionService) -> None:
    # test_session_service.py::test_create_new_session_will_merge_states
    session_1 = run(service.create_session(app_name="my_app", user_id="user", state={"key1": "value1"},
                                           session_id="session1"))
    run(service.append_event(session=session_1, event=text_event("text", actions=EventActions(
        state_delta={"app:key": "value", "user:key1": "value1", "temp:key": "temp"}))))
    session_2 = run(service.create_session(app_name="my_app", user_id="user", state={}, session_id="session2"))
    assert session_2.state == {"app:key": "value", "user:key1": "value1"}


def test_append_event_bytes(service: SnapvcSessionService) -> None:
    # test_session_service.py::test_append_event_bytes
    session = run(service.create_session(app_name="my_app", user_id="user"))
    content = types.Content(role="user", parts=[types.Part.from_bytes(data=b"\x00test_image\xff", mime_type="image/png")])
    grounding = types.GroundingMetadata(search_entry_point=types.SearchEntryPoint(sdk_blob=b"test_sdk_blob"))
    run(service.append_event(session=session, event=Event(invocation_id="invocation", author="user", content=content,
                                                          grounding_metadata=grounding)))
    again = run(service.get_session(app_name="my_app", user_id="user", session_id=session.id))
    assert len(again.events) == 1
    assert again.events[0].content == content
    assert again.events[0].grounding_metadata == grounding


def test_append_event_complete(service: SnapvcSessionService) -> None:
    # test_session_service.py::test_append_event_complete
    session = run(service.create_session(app_name="my_app", user_id="user"))
    event = Event(invocation_id="invocation", author="user",
                  content=types.Content(role="user", parts=[types.Part(text="test_text")]), turn_complete=True,
                  partial=False, actions=EventActions(artifact_delta={"file": 0}, transfer_to_agent="agent",
                                                      escalate=True),
                  long_running_tool_ids={"tool1"}, error_code="error_code", error_message="error_message",
                  interrupted=True)
    run(service.append_event(session=session, event=event))
    assert run(service.get_session(app_name="my_app", user_id="user", session_id=session.id)) == session


def test_get_session_with_config(service: SnapvcSessionService) -> None:
    # test_session_service.py::test_get_session_with_config
    session = run(service.create_session(app_name="my_app", user_id="user"))
    for i in range(1, 6):
        session = run(service.get_session(app_name="my_app", user_id="user", session_id=session.id))
        run(service.append_event(session, Event(author="user", timestamp=i)))

    def events(**config: Any) -> list[float]:
        got = run(service.get_session(app_name="my_app", user_id="user", session_id=session.id,
                                      config=GetSessionConfig(**config) if config else None))
        return [e.timestamp for e in got.events]

    assert events() == [1, 2, 3, 4, 5]
    assert events(num_recent_events=3) == [3, 4, 5]
    assert events(num_recent_events=0) == []
    assert events(num_recent_events=9) == [1, 2, 3, 4, 5]
    assert events(after_timestamp=4.0) == [4, 5]
    assert events(after_timestamp=50) == []
    assert events(after_timestamp=4.0, num_recent_events=3) == [4, 5]


def test_partial_events_are_not_stored(service: SnapvcSessionService, repo: snapvc.Repository) -> None:
    # base_session_service.py: a partial (streaming) event is returned as it is.
    session = run(service.create_session(app_name="my_app", user_id="user", session_id="s"))
    run(service.append_event(session, text_event("stream", partial=True)))
    assert session.events == []
    assert len(list(repo.log(session_branch("my_app", "user", "s")))) == 1


def test_create_twice_and_append_to_a_missing_session(service: SnapvcSessionService) -> None:
    session = run(service.create_session(app_name="my_app", user_id="user", session_id="s1"))
    with pytest.raises(AlreadyExistsError) as exists:
        run(service.create_session(app_name="my_app", user_id="user", session_id=" s1 "))  # ids are stripped
    assert isinstance(exists.value, SnapvcError) and "s1" in str(exists.value)
    run(service.delete_session(app_name="my_app", user_id="user", session_id="s1"))
    with pytest.raises(SessionNotFoundError) as missing:
        run(service.append_event(session, text_event("hello")))
    assert isinstance(missing.value, SnapvcError) and "adk/my_app/user/s1" in str(missing.value)


# -- what is ours: branches, commits, stale copies, paging -----------------------------------------------


def test_sessions_are_branches_and_events_commits(service: SnapvcSessionService, repo: snapvc.Repository) -> None:
    session = run(service.create_session(app_name="my app", user_id="u/1", session_id="s.1",
                                         state={"topic": "cats", "app:model": "m1"}))
    run(service.append_event(session, text_event("hello there", actions=EventActions(state_delta={"topic": "dogs"}))))
    branch = session_branch("my app", "u/1", "s.1")
    assert branch == "adk/my%20app/u%2F1/s.1"
    assert set(repo.branches()) == {branch, "adk/my%20app/+app"}
    log = list(repo.log(branch))
    assert [c.message for c in log] == ["user: hello there", "session s.1 created"]
    assert log[0].metadata["adk"] == {"app": "my app", "user": "u/1", "session": "s.1", "time": session.last_update_time}
    changes = {(".".join(map(str, c.path)), c.kind) for c in repo.diff(log[1].id, log[0].id)}
    assert ("state.topic", "modified") in changes
    assert repo.checkout(branch)["events"][0]["content"]["parts"][0]["text"] == "hello there"
    assert repo.checkout("adk/my%20app/+app") == {"model": "m1"}


@pytest.mark.parametrize(("app", "user", "session", "argument"), [
    ("", "u", "s", "app_name"), ("a", "", "s", "user_id"), ("a", 3, "s", "user_id"), ("a", "u", ["s"], "session_id")])
def test_a_bad_id_names_itself(service: SnapvcSessionService, app: Any, user: Any, session: Any,
                               argument: str) -> None:
    for call in (lambda: run(service.create_session(app_name=app, user_id=user, session_id=session)),
                 lambda: run(service.get_session(app_name=app, user_id=user, session_id=session))):
        with pytest.raises(InvalidArgumentError) as err:
            call()
        assert err.value.argument == argument
        assert argument in str(err.value) and repr({"app_name": app, "user_id": user}.get(argument, session)) in str(err.value)


def test_a_stale_copy_is_refused(service: SnapvcSessionService, repo: snapvc.Repository) -> None:
    first = run(service.create_session(app_name="a", user_id="u", session_id="s"))
    second = run(service.get_session(app_name="a", user_id="u", session_id="s"))
    run(service.append_event(first, text_event("one")))
    with pytest.raises(StaleSessionServiceError) as err:
        run(service.append_event(second, text_event("two", actions=EventActions(state_delta={"app:x": 1}))))
    assert "adk/a/u/s" in str(err.value)
    assert "app:x" not in run(service.get_session(app_name="a", user_id="u", session_id="s")).state  # nothing written
    fresh = run(service.get_session(app_name="a", user_id="u", session_id="s"))
    run(service.append_event(fresh, text_event("two")))
    assert [e.content.parts[0].text for e in fresh.events] == ["one", "two"]
    # A copy the service did not hand out is judged by its last update time, as ADK's services do.
    old = fresh.model_copy()
    old._storage_update_marker = None
    old.last_update_time = 0.0
    with pytest.raises(StaleSessionServiceError):
        run(service.append_event(old, text_event("three")))


def test_an_event_that_cannot_be_stored_is_refused_before_any_state(service: SnapvcSessionService,
                                                                     repo: snapvc.Repository) -> None:
    # Text that is not valid Unicode (a lone surrogate) has no JSON form: the event names
    # itself, and neither the session nor the app state it carried is written.
    session = run(service.create_session(app_name="a", user_id="u", session_id="s"))
    run(service.append_event(session, text_event("one")))
    before = repo.branches()
    bad = text_event("bad \ud800", actions=EventActions(state_delta={"app:k": "x", "k": "y"}))
    with pytest.raises(UnsupportedValueError) as err:
        run(service.append_event(session, bad))
    assert repr(bad.id) in str(err.value) and "surrogate" in str(err.value)
    assert repo.branches() == before
    run(service.append_event(session, text_event("two", actions=EventActions(state_delta={"k": "ok"}))))
    again = run(service.get_session(app_name="a", user_id="u", session_id="s"))
    assert [e.content.parts[0].text for e in again.events] == ["one", "two"]
    assert again.state == {"k": "ok"}


def test_pages_cover_every_session_once(service: SnapvcSessionService) -> None:
    for user in ("u1", "u2", "u3"):
        for i in range(7):
            run(service.create_session(app_name="app", user_id=user, session_id=f"s{i}",
                                       state={"user:name": user, "i": i}))
    run(service.create_session(app_name="other", user_id="u1", session_id="elsewhere"))
    seen, token, pages = [], None, 0
    while True:
        page = run(service.list_sessions_page(app_name="app", page_size=4, page_token=token))
        pages += 1
        seen += [(s.user_id, s.id, s.state["i"], s.state["user:name"]) for s in page.sessions]
        token = page.next_page_token
        if token is None:
            break
    assert pages == 6  # 21 sessions: five of 4, one of 1
    assert seen == [(u, f"s{i}", i, u) for u in ("u1", "u2", "u3") for i in range(7)]
    one_user = run(service.list_sessions_page(app_name="app", user_id="u2", page_size=100))
    assert [s.id for s in one_user.sessions] == [f"s{i}" for i in range(7)] and one_user.next_page_token is None
    assert len(run(service.list_sessions(app_name="app")).sessions) == 21
    with pytest.raises(InvalidArgumentError):
        run(service.list_sessions_page(app_name="app", page_size=0))
    with pytest.raises(InvalidArgumentError):
        run(service.list_sessions_page(app_name="app", page_token="adk/other/u1/elsewhere"))


def test_concurrent_appends_to_two_sessions(service: SnapvcSessionService, repo: snapvc.Repository) -> None:
    async def converse(session_id: str) -> None:
        session = await service.create_session(app_name="app", user_id="u", session_id=session_id)
        for i in range(20):
            await service.append_event(session, text_event(f"{session_id} {i}", actions=EventActions(
                state_delta={"turn": i, "user:last": session_id})))

    async def both() -> None:
        await asyncio.gather(converse("a"), converse("b"))

    run(both())
    for session_id in ("a", "b"):
        got = run(service.get_session(app_name="app", user_id="u", session_id=session_id))
        assert [e.content.parts[0].text for e in got.events] == [f"{session_id} {i}" for i in range(20)]
        assert got.state["turn"] == 19
        assert len(list(repo.log(session_branch("app", "u", session_id)))) == 21


# -- a real Runner and LlmAgent on a scripted model ---------------------------------------------------


class ScriptedModel(BaseLlm):
    """A model that answers from a script: a function call first, then text."""

    model: str = "scripted"
    calls: int = 0

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False
                                     ) -> AsyncGenerator[LlmResponse, None]:
        self.calls += 1
        if self.calls % 2 == 1:
            part = types.Part(function_call=types.FunctionCall(name="remember", args={"fact": f"fact {self.calls}"}))
        else:
            part = types.Part(text=f"noted ({self.calls})")
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


def remember(fact: str, tool_context: ToolContext) -> dict[str, Any]:
    """Remember a fact."""
    tool_context.state["facts"] = [*tool_context.state.get("facts", []), fact]
    tool_context.state["user:facts_told"] = tool_context.state.get("user:facts_told", 0) + 1
    return {"ok": True}


def test_runner_with_an_llm_agent_round_trips(tmp_path: Path) -> None:
    location = str(tmp_path / "runner.snapvc")
    agent = LlmAgent(name="helper", model=ScriptedModel(), instruction="Remember facts.", tools=[remember],
                     output_key="last_reply")
    service = SnapvcSessionService(location)
    runner = Runner(app_name="facts", agent=agent, session_service=service)

    async def talk() -> list[Event]:
        await service.create_session(app_name="facts", user_id="ann", session_id="chat")
        out = []
        for text in ("the sky is blue", "water is wet"):
            async for event in runner.run_async(user_id="ann", session_id="chat",
                                                new_message=types.Content(role="user", parts=[types.Part(text=text)])):
                out.append(event)
        return out

    produced = run(talk())
    session = run(service.get_session(app_name="facts", user_id="ann", session_id="chat"))
    assert [e.model_dump(mode="json") for e in session.events if e.author != "user"] == \
        [e.model_dump(mode="json") for e in produced]
    assert session.state["facts"] == ["fact 1", "fact 3"]
    assert session.state["last_reply"] == "noted (4)"
    assert session.state["user:facts_told"] == 2
    calls = [p.function_call.name for e in session.events for p in (e.content.parts if e.content else [])
             if p.function_call]
    assert calls == ["remember", "remember"]

    # A fresh process reads the same session back from the file.
    script = textwrap.dedent(f"""
        import asyncio, json
        from snapvc.integrations.adk import SnapvcSessionService
        service = SnapvcSessionService({location!r})
        s = asyncio.run(service.get_session(app_name="facts", user_id="ann", session_id="chat"))
        print(json.dumps([len(s.events), s.state["facts"], s.state["user:facts_told"]]))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == f'[{len(session.events)}, ["fact 1", "fact 3"], 2]'
    repo = snapvc.open(location)
    messages = [c.message for c in repo.log(session_branch("facts", "ann", "chat"))][::-1]
    assert messages[:4] == ["session chat created", "user: the sky is blue", "helper: call remember",
                            "helper: result of remember"]
