"""Hive (pull request: automatic checkpoint recovery): a checkpoint after each step of a
graph executor, resuming from the last successful step after a failure, opt-in, and
persisted through the storage backend.

Hive's ``CheckpointManager`` wired into its ``GraphExecutor`` is ``snapvc.agent.runner.Runner``
over a graph of ``Step``s whose ``next`` routes; the storage backend is the repository.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import snapvc
from snapvc.agent.runner import END, Runner, Step


def _graph(log: list[str], fail_once: set[str]) -> list[Step]:
    """plan -> search -> (search again until 3 results) -> answer."""
    async def plan(state: snapvc.State) -> None:
        log.append("plan")
        state.set("goal", "find three sources")
        state.set("results", [])

    async def search(state: snapvc.State) -> dict:  # type: ignore[type-arg]
        log.append("search")
        state.append("results", f"source {len(state.get('results')) + 1}")
        if "search" in fail_once and len(state.get("results")) == 2:
            fail_once.discard("search")
            raise ConnectionError("search backend unavailable")
        return {"results": len(state.get("results"))}

    def enough(state: snapvc.State) -> str:
        return "answer" if len(state.get("results")) >= 3 else "search"

    async def answer(state: snapvc.State) -> None:
        log.append("answer")
        state.set("answer", " + ".join(state.get("results")))

    return [Step(plan), Step(search, next=enough), Step(answer, next=END)]


def test_automatic_checkpoint_after_each_step_and_resume(tmp_path: Path) -> None:
    path = tmp_path / "agent.snapvc"
    log: list[str] = []
    fail_once = {"search"}
    with snapvc.open(path) as repo:
        executor = Runner(repo.thread("run-7"), _graph(log, fail_once), agent_id="hive")
        with pytest.raises(ConnectionError):
            asyncio.run(executor.arun())
        thread = repo.thread("run-7")
        assert [cp.metadata["step_name"] for cp in thread.checkpoints()] == ["search", "plan"]
        assert thread.latest.values["results"] == ["source 1"]  # the failed step left nothing
    with snapvc.open(path) as repo:  # persisted: a new process resumes from the last good step
        executor = Runner(repo.thread("run-7"), _graph(log, fail_once), agent_id="hive")
        assert executor.next_step == "search"
        asyncio.run(executor.arun())
        assert executor.resumed and executor.finished
        assert log == ["plan", "search", "search", "search", "search", "answer"]
        thread = repo.thread("run-7")
        assert thread.latest.values["answer"] == "source 1 + source 2 + source 3"
        metas = [cp.metadata for cp in thread.checkpoints()][::-1]
        assert [m["step_name"] for m in metas] == ["plan", "search", "search", "search", "answer"]
        assert [m["step"] for m in metas] == [1, 2, 3, 4, 5]
        assert all(m["status"] == "completed" and m["agent_id"] == "hive" and m["duration"] >= 0 for m in metas)
        assert [m.get("metrics") for m in metas] == [None, {"results": 1}, {"results": 2}, {"results": 3}, None]
        assert metas[-1]["next_step"] is None and metas[0]["next_step"] == "search"


def test_checkpointing_is_opt_in(tmp_path: Path) -> None:
    """Without a runner the same steps run on a working copy and store nothing."""
    with snapvc.open(tmp_path / "agent.snapvc") as repo:
        state = repo.state("run-8")
        log: list[str] = []
        steps = _graph(log, set())

        async def run_plainly() -> None:
            await steps[0].fn(state)
            while len(state.get("results")) < 3:
                await steps[1].fn(state)
            await steps[2].fn(state)

        asyncio.run(run_plainly())
        assert state.get("answer") == "source 1 + source 2 + source 3"
        assert "run-8" not in repo.branches()  # nothing was checkpointed
        Runner(state, _graph(log, set()))  # adopting it is one line; constructing stores nothing
        assert "run-8" not in repo.branches()
