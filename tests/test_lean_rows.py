"""Format 3 files keep commits and the reflog in lean rows (row-number links, a ref's
name as a number, an ``old`` and a commit's reason left out): every read gives back
exactly what a format 2 file gives for the same writes, also after entries expire,
commits are deleted, and after a format 2 file's tables are upgraded."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from snapvc.backends.sqlite import commit_index, refs
from snapvc.backends.sqlite.backend import SqliteBackend
from snapvc.backends.sqlite.commit_index import SqliteCommitIndex
from snapvc.backends.sqlite.file import SqliteFile
from snapvc.backends.sqlite.refs import SqliteRefStore
from snapvc.ids import ObjectId
from snapvc.objects import Commit
from snapvc.refs.base import ReflogEntry

MAIN, SIDE, TAG = "refs/heads/main", "refs/heads/side", "refs/tags/v1"


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.123456

    def __call__(self) -> float:
        self.now += 1.000001
        return self.now


def _commit(n: int, parents: tuple[ObjectId, ...], message: str, metadata: dict[str, object] | None,
            generation: int = 1) -> Commit:
    commit, _ = Commit.create(tree=ObjectId(bytes([n]) * 32), parents=parents, author=f"agent-{n % 2}",
                              timestamp_us=1_700_000_000_000_000 + n, message=message, metadata=metadata,
                              generation=generation)
    return commit


# Messages and metadata whose reasons and msgpack forms are edge cases: no message, more
# lines, a separator str.splitlines knows, a float, unicode, nested values, big numbers.
MESSAGES = ["step 0", "", "two\nlines", "form\x0cfeed", "ünïcode ✓", "step 5", "step 6"]
METADATA: list[dict[str, object] | None] = [
    {"step": 0}, None, {"f": 0.1, "g": 1e300}, {"nested": {"b": [1, "x", None, True]}, "a": "é"},
    {"big": 2**63 + 5}, {"neg": -(2**40)}, {"s": "\u2028"},
]


def _history(index: SqliteCommitIndex, store: SqliteRefStore) -> list[Commit]:
    """The same writes on any file: commits on main (each with a reflog entry as
    ``Repository.commit`` writes it), a merge, a reset, a tag, a side branch deleted, a
    detached HEAD made symbolic again, a commit the index gets after its child."""
    commits: list[Commit] = []
    for n, (message, metadata) in enumerate(zip(MESSAGES, METADATA, strict=True)):
        parents: tuple[ObjectId, ...] = (commits[-1].id,) if commits else ()
        if n == 4:  # a merge of main and an unindexed commit
            parents = (commits[-1].id, _commit(90, (), "elsewhere", None).id)
        commit = _commit(n, parents, message, metadata, generation=1 + n)
        index.add(commit)
        store.compare_and_swap(MAIN, parents[0] if parents else None, commit.id, commit_reason(message))
        commits.append(commit)
    store.compare_and_swap(MAIN, commits[-1].id, commits[2].id, "reset: moving to main~4")
    store.compare_and_swap(TAG, None, commits[3].id, "tag: created")
    store.compare_and_swap(SIDE, None, commits[1].id, "branch: created")
    store.compare_and_swap(SIDE, commits[1].id, ObjectId(b"\x77" * 32), "a commit the index does not hold")
    store.compare_and_swap(SIDE, ObjectId(b"\x77" * 32), None, "branch: deleted")
    store.compare_and_swap("HEAD", None, commits[0].id, "checkout: detached")
    store.set_symbolic("HEAD", MAIN)
    store.compare_and_swap(MAIN, commits[2].id, commits[5].id, commit_reason("not what main's new commit says"))
    late_parent = _commit(50, (), "late parent", {"late": True})
    child = _commit(51, (late_parent.id,), "child first", None, generation=2)
    index.add(child)
    index.add(late_parent)
    commits += [late_parent, child]
    return commits


def commit_reason(message: str) -> str:
    return f"commit: {message.splitlines()[0] if message else '(no message)'}"


def _everything(index: SqliteCommitIndex, store: SqliteRefStore, commits: list[Commit]) -> dict[str, object]:
    names = store.reflog_names()
    return {
        "reflogs": {name: store.reflog(name) for name in names},
        "limited": {name: [store.reflog(name, limit) for limit in (1, 2, 3)] for name in names},
        "refs": store.list(""),
        "commits": [index.get(c.id) for c in commits],
        "chains": [index.first_parent_chain(c.id, 100) for c in commits],
        "ids": sorted(index.ids()),
        "prefix": index.ids_with_prefix(commits[0].id.hex[:3]),
        "count": index.count(),
    }


def _open(path: Path, format: int, clock: Clock) -> tuple[SqliteFile, SqliteCommitIndex, SqliteRefStore]:
    file = SqliteFile(path, format=format)
    # In the order SqliteBackend makes them.
    store = SqliteRefStore(file, clock)
    return file, SqliteCommitIndex(file, clock), store


def test_format_3_reads_back_what_format_2_does(tmp_path: Path) -> None:
    results, files = [], []
    for fmt in (2, 3):
        file, index, store = _open(tmp_path / f"f{fmt}.snapvc", fmt, Clock())
        assert (file.format >= 3) == (fmt == 3)  # a format 2 file starts at 1 (no dictionary yet)
        commits = _history(index, store)
        results.append(_everything(index, store, commits))
        files.append(file)
    assert results[0] == results[1]
    reflog = results[1]["reflogs"]
    assert isinstance(reflog, dict) and [e.reason for e in reflog[MAIN]][-3:] == [
        "commit: two", "commit: (no message)", "commit: step 0"]
    assert all(c is not None and c.metadata_json == Commit.canonical_metadata(m)
               for c, m in zip(results[1]["commits"], METADATA, strict=False))  # type: ignore[call-overload]
    lean = files[1].conn
    # The lean rows are lean: most reasons and olds left out, commits linked by row number.
    left_out = lean.execute("SELECT count(*) FROM reflog WHERE reason IS NULL AND old IS NULL").fetchone()[0]
    assert left_out == len(MESSAGES)  # every commit made on main
    assert lean.execute("SELECT count(*) FROM reflog WHERE typeof(new) = 'integer'").fetchone()[0] >= len(MESSAGES)
    assert lean.execute("SELECT typeof(metadata) FROM commits WHERE metadata = X'81a47374657000'").fetchall() == [
        ("blob",)]
    for file in files:
        file.close()


def test_expiring_and_deleting_keep_every_value_of_the_entries_left(tmp_path: Path) -> None:
    results = []
    for fmt in (2, 3):
        clock = Clock()
        file, index, store = _open(tmp_path / f"f{fmt}.snapvc", fmt, clock)
        commits = _history(index, store)
        # Entries before the third one of main go: the one kept first had its old left out.
        third = store.reflog(MAIN)[-3].time
        assert store.expire_reflog(third, MAIN) == 2
        # An entry in the middle goes (a clock that went back): the next keeps its old.
        ref = "(SELECT n FROM ref_names WHERE name = 'refs/heads/main')" if fmt == 3 else "'refs/heads/main'"
        file.conn.execute(f"UPDATE reflog SET time = 5 WHERE ref = {ref} AND seq = "
                          f"(SELECT seq FROM reflog WHERE ref = {ref} ORDER BY seq DESC LIMIT 1 OFFSET 1)")
        assert store.expire_reflog(6) == 1
        # gc deletes commits main's reflog and children link to.
        assert index.delete_many([commits[2].id, commits[3].id, commits[5].id, commits[7].id]) == 4
        results.append(_everything(index, store, [commits[i] for i in (0, 1, 4, 6, 8)]))
        file.close()
    assert results[0] == results[1]
    main = results[1]["reflogs"][MAIN]  # type: ignore[index]
    assert any(e.reason == "commit: ünïcode ✓" for e in main)  # written out before its commit went


def test_upgrade_to_lean_keeps_every_row(tmp_path: Path) -> None:
    path = tmp_path / "old.snapvc"
    file, index, store = _open(path, 2, Clock())
    commits = _history(index, store)
    before = _everything(index, store, commits)
    with file.transaction():
        refs.upgrade_to_lean(file)  # upgrades the commit index first
        commit_index.upgrade_to_lean(file)  # a second call changes nothing
        file.set_meta("format", "3")
    file.close()
    file = SqliteFile(path)
    assert file.format == 3
    store, index = SqliteRefStore(file, Clock()), SqliteCommitIndex(file)
    assert _everything(index, store, commits) == before
    tables = {name for name, in file.conn.execute("SELECT name FROM sqlite_master")}
    assert {"ref_names", "commits_id"} <= tables and not {"reflog_ref_seq", "commits_before_lean"} & tables
    # And the upgraded file goes on: a new commit links to its parent's row.
    more = _commit(60, (commits[2].id,), "after", None, generation=4)
    index.add(more)
    assert store.compare_and_swap(MAIN, commits[5].id, more.id, "commit: after")
    assert store.reflog(MAIN, 1) == [ReflogEntry(MAIN, commits[5].id, more.id, store.reflog(MAIN, 1)[0].time,
                                                 "commit: after")]
    assert index.first_parent_chain(more.id, 10)[1] == index.get(commits[2].id)
    assert file.conn.execute("SELECT typeof(parent) FROM commits WHERE id = ?", (more.id,)).fetchone() == ("integer",)
    file.close()


def test_upgrade_keeps_a_damaged_row_damaged(tmp_path: Path) -> None:
    path = tmp_path / "old.snapvc"
    file, index, store = _open(path, 2, Clock())
    commits = _history(index, store)
    file.conn.execute("UPDATE commits SET author = X'07' WHERE id = ?", (commits[1].id,))
    file.conn.execute("UPDATE reflog SET time = 'noon' WHERE seq = 2")
    with file.transaction():
        refs.upgrade_to_lean(file)
    file.format = 3
    store, index = SqliteRefStore(file, Clock()), SqliteCommitIndex(file)
    with pytest.raises(Exception, match="author is 1 bytes, not text"):
        index.get(commits[1].id)
    with pytest.raises(Exception, match=r"refs/heads/main@\{\d+\}: its time is text 'noon'"):
        store.reflog(MAIN)
    file.close()


def test_a_repository_at_format_3_uses_lean_rows(tmp_path: Path) -> None:
    file = SqliteFile(tmp_path / "new.snapvc")
    backend = SqliteBackend(str(tmp_path / "new.snapvc"), file)
    columns = {row[1] for row in file.conn.execute("PRAGMA table_info(reflog)")}
    assert columns == {"ref", "seq", "old", "new", "time", "reason"}
    assert {row[1] for row in file.conn.execute("PRAGMA table_info(commits)")} >= {"n", "parent", "more_parents"}
    backend.close()
    conn = sqlite3.connect(tmp_path / "new.snapvc")
    assert conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'reflog_ref_seq'").fetchone() is None
    conn.close()
