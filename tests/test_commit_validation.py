"""A commit's fields are checked where it is made, and a ref moves only to a commit that
is stored: through the API on every backend (reopened), the commit index, a store that
skips a write, sync from memory and S3 into an embedded file, and the command."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgpack
import pytest

import snapvc
from snapvc.errors import (
    CorruptObjectError,
    InvalidCommitError,
    ObjectNotFoundError,
    RepositoryError,
    UnknownRevisionError,
)
from snapvc.ids import ObjectId
from snapvc.objects import COMMIT, Commit, object_bytes
from snapvc.backends.sqlite.commit_index import SqliteCommitIndex

MAIN = "refs/heads/main"
TREE = ObjectId.of(b"a tree")
PARENT = ObjectId.of(b"a parent")


def make(**fields: Any) -> Commit:
    """``Commit.create`` with valid fields, but those given."""
    args: dict[str, Any] = {"tree": TREE, "parents": (), "author": "ann", "timestamp_us": 0, "message": "m",
                            "metadata": None, "generation": 1, **fields}
    return Commit.create(**args)[0]


def legacy_commit(repo: snapvc.Repository, state: dict[str, Any], *, message: Any = "old",
                  generation: int | None = None) -> ObjectId:
    """A commit on main as a snapvc before field checks could store it: its fields packed
    as given, written below ``Commit.create`` (a message of None went through so)."""
    tree = repo.commit_tree(state, message="carries the tree").tree
    tip = repo.refs.get(MAIN)
    parents = [bytes(tip)] if tip is not None else []
    if generation is None:
        generation = 1 + (repo.get_commit(tip).generation if tip is not None else 0)
    payload = msgpack.packb([bytes(tree), parents, "old", 1_700_000_000_000_000, message, b"{}", generation],
                            use_bin_type=True)
    oid, data = object_bytes(COMMIT, payload)
    commit = Commit.decode(oid, data[1:])
    with repo.backend.transaction():
        repo.commits.add(commit)
        assert repo.refs.compare_and_swap(MAIN, tip, oid, "commit: as an older snapvc did")
    return oid


# -- made through the API ---------------------------------------------------------------------


@pytest.mark.parametrize("where", ["file", "memory"])
def test_a_commit_with_a_message_of_none_is_refused_and_nothing_moves(where: str, tmp_path: Path) -> None:
    location = str(tmp_path / "r.snapvc") if where == "file" else "memory://"
    repo = snapvc.open(location)
    first = repo.commit({"a": 1}, message="first")
    with pytest.raises(InvalidCommitError) as info:
        repo.commit({"a": 2}, message=None)  # type: ignore[arg-type]
    assert info.value.field == "message" and isinstance(info.value, TypeError)
    assert str(info.value) == 'commit message must be a str, got None (message="" makes a commit without one)'
    assert repo.branches() == {"main": first.id}
    # Every message a str can be is kept as it is, through a reopen.
    messages = ["", "a\x00b", "subject\n\nbody: héllo 🎉"]
    for message in messages:
        repo.commit({"a": message}, message=message)
    if where == "file":
        repo.close()
        repo = snapvc.open(location)
    assert [c.message for c in repo.log("main")] == [*reversed(messages), "first"]
    assert repo.checkout("main") == {"a": messages[-1]}
    repo.close()


@pytest.mark.parametrize(("fields", "field", "reason"), [
    ({"tree": b"\0" * 32}, "tree", "must be an ObjectId, got bytes"),
    ({"parents": "abc"}, "parents", "must be a tuple of ObjectIds, got str"),
    ({"parents": (PARENT, "x"), "generation": 2}, "parents", "[1] must be an ObjectId, got str"),
    ({"parents": (PARENT, PARENT), "generation": 2}, "parents", "name the same commit twice"),
    ({"author": None}, "author", "must be a str, got None"),
    ({"author": "\udc80x"}, "author", "is not valid Unicode text: a lone surrogate '\\udc80' at index 0"),
    ({"timestamp_us": 1.5}, "timestamp_us", "must be an int (microseconds since 1970, UTC), got float"),
    ({"timestamp_us": True}, "timestamp_us", "must be an int (microseconds since 1970, UTC), got bool"),
    ({"timestamp_us": 1 << 70}, "timestamp_us", f"{1 << 70} is outside the years 1 to 9999"),
    ({"message": b"bytes"}, "message", "must be a str, got bytes"),
    ({"message": 3}, "message", "must be a str, got int"),
    ({"message": "ok\ud800"}, "message", "is not valid Unicode text: a lone surrogate '\\ud800' at index 2"),
    ({"metadata": ["a"]}, "metadata", "must be a dict, got list"),
    ({"metadata": {"x": float("nan")}}, "metadata", "must be plain JSON"),
    ({"metadata": {1: "a"}}, "metadata", "must be JSON (str keys"),
    ({"generation": 0}, "generation", "is 0, must be 1 for a root commit"),
    ({"generation": 2}, "generation", "is 2, must be 1 for a root commit"),
    ({"parents": (PARENT,), "generation": 1}, "generation",
     "is 1, must be 1 + the largest generation of its parents, at least 2"),
    ({"generation": True}, "generation", "must be an int, got bool"),
])
def test_every_field_is_checked_where_a_commit_is_made(fields: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(InvalidCommitError) as info:
        make(**fields)
    assert info.value.field == field and info.value.commit is None
    assert str(info.value).startswith(f"commit {field} {reason}")


def test_the_edges_of_each_field_are_commits() -> None:
    low = make(timestamp_us=-62_135_596_800 * 1_000_000, message="", author="")
    high = make(timestamp_us=253_402_300_800 * 1_000_000 - 1, parents=[PARENT], generation=(1 << 63) - 1)
    assert (low.time.year, high.time.year) == (1, 9999)
    for commit in (low, high):
        commit.check()
        assert ObjectId.of(commit.encode()) == commit.id


def test_repository_arguments_are_checked_as_fields(tmp_path: Path) -> None:
    with snapvc.open(tmp_path / "r.snapvc") as repo:
        for kwargs, field in [({"author": 7}, "author"), ({"metadata": {"t": (1, 2)}}, "metadata"),
                              ({"date": "2024-01-01"}, "date")]:
            with pytest.raises(InvalidCommitError) as info:
                repo.commit({"a": 1}, **kwargs)
            assert info.value.field == field
        assert repo.branches() == {}


def test_a_commit_received_built_is_checked_naming_it() -> None:
    good = make()
    bad = Commit(good.id, good.tree, (), "ann", 0, None, 1, b"{}")  # type: ignore[arg-type]
    with pytest.raises(InvalidCommitError, match=f"^commit {good.id}: message must be a str, got None$"):
        bad.check()
    for meta, reason in [(b"[1]", "must be a JSON object, got list"), (b"{", "is not JSON"),
                         ("{}", "must be JSON text as bytes, got str")]:
        with pytest.raises(InvalidCommitError, match=reason):
            Commit(good.id, good.tree, (), "ann", 0, "m", 1, meta).check()  # type: ignore[arg-type]


# -- the commit index and the ref move --------------------------------------------------------


def test_the_commit_index_raises_on_a_row_it_cannot_hold_instead_of_skipping_it(tmp_path: Path) -> None:
    with snapvc.open(tmp_path / "r.snapvc") as repo:
        index = repo.commits
        assert isinstance(index, SqliteCommitIndex)
        good = make()
        bad = Commit(ObjectId.of(b"x"), TREE, (), "ann", 0, None, 1, b"{}")  # type: ignore[arg-type]
        with pytest.raises(RepositoryError, match="NOT NULL constraint failed: commits.message"):
            index.add(bad)
        index.add(good)
        index.add(good)  # the same id again: the same fields, kept once
        assert index.ids() == [good.id]


def skip_inserts(path: Path, table: str) -> None:
    """Make SQLite drop every new row of ``table`` without an error, as ``INSERT OR
    IGNORE`` did with a row it could not hold."""
    with sqlite3.connect(path) as conn:
        conn.execute(f"CREATE TRIGGER skip_{table} BEFORE INSERT ON {table} BEGIN SELECT RAISE(IGNORE); END")
    conn.close()


def allow_inserts(path: Path, table: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(f"DROP TRIGGER skip_{table}")
    conn.close()


@pytest.mark.parametrize(("table", "error", "names"), [
    ("commits", UnknownRevisionError, "is not stored in"),
    ("packs", ObjectNotFoundError, "the tree of commit"),
])
def test_a_branch_never_moves_to_a_commit_whose_write_was_skipped(table: str, error: type[Exception], names: str,
                                                                   tmp_path: Path) -> None:
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo:
        first = repo.commit({"a": 1}, message="first")
    skip_inserts(path, table)
    with snapvc.open(path) as repo:
        with pytest.raises(error, match=f"{names}.*; refs/heads/main stays where it was"):
            repo.commit({"a": 2, "b": "new"}, message="skipped")
        with pytest.raises(error):  # a commit on no ref is checked as well
            repo.commit_tree({"c": 3})
        assert repo.branches() == {"main": first.id}
    allow_inserts(path, table)
    with snapvc.open(path) as repo:
        assert repo.checkout("main") == {"a": 1}
        made = repo.commit({"a": 2}, message="second")
        assert [c.message for c in repo.log()] == ["second", "first"] and made.parents == (first.id,)


# -- sync: push and clone into an embedded file -----------------------------------------------


def test_push_and_clone_from_memory_keep_every_commit(tmp_path: Path) -> None:
    src = snapvc.open("memory://")
    made = [src.commit({"step": i}, message="" if i % 2 else f"step {i}") for i in range(4)]
    src.push(str(tmp_path / "pushed.snapvc"))
    snapvc.clone(src, str(tmp_path / "cloned.snapvc")).close()
    for name in ("pushed.snapvc", "cloned.snapvc"):
        with snapvc.open(tmp_path / name) as dst:
            assert [c.id for c in dst.log("main")] == [c.id for c in reversed(made)]
            assert [c.message for c in dst.log("main")] == ["", "step 2", "", "step 0"]
            assert dst.checkout("main") == {"step": 3}


@pytest.mark.parametrize(("bad", "field"), [({"message": None}, "message"), ({"generation": 5}, "generation")])
def test_push_and_clone_refuse_a_commit_the_file_cannot_keep_and_move_nothing(bad: dict[str, Any], field: str,
                                                                              tmp_path: Path) -> None:
    src = snapvc.open("memory://")
    src.commit({"a": 1}, message="first")
    old = legacy_commit(src, {"a": 2}, **bad)
    assert src.checkout("main") == {"a": 2}  # readable where it is
    dst = tmp_path / "pushed.snapvc"
    with pytest.raises(InvalidCommitError) as info:
        src.push(str(dst))
    assert info.value.field == field and info.value.commit == old
    assert "cannot keep it as it is, so nothing was copied" in str(info.value)
    with snapvc.open(dst) as pushed:
        assert pushed.branches() == {} and pushed.commits.count() == 0
    with pytest.raises(InvalidCommitError, match=str(old)):
        snapvc.clone(src, str(tmp_path / "cloned.snapvc"))
    with snapvc.open(tmp_path / "cloned.snapvc") as cloned:
        assert cloned.branches() == {}
    assert src.checkout("main") == {"a": 2} and src.resolve("main") == old


def test_a_push_does_not_spread_a_damaged_commit_row(tmp_path: Path) -> None:
    path = tmp_path / "src.snapvc"
    with snapvc.open(path) as src:
        first = src.commit({"a": 1}, message="first")
        second = src.commit({"a": 2}, message="second")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE commits SET message = 'rewritten' WHERE id = ?", (bytes(second.id),))
    conn.close()
    with snapvc.open(path) as src:
        with pytest.raises(CorruptObjectError, match=f"{second.id}.*do not hash to its id"):
            src.push(str(tmp_path / "dst.snapvc"))
    with snapvc.open(tmp_path / "dst.snapvc") as dst:
        assert dst.branches() == {} and first.id not in dst.commits.ids()


def test_a_push_whose_commit_rows_were_skipped_moves_no_ref(tmp_path: Path) -> None:
    src = snapvc.open("memory://")
    src.commit({"a": 1}, message="first")
    path = tmp_path / "dst.snapvc"
    snapvc.open(path).close()
    skip_inserts(path, "commits")
    with pytest.raises(UnknownRevisionError, match="refs/heads/main stays where it was"):
        src.push(str(path))
    allow_inserts(path, "commits")
    with snapvc.open(path) as dst:
        assert dst.branches() == {}
    src.push(str(path))
    with snapvc.open(path) as dst:
        assert dst.checkout("main") == {"a": 1}


def test_s3_commits_are_checked_and_pushed_and_cloned_whole(s3_url: str, tmp_path: Path) -> None:
    with snapvc.open(s3_url) as src:
        with pytest.raises(InvalidCommitError, match="message must be a str, got None"):
            src.commit({"a": 0}, message=None)  # type: ignore[arg-type]
        made = [src.commit({"step": i, "doc": "x" * 5000 * i}, message=f"step {i}") for i in range(3)]
        src.push(str(tmp_path / "pushed.snapvc"))
    snapvc.clone(s3_url, str(tmp_path / "cloned.snapvc")).close()
    for name in ("pushed.snapvc", "cloned.snapvc"):
        with snapvc.open(tmp_path / name) as dst:
            assert [c.id for c in dst.log("main")] == [c.id for c in reversed(made)]
            assert dst.checkout("main~1") == {"step": 1, "doc": "x" * 5000}
    with snapvc.open(s3_url) as src:
        old = legacy_commit(src, {"step": 3}, message=None)
    with snapvc.open(s3_url) as src:  # a client that reads it from the packs
        assert src.checkout("main") == {"step": 3} and src.get_commit(old).message is None
        with pytest.raises(InvalidCommitError, match=f"commit {old}: message must be a str, got None"):
            src.push(str(tmp_path / "pushed.snapvc"))
    with pytest.raises(InvalidCommitError, match=str(old)):
        snapvc.clone(s3_url, str(tmp_path / "cloned-again.snapvc"))
    with snapvc.open(tmp_path / "pushed.snapvc") as dst:
        assert dst.resolve("main") == made[-1].id and dst.checkout("main")["step"] == 2


# -- the command ------------------------------------------------------------------------------


def snapvc_command(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SNAPVC_REPO"}
    env["SNAPVC_CEILING_DIRECTORIES"] = str(cwd.parent)
    return subprocess.run([sys.executable, "-m", "snapvc", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60, env=env, input=stdin)


@pytest.mark.slow
def test_the_command_without_a_message_says_what_changed_and_every_command_works_after(tmp_path: Path) -> None:
    assert snapvc_command("init", "r.snapvc", cwd=tmp_path).returncode == 0
    states = ['{"a": 2, "messages": []}', '{"a": 3, "messages": ["hi"], "b": 1, "c": 2, "d": 3}',
              '{"a": 3, "messages": ["hi"], "b": 1, "c": 2, "d": 3}']
    for state in states:
        done = snapvc_command("commit", "--repo", "r.snapvc", stdin=state, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    log = snapvc_command("log", "--oneline", "--repo", "r.snapvc", cwd=tmp_path)
    assert log.returncode == 0, log.stderr
    assert [line.split(" ", 1)[1].removeprefix("(HEAD -> main) ") for line in log.stdout.splitlines()] == [
        "No change to the state", "Update a, b, c and 2 more keys", "Initial state: a, messages"]
    shown = snapvc_command("checkout", "main", "--repo", "r.snapvc", cwd=tmp_path)
    assert shown.returncode == 0 and '"d":3' in shown.stdout.replace(" ", "")
    empty = snapvc_command("commit", "-m", "", "--repo", "r.snapvc", stdin="{}", cwd=tmp_path)
    assert empty.returncode == 0, empty.stderr
    with snapvc.open(tmp_path / "r.snapvc") as repo:
        assert [c.message for c in repo.log()][:2] == ["", "No change to the state"]
