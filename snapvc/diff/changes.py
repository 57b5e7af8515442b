"""Structural diff between two states: which paths were added, removed or modified.

Subtrees stored under the same id are equal and skipped without being read, so the
cost follows the size of the change. Maps are compared key by key. Lists (and a tuple
against a tuple) by a sequence diff over their elements, each known by its
encoding (inline bytes, or the id of its object: ``element_encoder``): the common
prefix and suffix are trimmed, the rest aligned by ``difflib.SequenceMatcher``. Where
it aligns runs of the same length, elements are paired and compared inside (``modified``
changes, nested ones for containers); the rest are ``removed`` or ``added``. Indices
are an element's own: ``removed`` at its index in the old list, ``added`` and
``modified`` (and paths below them) at the index in the new one. Appending two messages
to a list gives two ``added`` changes; inserting one in the middle, one. A list against
a tuple is one ``modified`` change of the whole value.

Two stored maps are compared by walking both prolly trees at once (``_diff_trees``).
Each side is a stack of ``Part``s in order, subtrees not read yet and leaf entries,
each with where it starts: its first key (inner map nodes carry their children's first
keys). At each step, with ``x`` and ``y`` the next part of each side:

- the same subtree id on both sides: skipped, unread;
- two entries at the same key: their values are compared (equal object ids skipped,
  else by ``diff_values``);
- the part that starts first, if it is an entry: removed or added;
- otherwise a subtree is read and replaced by its parts: the one that starts first,
  else the higher one, else (same start, same level, different ids) both.

Node boundaries come from the entries alone, so past an edit both trees cut at the
same keys again and identical subtrees meet at the same level: a diff reads the paths
from the roots to the changed leaves, and a leaf or two beside each, O(changes × depth)
objects. Whatever one side holds after the other ends is listed whole
(``Loader.materialize``, in batches).

Two stored lists are trimmed the same way from both ends (``_diff_stored_seqs``): equal
subtrees skipped unread, a differing one read, until two elements differ. What lies
between the first and the last change is read down to its elements (their encodings,
not their contents) and aligned. A list that grew at its end reads its changed spine
and the new leaves; two edits far apart read the leaves between them. A long string
that changed is read whole (a ``Change`` holds both values).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from bisect import bisect_right
from dataclasses import dataclass
from difflib import SequenceMatcher, unified_diff
from typing import Any, Literal

import orjson

from snapvc.encoding.arrays import array_summary, arrays_equal, is_array
from snapvc.encoding.arrays import change_summary as array_change_summary
from snapvc.encoding.reader import Loader, MapView, Part, SeqView, is_tuple, node_parts, tree_root
from snapvc.encoding.nodes import seq_leaf_encodings
from snapvc.encoding.writer import element_encoder
from snapvc.objects import SEQ

__all__ = ["Change", "KeyChanges", "aligned_opcodes", "changed_region", "diff_values", "format_path", "key_changes", "plain_value", "sequence_kind",
           "short_repr", "stored_elements"]

Path = tuple[str | int, ...]
ChangeKind = Literal["added", "removed", "modified"]


@dataclass(frozen=True, slots=True)
class Change:
    """One difference: at ``path`` (keys and indices from the root), ``kind`` of change,
    the value before (``old``, None when added) and after (``new``, None when removed)."""

    path: Path
    kind: ChangeKind
    old: Any = None
    new: Any = None

    def __str__(self) -> str:
        where = format_path(self.path)
        if self.kind == "added":
            return f"+ {where}: {short_repr(self.new)}"
        if self.kind == "removed":
            return f"- {where}: {short_repr(self.old)}"
        if is_array(self.old) and is_array(self.new):  # what changed in it, never its values
            return f"~ {where}: {array_change_summary(self.old, self.new)}"
        if isinstance(self.old, str) and isinstance(self.new, str) and max(len(self.old), len(self.new)) > 60:
            before, after = changed_region(self.old, self.new)
            return f"~ {where}: {before} -> {after}"
        return f"~ {where}: {short_repr(self.old)} -> {short_repr(self.new)}"

    def unified(self, context: int = 3) -> str:
        """The change as a unified text diff, ``a/<path>`` against ``b/<path>``: of the
        strings themselves, or of other values' pretty JSON (sorted keys; ``repr`` for
        a value JSON cannot hold). A last line without a newline is marked as git marks it."""

        def lines(value: Any) -> list[str]:
            if isinstance(value, str):
                return value.splitlines(keepends=True)
            if is_array(value):
                return [array_summary(value) + "\n"]
            try:
                text = orjson.dumps(plain_value(value), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
                                    | orjson.OPT_APPEND_NEWLINE).decode()
            except TypeError:
                text = repr(plain_value(value)) + "\n"
            return text.splitlines(keepends=True)

        where = format_path(self.path)
        old = [] if self.kind == "added" else lines(self.old)
        new = [] if self.kind == "removed" else lines(self.new)
        out = unified_diff(old, new, f"a/{where}", f"b/{where}", n=context)
        return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in out)


@dataclass(frozen=True, slots=True)
class KeyChanges:
    """The top-level keys a diff touched: added, removed, or changed (below them)."""

    added: frozenset[str]
    removed: frozenset[str]
    changed: frozenset[str]

    def __str__(self) -> str:
        return f"Added: {sorted(self.added)}, Removed: {sorted(self.removed)}, Changed: {sorted(self.changed)}"


def key_changes(changes: Iterable[Change]) -> KeyChanges:
    """Which top-level keys ``changes`` added, removed or changed: comparing two
    checkpoints key by key, ``key_changes(repo.diff(cp_before, cp_after))``."""
    added: set[str] = set()
    removed: set[str] = set()
    changed: set[str] = set()
    for c in changes:
        if not c.path:
            continue
        key = str(c.path[0])
        if len(c.path) == 1 and c.kind == "added":
            added.add(key)
        elif len(c.path) == 1 and c.kind == "removed":
            removed.add(key)
        else:
            changed.add(key)
    return KeyChanges(frozenset(added), frozenset(removed), frozenset(changed))


def format_path(path: Path) -> str:
    """``('research', 'findings', 3)`` -> ``research.findings[3]`` (keys that are not
    plain identifiers are quoted: ``['a b']``)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.isidentifier():
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out or "<root>"


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for one-line messages (a lazy view
    shows its id and size, unread; a numpy array its dtype and shape)."""
    text = array_summary(value) if is_array(value) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def changed_region(old: str, new: str, context: int = 12, limit: int = 40) -> tuple[str, str]:
    """The part of two long strings that differs, with a little context: what a reader
    needs to see of a 20 KB document in which one paragraph changed."""
    start = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    end = 0
    while end < min(len(old), len(new)) - start and old[-1 - end] == new[-1 - end]:
        end += 1
    lo = max(0, start - context)

    def cut(text: str) -> str:
        stop = len(text) - end + context if end > context else len(text)
        middle = text[lo:stop]
        if len(middle) > limit + 2 * context:
            middle, stop = middle[: limit + 2 * context], lo + limit + 2 * context
        return ("…" if lo else "") + repr(middle)[1:-1] + ("…" if stop < len(text) else "")

    return repr(cut(old)), repr(cut(new))


def plain_value(value: Any) -> Any:
    """A value as plain Python objects: a lazy view read whole, anything else as it is."""
    if isinstance(value, MapView):
        return value.to_dict()
    if isinstance(value, SeqView):
        return value.to_list()
    return value


def _same_stored(a: Any, b: Any) -> bool:
    return isinstance(a, (MapView, SeqView)) and isinstance(b, (MapView, SeqView)) and a.id == b.id


def diff_values(old: Any, new: Any, path: Path = ()) -> Iterator[Change]:
    """The changes that turn ``old`` into ``new`` (plain values or lazy views)."""
    if _same_stored(old, new):
        return
    # A stored container against an inline one (which holds no references, so nothing
    # can be skipped by id) is read whole, in batches, and compared as plain values.
    if isinstance(old, (dict, MapView)) and isinstance(new, (dict, MapView)):
        if isinstance(old, MapView) and isinstance(new, MapView):
            yield from _diff_trees(old, new, path)
        else:
            yield from _diff_maps(plain_value(old), plain_value(new), path)
        return
    kind = sequence_kind(old)
    if kind is not None and kind is sequence_kind(new):
        if isinstance(old, SeqView) and isinstance(new, SeqView):
            yield from _diff_stored_seqs(old, new, path)
        else:
            yield from _diff_seqs(plain_value(old), plain_value(new), path)
        return
    a, b = plain_value(old), plain_value(new)
    if is_array(a) or is_array(b):  # one value: compared by dtype, shape, order and bytes
        if not arrays_equal(a, b):
            yield Change(path, "modified", a, b)
        return
    if type(a) is not type(b) or a != b or (isinstance(a, float) and repr(a) != repr(b)):
        if not (a != a and b != b and type(a) is type(b)):  # NaN equals NaN here
            yield Change(path, "modified", a, b)


def sequence_kind(value: Any) -> type | None:
    """``list`` or ``tuple`` for a sequence compared element by element, stored or not
    (whether a tuple is inline or an object of its own depends on its bytes, not on
    anything a diff should show)."""
    if isinstance(value, list):
        return list
    if isinstance(value, tuple):
        return tuple
    if isinstance(value, SeqView):
        return tuple if is_tuple(value) else list
    return None


def _diff_maps(old: Mapping[str, Any], new: Mapping[str, Any], path: Path) -> Iterator[Change]:
    for key in sorted(set(old) | set(new)):
        if key not in new:
            yield Change((*path, key), "removed", plain_value(old[key]), None)
        elif key not in old:
            yield Change((*path, key), "added", None, plain_value(new[key]))
        else:
            yield from diff_values(old[key], new[key], (*path, key))


def _diff_seqs(old: Sequence[Any], new: Sequence[Any], path: Path) -> Iterator[Change]:
    encode = element_encoder()
    yield from _diff_aligned([encode(x) for x in old], [encode(y) for y in new],
                             old.__getitem__, new.__getitem__, range(len(old)), range(len(new)), path)


def _diff_aligned(a: list[bytes], b: list[bytes], old_at: Callable[[int], Any], new_at: Callable[[int], Any],
                  a_pos: Sequence[int], b_pos: Sequence[int], path: Path) -> Iterator[Change]:
    """The changes between two lists of elements, given as their encodings ``a``, ``b``
    (``old_at(i)``, ``new_at(j)`` give the values, ``a_pos[i]``, ``b_pos[j]`` their
    indices): the common prefix and suffix are trimmed, the rest aligned by
    ``difflib.SequenceMatcher`` (see the module docstring for what each opcode gives)."""
    for tag, i1, i2, j1, j2 in aligned_opcodes(a, b):
        paired = min(i2 - i1, j2 - j1) if tag == "replace" else 0
        for k in range(paired):
            yield from diff_values(old_at(i1 + k), new_at(j1 + k), (*path, b_pos[j1 + k]))
        for i in range(i1 + paired, i2):
            yield Change((*path, a_pos[i]), "removed", plain_value(old_at(i)), None)
        for j in range(j1 + paired, j2):
            yield Change((*path, b_pos[j]), "added", None, plain_value(new_at(j)))


def aligned_opcodes(a: list[bytes], b: list[bytes]) -> Iterator[tuple[str, int, int, int, int]]:
    """The opcodes other than ``equal`` that turn elements encoded ``a`` into ``b``
    (indices into both): the common prefix and suffix trimmed, the rest aligned by
    ``difflib.SequenceMatcher``. Shared by the diff and the merge of lists."""
    n = min(len(a), len(b))
    lo = 0
    while lo < n and a[lo] == b[lo]:
        lo += 1
    hi_a, hi_b = len(a), len(b)
    while hi_a > lo and hi_b > lo and a[hi_a - 1] == b[hi_b - 1]:
        hi_a -= 1
        hi_b -= 1
    matcher = SequenceMatcher(None, a[lo:hi_a], b[lo:hi_b], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            yield tag, i1 + lo, i2 + lo, j1 + lo, j2 + lo


def stored_elements(old: SeqView, new: SeqView) -> tuple[list[int], list[int], list[bytes], list[bytes],
                                                          Callable[[int], Any], Callable[[int], Any]]:
    """What lies between the common ends of two stored lists (equal subtrees at either
    end trimmed unread): each side's positions, its elements' encodings, and a function
    giving the element at an index into those lists (a view if it is an object)."""
    x, y = _SeqSide(old), _SeqSide(new)
    a, b = x.parts[::-1], y.parts[::-1]  # stacks: the next part is last
    _trim(a, b, x, y, forward=True)
    a.reverse()  # the rest in order, trimmed from its end now
    b.reverse()
    _trim(a, b, x, y, forward=False)
    at_a, at_b = x.positions(a), y.positions(b)
    return (at_a, at_b, [x.encoding[i] for i in at_a], [y.encoding[j] for j in at_b],
            lambda i: x.value(at_a[i]), lambda j: y.value(at_b[j]))


def _diff_stored_seqs(old: SeqView, new: SeqView, path: Path) -> Iterator[Change]:
    """Two stored lists: equal subtrees at either end are trimmed unread, what lies
    between is read down to its elements and aligned as ``_diff_aligned`` does."""
    at_a, at_b, a, b, old_at, new_at = stored_elements(old, new)
    yield from _diff_aligned(a, b, old_at, new_at, at_a, at_b, path)


class _SeqSide:
    """One stored list being diffed: its tree's parts as read so far, the leaves read
    (by first position) and the encoding of each of their elements (by position), cut
    from the leaves' bytes."""

    def __init__(self, view: SeqView) -> None:
        self.loader, self.parts = tree_root(view)
        self.encoding: dict[int, bytes] = {}
        self._starts: list[int] = []
        self._leaves: list[list[Any]] = []
        if self.parts and self.parts[0].level < 0:  # the root is a leaf
            self._note_leaf(view.id, 0)

    def _note_leaf(self, oid: bytes, at: int) -> list[Any]:
        data = self.loader.fetch(oid)
        for i, enc in enumerate(seq_leaf_encodings(oid, data), at):
            self.encoding[i] = enc
        node: list[Any] = self.loader.node(oid)[1]
        k = bisect_right(self._starts, at)
        self._starts.insert(k, at)
        self._leaves.insert(k, node)
        return node

    def open(self, part: Part) -> list[Part]:
        """The parts of subtree ``part``."""
        if part.level == 0:
            return node_parts(SEQ, self._note_leaf(part.value, part.at), part.at)
        return self.loader.parts(part.value, part.at)

    def positions(self, parts: list[Part]) -> list[int]:
        """The positions of the elements in ``parts``, their subtrees read a level at a time."""
        while any(p.level > 0 for p in parts):
            self.loader.fetch_many([p.value for p in parts if p.level > 0])
            parts = [q for p in parts for q in (self.open(p) if p.level > 0 else (p,))]
        self.loader.fetch_many([p.value for p in parts if p.level == 0])
        out: list[int] = []
        for p in parts:
            if p.level == 0:
                out += range(p.at, p.at + len(self._note_leaf(p.value, p.at)[2]))
            else:
                out.append(p.at)
        return out

    def value(self, at: int) -> Any:
        """The element at position ``at`` (a view if it is an object of its own)."""
        k = bisect_right(self._starts, at) - 1
        node = self._leaves[k]
        i = at - self._starts[k]
        value = node[2][i]
        return self.loader.view(value) if i in node[3] else value


def _trim(a: list[Part], b: list[Part], x: _SeqSide, y: _SeqSide, forward: bool) -> None:
    """Pop from the ends of ``a`` and ``b`` (their last items) what both hold alike: the
    same subtree, or elements encoded alike; a subtree that differs is read, the higher
    one first, until two elements differ or a side runs out."""
    while a and b:
        p, q = a[-1], b[-1]
        if p.level >= 0 and q.level >= 0 and p.value == q.value:
            a.pop()
            b.pop()
        elif p.level < 0 and q.level < 0:
            if x.encoding[p.at] != y.encoding[q.at]:
                return
            a.pop()
            b.pop()
        else:
            if p.level >= q.level:
                below = x.open(a.pop())
                a.extend(reversed(below) if forward else below)
            if q.level >= p.level:
                below = y.open(b.pop())
                b.extend(reversed(below) if forward else below)


def _diff_trees(old: MapView, new: MapView, path: Path) -> Iterator[Change]:
    """Two stored maps compared node by node: see the module docstring."""
    old_loader, parts = tree_root(old)
    a = parts[::-1]  # stacks: the next part is last
    new_loader, parts = tree_root(new)
    b = parts[::-1]
    while a and b:
        x, y = a[-1], b[-1]
        if x.level >= 0 and y.level >= 0 and x.value == y.value and x.at == y.at:
            a.pop()
            b.pop()
        elif x.level == 0 and y.level == 0 and x.at == y.at and _next_at(a) == _next_at(b):
            a.pop()  # two leaves that hold the same range of keys
            b.pop()
            yield from _diff_leaves(old_loader, x.value, new_loader, y.value, path)
        elif x.at == y.at and x.level < 0 and y.level < 0:
            a.pop()
            b.pop()
            if not (x.is_ref and y.is_ref and x.value == y.value):
                yield from diff_values(_value(old_loader, x), _value(new_loader, y), (*path, x.at))
        elif x.at < y.at and x.level < 0:
            a.pop()
            yield Change((*path, x.at), "removed", _plain_value(old_loader, x), None)
        elif y.at < x.at and y.level < 0:
            b.pop()
            yield Change((*path, y.at), "added", None, _plain_value(new_loader, y))
        else:
            expand_a = x.at < y.at or (x.at == y.at and x.level >= y.level)
            expand_b = y.at < x.at or (x.at == y.at and y.level >= x.level)
            if expand_a:
                _expand(a, old_loader)
            if expand_b:
                _expand(b, new_loader)
    for part, value in _rest(b, new_loader):
        yield Change((*path, part), "added", None, value)
    for part, value in _rest(a, old_loader):
        yield Change((*path, part), "removed", value, None)


def _next_at(stack: list[Part]) -> Any:
    """Where the part after the next one on ``stack`` starts (None past the end)."""
    return stack[-2].at if len(stack) > 1 else None


def _diff_leaves(old_loader: Loader, old: bytes, new_loader: Loader, new: bytes, path: Path) -> Iterator[Change]:
    """Two map leaves holding the same range of keys, compared as dicts: an entry
    stored alike on both sides (the same id, or the same inline str, int, bytes, bool
    or None) is skipped at C speed, any other is compared by ``diff_values``."""
    x, y = old_loader.node(old)[1], new_loader.node(new)[1]
    old_values, new_values = x[2], y[2]
    get = new_values.get
    changed = {key for key, v in old_values.items()
               if type(w := get(key, _ABSENT)) is not type(v) or type(v) not in _SCALARS or v != w}
    changed |= new_values.keys() - old_values.keys()
    changed |= set(x[3]).symmetric_difference(y[3])  # an id against inline bytes
    for key in sorted(changed):
        if key not in new_values:
            yield Change((*path, key), "removed", _leaf_value(old_loader, x, key, True), None)
        elif key not in old_values:
            yield Change((*path, key), "added", None, _leaf_value(new_loader, y, key, True))
        else:
            yield from diff_values(_leaf_value(old_loader, x, key), _leaf_value(new_loader, y, key), (*path, key))


_ABSENT = object()
_SCALARS = frozenset({str, int, bytes, bool, type(None)})


def _leaf_value(loader: Loader, leaf: list[Any], key: str, plain: bool = False) -> Any:
    """The value of ``key`` in a map leaf: a view of its object, or read whole if ``plain``."""
    value = leaf[2][key]
    if key not in leaf[3]:
        return value
    return loader.materialize(value) if plain else loader.view(value)


def _expand(stack: list[Part], loader: Loader) -> None:
    """Replace the subtree next on ``stack`` by its parts."""
    part = stack.pop()
    stack.extend(reversed(loader.parts(part.value, part.at)))


def _value(loader: Loader, part: Part) -> Any:
    return loader.view(part.value) if part.is_ref else part.value


def _plain_value(loader: Loader, part: Part) -> Any:
    return loader.materialize(part.value) if part.is_ref else part.value


def _rest(stack: list[Part], loader: Loader) -> Iterator[tuple[str | int, Any]]:
    """Every (key or position, plain value) left on ``stack``, in order; each subtree
    is materialized as a whole."""
    while stack:
        part = stack.pop()
        if part.level < 0:
            yield part.at, _plain_value(loader, part)
        else:
            yield from loader.materialize(part.value).items()
