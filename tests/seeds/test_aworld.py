"""AWorld (``aworld.checkpoint``): the typed Checkpoint (id, ts, metadata with
session_id and task_id, values, version, parent_id, namespace), a repository with get and
put by id and get and delete by session, in sync and async forms, an in-memory
implementation, and version utilities.

AWorld's ``CheckpointRepository`` is a snapvc repository: a checkpoint is put on a
thread (whose metadata carries the session and task ids), got back by id anywhere
(``repo.checkpoint(id)``), and sessions are ``repo.session(session_id)``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path

import pytest

import snapvc
import snapvc.aio


@pytest.fixture
def repo() -> snapvc.Repository:
    return snapvc.open("memory://")  # InMemoryCheckpointRepository()


def test_usage_example(repo: snapvc.Repository) -> None:
    metadata = {"session_id": "session-123", "task_id": "task-456"}  # CheckpointMetadata(...)
    values = {"step": 1, "score": 100}
    checkpoint = repo.thread("task-456").save(values, metadata=metadata)  # create_checkpoint + repo.put
    restored = repo.checkpoint(checkpoint.id)  # repo.get(checkpoint.id)
    assert restored == checkpoint
    assert restored.values == {"step": 1, "score": 100}
    assert restored.metadata == metadata


def test_the_typed_checkpoint(repo: snapvc.Repository) -> None:
    thread = repo.thread("task-456", namespace="planner", session="session-123", metadata={"task_id": "task-456"})
    first = thread.save({"step": 1})
    second = thread.save({"step": 2})
    assert len(second.id) == 64 and int(second.id, 16) >= 0  # id
    assert isinstance(second.created_at, dt.datetime)  # ts
    assert second.metadata["session_id"] == "session-123" and second.metadata["task_id"] == "task-456"
    assert second.values == {"step": 2}
    assert (first.version, second.version) == (1, 2)
    assert (first.parent_id, second.parent_id) == (None, first.id)
    assert second.namespace == "planner"
    assert snapvc.Checkpoint.from_dict(second.to_dict()) == second


def test_get_and_delete_by_session(repo: snapvc.Repository) -> None:
    repo.thread("task-1", session="session-123").save({"step": 1})
    repo.thread("task-2", session="session-123").save({"step": 1})
    latest = repo.thread("task-2", session="session-123").save({"step": 2})
    other = repo.thread("task-3", session="session-999").save({"step": 1})
    session = repo.session("session-123")
    assert session.latest == latest  # get_by_session
    assert [cp.values["step"] for cp in session.checkpoints()] == [2, 1, 1]
    assert session.delete() == ["task-1", "task-2"]  # delete_by_session
    assert session.latest is None
    assert repo.session("session-999").latest == other


def test_async_repository(tmp_path: Path) -> None:
    async def main() -> None:
        async with await snapvc.aio.open(tmp_path / "agent.snapvc") as repo:
            thread = repo.thread("task-456", session="session-123")
            checkpoint = await thread.save({"step": 1, "score": 100})  # await repo.aput(checkpoint)
            assert await repo.checkpoint(checkpoint.id) == checkpoint  # await repo.aget(id)
            assert await repo.session("session-123").latest() == checkpoint
            assert await repo.session("session-123").delete() == ["task-456"]
            assert await repo.session("session-123").latest() is None
    asyncio.run(main())


def test_version_utilities(repo: snapvc.Repository) -> None:
    thread = repo.thread("task-1")
    checkpoints = [thread.save({"step": i}) for i in range(1, 4)]
    assert [cp.version for cp in checkpoints] == [1, 2, 3]
    assert thread.list_versions() == [1, 2, 3]
    assert max(checkpoints, key=lambda cp: cp.version) == thread.latest  # compare versions
    assert thread.get(version=2).parent_id == checkpoints[0].id  # the version before
    assert thread.versions() == {"step": 3}  # how often each field changed
    empty = repo.thread("task-2").save({})  # empty_checkpoint()
    assert empty.values == {} and empty.version == 1
