"""Entries -> a stored node or prolly tree, reusing what stood in their place before.

A container too large for one node is stored as a prolly tree (``snapvc.encoding.prolly``
plans its nodes): its level-0 entries (a list's element encodings, a map's (key, value)
encodings, a long text's chunks) are cut into leaves of about ``LEAF_TARGET_BYTES``, and
each level above holds a reference per node below, until one node remains. Given the
tree the same container (or whatever stood at its path) was stored as last time, the
nodes that come out the same are that tree's very nodes, taken without storing or
hashing them again, and each new node names the old node at its place as its delta base:
an append stores its last leaf and the spine above it. The encoder
(``snapvc.encoding.writer``) decides what the entries are; this module, how they are
stored.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from itertools import compress, count
from operator import is_not
from typing import Any, Final

from snapvc.encoding.nodes import inner_payload, leaf_payload
from snapvc.encoding.prolly import (
    LEAF_TARGET_BYTES,
    TARGET_NODE_BYTES,
    Level,
    NodeRec,
    first_key,
    inner_level_rule,
    plan_level,
    whole_entry,
)
from snapvc.objects import MAP, SEQ, TEXT

__all__ = ["build_tree", "SINGLE_NODE_ENTRIES", "SINGLE_NODE_MAX_BYTES", "Store"]

# A container of at most this many entries and bytes is one node; a larger one, a tree.
SINGLE_NODE_ENTRIES: Final = 64
SINGLE_NODE_MAX_BYTES: Final = 2 * LEAF_TARGET_BYTES

# Keeps a new object of a kind and payload, naming the object it replaces (a reference,
# or None) as its delta base; returns its reference.
Store = Callable[[int, bytes, "bytes | None"], bytes]


def build_tree(kind: int, tag: Any, entries: list[Any], leaf_hs: Any, first_of: Any,
               old_tree: list[Level] | None, old_ref: bytes | None, store: Store, pack: Callable[[Any], bytes],
               changed: list[int] | None = None, prefix: int | None = None) -> tuple[bytes, list[Level] | None]:
    """Store ``entries`` (through ``store``) as one node or a prolly tree; returns
    (reference, levels or None).

    ``old_tree``/``old_ref`` describe what the same container was stored as last time:
    unchanged nodes are reused, and each new node names the old node at its place as
    its delta base. ``changed`` (sorted positions), if given, names every entry that
    may differ from the old tree's, the rest being the same and as many: the levels
    are then planned in time that follows the changes (see ``plan_level``). ``prefix``,
    if given, is how many leading entries are known to equal the old tree's (an append)."""
    if len(entries) <= SINGLE_NODE_ENTRIES and _entries_size(kind, entries) <= SINGLE_NODE_MAX_BYTES:
        return store(kind, leaf_payload(kind, tag, entries, pack), old_ref), None
    levels: list[Level] = []
    level = 0
    hs = leaf_hs
    first = first_of
    while True:
        old = old_tree[level] if old_tree is not None and level < len(old_tree) else None
        if level > 0:
            hs, old = inner_level_rule(entries, old)
        plan = plan_level(entries, hs, first, old, LEAF_TARGET_BYTES if level == 0 else TARGET_NODE_BYTES,
                          changed, prefix)
        grown = old is None and level == 0 and old_ref is not None  # a single node that grew into a tree
        # The leading nodes reused where they were (all but the last few, for an append)
        # are taken in one C-speed pass: the work on a level follows its new nodes.
        old_nodes = old.nodes if old is not None else []
        lead = _same_prefix(plan, old_nodes) if old is not None else 0
        nodes: list[NodeRec] = old_nodes[:lead]  # the very nodes of plan[:lead]
        rebuilt: list[int] = []  # positions of the new nodes: the changed entries of the level above
        # ... provided every reused node kept its position (a split here and a merge
        # there can leave the count the same and the nodes between them shifted).
        aligned = old is not None
        for item in plan[lead:] if lead else plan:
            if isinstance(item, NodeRec):
                if aligned and not (len(nodes) < len(old_nodes) and old_nodes[len(nodes)] is item):
                    aligned = False
                nodes.append(item)
                continue
            rebuilt.append(len(nodes))
            start, end, closed = item
            chunk = entries[start:end]
            if level == 0:
                payload = leaf_payload(kind, tag, chunk, pack)
                count = (end - start) if kind != TEXT else sum(c for _, c in chunk)
                head = chunk[0][0] if kind == MAP else None
            else:
                payload = inner_payload(kind, tag, level, chunk, pack)
                count = sum(c[-1] for c in chunk)
                head = chunk[0][0] if kind == MAP else None
            # A new node names as delta base its own previous version, the old node that
            # started at the same entry (the last, growing node of a list, also when it
            # closes; a node an edit rewrote), whose bytes it mostly repeats. Measured:
            # basing nodes that start elsewhere on the node covering their start saves
            # nothing and lengthens the delta chains reads must decode.
            base = _node_at(old.nodes, start) if old is not None else (old_ref if grown and start == 0 else None)
            nodes.append(NodeRec(start, end, closed, store(kind, payload, base), count, head))
        levels.append(Level(entries, nodes))
        if len(nodes) == 1:
            return nodes[0].ref, levels
        if changed is not None:
            changed = rebuilt if aligned and old is not None and len(nodes) == len(old.nodes) else None
        # The entries of the level above: those of the leading reused nodes are the old
        # level's own (it was built from the same nodes), known equal to them.
        above = old_tree[level + 1] if lead and old_tree is not None and level + 1 < len(old_tree) else None
        if above is None:
            lead = 0
        fresh = nodes[lead:] if lead else nodes
        if kind == MAP:
            entries = [(nd.first, nd.ref, nd.total) for nd in fresh]
        else:
            entries = [(nd.ref, nd.total) for nd in fresh]
        if lead and above is not None:  # (lead is 0 when there is no level above)
            entries[:0] = above.entries[:lead]
        prefix = lead if lead else None
        first = first_key if kind == MAP else whole_entry
        level += 1


def _same_prefix(plan: list[Any], nodes: list[NodeRec]) -> int:
    """How many leading items of ``plan`` are the very nodes of ``nodes`` at the same
    places (compared by identity, in C)."""
    return next(compress(count(), map(is_not, plan, nodes)), min(len(plan), len(nodes)))


def _node_at(nodes: list[NodeRec], start: int) -> bytes | None:
    """The reference of the node among ``nodes`` that starts at ``start``, if one does."""
    i = bisect_left(nodes, start, key=lambda nd: nd.start)
    return nodes[i].ref if i < len(nodes) and nodes[i].start == start else None


def _entries_size(kind: int, entries: list[Any]) -> int:
    if kind == SEQ:
        return sum(map(len, entries))
    return sum([len(a) + (len(b) if kind == MAP else 4) for a, b in entries])
