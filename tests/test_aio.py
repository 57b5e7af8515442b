"""The async API: the same answers as the sync one, from one worker thread per
repository, with many tasks at once, and an event loop that keeps running meanwhile."""

from __future__ import annotations

import asyncio
import inspect
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import snapvc
import snapvc.aio
from snapvc import Checkpoint, PathError, RefConflictError, RepositoryError
from snapvc.aio import AsyncRepository, AsyncSession, AsyncState, AsyncThread
from tests.fakes import TickingClock

LOCATIONS = ["memory", "sqlite"]


def _location(kind: str, tmp_path: Path, name: str = "repo.snapvc") -> str | Path:
    return "memory://" if kind == "memory" else tmp_path / name


# -- the same results as the sync API ---------------------------------------------------------

# Each step takes a repository (sync or async) and the results of the steps before it.
STEPS: list[Callable[[Any, list[Any]], Any]] = [
    lambda r, got: r.commit({"a": 1, "msgs": ["x"], "notes": {"k": "v"}}, "main", "one", {"step": 1}),
    lambda r, got: r.commit({"a": 2, "msgs": ["x", "y"], "notes": {"k": "v"}}, "main", "two", {"step": 2}),
    lambda r, got: r.branch("feature", "main~1"),
    lambda r, got: r.commit({"a": 1, "msgs": ["x"], "notes": {"k": "w"}}, "feature", "f1", author="someone"),
    lambda r, got: r.tag("v1", "main"),
    lambda r, got: r.tags(),
    lambda r, got: r.branches(),
    lambda r, got: r.resolve("main~1"),
    lambda r, got: r.get_commit(got[1].id),
    lambda r, got: r.checkout("main~1"),
    lambda r, got: r.snapshot("main"),
    lambda r, got: r.log("main"),
    lambda r, got: r.log(["main", "feature"], where={"step": 2}),
    lambda r, got: r.log("main", limit=1, paths="a"),
    lambda r, got: r.history("main", "a"),
    lambda r, got: r.history("main", "msgs", oldest_first=True, limit=1),
    lambda r, got: r.versions("main"),
    lambda r, got: r.checkpoint("main"),
    lambda r, got: r.diff("main~1", "main"),
    lambda r, got: r.diff("main", {"a": 3}, paths="a"),
    lambda r, got: r.merge_base("main", "feature"),
    lambda r, got: r.merge("feature", "main"),
    lambda r, got: r.revert(got[1].id, "main"),
    lambda r, got: r.branch("other", got[0].id),
    lambda r, got: r.cherry_pick(got[3].id, "other"),
    lambda r, got: r.commit({"a": "ours"}, "other", "ours"),
    lambda r, got: r.merge("main", "other"),  # both changed "a": a conflict, nothing written
    lambda r, got: r.merge("main", "other", resolve="theirs"),
    lambda r, got: r.reset("feature", "feature~1"),
    lambda r, got: r.reflog("feature"),
    lambda r, got: r.switch("feature"),
    lambda r, got: r.delete_tag("v1"),
    lambda r, got: r.commit({"z": 1}, "other", "on a tip read earlier", parents=(got[27][0].id,)),
    lambda r, got: r.switch("main"),
    lambda r, got: r.delete_branch("other"),
    lambda r, got: r.commit({"t": 1}, "run-1/child", "a namespace's checkpoint"),
    lambda r, got: r.threads(),
    lambda r, got: r.delete_thread("run-1"),
    lambda r, got: r.stats(),
]


def _plain(value: Any) -> Any:
    """A result in a form both APIs' results compare in: views read, threads named."""
    if isinstance(value, snapvc.MapView):
        return value.to_dict()
    if isinstance(value, (snapvc.Thread, AsyncThread)):
        return (value.id, value.namespace, value.branch, value.session)
    if isinstance(value, snapvc.MergeResult):
        return (value.commit, [str(c) for c in value.conflicts], value.base, value.fast_forward, value.up_to_date,
                [str(c) for c in value.resolved])
    if isinstance(value, (list, Iterator)):
        return [_plain(v) for v in value]
    return value


@pytest.mark.parametrize("kind", LOCATIONS)
def test_every_mirrored_method_answers_as_the_sync_one(kind: str, tmp_path: Path) -> None:
    with snapvc.open(_location(kind, tmp_path, "sync.snapvc"), clock=TickingClock(), author="tester") as repo:
        expected = []
        for step in STEPS:
            expected.append(_plain(step(repo, expected)))

    async def run() -> list[Any]:
        got: list[Any] = []
        async with await snapvc.aio.open(_location(kind, tmp_path, "async.snapvc"), clock=TickingClock(),
                                         author="tester") as arepo:
            for step in STEPS:
                pending = step(arepo, got)
                assert inspect.isawaitable(pending)
                got.append(_plain(await pending))
        return got

    got = asyncio.run(run())
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert a == b, f"step {i}"
    assert got[26][1] and got[27][0] is not None  # the conflict was there, then resolved
    assert got[37] == ["run-1/child"]


def test_open_passes_its_arguments_on_and_wrapping_keeps_the_repository(tmp_path: Path) -> None:
    async def run() -> None:
        with pytest.raises(snapvc.RepositoryNotFoundError):
            await snapvc.aio.open(tmp_path / "absent.snapvc", create=False)
        repo = await snapvc.aio.open(tmp_path / "r.snapvc", author="someone")
        assert isinstance(repo.sync, snapvc.Repository) and repo.sync.author == "someone"
        assert (await repo.commit({"a": 1})).author == "someone"
        await repo.close()
        with snapvc.open(tmp_path / "r.snapvc") as sync:
            wrapped = AsyncRepository(sync)
            assert wrapped.sync is sync
            assert await wrapped.checkout("main") == {"a": 1}
            await wrapped.close()
            with pytest.raises(RepositoryError):
                sync.resolve("main")  # closing the wrapper closed the repository

    asyncio.run(run())


# -- many tasks at once ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", LOCATIONS)
def test_fifty_tasks_each_commit_to_a_branch_of_their_own(kind: str, tmp_path: Path) -> None:
    async def run() -> None:
        async with await snapvc.aio.open(_location(kind, tmp_path)) as repo:
            async def agent(i: int) -> snapvc.Commit:
                return await repo.commit({"agent": i, "notes": [f"note {i}"] * 3}, f"agent-{i}", f"agent {i}")

            commits = await asyncio.gather(*(agent(i) for i in range(50)))
            branches = await repo.branches()
            assert branches == {f"agent-{i}": commits[i].id for i in range(50)}
            for i in range(50):
                assert await repo.checkout(commits[i].id) == {"agent": i, "notes": [f"note {i}"] * 3}

    asyncio.run(run())


@pytest.mark.parametrize("kind", LOCATIONS)
def test_twenty_tasks_commit_to_one_branch_and_retry_when_they_lose(kind: str, tmp_path: Path) -> None:
    conflicts = 0

    async def run() -> None:
        nonlocal conflicts
        async with await snapvc.aio.open(_location(kind, tmp_path)) as repo:
            await repo.commit({"done": []}, "main", "start")

            async def agent(i: int) -> None:
                nonlocal conflicts
                while True:
                    tip = await repo.resolve("main")
                    state = await repo.checkout(tip)  # by id: HEAD stays where it is
                    state["done"].append(i)
                    try:
                        await repo.commit(state, "main", f"agent {i}", {"agent": i}, parents=(tip,))
                        return
                    except RefConflictError:
                        conflicts += 1  # another agent committed in between: re-read, retry

            await asyncio.gather(*(agent(i) for i in range(20)))
            log = await repo.log("main")
            assert len(log) == 21
            assert sorted(c.metadata["agent"] for c in log[:-1]) == list(range(20))
            assert all(len(c.parents) == 1 for c in log[:-1])  # one line: each built on the last
            assert sorted((await repo.checkout("main"))["done"]) == list(range(20))  # no update lost

    asyncio.run(run())
    assert conflicts > 0  # the tasks did race


# -- working copies -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", LOCATIONS)
def test_async_state_snapshot_restore_and_the_rest(kind: str, tmp_path: Path) -> None:
    async def run() -> None:
        async with await snapvc.aio.open(_location(kind, tmp_path), clock=TickingClock()) as repo:
            state = await repo.state("main")
            assert isinstance(state, AsyncState) and state.branch == "main"
            assert state.base is None and state.checkpoint is None and len(state) == 0

            state.set("research.findings", ["a"])
            state.update({"step": 1}, status="running")
            state.append("messages", {"role": "user", "content": "hi"})
            state.extend("messages", [{"role": "assistant", "content": "hello"}])
            state["plan"] = ["x", "y"]
            assert state.get("research.findings.0") == "a" and state["step"] == 1 and "plan" in state
            assert sorted(state) == ["messages", "plan", "research", "status", "step"]
            first = await state.snapshot(message="step 1", token_usage={"input": 3})
            assert isinstance(first, Checkpoint) and first.version == 1 and first.token_usage == {"input": 3}
            assert state.base is not None and state.base.hex == first.id and state.checkpoint == first

            state.set("step", 2)
            state.delete("plan")
            del state["status"]
            assert "plan" not in state and "status" not in state
            assert await state.diff() == state.sync.diff()
            assert [str(c) for c in await state.diff(first, paths="step")] == ["~ step: 1 -> 2"]
            second = await state.snapshot(message="step 2", metadata={"phase": "b"})
            assert second.version == 2 and second.metadata == {"phase": "b"}

            await state.restore(first)  # content only: the branch stays at the second snapshot
            assert state["step"] == 1 and state["plan"] == ["x", "y"] and state.base.hex == second.id
            assert await repo.checkout("main") == second.values.to_dict()

            assert await state.versions() == repo.sync.versions(second.id)
            assert [e.value for e in await state.history("step")] == [2, 1]
            assert [cp.id for cp in await state.checkpoints()] == [second.id, first.id]
            assert await state.checkpoints(limit=1) == [second]

            fork = await state.fork("experiment", at=first)
            assert isinstance(fork, AsyncState) and fork.branch == "experiment" and fork.checkpoint == (
                await repo.checkpoint("experiment"))
            assert fork["step"] == 1
            fork["step"] = 10
            assert [c.path for c in await state.diff(fork)] == [("step",)]
            assert (await fork.snapshot()).version == 2

            back = await state.reset(first)
            assert back.id == first.id and state.base.hex == first.id and state["step"] == 1
            assert (await repo.resolve("main")).hex == first.id

    asyncio.run(run())


@pytest.mark.parametrize("kind", LOCATIONS)
def test_rollback_on_error_under_async_with(kind: str, tmp_path: Path) -> None:
    async def run() -> None:
        async with await snapvc.aio.open(_location(kind, tmp_path)) as repo:
            state = await repo.state()
            state.set("messages", ["hi"])
            state.set("tools", {"search": {"calls": 0}})
            kept = await state.snapshot(message="before")

            with pytest.raises(ValueError, match="tool failed"):
                async with state.rollback_on_error() as inside:
                    assert inside is state
                    state.append("messages", "thinking")
                    state.get("tools.search")["calls"] += 1  # in place, through a value handed out
                    inside_snapshot = await inside.snapshot(message="inside")
                    state.set("half", "done")
                    raise ValueError("tool failed")
            assert state.sync.get("messages") == ["hi"] and state.get("tools.search.calls") == 0
            assert "half" not in state
            # The branch is not moved back: the snapshot inside the block stays in history.
            assert state.base.hex == inside_snapshot.id
            assert [c.message for c in await repo.log()] == ["inside", "before"]
            # The restored working copy commits as it looks.
            again = await state.snapshot(message="after")
            assert again.values.to_dict() == kept.values.to_dict()

            async with state.rollback_on_error():  # no error: the changes stay
                state.set("messages", ["hi", "there"])
            assert state["messages"] == ["hi", "there"]

            with pytest.raises(PathError):
                with state.rollback_on_error():  # plain ``with`` works too
                    state.set("n", 1)
                    state.get("n.deeper")
            assert "n" not in state

    asyncio.run(run())


# -- threads and sessions -------------------------------------------------------------------


@pytest.mark.parametrize("kind", LOCATIONS)
def test_async_thread_and_session_round_trip(kind: str, tmp_path: Path) -> None:
    async def run() -> None:
        async with await snapvc.aio.open(_location(kind, tmp_path), clock=TickingClock()) as repo:
            thread = repo.thread("run 1", session="s-1", metadata={"agent": "planner"})
            assert isinstance(thread, AsyncThread)
            assert (thread.id, thread.namespace, thread.branch, thread.session) == ("run 1", "", "run%201", "s-1")
            assert await thread.latest() is None and await thread.list_versions() == []

            one = await thread.save({"step": 1, "notes": []}, message="first", token_usage={"input": 5})
            assert one.version == 1 and one.metadata == {"agent": "planner", "session_id": "s-1"}
            state = await thread.state()
            assert isinstance(state, AsyncState) and state.checkpoint == one
            state.set("step", 2)
            state.append("notes", "found it")
            two = await state.snapshot(message="second")
            assert two.metadata["session_id"] == "s-1" and two.branch == "run%201"

            assert await thread.latest() == two
            assert await thread.list_versions() == [1, 2]
            assert await thread.get(version=1) == one
            assert await thread.get(id=two.id[:10]) == two
            assert [cp.id for cp in await thread.checkpoints()] == [two.id, one.id]
            assert await thread.checkpoints(where={"step": 1}) == []
            assert await thread.versions() == {"step": 2, "notes": 2}
            with pytest.raises(snapvc.CheckpointNotFoundError):
                await thread.get(version=7)
            assert await thread.save(one) == one  # already in the thread: stored once

            child = await thread.fork("run 2", at=one, session="s-2")
            assert isinstance(child, AsyncThread) and child.session == "s-2"
            forked = await child.latest()
            assert forked is not None and (forked.id, forked.branch) == (one.id, "run%202")
            await child.save({"step": 10})
            sub = repo.thread("run 1", "tool:search", session="s-1")
            await sub.save({"query": "q"})
            assert sub.branch == "run%201/tool%3Asearch"

            reset = await thread.reset(one)
            assert reset.id == one.id and (await thread.latest()) == one

            session = repo.session("s-1")
            assert isinstance(session, AsyncSession) and session.id == "s-1"
            assert [t.branch for t in await session.threads()] == ["run%201", "run%201/tool%3Asearch"]
            assert [t.branch for t in await repo.threads(session="s-2")] == ["run%202"]
            newest = await sub.latest()
            assert newest is not None
            # "run 1" was reset to its first checkpoint: the second left the thread.
            assert [cp.id for cp in await session.checkpoints()] == [newest.id, one.id]
            assert await session.checkpoints(limit=1) == [newest]
            assert await session.latest() == newest
            assert thread == repo.thread("run 1") and hash(thread) == hash(repo.thread("run 1"))

            assert await session.delete() == ["run%201", "run%201/tool%3Asearch"]
            assert await session.threads() == [] and await session.latest() is None
            assert await child.delete() == ["run%202"]
            assert await repo.branches() == {}

    asyncio.run(run())


# -- the event loop and the worker ------------------------------------------------------------


def test_the_event_loop_runs_while_a_large_commit_is_written(tmp_path: Path) -> None:
    """The repository's clock is read inside the commit, on the worker: there it waits
    for the ticker, which only the event loop runs. So the commit can only finish if
    the loop ran while the commit was in progress."""
    in_commit = threading.Event()
    ticker_ran = threading.Event()
    waited: list[bool] = []
    armed = False

    def clock() -> float:
        if armed and threading.current_thread() is not threading.main_thread():
            in_commit.set()
            waited.append(ticker_ran.wait(timeout=60))
        return time.time()

    async def run() -> None:
        nonlocal armed
        ticks = 0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                if in_commit.is_set():
                    ticker_ran.set()
                await asyncio.sleep(0)

        async with await snapvc.aio.open(tmp_path / "repo.snapvc", clock=clock) as repo:
            running = asyncio.create_task(ticker())
            big = {"messages": [{"role": "user", "content": f"message {i} " * 8, "n": i} for i in range(20_000)]}
            armed = True
            before = ticks
            commit = await repo.commit(big, "main", "large")
            during = ticks - before
            armed = False
            stop.set()
            await running
            assert during >= 1
            assert waited and all(waited)  # the clock inside the commit saw the ticker run
            assert (await repo.snapshot(commit.id))["messages"][19_999]["n"] == 19_999

    asyncio.run(run())


@pytest.mark.parametrize("kind", LOCATIONS)
def test_every_operation_runs_on_the_one_worker_thread(kind: str, tmp_path: Path) -> None:
    seen: set[threading.Thread] = set()

    def note(*_: Any) -> bool:
        seen.add(threading.current_thread())
        return True

    async def run() -> None:
        repo = await snapvc.aio.open(_location(kind, tmp_path))
        await repo.commit({"a": 1}, "main")
        await repo.commit({"a": 2}, "other", parents=())
        await repo.commit({"a": 3}, "main")
        await asyncio.gather(*(repo.log(["main", "other"], where=note) for _ in range(10)))
        await repo.merge("other", "main", resolve=note)
        assert len(seen) == 1
        worker = next(iter(seen))
        assert worker is not threading.current_thread() and worker.is_alive()

        await repo.close()
        assert not worker.is_alive()  # closing stops the worker
        await repo.close()  # idempotent
        with pytest.raises(RepositoryError, match="is closed"):
            await repo.branches()
        with pytest.raises(RepositoryError, match="is closed"):
            await repo.state()
        with pytest.raises(RepositoryError, match="is closed"):
            repo.thread("t")
        with pytest.raises(RepositoryError, match="is closed"):
            repo.sync.resolve("main")  # the repository itself is closed too

    asyncio.run(run())


def test_close_waits_for_the_operations_already_awaited(tmp_path: Path) -> None:
    async def run() -> None:
        repo = await snapvc.aio.open(tmp_path / "repo.snapvc")
        writes = [asyncio.ensure_future(repo.commit({"i": i}, f"b{i}")) for i in range(10)]
        await asyncio.sleep(0)  # the commits are handed to the worker
        closing = asyncio.ensure_future(repo.close())
        await asyncio.sleep(0)
        with pytest.raises(RepositoryError, match="is closed"):
            await repo.commit({"late": True}, "late")
        await asyncio.gather(*writes, closing)
        with snapvc.open(tmp_path / "repo.snapvc") as sync:
            assert sorted(sync.branches()) == sorted(f"b{i}" for i in range(10))

    asyncio.run(run())


def test_many_loops_may_use_one_repository_in_turn(tmp_path: Path) -> None:
    repo = AsyncRepository(snapvc.open(tmp_path / "repo.snapvc"))

    async def write(i: int) -> snapvc.Commit:
        return await repo.commit({"i": i}, "main")

    for i in range(3):
        asyncio.run(write(i))
    assert asyncio.run(repo.checkout("main")) == {"i": 2}
    asyncio.run(repo.close())


def test_the_module_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert snapvc.aio.__doc__ is not None
    example = textwrap.dedent(snapvc.aio.__doc__.split("\nThreading model")[0].split("\n", 1)[1])
    assert "await" in example
    monkeypatch.chdir(tmp_path)  # the example creates its repository in the working directory
    body = textwrap.indent(example.replace("import snapvc.aio\n", ""), "    ")
    namespace: dict[str, Any] = {"snapvc": snapvc}
    exec(compile(f"async def example():\n{body}", "snapvc.aio example", "exec"), namespace)
    asyncio.run(namespace["example"]())
    with snapvc.open(tmp_path / "agent.snapvc") as repo:
        assert [c.message for c in repo.log("main")] == ["step 1", "start"]
        assert repo.thread("run-001").list_versions() == [1]
