"""Structural diff between two states: which paths were added, removed or modified.

Subtrees stored under the same id are equal and skipped without being read, so the
cost follows the size of the change. Maps are compared key by key; lists element by
element at the same index (a longer list shows its extra elements as added); a stored
tuple element by element against a stored tuple, else whole, like an inline tuple.

Two stored maps or lists are compared by walking both prolly trees at once
(``_diff_trees``). Each side is a stack of ``Part``s in order, subtrees not read yet
and leaf entries, each with where it starts: its first key (inner map nodes carry
their children's first keys) or its first position (inner list nodes carry their
children's entry counts). At each step, with ``x`` and ``y`` the next part of each side:

- the same subtree id on both sides: skipped, unread;
- two entries at the same key or position: their values are compared (equal object
  ids skipped, else by ``diff_values``);
- the part that starts first, if it is an entry: removed or added (maps only: both
  sides of a list always start at the same position);
- otherwise a subtree is read and replaced by its parts: the one that starts first,
  else the higher one, else (same start, same level, different ids) both.

Node boundaries come from the entries alone, so past an edit both trees cut at the
same keys again and identical subtrees meet at the same level: a diff reads the paths
from the roots to the changed leaves, and a leaf or two beside each, O(changes × depth)
objects. A list that grew reads its changed spine and the new leaves. An edit that
shifts a list's positions changes every element after it, which are all read. Whatever
one side holds after the other ends is listed whole (``Loader.materialize``, in
batches). A long string that changed is read whole (a ``Change`` holds both values).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from snapvc.encoding.reader import Loader, MapView, Part, SeqView, is_tuple, tree_root

__all__ = ["Change", "diff_values", "format_path"]

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
            return f"+ {where}: {_short(self.new)}"
        if self.kind == "removed":
            return f"- {where}: {_short(self.old)}"
        if isinstance(self.old, str) and isinstance(self.new, str) and max(len(self.old), len(self.new)) > 60:
            before, after = _changed_region(self.old, self.new)
            return f"~ {where}: {before} -> {after}"
        return f"~ {where}: {_short(self.old)} -> {_short(self.new)}"


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


def _short(value: Any, limit: int = 60) -> str:
    text = repr(_plain(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _changed_region(old: str, new: str, context: int = 12, limit: int = 40) -> tuple[str, str]:
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


def _plain(value: Any) -> Any:
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
            yield from _diff_maps(_plain(old), _plain(new), path)
        return
    kind = _seq_kind(old)
    if kind is not None and kind is _seq_kind(new):
        if isinstance(old, SeqView) and isinstance(new, SeqView):
            yield from _diff_trees(old, new, path)
        else:
            yield from _diff_seqs(_plain(old), _plain(new), path)
        return
    a, b = _plain(old), _plain(new)
    if type(a) is not type(b) or a != b or (isinstance(a, float) and repr(a) != repr(b)):
        if not (a != a and b != b and type(a) is type(b)):  # NaN equals NaN here
            yield Change(path, "modified", a, b)


def _seq_kind(value: Any) -> type | None:
    """``list`` or ``tuple`` for a sequence compared element by element: a list, stored or
    not, or a stored tuple. An inline tuple is compared whole."""
    if isinstance(value, list):
        return list
    if isinstance(value, SeqView):
        return tuple if is_tuple(value) else list
    return None


def _diff_maps(old: Mapping[str, Any], new: Mapping[str, Any], path: Path) -> Iterator[Change]:
    for key in sorted(set(old) | set(new)):
        if key not in new:
            yield Change((*path, key), "removed", _plain(old[key]), None)
        elif key not in old:
            yield Change((*path, key), "added", None, _plain(new[key]))
        else:
            yield from diff_values(old[key], new[key], (*path, key))


def _diff_seqs(old: Sequence[Any], new: Sequence[Any], path: Path) -> Iterator[Change]:
    n_old, n_new = len(old), len(new)
    for i in range(min(n_old, n_new)):
        yield from diff_values(old[i], new[i], (*path, i))
    for i in range(n_old, n_new):
        yield Change((*path, i), "added", None, _plain(new[i]))
    for i in range(n_new, n_old):
        yield Change((*path, i), "removed", _plain(old[i]), None)


def _diff_trees(old: MapView | SeqView, new: MapView | SeqView, path: Path) -> Iterator[Change]:
    """Two stored maps (or two stored lists) compared node by node: see the module docstring."""
    old_loader, parts = tree_root(old)
    a = parts[::-1]  # stacks: the next part is last
    new_loader, parts = tree_root(new)
    b = parts[::-1]
    while a and b:
        x, y = a[-1], b[-1]
        if x.level >= 0 and y.level >= 0 and x.value == y.value and x.at == y.at:
            a.pop()
            b.pop()
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
            below = loader.materialize(part.value)
            yield from below.items() if isinstance(below, dict) else enumerate(below, part.at)
