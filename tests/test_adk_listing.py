"""Listing sessions of ``SnapvcSessionService``: the tips' commits are read together, what
a listing learns of a commit is kept, and the sessions listed are the same however their
commits were read (a first listing, a later one, a commit kept in the object store by an
older snapvc)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from google.adk.events import Event, EventActions
from google.genai import types

import snapvc
from snapvc.ids import ObjectId
from snapvc.integrations.adk import SnapvcSessionService, session_branch
from snapvc.objects import COMMIT, Commit, split_object


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class CountingIndex:
    """The repository's own commit index, counting the reads of a listing."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if callable(attr):
            def counted(*args: Any, **kwargs: Any) -> Any:
                self.calls[name] = self.calls.get(name, 0) + 1
                return attr(*args, **kwargs)
            return counted
        return attr


def _fill(service: SnapvcSessionService) -> None:
    for i in range(30):
        run(service.create_session(app_name="app", user_id=f"u{i % 3}", session_id=f"s{i:02d}",
                                   state={"i": i, "user:plan": f"plan of u{i % 3}", "app:name": "the app"}))


def _seen(sessions: list[Any]) -> list[tuple[Any, ...]]:
    return [(s.user_id, s.id, s.state, s.last_update_time, s.events) for s in sessions]


def test_a_listing_reads_the_tips_commits_in_one_call(tmp_path: Path) -> None:
    path = tmp_path / "adk.snapvc"
    with snapvc.open(path) as repo:
        _fill(SnapvcSessionService(repo))
        expected = _seen(run(SnapvcSessionService(repo).list_sessions(app_name="app")).sessions)
    with snapvc.open(path) as repo:  # no commit read yet in this process
        index = CountingIndex(repo.commits)
        repo.commits = index  # type: ignore[assignment]
        service = SnapvcSessionService(repo)
        listed = run(service.list_sessions(app_name="app")).sessions
        assert _seen(listed) == expected
        assert index.calls.get("get_many") == 1
        # One read for the app's state and one per user's (checked out whole), none per session.
        assert index.calls.get("first_parent_chain") == 1 + 3 and "get" not in index.calls
        assert len(listed) == 30 and listed[4].state == {"i": 4, "user:plan": "plan of u1", "app:name": "the app"}
        # A listing again reads no commit: what it needs of each was kept.
        assert _seen(run(service.list_sessions(app_name="app")).sessions) == expected
        assert index.calls.get("get_many") == 1 and index.calls.get("first_parent_chain") == 4
        page = run(service.list_sessions_page(app_name="app", page_size=5))
        assert _seen(page.sessions) == [e for e in expected if e[0] == "u0"][:5]
        assert index.calls.get("get_many") == 1


def test_a_listing_follows_a_session_that_moved(tmp_path: Path) -> None:
    service = SnapvcSessionService(snapvc.open(tmp_path / "adk.snapvc"))
    _fill(service)
    before = {s.id: s for s in run(service.list_sessions(app_name="app")).sessions}
    session = run(service.get_session(app_name="app", user_id="u1", session_id="s04"))
    event = Event(invocation_id="i", author="user", timestamp=before["s04"].last_update_time + 100,
                  content=types.Content(role="user", parts=[types.Part(text="hello")]),
                  actions=EventActions(state_delta={"i": "changed", "new": [1, 2]}))
    run(service.append_event(session, event))
    after = run(service.list_sessions(app_name="app")).sessions
    assert after[-1].id == "s04"  # the newest update lists last
    assert after[-1].state == {"i": "changed", "new": [1, 2], "user:plan": "plan of u1", "app:name": "the app"}
    assert after[-1].last_update_time == event.timestamp
    assert {s.id: s for s in after[:-1]} == {k: v for k, v in before.items() if k != "s04"}


@pytest.mark.parametrize("where", ["memory://", "file"])
def test_a_tip_kept_only_in_the_object_store_is_listed(where: str, tmp_path: Path) -> None:
    """Repositories written before the commit index held commits keep them as objects: a
    tip the index lacks is read from there, and the listing is the same."""
    repo = snapvc.open(where if where == "memory://" else tmp_path / "adk.snapvc")
    _fill(SnapvcSessionService(repo))
    expected = _seen(run(SnapvcSessionService(repo).list_sessions(app_name="app")).sessions)
    tip = repo.resolve(session_branch("app", "u2", "s05"))
    commit = repo.commits.get(tip)
    assert isinstance(commit, Commit)
    data = commit.encode()  # the commit object's canonical bytes, as an older snapvc stored them
    assert split_object(tip, data)[0] == COMMIT and ObjectId.of(data) == tip
    with repo.backend.transaction():
        repo.store.put_many([(tip, data)])
        assert repo.commits.delete_many([tip]) == 1
    fresh = snapvc.Repository(repo.backend)  # no commit cached in it
    assert fresh.commits.get(tip) is None
    assert _seen(run(SnapvcSessionService(fresh).list_sessions(app_name="app")).sessions) == expected
