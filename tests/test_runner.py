"""The step runner (snapvc/agent/runner.py): checkpoints after each step, graphs, rollback and
retries, resume after a failure, async steps, durability modes, bad inputs."""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import snapvc
from snapvc import Checkpoint, State
from snapvc.agent.runner import END, Runner, Step

COMMITS = "SELECT count(*) FROM commits"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "run.snapvc"


@pytest.fixture
def repo(path: Path) -> Iterator[snapvc.Repository]:
    with snapvc.open(path) as r:
        yield r


class Job:
    """Three steps that record their calls, and can be made to fail."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.failures: dict[str, int] = {}  # step name -> how many more times it raises

    def _maybe_fail(self, name: str, state: State) -> None:
        self.calls.append(name)
        if self.failures.get(name, 0) > 0:
            self.failures[name] -= 1
            state.set("scratch", f"half of {name}")  # a change the rollback must undo
            state.get("sources").append("partial")
            raise RuntimeError(f"{name} failed")

    def fetch(self, state: State) -> dict[str, Any]:
        self._maybe_fail("fetch", state)
        state.set("sources", ["a", "b"])
        return {"fetched": 2}

    def analyze(self, state: State) -> None:
        self._maybe_fail("analyze", state)
        state.set("analysis.count", len(state.get("sources")))

    def report(self, state: State) -> dict[str, Any]:
        self._maybe_fail("report", state)
        state.set("report", f"{state.get('analysis.count')} sources")
        return {"words": 2}

    def steps(self, **report: Any) -> list[Any]:
        return [self.fetch, self.analyze, Step(self.report, **report)]


def _log(repo: snapvc.Repository, branch: str) -> list[snapvc.Commit]:
    return list(repo.log(branch))[::-1]


# -- a sequence, its checkpoints and their metadata --------------------------------------


def test_a_sequence_checkpoints_after_each_step(repo: snapvc.Repository) -> None:
    job = Job()
    runner = Runner(repo.state("job-42"), job.steps(), agent_id="researcher")
    assert runner.next_step == "fetch" and not runner.finished and runner.last_completed is None
    final = runner.run()
    assert job.calls == ["fetch", "analyze", "report"]
    assert repo.checkout("job-42") == {"sources": ["a", "b"], "analysis": {"count": 2}, "report": "2 sources"}
    commits = _log(repo, "job-42")
    assert [c.message for c in commits] == ["step 1: fetch", "step 2: analyze", "step 3: report"]
    first = commits[0].metadata
    assert set(first) == {"step", "step_name", "agent_id", "status", "metrics", "duration", "next_step"}
    assert first["step"] == 1 and first["step_name"] == "fetch" and first["agent_id"] == "researcher"
    assert first["status"] == "completed" and first["metrics"] == {"fetched": 2} and first["next_step"] == "analyze"
    assert type(first["duration"]) is float and first["duration"] >= 0
    assert "metrics" not in commits[1].metadata  # analyze returned None
    assert [c.metadata["next_step"] for c in commits] == ["analyze", "report", None]
    assert final == runner.last_completed and final.id == commits[-1].id.hex
    assert final.metadata["metrics"] == {"words": 2}
    assert runner.finished and runner.next_step is None and not runner.resumed
    # Flat keys: the log and a thread find checkpoints by step name and number.
    assert [c.message for c in repo.log("job-42", where={"step_name": "analyze"})] == ["step 2: analyze"]
    assert repo.thread("job-42").get(step=3).id == final.id


def test_a_step_agent_id_wins_and_none_is_left_out(repo: snapvc.Repository) -> None:
    job = Job()
    Runner(repo.state("a"), [job.fetch, Step(job.analyze, agent_id="critic"), job.report]).run()
    assert [c.metadata.get("agent_id", "-") for c in _log(repo, "a")] == ["-", "critic", "-"]
    job = Job()
    Runner(repo.state("b"), job.steps(agent_id="writer"), agent_id="main").run()
    assert [c.metadata["agent_id"] for c in _log(repo, "b")] == ["main", "main", "writer"]


def test_step_names_default_to_the_function_and_can_be_given(repo: snapvc.Repository) -> None:
    def count(state: State) -> None:
        state.set("n", state.get("n", 0) + 1)

    runner = Runner(repo.state(), [count, Step(count, "count-again"), Step(functools.partial(count), name="third")])
    assert [s.name for s in runner.steps] == ["count", "count-again", "third"]
    runner.run()
    assert repo.checkout()["n"] == 3


# -- graphs ------------------------------------------------------------------------------


def test_a_graph_with_a_loop_and_a_branch(repo: snapvc.Repository) -> None:
    def plan(state: State) -> None:
        state.set("drafts", [])

    def draft(state: State) -> dict[str, int]:
        state.append("drafts", f"draft {len(state.get('drafts'))}")
        return {"drafts": len(state.get("drafts"))}

    def review(state: State) -> str:  # a route: loop until three drafts, then publish
        return "draft" if len(state.get("drafts")) < 3 else "publish"

    def publish(state: State) -> None:
        state.set("published", state.get("drafts")[-1])

    def never(state: State) -> None:
        raise AssertionError("END stops the run before the next step of the list")

    runner = Runner(repo.state("g"), [plan, Step(draft, next=review), Step(publish, next=END), never])
    final = runner.run()
    commits = _log(repo, "g")
    assert [c.metadata["step_name"] for c in commits] == ["plan", "draft", "draft", "draft", "publish"]
    assert [c.metadata["step"] for c in commits] == [1, 2, 3, 4, 5]
    assert [c.metadata["next_step"] for c in commits] == ["draft", "draft", "draft", "publish", None]
    assert [c.metadata["metrics"]["drafts"] for c in commits[1:4]] == [1, 2, 3]
    assert final.values["published"] == "draft 2"
    # The third draft is the latest checkpoint of step 4.
    assert repo.thread("g").get(step=4).values["drafts"] == ["draft 0", "draft 1", "draft 2"]


def test_next_by_name_jumps(repo: snapvc.Repository) -> None:
    order: list[str] = []

    jumps: dict[str, str | Any] = {"a": "c", "c": END}

    def step(name: str) -> Step:
        return Step(lambda state: order.append(name), name, next=jumps.get(name))

    Runner(repo.state(), [step("a"), step("b"), step("c")]).run()
    assert order == ["a", "c"]


def test_a_route_to_an_unknown_step_is_an_error_not_retried(repo: snapvc.Repository) -> None:
    calls = []

    def work(state: State) -> None:
        calls.append(1)
        state.set("x", len(calls))

    runner = Runner(repo.state(), [Step(work, next=lambda state: "nowhere", retries=3)])
    with pytest.raises(ValueError, match="route returned 'nowhere', which is not a step"):
        runner.run()
    assert calls == [1] and "x" not in runner.state and repo.state().checkpoint is None
    runner = Runner(repo.state(), [Step(work, next=lambda state: None)])  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="returned None"):
        runner.run()


# -- failure: rollback, retries, resume --------------------------------------------------


def test_a_failed_step_rolls_the_working_copy_back_and_resumes_on_the_next_run(repo: snapvc.Repository) -> None:
    job = Job()
    job.failures["analyze"] = 1
    runner = Runner(repo.state("job"), job.steps())
    with pytest.raises(RuntimeError, match="analyze failed") as info:
        runner.run()
    after_fetch = repo.thread("job").latest
    assert after_fetch is not None and after_fetch.metadata["next_step"] == "analyze"
    note = "\n".join(info.value.__notes__)
    assert "step 2 ('analyze') failed" in note and after_fetch.id[:12] in note
    assert "running again resumes at step 2 ('analyze')" in note
    # The failed step's changes are gone from the working copy; nothing of it was committed.
    assert dict(runner.state) == {"sources": ["a", "b"]} and runner.state.diff() == []
    assert len(_log(repo, "job")) == 1
    assert runner.last_completed == after_fetch and runner.next_step == "analyze" and not runner.finished

    # A new process: a new working copy and runner over the same branch.
    job.calls.clear()
    again = Runner(repo.state("job"), job.steps())
    assert again.next_step == "analyze" and again.last_completed == after_fetch  # before it runs
    final = again.run()
    assert job.calls == ["analyze", "report"]  # fetch is not run again
    assert again.resumed and again.finished
    assert [c.metadata["step"] for c in _log(repo, "job")] == [1, 2, 3]
    assert final.values["report"] == "2 sources"


def test_the_same_runner_resumes_too(repo: snapvc.Repository) -> None:
    job = Job()
    job.failures["report"] = 1
    runner = Runner(repo.state(), job.steps())
    with pytest.raises(RuntimeError):
        runner.run()
    assert runner.last_completed is not None and runner.last_completed.metadata["step_name"] == "analyze"
    runner.run()
    assert job.calls == ["fetch", "analyze", "report", "report"] and runner.resumed


def test_a_failure_in_the_first_step_of_a_new_branch(repo: snapvc.Repository) -> None:
    job = Job()
    job.failures["fetch"] = 1
    state = repo.state("fresh")
    state.set("sources", ["given"])  # uncommitted input: kept by the rollback
    runner = Runner(state, job.steps())
    with pytest.raises(RuntimeError) as info:
        runner.run()
    assert "no checkpoint yet" in "\n".join(info.value.__notes__)
    assert dict(state) == {"sources": ["given"]} and state.checkpoint is None
    runner.run()
    assert repo.checkout("fresh")["sources"] == ["a", "b"]


def test_retries(repo: snapvc.Repository) -> None:
    job = Job()
    job.failures["report"] = 2
    final = Runner(repo.state("r"), job.steps(retries=2)).run()
    assert job.calls == ["fetch", "analyze", "report", "report", "report"]
    assert final.values["report"] == "2 sources" and "scratch" not in final.values
    assert [c.metadata["step_name"] for c in _log(repo, "r")] == ["fetch", "analyze", "report"]

    job = Job()
    job.failures["report"] = 2
    with pytest.raises(RuntimeError) as info:
        Runner(repo.state("r2"), job.steps(retries=1)).run()
    assert job.calls.count("report") == 2
    assert "step 3 ('report') failed (2 attempts)" in "\n".join(info.value.__notes__)


def test_rollback_undoes_in_place_changes(repo: snapvc.Repository) -> None:
    def setup(state: State) -> None:
        state.set("doc", {"sections": [{"title": "a", "lines": ["x"]}], "n": 1})

    def edit(state: State) -> None:
        doc = state.get("doc")
        doc["sections"][0]["lines"].append("y")
        doc["n"] = 2
        state.set("extra", [1])
        state.delete("doc.sections.0.title")
        raise KeyError("boom")

    runner = Runner(repo.state(), [setup, edit])
    with pytest.raises(KeyError):
        runner.run()
    assert dict(runner.state) == {"doc": {"sections": [{"title": "a", "lines": ["x"]}], "n": 1}}
    runner.state.snapshot("by hand")  # what the working copy holds is the checkpoint's state
    assert repo.checkout() == {"doc": {"sections": [{"title": "a", "lines": ["x"]}], "n": 1}}


def test_a_step_must_return_none_or_a_mapping(repo: snapvc.Repository) -> None:
    calls = []

    def bad(state: State) -> list[int]:
        calls.append(1)
        state.set("x", 1)
        return [1]

    with pytest.raises(TypeError, match="returned a list"):
        Runner(repo.state(), [Step(bad, retries=2)]).run()  # type: ignore[arg-type]
    assert calls == [1] and repo.state().checkpoint is None


def test_a_step_with_a_value_that_cannot_be_stored_fails_like_any_step(repo: snapvc.Repository) -> None:
    def bad(state: State) -> None:
        state.set("x", object())

    runner = Runner(repo.state(), [bad])
    with pytest.raises(snapvc.UnsupportedValueError):
        runner.run()
    assert "x" not in runner.state


# -- finished runs and restarts ----------------------------------------------------------


def test_a_finished_run_returns_without_running_and_restart_runs_again(repo: snapvc.Repository) -> None:
    job = Job()
    first = Runner(repo.state("f"), job.steps()).run()
    job.calls.clear()
    runner = Runner(repo.state("f"), job.steps())
    assert runner.finished and runner.next_step is None
    assert runner.run() == first and runner.last_completed == first
    assert job.calls == [] and not runner.resumed and len(_log(repo, "f")) == 3

    final = runner.run(restart=True)
    assert job.calls == ["fetch", "analyze", "report"] and not runner.resumed
    commits = _log(repo, "f")
    assert [c.metadata["step"] for c in commits] == [1, 2, 3, 1, 2, 3]
    assert final.id == commits[-1].id.hex and repo.thread("f").get(step=1).id == commits[3].id.hex


def test_a_run_without_runner_metadata_starts_at_the_first_step(repo: snapvc.Repository) -> None:
    state = repo.state("m")
    state.set("sources", ["old"])
    state.snapshot("by hand", metadata={"step": 7})
    job = Job()
    runner = Runner(state, job.steps())
    assert runner.next_step == "fetch" and runner.last_completed is None
    runner.run()
    assert job.calls == ["fetch", "analyze", "report"] and not runner.resumed
    assert [c.metadata.get("step") for c in _log(repo, "m")] == [7, 1, 2, 3]


def test_resuming_at_a_step_the_runner_does_not_have(repo: snapvc.Repository) -> None:
    job = Job()
    job.failures["analyze"] = 1
    with pytest.raises(RuntimeError):
        Runner(repo.state("c"), job.steps()).run()
    changed = Runner(repo.state("c"), [job.fetch, job.report])
    with pytest.raises(ValueError, match="resumes at step 'analyze', which this runner does not have"):
        changed.run()
    changed.run(restart=True)
    assert [c.metadata["step_name"] for c in _log(repo, "c")] == ["fetch", "fetch", "report"]


# -- callbacks and threads ---------------------------------------------------------------


def test_on_checkpoint_sees_each_committed_checkpoint(path: Path, repo: snapvc.Repository) -> None:
    seen: list[Checkpoint] = []
    reader = sqlite3.connect(path)

    def record(checkpoint: Checkpoint) -> None:
        assert runner.last_completed == checkpoint
        assert reader.execute(COMMITS).fetchone()[0] == len(seen) + 1  # committed before the call
        seen.append(checkpoint)

    runner = Runner(repo.state(), Job().steps(), on_checkpoint=record)
    runner.run()
    reader.close()
    assert [cp.metadata["step"] for cp in seen] == [1, 2, 3]
    assert [cp.id for cp in seen] == [c.id.hex for c in _log(repo, "main")]


def test_a_thread_as_target(repo: snapvc.Repository) -> None:
    thread = repo.thread("run 7", session="s-1", metadata={"user": "ann"})
    runner = Runner(thread, Job().steps(), agent_id="researcher")
    assert runner.state.branch == thread.branch
    runner.run()
    assert thread.list_versions() == [1, 2, 3]
    second = thread.get(step=2)
    assert second.metadata["step_name"] == "analyze" and second.metadata["session_id"] == "s-1"
    assert second.metadata["user"] == "ann" and second.metadata["agent_id"] == "researcher"
    assert [t.id for t in repo.session("s-1").threads()] == ["run 7"]
    assert Runner(thread, Job().steps()).finished


# -- async -------------------------------------------------------------------------------


def test_arun_awaits_async_steps(repo: snapvc.Repository) -> None:
    async def fetch(state: State) -> dict[str, int]:
        await asyncio.sleep(0)
        state.set("sources", ["a"])
        return {"fetched": 1}

    def analyze(state: State) -> None:  # sync steps run as they are
        state.set("count", len(state.get("sources")))

    async def report(state: State) -> None:
        await asyncio.sleep(0)
        state.set("report", f"{state.get('count')} source")

    runner = Runner(repo.state("async"), [fetch, analyze, report])
    with pytest.raises(TypeError, match=r"steps 'fetch', 'report' are async: use 'await runner.arun\(\)'"):
        runner.run()
    assert repo.state("async").checkpoint is None  # nothing ran
    final = asyncio.run(runner.arun())
    assert final.values == {"sources": ["a"], "count": 1, "report": "1 source"}
    assert [c.metadata["step_name"] for c in _log(repo, "async")] == ["fetch", "analyze", "report"]
    assert _log(repo, "async")[0].metadata["metrics"] == {"fetched": 1}


def test_run_refuses_a_sync_callable_returning_an_awaitable(repo: snapvc.Repository) -> None:
    async def work(state: State) -> None:
        state.set("x", 1)

    class Agent:
        async def __call__(self, state: State) -> None:
            state.set("y", 1)

    with pytest.raises(TypeError, match="step 'work' is async"):
        Runner(repo.state(), [work]).run()
    with pytest.raises(TypeError, match="step 'agent' is async"):
        Runner(repo.state(), [Step(Agent(), "agent")]).run()
    runner = Runner(repo.state(), [Step(lambda state: work(state), "wrapped")])
    with pytest.raises(TypeError, match="returned an awaitable"):
        runner.run()
    assert asyncio.run(runner.arun()).values == {"x": 1}


def test_arun_rolls_back_retries_and_resumes(repo: snapvc.Repository) -> None:
    attempts = {"analyze": 0}

    async def fetch(state: State) -> None:
        state.set("sources", ["a", "b"])

    async def analyze(state: State) -> None:
        attempts["analyze"] += 1
        state.get("sources").append("half")
        await asyncio.sleep(0)
        if attempts["analyze"] < 3:
            raise RuntimeError("flaky")
        state.set("count", len(state.get("sources")))

    runner = Runner(repo.state("ar"), [fetch, Step(analyze, retries=1)])
    with pytest.raises(RuntimeError, match="flaky") as info:
        asyncio.run(runner.arun())
    assert "step 2 ('analyze') failed (2 attempts)" in "\n".join(info.value.__notes__)
    assert dict(runner.state) == {"sources": ["a", "b"]}
    final = asyncio.run(Runner(repo.state("ar"), [fetch, analyze]).arun())
    assert final.values == {"sources": ["a", "b", "half"], "count": 3} and final.metadata["step"] == 2


def test_a_cancellation_during_a_snapshot_keeps_the_step(repo: snapvc.Repository) -> None:
    async def first(state: State) -> None:
        state.set("a", [1])
        asyncio.current_task().cancel()  # type: ignore[union-attr]  # delivered at the next await: the snapshot's

    async def second(state: State) -> None:
        state.set("b", 2)

    runner = Runner(repo.state(), [first, second])
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(runner.arun())
    # The snapshot was not abandoned halfway: the step is recorded and the working copy is its state.
    assert runner.last_completed is not None and runner.last_completed.metadata["step_name"] == "first"
    assert runner.state.checkpoint == runner.last_completed
    assert dict(runner.state) == {"a": [1]} and runner.state.diff() == []
    assert asyncio.run(runner.arun()).values == {"a": [1], "b": 2} and runner.resumed


# -- durability --------------------------------------------------------------------------


def _synchronous(repo: snapvc.Repository) -> int:
    assert repo.backend.file is not None
    return repo.backend.file.conn.execute("PRAGMA synchronous").fetchone()[0]


def _observer(repo: snapvc.Repository, path: Path, seen: list[tuple[str, int, int]]) -> Callable[[Any], None]:
    """A step that records the repository's mode and SQLite setting, and how many commits
    another connection on the file sees."""
    def observe(state: State) -> None:
        reader = sqlite3.connect(path)
        try:
            seen.append((repo.durability, _synchronous(repo), reader.execute(COMMITS).fetchone()[0]))
        finally:
            reader.close()
        state.set("observed", len(seen))
    return observe


def test_sync_durability_fsyncs_each_checkpoint_and_restores_the_mode(path: Path, repo: snapvc.Repository) -> None:
    seen: list[tuple[str, int, int]] = []
    observe = _observer(repo, path, seen)
    Runner(repo.state(), [observe, Step(observe, "again")], durability="sync").run()
    assert seen == [("sync", 2, 0), ("sync", 2, 1)]  # FULL: each commit fsynced before the next step
    assert repo.durability == "normal" and _synchronous(repo) == 1

    def boom(state: State) -> None:
        raise RuntimeError("boom")

    repo.durability = "batch"
    with pytest.raises(RuntimeError):
        Runner(repo.state("b"), [observe, boom], durability="sync").run()
    assert seen[-1][:2] == ("sync", 2)
    assert repo.durability == "batch" and _synchronous(repo) == 0  # restored after an error too


def test_normal_durability_commits_each_checkpoint_in_the_repository_mode(tmp_path: Path) -> None:
    path = tmp_path / "b.snapvc"
    with snapvc.open(path, durability="batch") as repo:
        seen: list[tuple[str, int, int]] = []
        observe = _observer(repo, path, seen)
        Runner(repo.state(), [observe, Step(observe, "b"), Step(observe, "c")]).run()
        assert seen == [("batch", 0, 0), ("batch", 0, 1), ("batch", 0, 2)]
        assert repo.durability == "batch"


def test_exit_durability_writes_the_run_at_its_end(path: Path, repo: snapvc.Repository) -> None:
    repo.commit({"before": True}, branch="x")
    seen: list[tuple[str, int, int]] = []
    observe = _observer(repo, path, seen)
    Runner(repo.state("x"), [observe, Step(observe, "b"), Step(observe, "c")], durability="exit").run()
    assert [n for _, _, n in seen] == [1, 1, 1]  # another connection sees none of the run's commits
    assert seen[0][0] == "normal"
    reader = sqlite3.connect(path)
    assert reader.execute(COMMITS).fetchone()[0] == 4  # all of them once the run ended
    reader.close()


def test_exit_durability_writes_the_completed_steps_when_a_step_fails(path: Path, repo: snapvc.Repository) -> None:
    job = Job()
    job.failures["report"] = 1
    reader = sqlite3.connect(path)
    counts: list[int] = []
    runner = Runner(repo.state("e"), job.steps(), durability="exit",
                    on_checkpoint=lambda cp: counts.append(reader.execute(COMMITS).fetchone()[0]))
    with pytest.raises(RuntimeError, match="report failed"):
        runner.run()
    assert counts == [0, 0]
    assert reader.execute(COMMITS).fetchone()[0] == 2
    reader.close()
    with snapvc.open(path) as other:  # a restart resumes from them
        job.calls.clear()
        Runner(other.state("e"), job.steps(), durability="exit").run()
        assert job.calls == ["report"]
        assert [c.metadata["step"] for c in _log(other, "e")] == [1, 2, 3]


@pytest.mark.parametrize("durability", ["sync", "normal", "exit"])
def test_arun_in_every_durability_mode(path: Path, repo: snapvc.Repository, durability: str) -> None:
    seen: list[Any] = []

    async def work(state: State) -> None:
        await asyncio.sleep(0)
        state.set("n", state.get("n", 0) + 1)

    def record(checkpoint: Checkpoint) -> None:  # reads the repository from the loop's thread
        seen.append((repo.durability, checkpoint.values["n"]))

    final = asyncio.run(Runner(repo.state(), [work, Step(work, "more")], durability=durability,
                               on_checkpoint=record).arun())
    mode = "sync" if durability == "sync" else "normal"
    assert seen == [(mode, 1), (mode, 2)] and final.values["n"] == 2
    assert repo.durability == "normal"
    reader = sqlite3.connect(path)
    assert reader.execute(COMMITS).fetchone()[0] == 2
    reader.close()


# -- bad inputs --------------------------------------------------------------------------


def _noop(state: State) -> None:
    return None


def test_bad_inputs(repo: snapvc.Repository) -> None:
    state = repo.state()
    with pytest.raises(ValueError, match="two steps are named '_noop'"):
        Runner(state, [_noop, _noop])
    with pytest.raises(ValueError, match="next step 'missing' is not a step of this runner"):
        Runner(state, [Step(_noop, next="missing")])
    with pytest.raises(ValueError, match="durability must be one of 'sync', 'normal', 'exit', got 'batch'"):
        Runner(state, [_noop], durability="batch")
    with pytest.raises(ValueError, match="at least one step"):
        Runner(state, [])
    with pytest.raises(TypeError, match="State or a Thread"):
        Runner(repo, [_noop])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        Step("not a function")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="has no __name__"):
        Step(functools.partial(_noop))
    with pytest.raises(ValueError, match="retries"):
        Step(_noop, retries=-1)
    with pytest.raises(TypeError, match="next is a step name, END"):
        Step(_noop, next=3)  # type: ignore[arg-type]
    assert repr(END) == "END" and Step(_noop).name == "_noop"
