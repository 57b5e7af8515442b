"""Structural diff between two states: which paths were added, removed or modified.

Subtrees stored under the same id are equal and skipped without being read, so the
cost follows the size of the change. Maps are compared key by key; lists element by
element at the same index (a longer list shows its extra elements as added).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from snapvc.encoding.reader import MapView, SeqView

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
    old_map = isinstance(old, (dict, MapView))
    new_map = isinstance(new, (dict, MapView))
    if old_map and new_map:
        yield from _diff_maps(old, new, path)
        return
    old_seq = isinstance(old, (list, SeqView))
    new_seq = isinstance(new, (list, SeqView))
    if old_seq and new_seq and type(_kind(old)) is type(_kind(new)):
        yield from _diff_seqs(old, new, path)
        return
    a, b = _plain(old), _plain(new)
    if type(a) is not type(b) or a != b or (isinstance(a, float) and repr(a) != repr(b)):
        if not (a != a and b != b and type(a) is type(b)):  # NaN equals NaN here
            yield Change(path, "modified", a, b)


def _kind(value: Any) -> Any:
    return [] if isinstance(value, (list, SeqView)) else value


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
