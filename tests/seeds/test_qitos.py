"""QitOS (``qitos.checkpoint``): in-memory and SQLite stores, thread_id and
checkpoint_id, resuming an interrupted run, forking into a new thread, same-thread time
travel, durability modes and per-field state versions.

QitOS's ``Engine`` runs an agent step by step with a checkpoint store; here a
``snapvc.agent.runner.Runner`` runs the agent's steps on a thread, and the thread is the
store: ``store.get_tuple(CheckpointConfig(thread_id=...))`` is ``repo.thread(...).latest``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import snapvc
from snapvc.agent.runner import Runner, Step


class Interrupted(Exception):
    """The run stopped half-way (a network error, a budget limit)."""


def _agent(task: str, *, stop_after: int | None = None, strategy: str = "default") -> list[Step]:
    """An agent of five steps that keeps a scratchpad."""
    def make(i: int) -> Step:
        def step(state: snapvc.State) -> None:
            if stop_after is not None and i > stop_after:
                raise Interrupted(f"budget exhausted before step {i}")
            state.set("task", task)
            state.set("current_step", i)
            if i % 2:
                state.set("scratchpad", state.get("scratchpad", "") + f"[{strategy} {i}]")
            if i == 5:
                state.set("final_result", f"{task}: done with {strategy}")
        step.__name__ = f"step{i}"
        return Step(step)
    return [make(i) for i in range(1, 6)]


@pytest.mark.parametrize("location", ["memory://", "checkpoints.snapvc"])
def test_basic_checkpointing(location: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = snapvc.open(location)  # InMemoryCheckpointStore() / SqliteCheckpointStore("./checkpoints.db")
    thread = store.thread("run-42")
    Runner(thread, _agent("Analyze the dataset")).run()  # checkpoints are saved automatically
    latest = thread.latest  # store.get_tuple(CheckpointConfig(thread_id=result.run_id))
    assert latest.metadata["step"] == 5  # latest.checkpoint.step
    assert thread.list_versions() == [1, 2, 3, 4, 5]
    store.close()


def test_resuming_a_run(tmp_path: Path) -> None:
    path = tmp_path / "checkpoints.snapvc"
    with snapvc.open(path) as store:
        with pytest.raises(Interrupted):
            Runner(store.thread("my-run-001"), _agent("Analyze", stop_after=2)).run()
        assert store.thread("my-run-001").latest.metadata["step"] == 2
    with snapvc.open(path) as store:  # a new process: the run resumes where it stopped
        runner = Runner(store.thread("my-run-001"), _agent("Analyze"))
        runner.run()
        assert runner.resumed
        assert [cp.metadata["step"] for cp in store.thread("my-run-001").checkpoints()] == [5, 4, 3, 2, 1]
        assert store.checkout("my-run-001")["final_result"] == "Analyze: done with default"


def test_forking_a_checkpoint(tmp_path: Path) -> None:
    with snapvc.open(tmp_path / "checkpoints.snapvc") as store:
        original = store.thread("my-run-001")
        Runner(original, _agent("Analyze")).run()
        source = original.get(step=3)  # CheckpointConfig(thread_id="my-run-001", checkpoint_id=...)
        fork = original.fork("my-run-001-branch-a", at=source.id)  # fork_checkpoint(store, source, new_thread_id)
        assert fork.latest.id == source.id
        runner = Runner(fork, _agent("Try a different strategy", strategy="B"))
        runner.run()  # runs steps 4 and 5 from the forked state
        assert runner.resumed
        assert store.checkout("my-run-001")["final_result"] == "Analyze: done with default"  # untouched
        assert store.checkout("my-run-001-branch-a")["final_result"] == "Try a different strategy: done with B"
        assert [cp.metadata["step"] for cp in fork.checkpoints()] == [5, 4, 3, 2, 1]
        assert fork.get(step=3).id == source.id  # shared history up to the fork


def test_time_travel_on_the_same_thread(tmp_path: Path) -> None:
    with snapvc.open(tmp_path / "checkpoints.snapvc") as store:
        thread = store.thread("my-run-001")
        Runner(thread, _agent("Analyze")).run()
        step2 = thread.get(step=2)
        thread.reset(step2.id)  # fork_checkpoint(store, config) without a new thread id
        assert thread.latest.id == step2.id
        Runner(thread, _agent("Redo from step 2", strategy="modified")).run()
        assert store.checkout("my-run-001")["final_result"] == "Redo from step 2: done with modified"
        assert [cp.metadata["step"] for cp in thread.checkpoints()] == [5, 4, 3, 2, 1]
        # the abandoned checkpoints stay reachable from the reflog
        assert store.checkout("my-run-001@{4}")["final_result"] == "Analyze: done with default"


@pytest.mark.parametrize("durability", ["sync", "normal", "exit"])
def test_durability_modes(durability: str, tmp_path: Path) -> None:
    path = tmp_path / "checkpoints.snapvc"
    with snapvc.open(path) as store:
        Runner(store.thread("run"), _agent("Analyze"), durability=durability).run()
        assert store.durability == "normal"  # the run's mode does not outlive it
    with snapvc.open(path) as store:
        assert store.thread("run").list_versions() == [1, 2, 3, 4, 5]
    with snapvc.open(tmp_path / "sync.snapvc", durability="sync") as store:  # the repository's own mode
        assert store.durability == "sync"


def test_state_version_tracking(tmp_path: Path) -> None:
    with snapvc.open(tmp_path / "checkpoints.snapvc") as store:
        thread = store.thread("my-run-001")
        Runner(thread, _agent("Analyze")).run()
        versions = thread.versions()  # tuple_.checkpoint.state_versions
        assert versions == {"scratchpad": 3, "current_step": 5, "final_result": 1, "task": 1}
        assert thread.state().versions() == versions
        assert store.versions(thread.get(step=2).id) == {"task": 1, "current_step": 2, "scratchpad": 1}
