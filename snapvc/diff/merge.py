"""Three-way merge of states, with conflicts as values; the merge base of two commits.

``merge_values(base, ours, theirs)`` merges what each side changed since ``base``:

- Equal values are skipped first, by encoding (a stored container by its id, unread):
  ours equal to theirs gives ours; one side equal to base gives the other side.
- Maps merge key by key. Two stored maps are walked as ``snapvc.diff.changes`` walks them, so
  only the paths to the keys either side changed are read. A key added on one side,
  removed on one side and unchanged on the other, or changed alike, merges cleanly;
  changed differently on both, it is merged again below when both values are maps (or
  both lists), else it is a conflict. Removed on one side and changed on the other is a
  conflict.
- Lists merge as splices. Each side's edits against base come from a sequence alignment
  over element encodings (``snapvc.diff.changes.aligned_opcodes``, the common ends trimmed,
  unread for stored lists). Edits in different places combine. Both sides inserting at
  the same position is not a conflict: ours' elements come first, then theirs' (two
  agents that each appended messages keep both; an insertion made alike on both sides
  is kept once). Both sides replacing the same one element by one element merge those
  elements (the path gets ours' index). Any other overlap is a conflict at the list.
- Anything else (scalars, strings, typed values) changed differently on both sides is
  a conflict.

Unchanged subtrees of the result are the input views themselves, so committing it
stores only what changed; changed containers are plain dicts and lists. A merge inside
a repository (``Repository.merge``) also keeps large changed maps and lists stored: it
builds their new trees from the old ones (``snapvc.encoding.splice``), reading only the
leaves around the edits.

A conflict is a ``Conflict(path, base, ours, theirs)``; a value missing on a side is
``ABSENT``. The ``resolve`` strategy decides conflicts as they are met: ``None`` leaves
them to the caller, ``"ours"``/``"theirs"`` take a side, a callable returns the value
(``ABSENT`` removes the path).

The merge base of two commits is their lowest common ancestor, found with generation
numbers: both histories are walked newest generation first from one max-heap, each
commit marked with the sides that reached it. A commit reached from both sides is a
common ancestor; once the heap holds only lower generations than the first one found,
no better one remains. Several at that generation (a criss-cross history) are all
best; the one with the newest timestamp is taken, then the lowest id, so the choice is
the same every time.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from snapvc.diff.changes import aligned_opcodes, format_path, plain_value, sequence_kind, short_repr, stored_elements
from snapvc.encoding.reader import Loader, MapView, Part, SeqView, tree_root
from snapvc.encoding.splice import TreeSplicer
from snapvc.encoding.values import REF_PREFIX
from snapvc.encoding.writer import SINGLE_NODE_ENTRIES, element_encoder
from snapvc.errors import InvalidArgumentError
from snapvc.ids import ObjectId
from snapvc.objects import Commit

__all__ = ["ABSENT", "Conflict", "MergeResult", "Resolve", "StateMerge", "check_resolve", "find_merge_base", "merge_states",
           "merge_values"]

Path = tuple[str | int, ...]


class _Absent:
    """The value of a path that does not exist on one side of a merge."""

    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<absent>"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


@dataclass(frozen=True, slots=True)
class Conflict:
    """Both sides changed ``path`` differently since ``base``. Each value is what that
    side holds there (a lazy view for a stored container), or ``ABSENT``."""

    path: Path
    base: Any
    ours: Any
    theirs: Any

    def __str__(self) -> str:
        return (f"{format_path(self.path)}: base {short_repr(self.base, 50)}, ours {short_repr(self.ours, 50)}, "
                f"theirs {short_repr(self.theirs, 50)}")


@dataclass(frozen=True, slots=True)
class MergeResult:
    """What a merge (or a revert, a cherry-pick) did. ``commit`` is the new commit (the
    new tip after a fast-forward), None when nothing was written: up to date, or
    ``conflicts`` left unresolved. ``base`` is the merge base (None: no common
    ancestor). ``resolved`` lists the conflicts a strategy decided."""

    commit: Commit | None
    conflicts: list[Conflict]
    base: ObjectId | None
    fast_forward: bool = False
    up_to_date: bool = False
    resolved: list[Conflict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True unless conflicts were left unresolved (and nothing was written)."""
        return not self.conflicts

    def __str__(self) -> str:
        if self.conflicts:
            lines = [f"{len(self.conflicts)} conflict{'s' if len(self.conflicts) > 1 else ''}; nothing written:"]
            return "\n".join(lines + [f"  {c}" for c in self.conflicts])
        if self.up_to_date:
            return "already up to date"
        assert self.commit is not None
        if self.fast_forward:
            return f"fast-forward to {self.commit.id.short}"
        extra = f" ({len(self.resolved)} conflicts resolved)" if self.resolved else ""
        return f"merged as {self.commit.id.short}{extra}"


Resolve = Literal["ours", "theirs"] | Callable[[Conflict], Any] | None


def check_resolve(resolve: Any) -> None:
    """Refuse a strategy that is none of ``None``, ``"ours"``, ``"theirs"``, a callable."""
    if not (resolve is None or resolve in ("ours", "theirs") or callable(resolve)):
        raise InvalidArgumentError("resolve", f"resolve must be None, 'ours', 'theirs' or a callable, not {resolve!r}")


def merge_values(base: Any, ours: Any, theirs: Any, path: Path = (), *,
                 resolve: Resolve = None) -> tuple[Any, list[Conflict]]:
    """Merge what ``ours`` and ``theirs`` changed since ``base`` (plain values or lazy
    views): ``(merged, conflicts)``. Conflicts left unresolved (``resolve=None``) hold
    ours' value in ``merged``. See the module docstring for the rules."""
    check_resolve(resolve)
    merger = _Merger(resolve)
    merged = merger.merge(base, ours, theirs, path)
    return merged, merger.conflicts


@dataclass(frozen=True, slots=True)
class StateMerge:
    """A merge of three stored states: ``state`` (a plain dict at the top, views and
    new trees below; None if conflicts remain), whether it is ours unchanged, the
    conflicts left and resolved, and the new objects its trees need (``objects``, to
    write before committing it)."""

    state: dict[str, Any] | None
    unchanged: bool
    conflicts: list[Conflict]
    resolved: list[Conflict]
    objects: dict[ObjectId, bytes]


def merge_states(base: Mapping[str, Any], ours: MapView, theirs: Mapping[str, Any], loader: Loader,
                 resolve: Resolve = None) -> StateMerge:
    """Merge two states stored through ``loader`` (``base`` and ``theirs`` may be an
    empty dict): large maps and lists changed on both sides come out as new trees built
    from the old ones (``TreeSplicer``), so the merge reads and stores what changed."""
    merger = _Merger(resolve, TreeSplicer(loader))
    merged = merger.merge(base, ours, theirs, ())
    if merger.conflicts:
        return StateMerge(None, False, merger.conflicts, merger.resolved, {})
    state = dict(_items(merged)) if isinstance(merged, MapView) else merged
    return StateMerge(state, merged is ours, [], merger.resolved, merger.splicer.objects)  # type: ignore[union-attr]


# -- the merge ----------------------------------------------------------------------------

@dataclass(slots=True)
class _Edit:
    """One side's edit of a list: base positions ``[start, end)`` become elements encoded
    ``encs`` (``values()`` gives them)."""

    start: int
    end: int
    encs: list[bytes]
    values: Callable[[], list[Any]]
    fresh: bool = False  # elements made by the merge: their objects are not stored yet


class _Slot:
    """A map entry read from a stored tree: its encoding at once, its value (a view,
    which reads the object) only when asked."""

    __slots__ = ("loader", "part")

    def __init__(self, loader: Loader, part: Part) -> None:
        self.loader = loader
        self.part = part

    def value(self) -> Any:
        part = self.part
        return self.loader.view(part.value) if part.is_ref else part.value


class _Merger:
    def __init__(self, resolve: Resolve, splicer: TreeSplicer | None = None) -> None:
        self.resolve = resolve
        self.splicer = splicer  # builds large changed containers from their old trees
        self.conflicts: list[Conflict] = []
        self.resolved: list[Conflict] = []
        self._encoders: dict[int, Callable[[Any], bytes]] = {}

    def enc(self, value: Any) -> bytes:
        """A value's encoding (equal exactly when stored alike); ``b""`` for ``ABSENT``."""
        if value is ABSENT:
            return b""
        if isinstance(value, _Slot):
            part = value.part
            return REF_PREFIX + part.value if part.is_ref else self.enc(part.value)
        loader = value.loader if isinstance(value, (MapView, SeqView)) else None
        encode = self._encoders.get(id(loader))
        if encode is None:
            encode = self._encoders[id(loader)] = element_encoder(loader)
        return encode(value)

    def conflict(self, path: Path, base: Any, ours: Any, theirs: Any) -> Any:
        found = Conflict(path, base, ours, theirs)
        if self.resolve is None:
            self.conflicts.append(found)
            return ours
        self.resolved.append(found)
        if self.resolve == "ours":
            return ours
        if self.resolve == "theirs":
            return theirs
        return self.resolve(found)

    def merge(self, base: Any, ours: Any, theirs: Any, path: Path) -> Any:
        e_ours, e_theirs = self.enc(ours), self.enc(theirs)
        if e_ours == e_theirs:
            return ours
        e_base = self.enc(base)
        if e_ours == e_base:
            return theirs
        if e_theirs == e_base:
            return ours
        if _is_map(ours) and _is_map(theirs):
            return self.merge_maps(base if _is_map(base) else {}, ours, theirs, path)
        kind = sequence_kind(ours)
        if kind is not None and kind is sequence_kind(theirs):
            if sequence_kind(base) is not kind:
                base = kind()
            return self.merge_seqs(base, ours, theirs, path)
        return self.conflict(path, base, ours, theirs)

    # -- maps ---------------------------------------------------------------------------

    def merge_maps(self, base: Any, ours: Any, theirs: Any, path: Path) -> Any:
        if not (isinstance(base, MapView) and isinstance(ours, MapView) and isinstance(theirs, MapView)):
            b, o, t = base, ours, theirs
            out: dict[str, Any] = {}
            for key in [*o, *(k for k in t if k not in o), *(k for k in b if k not in o and k not in t)]:
                merged = self.merge(b.get(key, ABSENT), o.get(key, ABSENT), t.get(key, ABSENT), (*path, key))
                if merged is not ABSENT:
                    out[key] = merged
            return out
        ours_changed = _map_changes(base, ours)
        edits: dict[str, Any] = {}  # against ours; ABSENT removes the key
        for key, (was, now) in _map_changes(base, theirs).items():
            if key in ours_changed:
                mine = _value(ours_changed[key][1])
                merged = self.merge(_value(was), mine, _value(now), (*path, key))
                if merged is not mine:
                    edits[key] = merged
            else:
                edits[key] = now
        if not edits:
            return ours
        if self.splicer is not None and path and len(ours) > SINGLE_NODE_ENTRIES:
            if self.conflicts:
                return ours  # the result will not be written: build nothing
            splicer = self.splicer
            view = splicer.map(ours, {k: None if v is ABSENT else self._enc_into(v) for k, v in edits.items()})
            if view is not None:
                return view
        out = dict(_items(ours))
        for key, value in edits.items():
            if value is ABSENT:
                out.pop(key, None)
            else:
                out[key] = _value(value)
        return out

    def _enc_into(self, value: Any) -> bytes:
        """The encoding of a value going into a spliced tree (its new objects kept)."""
        assert self.splicer is not None
        if isinstance(value, _Slot):
            return self.enc(value)
        return self.splicer.encode(value)

    # -- lists --------------------------------------------------------------------------

    def merge_seqs(self, base: Any, ours: Any, theirs: Any, path: Path) -> Any:
        stored = isinstance(base, SeqView) and isinstance(ours, SeqView) and isinstance(theirs, SeqView)
        if stored:
            base_at: Callable[[int], Any] | None = None
            mine, yours = _stored_edits(base, ours), _stored_edits(base, theirs)
        else:
            plain = [list(plain_value(v)) for v in (base, ours, theirs)]
            encs = [[self.enc(x) for x in items] for items in plain]
            base_at = plain[0].__getitem__
            mine, yours = _plain_edits(encs[0], encs[1], plain[1]), _plain_edits(encs[0], encs[2], plain[2])
        combined = self._combine(base, ours, theirs, mine, yours, path, base_at)
        if combined is None:
            return self.conflict(path, base, ours, theirs)
        if len(combined) == len(mine) and all(e is m for e, m in zip(combined, mine)):
            return ours
        if len(combined) == len(yours) and all(e is m for e, m in zip(combined, yours)):
            return theirs
        tuple_kind = sequence_kind(ours) is tuple
        if stored and self.splicer is not None and len(base) > SINGLE_NODE_ENTRIES:
            if self.conflicts:
                return ours
            splicer = self.splicer
            edits = [(e.start, e.end, [splicer.encode(v) for v in e.values()] if e.fresh else e.encs)
                     for e in combined]
            view = splicer.seq(base, edits)
            if view is not None:
                return view
        items = list(plain_value(base))
        out: list[Any] = []
        at = 0
        for e in combined:
            out += items[at:e.start]
            out += e.values()
            at = e.end
        out += items[at:]
        return tuple(out) if tuple_kind else out

    def _combine(self, base: Any, ours: Any, theirs: Any, mine: list[_Edit], yours: list[_Edit], path: Path,
                 base_at: Callable[[int], Any] | None) -> list[_Edit] | None:
        """Both sides' edits in order, or None if two of them overlap (see the module
        docstring for what combines)."""
        out: list[_Edit] = []
        i = j = 0
        shift = 0  # ours' index of a base position: what ours' earlier edits added
        while i < len(mine) or j < len(yours):
            o = mine[i] if i < len(mine) else None
            t = yours[j] if j < len(yours) else None
            if o is not None and (t is None or (_before(o, t) and not _overlap(o, t))):
                out.append(o)
                shift += len(o.encs) - (o.end - o.start)
                i += 1
                continue
            if t is not None and (o is None or (_before(t, o) and not _overlap(o, t))):
                out.append(t)
                j += 1
                continue
            assert o is not None and t is not None
            i += 1
            j += 1
            if (o.start, o.end) == (t.start, t.end) and o.encs == t.encs:
                out.append(o)
            elif o.start == o.end == t.start == t.end:
                out.append(_Edit(o.start, o.start, o.encs + t.encs,
                                 lambda o=o, t=t: o.values() + t.values()))  # type: ignore[misc]
            elif o.end - o.start == t.end - t.start == len(o.encs) == len(t.encs) == 1:
                was = base_at(o.start) if base_at is not None else base[o.start]
                merged = self.merge(was, o.values()[0], t.values()[0], (*path, o.start + shift))
                out.append(_Edit(o.start, o.end, [self.enc(merged)], lambda m=merged: [m], True))  # type: ignore[misc]
            else:
                return None
            shift += len(o.encs) - (o.end - o.start)
        return out


def _before(a: _Edit, b: _Edit) -> bool:
    return (a.start, a.end) <= (b.start, b.end) and not (a.start == a.end == b.start == b.end)


def _overlap(a: _Edit, b: _Edit) -> bool:
    """Whether two edits of base touch the same elements (an insertion strictly inside
    the other's range, or ranges sharing an element); the same-position insertions
    and identical edits are overlaps too, resolved by ``_combine``."""
    if a.start == a.end and b.start == b.end:
        return a.start == b.start
    if a.start == a.end:
        return b.start < a.start < b.end
    if b.start == b.end:
        return a.start < b.start < a.end
    return a.start < b.end and b.start < a.end


def _stored_edits(base: SeqView, side: SeqView) -> list[_Edit]:
    """One side's edits of a stored list, in base positions; only what lies between the
    common ends is read."""
    at_a, at_b, a, b, _, side_at = stored_elements(base, side)
    if not at_a and not at_b:
        return []
    start = at_a[0] if at_a else at_b[0]  # the common prefix is as long on both sides
    def elements(j1: int, j2: int) -> Callable[[], list[Any]]:
        return lambda: [side_at(j) for j in range(j1, j2)]

    return [_Edit(start + i1, start + i2, b[j1:j2], elements(j1, j2)) for _, i1, i2, j1, j2 in aligned_opcodes(a, b)]


def _plain_edits(base: list[bytes], side: list[bytes], items: list[Any]) -> list[_Edit]:
    def elements(j1: int, j2: int) -> Callable[[], list[Any]]:
        return lambda: items[j1:j2]

    return [_Edit(i1, i2, side[j1:j2], elements(j1, j2)) for _, i1, i2, j1, j2 in aligned_opcodes(base, side)]


def _is_map(value: Any) -> bool:
    return isinstance(value, (dict, MapView))


def _value(value: Any) -> Any:
    return value.value() if isinstance(value, _Slot) else value


def _map_changes(old: MapView, new: MapView) -> dict[str, tuple[Any, Any]]:
    """Key -> (old, new) for every key whose value differs between two stored maps, each
    a ``_Slot`` or ``ABSENT``: both trees walked at once, equal subtrees skipped unread
    (as ``snapvc.diff.changes`` walks them)."""
    old_loader, parts = tree_root(old)
    a = parts[::-1]  # stacks: the next part is last
    new_loader, parts = tree_root(new)
    b = parts[::-1]
    out: dict[str, tuple[Any, Any]] = {}
    while a and b:
        x, y = a[-1], b[-1]
        if x.level >= 0 and y.level >= 0 and x.value == y.value and x.at == y.at:
            a.pop()
            b.pop()
        elif x.at == y.at and x.level < 0 and y.level < 0:
            a.pop()
            b.pop()
            if (x.value != y.value or x.is_ref != y.is_ref) if x.is_ref or y.is_ref else _inline_differs(x.value, y.value):
                out[x.at] = (_Slot(old_loader, x), _Slot(new_loader, y))
        elif x.at < y.at and x.level < 0:
            a.pop()
            out[x.at] = (_Slot(old_loader, x), ABSENT)
        elif y.at < x.at and y.level < 0:
            b.pop()
            out[y.at] = (ABSENT, _Slot(new_loader, y))
        else:
            if x.at < y.at or (x.at == y.at and x.level >= y.level):
                _expand(a, old_loader)
            if y.at < x.at or (x.at == y.at and y.level >= x.level):
                _expand(b, new_loader)
    for stack, loader, side in ((a, old_loader, 0), (b, new_loader, 1)):
        for part in _leaf_parts(stack, loader):
            slot = _Slot(loader, part)
            out[part.at] = (slot, ABSENT) if side == 0 else (ABSENT, slot)
    return out


def _inline_differs(x: Any, y: Any) -> bool:
    """Two inline values read from stored leaves that Python may call equal (1 and 1.0,
    0.0 and -0.0) compared as stored."""
    # An encoder of its own (about 1 us to make): one kept between calls would be shared
    # by every thread, mixing their paths, and its cache would keep every value it met.
    encode = element_encoder()
    return encode(x) != encode(y)


def _expand(stack: list[Part], loader: Loader) -> None:
    part = stack.pop()
    stack.extend(reversed(loader.parts(part.value, part.at)))


def _leaf_parts(stack: list[Part], loader: Loader) -> Iterator[Part]:
    """The entries left on ``stack``, in order, their subtrees read."""
    while stack:
        part = stack.pop()
        if part.level < 0:
            yield part
        else:
            stack.extend(reversed(loader.parts(part.value, part.at)))


def _items(view: MapView) -> Iterator[tuple[str, Any]]:
    """A stored map's entries in order: values stored as objects of their own as views."""
    loader, parts = tree_root(view)
    for part in _leaf_parts(parts[::-1], loader):
        yield part.at, _Slot(loader, part).value()


# -- the merge base -------------------------------------------------------------------------

def find_merge_base(get_commit: Callable[[ObjectId], Commit], a: ObjectId, b: ObjectId) -> ObjectId | None:
    """The best common ancestor of commits ``a`` and ``b`` (see the module docstring),
    or None if they share no history. ``get_commit`` reads a commit (not its state)."""
    if a == b:
        return a
    sides: dict[ObjectId, int] = {a: 1, b: 2}
    heap: list[tuple[int, int, bytes]] = []
    for oid in (a, b):
        c = get_commit(oid)
        heapq.heappush(heap, (-c.generation, -c.timestamp_us, bytes(oid)))
    found: list[Commit] = []
    while heap:
        generation = -heap[0][0]
        if found and generation < found[0].generation:
            break
        oid = ObjectId(heapq.heappop(heap)[2])
        commit = get_commit(oid)
        if sides[oid] == 3:
            found.append(commit)
            continue  # its ancestors are common too, and lower
        for p in commit.parents:
            if p not in sides:
                pc = get_commit(p)
                sides[p] = sides[oid]
                heapq.heappush(heap, (-pc.generation, -pc.timestamp_us, bytes(p)))
            else:
                sides[p] |= sides[oid]
    if not found:
        return None
    return min(found, key=lambda c: (-c.generation, -c.timestamp_us, bytes(c.id))).id
