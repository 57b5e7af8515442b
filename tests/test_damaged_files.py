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


def _make(path: Path, steps: int = 3) -> None:
    with snapvc.open(path) as repo:
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
    before = conn.execute("SELECT count(*) FROM objects").fetchone()[0]
    conn.close()
    for dry_run in (True, False):
        with snapvc.open(path) as repo, pytest.raises(snapvc.RepositoryError) as err:
            repo.gc(grace=0, reflog_expiry=0, dry_run=dry_run)
        assert "gc stopped before deleting anything" in str(err.value)
        for name in names:
            assert name in str(err.value)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM objects").fetchone()[0] == before
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


def test_fsck_and_gc_need_no_user_classes(tmp_path: Path) -> None:
    """The command line does not import the module that defines a stored dataclass: walks
    of the object graph read nodes' children, and never rebuild typed values."""
    with snapvc.open(tmp_path / "notes.snapvc") as repo:
        repo.commit({"note": Note("short"), "many": [Note(f"note {i} " * 20) for i in range(200)]})
        state = repo.checkout("main")
    done = run("fsck", "--repo", "notes.snapvc", cwd=tmp_path)
    assert done.returncode == 0 and "no problems" in done.stdout, done.stdout + done.stderr
    done = run("gc", "--repo", "notes.snapvc", "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr


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
    _make(path)
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
    _make(path)
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
    _make(path)
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
