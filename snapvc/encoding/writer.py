"""Value → objects: the encoder that turns an agent's state into content-addressed objects.

Rules (all of them functions of the value alone, so the same state always gives the
same root id, whatever the dict insertion order or edit history):

- scalars, and str/bytes up to ``INLINE_STR_MAX`` bytes, are inline in their parent;
- longer str/bytes become a TEXT object; beyond ``CHUNK_THRESHOLD`` bytes they are cut
  into content-defined chunks (``snapvc.encoding.chunker``), each a BLOB, so an edit in
  the middle of a long document stores about one new chunk;
- a dict, list or tuple whose encoding is at most ``INLINE_NODE_MAX`` bytes and holds no
  reference is inline; otherwise it is a MAP or SEQ object; beyond
  ``SINGLE_NODE_ENTRIES`` entries or ``SINGLE_NODE_MAX_BYTES`` bytes it is a prolly tree
  (``snapvc.encoding.prolly``) whose leaves hold about ``LEAF_TARGET_BYTES``, stored by
  ``snapvc.encoding.trees``.

Commit cost follows what changed. The encoder keeps, per container object it has seen,
a shallow snapshot of its contents (which objects it held, by identity) and what it
encoded to (its ``CacheEntry`` in the ``EncodeCache``, ``snapvc.encoding.cache``). When
the next state holds the same container with the same contents, its encoding is reused
without re-serializing or re-hashing anything below it (when exactly: the one rule in
``snapvc.encoding.reuse``); a changed
list or map re-encodes only its changed entries and rebuilds only the tree nodes they
touch. Containers mutated in place are detected by the snapshot check, so reuse is
always safe. A caller that tracks every change (``snapvc.State``) may instead name the
dirty paths; everything off them is then trusted unchanged (``Encoder.encode_root``).

Three more sources of reuse, each checked the same way: a new container at a path where
a large one was encoded last time takes over its entry (a state rebuilt at every step,
``Encoder._adopt``); dataclasses and pydantic models are snapshotted by what they hold
(``DeepSnapshot.add_object``); and a state just loaded is taught to the cache by
``snapvc.encoding.seed``, so the first commit after a checkout costs the change.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from itertools import compress, count, islice
from operator import is_not
from typing import Any, Final

import msgpack

from snapvc.encoding import arrays
from snapvc.encoding.adapters import TypeAdapter, adapter_for_value
from snapvc.encoding.cache import IMMUTABLE_TYPES, MUTABLE_CONTAINERS, CacheEntry, DeepSnapshot, EncodeCache
from snapvc.encoding.chunker import CHUNK_THRESHOLD, chunk_spans, rechunk
from snapvc.encoding.nodes import TAG_BYTES, TAG_DICT, TAG_LIST, TAG_STR, TAG_TUPLE, leaf_payload
from snapvc.encoding.prolly import (
    LEAF_TARGET_BYTES,
    Level,
    first_key,
    map_leaf_hash_size,
    seq_leaf_hash_size,
    text_leaf_hash_size,
    whole_entry,
)
from snapvc.encoding import reuse
from snapvc.encoding.trees import SINGLE_NODE_ENTRIES, build_tree
from snapvc.encoding.reader import Loader, MapView, SeqView
from snapvc.encoding.values import (
    EXT_TUPLE,
    EXT_TYPED,
    INT_LIMIT,
    INT_MIN,
    MAX_DEPTH,
    REF_PREFIX,
    SCALAR_EXT_TYPES,
    array_header,
    ext_encoding,
    map_header,
    new_packer,
)
from snapvc.errors import UnsupportedValueError
from snapvc.ids import ObjectId
from snapvc.objects import BLOB, MAP, SEQ, TEXT, object_bytes

# The encode cache, the chunker's threshold, the tags and ``MAX_DEPTH`` live in their own
# modules; they are named here too, where callers have always imported them from.
__all__ = ["Encoder", "EncodeCache", "element_encoder", "INLINE_STR_MAX", "CHUNK_THRESHOLD", "INLINE_NODE_MAX",
           "SINGLE_NODE_ENTRIES", "MAX_DEPTH", "LEAF_TARGET_BYTES", "TAG_DICT", "TAG_LIST", "TAG_TUPLE", "TAG_STR",
           "TAG_BYTES"]

INLINE_STR_MAX: Final = 2048
INLINE_NODE_MAX: Final = 2048
# A bytes value of at least this many bytes is kept by the encode cache after it is
# stored at a path, so that the next one there is rechunked from where it differs
# (``chunker.rechunk``): an array's data, which is a new bytes object each commit, costs
# a memcmp instead of cutting and hashing it all again. Smaller ones cut fast anyway.
RECHUNK_MIN: Final = 1 << 20

_NAN_ENC: Final[bytes] = msgpack.packb(float("nan"))
_runs = count(1)  # each encoder's number: an entry confirmed in this run has ``gen`` equal to it


class Encoder:
    """Encodes values into objects, collecting the new objects in ``objects``.

    One encoder serves one commit at a time (it is not thread-safe); the cache passed
    in carries reusable work from one commit to the next.
    """

    def __init__(self, cache: EncodeCache | None = None, loader: Loader | None = None) -> None:
        self.cache = cache if cache is not None else EncodeCache()
        # A lazy view (``MapView``/``SeqView``) read through ``loader`` is already stored
        # where this encoder's objects go: it encodes as a reference to it, unread.
        self._loader = loader
        self.objects: dict[ObjectId, bytes] = {}
        self.bases: dict[ObjectId, ObjectId] = {}  # new object -> the object it replaces
        self._pack: Callable[[Any], bytes] = new_packer().pack
        self._path: list[Any] = []
        self._active: set[int] = set()
        self._gen = next(_runs)
        self._dirty: dict[Any, Any] | None = None  # the trie of ``dirty_paths``, or None: check everything

    # -- public -------------------------------------------------------------------------

    def encode_root(self, state: Any, dirty_paths: Iterable[tuple[Any, ...]] | None = None) -> ObjectId:
        """Encode a whole state (a dict with str keys); returns its root object id.

        ``dirty_paths`` (paths as tuples of dict keys and list indices) is a promise,
        trusted without checking: every container at a path that is neither one of
        them nor above or below one is the same object, holding the same contents, as
        when this cache last encoded it. Such a container returns its cached encoding
        at once; only the containers on the dirty paths are checked. A wrong promise
        stores a wrong state: only a caller that tracks every change (``snapvc.State``)
        may make one. ``None`` (the default) checks everything.
        """
        if type(state) is not dict:
            raise UnsupportedValueError("state", f"the state must be a dict with str keys, got {type(state).__name__}")
        self._dirty = None if dirty_paths is None else reuse.path_trie(dirty_paths)
        try:
            enc = self._encode_dict(state, force_node=True)
        finally:
            self._dirty = None
        return ObjectId(enc[3:])

    def encode_value(self, value: Any) -> bytes:
        """The bytes ``value`` is written as inside its parent: its inline encoding, or a
        reference to the object it is stored as (the new objects join ``objects``)."""
        return self._encode(value)

    # -- helpers ------------------------------------------------------------------------

    def _where(self) -> str:
        return "state" + "".join(f"[{p!r}]" for p in self._path)

    def _hint(self) -> Any:
        """Where the current path stands in the dirty-path trie (``reuse.hint_at``)."""
        return reuse.hint_at(self._dirty, self._path)

    def _fail(self, reason: str) -> UnsupportedValueError:
        return UnsupportedValueError(self._where(), reason)

    def _store(self, kind: int, payload: bytes, base: bytes | None = None) -> bytes:
        """Keep a new object; ``base`` (a reference) names the object it replaces, which
        the store may use to keep it as a small delta."""
        oid, data = object_bytes(kind, payload)
        self._store_object(oid, data, base)
        return REF_PREFIX + oid

    def _store_object(self, oid: ObjectId, data: bytes, base: bytes | None) -> None:
        self.objects[oid] = data
        if base is not None and base.startswith(REF_PREFIX) and base[3:] != oid:
            self.bases[oid] = ObjectId(base[3:])

    # -- dispatch -----------------------------------------------------------------------

    def _encode(self, v: Any) -> bytes:
        t = type(v)
        if t is str:
            if len(v) <= 512:  # at most 2048 bytes of UTF-8
                try:
                    return self._pack(v)
                except UnicodeEncodeError:
                    raise self._fail("str holds a lone surrogate, which is not valid Unicode text") from None
            return self._encode_long(v, TAG_STR)
        if t is dict:
            return self._encode_dict(v)
        if t is list:
            return self._encode_seq(v, TAG_LIST)
        if t is int:
            if INT_MIN <= v < INT_LIMIT:
                return self._pack(v)
            return ext_encoding(v, self._pack)
        if t is float:
            return self._pack(v) if v == v else _NAN_ENC
        if v is None or t is bool:
            return self._pack(v)
        if t is bytes:
            if len(v) <= INLINE_STR_MAX:
                return self._pack(v)
            return self._encode_long(v, TAG_BYTES)
        if t is tuple:
            return self._encode_seq(v, TAG_TUPLE)
        if t in SCALAR_EXT_TYPES:
            return ext_encoding(v, self._pack)
        if t is MapView or t is SeqView:
            # A view of more than SINGLE_NODE_ENTRIES entries is never inline, even as one
            # leaf: its id is its encoding. It is not read again either, which matters for
            # a merge's spliced trees: their nodes are written with the commit, not before.
            if v.loader is self._loader and (len(v) > SINGLE_NODE_ENTRIES or not v.may_inline()):
                ref: bytes = REF_PREFIX + v.id  # stored already, as this value's own object
                return ref
            return self._encode(v.to_dict() if t is MapView else v.to_list())
        adapter = adapter_for_value(v)
        if adapter is not None:
            return self._encode_typed(v, adapter)
        raise self._fail(_unsupported_reason(v))

    # -- long str / bytes ---------------------------------------------------------------

    def _encode_long(self, v: str | bytes, tag: int) -> bytes:
        e = self.cache.get(v)
        if e is not None:
            return e.enc
        if isinstance(v, str):
            try:
                data = v.encode("utf-8")
            except UnicodeEncodeError:
                raise self._fail("str holds a lone surrogate, which is not valid Unicode text") from None
            if len(data) <= INLINE_STR_MAX:
                return self._pack(v)
        else:
            data = v
        pack = self._pack
        if len(data) <= CHUNK_THRESHOLD:
            enc = self._store(TEXT, leaf_payload(TEXT, tag, [(pack(data), len(data))], pack))
        else:
            # What stood at this path last commit: a chunk it shares is not stored again,
            # and a new chunk names as delta base the old chunk that covered the same
            # offset, so an edit in a long document costs about the edit.
            path = tuple(self._path)
            old_starts, old_refs, old_data = self.cache.chunks_at(path)
            known = set(old_refs)
            view = memoryview(data)
            # A large bytes value that stood here last commit (an array's data) is cut
            # again only where it differs: the old chunks of the prefix and suffix both
            # share are the same chunks (``rechunk``), taken without cutting or hashing.
            if old_data is not None:
                again = rechunk(data, old_data, old_starts)
                shift = len(data) - len(old_data)
                spans = again.spans
                head, tail, moved = again.head, again.tail, again.moved
            else:
                spans = list(chunk_spans(data))
                head, tail = 0, len(old_starts)  # no old chunk taken as it was: all cut anew
                shift = 0
                moved = {}
            new_entries = []
            new_starts = []
            for i, (offset, length) in enumerate(spans):
                if i in moved:  # an old chunk, moved: the same bytes, the same object
                    new_entries.append((old_refs[moved[i]], length))
                    new_starts.append(offset)
                    continue
                chunk = bytes(view[offset : offset + length])
                oid, raw = object_bytes(BLOB, chunk)
                ref = REF_PREFIX + oid
                if ref not in known:
                    i = bisect_right(old_starts, offset) - 1
                    self._store_object(oid, raw, old_refs[i] if i >= 0 else None)
                new_entries.append((ref, length))
                new_starts.append(offset)
            starts = old_starts[:head] + new_starts + [s + shift for s in old_starts[tail:]]
            refs = old_refs[:head] + [ref for ref, _ in new_entries] + old_refs[tail:]
            ends = starts[1:] + [len(data)]
            entries = list(zip(refs, [end - start for start, end in zip(starts, ends)]))
            keep = data if type(v) is bytes and len(data) >= RECHUNK_MIN else None
            self.cache.put_chunks(path, starts, refs, keep)
            # The tree over the chunks reuses the nodes of last commit's at this path (its
            # entries compared with the new ones, in C: nothing about them is assumed).
            old_tree, old_ref = self.cache.at_path(path, TEXT, tag)
            enc, tree = build_tree(TEXT, tag, entries, text_leaf_hash_size, whole_entry, old_tree, old_ref, self._store,
                                   pack)
            self.cache.put_path(path, enc, tree, TEXT, tag)
        self.cache.put(v, CacheEntry(v, (), (), enc, [], None, []))
        return enc

    # -- dicts --------------------------------------------------------------------------

    def _unchanged(self, e: CacheEntry, container: Any, hint: Any, force_node: bool = False) -> tuple[bool, bool]:
        """(whether ``e``'s encoding stands for ``container`` whole, whether nothing below
        it changed): the rule is ``reuse.unchanged``."""
        return reuse.unchanged(e, container, hint, self._gen, self._child_same, force_node)

    def _child_same(self, key: Any, child: Any, enc: bytes) -> bool:
        """Whether ``child``, at ``key`` below the current path, still encodes to ``enc``
        (encoding it, which costs nothing if it did not change)."""
        self._path.append(key)
        try:
            return self._encode(child) == enc
        finally:
            self._path.pop()

    def _deep_of(self, kids: list[tuple[Any, Any, bytes]]) -> DeepSnapshot | None:
        """The flat snapshot of everything below, or None where checking the few kids one
        by one is cheaper than copying their large snapshots (e.g. the root of a state)."""
        get = self.cache.get
        belows = []
        unknown = []
        total = 0
        for _, child, _ in kids:
            entry = get(child)
            if entry is None:
                # Reused through its parent's snapshot (or a load's), it has no entry of its
                # own: its encoding was confirmed in this run, so what it holds now is
                # what that encoding describes, and is snapshotted as it is.
                unknown.append(child)
                continue
            below = entry.deep
            if below is None:
                return None  # e.g. a typed value of an adapter of your own: confirmed through its entry
            belows.append((child, below))
            total += below.containers()
        found = None
        if unknown:
            found = DeepSnapshot.of(unknown)
            if found is None:
                return None
            total += found.containers()
        if len(kids) <= _FEW_KIDS and total > _LARGE_SNAPSHOT:
            return None
        deep = DeepSnapshot()
        for child, below in belows:
            deep.add(child, below)
        if found is not None:
            deep.add_all(found)
        return deep

    def _remember(self, owner: Any, keys: tuple[Any, ...], vals: Any, enc: bytes,
                  kids: list[tuple[Any, Any, bytes]], tree: list[Level] | None, entries: list[Any],
                  snapshot: bool = True) -> CacheEntry:
        """Make ``owner``'s entry; with the flat snapshot of all below it if ``snapshot``."""
        entry = CacheEntry(owner, keys, vals, enc, kids, tree, entries)
        entry.deep = self._deep_of(kids) if snapshot else None
        entry.gen = self._gen
        self.cache.put(owner, entry)
        if reuse.kept_for_taking_over(owner, entries):
            self.cache.put_at(tuple(self._path), entry)
        return entry

    def _adopt(self, obj: Any) -> CacheEntry | None:
        """The entry of the container encoded at this path last time, taken over by
        ``obj``, a container of the same type met here for the first time: a state
        rebuilt at every step (``{**state, "messages": messages + [new]}``, a dict copied
        then changed) holds new containers of mostly the same elements, whose encodings
        the taken-over entry still has. Nothing is trusted: the callers check its recorded
        elements against ``obj``'s by identity, and what is below them by its snapshot,
        exactly as for a container met again.

        The entry then describes ``obj`` (and is changed in place as ``obj``'s own would
        be); the container it described is, if met again, encoded anew. Undone if the
        commit fails. None unless one may be taken over (``reuse.takes_over``)."""
        path = tuple(self._path)
        e = self.cache.entry_at(path)
        if not reuse.takes_over(e, obj, self._gen):
            return None
        assert e is not None
        return self.cache.move(e, obj, path)

    # -- dicts --------------------------------------------------------------------------

    def _encode_dict(self, d: dict[str, Any], force_node: bool = False, tag: Any = TAG_DICT, owner: Any = None) -> bytes:
        if len(self._path) >= MAX_DEPTH:
            raise self._fail(f"nested deeper than {MAX_DEPTH} containers, the most a state may hold")
        owner = d if owner is None else owner
        e = self.cache.get(owner)
        if e is not None and reuse.confirmed(e, self._gen, force_node):
            return e.enc  # already encoded in this run (checked, or met twice)
        below_same = False
        hint: Any = None if self._dirty is None else self._hint()
        if e is None and owner is d and reuse.may_take_over(d, hint):
            e = self._adopt(d)
        if e is not None:
            whole, below_same = self._unchanged(e, d, hint, force_node)
            if whole:
                return e.enc
        # Same keys as last time (above dirty paths, the promise says so for every key off
        # them): re-encode only what changed.
        if e is not None and reuse.same_keys(e, d, hint):
            enc = self._encode_dict_few(d, e, force_node, tag, owner, hint, below_same)
            if enc is not None:
                return enc
        # Keys added on dirty paths (a map that grows by a key a commit): placed in the
        # entry, then encoded as the changes they are.
        if e is not None and e.sorted_keys and type(hint) is dict and len(d) > len(e.vals):
            grown = self._add_keys(d, e, hint)
            if grown is not None:
                enc = self._encode_dict_few(d, grown[0], force_node, tag, owner, hint, below_same)
                if enc is not None:
                    return enc
                grown[1]()
        oid = id(owner)
        if oid in self._active:
            raise self._fail("the state contains a cycle: this container holds itself")
        self._active.add(oid)
        pack = self._pack
        path = self._path
        entries: list[tuple[bytes, bytes]] = []
        kids: list[tuple[Any, Any, bytes]] = []
        try:
            try:
                keys = sorted(d)
            except TypeError:
                keys = list(d)
            # Values identical to the ones encoded last time keep their encodings: an
            # immutable one as it is, a container if nothing below it changed either.
            previous: dict[str, Any] = {}
            # Above dirty paths, a child off them is trusted unchanged (see ``encode_root``).
            above_dirty = type(hint) is dict
            if e is not None:
                previous = dict(zip(e.sorted_keys, zip(e.sorted_vals, e.entries)))
                below_same = below_same and e.deep is not None
                if above_dirty:  # keep the children's entries: a later dirty path may lead through them
                    self.cache.keep([kid[1] for kid in e.kids])
            for k in keys:
                if type(k) is not str:
                    raise self._fail(f"dict key {k!r} is a {type(k).__name__}; keys must be str")
                v = d[k]
                t = type(v)
                before = previous.get(k)
                if before is not None and reuse.element_unchanged(before[0], v,
                                                                  below_same or (above_dirty and k not in hint)):
                    entries.append(before[1])
                    if t in MUTABLE_CONTAINERS:
                        kids.append((k, v, before[1][1]))
                    continue
                path.append(k)
                try:
                    enc = self._encode(v)
                finally:
                    path.pop()
                try:
                    entries.append((pack(k), enc))
                except UnicodeEncodeError:
                    raise self._fail(f"dict key {k!r} holds a lone surrogate, which is not valid Unicode text") from None
                if t in MUTABLE_CONTAINERS or (t not in IMMUTABLE_TYPES and adapter_for_value(v) is not None):
                    kids.append((k, v, enc))
        finally:
            self._active.discard(oid)
        enc, tree = self._map_node(entries, force_node, tag, e)
        # Above dirty paths, the flat snapshot of all below is not rebuilt: the next
        # commit through dirty paths does not need it, and one without checks kid by kid.
        entry = self._remember(owner, tuple(d), tuple(d.values()), enc, kids, tree, entries,
                               owner is d and type(hint) is not dict)
        entry.sorted_keys = tuple(keys)
        entry.sorted_vals = tuple([d[k] for k in keys])
        return enc

    def _encode_dict_few(self, d: dict[str, Any], e: CacheEntry, force_node: bool, tag: Any, owner: Any, hint: Any,
                         below_same: bool) -> bytes | None:
        """``d`` has the same keys as when ``e`` was made: re-encode only the values that
        are new objects (above dirty paths: the keys on them), and update ``e`` in place
        (undone if the commit fails), so that the work follows the changes rather than
        the keys: one C-speed copy of the entries list, no sorting, no per-key Python
        loop, and a tree re-cut only around the changed positions. None if too much
        changed, or if container children must be checked one by one: the general path
        does it."""
        above_dirty = type(hint) is dict
        if not above_dirty and e.kids and not (below_same and e.deep is not None):
            return None
        positions = e.positions
        if positions is None:
            positions = e.positions = {k: i for i, k in enumerate(e.sorted_keys)}
        if above_dirty:
            # Only the keys on dirty paths can have changed; one added or removed there
            # changes the entries' positions: the general path places it.
            redo = [k for k in hint if k in d]
            if any((k in d) != (k in positions) for k in hint):
                return None
        else:
            redo = list(compress(e.keys, map(is_not, d.values(), e.vals)))
        if len(redo) * _FEW_CHANGES > len(d):
            return None
        e = self.cache.writable(e, tuple(self._path))
        if type(e.vals) is not list:
            e.vals = list(e.vals)
        sorted_vals = e.sorted_vals
        if isinstance(sorted_vals, tuple):
            sorted_vals = e.sorted_vals = list(sorted_vals)
        if e.insertion is None:
            e.insertion = {k: i for i, k in enumerate(e.keys)}
        # The entries list is copied, not changed in place: the trees of earlier commits
        # hold it as their level 0 (an encoder met at the same path later compares with
        # it); the value lists are the entry's alone.
        old_entries = e.entries
        entries = list(old_entries)
        vals, insertion = e.vals, e.insertion
        undo: list[tuple[int, Any, int, Any]] = []  # (position, value, insertion index, value) before
        kids_before = None
        kids = e.kids
        oid = id(owner)
        if oid in self._active:
            raise self._fail("the state contains a cycle: this container holds itself")
        self._active.add(oid)
        path = self._path
        try:
            for k in redo:
                v = d[k]
                j = positions[k]
                path.append(k)
                try:
                    enc = self._encode(v)
                finally:
                    path.pop()
                ins = insertion[k]
                undo.append((j, sorted_vals[j], ins, vals[ins]))
                entries[j] = (entries[j][0], enc)
                sorted_vals[j] = v
                vals[ins] = v
                t = type(v)
                i = bisect_left(kids, k, key=first_key)
                had = i < len(kids) and kids[i][0] == k
                mutable = t in MUTABLE_CONTAINERS or (t not in IMMUTABLE_TYPES and adapter_for_value(v) is not None)
                if (mutable or had) and kids_before is None:
                    kids_before = list(kids)
                if mutable:
                    if had:
                        kids[i] = (k, v, enc)
                    else:
                        kids.insert(i, (k, v, enc))
                elif had:
                    del kids[i]
        except BaseException:
            _restore_entries(e, sorted_vals, undo, kids_before)
            raise
        finally:
            self._active.discard(oid)
        before = (e.enc, e.tree, e.deep, e.gen, old_entries)

        def restore() -> None:
            _restore_entries(e, sorted_vals, undo, kids_before)
            _restore_node(e, before)

        self.cache.on_discard(restore)
        e.entries = entries
        enc, tree = self._map_node(entries, force_node, tag, e, sorted([positions[k] for k in redo]))
        e.enc = enc
        e.tree = tree
        if above_dirty or owner is not d:
            e.deep = None
        elif kids_before is not None or e.deep is None:
            e.deep = self._deep_of(kids)
        e.gen = self._gen
        return enc

    def _add_keys(self, d: dict[str, Any], e: CacheEntry, hint: dict[Any, Any]) -> tuple[CacheEntry, Callable[[], None]] | None:
        """``e`` (made writable) with the keys ``d`` gained on the dirty paths ``hint``
        leads to placed in entry order, each holding a placeholder that ``_encode_dict_few``
        replaces (they are on dirty paths, so it re-encodes them), and what undoes it
        (also run if the commit fails). None, nothing changed, unless the keys ``d``
        gained are all on dirty paths, all str, the last ones ``d`` holds, and it lost none."""
        positions = e.positions
        if positions is None:
            positions = e.positions = {k: i for i, k in enumerate(e.sorted_keys)}
        added = [k for k in hint if k not in positions and k in d]
        if not added or len(d) != len(e.vals) + len(added) or any(type(k) is not str for k in added):
            return None
        order = list(islice(reversed(d), len(added)))[::-1]  # as ``d`` holds them, after the old keys
        if set(order) != set(added):
            return None
        try:
            placed = sorted((k, self._pack(k)) for k in order)
        except UnicodeEncodeError:
            return None
        e = self.cache.writable(e, tuple(self._path))
        before = (e.keys, e.vals, e.insertion, e.sorted_keys, e.sorted_vals, e.positions, e.entries)
        sorted_keys, sorted_vals, entries = list(e.sorted_keys), list(e.sorted_vals), list(e.entries)
        for k, packed in placed:
            j = bisect_left(sorted_keys, k)
            sorted_keys.insert(j, k)
            sorted_vals.insert(j, _ADDED)
            entries.insert(j, (packed, b""))
        insertion = dict(e.insertion) if e.insertion is not None else {k: i for i, k in enumerate(e.keys)}
        insertion.update(zip(order, range(len(e.keys), len(e.keys) + len(order))))
        # New lists and maps, not the old ones changed: earlier trees and forked caches hold those.
        e.keys, e.vals, e.insertion = e.keys + tuple(order), [*e.vals, *[_ADDED] * len(order)], insertion
        e.sorted_keys, e.sorted_vals, e.entries = tuple(sorted_keys), sorted_vals, entries
        e.positions = dict(zip(sorted_keys, range(len(sorted_keys))))
        undone = False

        def undo() -> None:
            nonlocal undone
            if not undone:
                undone = True
                e.keys, e.vals, e.insertion, e.sorted_keys, e.sorted_vals, e.positions, e.entries = before

        self.cache.on_discard(undo)  # before the changes' own undo, so run after it
        return e, undo

    def _map_node(self, entries: list[tuple[bytes, bytes]], force_node: bool, tag: Any, e: CacheEntry | None,
                  changed: list[int] | None = None) -> tuple[bytes, list[Level] | None]:
        """A dict's encoding from its sorted (key, value) encodings: inline when small and
        holding no reference, else a stored node or tree; returns (encoding, tree or None)."""
        n = len(entries)
        if n <= SINGLE_NODE_ENTRIES and not force_node:
            body = map_header(n) + b"".join([k + v for k, v in entries])
            if len(body) <= INLINE_NODE_MAX and REF_PREFIX not in body:
                if tag == TAG_DICT:
                    return body, None
                pack = self._pack
                return pack(msgpack.ExtType(EXT_TYPED, array_header(2) + pack(tag) + body)), None
        return self._build_node(MAP, tag, entries, map_leaf_hash_size, first_key, e, changed)

    def _encode_typed(self, v: Any, adapter: TypeAdapter) -> bytes:
        if adapter.name in arrays.NAMES:
            reason = arrays.numpy_reason(v)  # an object array, a dtype its description loses
            if reason is not None:
                raise self._fail(reason)
        own = adapter.own_fields
        if own:
            # Confirmed unchanged by its snapshot (what it holds, by identity), without
            # building its fields: a list of models costs what a list of dicts does.
            e = self.cache.get(v)
            if reuse.typed_unchanged(e, self._gen):
                assert e is not None
                e.gen = self._gen
                return e.enc
        try:
            fields = adapter.to_fields(v)
        except Exception as exc:  # an adapter's own failure, reported where it happened
            raise self._fail(f"adapter for {adapter.name!r} failed: {exc}") from exc
        if type(fields) is not dict:
            raise self._fail(f"adapter for {adapter.name!r} returned {type(fields).__name__}, not a dict")
        enc = self._encode_dict(fields, tag=adapter.name, owner=v)
        if own:
            e = self.cache.get(v)
            if e is not None and e.deep is None and e.enc == enc:
                e.deep = self._typed_deep(v, e.kids)
        return enc

    def _typed_deep(self, v: Any, kids: list[tuple[Any, Any, bytes]]) -> DeepSnapshot | None:
        """The snapshot of a typed value whose fields are its own attributes: the value
        itself and everything below its fields (None where something below has none)."""
        below = self._deep_of(kids)
        if below is None:
            return None
        deep = DeepSnapshot()
        deep.add_object(v)
        deep.add_all(below)
        return deep

    # -- lists and tuples ---------------------------------------------------------------

    def _encode_seq(self, s: list[Any] | tuple[Any, ...], tag: int) -> bytes:
        if len(self._path) >= MAX_DEPTH:
            raise self._fail(f"nested deeper than {MAX_DEPTH} containers, the most a state may hold")
        e = self.cache.get(s)
        if e is not None and reuse.confirmed(e, self._gen):
            return e.enc  # already encoded in this run (checked, or met twice)
        below_same = False
        hint: Any = None if self._dirty is None else self._hint()
        if e is None and reuse.may_take_over(s, hint):
            e = self._adopt(s)
        if e is not None:
            whole, below_same = self._unchanged(e, s, hint)
            if whole:
                return e.enc
        oid = id(s)
        if oid in self._active:
            raise self._fail("the state contains a cycle: this container holds itself")
        self._active.add(oid)
        path = self._path
        encode = self._encode
        kids: list[tuple[Any, Any, bytes]] = []
        entries: list[bytes] = []
        appended = False
        try:
            # The common case is an append: the old elements are still there, unchanged,
            # and keep their encodings; only the new tail is encoded (``reuse.list_start``).
            start = reuse.list_start(e, s, hint, below_same)
            kept = start.kept
            if start.grow:
                assert e is not None
                # A pure append grows the remembered entry in place (undone if the commit
                # fails), so a long list costs nothing per element here.
                appended = True
                e = self.cache.writable(e, tuple(path))
                self.cache.on_discard(_grow_undo(e))
                entries = e.entries
                kids = e.kids
            elif start.dirty_only:
                assert e is not None
                # Above dirty paths, holding the same elements: those off the dirty paths
                # are trusted unchanged (see ``encode_root``); only the others are encoded.
                entries = list(e.entries)
                kids = list(e.kids)
                self.cache.keep([kid[1] for kid in kids])  # a later dirty path may lead through them
                for i in sorted(k for k in hint if type(k) is int and 0 <= k < kept):
                    path.append(i)
                    try:
                        enc = encode(s[i])
                    finally:
                        path.pop()
                    entries[i] = enc
                    j = bisect_left(kids, i, key=first_key)
                    if j < len(kids) and kids[j][0] == i:
                        kids[j] = (i, s[i], enc)
            elif kept:
                assert e is not None
                entries = e.entries[:kept]
                kids = [kid for kid in e.kids if kid[0] < kept]
            tail_kids_from = len(kids)
            # Elements met again elsewhere in the list keep their encodings (``reuse.moved_encodings``).
            moved: dict[int, bytes] = {}
            if e is not None and kept < len(s) and not appended:
                moved = reuse.moved_encodings(e, below_same)
            for i in range(kept, len(s)):
                v = s[i]
                known = moved.get(id(v)) if moved else None
                if known is not None:
                    enc = known
                else:
                    path.append(i)
                    try:
                        enc = encode(v)
                    finally:
                        path.pop()
                entries.append(enc)
                t = type(v)
                if t in MUTABLE_CONTAINERS or (t not in IMMUTABLE_TYPES and adapter_for_value(v) is not None):
                    kids.append((i, v, enc))
        finally:
            self._active.discard(oid)
        n = len(entries)
        enc = b""
        tree = None
        if n <= SINGLE_NODE_ENTRIES:
            body = array_header(n) + b"".join(entries)
            if len(body) <= INLINE_NODE_MAX and REF_PREFIX not in body:
                enc = body if tag == TAG_LIST else self._pack(msgpack.ExtType(EXT_TUPLE, body))
        if not enc:
            enc, tree = self._build_node(SEQ, tag, entries, seq_leaf_hash_size, whole_entry, e,
                                         prefix=kept if appended else None)
        if appended:
            assert e is not None
            if e.deep is not None:
                tail = self._deep_of(kids[tail_kids_from:])
                if tail is None:
                    e.deep = None
                else:
                    e.deep.add_all(tail)
            e.vals += s[len(e.vals):]
            e.enc = enc
            e.tree = tree
            e.gen = self._gen
        else:
            self._remember(s, (), list(s), enc, kids, tree, entries, type(hint) is not dict)
        return enc

    # -- nodes and trees ----------------------------------------------------------------

    def _build_node(self, kind: int, tag: Any, entries: list[Any], leaf_hs: Any, first_of: Any,
                    e: CacheEntry | None, changed: list[int] | None = None,
                    prefix: int | None = None) -> tuple[bytes, list[Level] | None]:
        """Store a container as a node or tree. What it was stored as last time comes from
        its own entry, or else from whatever stood at the same path in the last commit
        (a state rebuilt from scratch each step still reuses nodes and gets deltas)."""
        path = tuple(self._path)
        old_tree: list[Level] | None
        old_ref: bytes | None
        if e is not None and e.enc.startswith(REF_PREFIX):
            old_tree, old_ref = e.tree, e.enc
        else:
            old_tree, old_ref = self.cache.at_path(path, kind, tag)
        own = old_tree is not None and e is not None and old_tree is e.tree  # hints are about e's tree
        enc, tree = build_tree(kind, tag, entries, leaf_hs, first_of, old_tree, old_ref, self._store, self._pack,
                               changed if own else None, prefix if own else None)
        self.cache.put_path(path, enc, tree, kind, tag)
        return enc, tree



_FEW_KIDS = 16
_ADDED: Final = object()  # the value of a key ``Encoder._add_keys`` placed, until it is encoded
# A dict is re-encoded entry by entry (not by its changes alone) once more than 1/_FEW_CHANGES of it changed.
_FEW_CHANGES = 8
# A snapshot of more containers than this below a container of at most _FEW_KIDS
# children is not copied into the container's own: checking the few kids is cheaper.
_LARGE_SNAPSHOT = 256


def _restore_entries(e: CacheEntry, sorted_vals: list[Any], undo: list[tuple[int, Any, int, Any]],
                     kids: list[Any] | None) -> None:
    """Put back the values ``_encode_dict_few`` changed in place (newest first) in ``e``
    and in ``sorted_vals``, its values in entry order."""
    for j, sorted_value, ins, value in reversed(undo):
        sorted_vals[j] = sorted_value
        e.vals[ins] = value
    if kids is not None:
        e.kids[:] = kids


def _restore_node(e: CacheEntry, before: tuple[Any, Any, Any, int, list[Any]]) -> None:
    e.enc, e.tree, e.deep, e.gen, e.entries = before


def _grow_undo(e: CacheEntry) -> Callable[[], None]:
    """What puts ``e`` back as it was, before a pure append grows it in place."""
    n_vals, n_entries, n_kids = len(e.vals), len(e.entries), len(e.kids)
    enc, tree, gen, deep = e.enc, e.tree, e.gen, e.deep
    sizes = deep.sizes() if deep is not None else None

    def undo() -> None:
        del e.vals[n_vals:]
        del e.entries[n_entries:]
        del e.kids[n_kids:]
        e.enc, e.tree, e.gen, e.deep = enc, tree, gen, deep
        if deep is not None and sizes is not None:
            deep.truncate(sizes)

    return undo


def _unsupported_reason(v: Any) -> str:
    t = type(v)
    if arrays.is_numpy_value(v):
        reason = arrays.numpy_reason(v)  # an ndarray subclass (np.matrix, a masked array)
        if reason is not None:
            return reason
    if isinstance(v, (set, frozenset)):
        return f"a {t.__name__} is not supported (its order is not defined); store a sorted list instead"
    if isinstance(v, dict):
        return f"{t.__name__} (a dict subclass) is not supported; convert it to a plain dict"
    if isinstance(v, (list, tuple)):
        return f"{t.__name__} (a {type(v).__mro__[1].__name__} subclass) is not supported; convert it to a plain list or tuple"
    if isinstance(v, (bytearray, memoryview)):
        return f"{t.__name__} is not supported; convert it to bytes"
    if isinstance(v, (str, int, float)):
        return f"{t.__name__} (a subclass of {type(v).__mro__[1].__name__}) is not supported; convert it to a plain value or register an adapter"
    return (
        f"values of type {t.__module__}.{t.__qualname__} are not supported; use plain data, a dataclass, "
        f"a pydantic model, or register an adapter with snapvc.register_type"
    )


def element_encoder(loader: Loader | None = None) -> Callable[[Any], bytes]:
    """A function giving the bytes a value is written as inside its parent: its inline
    encoding, or a reference to the object it would be stored as (computed, not kept).
    Two values have equal encodings exactly when they are stored alike, which is what a
    sequence diff compares list elements by (``snapvc.diff.changes``). Views read through
    ``loader`` give their own ids, unread."""
    encoder = Encoder(loader=loader)

    def encode(value: Any) -> bytes:
        try:
            return encoder.encode_value(value)
        finally:
            encoder.objects.clear()
            encoder.bases.clear()

    return encode
