"""Objects → values: full materialization and lazy, read-only views.

``Loader.materialize(oid)`` rebuilds a value as fresh Python objects (a deep copy the
caller may mutate); it fetches the objects level by level in batches. Asked to, it lists
what it built from each stored object (``Built``): what a checkout records of the state it
hands out, for the next commit to recognise (``snapvc.encoding.seed``). ``Loader.view``
returns a lazy ``MapView``/``SeqView`` that loads only the objects on the path it is
asked for, so reading one message of a long history reads a handful of objects.
``Part``s are the pieces of a MAP or SEQ tree in order, subtrees not yet read or leaf
entries: what a walk that skips whole subtrees by id (``snapvc.diff.changes``) works on.
"""

from __future__ import annotations

import gc
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import accumulate
from threading import Lock
from typing import Any, NamedTuple, overload

from snapvc.encoding.adapters import adapter_for_name
from snapvc.encoding.nodes import TAG_DICT, TAG_STR, TAG_TUPLE, decode_level, decode_node
from snapvc.encoding.values import ext_hook
from snapvc.errors import (
    CorruptObjectError,
    InvalidObjectIdError,
    NumpyMissingError,
    ObjectNotFoundError,
    PathError,
    SnapvcError,
)
from snapvc.ids import ObjectId
from snapvc.objects import BLOB, MAP, SEQ, TEXT

__all__ = ["BuildLog", "Built", "Loader", "MapView", "Part", "SeqView", "is_tuple", "node_parts", "tree_root"]

_BLOB_KIND = bytes([BLOB])
# Objects a materialization fetches at once (a level of a large tree is read in batches).
_FETCH_BATCH = 1024


class Built(NamedTuple):
    """A value ``Loader.materialize`` built from the stored object ``oid`` (``size``
    bytes): a dict, list or tuple from the root node of its tree (``node``, its decoded
    payload), or a long str or bytes (``node`` None). Values held inline in a node are
    not listed."""

    oid: bytes
    value: Any
    node: list[Any] | None
    size: int


class BuildLog:
    """What ``Loader.materialize`` built, when asked: ``objects``, a ``Built`` for each
    stored object, the value itself last; and whether the value is plain data
    (``plain``): dicts, lists and tuples stored as objects of their own, str, bytes, int,
    float, bool and None, with no value stored as an extension type (a tuple or typed
    value inline, a scalar such as a datetime) nor a typed value of its own object."""

    __slots__ = ("objects", "plain")

    def __init__(self) -> None:
        self.objects: list[Built] = []
        self.plain = True

    def ext_hook(self, code: int, data: bytes) -> Any:
        """``ext_hook`` of the decoder: notes that the value is not plain data."""
        self.plain = False
        return ext_hook(code, data)


class Part(NamedTuple):
    """A piece of a MAP or SEQ tree: a subtree not read yet (``level >= 0``, ``value`` its
    id) or one entry of a leaf (``level == -1``, ``value`` the inline value, or the id of
    the value's object when ``is_ref``). ``at`` is its first key (maps) or its first
    position (lists)."""

    at: Any
    level: int
    value: Any
    is_ref: bool


def node_parts(kind: int, node: list[Any], at: int = 0) -> list[Part]:
    """The parts of a decoded MAP or SEQ node in order: its children or its entries.
    ``at`` is the node's first position (lists; a map's keys are in its nodes)."""
    level = node[1]
    if kind == MAP:
        if level:
            return [Part(first, level - 1, child, True) for first, child in zip(node[2], node[3])]
        refs = set(node[3])
        return [Part(key, -1, value, key in refs) for key, value in node[2].items()]
    if level:
        parts = []
        for child, below in zip(node[2], node[3]):
            parts.append(Part(at, level - 1, child, True))
            at += below
        return parts
    refs = set(node[3])
    return [Part(at + i, -1, value, i in refs) for i, value in enumerate(node[2])]


class ObjectCache:
    """A byte-bounded cache of canonical object bytes by id (objects are immutable).

    Eviction is first-in, first-out: cheap on the read path, which matters more here
    than exact recency. Safe to share between threads (single dict operations). Its
    owner (the repository) empties it on close. One read of many objects (a checkout)
    keeps at most ``bulk_bytes`` of them: a large state read once does not push out
    what smaller reads keep, nor hold a budget's worth of bytes it will not read again.
    Beside the objects, it keeps the long str and bytes values a materialization built
    (``put_text``, within ``text_bytes``): immutable, they are handed out again as they
    are, their objects neither read nor decoded again.
    """

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        self.max_bytes = max_bytes
        self.bulk_bytes = max_bytes // 4
        self._data: dict[bytes, bytes] = {}
        self._size = 0
        self._lock = Lock()
        self.get = self._data.get
        # Long str and bytes values as built (immutable: handed out again as they are, not
        # joined and decoded again), by the id of their TEXT object: (value, its bytes).
        # Within ``text_bytes`` bytes of UTF-8, first in, first out.
        self.text_bytes = max_bytes // 4
        self._texts: dict[bytes, tuple[str | bytes, int]] = {}
        self._text_size = 0
        self.get_text = self._texts.get

    def put(self, oid: bytes, data: bytes) -> None:
        if len(data) > self.max_bytes // 8 or oid in self._data:
            return
        with self._lock:
            self._data[oid] = data
            self._size += len(data)
            while self._size > self.max_bytes:
                old = self._data.pop(next(iter(self._data)))
                self._size -= len(old)

    def put_text(self, oid: bytes, value: str | bytes, size: int) -> None:
        """Keep the long str or bytes built from the TEXT object ``oid`` (``size`` bytes)."""
        if size > self.text_bytes // 8 or oid in self._texts:
            return
        with self._lock:
            self._texts[oid] = (value, size)
            self._text_size += size
            while self._text_size > self.text_bytes:
                _, old = self._texts.pop(next(iter(self._texts)))
                self._text_size -= old

    @property
    def size(self) -> int:
        """The bytes of objects it holds (at most ``max_bytes``)."""
        return self._size

    @property
    def text_size(self) -> int:
        """The bytes of the long str and bytes values it holds (at most ``text_bytes``)."""
        return self._text_size

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._size = 0
            self._texts.clear()
            self._text_size = 0


class Loader:
    """Reads objects through ``get_many`` (the verified store) and an ``ObjectCache``."""

    def __init__(self, get_many: Callable[[list[Any]], dict[Any, bytes]], cache: ObjectCache) -> None:
        self._get_many = get_many
        self.cache = cache
        self.objects_read = 0  # fetched from the store (cache misses), for tests and stats
        self.kept = 0  # bytes the last fetch_many cached

    # -- fetching -----------------------------------------------------------------------

    def fetch_many(self, ids: list[bytes], keep: int | None = None) -> dict[bytes, bytes]:
        """The bytes of ``ids``, from the cache or the store; what the store gave is
        cached (with ``keep``, only its first ``keep`` bytes: ``kept`` says how many)."""
        self.kept = 0
        cache = self.cache
        cached: list[Any] = list(map(cache.get, ids))
        if None not in cached:  # (a state read before: every object in the cache, found in C-speed passes)
            return dict(zip(ids, cached))
        out: dict[bytes, bytes] = {}
        missing: list[bytes] = []
        for oid in ids:
            data = cache.get(oid)
            if data is None:
                missing.append(oid)
            else:
                out[oid] = data
        if missing:
            found = self._get_many(missing)
            self.objects_read += len(found)
            for oid in missing:
                data = found.get(oid)
                if data is None:
                    raise ObjectNotFoundError(ObjectId(oid), "referenced by the state being read; run fsck")
                if keep is None or self.kept < keep:
                    cache.put(oid, data)
                    self.kept += len(data)
                out[oid] = data
        return out

    def fetch(self, oid: bytes) -> bytes:
        return self.fetch_many([oid])[oid]

    def node(self, oid: bytes) -> tuple[int, Any]:
        """``(kind, decoded payload)`` of one object."""
        return decode_node(oid, self.fetch(oid))

    # -- materialization ----------------------------------------------------------------

    def materialize(self, oid: bytes, built: BuildLog | None = None) -> Any:
        """The value stored under ``oid`` as fresh Python objects. Objects that verify
        but do not hold a state snapvc could have written (a hostile or foreign writer's:
        wrong layouts, nesting past any limit) raise ``CorruptObjectError``. ``built``, if
        given, logs what was built from each stored object, the value itself last, and
        whether the value is plain data."""
        # Building thousands of containers would start the cyclic garbage collector over
        # and over, to find no garbage: it waits until the value is built (and stays off
        # if it was off).
        collecting = gc.isenabled()
        if collecting:
            gc.disable()
        try:
            return self._materialize(oid, built)
        except NumpyMissingError as exc:
            if exc.path is not None:
                raise
            # Raised where the value was rebuilt, which knows no path: find it (a second,
            # cheap walk, only on this error) so the message says which value needs numpy.
            found = self._path_to_type(oid, exc.type_name)
            where = None if found is None else "state" + "".join(f"[{p!r}]" for p in found)
            raise NumpyMissingError(exc.type_name, where) from None
        except InvalidObjectIdError as exc:  # a reference that is not 32 bytes: not a layout snapvc writes
            raise CorruptObjectError(ObjectId(oid), f"does not decode as a state: {exc}") from None
        except SnapvcError:
            raise
        except (RecursionError, LookupError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptObjectError(ObjectId(oid), f"does not decode as a state: {type(exc).__name__}: {exc}") from None
        finally:
            if collecting:
                gc.enable()

    def _materialize(self, oid: bytes, built: BuildLog | None) -> Any:
        hook = built.ext_hook if built is not None else ext_hook
        decoded: dict[bytes, tuple[int, Any]] = {}
        raw: dict[bytes, bytes] = {}
        cache = self.cache
        # Long str and bytes built before, taken as the walk meets them (not read again):
        # held here, as the cache may let them go while this value is built.
        held: dict[bytes, str | bytes] = {}
        frontier = self._unheld([oid], raw, held)
        kept = 0  # bytes cached: past the cache's bulk_bytes, what is read is not kept
        while frontier:
            refs: list[bytes] = []
            # A level is fetched a batch at a time: the store's frames of a whole level of a
            # large state are not held beside the bytes they decode to.
            for start in range(0, len(frontier), _FETCH_BATCH):
                batch = frontier[start : start + _FETCH_BATCH]
                found = self.fetch_many(batch, keep=max(cache.bulk_bytes - kept, 0))
                kept += self.kept
                raw.update(found)
                # (a chunk's bytes, a BLOB, are taken as they are: ``_Builder._text_into``)
                refs += decode_level(found, batch, hook, decoded)
            frontier = self._unheld(refs, raw, held)
        return _Builder(decoded, raw, built, self.fetch, hook, cache, held).build(oid)

    def _unheld(self, refs: list[bytes], raw: dict[bytes, bytes], held: dict[bytes, str | bytes]) -> list[bytes]:
        """Of ``refs``, those still to read: not read yet (``raw``), nor a long str or
        bytes value the cache keeps, which is taken into ``held`` instead."""
        new = [ref for ref in dict.fromkeys(refs) if ref not in raw and ref not in held]
        unread = []
        for ref, known in zip(new, map(self.cache.get_text, new)):
            if known is None:
                unread.append(ref)
            else:
                held[ref] = known[0]
        return unread

    def _path_to_type(self, oid: bytes, name: str, at: int = 0) -> tuple[Any, ...] | None:
        """The path, below the value ``oid``, of the first typed value stored under
        ``name`` (its fields not rebuilt), or None if there is none. ``at``: the first
        position of ``oid`` when it is a node inside a list's tree."""
        kind, node = decode_node(oid, self.fetch(oid), rebuild_types=False)
        if kind == MAP and node[0] == name:
            return ()
        if kind not in (MAP, SEQ):
            return None
        if node[1]:  # an inner node: the same container, its children's entries are its own
            children = node[3] if kind == MAP else node[2]
            starts = [0] * len(children) if kind == MAP else list(accumulate(node[3], initial=at))
            for child, start in zip(children, starts):
                found = self._path_to_type(child, name, start)
                if found is not None:
                    return found
            return None
        refs = set(node[3])
        entries = node[2].items() if kind == MAP else enumerate(node[2])
        for key, value in entries:
            is_ref = key in refs
            below = self._path_to_type(value, name) if is_ref else _inline_path_to_type(value, name)
            if below is not None:
                return (key if kind == MAP else at + key, *below)
        return None

    def parts(self, oid: bytes, at: int = 0) -> list[Part]:
        """The parts of the MAP or SEQ node ``oid`` (see ``node_parts``)."""
        return node_parts(*self.node(oid), at)

    def view(self, oid: bytes) -> Any:
        """A lazy view of a MAP or SEQ object, the value itself for anything else."""
        kind, node = self.node(oid)
        if kind == MAP and not isinstance(node[0], str):
            return MapView(self, ObjectId(oid), node)
        if kind == SEQ:
            return SeqView(self, ObjectId(oid), node)
        return self.materialize(oid)


def _inline_path_to_type(value: Any, name: str) -> tuple[Any, ...] | None:
    """``Loader._path_to_type`` within an inline value, decoded without rebuilding typed
    values (each is its ``(name, fields)`` pair)."""
    if type(value) is tuple and len(value) == 2 and value[0] == name and type(value[1]) is dict:
        return ()
    items = value.items() if type(value) is dict else enumerate(value) if type(value) in (list, tuple) else ()
    for key, item in items:
        below = _inline_path_to_type(item, name)
        if below is not None:
            return (key, *below)
    return None


class _Builder:
    """Assembles decoded nodes into values; a node used twice is decoded afresh so no
    two places in the result share a mutable object. ``built`` (if not None) logs what
    was built from each stored object (``BuildLog``)."""

    def __init__(self, decoded: dict[bytes, tuple[int, Any]], raw: dict[bytes, bytes],
                 built: BuildLog | None, fetch: Callable[[bytes], bytes], hook: Callable[[int, bytes], Any],
                 cache: ObjectCache, held: dict[bytes, str | bytes]) -> None:
        self.decoded = decoded
        self.raw = raw
        self.built = built
        self.log = built.objects if built is not None else None
        self.hook = hook
        self.cache = cache  # keeps the long str and bytes values built (``ObjectCache.put_text``)
        self.held = held  # those it kept when the walk met them, by id (``Loader._unheld``)
        self.fetch = fetch  # a chunk met again: its bytes were let go once taken

    def _take(self, oid: bytes) -> tuple[int, Any]:
        got = self.decoded.pop(oid, None)
        if got is None:
            data = self.raw.get(oid)
            return decode_node(oid, data if data is not None else self.fetch(oid), hook=self.hook)
        return got

    def build(self, oid: bytes) -> Any:
        built = self.log
        known = self.held.get(oid)
        if known is not None:
            if built is not None:
                built.append(Built(oid, known, None, 0))
            return known
        kind, node = self._take(oid)
        if kind == MAP:
            out = self._map_into(node, {})
            tag = node[0]
            if tag != TAG_DICT:
                if self.built is not None:
                    self.built.plain = False
                return adapter_for_name(tag).from_fields(out)
            if built is not None:
                built.append(Built(oid, out, node, len(self.raw[oid])))
            return out
        if kind == SEQ:
            items: list[Any] = []
            self._seq_into(node, items)
            seq = tuple(items) if node[0] == TAG_TUPLE else items
            if built is not None:
                built.append(Built(oid, seq, node, len(self.raw[oid])))
            return seq
        if kind == TEXT:
            parts: list[Any] = []
            self._text_into(node, parts)
            data = b"".join(parts)
            text: str | bytes = data
            if node[0] == TAG_STR:
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise CorruptObjectError(ObjectId(oid), f"text is not valid UTF-8: {exc}") from None
            self.cache.put_text(oid, text, len(data))
            if built is not None:
                built.append(Built(oid, text, None, len(self.raw[oid])))
            return text
        return node  # BLOB

    def _map_into(self, node: list[Any], out: dict[str, Any]) -> dict[str, Any]:
        if node[1] == 0:
            values = node[2]
            for key in node[3]:
                values[key] = self.build(values[key])
            if not out:
                fresh: dict[str, Any] = values  # a fresh dict from the decoder: no copy needed
                return fresh
            out.update(values)
        else:
            for child in node[3]:
                out = self._map_into(self._take(child)[1], out)
        return out

    def _seq_into(self, node: list[Any], items: list[Any]) -> None:
        if node[1] == 0:
            values = node[2]
            for i in node[3]:
                values[i] = self.build(values[i])
            items += values
        else:
            decoded = self.decoded
            for child in node[2]:
                got = decoded.pop(child, None)
                below = got[1] if got is not None else self._take(child)[1]
                if below[1] == 0 and not below[3]:  # a leaf holding no reference: its items as decoded
                    items += below[2]
                else:
                    self._seq_into(below, items)

    def _text_into(self, node: list[Any], parts: list[Any]) -> None:
        if node[1] == 0:
            pieces = node[2]
            raw = self.raw
            for i in node[4]:
                # A chunk's bytes are let go once taken (a large state is not held twice
                # while it is built); a chunk met again is read again.
                data = raw.pop(pieces[i], None)
                if data is None:
                    data = self.fetch(pieces[i])
                if data[:1] != _BLOB_KIND:
                    raise CorruptObjectError(ObjectId(pieces[i]), "a chunk of a text is not a BLOB")
                pieces[i] = memoryview(data)[1:]  # joined below: not copied before
            parts += pieces
        else:
            for child in node[2]:
                self._text_into(self._take(child)[1], parts)


class MapView(Mapping[str, Any]):
    """A read-only, lazy dict over a stored map: a key's lookup loads only its path."""

    def __init__(self, loader: Loader, oid: ObjectId, node: list[Any]) -> None:
        self._loader = loader
        self.id = oid
        self._node = node

    def _leaf_for(self, key: str) -> list[Any] | None:
        node = self._node
        while node[1] > 0:
            i = bisect_right(node[2], key) - 1
            if i < 0:
                return None
            node = self._loader.node(node[3][i])[1]
        return node

    def __getitem__(self, key: str) -> Any:
        if type(key) is not str:
            raise PathError(key, f"not a key of stored map {self.id.short}: its keys are str")
        leaf = self._leaf_for(key)
        if leaf is None or key not in leaf[2]:
            raise PathError(key, f"no such key in stored map {self.id.short}")
        value = leaf[2][key]
        return self._loader.view(value) if key in leaf[3] else value

    def _leaves(self, node: list[Any]) -> Iterator[list[Any]]:
        if node[1] == 0:
            yield node
        else:
            for child in node[3]:
                yield from self._leaves(self._loader.node(child)[1])

    def __iter__(self) -> Iterator[str]:
        for leaf in self._leaves(self._node):
            yield from leaf[2]

    def __len__(self) -> int:
        return len(self._node[2]) if self._node[1] == 0 else sum(self._node[4])

    def to_dict(self) -> dict[str, Any]:
        """The whole map as a fresh dict."""
        value: dict[str, Any] = self._loader.materialize(self.id)
        return value

    @property
    def loader(self) -> Loader:
        """The loader this view reads through (an encoder stores a view of its own
        repository as a reference to it)."""
        return self._loader

    def may_inline(self) -> bool:
        """Whether the value might encode inline in a parent (one leaf holding no
        reference): true of a small root state, which alone is stored as an object
        whatever its size."""
        return self._node[1] == 0 and not self._node[3]

    def __repr__(self) -> str:
        return f"<MapView {self.id.short} with {len(self)} keys>"


class SeqView(Sequence[Any]):
    """A read-only, lazy list over a stored list or tuple: ``view[i]`` loads only its path."""

    def __init__(self, loader: Loader, oid: ObjectId, node: list[Any]) -> None:
        self._loader = loader
        self.id = oid
        self._node = node

    def __len__(self) -> int:
        return len(self._node[2]) if self._node[1] == 0 else sum(self._node[3])

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        given = index
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise PathError(given, f"index out of range for stored list {self.id.short} of {n}")
        node = self._node
        while node[1] > 0:
            starts = list(accumulate(node[3], initial=0))
            i = bisect_right(starts, index) - 1
            index -= starts[i]
            node = self._loader.node(node[2][i])[1]
        value = node[2][index]
        return self._loader.view(value) if index in node[3] else value

    def to_list(self) -> list[Any] | tuple[Any, ...]:
        value: list[Any] | tuple[Any, ...] = self._loader.materialize(self.id)
        return value

    @property
    def loader(self) -> Loader:
        return self._loader

    def may_inline(self) -> bool:
        return self._node[1] == 0 and not self._node[3]

    def __repr__(self) -> str:
        return f"<SeqView {self.id.short} of {len(self)} items>"


def tree_root(view: MapView | SeqView) -> tuple[Loader, list[Part]]:
    """Where a walk of a view's tree starts: its loader and its root node's parts."""
    kind = MAP if isinstance(view, MapView) else SEQ
    return view._loader, node_parts(kind, view._node)


def is_tuple(view: SeqView) -> bool:
    """Whether a stored sequence is a tuple (else a list)."""
    return bool(view._node[0] == TAG_TUPLE)
