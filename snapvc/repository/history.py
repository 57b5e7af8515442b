"""Per-path history: the commits in which the value at one path changed.

``Repository.history(rev, path)`` walks the commits of ``log(rev)`` and keeps those
whose value at ``path`` differs from its value in every parent, as git's history
simplification does: a merge that took the path unchanged from one of its parents is
not a change of the path, however the other parent had it. A root commit counts where
the path exists. ``log(paths=...)`` keeps commits by the same comparison.

A value is found by reading only the nodes on its path (``PathProbe``): from a
commit's root map, the nodes of each stored container down to the entry for the next
step. A value that is an object of its own compares by its id, an inline value by its
encoding (so ``1``, ``1.0`` and ``True`` differ, as they are stored differently). What
a value is stored as is a function of the value alone (``snapvc.encoding.writer``), so
a value stored in one commit and inline in another has changed. Each node's answer is
remembered for the rest of the walk: a subtree that did not change between a commit
and its parent, or a map's inner node that holds the key in both, is read once. A
value is read whole only for the commits that are entries.
"""

from __future__ import annotations

import copy
import threading
from bisect import bisect_right
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import NoneType
from typing import TYPE_CHECKING, Any, NamedTuple

from snapvc.encoding.reader import Loader
from snapvc.encoding.writer import element_encoder
from snapvc.ids import ObjectId
from snapvc.objects import MAP, SEQ, Commit

if TYPE_CHECKING:
    from snapvc.diff.changes import ChangeKind

__all__ = ["FieldVersions", "HistoryEntry", "PathProbe", "commits_behind", "path_changes", "path_history", "touches"]

Path = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """A commit that changed the value at a path: ``kind`` of change against the
    commit's first parent, the value at the commit (``value``, None when removed) and
    at the first parent (``old``, None when added), as plain Python objects."""

    commit: Commit
    kind: ChangeKind
    value: Any = None
    old: Any = None


class _Stored(NamedTuple):
    """A value that is an object of its own: known by its id, read only if needed."""

    id: bytes


class _Inline(NamedTuple):
    """A value written inside its parent's node, as decoded from it."""

    value: Any


_MISSING: Any = object()  # nothing at the path
_SCALARS = (str, bytes, int, bool, NoneType)


class PathProbe:
    """What lies at ``path`` in commits' trees, read through ``loader``: only the
    nodes on the path, each node's answer remembered (see the module docstring)."""

    def __init__(self, loader: Loader, path: Path) -> None:
        self.loader = loader
        self.path = path
        self._known: dict[tuple[bytes, int, int | None], Any] = {}

    def at(self, tree: bytes) -> Any:
        """What lies at the path below the root map ``tree``: a ``_Stored``, an
        ``_Inline`` or ``_MISSING``."""
        return self._below(tree, 0)

    def same(self, a: Any, b: Any) -> bool:
        """Whether two findings are the same value: stored under the same id, or
        inline and encoded alike, or both missing."""
        return _same(a, b)

    def entry(self, commit: Commit, kind: ChangeKind, now: Any, before: Any) -> HistoryEntry:
        """The ``HistoryEntry`` of a change ``path_changes`` found, its values read."""
        return HistoryEntry(commit, kind, self.value(now), self.value(before))

    def value(self, found: Any) -> Any:
        """A finding as a fresh plain value (None when missing)."""
        if found is _MISSING:
            return None
        if type(found) is _Stored:
            return self.loader.materialize(found.id)
        value = found.value
        return value if type(value) in _SCALARS else copy.deepcopy(value)

    # -- the walk down the path -----------------------------------------------------------

    def _below(self, oid: bytes, depth: int) -> Any:
        """What lies at ``path[depth:]`` inside the stored container ``oid``."""
        key = (oid, depth, None)
        found = self._known.get(key)
        if found is not None:
            return found
        step = self.path[depth]
        kind, node = self.loader.node(oid)
        if kind == MAP and node[0] == 0 and type(step) is str:  # a dict (a typed value has no steps)
            found = self._in_map(node, depth)
        elif kind == SEQ and (index := _index(step)) is not None:
            found = self._in_seq(node, depth, index)
        else:
            found = _MISSING
        self._known[key] = found
        return found

    def _in_map(self, node: list[Any], depth: int) -> Any:
        step = self.path[depth]
        if node[1] > 0:  # an inner node: on to the child whose keys may hold the step
            i = bisect_right(node[2], step) - 1
            if i < 0:
                return _MISSING
            child = node[3][i]
            key = (child, depth, None)
            found = self._known.get(key)
            if found is None:
                found = self._known[key] = self._in_map(self.loader.node(child)[1], depth)
            return found
        if step not in node[2]:
            return _MISSING
        return self._entry(node[2][step], step in node[3], depth)

    def _in_seq(self, node: list[Any], depth: int, index: int) -> Any:
        if node[1] > 0:  # an inner node: on to the child that holds the index
            for child, count in zip(node[2], node[3]):
                if index < count:
                    key = (child, depth, index)
                    found = self._known.get(key)
                    if found is None:
                        found = self._known[key] = self._in_seq(self.loader.node(child)[1], depth, index)
                    return found
                index -= count
            return _MISSING
        if index >= len(node[2]):
            return _MISSING
        return self._entry(node[2][index], index in node[3], depth)

    def _entry(self, value: Any, is_ref: bool, depth: int) -> Any:
        """What lies at ``path[depth + 1:]`` below an entry of a leaf."""
        depth += 1
        if is_ref:
            return _Stored(value) if depth == len(self.path) else self._below(value, depth)
        for step in self.path[depth:]:  # inside an inline value: plain Python objects
            if type(value) is dict:
                value = value.get(step, _MISSING) if type(step) is str else _MISSING
            elif type(value) is list or type(value) is tuple:
                index = _index(step)
                value = value[index] if index is not None and index < len(value) else _MISSING
            else:
                return _MISSING
            if value is _MISSING:
                return _MISSING
        return _Inline(value)


def _index(step: str | int) -> int | None:
    """A step as a list index: an int, or a str of ASCII digits; None otherwise."""
    if isinstance(step, int):
        return step if step >= 0 else None
    if step.isascii() and step.isdigit():
        return int(step)
    return None


def touches(probes: Sequence[PathProbe], tree: bytes, parent_trees: Sequence[bytes]) -> bool:
    """Whether a commit of root ``tree`` changed the value at any of the probes' paths:
    against every parent, some path differs (git's TREESAME, over all the paths
    together); a root commit, if any of them exists in it."""
    if not parent_trees:
        return any(probe.at(tree) is not _MISSING for probe in probes)
    return all(any(not probe.same(probe.at(tree), probe.at(parent)) for probe in probes) for parent in parent_trees)


def path_history(commits: Iterable[Commit], get_commit: Callable[[ObjectId], Commit], probe: PathProbe,
                 limit: int | None = None) -> Iterator[HistoryEntry]:
    """The entries of ``probe``'s path among ``commits`` (newest first, as ``log`` gives
    them), at most ``limit``. ``get_commit`` gives a commit by id, checked as one whose
    state is read."""
    for found in path_changes(commits, get_commit, probe, limit):
        yield probe.entry(*found)


def path_changes(commits: Iterable[Commit], get_commit: Callable[[ObjectId], Commit], probe: PathProbe,
                 limit: int | None = None) -> Iterator[tuple[Commit, ChangeKind, Any, Any]]:
    """``path_history`` without reading the values: (commit, kind, finding at the
    commit, finding at its first parent), for ``PathProbe.entry`` to read later."""
    produced = 0
    for commit in commits:
        if limit is not None and produced >= limit:
            return
        now = probe.at(get_commit(commit.id).tree)
        before = [probe.at(get_commit(p).tree) for p in commit.parents]
        if before and any(probe.same(now, b) for b in before):
            continue
        first = before[0] if before else _MISSING
        if now is _MISSING and first is _MISSING:
            continue  # a root commit without the path
        kind: ChangeKind = "added" if first is _MISSING else "removed" if now is _MISSING else "modified"
        produced += 1
        yield commit, kind, now, first


def _same(a: Any, b: Any) -> bool:
    """Whether two findings are the same value: stored under the same id, or inline
    and encoded alike, or both missing."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False  # present against missing, or stored against inline
    if type(a) is _Stored:
        return bool(a.id == b.id)
    x, y = a.value, b.value
    if type(x) is not type(y):
        return False
    if type(x) in _SCALARS:
        return bool(x == y)
    # An encoder of its own (about 1 us to make): one kept between calls would be shared
    # by every thread, mixing their paths, and its cache would keep every value it met.
    encode = element_encoder()
    return encode(x) == encode(y)


# -- per-field versions -------------------------------------------------------------------

class FieldVersions:
    """Per-field version counters (``Repository.versions``): for a commit, how many
    commits of its first-parent history added or changed each top-level key.

    Counting walks back only to the nearest commit already counted: the counts of the
    last ``keep`` commits are remembered, so the counters of a branch that grew by one
    commit cost one comparison of two root maps. Root maps are compared entry by entry
    as ``history`` compares values (an id, or an inline encoding); the entries of each
    map node are remembered, so a big top-level map is read once per changed node."""

    def __init__(self, loader: Loader, keep: int = 256) -> None:
        self.loader = loader
        self.keep = keep
        # commit id -> (counts of every key ever met, top-level entries of its state)
        self._counted: dict[ObjectId, tuple[dict[str, int], dict[str, Any]]] = {}
        self._nodes: dict[bytes, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def at(self, commit: Commit, get_commit: Callable[[ObjectId], Commit]) -> dict[str, int]:
        """The counters at ``commit``; ``get_commit`` reads a parent met walking back (it
        is passed on each call, not kept: the repository owns this object, and a getter
        kept here would point back at it)."""
        with self._lock:
            chain: list[Commit] = []
            known = None
            current: Commit | None = commit
            while current is not None:
                known = self._counted.get(current.id)
                if known is not None:
                    break
                chain.append(current)
                current = get_commit(current.parent) if current.parent is not None else None
            counts, entries = known if known is not None else ({}, {})
            for c in reversed(chain):
                now = self._entries(c.tree)
                changed = [k for k, found in now.items() if not _same(found, entries.get(k, _MISSING))]
                if changed:
                    counts = dict(counts)
                    for key in changed:
                        counts[key] = counts.get(key, 0) + 1
                entries = now
                self._counted[c.id] = (counts, entries)
            while len(self._counted) > self.keep:
                del self._counted[next(iter(self._counted))]
            return {key: counts[key] for key in entries}

    def _entries(self, oid: bytes) -> dict[str, Any]:
        """A map's entries (key -> ``_Stored`` or ``_Inline``), by node, remembered."""
        found = self._nodes.get(oid)
        if found is not None:
            return found
        _, node = self.loader.node(oid)
        if node[1] > 0:
            found = {}
            for child in node[3]:
                found.update(self._entries(child))
        else:
            refs = set(node[3])
            found = {k: _Stored(v) if k in refs else _Inline(v) for k, v in node[2].items()}
        if len(self._nodes) >= 4096:
            self._nodes.clear()
        self._nodes[oid] = found
        return found


def commits_behind(get_commit: Callable[[ObjectId], Commit], tips: Iterable[ObjectId],
                   known: Callable[[list[ObjectId]], Collection[ObjectId]]) -> list[Commit]:
    """The commits ``tips`` reach that ``known`` does not name, parents first: what a
    push, a clone or an export must send. The walk stops at a known commit, as all that
    lies behind it is known too (a repository that holds a commit holds its history).
    ``known`` is asked once per level of the walk, with that level's commits."""
    found: dict[ObjectId, Commit] = {}
    waiting = list(dict.fromkeys(tips))
    while waiting:
        have = known(waiting)
        level, waiting = [oid for oid in waiting if oid not in have and oid not in found], []
        for oid in level:
            commit = found[oid] = get_commit(oid)
            waiting.extend(p for p in commit.parents if p not in found)
        waiting = list(dict.fromkeys(waiting))
    return sorted(found.values(), key=lambda c: (c.generation, c.timestamp_us, c.id))
