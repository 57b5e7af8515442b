"""Damaged repository files: every value a read takes from the file may be of the wrong
type or size, or loop back on itself. fsck names and counts each such damage (never a
raw Python error, never "no problems"), gc refuses to sweep naming it, and every other
read raises snapvc's own error naming the file and the row, ref, commit or object.

The damage is written with sqlite3 directly, as a bad tool or a hand edit would."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import snapvc
from snapvc.ids import ObjectId
from snapvc.store.codec import CODEC_ZSTD_DELTA, MAX_DELTA_CHAIN, _varint
from tests.test_cli import run

DOC = "".join(f"Paragraph {i}: what the agent found about source {i % 7}.\n" for i in range(200))


def _make(path: Path, steps: int = 3, format: int = 3) -> None:
    """A small repository; ``format=2`` where a test damages format 2's frames or rows
    (table ``objects``: delta frames, dictionaries)."""
    with snapvc.open(path, format=format) as repo:
        state: dict[str, Any] = {"doc": DOC, "notes": "n" * 3000, "messages": []}
        for i in range(steps):
            state["messages"].append({"role": "user", "content": f"question {i} " * 40})
            repo.commit(state, message=f"step {i}")


def _sql(path: Path, statement: str, *args: object) -> None:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(statement, args)
    conn.close()


def _gc_refuses(path: Path, *names: str) -> None:
    """gc (a dry run too) stops before deleting anything, naming the damage; nothing is deleted."""
    conn = sqlite3.connect(path)
    # The objects' rows: table objects (formats 1, 2) or the packs and their ids (format 3).
    count = ("SELECT count(*) FROM objects" if conn.execute(
        "SELECT 1 FROM sqlite_master WHERE name = 'objects'").fetchone() else
        "SELECT coalesce(sum(length(ids)), 0) FROM packs")
    try:
        before: object = conn.execute(count).fetchone()[0]
    except sqlite3.DatabaseError:  # the objects' own table is the damage: then the file must not change at all
        count = ""
        before = path.read_bytes()
    conn.close()
    for dry_run in (True, False):
        with snapvc.open(path) as repo, pytest.raises(snapvc.RepositoryError) as err:
            repo.gc(grace=0, reflog_expiry=0, dry_run=dry_run)
        assert "gc stopped before deleting anything" in str(err.value)
        for name in names:
            assert name in str(err.value)
    conn = sqlite3.connect(path)
    assert (conn.execute(count).fetchone()[0] if count else path.read_bytes()) == before
    conn.close()


# -- typed values: the user's code fails, not the data -------------------------------------------------


class Brittle:
    """A registered type whose ``from_fields`` fails (as a class changed since it stored values may)."""

    def __init__(self, value: object) -> None:
        self.value = value


def _no_rebuild(fields: dict[str, Any]) -> Brittle:
    raise ValueError("Brittle wants a 'version' field")


snapvc.register_type(Brittle, lambda b: {"value": b.value}, _no_rebuild, name="tests.damaged:Brittle")


@pytest.mark.parametrize("value", ["small", "large " * 2000], ids=["inline", "own-object"])
def test_a_type_whose_from_fields_raises_is_named_not_blamed_on_the_stored_data(tmp_path: Path, value: str) -> None:
    with snapvc.open(tmp_path / "typed.snapvc") as repo:
        repo.commit({"v": Brittle(value), "others": [Brittle(value)]})
        with pytest.raises(snapvc.TypeAdapterError) as err:
            repo.checkout("main")
        assert not isinstance(err.value, snapvc.CorruptObjectError)
        assert "'tests.damaged:Brittle'" in str(err.value) and f"{__name__}.Brittle" in str(err.value)
        assert "Brittle wants a 'version' field" in str(err.value) and err.value.cls is Brittle
        assert repo.fsck().ok  # the stored data is sound


@dataclasses.dataclass
class Note:
    text: str


@pytest.mark.slow
def test_fsck_gc_and_clone_need_no_user_classes(tmp_path: Path) -> None:
    """The command line does not import the module that defines a stored dataclass: walks
    of the object graph read nodes' children, and never rebuild typed values."""
    with snapvc.open(tmp_path / "notes.snapvc") as repo:
        repo.commit({"note": Note("short"), "many": [Note(f"note {i} " * 20) for i in range(200)]})
        state = repo.checkout("main")
    done = run("fsck", "--repo", "notes.snapvc", cwd=tmp_path)
    assert done.returncode == 0 and "no problems" in done.stdout, done.stdout + done.stderr
    done = run("gc", "--repo", "notes.snapvc", "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    done = run("clone", "notes.snapvc", "copy.snapvc", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with snapvc.open(tmp_path / "copy.snapvc") as copy:
        assert copy.checkout("main") == state


# -- delta frames that loop -----------------------------------------------------------------------


def _delta_on(base: bytes, size: int = 5000) -> bytes:
    """A delta frame's header naming ``base`` (depth 1), and a body that is never reached."""
    return bytes((CODEC_ZSTD_DELTA,)) + _varint(size) + bytes((1,)) + base + b"never decoded"


def _text_objects(path: Path) -> tuple[ObjectId, ObjectId]:
    """The ids of the objects holding ``doc`` and ``notes`` in main's state."""
    with snapvc.open(path) as repo:
        snap = repo.snapshot("main")
        tree = repo.get_commit(repo.resolve("main")).tree
        from snapvc.encoding.nodes import decode_node

        _, node = decode_node(tree, repo.loader.fetch(tree))
        assert snap["doc"] == DOC
        return ObjectId(node[2]["doc"]), ObjectId(node[2]["notes"])


def test_a_delta_frame_based_on_itself_is_corrupt_not_a_recursion_error(tmp_path: Path) -> None:
    path = tmp_path / "self.snapvc"
    _make(path, format=2)
    doc, _ = _text_objects(path)
    _sql(path, "UPDATE objects SET data = ? WHERE id = ?", _delta_on(doc), doc)
    with snapvc.open(path) as repo:
        with pytest.raises(snapvc.CorruptObjectError, match=f"{doc.hex} is corrupt: its delta base is itself"):
            repo.checkout("main")
        report = repo.fsck()
    [problem] = report.problems
    assert problem.kind == "corrupt" and problem.object_id == doc and "delta base is itself" in problem.message
    assert "refs/heads/main" in problem.refs and any(p.endswith("state['doc']") for p in problem.paths)
    _gc_refuses(path, doc.hex)


def test_two_delta_frames_based_on_each_other_are_both_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "pair.snapvc"
    _make(path, format=2)
    doc, notes = _text_objects(path)
    _sql(path, "UPDATE objects SET data = ? WHERE id = ?", _delta_on(notes), doc)
    _sql(path, "UPDATE objects SET data = ? WHERE id = ?", _delta_on(doc), notes)
    with snapvc.open(path) as repo:
        with pytest.raises(snapvc.CorruptObjectError, match="its delta chain loops: ") as err:
            repo.checkout("main")
        assert {doc.short, notes.short} <= set(str(err.value).split(": ")[-1].split(" -> "))
        report = repo.fsck()
    assert {(p.kind, p.object_id) for p in report.problems} == {("corrupt", doc), ("corrupt", notes)}
    assert all("its delta chain loops: " in p.message for p in report.problems)
    _gc_refuses(path, "its delta chain loops: ")


def test_a_delta_chain_without_end_is_corrupt_not_a_recursion_error(tmp_path: Path) -> None:
    """Frames each based on the next, more than any writer makes: the read stops at the
    longest chain a frame's header can state, naming the object."""
    path = tmp_path / "chain.snapvc"
    _make(path, format=2)
    doc, _ = _text_objects(path)
    chain = [doc] + [ObjectId(bytes([1 + i // 256, i % 256]) + b"\x00" * 30) for i in range(MAX_DELTA_CHAIN + 1)]
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE objects SET data = ? WHERE id = ?", (_delta_on(chain[1]), doc))
        conn.executemany("INSERT INTO objects (id, data, mtime) VALUES (?, ?, 0)",
                         [(oid, _delta_on(base)) for oid, base in zip(chain[1:], chain[2:])])
    conn.close()
    with snapvc.open(path) as repo:
        with pytest.raises(snapvc.CorruptObjectError, match=f"more than {MAX_DELTA_CHAIN} frames long"):
            repo.checkout("main")
        assert any(p.object_id == doc and p.kind == "corrupt" for p in repo.fsck().problems)


# -- refs and commits naming objects of the wrong kind ----------------------------------------------


def test_a_branch_at_a_stored_object_that_is_not_a_commit_is_a_bad_ref(tmp_path: Path) -> None:
    path = tmp_path / "kind.snapvc"
    _make(path)
    with snapvc.open(path) as repo:
        tree = repo.get_commit(repo.resolve("main")).tree
    _sql(path, "INSERT INTO refs (name, target) VALUES ('refs/heads/odd', ?)", tree)
    _sql(path, "INSERT INTO ref_names (name, n) VALUES ('refs/heads/gone', 99)")
    _sql(path, "INSERT INTO reflog (ref, seq, old, new, time, reason) VALUES (99, 1, NULL, ?, 1, 'x')", tree)
    with snapvc.open(path) as repo:
        with pytest.raises(snapvc.SnapvcError):
            repo.checkout("odd")
        report = repo.fsck()
    assert not report.ok and "no problems" not in str(report)
    assert sorted((p.kind, p.object_id, p.refs) for p in report.problems) == [
        ("bad-ref", tree, ("refs/heads/gone@{0}",)), ("bad-ref", tree, ("refs/heads/odd",))]
    assert all(f"{tree}, which is a map object, not a commit" in p.message for p in report.problems)
    done = run("fsck", "--repo", "kind.snapvc", cwd=tmp_path)
    assert done.returncode == 1 and "which is a map object, not a commit" in done.stdout
    _gc_refuses(path, tree.hex)


def test_a_commit_naming_objects_of_the_wrong_kind_is_corrupt(tmp_path: Path) -> None:
    """Commits that hash right but name a commit as their state, or a state node as their
    parent (only a forger makes them): checkout refuses them, and so does fsck."""
    path = tmp_path / "forged.snapvc"
    _make(path)
    with snapvc.open(path) as repo:
        tip = repo.get_commit(repo.resolve("main"))
        fields = dict(author="x", timestamp_us=0, message="forged", metadata=None, generation=9)
        tree_is_commit, _ = snapvc.Commit.create(tree=tip.id, parents=(tip.id,), **fields)
        parent_is_node, _ = snapvc.Commit.create(tree=tip.tree, parents=(tip.tree,), **fields)
        for name, commit in (("a", tree_is_commit), ("b", parent_is_node)):
            repo.commits.add(commit)
            assert repo.refs.compare_and_swap(f"refs/heads/{name}", None, commit.id, "forged")
        with pytest.raises(snapvc.SnapvcError):
            repo.checkout("a")
        report = repo.fsck()
    found = {(p.kind, p.object_id): p.message for p in report.problems}
    assert found[("corrupt", tree_is_commit.id)] == f"its state tree {tip.id} is a commit, not a state node"
    assert found[("corrupt", parent_is_node.id)] == f"its parent {tip.tree} is a state node, not a commit"


# -- rows holding values of the wrong type or size -------------------------------------------------


def _commit_row(path: Path) -> str:
    with snapvc.open(path) as repo:
        return repo.resolve("main~1").hex


# Each case: the damage (SQL, with ``{main1}`` for the hex of main~1's id), what fsck
# reports (its kind and words of its message), and a read that must raise snapvc's error
# naming the damaged row. Every value a read takes from the file is here.
DAMAGE = {
    "ref target too short": ("UPDATE refs SET target = X'0102' WHERE name = 'refs/heads/main'",
                             "bad-ref", "ref 'refs/heads/main': its target is 2 bytes, not a 32-byte id",
                             lambda repo: repo.checkout("main")),
    "ref target as text": ("UPDATE refs SET target = 'main' WHERE name = 'refs/heads/main'",
                           "bad-ref", "its target is text 'main'", lambda repo: repo.branches()),
    "ref name not text": ("INSERT INTO refs (name, target) VALUES (X'6d61696e', X'{main1}')",
                          "bad-ref", "its name is 4 bytes, not text", None),
    "ref name not a ref name": ("INSERT INTO refs (name, target) VALUES ('refs/heads/a..b', X'{main1}')",
                                "bad-ref", "invalid ref name 'refs/heads/a..b'", lambda repo: repo.branches()),
    "HEAD to nothing": ("UPDATE symrefs SET target = X'00' WHERE name = 'HEAD'",
                        "bad-ref", "symbolic ref 'HEAD': its target: its name is 1 bytes", lambda repo: repo.checkout()),
    "reflog id too long": ("UPDATE reflog SET new = X'{main1}00' WHERE seq = 2",
                           "bad-ref", "refs/heads/main@{1}: its new commit is 33 bytes, not a 32-byte id",
                           lambda repo: repo.reflog("main")),
    "reflog old id as text": ("UPDATE reflog SET old = 'abc' WHERE seq = 2",
                              "bad-ref", "its old commit is text 'abc'", lambda repo: repo.reflog("main")),
    "reflog time as text": ("UPDATE reflog SET time = 'yesterday' WHERE seq = 2",
                            "bad-ref", "refs/heads/main@{1}: its time is text 'yesterday', not a number",
                            lambda repo: repo.reflog("main")),
    "reflog reason not text": ("UPDATE reflog SET reason = X'00' WHERE seq = 1",
                               "bad-ref", "its reason is 1 bytes, not text", lambda repo: repo.reflog("main")),
    "reflog of a bad name": ("UPDATE ref_names SET name = 'refs/heads/..' WHERE name = 'refs/heads/main'",
                             "bad-ref", "reflog of 'refs/heads/..'", None),
    "commit tree too short": ("UPDATE commits SET tree = X'01' WHERE id = X'{main1}'",
                              "corrupt", "is damaged: tree is 1 bytes, not a 32-byte id",
                              lambda repo: list(repo.log("main"))),
    "commit parent cut": ("UPDATE commits SET parent = substr((SELECT p.id FROM commits p WHERE p.n = commits.parent), 2) "
                          "WHERE id = X'{main1}'",
                          "corrupt", "parent is 31 bytes, not a 32-byte id or a row number",
                          lambda repo: repo.checkout("main~2")),
    "commit parent row gone": ("UPDATE commits SET parent = 999 WHERE id = X'{main1}'",
                               "corrupt", "parent is row 999 of table 'commits', which is not there",
                               lambda repo: repo.checkout("main~2")),
    "commit author not text": ("UPDATE commits SET author = X'07' WHERE id = X'{main1}'",
                               "corrupt", "author is 1 bytes, not text", lambda repo: repo.resolve("main~2")),
    "commit time as text": ("UPDATE commits SET time_us = 'noon' WHERE id = X'{main1}'",
                            "corrupt", "time_us is text 'noon', not an integer", lambda repo: list(repo.log())),
    "commit metadata not msgpack": ("UPDATE commits SET metadata = X'7b7d' WHERE id = X'{main1}'",
                                    "corrupt", "metadata is 2 bytes, which are not msgpack of JSON",
                                    lambda repo: list(repo.log())),
    "commit metadata a number": ("UPDATE commits SET metadata = 7 WHERE id = X'{main1}'",
                                 "corrupt", "metadata is the number 7, not text or msgpack",
                                 lambda repo: list(repo.log())),
    "reflog entry of a ref with no name": ("UPDATE reflog SET ref = 42 WHERE seq = 1",
                                           "bad-ref", "table 'reflog' ref 42: its entries name a ref that table "
                                                      "'ref_names' does not hold", None),
    "reflog new at a row gone": ("UPDATE reflog SET new = 999 WHERE seq = 2",
                                 "bad-ref", "refs/heads/main@{1}: its new commit is the number 999",
                                 lambda repo: repo.reflog("main")),
    "commit id too short": ("UPDATE commits SET id = X'0102' WHERE id = X'{main1}'",
                            "storage", "table 'commits' row 2: its id is 2 bytes, not 32 bytes",
                            lambda repo: repo.stats()),
    "object id too short": ("UPDATE objects SET id = X'0102' WHERE rowid = 1",
                            "storage", "table 'objects' row 1: its id is 2 bytes, not 32 bytes",
                            lambda repo: repo.stats()),
    "object age as text": ("INSERT INTO objects (id, data, mtime) VALUES (zeroblob(32), X'00', 'old')",
                           "storage", f"object {'00' * 32}: its age (mtime) is text 'old', not a number", None),
    "commit age as text": ("CREATE TABLE IF NOT EXISTS commit_mtimes (id BLOB PRIMARY KEY, mtime INTEGER NOT NULL) "
                           "WITHOUT ROWID; INSERT INTO commit_mtimes VALUES (X'{main1}', 'soon')",
                           "storage", "its age (table 'commit_mtimes') is text 'soon', not a number", None),
    "remotes garbage": ("INSERT INTO meta (key, value) VALUES ('setting:remotes', '{\"origin\": 3}')",
                        "storage", "its setting 'remotes' (the remotes) is damaged", lambda repo: repo.remotes()),
    "gc epoch garbage": ("INSERT INTO meta (key, value) VALUES ('gc_epoch', 'many')",
                         "storage", "table 'meta' key 'gc_epoch': it is text 'many', not a count of sweeps",
                         lambda repo: repo.commit({"after": 1})),
}


# Damage gc does not read, and need not: the remotes name no root.
GC_UNAFFECTED = {"remotes garbage"}


@pytest.mark.parametrize("case", DAMAGE, ids=list(DAMAGE))
def test_a_damaged_row_is_named_by_fsck_by_gc_and_by_every_read(tmp_path: Path, case: str) -> None:
    statement, kind, words, read = DAMAGE[case]
    path = tmp_path / "rows.snapvc"
    _make(path, format=2 if case.startswith("object ") else 3)  # rows of table objects: format 2
    main1 = _commit_row(path)
    conn = sqlite3.connect(path)
    with conn:
        conn.executescript(statement.replace("{main1}", main1))
    conn.close()
    with snapvc.open(path) as repo:
        report = repo.fsck()
        if read is not None:
            with pytest.raises(snapvc.SnapvcError) as err:
                read(repo)
            assert str(path) in str(err.value), err.value
    assert [p for p in report.problems if p.kind == kind and words in p.message], str(report)
    if kind != "corrupt":  # a damaged row names the file it is in
        assert any(str(path) in p.message for p in report.problems if words in p.message)
    if case in GC_UNAFFECTED:
        with snapvc.open(path) as repo:
            assert repo.gc(grace=0).removed_objects == ()
    else:
        _gc_refuses(path)


def test_damaged_rows_are_each_named_and_counted(tmp_path: Path) -> None:
    """Several damaged rows at once: one problem each, and fsck still checks the rest
    (what the damaged listings could read)."""
    path = tmp_path / "many.snapvc"
    _make(path)
    with snapvc.open(path) as repo:
        repo.branch("side", at="main~1")
    _sql(path, "UPDATE reflog SET time = 'a' WHERE seq IN (1, 2) "
               "AND ref = (SELECT n FROM ref_names WHERE name = 'refs/heads/main')")
    _sql(path, "INSERT INTO refs (name, target) VALUES ('refs/heads/x', X'01'), ('refs/heads/y', 'y')")
    with snapvc.open(path) as repo:
        report = repo.fsck()
    rows = sorted(p.message.split(":")[0] for p in report.problems)
    assert rows == ["ref 'refs/heads/x'", "ref 'refs/heads/y'", "refs/heads/main@{1}", "refs/heads/main@{2}"]
    assert report.refs == 2 and report.commits == 3 and "4 bad-ref" in str(report)
    assert report.dangling_commits == ()  # main and side were still read, and walked


def test_a_format_version_that_is_no_number_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "format.snapvc"
    _make(path)
    _sql(path, "UPDATE meta SET value = 'two' WHERE key = 'format'")
    with pytest.raises(snapvc.FormatVersionError, match=r"format\.snapvc' records its format version as 'two'"):
        snapvc.open(path)
    done = run("log", "--repo", "format.snapvc", cwd=tmp_path)
    assert done.returncode == 2 and "records its format version as 'two'" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_dictionary_row_of_the_wrong_type(tmp_path: Path) -> None:
    """A compression dictionary stored as text reads as the same bytes; one that is
    garbage makes every object compressed with it corrupt, named, not a TypeError."""
    path = tmp_path / "dict.snapvc"
    state = {f"doc{i}": f"Report {i}: " + " ".join(f"word{(i * j) % 997}" for j in range(900)) for i in range(60)}
    with snapvc.open(path, format=2) as repo:  # dictionaries are format 2's
        repo.commit(state)
        repo.commit({**state, "more": {f"n{i}": f"note {i} " + "about things " * 40 for i in range(80)}})
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM dictionaries").fetchone()[0] >= 1, "the test needs a trained dictionary"
    with conn:
        conn.execute("UPDATE dictionaries SET data = CAST(data AS TEXT)")
    conn.close()
    with snapvc.open(path) as repo:
        assert repo.checkout("main")["doc3"] == state["doc3"] and repo.fsck().ok
    _sql(path, "UPDATE dictionaries SET data = 'not a dictionary'")
    with snapvc.open(path) as repo:
        with pytest.raises(snapvc.CorruptObjectError, match="compression dictionary 1 is damaged"):
            repo.checkout("main")
        report = repo.fsck()
    assert report.problems and all(p.kind == "corrupt" and "dictionary 1 is damaged" in p.message
                                   for p in report.problems)
    _gc_refuses(path, "dictionary 1 is damaged")


# -- pages SQLite cannot read ------------------------------------------------------------------------


def _break_table(path: Path, table: str) -> None:
    """Garbage over the first page of ``table`` (a bad block), the rest of the file intact."""
    conn = sqlite3.connect(path)
    page = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with open(path, "r+b") as f:
        f.seek((page - 1) * size)
        f.write(b"\xa5" * size)


@pytest.mark.parametrize("table", ["refs", "reflog", "commits", "packs", "objects"])
def test_an_unreadable_table_is_a_snapvc_error_naming_the_file(tmp_path: Path, table: str) -> None:
    path = tmp_path / "pages.snapvc"
    _make(path, format=2 if table == "objects" else 3)  # table objects: format 2
    _break_table(path, table)
    with snapvc.open(path) as repo:
        for read in (lambda: repo.branches(), lambda: repo.checkout("main"), lambda: list(repo.log("main")),
                     lambda: repo.reflog("main"), lambda: repo.commit({"a": 1})):
            try:
                read()
            except snapvc.SnapvcError as exc:
                assert str(path) in str(exc), exc
        report = repo.fsck()
    assert not report.ok and any(p.kind in ("storage", "corrupt") for p in report.problems)
    _gc_refuses(path)


@pytest.mark.parametrize("column, value, words", [("metadata", "{", "its metadata is not a JSON object"),
                                                  ("metadata", "[1]", "its metadata is not a JSON object"),
                                                  ("time_us", 9 * 10**18, "is out of range")])
def test_a_commit_row_whose_metadata_or_time_cannot_be_used(tmp_path: Path, column: str, value: object,
                                                             words: str) -> None:
    """Values of the right type that log and show cannot use: a walk of the history trusts
    the index (it does not hash each commit), so the commit is named where it is used."""
    path = tmp_path / "fields.snapvc"
    _make(path)
    main1 = bytes.fromhex(_commit_row(path))
    _sql(path, f"UPDATE commits SET {column} = ? WHERE id = ?", value, main1)
    with snapvc.open(path) as repo:
        with pytest.raises(snapvc.CorruptObjectError, match=words) as err:
            for commit in repo.log("main"):
                commit.metadata.get("step"), commit.time
        assert err.value.object_id == main1
        assert [p.kind for p in repo.fsck().problems if p.object_id == main1] == ["corrupt"]
    done = run("log", "--repo", "fields.snapvc", cwd=tmp_path)
    assert done.returncode == 2 and main1.hex() in done.stderr and "Traceback" not in done.stderr
