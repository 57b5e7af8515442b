"""Splinter (``splinter.coordination``): SharedState with dotted keys, snapshot and
restore, CheckpointManager with FileCheckpointStorage (workflow_id, step, agent_id,
status, metrics), the latest checkpoint or one by step, per-key history, and
ResumableWorkflow's automatic rollback and resume.

``SharedState`` is a ``State``; a workflow id is a thread; ``create_checkpoint`` is a
save with the step's metadata; ``ResumableWorkflow`` is ``snapvc.agent.runner.Runner``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import snapvc
from snapvc.agent.runner import Runner, Step

COMPLETED = "completed"


@pytest.fixture
def repo(tmp_path: Path) -> snapvc.Repository:
    with snapvc.open(tmp_path / "checkpoints.snapvc") as r:  # FileCheckpointStorage("./checkpoints")
        yield r


def test_state_snapshots(repo: snapvc.Repository) -> None:
    state = repo.state("shared")
    state.update({"topic": "AI"})  # SharedState(initial_data={"topic": "AI"})
    state.set("research.findings", ["finding1", "finding2"])
    snapshot = state.snapshot()
    state.set("research.findings", ["bad data"])
    state.restore(snapshot)
    assert state.get("research.findings") == ["finding1", "finding2"]
    assert state.get("research") == {"findings": ["finding1", "finding2"]}
    assert state.get("topic") == "AI"


def _create_checkpoint(repo: snapvc.Repository, workflow_id: str, step: int, agent_id: str, status: str,
                       state: dict, metrics: dict) -> snapvc.Checkpoint:  # type: ignore[type-arg]
    """``manager.create_checkpoint(...)`` in snapvc terms."""
    return repo.thread(workflow_id).save(state, message=f"step {step}: {agent_id}", metadata={
        "step": step, "agent_id": agent_id, "status": status, "metrics": metrics})


def test_with_checkpoints(repo: snapvc.Repository) -> None:
    current_state = {"topic": "AI", "research": {"findings": ["f1"]}}
    current_metrics = {"tokens": 1200, "latency_s": 3.5}
    _create_checkpoint(repo, "wf-123", 5, "researcher", COMPLETED, current_state, current_metrics)
    state = repo.state("wf-123")
    state.set("research.findings", [])  # the run went on, then failed
    checkpoint = repo.thread("wf-123").latest  # manager.get_latest_checkpoint("wf-123")
    state.restore(checkpoint)  # state.restore(checkpoint.state_snapshot)
    assert dict(state) == current_state
    assert checkpoint.metadata == {"step": 5, "agent_id": "researcher", "status": COMPLETED,
                                   "metrics": current_metrics}


def test_rollback_strategies(repo: snapvc.Repository) -> None:
    for step in range(1, 6):
        status = COMPLETED if step != 5 else "failed"
        _create_checkpoint(repo, "wf-123", step, f"agent-{step}", status, {"step": step}, {})
    thread = repo.thread("wf-123")
    state = thread.state()
    # Last good checkpoint: the most recent one whose status is completed
    checkpoint = thread.latest
    assert checkpoint.metadata["status"] == "failed"
    good = next(thread.checkpoints(where={"status": COMPLETED}))
    assert good.metadata["step"] == 4
    state.restore(good)
    assert state.get("step") == 4
    # Specific step
    checkpoint = thread.get(step=3)  # manager.get_checkpoint("wf-123", step=3)
    state.restore(checkpoint)
    assert state.get("step") == 3 and checkpoint.metadata["agent_id"] == "agent-3"


def test_state_history(repo: snapvc.Repository) -> None:
    state = repo.state("shared")
    for value in ("value1", "value2", "value3"):
        state.set("key", value)
        state.snapshot()  # snapvc keeps history per snapshot
    history = state.history("key", oldest_first=True)  # state.get_history("key")
    assert [entry.value for entry in history] == ["value1", "value2", "value3"]
    state.restore(history[0].commit)  # state.restore(history[0].snapshot)
    assert state.get("key") == "value1"


def test_automatic_rollback_and_resume(repo: snapvc.Repository) -> None:
    calls: list[str] = []
    fail_at = {"write"}

    def research(state: snapvc.State) -> dict:  # type: ignore[type-arg]
        calls.append("research")
        state.set("research.findings", ["f1", "f2"])
        return {"tokens": 100}

    def write(state: snapvc.State) -> None:
        calls.append("write")
        state.set("draft", "half a draft")
        if "write" in fail_at:
            raise TimeoutError("model timed out")
        state.set("draft", "a full draft")

    def review(state: snapvc.State) -> None:
        calls.append("review")
        state.set("approved", True)

    steps = [Step(research, agent_id="researcher"), Step(write, agent_id="writer"), Step(review, agent_id="reviewer")]
    with pytest.raises(TimeoutError):
        Runner(repo.thread("wf-123"), steps).run()
    resumable = Runner(repo.thread("wf-123"), steps)  # ResumableWorkflow(workflow_id="wf-123", ...)
    last = resumable.last_completed  # resumable.try_resume()
    assert last is not None and last.metadata["step"] == 1
    assert resumable.next_step == "write"
    assert resumable.state.get("draft") is None  # rolled back to the last checkpoint
    fail_at.clear()
    resumable.run()
    assert resumable.resumed  # resumable.is_resumed
    assert calls == ["research", "write", "write", "review"]
    latest = repo.thread("wf-123").latest
    assert latest.values == {"research": {"findings": ["f1", "f2"]}, "draft": "a full draft", "approved": True}
    assert [(cp.metadata["step"], cp.metadata["agent_id"], cp.metadata["status"])
            for cp in repo.thread("wf-123").checkpoints()] == [
        (3, "reviewer", COMPLETED), (2, "writer", COMPLETED), (1, "researcher", COMPLETED)]
    assert repo.thread("wf-123").get(step=1).metadata["metrics"] == {"tokens": 100}
