"""What a checkout hands out, taught to the encoder: the first commit after a load costs
the change, not the state.

``Loader.materialize`` builds fresh objects, which the encoder has never met: without
more, the first commit after ``repo.checkout``, ``repo.state()`` or a new process would
encode the whole state again (storing nothing new, but walking every message). Teaching
the encoder costs more than the checkout itself, and a checkout is often not followed by
a commit, so it is done in two steps:

- at the checkout, ``LoadRecord`` notes what was built from each stored object (the
  log ``materialize`` gives, ``BuildLog``): each container stored as an object of its
  own, with what it held (by identity: its keys and values, its items), and each long
  string. A state of plain data is recorded so alone: nothing below its containers is
  visited. Of any other (one holding a typed value, a tuple inline, a datetime...), a
  flat snapshot of everything below each container is taken too (``DeepSnapshot.of``).
  That is all a checkout pays: nothing decoded or encoded again;
- at the next commit of that branch, the ``Seeder`` gives the cache (``EncodeCache.seed``)
  an entry for each recorded container and long string: its reference, what it held
  when it was built, its elements' encodings cut from the stored leaves, its tree, and
  its snapshot. What the value holds by then does not enter an entry.

Of a plain state, what each container held when it was built is checked at that commit
against the stored objects, before it is snapshotted: the containers it held inline
must encode to their stored bytes (``Seeder._as_stored``), and each child stored as an
object of its own must pass the same check and still hold what it held. A container
that fails gets no snapshot: its entry is checked kid by kid, as a state's root is.

Those entries are then checked exactly as the ones of containers the encoder encoded
itself: by identity against what the container holds now, and the snapshot against
everything below, so a value changed in place after the checkout (before or after the
record was taken from it, which is before the caller gets it) is seen and stored.

Containers stored inline in their parent (small ones) get no entry of their own: they
cost little to encode, and their parent's snapshot covers them. A container whose
stored form the encoder might not make from its value (a single node with no reference
small enough to be put inline: only a state's root is stored so) is left to the
encoder, as is a typed value stored as an object of its own, and a container of more
than ``SEED_MAX_ENTRIES`` entries.
"""

from __future__ import annotations

from itertools import compress
from operator import eq, is_, methodcaller, not_
from typing import Any, NamedTuple

import msgpack

from snapvc.encoding.adapters import adapter_for_value
from snapvc.encoding.cache import IMMUTABLE_TYPES, MUTABLE_CONTAINERS, CacheEntry, DeepSnapshot, EncodeCache
from snapvc.encoding.nodes import (TAG_DICT, TAG_TUPLE, decode_node, map_leaf_encodings, seq_leaf_encodings,
                                   seq_leaf_packed)
from snapvc.encoding.prolly import Level, NodeRec
from snapvc.encoding.reader import BuildLog, Loader
from snapvc.encoding.splice import inner_levels
from snapvc.encoding.values import REF_PREFIX, new_packer
from snapvc.encoding.writer import INLINE_NODE_MAX, INLINE_STR_MAX, SINGLE_NODE_ENTRIES
from snapvc.objects import MAP, SEQ

__all__ = ["LoadRecord", "Seeder", "SEED_MAX_ENTRIES"]

# A container of more entries than this is not taught (nor what is below it): cutting the
# encodings of a million list elements from their leaves takes a few hundred milliseconds,
# more than the checkout itself; the first commit after the load encodes it anew.
SEED_MAX_ENTRIES = 50_000

_is_ref = methodcaller("startswith", REF_PREFIX)
# What a leaf's stored bytes hold besides its entries when none is a reference: the
# kind, the payload's array header, a one-byte tag and level, and the empty list of
# references (``snapvc.encoding.nodes``).
_LEAF_OVERHEAD = 5


def _may_be_inline(node: list[Any], size: int) -> bool:
    """Whether the encoder might write the container stored as ``node`` (``size`` bytes
    with its header) inline in its parent (``Encoder._map_node``, ``_encode_seq``): a
    single leaf holding no reference whose entries fit in ``INLINE_NODE_MAX`` bytes. Only
    the root of a state is stored so; a taught reference there would give the same
    state another id."""
    return node[1] == 0 and not node[3] and len(node[2]) <= SINGLE_NODE_ENTRIES and (
        size - _LEAF_OVERHEAD <= INLINE_NODE_MAX)


class _Held(NamedTuple):
    """A container as it was built: the object, its stored id, what it held (a dict's
    keys and values, a list's or tuple's items) and the snapshot of all below it (None
    for the root of a state, checked kid by kid, or where nothing can be snapshotted).
    Of a plain state (``LoadRecord.plain``) only the object and its id, and whether it
    is taught (``teach``: else it is only checked, for its parent's sake)."""

    obj: Any
    oid: bytes
    keys: tuple[Any, ...]
    vals: tuple[Any, ...]
    deep: DeepSnapshot | None
    teach: bool = True


class LoadRecord:
    """What ``Loader.materialize(root, built)`` built, taken before anyone could change
    it (see the module notes): what the ``Seeder`` teaches the next commit.

    A plain state (``BuildLog.plain``: no value stored as an extension type) is recorded
    by its containers and long strings alone, nothing below them (``plain``): what its
    containers hold at the next commit is checked then, against the stored objects
    (``Seeder._as_stored``), and only then snapshotted. The other states are snapshotted
    here, as they were built."""

    __slots__ = ("root", "value", "held", "texts", "plain")

    def __init__(self, root: bytes, built: BuildLog) -> None:
        self.root = root
        objects = built.objects
        self.plain = built.plain
        self.value = objects[-1].value if objects else None  # the state: built last, around all else
        self.held: dict[int, _Held] = {}  # by id of the container (held, so the id stays its own)
        self.texts: dict[int, tuple[Any, bytes]] = {}  # long str and bytes: (value, stored id)
        for oid, value, node, size in objects:
            t = type(value)
            if node is None:
                if len(value) > INLINE_STR_MAX:  # never inline, whatever its UTF-8 length
                    self.texts[id(value)] = (value, oid)
                continue
            is_root = value is self.value
            # Not taught: a container of many entries (see ``SEED_MAX_ENTRIES``); one the
            # encoder might put inline (it is left to it).
            teach = len(value) <= SEED_MAX_ENTRIES and (is_root or not _may_be_inline(node, size))
            if not teach and not self.plain:
                continue
            if t is dict:
                keys, vals = tuple(value), tuple(value.values())
            else:
                keys, vals = (), tuple(value)
            if self.plain:
                self.held[id(value)] = _Held(value, oid, keys, vals, None, teach)
                continue
            # The root of a state is checked kid by kid (as the encoder does it): a flat
            # snapshot of the whole state would be copied at every commit.
            deep = None if is_root else DeepSnapshot.of(
                list(compress(vals, map(not_, map(IMMUTABLE_TYPES.__contains__, map(type, vals))))))
            self.held[id(value)] = _Held(value, oid, keys, vals, deep)


class Seeder:
    """Teaches an ``EncodeCache`` the encodings of a value recorded as it was
    materialized from the objects ``loader`` reads (see the module notes)."""

    def __init__(self, loader: Loader, cache: EncodeCache) -> None:
        self.loader = loader
        self.cache = cache
        self._pack = new_packer().pack
        self._strict = msgpack.Packer(use_bin_type=True, strict_types=True, autoreset=True).pack
        self._record: LoadRecord | None = None

    def seed(self, record: LoadRecord) -> None:
        """Teach what ``record`` recorded (whatever the state holds now, or whether it is
        what is committed: a state rebuilt around the loaded containers reuses them).
        Replaces what an earlier load taught the cache."""
        self.cache.start_loading()
        self._record = record
        self._seed(record.root, record.value, (), root=True)

    def _seed(self, oid: bytes, value: Any, path: tuple[Any, ...], root: bool = False) -> bool:
        """Teach ``value``, stored as ``oid``, and what it holds. True if it was built
        from ``oid`` and, in a plain state, still holds what is stored there: only then
        may its parent's entry name ``oid`` for it."""
        record = self._record
        assert record is not None
        t = type(value)
        if t is str or t is bytes:
            text = record.texts.get(id(value))
            if text is not None and text[0] is value and text[1] == oid:
                self.cache.seed(value, CacheEntry(value, (), (), REF_PREFIX + oid, [], None, []), path, None)
                return True
            return False
        held = record.held.get(id(value))
        if held is None or held.obj is not value or held.oid != oid:
            return False
        if t is dict:
            return self._container(held, path, MAP, root)
        if t is list or t is tuple:
            return self._container(held, path, SEQ, root)
        return False

    def _container(self, held: _Held, path: tuple[Any, ...], kind: int, root: bool) -> bool:
        assert self._record is not None
        plain = self._record.plain
        oid, value = held.oid, held.obj
        if plain and not held.teach and len(held.vals) > SEED_MAX_ENTRIES:
            return False  # not cut from its leaves (see ``SEED_MAX_ENTRIES``): nor is its parent taught
        keys, vals = held.keys, held.vals
        raw = self.loader.fetch(oid)
        got_kind, node = decode_node(oid, raw, rebuild_types=False)
        if got_kind != kind or node[0] != (TAG_TUPLE if type(value) is tuple else TAG_DICT):
            return False
        levels, entries, checked = self._tree(kind, oid, raw, node, vals if plain else None)
        n = len(entries)
        if n != len(vals):
            return False
        at: tuple[Any, ...] | range
        if kind == MAP:
            if list(keys) != [k for k, _, _ in entries]:  # materialized in stored (code point) order
                return False
            pairs = levels[0].entries if levels is not None else [(kb, v) for _, kb, v in entries]
            encs = [v for _, _, v in entries]
            at = keys
        else:
            pairs = entries
            encs = entries
            at = range(n)
        # Found in C-speed passes: a list of strings has no element to visit in Python.
        mutable = list(compress(range(n), map(not_, map(IMMUTABLE_TYPES.__contains__, map(type, vals)))))
        kids = [(at[i], vals[i], encs[i]) for i in mutable]
        if any(type(v) not in MUTABLE_CONTAINERS and adapter_for_value(v) is None for _, v, _ in kids):
            return False  # a value no state holds: left to the encoder, which names it
        is_ref = list(map(_is_ref, encs))
        refs = [(at[i], vals[i], encs[i]) for i in compress(range(n), is_ref)]
        deep = None
        as_stored = True
        if plain:
            # Is all below it as stored? The containers it held inline when it was built
            # are checked here (the str, int... it held cannot have changed), each child
            # stored as an object of its own by its own check. Only then is it snapshotted
            # (now); else its entry is checked kid by kid, as a root's is (``reuse``),
            # and what changed is encoded anew.
            if not root and not checked:
                inline = [(v, enc) for _, v, enc in kids if not enc.startswith(REF_PREFIX)]
                as_stored = self._as_stored([v for v, _ in inline], [enc for _, enc in inline])
            for step, v, enc in refs:
                as_stored = self._seed(enc[len(REF_PREFIX):], v, (*path, step)) and as_stored
            # Its parent's snapshot, taken now, holds what it holds now: as built?
            still = len(value) == n and all(map(is_, value, keys if kind == MAP else vals)) and (
                kind != MAP or all(map(is_, value.values(), vals)))
            if not held.teach:
                return as_stored and still
            if as_stored and not root:
                deep = DeepSnapshot.of([vals[i] for i in mutable])
            as_stored = as_stored and still
        elif not root:
            deep = held.deep
        entry = CacheEntry(value, keys, list(vals) if kind == SEQ else vals, REF_PREFIX + oid, kids, levels, pairs)
        if kind == MAP:
            entry.sorted_keys = keys
            entry.sorted_vals = vals
        entry.deep = deep
        self.cache.seed(value, entry, path, (levels, kind, node[0]))
        if not plain:
            for step, v, enc in refs:
                self._seed(enc[len(REF_PREFIX):], v, (*path, step))
        return as_stored

    def _as_stored(self, values: list[Any], encs: list[bytes]) -> bool:
        """Whether ``values`` (plain data, each stored inline) encode to ``encs`` now,
        found in one C-speed pass: msgpack, strict as to types (a tuple, a subclass or
        an extension type is not plain data, and fails), gives each plain value the
        encoder's bytes, and equal bytes decode to values of the same types; a value
        changed in place since the checkout encodes otherwise."""
        try:
            return all(map(eq, map(self._strict, values), encs))
        except (TypeError, ValueError, OverflowError):
            return False

    def _tree(self, kind: int, oid: bytes, raw: bytes, node: list[Any],
              vals: tuple[Any, ...] | None) -> tuple[list[Level] | None, list[Any], bool]:
        """(levels as the encoder keeps them, or None for a single node; the level-0
        entries: ``(key, key encoding, value encoding)`` for maps, value encodings for lists;
        whether ``vals``, what the container held when built, if given, were found to
        encode to them all: ``_leaf``)."""
        if node[1] == 0:
            return (None, *self._leaf(kind, oid, raw, vals, 0))
        levels = inner_levels(self.loader, kind, oid, node, self._pack)
        leaves = [e[-2][len(REF_PREFIX):] for e in levels[0].entries]
        found = self.loader.fetch_many(leaves)
        entries: list[Any] = []
        recs: list[NodeRec] = []
        checked = True
        for leaf in leaves:
            start = len(entries)
            got, leaf_checked = self._leaf(kind, leaf, found[leaf], vals, start)
            entries += got
            checked = checked and leaf_checked
            recs.append(NodeRec(start, len(entries), True, REF_PREFIX + leaf, len(entries) - start,
                                entries[start][1] if kind == MAP else None))
        recs[-1] = recs[-1]._replace(closed=False)  # perhaps open: re-cut rather than reused
        level0 = [(kb, v) for _, kb, v in entries] if kind == MAP else entries
        return [Level(level0, recs), *levels], entries, checked

    def _leaf(self, kind: int, oid: bytes, raw: bytes, vals: tuple[Any, ...] | None,
              at: int) -> tuple[list[Any], bool]:
        """The entries of a leaf, and whether ``vals[at:]`` (if given) were found to encode
        to them: a list's leaf holding no reference is read by packing them (in C, not
        element by element in Python), and they are then checked too."""
        if kind == MAP:
            return map_leaf_encodings(oid, raw), False
        if vals is not None:
            encs = seq_leaf_packed(oid, raw, vals, at, self._strict)
            if encs is not None:
                return encs, True
        return seq_leaf_encodings(oid, raw), False
