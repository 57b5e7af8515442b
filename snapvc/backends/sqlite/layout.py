"""The order of a sealed pack's objects: what a fresh read needs first comes first.

A pack is decoded from its start as far as the furthest object a read asks for
(``snapvc.backends.sqlite.packs``), so the order of its objects decides what a read
costs. A process that opens a repository reads the newest states first: a checkout, or
one value through a snapshot, walks the trees the branches point at from their roots
down, a level at a time. ``read_order`` puts those objects first, in that order: the
newest state's nodes a level at a time, and with them, level by level, the nodes of the
other branches' states that the newest does not hold (the roots first, so any branch's
root is among the first objects: forks share most of their objects, and a tree placed
whole before the next would put the next one's root and top behind all of it), as long
as those add at most ``1/FOREIGN_SHARE`` to what a checkout of the newest state decodes;
then the newest state's chunks of long strings and bytes (BLOBs, read only by a read of
that one value); then the other states' remaining nodes, a level at a time, and their
chunks, a state at a time; every other object (history) follows in the order it came. The bytes before a
node a read needs are then the nodes of the levels above it, and of its own level
before it; a checkout of the newest state decodes it and a bounded share more, however
many unrelated states (an agent's threads, each on a branch) share the pack.

The order changes no id and no frame, and the pack is an ordinary pack: a reader of any
version finds each object through its row's ids and sizes. It is only a hint: an object
that cannot be read or decoded is left where it was, never an error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from snapvc.encoding.nodes import children_of, decode_node
from snapvc.errors import SnapvcError
from snapvc.ids import ID_SIZE, ObjectId
from snapvc.objects import BLOB, MAP, SEQ, TEXT
from snapvc.refs.base import RefStore
from snapvc.store.commit_index import CommitIndex

__all__ = ["read_order", "branch_states", "WALK_BYTES", "FOREIGN_SHARE"]

# The walk decodes at most this many bytes of nodes (its own and others' it reads on the
# way down): a state larger than that keeps the rest of its objects in the order they came.
WALK_BYTES = 16 << 20
# Other branches' nodes placed before the newest state's chunks add at most
# 1/FOREIGN_SHARE to what a fresh checkout of the newest state decodes (states that share
# little, as the threads of an agent each on a branch of its own, keep the newest
# state's checkout as cheap as it was alone).
FOREIGN_SHARE = 8


def branch_states(refs: RefStore, commits: CommitIndex) -> list[ObjectId]:
    """The trees the refs point at, the newest commit's first: where a fresh read starts
    (the ``roots`` of ``read_order``)."""
    heads = commits.get_many(set(refs.list("refs/").values()))
    return [c.tree for c in sorted(heads.values(), key=lambda c: c.timestamp_us, reverse=True)]


def read_order(frames: Sequence[tuple[ObjectId, bytes]], roots: Iterable[bytes],
               lookup: Callable[[bytes], bytes | None]) -> list[tuple[ObjectId, bytes]]:
    """``frames`` (raw frames, each id once) reordered: the objects reachable from
    ``roots`` (the newest first) in the order a read from them asks for them (see the
    module docstring); then the rest in the order given. ``lookup``: the frame of an
    object not in ``frames`` that the walk passes through on its way down, or None (not
    stored, or too costly to read: the walk stops there)."""
    own = {bytes(oid): frame for oid, frame in frames}
    seen: set[bytes] = set()
    budget = [WALK_BYTES]
    listed = [bytes(root) for root in roots]
    newest = _walk(listed[:1], own, lookup, seen, budget)
    others = _walk(listed[1:], own, lookup, seen, budget)
    # Other states' nodes go among the newest state's while they add no more than a
    # share of what a checkout of the newest state decodes; the rest after its chunks.
    allowance = sum(len(own[item.oid]) for item in newest) // FOREIGN_SHARE
    ahead: list[_Placed] = []
    behind: list[_Placed] = []
    full = False  # once a node does not fit, the nodes after it go behind too
    for item in others:
        if not item.chunk and not full:
            full = len(own[item.oid]) > allowance
            if not full:
                ahead.append(item)
                allowance -= len(own[item.oid])
                continue
        behind.append(item)
    # A level at a time, the newest state's first within a level (a stable sort).
    top = sorted([item for item in newest if not item.chunk] + ahead, key=lambda item: item.level)
    order = top + [item for item in newest if item.chunk] + [item for item in behind if not item.chunk]
    order += sorted((item for item in behind if item.chunk), key=lambda item: item.root)
    first = [item.oid for item in order]
    placed = set(first)
    return [(ObjectId(oid), own[oid]) for oid in first] + [item for item in frames if item[0] not in placed]


class _Placed(NamedTuple):
    """An object the walk met: how many levels below a root, the first of the roots
    walked that reaches it there (its index), its id, whether it is a BLOB."""

    level: int
    root: int
    oid: bytes
    chunk: bool


def _walk(roots: list[bytes], own: dict[bytes, bytes], lookup: Callable[[bytes], bytes | None], seen: set[bytes],
          budget: list[int]) -> list[_Placed]:
    """The objects of ``own`` reachable from ``roots`` and not ``seen`` before, walked
    together level by level (a checkout asks for a level in one batch), each level in
    the order of the roots that reach its objects first; ``budget``: the bytes of nodes
    the walk may still decode."""
    found: list[_Placed] = []
    level = [(oid, n) for n, oid in enumerate(roots)]
    depth = 0
    while level and budget[0] > 0:
        below: list[tuple[bytes, int]] = []
        for oid, n in level:
            if oid in seen:
                continue
            seen.add(oid)
            frame = own.get(oid)
            if frame is None:
                frame = lookup(oid)
            data = _canonical(frame) if frame is not None else None
            if data is None:
                continue
            kind = data[0]
            if oid in own:
                found.append(_Placed(depth, n, oid, kind == BLOB))
            if kind not in (MAP, SEQ, TEXT) or budget[0] <= 0:
                continue
            budget[0] -= len(data)
            below += [(child, n) for child in _children(oid, data)]
        level = below
        depth += 1
    return found


def _canonical(frame: bytes) -> bytes | None:
    """The canonical bytes of a raw frame (codec 0: the pack compresses the frames
    together); None for any other frame, whose children the walk does not look for."""
    if not frame or frame[0] != 0:
        return None
    pos = 1
    while pos < len(frame) and frame[pos] & 0x80:
        pos += 1
    data = frame[pos + 1 :]
    return data or None


def _children(oid: bytes, data: bytes) -> list[bytes]:
    """The ids the node ``data`` refers to; none if it does not decode (damage is fsck's
    to name: here it only ends the walk)."""
    try:
        kind, node = decode_node(oid, data, rebuild_types=False)
        found = children_of(kind, node)
    except (SnapvcError, IndexError, TypeError, ValueError):
        return []
    if type(found) is not list:
        return []
    return [child for child in found if type(child) is bytes and len(child) == ID_SIZE]
