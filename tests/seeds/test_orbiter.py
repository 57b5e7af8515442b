"""Orbiter (``orbiter.context``): Context.snapshot/restore, the frozen Checkpoint,
to_dict/from_dict, CheckpointStore, rollback on error, progress of long tasks,
branching, JSON persistence and comparing checkpoints.

Orbiter's ``Context(task_id=...)`` is a snapvc thread: ``repo.thread(task_id)``; its
``ctx.state`` and ``ctx.snapshot()``/``ctx.restore()`` are the thread's ``State``; its
``CheckpointStore`` is the ``Thread`` itself, where every snapshot is already saved.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
from pathlib import Path

import pytest

import snapvc
from snapvc.agent.runner import Runner


@pytest.fixture
def repo(tmp_path: Path) -> snapvc.Repository:
    with snapvc.open(tmp_path / "agent.snapvc") as r:
        yield r


def test_basic_usage(repo: snapvc.Repository) -> None:
    state = repo.thread("task-1").state()  # ctx = Context(task_id="task-1")
    state.set("progress", "step-3")
    state.set("data", {"results": [1, 2, 3]})
    checkpoint = state.snapshot(metadata={"reason": "before risky tool call"})
    assert checkpoint.branch == "task-1"
    assert checkpoint.version == 1
    assert checkpoint.values == {"progress": "step-3", "data": {"results": [1, 2, 3]}}
    assert checkpoint.metadata == {"reason": "before risky tool call"}


def test_checkpoint_structure_is_frozen_and_serializable(repo: snapvc.Repository) -> None:
    state = repo.thread("task-1").state()
    state.set("step", 1)
    checkpoint = state.snapshot(metadata={"step": 1}, token_usage={"prompt_tokens": 12, "completion_tokens": 3})
    with pytest.raises(dataclasses.FrozenInstanceError):
        checkpoint.version = 7  # type: ignore[misc]
    with pytest.raises(TypeError):
        checkpoint.values["step"] = 2  # type: ignore[index]
    assert checkpoint.token_usage == {"prompt_tokens": 12, "completion_tokens": 3}
    assert isinstance(checkpoint.created_at, dt.datetime) and checkpoint.created_at.tzinfo is not None
    data = checkpoint.to_dict()
    assert dt.datetime.fromisoformat(data["created_at"]) == checkpoint.created_at  # an ISO timestamp
    assert {"version", "values", "token_usage", "metadata", "created_at"} <= data.keys()
    restored = snapvc.Checkpoint.from_dict(data)
    assert restored == checkpoint


def test_save_and_restore(repo: snapvc.Repository) -> None:
    state = repo.thread("task-1").state()
    state.set("step", 1)
    cp1 = state.snapshot(metadata={"step": 1})
    state.set("step", 2)
    state.set("result", "intermediate")
    state.restore(cp1)  # something went wrong: roll back
    assert state.get("step") == 1
    assert state.get("result") is None  # was not in the checkpoint
    assert "result" not in state


def test_checkpoint_store(repo: snapvc.Repository) -> None:
    store = repo.thread("task-1")  # CheckpointStore()
    state = store.state()
    checkpoints = []
    for step in (1, 2, 3):
        state.set("step", step)
        checkpoints.append(state.snapshot())
    for checkpoint in checkpoints:
        store.save(checkpoint)  # already saved by the snapshot: nothing is stored twice
    latest = store.latest
    assert latest.version == 3
    assert store.get(version=1).values == {"step": 1}
    assert store.list_versions() == [1, 2, 3]


async def _flaky_tool(**args: object) -> str:
    raise ConnectionError(f"tool failed with {args}")


async def _good_tool(**args: object) -> str:
    return f"ok {args}"


async def _safe_tool_execution(state: snapvc.State, tool, args: dict[str, object]) -> str:  # type: ignore[no-untyped-def]
    """Orbiter's pattern, with ``rollback_on_error`` doing the restore."""
    try:
        async with state.rollback_on_error():
            state.set("calls", state.get("calls", 0) + 1)
            result = await tool(**args)
            state.set("last_tool_result", result)
            return result
    except Exception as e:
        state.set("last_error", str(e))
        raise


def test_rollback_on_error(repo: snapvc.Repository) -> None:
    state = repo.thread("task-1").state()
    state.set("calls", 0)
    state.snapshot()
    assert asyncio.run(_safe_tool_execution(state, _good_tool, {"q": 1})) == "ok {'q': 1}"
    assert state.get("calls") == 1
    with pytest.raises(ConnectionError):
        asyncio.run(_safe_tool_execution(state, _flaky_tool, {"q": 2}))
    assert state.get("calls") == 1  # the failed call's change is rolled back
    assert state.get("last_tool_result") == "ok {'q': 1}"
    assert state.get("last_error") == "tool failed with {'q': 2}"
    # Orbiter's explicit form works as well
    checkpoint = state.snapshot(metadata={"before_tool": "flaky"})
    state.set("calls", 99)
    state.restore(checkpoint)
    assert state.get("calls") == 1


def test_long_running_task_progress(repo: snapvc.Repository) -> None:
    """Orbiter saves a checkpoint before each step and restores the latest on failure;
    snapvc's Runner does it after each step and resumes at the next one."""
    store = repo.thread("long-task")
    failing = {"analyze"}
    ran: list[str] = []

    def step(name: str):  # type: ignore[no-untyped-def]
        def run(state: snapvc.State) -> None:
            ran.append(name)
            state.set(f"done.{name}", True)
            if name in failing:
                raise RuntimeError(f"{name} failed")
        run.__name__ = name
        return run

    steps = [step(n) for n in ("fetch", "analyze", "report")]
    with pytest.raises(RuntimeError, match="analyze failed"):
        Runner(store, steps).run()
    assert store.latest.metadata["step_name"] == "fetch"
    assert store.latest.values == {"done": {"fetch": True}}  # the failed step left no trace
    failing.clear()
    Runner(store, steps).run()  # resumes from the last good state
    assert ran == ["fetch", "analyze", "analyze", "report"]
    assert store.latest.values == {"done": {"fetch": True, "analyze": True, "report": True}}
    assert [cp.metadata["step"] for cp in store.checkpoints()] == [3, 2, 1]


def test_branching_execution(repo: snapvc.Repository) -> None:
    state = repo.thread("task-1").state()
    state.set("question", "which approach?")
    branch_point = state.snapshot(metadata={"branch": "decision_point"})
    state.set("approach", "A")
    result_a_success = False  # try_approach_a(ctx) did not succeed
    if not result_a_success:
        state.restore(branch_point)
        state.set("approach", "B")
    assert state.get("approach") == "B"
    # snapvc keeps both paths: approach A continues on a branch of its own
    path_a = state.fork("task-1-approach-a", at=branch_point)
    path_a.set("approach", "A")
    path_a.snapshot()
    state.snapshot()
    assert repo.checkout("task-1")["approach"] == "B"
    assert repo.checkout("task-1-approach-a")["approach"] == "A"
    assert repo.merge_base("task-1", "task-1-approach-a") == snapvc.ObjectId.from_hex(branch_point.id)


def test_checkpoint_persistence(repo: snapvc.Repository, tmp_path: Path) -> None:
    state = repo.thread("task-1").state()
    state.update({"notes": ["a", "b"], "raw": b"\x00\xff", "when": dt.datetime(2026, 1, 2, tzinfo=dt.UTC)})
    checkpoint = state.snapshot(metadata={"reason": "daily backup"})
    path = tmp_path / "checkpoint.json"
    with open(path, "w") as f:
        json.dump(checkpoint.to_dict(), f)
    with open(path) as f:
        data = json.load(f)
    restored = snapvc.Checkpoint.from_dict(data)
    assert restored == checkpoint
    state.set("notes", [])
    state.restore(restored)
    assert dict(state) == {"notes": ["a", "b"], "raw": b"\x00\xff", "when": dt.datetime(2026, 1, 2, tzinfo=dt.UTC)}
    with snapvc.open(tmp_path / "elsewhere.snapvc") as other:  # a repository that never saw it
        elsewhere = other.state()
        elsewhere.restore(restored)
        assert dict(elsewhere) == dict(state)


def test_comparing_checkpoints(repo: snapvc.Repository) -> None:
    store = repo.thread("task-1")
    state = store.state()
    state.update({"plan": "draft", "notes": [1], "tmp": True})
    cp_before = state.snapshot()
    store.save(cp_before)
    state.set("plan", "final")
    state.delete("tmp")
    state.set("answer", 42)
    cp_after = state.snapshot()
    store.save(cp_after)
    # Orbiter's comparison, on the checkpoints' values
    added = set(cp_after.values.keys()) - set(cp_before.values.keys())
    removed = set(cp_before.values.keys()) - set(cp_after.values.keys())
    changed = {k for k in cp_before.values.keys() & cp_after.values.keys() if cp_before.values[k] != cp_after.values[k]}
    assert (added, removed, changed) == ({"answer"}, {"tmp"}, {"plan"})
    # snapvc's: a structural diff, summarized by top-level key
    keys = snapvc.key_changes(repo.diff(cp_before, cp_after))
    assert (keys.added, keys.removed, keys.changed) == (added, removed, changed)
    assert [(c.path, c.old, c.new) for c in repo.diff(cp_before, cp_after) if c.kind == "modified"] == [
        (("plan",), "draft", "final")]
