"""State nodes that hash right but whose child references are damaged (a reference of 31
bytes, a leaf listing a reference position it does not have), as only a hostile or
foreign writer makes them: every walk of the object graph (fsck, gc, a clone or push)
reports a ``CorruptObjectError`` naming the node, never a bare id error or an
``IndexError`` that names nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import pytest

import snapvc
from snapvc.ids import ObjectId, hash_bytes
from snapvc.maintenance.graph import read_children
from snapvc.objects import MAP, SEQ, TEXT

SHORT = b"x" * 31  # one byte short of an object id

# Each node as the table in snapvc/encoding/nodes.py lays it out, with one damaged reference.
DAMAGED = {
    "map leaf": (MAP, [0, 0, {"a": SHORT}, ["a"]], "an object id is 32 bytes, got 31"),
    "map inner node": (MAP, [0, 1, ["a"], [SHORT], [3]], "an object id is 32 bytes, got 31"),
    "list leaf": (SEQ, [0, 0, [SHORT], [0]], "an object id is 32 bytes, got 31"),
    "list inner node": (SEQ, [0, 1, [SHORT], [3]], "an object id is 32 bytes, got 31"),
    "text inner node": (TEXT, [0, 1, [SHORT], [3]], "an object id is 32 bytes, got 31"),
    "text leaf without its reference positions": (TEXT, [0, 0, ["ab"], [2]], "IndexError"),
}


def _node(case: str) -> tuple[ObjectId, bytes]:
    kind, payload, _ = DAMAGED[case]
    data = bytes((kind,)) + msgpack.packb(payload, use_bin_type=True)
    return ObjectId(hash_bytes(data)), data


@pytest.mark.parametrize("case", [case for case, (_, _, reason) in DAMAGED.items() if "32 bytes" in reason])
def test_a_damaged_child_reference_is_a_corrupt_object_naming_the_node(case: str) -> None:
    oid, data = _node(case)
    with pytest.raises(snapvc.CorruptObjectError) as raised:
        read_children(oid, data)
    assert raised.value.object_id == oid
    assert f"object {oid} is corrupt: bad node layout: " in str(raised.value)
    assert DAMAGED[case][2] in str(raised.value)


def _repository_holding(path: Path, case: str) -> ObjectId:
    """A repository whose branch main is at a commit whose state holds the damaged node
    under key 'x' (the node stored as any object is: its bytes hash to its id)."""
    bad_id, bad = _node(case)
    root = bytes((MAP,)) + msgpack.packb([0, 0, {"x": bad_id}, ["x"]], use_bin_type=True)
    root_id = ObjectId(hash_bytes(root))
    with snapvc.open(path) as repo:
        tip = repo.commit({"a": 1})
        repo.store.put_many([(bad_id, bad), (root_id, root)])
        fields: dict[str, Any] = dict(author="x", timestamp_us=0, message="forged", metadata=None, generation=2)
        forged, _ = snapvc.Commit.create(tree=root_id, parents=(tip.id,), **fields)
        repo.commits.add(forged)
        assert repo.refs.compare_and_swap("refs/heads/main", tip.id, forged.id, "forged")
    return bad_id


@pytest.mark.parametrize("case", ["map inner node", "list inner node", "text leaf without its reference positions"])
def test_a_clone_stops_at_the_damaged_node_naming_it(tmp_path: Path, case: str) -> None:
    bad_id = _repository_holding(tmp_path / "src.snapvc", case)
    with pytest.raises(snapvc.CorruptObjectError) as raised:
        snapvc.clone(str(tmp_path / "src.snapvc"), str(tmp_path / "copy.snapvc"))
    assert raised.value.object_id == bad_id and "bad node layout" in str(raised.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.snapvc"]  # no half-made copy is left


def test_a_failed_clone_into_an_existing_repository_leaves_it_as_it_was(tmp_path: Path) -> None:
    _repository_holding(tmp_path / "src.snapvc", "list leaf")
    with snapvc.open(tmp_path / "copy.snapvc") as repo:
        kept = repo.commit({"kept": True}, branch="elsewhere", message="before the clone")
        repo.delete_branch("elsewhere")  # no refs, so the clone may go ahead
    with pytest.raises(snapvc.CorruptObjectError):
        snapvc.clone(str(tmp_path / "src.snapvc"), str(tmp_path / "copy.snapvc"))
    with snapvc.open(tmp_path / "copy.snapvc") as repo:
        assert repo.checkout(kept.id) == {"kept": True}  # the file and what it held are still there


@pytest.mark.parametrize("case", ["map inner node", "list leaf"])
def test_fsck_and_gc_name_the_damaged_node(tmp_path: Path, case: str) -> None:
    bad_id = _repository_holding(tmp_path / "src.snapvc", case)
    with snapvc.open(tmp_path / "src.snapvc") as repo:
        [problem] = repo.fsck().problems
        assert (problem.kind, problem.object_id) == ("corrupt", bad_id)
        assert "bad node layout: an object id is 32 bytes, got 31" in problem.message
        with pytest.raises(snapvc.RepositoryError, match=f"gc stopped before deleting anything: .*{bad_id}"):
            repo.gc(grace=0, reflog_expiry=0)
        assert repo.store.get(bad_id)  # nothing was deleted


def test_bytes_after_a_node_s_payload_make_it_corrupt_to_every_walk() -> None:
    # A checkout may decode with a decoder that stops at the end of the payload; a walk
    # (fsck, gc, a clone or push) decodes strictly and names the node.
    data = bytes((MAP,)) + msgpack.packb([0, 0, {"a": 1}, []], use_bin_type=True) + b"\xc0"
    oid = ObjectId(hash_bytes(data))
    with pytest.raises(snapvc.CorruptObjectError) as raised:
        read_children(oid, data)
    assert raised.value.object_id == oid and "cannot decode map payload" in str(raised.value)
