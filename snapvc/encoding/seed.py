"""What a checkout hands out, taught to the encoder: the first commit after a load costs
the change, not the state.

``Loader.materialize`` builds fresh objects, which the encoder has never met: without
more, the first commit after ``repo.checkout``, ``repo.state()`` or a new process would
encode the whole state again (storing nothing new, but walking every message). The
``Seeder`` walks the value alongside the objects it was read from and gives the cache
(``EncodeCache.seed``) an entry for each container stored as an object of its own and
each long string: its reference, its elements' encodings cut from the leaves, its tree,
and a flat snapshot of everything below it (``DeepSnapshot.of``). Those entries are then
checked exactly as the ones of containers the encoder encoded itself: by identity, so a
value changed in place after the checkout is seen and stored.

Containers stored inline in their parent (small ones) get no entry of their own: they
cost little to encode, and their parent's snapshot covers them. A container whose
stored form the encoder would not make from its value (a small single node with no
reference, which the encoder would put inline) is left to the encoder, as is a typed
value stored as an object of its own, and a container of more than ``SEED_MAX_ENTRIES``
entries.
"""

from __future__ import annotations

from itertools import compress
from operator import methodcaller, not_
from typing import Any

from snapvc.encoding.adapters import adapter_for_value
from snapvc.encoding.cache import IMMUTABLE_TYPES, MUTABLE_CONTAINERS, CacheEntry, DeepSnapshot, EncodeCache
from snapvc.encoding.nodes import TAG_DICT, TAG_TUPLE, decode_node, map_leaf_encodings, seq_leaf_encodings
from snapvc.encoding.prolly import Level, NodeRec
from snapvc.encoding.reader import Loader
from snapvc.encoding.splice import inner_levels
from snapvc.encoding.values import REF_PREFIX, new_packer
from snapvc.encoding.writer import INLINE_STR_MAX, SINGLE_NODE_ENTRIES
from snapvc.objects import MAP, SEQ

__all__ = ["Seeder", "SEED_MAX_ENTRIES"]

# A container of more entries than this is not taught (nor what is below it): cutting the
# encodings of a million list elements from their leaves takes a few hundred milliseconds,
# more than the checkout itself; the first commit after the load encodes it anew.
SEED_MAX_ENTRIES = 50_000


class Seeder:
    """Teaches an ``EncodeCache`` the encodings of a value just materialized from the
    objects ``loader`` reads (see the module notes)."""

    def __init__(self, loader: Loader, cache: EncodeCache) -> None:
        self.loader = loader
        self.cache = cache
        self._pack = new_packer().pack

    def seed(self, oid: bytes, value: Any) -> None:
        """``value`` is what ``loader.materialize(oid)`` returned, unchanged since: the
        root of a state. Replaces what an earlier load taught the cache."""
        self.cache.start_loading()
        self._seed(oid, value, (), root=True)

    def _seed(self, oid: bytes, value: Any, path: tuple[Any, ...], root: bool = False) -> None:
        t = type(value)
        if t is str or t is bytes:
            if len(value) > INLINE_STR_MAX:  # never inline, whatever its UTF-8 length
                self.cache.seed(value, CacheEntry(value, (), (), REF_PREFIX + oid, [], None, []), path, None)
            return
        if t is dict:
            self._container(oid, value, path, MAP, root)
        elif t is list or t is tuple:
            self._container(oid, value, path, SEQ, root)

    def _container(self, oid: bytes, value: Any, path: tuple[Any, ...], kind: int, root: bool) -> None:
        raw = self.loader.fetch(oid)
        got_kind, node = decode_node(oid, raw, rebuild_types=False)
        if got_kind != kind or node[0] != (TAG_TUPLE if type(value) is tuple else TAG_DICT):
            return
        if not root and node[1] == 0 and not node[3] and len(node[2]) <= SINGLE_NODE_ENTRIES:
            return  # the encoder would put it inline: let it
        if len(value) > SEED_MAX_ENTRIES:
            return  # cut from its leaves, element by element, it would cost a checkout more than it saves
        levels, entries = self._tree(kind, oid, raw, node)
        n = len(entries)
        if n != len(value):
            return
        vals: tuple[Any, ...] | list[Any]
        at: tuple[Any, ...] | range
        if kind == MAP:
            keys = tuple(value)
            if list(keys) != [k for k, _, _ in entries]:  # materialized in stored (code point) order
                return
            vals = tuple(value.values())
            pairs = levels[0].entries if levels is not None else [(kb, v) for _, kb, v in entries]
            encs = [v for _, _, v in entries]
            at = keys
        else:
            keys = ()
            vals = list(value)
            pairs = entries
            encs = entries
            at = range(n)
        # Found in C-speed passes: a list of strings has no element to visit in Python.
        kids = [(at[i], vals[i], encs[i]) for i in
                compress(range(n), map(not_, map(IMMUTABLE_TYPES.__contains__, map(type, vals))))]
        if any(type(v) not in MUTABLE_CONTAINERS and adapter_for_value(v) is None for _, v, _ in kids):
            return  # a value no state holds: left to the encoder, which names it
        refs = []
        if REF_PREFIX in b"".join(encs):
            refs = [(at[i], vals[i], encs[i]) for i in
                    compress(range(n), map(methodcaller("startswith", REF_PREFIX), encs))]
        # The root of a state is checked kid by kid (as the encoder does it): a flat
        # snapshot of the whole state would be copied at every commit.
        deep = None if root else DeepSnapshot.of([v for _, v, _ in kids])
        entry = CacheEntry(value, keys, vals, REF_PREFIX + oid, kids, levels, pairs)
        if kind == MAP:
            entry.sorted_keys = keys
            entry.sorted_vals = vals
        entry.deep = deep
        self.cache.seed(value, entry, path, (levels, kind, node[0]))
        for step, v, enc in refs:
            self._seed(enc[len(REF_PREFIX):], v, (*path, step))

    def _tree(self, kind: int, oid: bytes, raw: bytes, node: list[Any]) -> tuple[list[Level] | None, list[Any]]:
        """(levels as the encoder keeps them, or None for a single node; the level-0
        entries: ``(key, key encoding, value encoding)`` for maps, value encodings for lists)."""
        if node[1] == 0:
            return None, self._leaf(kind, oid, raw)
        levels = inner_levels(self.loader, kind, oid, node, self._pack)
        leaves = [e[-2][len(REF_PREFIX):] for e in levels[0].entries]
        found = self.loader.fetch_many(leaves)
        entries: list[Any] = []
        recs: list[NodeRec] = []
        for leaf in leaves:
            start = len(entries)
            entries += self._leaf(kind, leaf, found[leaf])
            recs.append(NodeRec(start, len(entries), True, REF_PREFIX + leaf, len(entries) - start,
                                entries[start][1] if kind == MAP else None))
        recs[-1] = recs[-1]._replace(closed=False)  # perhaps open: re-cut rather than reused
        level0 = [(kb, v) for _, kb, v in entries] if kind == MAP else entries
        return [Level(level0, recs), *levels], entries

    def _leaf(self, kind: int, oid: bytes, raw: bytes) -> list[Any]:
        if kind == MAP:
            return map_leaf_encodings(oid, raw)
        return seq_leaf_encodings(oid, raw)
