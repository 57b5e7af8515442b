"""The repository: commits on branches, reading them back, moving refs, history, and
what happens with bad input, damaged files and concurrent writers."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import snapvc
from snapvc import (
    AmbiguousRevisionError,
    CorruptObjectError,
    InvalidRefNameError,
    NotARepositoryError,
    RefConflictError,
    RefExistsError,
    RefNotFoundError,
    RepositoryNotFoundError,
    UnknownRevisionError,
)
from snapvc.encoding.writer import Encoder
from snapvc.backends.sqlite.file import WAL_MAX_BYTES
from snapvc.ids import ObjectId
from snapvc.objects import BLOB, COMMIT
from tests.fakes import TickingClock

ROOT = Path(__file__).resolve().parents[1]




@pytest.fixture(params=["memory", "sqlite"])
def repo(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[snapvc.Repository]:
    location = "memory://" if request.param == "memory" else tmp_path / "repo.snapvc"
    with snapvc.open(location, clock=TickingClock(), author="tester") as r:
        yield r


def chat(n: int) -> dict[str, Any]:
    return {
        "messages": [{"role": "user" if i % 2 else "assistant", "content": f"message {i} " + "text " * 50}
                     for i in range(n)],
        "scratch": {"thought": f"after {n} messages"},
    }


def build_history(repo: snapvc.Repository, n: int = 5, branch: str = "main") -> list[snapvc.Commit]:
    commits = []
    for i in range(n):
        commits.append(repo.commit(chat(i + 1), branch=branch, message=f"step {i}",
                                   metadata={"step": i, "agent": "researcher" if i % 2 else "writer",
                                             "usage": {"tokens": 10 * i}}))
    return commits


# -- open -------------------------------------------------------------------------------------


def test_open_creates_a_file_and_reopens_it(tmp_path: Path) -> None:
    path = tmp_path / "agent.snapvc"
    with snapvc.open(path) as repo:
        c = repo.commit({"a": 1}, message="first")
        assert repo.location == str(path)
    assert path.is_file()
    with snapvc.open(str(path), create=False) as repo:
        assert repo.resolve("main") == c.id
        assert repo.checkout("main") == {"a": 1}
        assert repo.head == "main"


def test_open_memory_is_empty_each_time() -> None:
    a = snapvc.open("memory://")
    a.commit({"a": 1})
    b = snapvc.open("memory://")
    assert b.branches() == {}
    assert a.branches().keys() == {"main"}


def test_open_missing_path_without_create(tmp_path: Path) -> None:
    with pytest.raises(RepositoryNotFoundError) as info:
        snapvc.open(tmp_path / "missing.snapvc", create=False)
    assert "missing.snapvc" in str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    assert not (tmp_path / "missing.snapvc").exists()


def test_open_in_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(RepositoryNotFoundError):
        snapvc.open(tmp_path / "no" / "such" / "folder.snapvc")
    assert not (tmp_path / "no").exists()


def test_open_unknown_scheme() -> None:
    with pytest.raises(snapvc.RepositoryError, match="scheme"):
        snapvc.open("ftp://example.com/repo")


def snapshot_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_open_a_text_file_leaves_it_alone(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("these are my notes, not a repository\n" * 20)
    before = snapshot_of(tmp_path)
    for create in (True, False):
        with pytest.raises(NotARepositoryError) as info:
            snapvc.open(path, create=create)
        assert "notes.txt" in str(info.value)
    assert snapshot_of(tmp_path) == before


def test_open_a_foreign_sqlite_database_leaves_it_alone(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('ada'), ('grace')")
    conn.commit()
    conn.close()
    before = snapshot_of(tmp_path)
    for create in (True, False):
        with pytest.raises(NotARepositoryError):
            snapvc.open(path, create=create)
    assert snapshot_of(tmp_path) == before
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT name FROM users ORDER BY id").fetchall() == [("ada",), ("grace",)]
    conn.close()


def test_open_a_sqlite_database_of_another_application(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA application_id = 12345")
    conn.execute("CREATE TABLE objects (id BLOB PRIMARY KEY, data BLOB NOT NULL, mtime INTEGER NOT NULL)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(NotARepositoryError):
        snapvc.open(path)
    assert path.read_bytes() == before


def test_open_a_folder(tmp_path: Path) -> None:
    with pytest.raises(NotARepositoryError):
        snapvc.open(tmp_path)


@pytest.mark.parametrize("mode", ["sync", "normal", "batch"])
def test_durability_modes(tmp_path: Path, mode: str) -> None:
    path = tmp_path / f"{mode}.snapvc"
    with snapvc.open(path, durability=mode) as repo:
        for i in range(3):
            repo.commit(chat(i + 1), message=f"{mode} {i}")
    with snapvc.open(path, create=False, durability=mode) as repo:
        assert [c.message for c in repo.log("main")] == [f"{mode} 2", f"{mode} 1", f"{mode} 0"]
        assert repo.checkout("main") == chat(3)


def test_the_write_ahead_log_stays_bounded_and_is_folded_in_at_close(tmp_path: Path) -> None:
    path = tmp_path / "wal.snapvc"
    wal = tmp_path / "wal.snapvc-wal"
    rnd = random.Random(7)
    state: dict[str, Any] = {"log": []}
    largest = 0
    with snapvc.open(path) as repo:
        for step in range(200):  # ~30 KB of new frames per commit, 6 MB in all
            state["log"].append(rnd.randbytes(60_000).hex()[:60_000])
            repo.commit(state, message=f"step {step}")
            largest = max(largest, wal.stat().st_size if wal.exists() else 0)
        # Folded in as it goes (by the background checkpoints, or by a commit once it
        # passes WAL_MAX_BYTES), not only at the end.
        assert largest < 2 * WAL_MAX_BYTES
        assert repo.checkout("main") == state
    assert not wal.exists()
    with snapvc.open(path, create=False) as repo:
        assert repo.checkout("main") == state


@pytest.mark.parametrize("mode", ["fast", "", "SYNC", "off"])
def test_invalid_durability_mode(tmp_path: Path, mode: str) -> None:
    with pytest.raises(ValueError, match="durability"):
        snapvc.open(tmp_path / "x.snapvc", durability=mode)
    assert not (tmp_path / "x.snapvc").exists()


# -- commit, checkout, snapshot -----------------------------------------------------------


def test_commit_fields(repo: snapvc.Repository) -> None:
    c1 = repo.commit({"a": 1}, message="first\n\nbody", metadata={"step": 1, "usage": {"tokens": 5}})
    c2 = repo.commit({"a": 2}, message="second", author="someone else")
    assert c1.parents == () and c1.parent is None and c1.generation == 1
    assert c2.parents == (c1.id,) and c2.parent == c1.id and c2.generation == 2
    assert c1.author == "tester" and c2.author == "someone else"
    assert c1.message == "first\n\nbody"
    assert dict(c1.metadata) == {"step": 1, "usage": {"tokens": 5}}
    assert c2.timestamp_us > c1.timestamp_us
    assert c1.time.tzinfo is not None
    assert repo.get_commit(c1.id) == c1
    assert repo.get_commit(c1.id).tree == c1.tree


def test_metadata_must_be_json(repo: snapvc.Repository) -> None:
    for bad in ({"x": float("nan")}, {"x": (1, 2)}, {1: "a"}, ["not", "a", "dict"]):
        with pytest.raises(TypeError):
            repo.commit({"a": 1}, metadata=bad)  # type: ignore[arg-type]
    assert repo.branches() == {}


def test_checkout_returns_a_fresh_deep_copy(repo: snapvc.Repository) -> None:
    state = chat(3)
    repo.commit(state)
    first = repo.checkout("main")
    assert first == state
    first["messages"][0]["content"] = "changed"
    first["scratch"].clear()
    assert repo.checkout("main") == state
    assert repo.checkout("main") is not repo.checkout("main")


def test_checkout_of_a_commit_id_and_of_head(repo: snapvc.Repository) -> None:
    c1 = repo.commit({"v": 1})
    repo.commit({"v": 2})
    assert repo.checkout(c1.id) == {"v": 1}
    assert repo.checkout(c1.id.hex) == {"v": 1}
    assert repo.checkout() == {"v": 2}
    assert repo.checkout("HEAD") == {"v": 2}


def test_checkout_is_a_read_and_switch_moves_head(repo: snapvc.Repository) -> None:
    repo.commit({"on": "main"})
    repo.commit({"on": "other"}, branch="other")
    assert repo.head == "main"
    assert repo.checkout("other") == {"on": "other"}
    assert repo.head == "main", "checking out a branch moved HEAD"
    repo.switch("other")
    assert repo.head == "other"
    repo.commit({"on": "other", "n": 2})
    assert repo.checkout("other")["n"] == 2
    assert repo.checkout("main") == {"on": "main"} and repo.head == "other"


def test_checkout_of_unknown_revisions(repo: snapvc.Repository) -> None:
    with pytest.raises(UnknownRevisionError):
        repo.checkout("main")  # no commits yet
    repo.commit({"a": 1})
    for rev in ("nope", "feature/x", "main~1", "main^2", "v1", "deadbeef", "main@{5}"):
        with pytest.raises(UnknownRevisionError):
            repo.checkout(rev)


def test_snapshot_is_a_lazy_read_only_mapping(repo: snapvc.Repository) -> None:
    state = chat(100)
    state["nested"] = {"deep": {"list": list(range(300)), "t": (1, 2)}}
    repo.commit(state)
    snap = repo.snapshot("main")
    assert isinstance(snap, snapvc.MapView)
    assert set(snap) == set(state)
    assert len(snap) == len(state)
    assert snap["messages"][42]["content"] == state["messages"][42]["content"]
    assert len(snap["messages"]) == 100
    assert snap["messages"][-1] == state["messages"][-1]
    assert snap["nested"]["deep"]["list"][299] == 299
    assert snap["nested"]["deep"]["t"] == (1, 2)
    assert snap.to_dict() == state
    with pytest.raises(KeyError):
        snap["missing"]
    with pytest.raises(TypeError):
        snap["scratch"] = 1  # type: ignore[index]


def test_committing_a_snapshot_stores_the_same_tree(repo: snapvc.Repository) -> None:
    c1 = repo.commit(chat(20))
    c2 = repo.commit(repo.snapshot("main"), branch="copy")  # type: ignore[arg-type]
    assert c2.tree == c1.tree


def test_lazy_snapshot_reads_few_objects_of_a_freshly_opened_repository(tmp_path: Path) -> None:
    path = tmp_path / "lazy.snapvc"
    state = chat(1_000)
    with snapvc.open(path) as repo:
        repo.commit(state)

    with snapvc.open(path, create=False) as repo:
        assert repo.loader.objects_read == 0
        content = repo.snapshot("main")["messages"][500]["content"]
        assert content == state["messages"][500]["content"]
        lazy = repo.loader.objects_read
    assert 1 <= lazy <= 8, lazy

    with snapvc.open(path, create=False) as repo:
        assert repo.checkout("main") == state
        full = repo.loader.objects_read
    assert full >= 50 and full >= 10 * lazy, (lazy, full)


# -- branches, tags, reset, reflog ----------------------------------------------------------


def test_branch_forks_at_a_revision(repo: snapvc.Repository) -> None:
    commits = build_history(repo, 5)
    fork = repo.branch("try-b", at="main~2")
    assert fork.id == commits[2].id
    assert repo.branches() == {"main": commits[4].id, "try-b": commits[2].id}
    c = repo.commit({"tried": "b"}, branch="try-b")
    assert c.parents == (commits[2].id,) and c.generation == 4
    assert repo.resolve("main") == commits[4].id
    assert repo.checkout("try-b") == {"tried": "b"}
    assert repo.checkout("main") == chat(5)


def test_branch_refuses_an_existing_name_unless_forced(repo: snapvc.Repository) -> None:
    commits = build_history(repo, 3)
    repo.branch("b", at="main~1")
    with pytest.raises(RefExistsError):
        repo.branch("b", at="main")
    assert repo.resolve("b") == commits[1].id
    repo.branch("b", at="main", force=True)
    assert repo.resolve("b") == commits[2].id


def test_branches_are_sorted_by_name(repo: snapvc.Repository) -> None:
    repo.commit({"a": 1})
    for name in ("zeta", "alpha", "feature/x", "Main2"):
        repo.branch(name, at="main")
    assert list(repo.branches()) == sorted(["main", "zeta", "alpha", "feature/x", "Main2"])


def test_tags(repo: snapvc.Repository) -> None:
    commits = build_history(repo, 3)
    t = repo.tag("v1", at="main~1")
    assert t.id == commits[1].id
    repo.tag("v2")
    assert repo.tags() == {"v1": commits[1].id, "v2": commits[2].id}
    repo.commit({"later": True})
    assert repo.resolve("v1") == commits[1].id
    assert repo.checkout("v2") == chat(3)
    with pytest.raises(RefExistsError):
        repo.tag("v1", at="main")
    assert repo.delete_tag("v1") == commits[1].id
    assert repo.tags() == {"v2": commits[2].id}


def test_delete_branch(repo: snapvc.Repository) -> None:
    commits = build_history(repo, 3)
    repo.branch("gone", at="main~1")
    assert repo.delete_branch("gone") == commits[1].id
    assert "gone" not in repo.branches()
    with pytest.raises(UnknownRevisionError):
        repo.resolve("gone")
    # Its commits stay reachable through the reflog.
    assert repo.resolve("gone@{1}") == commits[1].id
    with pytest.raises(RefNotFoundError):
        repo.delete_branch("gone")
    with pytest.raises(RefNotFoundError):
        repo.delete_branch("never-existed")


def test_delete_the_branch_head_is_on(repo: snapvc.Repository) -> None:
    repo.commit({"a": 1})
    # The error says why (not "already exists", with the reason hidden in __cause__).
    with pytest.raises(snapvc.RefError, match="cannot delete branch 'main': HEAD is on it") as info:
        repo.delete_branch("main")
    assert not isinstance(info.value, RefExistsError) and info.value.__cause__ is None
    assert repo.branches().keys() == {"main"}


@pytest.mark.parametrize("name", ["a..b", "x.lock", "-x", "a b", "a~1", "a^", "a:b", "a?", "a*", "a[", "a\\b",
                                  "/a", "a/", "a//b", ".a", "a/.b", "a.", "@", "a@{1}", "", "a\x01"])
def test_bad_branch_names(repo: snapvc.Repository, name: str) -> None:
    repo.commit({"a": 1})
    tip = repo.resolve("main")
    with pytest.raises(InvalidRefNameError):
        repo.commit({"a": 2}, branch=name)
    with pytest.raises(InvalidRefNameError):
        repo.branch(name, at="main")
    with pytest.raises(InvalidRefNameError):
        repo.tag(name, at="main")
    assert repo.branches() == {"main": tip}
    assert repo.tags() == {}


def test_reset_and_undo(repo: snapvc.Repository) -> None:
    commits = build_history(repo, 5)
    back = repo.reset("main", to="main~3")
    assert back.id == commits[1].id
    assert repo.resolve("main") == commits[1].id
    assert repo.checkout("main") == chat(2)
    assert [c.id for c in repo.log("main")] == [commits[1].id, commits[0].id]

    undo = repo.reset("main", to="main@{1}")
    assert undo.id == commits[4].id
    assert repo.checkout("main") == chat(5)
    assert len(list(repo.log("main"))) == 5

    entries = repo.reflog("main")
    assert [e.new for e in entries[:2]] == [commits[4].id, commits[1].id]
    assert entries[0].old == commits[1].id and entries[1].old == commits[4].id
    assert "reset" in entries[0].reason and "reset" in entries[1].reason
    assert len(entries) == 7
    assert entries[-1].old is None and entries[-1].new == commits[0].id


def test_reset_to_another_branch_and_of_a_missing_branch(repo: snapvc.Repository) -> None:
    build_history(repo, 2)
    other = repo.commit({"other": 1}, branch="other")
    repo.reset("main", to="other")
    assert repo.resolve("main") == other.id
    with pytest.raises(RefNotFoundError):
        repo.reset("nope", to="main")
    with pytest.raises(UnknownRevisionError):
        repo.reset("main", to="nope")
    assert repo.resolve("main") == other.id


def test_commit_after_reset_continues_from_the_new_tip(repo: snapvc.Repository) -> None:
    commits = build_history(repo, 4)
    repo.reset("main", to="main~2")
    c = repo.commit({"new": "path"})
    assert c.parents == (commits[1].id,) and c.generation == 3
    assert [x.id for x in repo.log("main")] == [c.id, commits[1].id, commits[0].id]


# -- log ----------------------------------------------------------------------------------------


def test_log_newest_first_with_generations(repo: snapvc.Repository) -> None:
    commits = build_history(repo, 6)
    log = list(repo.log("main"))
    assert [c.id for c in log] == [c.id for c in reversed(commits)]
    assert [c.generation for c in log] == [6, 5, 4, 3, 2, 1]
    for newer, older in zip(log, log[1:]):
        assert newer.parents == (older.id,)
    assert [c.id for c in repo.log("main~2")] == [c.id for c in reversed(commits[:4])]
    assert [c.id for c in repo.log()] == [c.id for c in log]


def test_log_limit(repo: snapvc.Repository) -> None:
    commits = build_history(repo, 6)
    assert [c.id for c in repo.log("main", limit=2)] == [commits[5].id, commits[4].id]
    assert list(repo.log("main", limit=0)) == []
    assert len(list(repo.log("main", limit=100))) == 6


def test_log_where(repo: snapvc.Repository) -> None:
    commits = build_history(repo, 6)
    assert [c.id for c in repo.log("main", where={"agent": "researcher"})] == [commits[5].id, commits[3].id,
                                                                               commits[1].id]
    assert [c.id for c in repo.log("main", where={"step": 2})] == [commits[2].id]
    assert [c.id for c in repo.log("main", where={"usage.tokens": 40})] == [commits[4].id]
    assert [c.id for c in repo.log("main", where={"agent": "writer", "usage.tokens": 40})] == [commits[4].id]
    assert list(repo.log("main", where={"agent": "researcher", "step": 2})) == []
    assert list(repo.log("main", where={"usage.missing": 1})) == []
    assert list(repo.log("main", where={"step.deeper": 1})) == []
    assert list(repo.log("main", where={"step": 2.0})) == []  # 2.0 is not the int 2
    assert list(repo.log("main", where={"step": True})) == []
    assert [c.id for c in repo.log("main", where={"agent": "researcher"}, limit=2)] == [commits[5].id, commits[3].id]
    assert [c.id for c in repo.log("main", where=lambda c: c.metadata["step"] % 3 == 0)] == [commits[3].id,
                                                                                            commits[0].id]


def test_log_of_a_merge_visits_each_commit_once(repo: snapvc.Repository) -> None:
    base = repo.commit({"n": 0}, message="base")
    a = repo.commit({"n": 1}, message="a")
    repo.branch("side", at=base.id)
    b1 = repo.commit({"n": 2}, branch="side", message="b1")
    b2 = repo.commit({"n": 3}, branch="side", message="b2")
    merge = repo.commit({"n": 4}, message="merge", parents=(a.id, b2.id))
    assert merge.generation == 4
    log = list(repo.log("main"))
    assert log[0].id == merge.id
    assert sorted(c.message for c in log) == sorted(["merge", "b2", "b1", "a", "base"])
    assert log[-1].id == base.id
    assert len({c.id for c in log}) == 5
    assert repo.resolve("main^2") == b2.id
    assert repo.resolve("main^1") == a.id
    assert repo.resolve("main^2~1") == b1.id


# -- resolve ----------------------------------------------------------------------------------


def test_resolve(repo: snapvc.Repository) -> None:
    commits = build_history(repo, 4)
    assert repo.resolve("main") == commits[3].id
    assert repo.resolve("HEAD") == commits[3].id
    assert repo.resolve("main~2") == commits[1].id
    assert repo.resolve("main^") == commits[2].id
    assert repo.resolve("main^^") == commits[1].id
    assert repo.resolve("main~3") == commits[0].id
    assert repo.resolve("main~0") == commits[3].id
    assert repo.resolve(commits[1].id) == commits[1].id
    assert repo.resolve(commits[1].id.hex) == commits[1].id
    assert repo.resolve(commits[1].id.hex.upper()) == commits[1].id
    with pytest.raises(UnknownRevisionError):
        repo.resolve("main~4")
    with pytest.raises(snapvc.InvalidRevisionError):
        repo.resolve("main~x")


def unique_prefix(repo: snapvc.Repository, oid: ObjectId) -> str:
    others = [o.hex for o in repo.store.iter_ids() if o != oid]
    for n in range(4, 65):
        prefix = oid.hex[:n]
        if not any(o.startswith(prefix) for o in others):
            return prefix
    raise AssertionError("no unique prefix")


def test_resolve_id_prefixes(repo: snapvc.Repository) -> None:
    commits = build_history(repo, 3)
    for c in commits:
        prefix = unique_prefix(repo, c.id)
        assert repo.resolve(prefix) == c.id
        assert repo.checkout(prefix) == repo.checkout(c.id)
    with pytest.raises(UnknownRevisionError) as info:
        repo.resolve(commits[0].id.hex[:3])  # too short to be a prefix
    assert "4" in str(info.value)


def test_resolve_prefix_of_a_non_commit_object(repo: snapvc.Repository) -> None:
    repo.commit({"doc": "a long document " * 500})
    blob = next(o for o in repo.store.iter_ids() if repo.store.get(o)[0] != COMMIT)
    with pytest.raises(UnknownRevisionError) as info:
        repo.resolve(blob.hex)
    assert "not a commit" in str(info.value)


def test_ambiguous_prefix(repo: snapvc.Repository) -> None:
    # Enough objects that two ids share their first four hex digits.
    by_prefix: dict[str, list[ObjectId]] = {}
    shared = None
    for batch in range(10):
        repo.commit({"docs": [f"document {batch}-{i} " + "x" * 2100 for i in range(300)]}, message=f"batch {batch}")
        by_prefix.clear()
        for oid in repo.store.iter_ids():
            by_prefix.setdefault(oid.hex[:4], []).append(oid)
        shared = next((p for p, ids in by_prefix.items() if len(ids) >= 2), None)
        if shared is not None:
            break
    assert shared is not None
    with pytest.raises(AmbiguousRevisionError) as info:
        repo.resolve(shared)
    assert shared in str(info.value)
    # Given enough digits, each of them is found (and only a commit is a revision).
    for oid in by_prefix[shared]:
        prefix = unique_prefix(repo, oid)
        if repo.store.get(oid)[0] == COMMIT:
            assert repo.resolve(prefix) == oid
        else:
            with pytest.raises(UnknownRevisionError, match="not a commit"):
                repo.resolve(prefix)


def test_unknown_revisions(repo: snapvc.Repository) -> None:
    repo.commit({"a": 1})
    for rev in ("nope", "0000", "ffffffff", "refs/heads/nope", "nope~1"):
        with pytest.raises(UnknownRevisionError):
            repo.resolve(rev)


# -- diff ----------------------------------------------------------------------------------------


def test_diff_is_path_level(repo: snapvc.Repository) -> None:
    repo.commit(chat(10), message="ten")
    state = chat(11)
    state["scratch"]["thought"] = "changed my mind"
    state["scratch"]["new"] = [1, 2]
    repo.commit(state, message="eleven")
    changes = repo.diff("main~1", "main")
    by_path = {c.path: c for c in changes}
    assert set(by_path) == {("messages", 10), ("scratch", "thought"), ("scratch", "new")}
    added = by_path[("messages", 10)]
    assert added.kind == "added" and added.old is None and added.new == state["messages"][10]
    modified = by_path[("scratch", "thought")]
    assert modified.kind == "modified"
    assert modified.old == "after 10 messages" and modified.new == "changed my mind"
    assert by_path[("scratch", "new")].kind == "added" and by_path[("scratch", "new")].new == [1, 2]

    reverse = {c.path: c.kind for c in repo.diff("main", "main~1")}
    assert reverse == {("messages", 10): "removed", ("scratch", "thought"): "modified", ("scratch", "new"): "removed"}
    assert repo.diff("main", "main") == []
    only_scratch = {c.path for c in repo.diff("main~1", "main", paths=[("scratch",)])}
    assert only_scratch == {("scratch", "new"), ("scratch", "thought")}


def test_diff_sees_type_changes(repo: snapvc.Repository) -> None:
    repo.commit({"a": 1, "b": [1, 2], "c": 0.0})
    repo.commit({"a": 1.0, "b": (1, 2), "c": -0.0})
    assert {c.path for c in repo.diff("main~1", "main")} == {("a",), ("b",), ("c",)}


# -- stats ---------------------------------------------------------------------------------------


def test_stats(repo: snapvc.Repository) -> None:
    messages: list[dict[str, Any]] = []
    state = {"messages": messages, "doc": "a shared document " * 1_000}
    for i in range(30):
        messages.append({"role": "user", "content": f"message {i} " + "lorem ipsum " * 30})
        repo.commit(state, message=f"step {i}")
    repo.branch("fork", at="main~5")
    repo.tag("v1")
    stats = repo.stats()
    assert stats.commits == 30
    assert stats.branches == 2
    assert stats.tags == 1
    # Commits are kept by the commit index and counted apart; objects are the store's,
    # as fsck counts them; the bytes of both are stored.
    assert stats.objects == repo.store.sizes().objects
    assert stats.stored_bytes > repo.store.sizes().stored_bytes
    assert sum(stats.objects_by_kind.values()) == stats.objects
    assert "commit" not in stats.objects_by_kind
    # Thirty whole states, each with the document and a growing history, stored once each.
    one_state = len(state["doc"]) + sum(len(m["content"]) for m in messages)
    assert stats.logical_bytes > 15 * one_state
    assert stats.logical_bytes > stats.stored_bytes
    assert stats.dedup_ratio == pytest.approx(stats.logical_bytes / stats.stored_bytes)
    assert stats.dedup_ratio > 5
    assert "30 commits" in str(stats)


def test_commits_are_kept_by_the_commit_index_and_resolve_by_prefix(repo: snapvc.Repository) -> None:
    first = repo.commit({"a": 1}, message="one")
    second = repo.commit({"a": 2}, message="two")
    assert repo.store.has_many([first.id, second.id]) == set()
    assert repo.resolve(second.id.hex[:8]) == second.id
    assert repo.get_commit(first.id).encode() == repo.commits.get(first.id).encode()
    assert repo.stats().commits == 2


def test_stats_of_an_empty_repository(repo: snapvc.Repository) -> None:
    stats = repo.stats()
    assert (stats.objects, stats.commits, stats.branches, stats.tags, stats.stored_bytes) == (0, 0, 0, 0, 0)
    assert stats.dedup_ratio == 0.0


# -- damaged files --------------------------------------------------------------------------------


def flip_stored_byte(path: Path, oid: ObjectId) -> None:
    conn = sqlite3.connect(path)
    (data,) = conn.execute("SELECT data FROM objects WHERE id = ?", (bytes(oid),)).fetchone()
    damaged = bytearray(data)
    damaged[-1] ^= 0x01
    conn.execute("UPDATE objects SET data = ? WHERE id = ?", (bytes(damaged), bytes(oid)))
    conn.commit()
    conn.close()


def test_corrupted_object_is_named_and_other_branches_still_read(tmp_path: Path) -> None:
    path = tmp_path / "damaged.snapvc"
    doc = random.Random(5).randbytes(40_000)
    with snapvc.open(path, format=2) as repo:  # a byte of one object's own frame (format 2: a row each)
        repo.commit({"other": chat(20)}, branch="other")
        before = set(repo.store.iter_ids())
        repo.commit({"doc": doc, "small": {"ok": True}}, branch="main")
        new = [oid for oid in repo.store.iter_ids() if oid not in before]
        victim = next(oid for oid in new if repo.store.get(oid)[0] == BLOB)

    flip_stored_byte(path, victim)

    with snapvc.open(path, create=False) as repo:
        with pytest.raises(CorruptObjectError) as info:
            repo.checkout("main")
        assert info.value.object_id == victim
        assert victim.hex in str(info.value)
        assert repo.checkout("other") == {"other": chat(20)}
        # Parts of main that do not use the damaged object still read.
        assert repo.snapshot("main")["small"]["ok"] is True
        with pytest.raises(CorruptObjectError):
            repo.snapshot("main")["doc"]
        assert [c.id for c in repo.log("main")] == [repo.resolve("main")]


def test_corrupted_commit_object(tmp_path: Path) -> None:
    path = tmp_path / "damaged-commit.snapvc"
    with snapvc.open(path) as repo:
        good = repo.commit({"a": 1}, branch="good")
        bad = repo.commit({"a": 2}, branch="bad")
    conn = sqlite3.connect(path)
    conn.execute("UPDATE commits SET message = 'rewritten' WHERE id = ?", (bytes(bad.id),))
    conn.commit()
    conn.close()
    with snapvc.open(path, create=False) as repo:
        with pytest.raises(CorruptObjectError) as info:
            repo.checkout("bad")
        assert info.value.object_id == bad.id
        assert repo.checkout(good.id) == {"a": 1}


# -- concurrent writers ------------------------------------------------------------------------


class Trigger:
    """A clock that runs ``action`` once, the first time it is read after ``arm()``."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0
        self.action: Callable[[], None] | None = None

    def arm(self, action: Callable[[], None]) -> None:
        self.action = action

    def __call__(self) -> float:
        action, self.action = self.action, None
        if action is not None:
            action()
        self.now += 1.0
        return self.now


def test_commit_loses_a_race_with_another_writer(tmp_path: Path) -> None:
    path = tmp_path / "race.snapvc"
    trigger = Trigger()
    a = snapvc.open(path)
    b = snapvc.open(path, clock=trigger)
    base = a.commit({"n": 0}, message="base")
    won: list[snapvc.Commit] = []
    # B reads the tip, then A commits while B is encoding: B's compare-and-swap must lose.
    trigger.arm(lambda: won.append(a.commit({"n": 1, "by": "a"}, message="a")))
    with pytest.raises(RefConflictError) as info:
        b.commit({"n": 1, "by": "b"}, message="b")
    assert info.value.ref == "refs/heads/main"
    assert info.value.expected == base.id
    assert info.value.actual == won[0].id
    assert b.resolve("main") == won[0].id
    assert b.checkout("main") == {"n": 1, "by": "a"}
    # Nothing B wrote stays behind, on disk or in B's caches.
    lost_tree = Encoder().encode_root({"n": 1, "by": "b"})
    assert b.store.has_many([lost_tree]) == set() and b.store.get_many([lost_tree]) == {}
    # B re-reads and retries: both commits are in history.
    c = b.commit({"n": 2, "by": "b"}, message="b again")
    assert c.parents == (won[0].id,)
    assert [x.message for x in a.log("main")] == ["b again", "a", "base"]
    assert b.checkout("main") == {"n": 2, "by": "b"}
    a.close()
    b.close()


def test_a_lost_race_leaves_nothing_behind_and_the_retry_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "atomic.snapvc"
    trigger = Trigger()
    a = snapvc.open(path)
    b = snapvc.open(path, clock=trigger)
    state = chat(200)
    b.commit(state, message="b first")
    state["messages"].append({"role": "user", "content": "only in the failed attempt " * 40})
    state["scratch"]["thought"] = "a thought of the failed attempt"
    objects = a.store.sizes().objects
    trigger.arm(lambda: a.commit({"by": "a"}, branch="main", message="a"))
    with pytest.raises(RefConflictError):
        b.commit(state, message="b lost")
    # The failed attempt wrote nothing: its objects went with the rolled-back transaction.
    assert a.store.sizes().objects == objects + 1  # A's tree (its commit is in the commit index)
    state["messages"].append({"role": "assistant", "content": "after the retry"})
    c = b.commit(state, message="b retried")
    a.close()
    b.close()
    with snapvc.open(path, create=False) as fresh:
        assert fresh.checkout("main") == state
        assert [x.message for x in fresh.log("main")] == ["b retried", "a", "b first"]
        assert fresh.resolve("main") == c.id
        # Every stored object reads back and verifies, delta bases included.
        ids = list(fresh.store.iter_ids())
        assert len(fresh.store.get_many(ids)) == len(ids)


def test_commit_on_a_stale_parent_never_drops_the_other_commit(tmp_path: Path) -> None:
    path = tmp_path / "stale.snapvc"
    a = snapvc.open(path)
    b = snapvc.open(path)
    base = a.commit({"n": 0}, message="base")
    seen_by_b = b.resolve("main")  # B reads the tip and works from it...
    state = b.checkout(seen_by_b)
    from_a = a.commit({"n": 1, "by": "a"}, message="a")  # ...while A moves the branch
    state["by"] = "b"
    try:
        b.commit(state, branch="main", message="b", parents=(seen_by_b,))
    except RefConflictError:
        assert b.resolve("main") == from_a.id
    else:
        assert from_a.id in [c.id for c in b.log("main")], "A's commit is no longer in main's history"
    assert seen_by_b == base.id
    a.close()
    b.close()


WRITER = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, {root!r})
    import snapvc
    from snapvc.backends.open import open_backend

    path, who, other, n, meet, mode = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
    waiting = [True]

    def clock():
        # Read by the first commit between reading the tip and moving the branch: both
        # writers wait here for each other, so both build on the same tip and one of
        # them must lose the race (and retry); they race freely from then on.
        if waiting[0]:
            waiting[0] = False
            open(f"{{meet}}.{{who}}", "w").close()
            deadline = time.monotonic() + 60
            while not os.path.exists(f"{{meet}}.{{other}}"):
                if time.monotonic() > deadline:
                    sys.exit(f"{{who}}: the other writer never reached its first commit")
                time.sleep(0.001)
        return time.time()

    repo = snapvc.Repository(open_backend(path), clock=clock)  # the clock of the commits alone
    conflicts = 0
    for i in range(n):
        while True:
            tip = repo.resolve("main")
            if mode == "read-modify-write":
                state = repo.checkout(tip)
                state["entries"].append(f"{{who}}-{{i}}")
                time.sleep(0.003)  # an agent step: the work between reading and committing
                parents = (tip,)
            else:
                state = {{"who": who, "i": i}}
                parents = None
            try:
                repo.commit(state, branch="main", message=f"{{who}} {{i}}", parents=parents)
                break
            except snapvc.RefConflictError:
                conflicts += 1
    repo.close()
    print(conflicts)
    """
)


@pytest.mark.parametrize("mode", ["plain", "read-modify-write"])
def test_two_processes_racing_on_one_branch(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "shared.snapvc"
    n = 30
    with snapvc.open(path) as repo:
        repo.commit({"entries": []}, message="initial")
    script = WRITER.format(root=str(ROOT))
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(path), who, other, str(n), str(tmp_path / "meet"), mode],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for who, other in (("p", "q"), ("q", "p"))
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, outputs):
        assert p.returncode == 0, err
    # Both first commits built on the initial commit: one lost its race, read again and
    # retried (the history below holds every commit of both).
    conflicts = sum(int(out.strip()) for out, _ in outputs)
    assert conflicts >= 1

    with snapvc.open(path, create=False) as repo:
        log = list(repo.log("main"))
        assert len(log) == 1 + 2 * n
        for newer, older in zip(log, log[1:]):
            assert newer.parents == (older.id,)
            assert newer.generation == older.generation + 1
        assert log[-1].message == "initial" and log[-1].parents == ()
        messages = [c.message for c in log[:-1]]
        assert sorted(messages) == sorted([f"{who} {i}" for who in "pq" for i in range(n)])
        for who in "pq":  # each writer's commits in its own order
            mine = [m for m in reversed(messages) if m.startswith(who)]
            assert mine == [f"{who} {i}" for i in range(n)]
        assert len(repo.reflog("main")) == 1 + 2 * n
        if mode == "read-modify-write":
            entries = repo.checkout("main")["entries"]
            assert sorted(entries) == sorted(f"{who}-{i}" for who in "pq" for i in range(n))


def test_log_and_where_read_no_object(tmp_path: Path) -> None:
    path = tmp_path / "index.snapvc"
    with snapvc.open(path) as repo:
        for i in range(30):
            repo.commit({"step": i, "notes": "x" * 5000}, metadata={"step": i, "agent": "a" if i % 3 else "b"})
    with snapvc.open(path, create=False) as repo:
        reads: list[int] = []
        inner_get_many = repo.store.get_many
        repo.store.get_many = lambda ids: reads.append(len(list(ids))) or inner_get_many(ids)  # type: ignore[method-assign]
        picked = list(repo.log("main", where={"agent": "b"}))
        assert [c.metadata["step"] for c in picked] == list(range(27, -1, -3))
        assert repo.resolve("main~29") == list(repo.log("main"))[-1].id
        assert reads == [], "log, where= and rev walks are answered from the commit index"


def test_checkout_writes_nothing(tmp_path: Path) -> None:
    with snapvc.open(tmp_path / "h.snapvc") as repo:
        repo.commit({"n": 1})
        repo.branch("other")
        conn = repo.backend.file.conn  # type: ignore[union-attr]
        before = conn.total_changes
        assert repo.checkout("main") == {"n": 1} and repo.checkout("main~0") == {"n": 1}
        assert repo.checkout("other") == {"n": 1} and repo.snapshot("other")["n"] == 1
        assert conn.total_changes == before, "a checkout wrote to the file"
        assert repo.head == "main"
        repo.commit({"n": 2}, branch="other")
        assert repo.checkout("other") == {"n": 2} and repo.checkout("main") == {"n": 1}
