"""When is a value's cached encoding reused? The one rule, for every kind of container.

The encoder (``snapvc.encoding.writer``) meets each container of a state with the entry
the encode cache has for it (``snapvc.encoding.cache.CacheEntry``: what the container
held, by identity, and what it encoded to), if any. It asks here whether that encoding
may stand for the container now, whole, and whether what is below it is unchanged (so
that the elements it still holds keep their encodings one by one). Nothing is trusted
without a check, except what a caller's promise covers:

1. an entry confirmed in this encoder run stands (the container was met twice, or was
   checked already);
2. off the dirty paths a caller named (``Encoder.encode_root``), it stands unchecked;
3. otherwise it stands when nothing below the container changed (its flat snapshot,
   ``DeepSnapshot.same``, or its container children one by one, encoded again, which
   costs nothing for those unchanged) and the container holds the very objects the
   entry recorded;
4. where a stored node is required (the root of a state) only an encoding that is a
   reference stands: a small container is otherwise written inline.

Where the whole does not stand, an element the entry recorded keeps its encoding if it
is the very same object and is immutable, or if it is a container with nothing below
it changed (``element_unchanged``); so do the elements a list still starts with (an
append, or a list cut: ``list_start``) and the elements met again elsewhere in it (one
removed, inserted or replaced before them: ``moved_encodings``); a dict with the same
keys re-encodes only its values that are new objects (``same_keys``).

A container met for the first time may take over the entry of the large container last
encoded at its path (a state rebuilt at every step): ``may_take_over`` and
``takes_over`` say when; the taken-over entry is then checked by the rules above like
any other, nothing about it trusted. Where that entry is kept, and what an entry shared
with another branch's cache becomes when it changes, is the cache's
(``EncodeCache.entry_at``, ``EncodeCache.writable``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable
from operator import is_
from typing import Any, Final, NamedTuple

from snapvc.encoding.cache import ADOPT_MIN, IMMUTABLE_TYPES, MUTABLE_CONTAINERS, CacheEntry
from snapvc.encoding.identity import same_prefix
from snapvc.encoding.prolly import first_key
from snapvc.encoding.values import REF_PREFIX

__all__ = ["DIRTY", "CLEAN", "path_trie", "hint_at", "confirmed", "may_take_over", "kept_for_taking_over", "takes_over", "unchanged",
           "element_unchanged", "typed_unchanged", "ListStart", "list_start", "moved_encodings", "same_keys"]

# Markers of the dirty-path trie (see ``Encoder.encode_root``): a dirty path, or below one
# (check as usual), and a path off every dirty one (trusted unchanged).
DIRTY: Final = object()
CLEAN: Final = object()
_MISSING: Final = object()

# Whether the child at a key of the current container still encodes to what it did:
# (key, child, its encoding then) -> bool. The encoder's, which encodes it again.
ChildSame = Callable[[Any, Any, bytes], bool]


def path_trie(paths: Iterable[tuple[Any, ...]]) -> Any:
    """Nested dicts by path step; ``DIRTY`` marks a dirty path (all below it is dirty)."""
    root: dict[Any, Any] = {}
    for path in paths:
        if not path:
            return DIRTY
        node = root
        for key in path[:-1]:
            child = node.setdefault(key, {})
            if child is DIRTY:
                break
            node = child
        else:
            node[path[-1]] = DIRTY
    return root


def hint_at(trie: Any, path: list[Any]) -> Any:
    """Where ``path`` stands in the dirty-path trie: ``DIRTY`` (a dirty path or below
    one: check as usual), a dict (above one: its keys lead to dirty paths) or ``CLEAN``
    (trusted unchanged)."""
    node = trie
    for key in path:
        if node is DIRTY:
            return DIRTY
        node = node.get(key)
        if node is None:
            return CLEAN
    return node


def stands_for(e: CacheEntry, force_node: bool) -> bool:
    """Whether ``e``'s encoding may be written where a node is required if ``force_node``."""
    return not force_node or e.enc.startswith(REF_PREFIX)


def confirmed(e: CacheEntry, gen: int, force_node: bool = False) -> bool:
    """Rule 1: ``e`` was confirmed in encoder run ``gen`` (and stands where it is needed)."""
    return e.gen == gen and stands_for(e, force_node)


def may_take_over(container: Any, hint: Any) -> bool:
    """Whether ``container``, met for the first time, may take over the entry of the one
    encoded at its path last time: if it is large enough for that to pay (``ADOPT_MIN``:
    smaller ones cost little to encode anew), and not where a promise trusts what is there."""
    return (hint is None or hint is DIRTY) and len(container) >= ADOPT_MIN


def kept_for_taking_over(container: Any, entries: list[Any]) -> bool:
    """Whether the entry made for ``container`` (of ``entries``) is remembered by its path,
    for a container there next time to take over: a large dict, list or tuple."""
    return len(entries) >= ADOPT_MIN and type(container) in MUTABLE_CONTAINERS


def takes_over(e: CacheEntry | None, container: Any, gen: int) -> bool:
    """Whether ``container`` takes over ``e``, the entry of the large container encoded at
    its path most recently: one of the same type, not in use in this encoder run (met or
    taken over already). What ``e`` recorded is then checked as for a container met again."""
    return e is not None and e.gen != gen and type(e.obj) is type(container)


def unchanged(e: CacheEntry, container: Any, hint: Any, gen: int, child_same: ChildSame,
              force_node: bool = False) -> tuple[bool, bool]:
    """Rules 2 to 4 for ``container`` (a dict, list or tuple; a typed value's fields) and
    its entry ``e``: (whether ``e``'s encoding stands for it whole, whether nothing below
    it changed). An entry that stands is confirmed for run ``gen``."""
    if hint is CLEAN and stands_for(e, force_node):
        e.gen = gen
        return True, True
    below = below_unchanged(e, hint, container, gen, child_same)
    if below and _holds_recorded(e, container, hint) and stands_for(e, force_node):
        e.gen = gen
        return True, True
    return False, below


def _holds_recorded(e: CacheEntry, container: Any, hint: Any) -> bool:
    """Whether ``container`` holds the very objects ``e`` recorded. Above dirty paths a
    dict is not taken whole: its changes are found by key (``Encoder._encode_dict_few``)."""
    if len(e.vals) != len(container):
        return False
    if type(container) is dict:
        return type(hint) is not dict and all(map(is_, container.values(), e.vals)) and all(map(is_, container, e.keys))
    return same_prefix(container, e.vals)


def below_unchanged(e: CacheEntry, hint: Any, current: Any, gen: int, child_same: ChildSame) -> bool:
    """True if nothing below ``e``'s container changed since it was encoded (its own
    shallow contents are the caller's to check). ``hint``, a dict of the dirty paths
    below (see ``encode_root``), limits the check to the children they lead to that
    ``current`` (the container now) still holds: the others are trusted."""
    if e.gen == gen:
        return True
    if type(hint) is dict:
        kids = e.kids
        for key in hint:
            try:
                i = bisect_left(kids, key, key=first_key)
            except TypeError:  # a key of another type than the container's
                return False
            if i == len(kids) or kids[i][0] != key:
                continue  # not a container last time: the caller's shallow check sees a change
            _, child, enc = kids[i]
            try:
                still_there = current[key] is child
            except (KeyError, IndexError, TypeError):
                still_there = False
            if not still_there:
                continue  # replaced or gone: the caller's shallow check sees it
            if not child_same(key, child, enc):
                return False
        return True
    if e.deep is not None:
        return e.deep.same()
    # Kid by kid: only those the container still holds matter (one it no longer holds,
    # replaced in a rebuilt container, is encoded as the new value it is).
    if type(current) is dict:
        return all(child_same(key, child, enc) for key, child, enc in e.kids
                   if current.get(key, _MISSING) is child)
    n = len(current) if current is not None else 0
    return all(child_same(key, child, enc) for key, child, enc in e.kids
               if key < n and current[key] is child)


def element_unchanged(before: Any, value: Any, below_trusted: bool) -> bool:
    """Whether ``value``, where a container's entry recorded ``before``, keeps the
    encoding recorded for it: the very same object, immutable, or a container when
    nothing below it changed (``below_trusted``: checked, or off the dirty paths)."""
    if before is not value:
        return False
    t = type(value)
    return t in IMMUTABLE_TYPES or (below_trusted and t in MUTABLE_CONTAINERS)


def typed_unchanged(e: CacheEntry | None, gen: int) -> bool:
    """Whether a typed value whose fields are its own attributes still encodes as its
    entry ``e`` says, confirmed by its snapshot (what it holds, by identity) without
    building its fields."""
    return e is not None and e.deep is not None and (e.gen == gen or e.deep.same())


class ListStart(NamedTuple):
    """How much of its entry's work a list that is not reused whole keeps."""

    kept: int  # how many leading elements keep their encodings (and their kids)
    grow: bool  # all the entry's elements are kept, the rest appended: the entry grows in place
    dirty_only: bool  # above dirty paths, the same elements: only those on dirty paths are encoded


_NOTHING_KEPT: Final = ListStart(0, False, False)


def list_start(e: CacheEntry | None, s: list[Any] | tuple[Any, ...], hint: Any, below_same: bool) -> ListStart:
    """What list or tuple ``s`` keeps of ``e``'s work. The elements it still starts with
    (the very objects, compared by identity), when nothing below the old elements changed
    (``below_same``); all of them without a pass over them when the dirty paths below are
    all new indexes past the old end (an append, by the promise of ``encode_root``). A
    pure append grows the entry in place when the entry has a flat snapshot to grow (or
    the promise covers what is below). Above dirty paths, a list holding the same elements
    re-encodes only those on the dirty paths."""
    if e is None:
        return _NOTHING_KEPT
    n_old = len(e.vals)
    promised_append = type(hint) is dict and len(s) > n_old and all(type(k) is int and k >= n_old for k in hint)
    if promised_append or (below_same and same_prefix(s, e.vals)):
        kept = min(n_old, len(s))
        return ListStart(kept, kept == n_old and (e.deep is not None or promised_append), False)
    if type(hint) is dict and n_old == len(s) and same_prefix(s, e.vals):
        return ListStart(n_old, False, True)
    return _NOTHING_KEPT


def moved_encodings(e: CacheEntry, below_same: bool) -> dict[int, bytes]:
    """The encodings of ``e``'s elements that stand wherever the list now holds them (one
    removed, inserted or replaced before them), by id (valid while ``e`` holds them):
    immutable ones always, containers when ``e``'s snapshot confirmed everything below
    the old elements unchanged (``below_same``)."""
    every = below_same and e.deep is not None
    return {id(v): enc for v, enc in zip(e.vals, e.entries) if every or type(v) in IMMUTABLE_TYPES}


def same_keys(e: CacheEntry, d: dict[str, Any], hint: Any) -> bool:
    """Whether dict ``d`` has the keys ``e`` recorded, in the same order, so that only its
    values that are new objects need encoding (``Encoder._encode_dict_few``); above dirty
    paths the promise says so for every key off them."""
    return bool(e.sorted_keys) and len(e.vals) == len(d) and (type(hint) is dict or all(map(is_, d, e.keys)))
