"""The order of a sealed pack's objects: what a fresh read needs first comes first.

A pack is decoded from its start as far as the furthest object a read asks for
(``snapvc.backends.sqlite.packs``), so the order of its objects decides what a read
costs. A process that opens a repository reads the newest states first: a checkout, or
one value through a snapshot, walks the trees the branches point at from their roots
down, a level at a time. ``read_order`` puts those objects first, in that order: the
trees are walked together, a level of all of them at a time (the roots, the newest
first, then every root's children, and so on), so that the start of any branch's tree
comes before the lower levels of the others (forks share most of their objects, and a
tree walked whole before the next would put the next one's root behind all of it); the
nodes of the trees come before the chunks of long strings and bytes (BLOBs, read only
by a read of that one value), the newest tree's chunks first, so that a checkout of the
newest state decodes no other state's long strings; every other object (history)
follows in the order it came. The bytes before a node a read needs are then the nodes
of the levels above it, and of its own level before it.

The order changes no id and no frame, and the pack is an ordinary pack: a reader of any
version finds each object through its row's ids and sizes. It is only a hint: an object
that cannot be read or decoded is left where it was, never an error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from snapvc.encoding.nodes import children_of, decode_node
from snapvc.errors import SnapvcError
from snapvc.ids import ID_SIZE, ObjectId
from snapvc.objects import BLOB, MAP, SEQ, TEXT
from snapvc.refs.base import RefStore
from snapvc.store.commit_index import CommitIndex

__all__ = ["read_order", "branch_states", "WALK_BYTES"]

# The walk decodes at most this many bytes of nodes (its own and others' it reads on the
# way down): a state larger than that keeps the rest of its objects in the order they came.
WALK_BYTES = 16 << 20


def branch_states(refs: RefStore, commits: CommitIndex) -> list[ObjectId]:
    """The trees the refs point at, the newest commit's first: where a fresh read starts
    (the ``roots`` of ``read_order``)."""
    heads = commits.get_many(set(refs.list("refs/").values()))
    return [c.tree for c in sorted(heads.values(), key=lambda c: c.timestamp_us, reverse=True)]


def read_order(frames: Sequence[tuple[ObjectId, bytes]], roots: Iterable[bytes],
               lookup: Callable[[bytes], bytes | None]) -> list[tuple[ObjectId, bytes]]:
    """``frames`` (raw frames, each id once) reordered: the objects reachable from
    ``roots`` (the newest first), walked together a level at a time in the order a read
    from each root asks for them, the BLOBs after every other node (the first root's
    first); then the rest in the
    order given. ``lookup``: the frame of an object not in ``frames`` that the walk passes
    through on its way down, or None (not stored, or too costly to read: the walk stops
    there)."""
    own = {bytes(oid): frame for oid, frame in frames}
    first = _walk([bytes(root) for root in roots], own, lookup)
    placed = set(first)
    return [(ObjectId(oid), own[oid]) for oid in first] + [item for item in frames if item[0] not in placed]


def _walk(roots: list[bytes], own: dict[bytes, bytes], lookup: Callable[[bytes], bytes | None]) -> list[bytes]:
    """The objects of ``own`` reachable from ``roots``, walked together level by level
    (a checkout asks for a level in one batch), the BLOBs last: those of the first root
    first, then those only a later root reaches, in the order of the roots (a checkout
    of the newest state decodes no other state's long strings). The walk decodes at most
    ``WALK_BYTES`` of nodes."""
    nodes: list[bytes] = []
    chunks: list[tuple[int, bytes]] = []  # (the first root that reaches it, id)
    seen: set[bytes] = set()
    budget = WALK_BYTES
    # Each level holds the objects the first roots reach first (its parents' order).
    level = [(oid, n) for n, oid in enumerate(roots)]
    while level and budget > 0:
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
                if kind == BLOB:
                    chunks.append((n, oid))
                else:
                    nodes.append(oid)
            if kind not in (MAP, SEQ, TEXT) or budget <= 0:
                continue
            budget -= len(data)
            below += [(child, n) for child in _children(oid, data)]
        level = below
    chunks.sort(key=lambda chunk: chunk[0])  # stable: each root's in the order met
    return nodes + [oid for _, oid in chunks]


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
