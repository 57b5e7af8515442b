"""Threads and sessions (snapvc/agent/threads.py), per-field versions, and the State's
history, diff and versions; the repository's durability setting and deferred block."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import snapvc
from snapvc import CheckpointNotFoundError, InvalidRefNameError, parse_thread_branch, thread_branch
from snapvc.refs.names import ref_name_problem


@pytest.fixture
def repo(tmp_path: Path) -> snapvc.Repository:
    with snapvc.open(tmp_path / "t.snapvc") as r:
        yield r


# -- thread ids and branches -------------------------------------------------------------


def test_plain_thread_ids_are_their_branch_names() -> None:
    assert thread_branch("run-001") == "run-001"
    assert thread_branch("6f1c2a3e-1b2c-4d5e-8f90-123456789abc") == "6f1c2a3e-1b2c-4d5e-8f90-123456789abc"
    assert thread_branch("t", "child:1") == "t/child%3A1"
    assert thread_branch("run 1/a") == "run%201%2Fa"
    assert thread_branch(".x..y.lock") == "%2Ex%2E.y%2Elock"
    assert parse_thread_branch("t/child%3A1") == ("t", "child:1")
    assert parse_thread_branch("main") == ("main", "")


@given(st.text(min_size=1, max_size=40), st.text(max_size=20))
def test_every_thread_id_has_a_valid_branch_that_reads_back(thread_id: str, namespace: str) -> None:
    branch = thread_branch(thread_id, namespace)
    assert ref_name_problem(branch) is None, branch
    assert parse_thread_branch(branch) == (thread_id, namespace)


@pytest.mark.parametrize("bad", ["", None, 7])
def test_a_thread_id_is_a_non_empty_str(bad: object) -> None:
    with pytest.raises(InvalidRefNameError, match="thread id"):
        thread_branch(bad)  # type: ignore[arg-type]


# -- a thread as a checkpoint store ------------------------------------------------------


def test_save_get_latest_and_versions(repo: snapvc.Repository) -> None:
    thread = repo.thread("task-1")
    assert thread.latest is None and thread.list_versions() == [] and not thread.exists
    saved = [thread.save({"step": i}, message=f"s{i}", metadata={"step": i}) for i in (1, 2, 3)]
    assert [cp.version for cp in saved] == [1, 2, 3]
    assert thread.exists and thread.branch == "task-1"
    assert thread.latest == saved[-1] and thread.latest.version == 3
    assert thread.list_versions() == [1, 2, 3]
    assert dict(thread.get(1).values) == {"step": 1}
    assert thread.get(version=2).message == "s2"
    assert thread.get(step=3).id == saved[2].id
    assert thread.get(id=saved[0].id[:10]).version == 1
    assert [cp.version for cp in thread.checkpoints()] == [3, 2, 1]
    assert [cp.version for cp in thread.checkpoints(limit=2)] == [3, 2]
    assert [cp.version for cp in thread.checkpoints(where={"step": 2})] == [2]
    assert all(cp.branch == "task-1" for cp in thread.checkpoints())


def test_get_names_what_it_did_not_find(repo: snapvc.Repository) -> None:
    thread = repo.thread("t")
    with pytest.raises(CheckpointNotFoundError, match="no checkpoint version 1 .*none"):
        thread.get(1)
    for i in range(4):
        thread.save({"i": i})
    with pytest.raises(CheckpointNotFoundError, match=r"version 9 \(its versions: 1\.\.4\)"):
        thread.get(9)
    with pytest.raises(CheckpointNotFoundError, match="no checkpoint of step 2"):
        thread.get(step=2)
    with pytest.raises(CheckpointNotFoundError, match="no such commit"):
        thread.get(id="abcdef12")
    other = repo.thread("u").save({"x": 1})
    with pytest.raises(CheckpointNotFoundError, match="not in the thread's history"):
        thread.get(id=other.id)
    with pytest.raises(TypeError, match="exactly one of version, id, step"):
        thread.get(1, step=1)
    with pytest.raises(TypeError, match="got none"):
        thread.get()
    assert isinstance(CheckpointNotFoundError("x"), KeyError)


def test_saving_a_checkpoint_twice_stores_it_once(repo: snapvc.Repository) -> None:
    thread = repo.thread("t")
    state = thread.state()
    state.set("a", 1)
    cp = state.snapshot(metadata={"k": "v"})
    assert thread.save(cp) == cp
    assert thread.list_versions() == [1]


def test_saving_a_checkpoint_from_elsewhere_makes_it_the_threads(repo: snapvc.Repository, tmp_path: Path) -> None:
    with snapvc.open(tmp_path / "other.snapvc") as other:
        st_ = other.state("x")
        st_.set("doc", {"text": "hello " * 400, "n": [1, 2, 3]})
        foreign = st_.snapshot(message="from afar", metadata={"reason": "backup"}, token_usage={"input": 5})
        data = json.loads(json.dumps(foreign.to_dict()))
    thread = repo.thread("t", session="s")
    saved = thread.save(snapvc.Checkpoint.from_dict(data))
    assert saved.id != foreign.id and saved.branch == "t" and saved.version == 1
    assert dict(saved.values) == {"doc": {"text": "hello " * 400, "n": [1, 2, 3]}}
    assert saved.message == "from afar" and saved.token_usage == {"input": 5}
    assert saved.metadata == {"reason": "backup", "session_id": "s"}
    # A checkpoint of another thread of this repository: its stored values are referred to.
    copy = repo.thread("u").save(saved, metadata={"reason": "copied"})
    assert copy.values.id == saved.values.id and copy.metadata["reason"] == "copied"


def test_threads_stamp_their_session_namespace_and_metadata(repo: snapvc.Repository) -> None:
    thread = repo.thread("run", "sub:graph", session="s-1", metadata={"task_id": "t-9", "agent_id": "a"})
    assert thread.branch == "run/sub%3Agraph"
    state = thread.state()
    state.set("x", 1)
    cp = state.snapshot(metadata={"agent_id": "b"})
    assert cp.namespace == "sub:graph"
    assert cp.metadata == {"task_id": "t-9", "agent_id": "b", "session_id": "s-1", "namespace": "sub:graph"}
    assert list(repo.log(thread.branch, where={"session_id": "s-1"})) != []
    assert repr(thread) == "<snapvc.Thread 'run', namespace='sub:graph' on branch 'run/sub%3Agraph'>"


def test_fork_into_a_new_thread_and_time_travel_on_the_same(repo: snapvc.Repository) -> None:
    thread = repo.thread("run-001")
    cps = [thread.save({"step": i}) for i in range(1, 5)]
    branch = thread.fork("run-001-branch-a", at=cps[1])
    assert branch.latest.id == cps[1].id and branch.list_versions() == [1, 2]
    branch.save({"step": 3, "strategy": "B"})
    assert thread.list_versions() == [1, 2, 3, 4]  # the original is untouched
    with pytest.raises(snapvc.RefExistsError):
        thread.fork("run-001-branch-a")
    back = thread.reset(cps[1].id)
    assert back.version == 2 and thread.latest.id == cps[1].id
    assert thread.save({"step": 3, "retry": True}).version == 3
    assert thread.reset(f"{thread.branch}@{{2}}").id == cps[3].id  # the reflog undoes it
    with pytest.raises(CheckpointNotFoundError, match="nothing|no checkpoint to fork"):
        repo.thread("empty").fork("x")


def test_delete_a_thread_with_its_namespaces(repo: snapvc.Repository) -> None:
    for ns in ("", "a", "b"):
        repo.thread("t", ns).save({"ns": ns})
    repo.thread("t2").save({"x": 1})
    assert repo.thread("t", "a").delete() == ["t/a"]
    assert repo.thread("t").delete() == ["t", "t/b"]
    assert sorted(repo.branches()) == ["t2"]
    assert repo.delete_thread("nothing") == []
    assert len(repo.reflog("refs/heads/t")) == 2  # created, deleted: the commits stay reachable


def test_threads_and_sessions(repo: snapvc.Repository) -> None:
    a = repo.thread("a", session="s1")
    b = repo.thread("b", session="s1")
    c = repo.thread("c", session="s2")
    a.save({"x": 1})
    b.save({"y": 1})
    b.save({"y": 2})
    c.save({"z": 1})
    a.fork("a2", session="s2").save({"x": 2})  # the fork's latest checkpoint moves it to s2
    assert [t.id for t in repo.threads()] == ["a", "a2", "b", "c"]
    session = repo.session("s1")
    assert [t.id for t in session.threads()] == ["a", "b"]
    assert [t.id for t in repo.session("s2").threads()] == ["a2", "c"]
    assert [dict(cp.values) for cp in session.checkpoints()] == [{"y": 2}, {"y": 1}, {"x": 1}]
    assert session.checkpoints(limit=1)[0].branch == "b"
    assert dict(session.latest.values) == {"y": 2}
    assert session.delete() == ["a", "b"]
    assert sorted(repo.branches()) == ["a2", "c"]
    assert session.latest is None and session.checkpoints() == []
    assert repo.session("s2").checkpoints()[0].metadata["session_id"] == "s2"


def test_a_checkpoint_by_id_finds_its_branch(repo: snapvc.Repository) -> None:
    first = repo.commit({"a": 1}, branch="main")
    repo.commit({"a": 2}, branch="main")
    repo.branch("side", at=first.id)
    side = repo.commit({"a": 3}, branch="side")
    assert repo.checkpoint(first.id.hex[:8]).branch == "main"
    assert repo.checkpoint(side.id).branch == "side"
    assert repo.checkpoint("side").branch == "side"
    assert repo.checkpoint("side~1").branch == "main"
    assert repo.checkpoint().branch == "main"
    repo.delete_branch("side")
    assert repo.checkpoint(side.id).branch == ""
    with pytest.raises(snapvc.UnknownRevisionError):
        repo.checkpoint("nope")


# -- per-field versions ------------------------------------------------------------------


def _brute_force_versions(repo: snapvc.Repository, rev: str) -> dict[str, int]:
    """Count by checking out every commit of the first-parent history."""
    chain = []
    oid = repo.resolve(rev)
    while oid is not None:
        commit = repo.get_commit(oid)
        chain.append(commit)
        oid = commit.parent
    counts: dict[str, int] = {}
    before: dict[str, object] = {}
    for commit in reversed(chain):
        now = repo.checkout(commit.id)
        for key, value in now.items():
            if key not in before or before[key] != value or type(before[key]) is not type(value):
                counts[key] = counts.get(key, 0) + 1
        before = now
    return {key: counts[key] for key in before}


def test_versions_count_the_commits_that_changed_each_field(repo: snapvc.Repository) -> None:
    state = repo.state("main")
    state.update({"scratchpad": "a", "current_step": 1})
    state.snapshot()
    for step in range(2, 6):
        state.set("current_step", step)
        if step % 2:
            state.set("scratchpad", state.get("scratchpad") + "b")
        state.snapshot()
    state.set("final_result", "done")
    state.snapshot()
    assert state.versions() == {"current_step": 5, "final_result": 1, "scratchpad": 3}
    assert repo.versions("main~1") == {"current_step": 5, "scratchpad": 3}
    # removing a field drops it; adding it back continues its count
    state.delete("scratchpad")
    state.snapshot()
    assert "scratchpad" not in state.versions()
    state.set("scratchpad", "again")
    state.snapshot()
    assert state.versions()["scratchpad"] == 4
    assert state.versions() == _brute_force_versions(repo, "main")
    assert repo.thread("main").versions() == state.versions()
    assert repo.thread("none").versions() == {}


def test_versions_of_a_big_top_level_map_and_of_merges(repo: snapvc.Repository) -> None:
    base = {f"k{i:04d}": i for i in range(3000)}  # a top-level prolly tree
    repo.commit(base, branch="main")
    repo.branch("side")
    repo.commit({**base, "k0007": -1}, branch="side")
    repo.commit({**base, "k2999": -1, "new": [1, 2]}, branch="main")
    repo.merge("side", into="main", resolve=lambda c: c.theirs)
    versions = repo.versions("main")
    assert versions["k0007"] == 2 and versions["k2999"] == 2 and versions["new"] == 1 and versions["k1000"] == 1
    assert versions == _brute_force_versions(repo, "main")
    # types count: 1 -> True is a change, as it is stored differently
    repo.commit({**repo.checkout("main"), "k0001": True}, branch="main")
    assert repo.versions("main")["k0001"] == 2


def test_versions_computed_incrementally_agree_with_a_fresh_count(tmp_path: Path) -> None:
    path = tmp_path / "v.snapvc"
    with snapvc.open(path) as repo:
        state = repo.state()
        for i in range(40):
            state.set(f"f{i % 7}", {"i": i, "text": "x" * (i * 50)})
            state.snapshot()
            if i % 9 == 0:
                state.versions()  # counted a piece at a time
        incremental = state.versions()
    with snapvc.open(path) as fresh:
        assert fresh.versions() == incremental == _brute_force_versions(fresh, "main")


# -- the State's history and diff --------------------------------------------------------


def test_state_history_oldest_first_restores_the_first_value(repo: snapvc.Repository) -> None:
    state = repo.state()
    for value in ("value1", "value2", "value3"):
        state.set("key", value)
        state.snapshot()
    history = state.history("key", oldest_first=True)
    assert [e.value for e in history] == ["value1", "value2", "value3"]
    assert [e.value for e in state.history("key")] == ["value3", "value2", "value1"]
    assert [e.value for e in state.history("key", limit=1, oldest_first=True)] == ["value1"]
    state.restore(history[0].commit)
    assert state.get("key") == "value1"
    assert [e.value for e in repo.history("main", "key", limit=2, oldest_first=True)] == ["value1", "value2"]
    assert repo.state("empty").history("key") == []


def test_state_diff_against_base_and_others(repo: snapvc.Repository) -> None:
    state = repo.state()
    assert state.diff() == []
    state.update({"a": 1, "b": {"c": [1, 2]}})
    assert [(c.path, c.kind) for c in state.diff()] == [(("a",), "added"), (("b",), "added")]
    first = state.snapshot()
    assert state.diff() == []
    state.set("b.c.1", 3)
    state.delete("a")
    assert [(c.path, c.kind, c.old, c.new) for c in state.diff()] == [
        (("a",), "removed", 1, None), (("b", "c", 1), "modified", 2, 3)]
    assert [c.path for c in state.diff(paths="b")] == [("b", "c", 1)]
    second = state.snapshot()
    assert [c.kind for c in state.diff(first)] == ["removed", "modified"]
    other = repo.state()  # loaded at ``second``
    other.set("z", 1)
    assert [c.path for c in other.diff(state)] == [("z",)]
    assert [c.path for c in state.diff({"b": {"c": [1, 3]}})] == []
    assert state.diff(second.id) == []


# -- durability and deferred commits -----------------------------------------------------


def _synchronous(repo: snapvc.Repository) -> int:
    return repo.backend.file.conn.execute("PRAGMA synchronous").fetchone()[0]


def test_durability_can_change_while_open(tmp_path: Path) -> None:
    with snapvc.open(tmp_path / "d.snapvc") as repo:
        assert repo.durability == "normal" and _synchronous(repo) == 1
        repo.durability = "sync"
        assert repo.durability == "sync" and _synchronous(repo) == 2
        repo.commit({"a": 1})
        repo.durability = "batch"
        assert _synchronous(repo) == 0
        with pytest.raises(ValueError, match="durability must be one of"):
            repo.durability = "fast"
        assert repo.durability == "batch"
    memory = snapvc.open("memory://")
    memory.durability = "sync"
    assert memory.durability == "sync"
    with pytest.raises(ValueError, match="durability"):
        memory.durability = "fast"


def test_deferred_commits_are_written_together_at_the_end(tmp_path: Path) -> None:
    path = tmp_path / "d.snapvc"
    with snapvc.open(path) as repo:
        repo.commit({"n": 0})
        reader = sqlite3.connect(path)
        count = "SELECT count(*) FROM commits"
        with repo.deferred():
            for i in range(1, 6):
                repo.commit({"n": i})
            repo.branch("b")
            assert reader.execute(count).fetchone()[0] == 1  # nothing is visible yet
            assert repo.checkout()["n"] == 5  # but this connection reads its own writes
        assert reader.execute(count).fetchone()[0] == 6
        with pytest.raises(RuntimeError, match="boom"), repo.deferred():
            repo.commit({"n": 6})
            raise RuntimeError("boom")
        assert reader.execute(count).fetchone()[0] == 7  # written even though the block raised
        reader.close()
    with snapvc.open(path) as again:
        assert [c.generation for c in again.log()] == [7, 6, 5, 4, 3, 2, 1]
        assert "b" in again.branches()


def test_restore_a_checkpoint_this_repository_does_not_hold(tmp_path: Path) -> None:
    with snapvc.open(tmp_path / "a.snapvc") as a, snapvc.open(tmp_path / "b.snapvc") as b:
        source = a.state()
        source.update({"x": {"y": [1]}, "t": (1, 2), "blob": b"\x00\x01"})
        cp = source.snapshot()
        record = snapvc.Checkpoint.from_dict(json.loads(json.dumps(cp.to_dict())))
        target = b.state()
        target.set("gone", 1)
        target.restore(record)
        assert dict(target) == {"x": {"y": [1]}, "t": (1, 2), "blob": b"\x00\x01"}
        target.restore({"q": [1]})  # the values of a state, copied
        target.get("q").append(2)
        target.snapshot()
        assert b.checkout() == {"q": [1, 2]}
        target.restore(cp)  # another repository's lazy values
        target.snapshot()
        assert b.checkout() == a.checkout()
        with pytest.raises(snapvc.UnknownRevisionError):
            target.restore("0" * 64)
