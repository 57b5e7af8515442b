"""A large stored map or list with a few entries changed, built from its old tree.

Re-encoding a changed container needs all of its entries; a merge that changed two keys
of a map of 20,000 would read every leaf for that. ``TreeSplicer`` builds the same tree
(same ids: the tree is a function of the entries alone, and the encoder and the splicer
cut it with the same functions, ``snapvc.encoding.prolly``) from the old one and the edits, reading its inner nodes and only the leaves around the
edits:

- leaves: from the first leaf holding an edit, the edited entries are cut into nodes
  anew, pulling in the next leaves, until a cut ends where an old leaf ended with no
  edit after it in that leaf's run: from there on, the same entries give the old nodes;
- inner levels (held in memory whole, about one node per dozen leaves) are planned
  with ``plan_level`` against the old level, as the encoder does, up to a single root.

New objects (the nodes, and those of the edited values) are collected in ``objects``
and written by the caller; nothing here writes. A result small enough to be a single
node is left to the encoder (``None``), whose rules for small containers apply.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from itertools import accumulate
from typing import Any

import msgpack

from snapvc.encoding.nodes import decode_node, inner_payload, leaf_payload, map_leaf_encodings, seq_leaf_encodings
from snapvc.encoding.prolly import (
    LEAF_TARGET_BYTES,
    MAX_NODE_BYTES,
    TARGET_NODE_BYTES,
    Level,
    NodeRec,
    cut_node,
    first_key,
    inner_level_rule,
    map_leaf_hash_size,
    plan_level,
    seq_leaf_hash_size,
    whole_entry,
)
from snapvc.encoding.reader import Loader, MapView, SeqView
from snapvc.encoding.values import REF_PREFIX, new_packer
from snapvc.encoding.writer import SINGLE_NODE_ENTRIES, Encoder
from snapvc.ids import ObjectId
from snapvc.objects import MAP, SEQ, object_bytes

__all__ = ["TreeSplicer", "inner_levels"]

SeqEdit = tuple[int, int, list[bytes]]  # replace old positions [start, end) by these encodings


class TreeSplicer:
    """Builds edited versions of stored maps and lists read through ``loader``."""

    def __init__(self, loader: Loader) -> None:
        self.loader = loader
        self._encoder = Encoder(loader=loader)
        self.objects: dict[ObjectId, bytes] = self._encoder.objects  # everything new, by id
        self._pack = new_packer().pack

    def encode(self, value: Any) -> bytes:
        """A value's encoding inside its parent; its new objects join ``objects``."""
        return self._encoder.encode_value(value)

    def map(self, view: MapView, changes: dict[str, bytes | None]) -> MapView | None:
        """``view`` with each key of ``changes`` set to that encoding (``None``: removed),
        or ``None`` if the result is small enough for the encoder to store as one node."""
        pack = self._pack
        levels = self._skeleton(MAP, view)
        firsts = levels.first_keys
        by_leaf: dict[int, dict[str, bytes | None]] = {}
        for key, enc in changes.items():
            by_leaf.setdefault(max(0, bisect_right(firsts, key) - 1), {})[key] = enc

        def load(k: int) -> list[Any]:
            entries = map_leaf_encodings(levels.leaf_id(k), self.loader.fetch(levels.leaf_id(k)))
            edits = by_leaf.get(k)
            if not edits:
                return [(kb, v) for _, kb, v in entries]
            merged = {key: (kb, v) for key, kb, v in entries}
            for key, enc in edits.items():
                if enc is None:
                    merged.pop(key, None)
                else:
                    merged[key] = (pack(key), enc)
            return [merged[key] for key in sorted(merged)]

        found = self._finish(MAP, levels, load, set(by_leaf), map_leaf_hash_size, first_key)
        return MapView(self.loader, *found) if found is not None else None

    def seq(self, view: SeqView, edits: list[SeqEdit]) -> SeqView | None:
        """``view`` with ``edits`` applied (sorted, not overlapping, in old positions; an
        insertion has ``start == end``), or ``None`` as ``map`` does."""
        levels = self._skeleton(SEQ, view)
        starts = levels.starts
        last = len(starts) - 1
        total = levels.total
        inserts: dict[int, list[bytes]] = {}
        cuts: list[tuple[int, int]] = []
        dirty: set[int] = set()
        for start, end, encs in edits:
            if encs:
                inserts.setdefault(start, []).extend(encs)
            if end > start:
                cuts.append((start, end))
            lo = min(last, bisect_right(starts, start) - 1)
            hi = min(last, bisect_right(starts, max(start, end - 1)) - 1)
            dirty.update(range(lo, hi + 1))
        cut_starts = [s for s, _ in cuts]

        def removed(p: int) -> bool:
            i = bisect_right(cut_starts, p) - 1
            return i >= 0 and p < cuts[i][1]

        def load(k: int) -> list[Any]:
            oid = levels.leaf_id(k)
            entries = seq_leaf_encodings(oid, self.loader.fetch(oid))
            if k not in dirty:
                return entries
            out: list[bytes] = []
            at = starts[k]
            for i, enc in enumerate(entries, at):
                out += inserts.get(i, ())
                if not removed(i):
                    out.append(enc)
            if k == last:
                out += inserts.get(total, ())
            return out

        found = self._finish(SEQ, levels, load, dirty, seq_leaf_hash_size, whole_entry)
        return SeqView(self.loader, *found) if found is not None else None

    # -- the tree ------------------------------------------------------------------------

    def _skeleton(self, kind: int, view: MapView | SeqView) -> _Skeleton:
        """The old tree's inner levels, read a level at a time."""
        root = self.loader.node(view.id)[1]
        tag = root[0]
        levels = inner_levels(self.loader, kind, bytes(view.id), root, self._pack)
        if levels:
            leaves = levels[0].entries
        else:  # the root is a single leaf
            n = len(root[2])
            leaves = [((self._pack(min(root[2])) if n else b""), REF_PREFIX + view.id, n) if kind == MAP
                      else (REF_PREFIX + view.id, n)]
        return _Skeleton(tag, levels, leaves)

    def _finish(self, kind: int, levels: _Skeleton, load: Callable[[int], list[Any]], dirty: set[int],
                leaf_hs: Callable[[Any], tuple[int, int]], first_of: Callable[[Any], Any]) -> tuple[ObjectId, Any] | None:
        """Cut the leaves anew around the ``dirty`` ones, then plan the inner levels;
        returns the new root's id and decoded node, or ``None`` (see ``map``)."""
        pack = self._pack
        tag = levels.tag
        leaves = levels.leaves
        cap = MAX_NODE_BYTES * LEAF_TARGET_BYTES // TARGET_NODE_BYTES
        new_leaves: list[Any] = []
        k = 0
        n = len(leaves)
        built: dict[ObjectId, bytes] = {}

        def store(payload: bytes) -> bytes:
            oid, data = object_bytes(kind, payload)
            built[oid] = data
            return REF_PREFIX + oid

        for first_dirty in sorted(dirty):
            if first_dirty < k:
                continue  # pulled into the run before
            new_leaves += leaves[k:first_dirty]
            k = first_dirty
            buf = load(k)
            k += 1
            at = 0
            while True:
                end, closed = cut_node(buf, at, leaf_hs, LEAF_TARGET_BYTES, cap)
                if end == len(buf) and not closed and k < n:
                    buf += load(k)  # the node runs on into the next leaf
                    k += 1
                    continue
                if end > at:
                    chunk = buf[at:end]
                    ref = store(leaf_payload(kind, tag, chunk, pack))
                    new_leaves.append((chunk[0][0], ref, end - at) if kind == MAP else (ref, end - at))
                at = end
                if at == len(buf):
                    if k < n and k in dirty:
                        buf += load(k)
                        k += 1
                        continue
                    break
        new_leaves += leaves[k:]
        if sum(e[-1] for e in new_leaves) <= SINGLE_NODE_ENTRIES:
            return None
        entries = new_leaves
        level = 1
        while len(entries) > 1:
            old = levels.levels[level - 1] if level - 1 < len(levels.levels) else None
            hash_size, old = inner_level_rule(entries, old)
            nodes: list[NodeRec] = []
            for item in plan_level(entries, hash_size, first_key if kind == MAP else whole_entry, old,
                                   TARGET_NODE_BYTES):
                if isinstance(item, NodeRec):
                    nodes.append(item)
                    continue
                start, end, closed = item
                chunk = entries[start:end]
                ref = store(inner_payload(kind, tag, level, chunk, pack))
                nodes.append(NodeRec(start, end, closed, ref, sum(c[-1] for c in chunk),
                                     chunk[0][0] if kind == MAP else None))
            entries = [(nd.first, nd.ref, nd.total) if kind == MAP else (nd.ref, nd.total) for nd in nodes]
            level += 1
        root = ObjectId(entries[0][-2][len(REF_PREFIX):])
        self.objects.update(built)
        data = built.get(root)
        return root, decode_node(root, data if data is not None else self.loader.fetch(root))[1]


class _Skeleton:
    """A stored tree's inner levels (``levels[0]`` is level 1: the leaves' entries) and
    its leaves as inner entries: ``(first key's encoding, reference, count)`` for maps,
    ``(reference, count)`` for lists."""

    def __init__(self, tag: Any, levels: list[Level], leaves: list[Any]) -> None:
        self.tag = tag
        self.levels = levels
        self.leaves = leaves
        counts = [e[-1] for e in leaves]
        self.starts = list(accumulate(counts, initial=0))[:-1]
        self.total = sum(counts)

    @property
    def first_keys(self) -> list[str]:
        """Each leaf's first key (maps)."""
        return [msgpack.unpackb(e[0], raw=False) if e[0] else "" for e in self.leaves]

    def leaf_id(self, k: int) -> ObjectId:
        return ObjectId(self.leaves[k][-2][len(REF_PREFIX):])


def inner_levels(loader: Loader, kind: int, oid: bytes, root: list[Any], pack: Callable[[Any], bytes]) -> list[Level]:
    """The inner levels of the stored tree ``oid`` (``root``, its decoded node), from level
    1 up, as the encoder keeps them (see ``trees.build_tree``), read a level at a time; empty
    for a single leaf. Each level's last node is marked open (perhaps cut at the end of
    its entries, not at a boundary): a re-cut rather than a reuse decides it."""
    nodes = [(oid, root)]
    levels: list[Level] = []  # filled top-down, reversed below
    while nodes[0][1][1] > 0:
        entries: list[Any] = []
        recs: list[NodeRec] = []
        for node_id, node in nodes:
            start = len(entries)
            entries += _inner_entries(kind, node, pack)
            recs.append(NodeRec(start, len(entries), True, REF_PREFIX + node_id, sum(e[-1] for e in entries[start:]),
                                entries[start][0] if kind == MAP else None))
        recs[-1] = recs[-1]._replace(closed=False)
        levels.append(Level(entries, recs))
        if nodes[0][1][1] == 1:
            break
        children = [e[-2][len(REF_PREFIX):] for e in entries]
        found = loader.fetch_many(children)
        nodes = [(c, decode_node(c, found[c])[1]) for c in children]
    levels.reverse()
    return levels


def _inner_entries(kind: int, node: list[Any], pack: Callable[[Any], bytes]) -> list[Any]:
    """An inner node's entries as the encoder built them."""
    if kind == MAP:
        return [(pack(k), REF_PREFIX + c, n) for k, c, n in zip(node[2], node[3], node[4])]
    return [(REF_PREFIX + c, n) for c, n in zip(node[2], node[3])]
