"""Content-defined node boundaries for large maps, lists and chunk lists (prolly trees).

A node ends after an entry whose 32-bit hash falls below ``size * 2**32 / TARGET_NODE_BYTES``:
each entry closes its node with a probability proportional to its size, so nodes hold
about ``TARGET_NODE_BYTES`` whatever the entries are, and a boundary depends only on the
entry itself (its key for maps, its encoding for lists, the child id for inner nodes).
A node is also closed once it reaches ``MAX_NODE_BYTES``. Because of that, the same
entries always give the same nodes, whatever the edit history, and an edit only rewrites
the nodes it touches: ``plan_level`` reuses every old node whose entries are unchanged.

The encoder (``snapvc.encoding.writer``) builds trees from a container's entries; the
splicer (``snapvc.encoding.splice``) rebuilds a stored tree around a few edited entries.
Both must cut exactly the same nodes, so both take from here, as their one seam: the
levels' target sizes (``LEAF_TARGET_BYTES``, ``TARGET_NODE_BYTES``), ``cut_node``,
``plan_level``, and the functions giving each kind of entry's boundary hash and size
(``map_leaf_hash_size``, ``seq_leaf_hash_size``, ``text_leaf_hash_size``,
``inner_hash_size``; for an inner level, ``inner_level_rule`` chooses between it and
``long_key_hash_size``) and the value ``plan_level`` matches old nodes by (``first_key``,
``whole_entry``).
"""

from __future__ import annotations

import zlib
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from snapvc.encoding.values import REF_PREFIX

__all__ = ["TARGET_NODE_BYTES", "MAX_NODE_BYTES", "LEAF_TARGET_BYTES", "NodeRec", "Level", "plan_level", "cut_node",
           "entry_hash", "common_prefix", "map_leaf_hash_size", "seq_leaf_hash_size", "text_leaf_hash_size",
           "inner_hash_size", "first_key", "whole_entry", "inner_level_rule"]

TARGET_NODE_BYTES: Final = 512
MAX_NODE_BYTES: Final = 16 * TARGET_NODE_BYTES
# Leaves hold inline values (messages, say), inner nodes hold references: leaves are
# larger, so a long list of small dicts is a few hundred objects, not one per element.
LEAF_TARGET_BYTES: Final = 4096
_MIX: Final = 0x9E3779B1


class NodeRec(NamedTuple):
    """One node of a level: entries ``[start, end)``; ``closed`` if it ended at a boundary
    (not at the end of the input); ``ref`` its reference encoding once stored; ``total``
    the entries (bytes, for text) below it; ``first`` its first key (maps)."""

    start: int
    end: int
    closed: bool
    ref: bytes
    total: int
    first: Any


class Level(NamedTuple):
    """One level of a tree: its entries (level 0: the container's; above: one per node
    of the level below) and the nodes they are cut into."""

    entries: list[Any]
    nodes: list[NodeRec]


# -- the entries, as the encoder and the splicer both cut them ----------------------------
# A level's entries are: for a MAP leaf, (key encoding, value encoding); for a SEQ leaf,
# the value encoding; for a TEXT leaf, (chunk reference, chunk length); for an inner node,
# (first key encoding, child reference, count) under a MAP and (child reference, count)
# otherwise. Each ``*_hash_size`` gives an entry's (boundary hash, size in bytes).


def map_leaf_hash_size(entry: tuple[bytes, bytes]) -> tuple[int, int]:
    """A MAP leaf entry's boundary depends on its key alone: a changed value keeps the cuts."""
    k, v = entry
    return entry_hash(k), len(k) + len(v)


def seq_leaf_hash_size(entry: bytes) -> tuple[int, int]:
    return entry_hash(entry), len(entry)


def text_leaf_hash_size(entry: tuple[bytes, int]) -> tuple[int, int]:
    return entry_hash(entry[0]), len(entry[0]) + 4


def inner_hash_size(entry: tuple[Any, ...]) -> tuple[int, int]:
    """An inner entry's boundary depends on its child's reference."""
    ref = entry[-2]
    return entry_hash(ref), len(ref) + 4 + (len(entry[0]) if len(entry) == 3 else 0)


# -- inner levels of maps with long keys ---------------------------------------------------
# An inner MAP entry holds its child's first key, and an entry of at least
# ``TARGET_NODE_BYTES`` closes its node by itself. When every entry of a level but the last
# is that long (keys of about 480 bytes or more, each first in its node), each node holds
# one entry, and the level above has the same first keys again: cut by the rule above,
# such a level would never come down to one root. Such a level (a *long-key level*) is
# cut instead by its child references alone, closing a node after an entry with
# probability 1/4 (``_LONG_KEY_ENTRY_SIZE``): about four entries a node, at most 64, so
# the levels shrink and every long key is held by a bounded number of nodes. No other
# level is cut this way, so every tree the rule above completes keeps its nodes and ids.

_LONG_KEY_ENTRY_SIZE: Final = TARGET_NODE_BYTES // 4


def long_key_hash_size(entry: tuple[Any, ...]) -> tuple[int, int]:
    """An entry of a long-key level: its boundary depends on its child's reference, and
    its size is a fixed share of the target, whatever the length of its key."""
    return entry_hash(entry[-2]), _LONG_KEY_ENTRY_SIZE


def is_long_key_level(entries: list[Any], n: int | None = None) -> bool:
    """True if the inner level of ``entries[:n]`` is a long-key level: more than one
    entry, and every one but the last closes its node by its size alone. The scan stops
    at the first entry that does not, which for almost every level is the first."""
    end = len(entries) if n is None else n
    return end > 1 and all(inner_hash_size(entries[i])[1] >= TARGET_NODE_BYTES for i in range(end - 1))


def inner_level_rule(entries: list[Any], old: Level | None) -> tuple[Callable[[Any], tuple[int, int]], Level | None]:
    """The boundary rule ``(hash_size, old level to reuse nodes from)`` for an inner
    level: ``inner_hash_size``, or ``long_key_hash_size`` for a long-key level. The old
    level's nodes are reused only if they were cut by the same rule."""
    long_keys = is_long_key_level(entries)
    if old is not None and old.nodes and is_long_key_level(old.entries, old.nodes[-1].end) != long_keys:
        old = None
    return (long_key_hash_size if long_keys else inner_hash_size), old


def first_key(entry: tuple[Any, ...]) -> Any:
    """What ``plan_level`` matches a MAP level's old nodes by: the first entry's key."""
    return entry[0]


def whole_entry(entry: Any) -> Any:
    """What ``plan_level`` matches a SEQ or TEXT level's old nodes by: the first entry."""
    return entry


def entry_hash(enc: bytes) -> int:
    """A 32-bit boundary hash of an encoding: the id's bytes for a reference, else a mixed CRC."""
    if enc.startswith(REF_PREFIX):
        return int.from_bytes(enc[3:7], "little")
    return (zlib.crc32(enc) * _MIX) & 0xFFFFFFFF


def common_prefix(a: list[Any], b: list[Any]) -> int:
    """Length of the longest common prefix of two lists (C-speed slice comparisons)."""
    m = min(len(a), len(b))
    if a[:m] == b[:m]:
        return m
    lo, hi = 0, m  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def plan_level(
    entries: list[Any],
    hash_size: Callable[[Any], tuple[int, int]],
    first_of: Callable[[Any], Any],
    old: Level | None,
    target: int = TARGET_NODE_BYTES,
    changed: list[int] | None = None,
    prefix: int | None = None,
) -> list[NodeRec | tuple[int, int, bool]]:
    """Split ``entries`` into nodes, reusing the nodes of ``old`` wherever entries are unchanged.

    Returns, in order, reused ``NodeRec``s (shifted to their new positions) and
    ``(start, end, closed)`` for each node that must be built. ``changed`` (sorted), if
    given, names every position whose entry may differ from ``old``'s, the others being
    the same and as many: then the work follows the changes, not the level's length.
    ``prefix``, if given, is how many leading entries are known to equal ``old``'s (an
    append: the comparison that would find it is skipped).
    """
    n = len(entries)
    if changed is not None and old is not None and old.nodes and old.nodes[-1].end == n:
        return _plan_changed(entries, hash_size, old, changed, target)
    out: list[NodeRec | tuple[int, int, bool]] = []
    i = 0
    by_first: dict[Any, NodeRec] | None = None
    old_entries: list[Any] = []
    if old is not None:
        old_entries, old_nodes = old
        p = prefix if prefix is not None else common_prefix(entries, old_entries)
        k = bisect_right(old_nodes, p, key=lambda nd: nd.end)
        if k and not old_nodes[k - 1].closed and not (p == n and old_nodes[k - 1].end == n):
            k -= 1
        out.extend(old_nodes[:k])
        i = old_nodes[k - 1].end if k else 0
        if i >= n:
            return out
        by_first = {first_of(old_entries[nd.start]): nd for nd in old_nodes[k:]}
    # The old level's length is where its last node ends (its entry list may since have
    # grown in place, for an append).
    old_n = old.nodes[-1].end if old is not None and old.nodes else 0
    cap = MAX_NODE_BYTES * target // TARGET_NODE_BYTES
    while i < n:
        if by_first:
            cand = by_first.get(first_of(entries[i]))
            if cand is not None:
                length = cand.end - cand.start
                if (cand.closed or (i + length == n and cand.end == old_n)) and entries[i : i + length] == old_entries[
                    cand.start : cand.end
                ]:
                    out.append(NodeRec(i, i + length, cand.closed, cand.ref, cand.total, cand.first))
                    i += length
                    continue
        j, closed = cut_node(entries, i, hash_size, target, cap)
        out.append((i, j, closed))
        i = j
    return out


def cut_node(entries: list[Any], i: int, hash_size: Callable[[Any], tuple[int, int]], target: int,
         cap: int) -> tuple[int, bool]:
    """``(end, closed)`` of the node that starts at entry ``i``: it ends after the first
    entry whose hash falls below its share of ``target``, or once it holds ``cap`` bytes
    (closed), or with the entries (open)."""
    n = len(entries)
    size = 0
    j = i
    while j < n:
        h, s = hash_size(entries[j])
        size += s
        j += 1
        if h * target < (s << 32) or size >= cap:
            return j, True
    return n, False


def _plan_changed(
    entries: list[Any],
    hash_size: Callable[[Any], tuple[int, int]],
    old: Level,
    changed: list[int],
    target: int,
) -> list[NodeRec | tuple[int, int, bool]]:
    """``plan_level`` when only the entries at ``changed`` differ from ``old``'s: old nodes
    before, between and after the changes are reused whole; from the start of a node
    holding a change, entries are cut anew until a new boundary falls where an old node
    began (from there on, same entries give the same boundaries)."""
    nodes = old.nodes
    n = len(entries)
    ends = [nd.end for nd in nodes]
    starts = {nd.start: k for k, nd in enumerate(nodes)}
    cap = MAX_NODE_BYTES * target // TARGET_NODE_BYTES
    out: list[NodeRec | tuple[int, int, bool]] = []
    i = 0
    k = 0  # the old node that starts at i
    c = 0  # the first change at or after i
    while i < n:
        c = bisect_left(changed, i, lo=c)
        upto = changed[c] if c < len(changed) else n
        reuse = bisect_right(ends, upto, lo=k)  # old nodes that end by the next change
        if reuse > k:
            out.extend(nodes[k:reuse])
            i = ends[reuse - 1]
            k = reuse
            continue
        while True:  # cut anew until a boundary falls where an old node began
            j, closed = cut_node(entries, i, hash_size, target, cap)
            out.append((i, j, closed))
            i = j
            if j == n:
                return out
            if j in starts:  # every change before j is in the nodes just cut
                break
        k = starts[i]
    return out
