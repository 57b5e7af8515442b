"""fsck of a format 3 file, whose objects live in table ``packs`` (zstd streams of raw
frames, see ``snapvc.backends.sqlite.packs``): a damaged row — ids that are no 32-byte
multiple, sizes that do not decode, data that does not decode or became text — is
reported naming the row or the objects it held, with the refs and state paths that
reach them; never a crash. (The same damage to a format 2 file's table ``objects``:
tests/test_fsck.py.)"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

import snapvc
from snapvc.maintenance.fsck import salvage
from tests.test_cli import run
from tests.test_fsck import _make, _object_at, _sql


def _row_of(path: Path, oid: bytes) -> tuple[int, int, set[bytes]]:
    """The number and stream of the ``packs`` row holding ``oid``, and every id of that
    stream (what a row of it that does not decode takes with it)."""
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT number, stream, ids FROM packs").fetchall()
    conn.close()
    number, stream = next((n, s) for n, s, ids in rows
                          if any(ids[i : i + 32] == oid for i in range(0, len(ids), 32)))
    held = {ids[i : i + 32] for _, s, ids in rows if s == stream for i in range(0, len(ids), 32)}
    return number, stream, held


def _doc(path: Path) -> bytes:
    with snapvc.open(path) as repo:
        assert repo.backend.objects.capabilities.compresses  # a format 3 file
        return _object_at(repo, "doc")


def test_a_flipped_byte_in_a_pack_names_each_damaged_object_with_its_refs_and_paths(tmp_path: Path) -> None:
    path = tmp_path / "flip.snapvc"
    _make(path)
    number, _, held = _row_of(path, _doc(path))
    conn = sqlite3.connect(path)
    with conn:
        data = bytearray(conn.execute("SELECT data FROM packs WHERE number = ?", (number,)).fetchone()[0])
        data[len(data) // 2] ^= 0x10
        conn.execute("UPDATE packs SET data = ? WHERE number = ?", (bytes(data), number))
    conn.close()
    with snapvc.open(path) as repo:
        report = repo.fsck()
        assert not report.ok
        assert all(p.kind == "corrupt" and p.object_id in held for p in report.problems)
        assert any(p.refs and p.paths for p in report.problems)  # named with where it is
        assert all(str(p.object_id) in str(report) for p in report.problems)
        with pytest.raises(snapvc.CorruptObjectError):
            for tip in repo.branches().values():
                repo.checkout(tip)


def test_a_pack_whose_data_became_text_names_every_object_it_held(tmp_path: Path) -> None:
    path = tmp_path / "text.snapvc"
    _make(path)
    number, stream, held = _row_of(path, _doc(path))
    _sql(path, "UPDATE packs SET data = CAST(X'C3FF00' AS TEXT) WHERE number = ?", number)
    with snapvc.open(path) as repo:
        with pytest.raises(snapvc.CorruptObjectError, match=f"pack {stream} of"):
            repo.checkout("main")
        report = repo.fsck()
    corrupt = {p.object_id: p for p in report.problems if p.kind == "corrupt"}
    assert set(corrupt) == held and len(report.problems) == len(held)  # each object of the pack, by id
    assert all(f"pack {stream} of" in p.message for p in corrupt.values())
    # The walk cannot go below a node it cannot read: the state roots are named with
    # their refs and commits (the nodes below them only by id).
    with snapvc.open(path) as repo:
        roots = {repo.get_commit(tip).tree for tip in repo.branches().values()}
    assert all(corrupt[root].refs and corrupt[root].paths for root in roots)


@pytest.mark.parametrize("column, value, what", [
    ("ids", b"\x01" * 33, "not 32-byte ids one after another"),
    ("sizes", b"\x00\x01\x02", "not one length for each of its"),
])
def test_a_pack_row_whose_ids_or_sizes_are_damaged_is_named_and_its_objects_missing(
        tmp_path: Path, column: str, value: bytes, what: str) -> None:
    path = tmp_path / f"{column}.snapvc"
    _make(path)
    doc = _doc(path)
    number, _, held = _row_of(path, doc)
    _sql(path, f"UPDATE packs SET {column} = ? WHERE number = ?", value, number)
    with snapvc.open(path) as repo:
        report = repo.fsck()
        with pytest.raises(snapvc.SnapvcError):
            repo.checkout("main")
    [storage] = [p for p in report.problems if p.kind == "storage"]
    assert f"table 'packs' row {number}" in storage.message and what in storage.message
    missing = {p.object_id: p for p in report.problems if p.kind == "missing"}
    # What the commits name of the row's objects is missing, named with where it is.
    assert missing and set(missing) <= held
    assert all(p.refs for p in missing.values())
    assert {p.kind for p in report.problems} == {"storage", "missing"}


def test_a_missing_object_of_a_pack_is_named_with_the_commits_reaching_it(tmp_path: Path) -> None:
    path = tmp_path / "missing.snapvc"
    _make(path)
    with snapvc.open(path) as repo:
        long_note = _object_at(repo, "notes")
        assert repo.backend.objects.delete_many([long_note]) == 1  # its pack rewritten without it
    with snapvc.open(path) as repo:
        report = repo.fsck()
        [problem] = report.problems
        assert problem.kind == "missing" and problem.object_id == long_note
        assert any("state['notes']" in p for p in problem.paths) and "refs/heads/side" in problem.refs
        with pytest.raises(snapvc.ObjectNotFoundError):
            repo.checkout("main")


def test_salvage_of_a_format_3_file_leaves_out_the_commit_that_lost_an_object(tmp_path: Path) -> None:
    path = tmp_path / "salvage.snapvc"
    state = _make(path)
    with snapvc.open(path) as repo:
        last = next(iter(repo.log("main")))
        assert repo.backend.objects.delete_many([_object_at(repo, "messages")]) == 1  # only the last commit has it
    with snapvc.open(path) as repo:
        result = salvage(repo, tmp_path / "out")
    assert result.damaged == (last.id,) and len(result.saved) == 3
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    saved = json.loads((tmp_path / "out" / f"{index[2]['id']}.json").read_text())
    assert snapvc.from_jsonable(saved) == {**state, "messages": state["messages"][:3]}


@pytest.mark.slow
def test_fsck_and_gc_commands_on_a_damaged_pack(tmp_path: Path) -> None:
    path = tmp_path / "agent.snapvc"
    _make(path)
    done = run("gc", "--keep-last", "2", "--expire-reflog", "0", "--grace", "0", cwd=tmp_path)
    assert done.returncode == 0 and "main: kept 2 of 4 commits" in done.stdout, done.stdout + done.stderr
    assert run("fsck", cwd=tmp_path).returncode == 0
    doc = _doc(path)
    number, _, held = _row_of(path, doc)
    _sql(path, "UPDATE packs SET data = X'01ff' WHERE number = ?", number)
    done = run("fsck", "--json", "--salvage", str(tmp_path / "saved"), cwd=tmp_path)
    assert done.returncode == 1
    data = json.loads(done.stdout)
    named = {p["object"] for p in data["problems"]}
    assert not data["ok"] and doc.hex() in named and named <= {oid.hex() for oid in held}
    assert data["salvage"]["saved"] == []  # every commit's state holds the doc
    done = run("fsck", cwd=tmp_path)
    assert done.returncode == 1 and f"corrupt {doc.hex()}" in done.stdout
    done = run("gc", "--grace", "0", cwd=tmp_path)
    assert done.returncode == 2 and "gc stopped before deleting anything" in done.stderr


def test_a_lone_object_whose_pack_does_not_decode_is_corrupt_not_a_crash(tmp_path: Path) -> None:
    """A batch of one object (here the whole store) whose pack does not decode: the
    store raises the object's own error, which fsck names."""
    path = tmp_path / "lone.snapvc"
    with snapvc.open(path) as repo:
        repo.commit({"a": 1})
        [root] = list(repo.backend.objects.iter_ids())
    number, _, _ = _row_of(path, root)
    _sql(path, "UPDATE packs SET data = X'01ff' WHERE number = ?", number)
    with snapvc.open(path) as repo:
        report = repo.fsck()
    [problem] = report.problems
    assert problem.kind == "corrupt" and problem.object_id == root and "does not decode" in problem.message
    assert problem.refs == ("refs/heads/main", "refs/heads/main@{reflog}")
