"""The encode cache: what the encoder remembers of a committed state, so that the next
commit costs what changed.

Per container object it encoded (or that a load taught it, ``snapvc.encoding.seed``),
the ``EncodeCache`` keeps a ``CacheEntry``: the objects the container held, by identity,
what each encoded to, the tree it was stored as, and a ``DeepSnapshot`` of everything
below it. The encoder (``snapvc.encoding.writer``) reuses an entry's encoding only once
the container is found to hold exactly what the entry recorded; nothing is trusted
without that check, except below the paths a caller names as the only dirty ones
(``Encoder.encode_root``).

What other modules use is public here: the encoder, the seeder (which makes entries for
a state just loaded), and integrations that need to know whether values were changed in
place since they were stored (``DeepSnapshot``). Neither the cache nor a snapshot is
thread-safe: each belongs to one branch's encoder, used by one commit at a time.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from gc import get_referents
from itertools import chain, compress, repeat
from operator import not_
from typing import Any, Final, Generic, TypeVar

from snapvc.encoding.adapters import adapter_for_value
from snapvc.encoding.identity import dict_versions, recorded_versions, same_objects
from snapvc.encoding.prolly import Level
from snapvc.encoding.reader import MapView, SeqView
from snapvc.encoding.values import MAX_DEPTH, SCALAR_EXT_TYPES

__all__ = ["EncodeCache", "CacheEntry", "DeepSnapshot", "IMMUTABLE_TYPES", "MUTABLE_CONTAINERS", "ADOPT_MIN"]

# Values that cannot change in place: a container holding the same ones, by identity,
# holds the same value. (A lazy view of a stored value is read-only.)
IMMUTABLE_TYPES: Final = frozenset({str, int, float, bool, type(None), bytes, MapView, SeqView, *SCALAR_EXT_TYPES})
# The containers a state is made of: each has an entry of its own, checked by identity.
MUTABLE_CONTAINERS: Final = frozenset({dict, list, tuple})
# What a typed value holds that is not one of its fields' values: its instance dict (whose
# values are) and the sets of a pydantic model (its fields set).
_NOT_FIELDS: Final = frozenset({dict, set, frozenset})
_DICT: Final = frozenset({dict})
_SETS: Final = frozenset({set, frozenset})


def _of_types(items: list[Any], types: frozenset[Any], of: bool) -> list[Any]:
    """The items whose type is (``of``) or is not one of ``types``, found in one C-speed
    pass (a snapshot sorts tens of thousands of objects so)."""
    found = map(types.__contains__, map(type, items))
    return list(compress(items, found if of else map(not_, found)))


# Containers of at least this many entries are remembered by path, for a new container at
# the same path to take over (``reuse.may_take_over``); smaller ones cost little to encode anew.
ADOPT_MIN: Final = 16
# What an encode cache remembers by path (the trees, chunk lists and large containers
# last stored at paths met in earlier commits or loads), in bytes, estimated
# (``_tree_bytes``, ``_chunks_bytes``, ``_entry_bytes``), beyond the last commit's own
# records: a checkpointer writing at a new path each time would otherwise keep every
# history it wrote. Past a budget, only the last commit's records are kept. 64 MiB an
# encode cache in all (the chunk lists' budget counts the large bytes values kept for
# rechunking).
TREES_BUDGET: Final = 16 << 20
CHUNKS_BUDGET: Final = 32 << 20
ADOPTABLE_BUDGET: Final = 16 << 20
_NO_CHUNKS: tuple[list[int], list[bytes], bytes | None] = ([], [], None)
# How many dicts a snapshot checks in one run of passes (``DeepSnapshot._dicts_same``).
_DICTS_AT_ONCE: Final = 512
# How many dicts' version numbers one reader made once reads (``DeepSnapshot._versions_same``).
_VERSIONS_AT_ONCE: Final = 1024
# Bytes an estimate counts per reference, per entry of a level or a snapshot, and per record.
_REF_BYTES: Final = 88
_ITEM_BYTES: Final = 64
_RECORD_BYTES: Final = 200

_V = TypeVar("_V")


class ByPath(Generic[_V]):
    """Records by path in the state: what the last commit (or load) left at each path
    (``old``), and what the commit being encoded records (``new``), with what each costs
    in bytes. When a commit is stored, its records replace the old ones at their paths;
    the old ones at other paths stay, while the whole is within ``budget`` bytes, else
    only the commit's own are kept."""

    __slots__ = ("old", "new", "_old_cost", "_new_cost", "old_bytes", "new_bytes", "budget")

    def __init__(self, budget: int) -> None:
        self.old: dict[tuple[Any, ...], _V] = {}
        self.new: dict[tuple[Any, ...], _V] = {}
        self._old_cost: dict[tuple[Any, ...], int] = {}
        self._new_cost: dict[tuple[Any, ...], int] = {}
        self.old_bytes = 0
        self.new_bytes = 0
        self.budget = budget

    def put(self, path: tuple[Any, ...], record: _V, cost: int) -> None:
        """Record what this commit stored at ``path``."""
        self.new_bytes += cost - self._new_cost.get(path, 0)
        self.new[path] = record
        self._new_cost[path] = cost

    def seed(self, path: tuple[Any, ...], record: _V, cost: int) -> None:
        """Record what a load found at ``path``, as if the last commit had left it."""
        if self.old_bytes + cost > self.budget:
            self._forget_old()
        self.old_bytes += cost - self._old_cost.get(path, 0)
        self.old[path] = record
        self._old_cost[path] = cost

    def commit(self) -> None:
        replaced = sum(self._old_cost.get(path, 0) for path in self._new_cost)
        if self.old_bytes - replaced + self.new_bytes > self.budget:
            self._forget_old()
            replaced = 0
        self.old_bytes += self.new_bytes - replaced
        self._old_cost.update(self._new_cost)
        self.old.update(self.new)
        self.discard()

    def discard(self) -> None:
        self.new = {}
        self._new_cost = {}
        self.new_bytes = 0

    def fork(self) -> ByPath[_V]:
        """Another memo holding this one's old records (a forked cache's start)."""
        other: ByPath[_V] = ByPath(self.budget)
        other.old = dict(self.old)
        other._old_cost = dict(self._old_cost)
        other.old_bytes = self.old_bytes
        return other

    def _forget_old(self) -> None:
        self.old = {}
        self._old_cost = {}
        self.old_bytes = 0


def _tree_bytes(tree: list[Level] | None) -> int:
    """About what a tree's record keeps alive: its levels' entries and nodes."""
    if tree is None:
        return _RECORD_BYTES
    return _RECORD_BYTES + _ITEM_BYTES * sum(len(level.entries) + len(level.nodes) for level in tree)


def _chunks_bytes(refs: list[bytes], data: bytes | None) -> int:
    """About what a long string's chunk list keeps alive, with the bytes kept for rechunking."""
    return _RECORD_BYTES + _REF_BYTES * len(refs) + (len(data) if data is not None else 0)


def _entry_bytes(entry: CacheEntry) -> int:
    """About what a large container's entry keeps alive besides the container itself: its
    entries, encodings and snapshot (the tree is counted with the path's nodes)."""
    deep = entry.deep
    below = sum(deep.sizes()) + len(deep.dlens) + 7 * len(deep.vdicts) + len(deep.slens) if deep is not None else 0
    return _RECORD_BYTES + _ITEM_BYTES * (len(entry.entries) + len(entry.kids)) + 8 * below


class DeepSnapshot:
    """A flat snapshot of every mutable container below a container: which objects each
    held, by identity. Checking it is a few C-speed passes, so a list of a thousand
    message dicts is confirmed unchanged without visiting each in Python.

    Typed values whose fields are their own attributes (dataclasses, pydantic models:
    ``TypeAdapter.own_fields``) are recorded too, as the objects they hold (their
    ``__dict__``, slots and class), with the contents of that ``__dict__`` and of the
    sets and dicts in their slots (a pydantic model's fields set, extra and private).

    A dict is recorded by its version number where the interpreter keeps one
    (``identity.dict_versions``: one number read per dict, its table unread), else by
    its keys and values."""

    __slots__ = ("dicts", "dlens", "keys", "vals", "vdicts", "vplaces", "vnums", "_readers", "seqs", "slens", "items",
                 "objs", "olens", "orefs")

    def __init__(self) -> None:
        # dicts recorded by what they hold
        self.dicts: list[dict[str, Any]] = []
        self.dlens: list[int] = []
        self.keys: list[Any] = []
        self.vals: list[Any] = []
        # dicts recorded by version number: the dicts, where their numbers are, the numbers
        self.vdicts: list[dict[str, Any]] = []
        self.vplaces = array("Q")  # (numbers side by side: a check reads them in one sweep)
        self.vnums = array("Q")
        # readers of the numbers of each full run of _VERSIONS_AT_ONCE places, made at the
        # first check that reads them (places are only appended, or cut by ``truncate``)
        self._readers: list[Callable[[], array[int]]] = []
        self.seqs: list[Any] = []  # lists, tuples, and the sets typed values hold
        self.slens: list[int] = []
        self.items: list[Any] = []
        self.objs: list[Any] = []  # typed values
        self.olens: list[int] = []
        self.orefs: list[Any] = []

    def add(self, child: Any, below: DeepSnapshot) -> None:
        """Record ``child`` (a dict, list or tuple, or a typed value whose own snapshot,
        ``below``, records it) and everything below it."""
        t = type(child)
        if t is dict:
            self._add_dict(child)
        elif t is list or t is tuple:
            self._add_seq(child)
        if below.containers():
            self.add_all(below)

    def _add_dict(self, d: dict[Any, Any]) -> None:
        self._add_dicts([d])

    def _add_dicts(self, dicts: list[dict[Any, Any]]) -> None:
        if not dicts:
            return
        versions = dict_versions()
        if versions is not None:
            places = versions.where(dicts)
            self.vdicts += dicts
            self.vplaces.extend(places)
            self.vnums.extend(versions.read(places))
            return
        self.dicts += dicts
        self.dlens += map(len, dicts)
        self.keys += chain.from_iterable(dicts)
        self.vals += get_referents(*dicts)

    def _add_seq(self, s: Any) -> None:
        self.seqs.append(s)
        self.slens.append(len(s))
        self.items.extend(get_referents(s))

    def add_object(self, obj: Any) -> None:
        """Record a typed value whose fields are its own attributes (see the class notes)."""
        getattr(obj, "__dict__", None)  # an instance dict made now is checked key by key from here on
        refs = get_referents(obj)
        self.objs.append(obj)
        self.olens.append(len(refs))
        self.orefs.extend(refs)
        for held in refs:
            t = type(held)
            if t is dict:
                self._add_dict(held)
            elif t is set or t is frozenset:
                self._add_seq(held)

    def add_objects(self, objs: list[Any]) -> list[Any]:
        """``add_object`` of each of ``objs``, in a few C-speed passes over them all (a
        message history is thousands of typed values); returns what they hold."""
        for _ in map(getattr, objs, repeat("__dict__"), repeat(None)):  # (see ``add_object``)
            pass
        each = list(map(get_referents, objs))
        refs = list(chain.from_iterable(each))
        self.objs += objs
        self.olens += map(len, each)
        self.orefs += refs
        self._add_dicts(_of_types(refs, _DICT, True))
        sets = _of_types(refs, _SETS, True)
        if sets:
            self.seqs += sets
            self.slens += map(len, sets)
            self.items += get_referents(*sets)
        return refs

    @classmethod
    def of(cls, values: list[Any]) -> DeepSnapshot | None:
        """The snapshot of ``values`` and everything below them, found a level at a time
        in C-speed passes (``gc.get_referents``): what a loaded state is checked with.
        None if something below is a typed value that cannot be snapshotted (its adapter
        computes its fields), or if it nests deeper than a state may (a cycle)."""
        deep = cls()
        frontier = _of_types(values, IMMUTABLE_TYPES, False)
        for _ in range(MAX_DEPTH + 2):
            if not frontier:
                return deep
            plain = _of_types(frontier, MUTABLE_CONTAINERS, True)
            below = []
            if len(plain) < len(frontier):  # typed values: what they hold, then their fields
                typed = _of_types(frontier, MUTABLE_CONTAINERS, False)
                if not all(adapter is not None and adapter.own_fields for adapter in map(adapter_for_value, typed)):
                    return None
                held = deep.add_objects(typed)
                below += get_referents(*_of_types(held, _DICT, True))
                slots = _of_types(held, _NOT_FIELDS, False)  # and their classes
                below += compress(slots, map(not_, map(isinstance, slots, repeat(type))))
            dicts = _of_types(plain, _DICT, True)
            seqs = _of_types(plain, _DICT, False)
            deep._add_dicts(dicts)
            deep.seqs += seqs
            deep.slens += map(len, seqs)
            deep.items += get_referents(*seqs)
            below += get_referents(*plain)
            frontier = _of_types(below, IMMUTABLE_TYPES, False)
        return None

    def add_all(self, other: DeepSnapshot) -> None:
        """Record what ``other`` records too (its lists are copied, not shared)."""
        self.dicts += other.dicts
        self.dlens += other.dlens
        self.keys += other.keys
        self.vals += other.vals
        if other.vdicts:
            self.vdicts += other.vdicts
            self.vplaces += other.vplaces
            self.vnums += other.vnums
        self.seqs += other.seqs
        self.slens += other.slens
        self.items += other.items
        if other.objs:
            self.objs += other.objs
            self.olens += other.olens
            self.orefs += other.orefs

    def sizes(self) -> tuple[int, ...]:
        """How much is recorded: what ``truncate`` takes to forget what was added since."""
        return (len(self.dicts), len(self.keys), len(self.vdicts), len(self.seqs), len(self.items), len(self.objs),
                len(self.orefs))

    def containers(self) -> int:
        """How many containers and typed values are recorded."""
        return len(self.dicts) + len(self.vdicts) + len(self.seqs) + len(self.objs)

    def copy(self) -> DeepSnapshot:
        """A snapshot recording the same, whose lists are its own. The readers of the
        version numbers' places come along: the places are the same, and a reader is
        never changed, only made or dropped (``truncate``), so the copy's first check
        reads the numbers without making them again."""
        other = DeepSnapshot()
        other.add_all(self)
        other._readers = list(self._readers)
        return other

    def truncate(self, sizes: tuple[int, ...]) -> None:
        """Forget what was recorded after ``sizes`` was taken (a failed commit's additions)."""
        nd, nk, nv, ns, ni, no, nr = sizes
        del self.dicts[nd:], self.dlens[nd:], self.keys[nk:], self.vals[nk:]
        del self.vdicts[nv:], self.vplaces[nv:], self.vnums[nv:], self._readers[nv // _VERSIONS_AT_ONCE:]
        del self.seqs[ns:], self.slens[ns:], self.items[ni:]
        del self.objs[no:], self.olens[no:], self.orefs[nr:]

    def same(self) -> bool:
        """True if every recorded container still holds exactly the recorded objects.

        ``gc.get_referents`` lists what containers hold (a dict's values, a list's items,
        a typed value's attributes) in one C call; identity is then compared all at once
        (``snapvc.encoding.identity``). Keys are str (anything else fails to encode), and
        str equality is exact. A dict recorded by version number is unchanged while its
        number is the same (``identity.dict_versions``)."""
        return (
            list(map(len, self.seqs)) == self.slens
            and same_objects(get_referents(*self.seqs), self.items)
            and self._versions_same()
            and self._dicts_same()
            and (not self.objs or (
                list(map(len, map(get_referents, self.objs))) == self.olens
                and same_objects(get_referents(*self.objs), self.orefs)))
        )

    def _versions_same(self) -> bool:
        """``same`` for the dicts recorded by version number, a run of ``_VERSIONS_AT_ONCE``
        at a time, each run read by a reader made once (``DictVersions.reader``)."""
        places = self.vplaces
        if not places:
            return True
        versions = recorded_versions()
        assert versions is not None  # (the numbers were read with it)
        nums, readers, run = self.vnums, self._readers, _VERSIONS_AT_ONCE
        full = len(places) // run
        for i in range(len(readers), full):
            readers.append(versions.reader(places[i * run:(i + 1) * run]))
        for i, read in enumerate(readers):
            if read() != nums[i * run:(i + 1) * run]:
                return False
        start = full * run
        return start == len(places) or versions.read(places[start:]) == nums[start:]

    def _dicts_same(self) -> bool:
        """``same`` for the dicts, a run of ``_DICTS_AT_ONCE`` at a time: their sizes, keys
        and values are read while the run is still in the processor's caches (a long
        history's dicts are megabytes, spread through memory, and the check is bound by
        reading them: in whole passes it read each of them three times from memory)."""
        dicts, dlens, keys, vals = self.dicts, self.dlens, self.keys, self.vals
        start = 0
        for i in range(0, len(dicts), _DICTS_AT_ONCE):
            run = dicts[i:i + _DICTS_AT_ONCE]
            lens = dlens[i:i + _DICTS_AT_ONCE]
            if list(map(len, run)) != lens:
                return False
            end = start + sum(lens)
            if list(chain.from_iterable(run)) != keys[start:end] or not same_objects(get_referents(*run),
                                                                                        vals[start:end]):
                return False
            start = end
        return True



class CacheEntry:
    """What the encoder remembers of one container object (or long str or bytes) between
    commits: the object itself (held, so its id is not reused while the entry lives),
    what it held (``keys`` and ``vals`` in insertion order, by identity), what it encoded
    to (``enc``: inline bytes or a reference), its level-0 ``entries`` and ``tree``, and
    the snapshot of everything below it (``deep``)."""

    __slots__ = ("obj", "keys", "vals", "enc", "kids", "tree", "entries", "sorted_keys", "sorted_vals", "deep", "gen",
                 "positions", "insertion", "owner")

    def __init__(self, obj: Any, keys: tuple[Any, ...], vals: Any, enc: bytes,
                 kids: list[tuple[Any, Any, bytes]], tree: list[Level] | None, entries: list[Any]) -> None:
        self.obj = obj
        self.keys = keys  # dicts: the keys in insertion order; empty for anything else
        self.vals = vals
        self.enc = enc
        self.kids = kids  # (key or index, child container, its encoding) for every mutable child
        self.tree = tree  # the prolly levels, for containers large enough to be trees
        self.entries = entries  # the level-0 entries of the container
        self.sorted_keys: tuple[str, ...] = ()  # dicts: keys in entry order
        # dicts: values in entry order (a list once a commit changed some in place)
        self.sorted_vals: tuple[Any, ...] | list[Any] = ()
        self.deep: DeepSnapshot | None = None  # None when something below cannot be snapshotted (typed values)
        self.gen = 0  # the encoder run that last confirmed this entry
        self.positions: dict[str, int] | None = None  # dicts: key -> index in entry order, made on demand
        self.insertion: dict[str, int] | None = None  # dicts: key -> index in ``keys``, made on demand
        # The token of the one cache that may change this entry in place (``EncodeCache.writable``):
        # an entry two caches share since a fork is copied before it changes.
        self.owner: object = None

    def copy(self) -> CacheEntry:
        """An entry saying the same, whose lists (and snapshot) are its own to change."""
        other = CacheEntry(self.obj, self.keys, list(self.vals) if type(self.vals) is list else self.vals,
                           self.enc, list(self.kids), self.tree, list(self.entries))
        other.sorted_keys = self.sorted_keys
        other.sorted_vals = list(self.sorted_vals) if type(self.sorted_vals) is list else self.sorted_vals
        other.deep = self.deep.copy() if self.deep is not None else None
        other.gen = self.gen
        other.positions = self.positions  # made once from the keys, never changed
        other.insertion = self.insertion
        return other


class EncodeCache:
    """Remembered encodings of the containers of the last committed state (per branch).

    Entries are keyed by ``id(obj)`` and hold a strong reference to ``obj``, so an id is
    never reused while its entry lives. ``commit()`` keeps what the last encoding used;
    ``discard()`` forgets what a failed commit added, so the cache never points at
    objects that were not stored.

    ``sources`` are the ids of the stored states (commits) whose objects hold everything
    the cache names: what the next commit reuses from it without storing is part of
    them. Its owner keeps it (``snapvc.repository.core``: the commit it stored last, and
    the ones loaded since); empty while the cache names nothing.

    ``fork()`` gives a second cache starting from what this one holds (a branch forked
    from this one's: its first commit costs the change). The two share their entries
    until one would change an entry in place: it then changes a copy of its own
    (``writable``), so neither ever names what the other stored since.
    """

    def __init__(self) -> None:
        self.sources: set[Any] = set()
        # Stamped on the entries this cache alone holds: those it may change in place.
        self._mine: object = object()
        self.old: dict[int, CacheEntry] = {}
        self.new: dict[int, CacheEntry] = {}
        # the entries of the state loaded last (``seed``), until the next commit: kept
        # apart, so that checking out many states does not keep them all
        self.loaded: dict[int, CacheEntry] = {}
        self._undo: list[Callable[[], None]] = []
        # Each within its budget in bytes beyond the last commit's own records (``ByPath``):
        # path in the state -> (tree, reference, kind, type tag) of the node stored there
        self.paths: ByPath[tuple[Any, Any, int, Any]] = ByPath(TREES_BUDGET)
        # path in the state -> (start offsets, references, bytes or None) of a long
        # string's chunks; the bytes (of a large bytes value) let the next one be rechunked
        # from where it differs (``chunker.rechunk``)
        self.chunks: ByPath[tuple[list[int], list[bytes], bytes | None]] = ByPath(CHUNKS_BUDGET)
        # path in the state -> the entry of the large container last encoded there: a new
        # container at the same path (a state rebuilt each step) takes it over (``Encoder._adopt``)
        self.adoptable: ByPath[CacheEntry] = ByPath(ADOPTABLE_BUDGET)

    @property
    def old_paths(self) -> dict[tuple[Any, ...], tuple[Any, Any, int, Any]]:
        return self.paths.old

    @property
    def old_chunks(self) -> dict[tuple[Any, ...], tuple[list[int], list[bytes], bytes | None]]:
        return self.chunks.old

    @property
    def old_at(self) -> dict[tuple[Any, ...], CacheEntry]:
        return self.adoptable.old

    def path_bytes(self) -> int:
        """About how many bytes the records by path keep alive (see ``ByPath``)."""
        return sum(memo.old_bytes + memo.new_bytes for memo in (self.paths, self.chunks, self.adoptable))

    def size_bytes(self) -> int:
        """About how many bytes this cache keeps alive: its records by path and its
        entries (what its owner weighs against a budget; entries shared with a fork are
        counted in each)."""
        return self.path_bytes() + _RECORD_BYTES * (len(self.old) + len(self.new) + len(self.loaded))

    def get(self, obj: Any) -> CacheEntry | None:
        """The entry of ``obj`` (this very object), if the last commit, this one or the
        last load made one; it is kept for the next commit from then on."""
        key = id(obj)
        e = self.new.get(key)
        if e is None:
            e = self.old.get(key)
            if e is None or e.obj is not obj:
                e = self.loaded.get(key)
                if e is None or e.obj is not obj:
                    return None
            self.new[key] = e
        elif e.obj is not obj:
            return None
        return e

    def put(self, obj: Any, entry: CacheEntry) -> None:
        entry.owner = self._mine
        self.new[id(obj)] = entry

    def writable(self, entry: CacheEntry, path: tuple[Any, ...]) -> CacheEntry:
        """``entry`` (met at ``path``), or, if another cache shares it since a fork, a copy
        of it that takes its place here: what the encoder may change in place."""
        if entry.owner is self._mine:
            return entry
        mine = entry.copy()
        self.put(mine.obj, mine)
        if self.entry_at(path) is entry:
            self.adoptable.put(path, mine, _entry_bytes(mine))
        return mine

    def fork(self) -> EncodeCache:
        """A cache holding what this one holds, for another branch's commits from the same
        state (see the class notes); from now on, each copies a shared entry before it
        changes it. What a commit under way added is not taken (forked between commits)."""
        other = EncodeCache()
        other.sources = set(self.sources)
        other.old = {**self.old, **self.new}
        other.loaded = dict(self.loaded)
        other.paths = self.paths.fork()
        other.chunks = self.chunks.fork()
        other.adoptable = self.adoptable.fork()
        self._mine = object()  # the entries held so far are shared now
        return other

    def move(self, entry: CacheEntry, obj: Any, path: tuple[Any, ...]) -> CacheEntry:
        """Make ``entry`` (the one at ``path``) describe ``obj`` from now on, no longer the
        object it held (undone if the commit fails); an entry shared with another cache
        stays as it is there, and a copy describes ``obj`` here. Returns the entry that
        describes ``obj``."""
        if entry.owner is not self._mine:
            mine = entry.copy()
            mine.obj = obj
            self.put(obj, mine)
            self.adoptable.put(path, mine, _entry_bytes(mine))
            return mine
        before = entry.obj
        key = id(before)
        owned = [d for d in (self.old, self.new, self.loaded) if d.get(key) is entry]
        for d in owned:
            del d[key]
        entry.obj = obj
        self.new[id(obj)] = entry

        def undo() -> None:
            entry.obj = before
            for d in owned:
                d[key] = entry

        self._undo.append(undo)
        return entry

    def start_loading(self) -> None:
        """Forget the entries of the state loaded before (see ``seed``)."""
        self.loaded = {}

    def seed(self, obj: Any, entry: CacheEntry, path: tuple[Any, ...] | None,
             node: tuple[list[Level] | None, int, Any] | None) -> None:
        """Take ``entry`` as if the last commit had encoded ``obj`` (a value just loaded
        from what ``entry.enc`` names: ``snapvc.encoding.seed``); ``path`` (if given) and
        ``node`` (its tree, kind and type tag) as what stood at its path."""
        entry.owner = self._mine
        self.loaded[id(obj)] = entry
        if path is not None:
            # Within the same budget as at a commit: loads of many states keep only so much.
            if len(entry.entries) >= ADOPT_MIN:
                self.adoptable.seed(path, entry, _entry_bytes(entry))
            if node is not None:
                self.paths.seed(path, (node[0], entry.enc, node[1], node[2]), _tree_bytes(node[0]))

    def keep(self, objs: list[Any]) -> None:
        """Keep the entries of ``objs`` (reused through their parent's entries, unchanged)
        for the next commit, as ``get`` would, in a few C-speed passes. An entry holds its
        object, so an entry found under a live object's id is that object's."""
        ids = list(map(id, objs))
        found = {key: e for key, e in zip(ids, map(self.old.get, ids)) if e is not None}
        for key in found.keys() & self.new.keys():
            del found[key]
        self.new.update(found)

    def at_path(self, path: tuple[Any, ...], kind: int, tag: Any) -> tuple[list[Level] | None, bytes | None]:
        """(tree, reference) of the node stored at ``path`` in the last commit, if it was
        a container of the same kind and type (a tuple's nodes are not a list's)."""
        found = self.paths.old.get(path)
        if found is None or found[2] != kind or found[3] != tag:
            return None, None
        return found[0], found[1]

    def put_path(self, path: tuple[Any, ...], enc: bytes, tree: list[Level] | None, kind: int, tag: Any) -> None:
        """Record the node (or tree) this commit stored at ``path`` (see ``at_path``)."""
        self.paths.put(path, (tree, enc, kind, tag), _tree_bytes(tree))

    def entry_at(self, path: tuple[Any, ...]) -> CacheEntry | None:
        """The entry of the large container encoded at ``path`` most recently, if any (its
        container may since have been replaced there, or changed: callers check)."""
        found = self.adoptable.new.get(path)
        return found if found is not None else self.adoptable.old.get(path)

    def put_at(self, path: tuple[Any, ...], entry: CacheEntry) -> None:
        """Record ``entry`` as the large container this commit encoded at ``path``."""
        self.adoptable.put(path, entry, _entry_bytes(entry))

    def chunks_at(self, path: tuple[Any, ...]) -> tuple[list[int], list[bytes], bytes | None]:
        """(start offsets, references, bytes) of the chunks of the long string stored at
        ``path`` in the last commit; empty lists if none, None for bytes not kept."""
        return self.chunks.old.get(path, _NO_CHUNKS)

    def put_chunks(self, path: tuple[Any, ...], starts: list[int], refs: list[bytes], data: bytes | None = None) -> None:
        """Record the chunks of the long string this commit stored at ``path``, and its
        bytes if given (kept alive until another value is stored there)."""
        self.chunks.put(path, (starts, refs, data), _chunks_bytes(refs, data))

    def on_discard(self, undo: Callable[[], None]) -> None:
        """Run ``undo`` if the commit being encoded fails (for entries grown in place)."""
        self._undo.append(undo)

    def commit(self) -> None:
        """The encoded state was stored: what this commit used becomes what the next one
        starts from (entries it did not meet are forgotten)."""
        self.old = self.new
        self.new = {}
        self.loaded = {}
        # Paths keep what they last held until overwritten (nodes reused unchanged are
        # not re-recorded), within a budget.
        self.paths.commit()
        self.chunks.commit()
        self.adoptable.commit()
        self._undo.clear()

    def discard(self) -> None:
        """The encoded state was not stored: forget what this commit added and undo what
        it changed in place, so the cache describes the last stored state again."""
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()
        self.new = {}
        self.paths.discard()
        self.chunks.discard()
        self.adoptable.discard()
