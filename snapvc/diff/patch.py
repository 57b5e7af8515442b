"""Changes put to use: applied to a value, written as a JSON Patch, summed up.

``apply_changes(a, diff_values(a, b)) == b``. A diff gives a list's ``removed``
elements their old index and its ``added`` and ``modified`` ones their new index (see
``snapvc.diff.changes``), so changes are applied container by container, in three passes:
removals in descending old index (each leaves the indices below it alone), additions
in ascending new index (each lands where everything before it already stands), then
modifications and the changes below them, at new indices. ``to_json_patch`` emits
operations in the same order, so a JSON Patch applied operation by operation reaches
the same value.

``apply_patch`` is RFC 6902 over plain Python values: all six operations, RFC 6901
pointers, atomic. ``diff_stat`` is a ``--stat``: changes and bytes per top-level key.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from snapvc.diff.changes import Change, Path, format_path, plain_value, short_repr
from snapvc.encoding.writer import MAX_DEPTH
from snapvc.errors import PatchError, PathError

__all__ = ["apply_changes", "to_json_patch", "apply_patch", "diff_stat", "DiffStat", "DiffStatRow",
           "escape_pointer_token", "unescape_pointer_token", "format_pointer", "parse_pointer"]


# -- applying changes ----------------------------------------------------------------


@dataclass(slots=True)
class _Node:
    """The changes inside one container: those of its children (removed, added or
    modified whole, by kind) and those further below each child (by step)."""

    removed: list[Change]
    added: list[Change]
    modified: dict[str | int, Change]
    below: dict[str | int, list[Change]]


def _group(changes: Iterable[Change], depth: int) -> _Node:
    """The changes of one container (all with a path longer than ``depth``), by kind of
    step: direct removals, additions and modifications, and the changes further below
    each child."""
    node = _Node([], [], {}, {})
    for change in changes:
        step = change.path[depth]
        if len(change.path) > depth + 1:
            node.below.setdefault(step, []).append(change)
        elif change.kind == "removed":
            node.removed.append(change)
        elif change.kind == "added":
            node.added.append(change)
        else:
            node.modified[step] = change
    return node


def apply_changes(state: Any, changes: Iterable[Change]) -> Any:
    """``state`` with ``changes`` (as ``diff_values(state, new)`` gives them) applied: ``new``.

    The input is not modified: the containers on the changed paths are copied (a tuple
    is rebuilt), the values the changes bring are deep-copied, and unchanged subtrees
    are shared with ``state`` (``copy.deepcopy`` the result to detach it). A change
    whose path leads nowhere (a missing key, an index out of range, a step into a
    value that is not a container), or an addition over an existing key, raises
    ``PathError`` naming the change's path."""
    changes = list(changes)
    for change in changes:
        if not change.path:  # the whole value replaced
            if change.kind != "modified" or len(changes) != 1:
                raise PathError(change.path, f"a {change.kind} change at the root, among {len(changes)} changes")
            return copy.deepcopy(change.new)
    return _apply(state, changes, 0) if changes else state


def _apply(value: Any, changes: list[Change], depth: int) -> Any:
    """A copy of ``value`` (the container at ``changes[0].path[:depth]``) with ``changes`` applied."""
    node = _group(changes, depth)
    out: dict[Any, Any] | list[Any]
    if isinstance(value, dict):
        out = copy.copy(value)
        for change in node.removed:
            del out[_key(out, change.path, depth)]
        for change in node.added:
            if change.path[depth] in out:
                raise PathError(change.path, f"key {change.path[depth]!r} to add is already there")
            out[change.path[depth]] = copy.deepcopy(change.new)
    elif isinstance(value, (list, tuple)):
        out = list(value)
        for change in sorted(node.removed, key=lambda c: c.path[depth], reverse=True):
            del out[_key(out, change.path, depth)]
        for change in sorted(node.added, key=lambda c: c.path[depth]):
            out.insert(_key(out, change.path, depth, end=True), copy.deepcopy(change.new))
    else:
        where = format_path(changes[0].path[:depth])
        raise PathError(changes[0].path, f"{where} is {_a(value)}, not a container")
    for change in node.modified.values():
        out[_key(out, change.path, depth)] = copy.deepcopy(change.new)
    for below in node.below.values():
        step = _key(out, below[0].path, depth)
        out[step] = _apply(out[step], below, depth + 1)
    return tuple(out) if isinstance(value, tuple) else out


def _key(container: dict[Any, Any] | list[Any], path: Path, depth: int, end: bool = False) -> Any:
    """``path[depth]``, checked to be a key of ``container`` or an index into it (with
    ``end``, the place just past its last element counts)."""
    step = path[depth]
    if isinstance(container, dict):
        if step not in container:
            raise PathError(path, f"no key {step!r}")
    elif not isinstance(step, int) or isinstance(step, bool):
        raise PathError(path, f"{step!r} is not a list index")
    elif not 0 <= step < len(container) + end:
        raise PathError(path, f"index {step} out of range for a list of {len(container)}")
    return step


# -- JSON Pointer (RFC 6901) ---------------------------------------------------------


def escape_pointer_token(step: str | int) -> str:
    """One reference token of a JSON Pointer: ``~`` as ``~0``, ``/`` as ``~1``."""
    return str(step).replace("~", "~0").replace("/", "~1")


def unescape_pointer_token(token: str) -> str:
    """The key a reference token names; a ``~`` not followed by ``0`` or ``1`` is refused
    (``PatchError``)."""
    if "~" in token and re.search(r"~(?![01])", token):
        raise PatchError(None, None, None, f"bad escape in pointer token {token!r}: '~' must be followed by 0 or 1")
    return token.replace("~1", "/").replace("~0", "~")


def format_pointer(path: Path) -> str:
    """A change's path as a JSON Pointer: ``('a/b', 3)`` -> ``/a~1b/3``; ``()`` -> ``""``."""
    return "".join("/" + escape_pointer_token(step) for step in path)


def parse_pointer(pointer: str) -> list[str]:
    """A JSON Pointer's reference tokens, unescaped (strings: whether one is a list index
    depends on the value it steps into). A malformed pointer raises ``PatchError``."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(None, None, pointer, f"pointer {pointer!r} must be empty or start with '/'")
    return [unescape_pointer_token(token) for token in pointer[1:].split("/")]


# -- to JSON Patch -------------------------------------------------------------------


def to_json_patch(changes: Iterable[Change]) -> list[dict[str, Any]]:
    """``changes`` as RFC 6902 operations (``add``, ``remove``, ``replace``) that, applied
    one after another to the diff's old value, give its new one.

    Each list's removals come first, in descending index, then its additions in
    ascending index, then what changed inside its elements. Values are the plain Python
    values of the changes (not copied), for the caller to serialize: one that JSON cannot
    express (bytes, a tuple, a datetime, a dataclass...) stays the Python object."""
    changes = list(changes)
    root = [c for c in changes if not c.path]
    if root:
        return [{"op": "replace", "path": "", "value": c.new} for c in root]
    return list(_patch_ops(changes, 0)) if changes else []


def _patch_ops(changes: list[Change], depth: int) -> Iterator[dict[str, Any]]:
    node = _group(changes, depth)
    for change in sorted(node.removed, key=_index_order, reverse=True):
        yield {"op": "remove", "path": format_pointer(change.path)}
    for change in sorted(node.added, key=_index_order):
        yield {"op": "add", "path": format_pointer(change.path), "value": change.new}
    for change in node.modified.values():
        yield {"op": "replace", "path": format_pointer(change.path), "value": change.new}
    for below in node.below.values():
        yield from _patch_ops(below, depth + 1)


def _index_order(change: Change) -> tuple[int, Any]:
    """Indices by number (keys, whose order does not matter, as they come)."""
    step = change.path[-1]
    return (0, step) if isinstance(step, int) else (1, 0)


# -- applying a JSON Patch (RFC 6902) ------------------------------------------------

_OPS = {"add": ("value",), "remove": (), "replace": ("value",), "move": ("from",), "copy": ("from",), "test": ("value",)}
_INDEX = re.compile(r"0|[1-9][0-9]*")


class _Failed(Exception):
    """One operation failed; ``apply_patch`` names it."""


def apply_patch(document: Any, patch: Sequence[dict[str, Any]] | str | bytes) -> Any:
    """``document`` (plain dicts and lists) with the JSON Patch ``patch`` applied.

    ``patch`` is a list of operations, or its JSON text. Atomic: if any operation fails,
    ``PatchError`` names it (its index from 0, op and pointer) and ``document`` is left
    as it was; a document is never modified in place. Containers are copied the first
    time an operation writes into them, values put in by ``add``, ``replace`` and
    ``copy`` are deep-copied, and unchanged subtrees are shared with ``document``.
    ``test`` compares as JSON does: ``1 == 1.0``, but ``True != 1``. Dicts and lists
    are walked; a tuple or any other value is a leaf. A value that an ``add``,
    ``replace``, ``test`` or ``copy`` takes may nest at most ``MAX_DEPTH`` objects and
    arrays (100, as a state may): a deeper one fails its operation."""
    if isinstance(patch, (str, bytes)):
        patch = _parse_patch(patch)
    if not isinstance(patch, Sequence) or isinstance(patch, (str, bytes)):
        raise PatchError(None, None, None, f"a patch is a list of operations, not a {type(patch).__name__}")
    doc = _Doc(document)
    for n, operation in enumerate(patch):
        op, path, source = _describe(operation)
        try:
            doc.run(_check_operation(operation))
        except _Failed as exc:
            raise PatchError(n, op, path, str(exc), source) from None
    return doc.root


def _describe(operation: Any) -> tuple[str | None, str | None, str | None]:
    if not isinstance(operation, dict):
        return None, None, None
    op, path, source = operation.get("op"), operation.get("path"), operation.get("from")
    return (op if isinstance(op, str) else None, path if isinstance(path, str) else None,
            source if isinstance(source, str) and op in ("move", "copy") else None)


def _parse_patch(text: str | bytes) -> Any:
    """A patch's JSON text, parsed; an object with a member twice (RFC 6902 A.13) is refused."""
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise PatchError(None, None, None, f"not valid JSON: {exc}") from None

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            twice = next(k for k in keys if keys.count(k) > 1)
            raise PatchError(None, None, None, f"member {twice!r} appears twice in one object")
        return dict(pairs)

    if _deeper_than(parsed, MAX_DEPTH + 2):
        # json's parse is recursive and would meet Python's recursion limit; the value this
        # deep is refused when its operation runs (an unknown member holding it is ignored).
        return parsed
    try:
        json.loads(text, object_pairs_hook=no_duplicates)
    except PatchError:
        raise
    except ValueError:
        pass  # orjson's parse stands; this one only looks for repeated members
    return parsed


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` objects and arrays (a cycle does).
    Iterative: the values it refuses are those a recursive walk cannot take."""
    stack = [(value, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Iterable[Any] = value.values()
        elif isinstance(value, (list, tuple)):
            children = value
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _copyable(value: Any, what: str) -> Any:
    """``value`` if it nests at most as deep as a state may (``MAX_DEPTH``): deeper, it
    could never be stored, and copying or comparing it would meet Python's recursion
    limit, so the operation fails."""
    if _deeper_than(value, MAX_DEPTH):
        raise _Failed(f"{what} nests deeper than {MAX_DEPTH} objects and arrays, the most a state may hold")
    return value


def _check_operation(operation: Any) -> dict[str, Any]:
    if not isinstance(operation, dict):
        raise _Failed(f"an operation is an object, not a {type(operation).__name__}")
    op = operation.get("op")
    if op not in _OPS:
        raise _Failed(f"unknown op {op!r}" if "op" in operation else "no 'op' member")
    for member in ("path", *_OPS[op]):
        if member not in operation:
            raise _Failed(f"no {member!r} member")
    for member in ("path", "from"):
        if member in _OPS[op] + ("path",) and not isinstance(operation[member], str):
            raise _Failed(f"{member!r} must be a string, not {type(operation[member]).__name__}")
    return operation


class _Doc:
    """The document being patched, copied container by container as operations write."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self._owned: dict[int, Any] = {}  # id -> container made here (kept alive: ids stay unique)

    def run(self, operation: dict[str, Any]) -> None:
        op, path = operation["op"], self._tokens(operation["path"])
        if op == "add":
            self.add(path, copy.deepcopy(_copyable(operation["value"], "the value")))
        elif op == "remove":
            self.remove(path)
        elif op == "replace":
            self.replace(path, copy.deepcopy(_copyable(operation["value"], "the value")))
        elif op == "test":
            value = self.get(path)
            if not _json_equal(value, _copyable(operation["value"], "the value")):
                raise _Failed(f"value is {short_repr(value, 40)}, not {short_repr(operation['value'], 40)}")
        else:
            source = self._tokens(operation["from"])
            if op == "move" and len(source) < len(path) and path[: len(source)] == source:
                raise _Failed("cannot move a value into one of its own children")
            if op == "move" and source == path:
                self.get(path)
                return
            value = self.get(source, "from ")
            if op == "move":
                self.remove(source, "from ")
            else:
                value = copy.deepcopy(_copyable(value, "the value copied"))
            self.add(path, value)

    @staticmethod
    def _tokens(pointer: str) -> list[str]:
        try:
            return parse_pointer(pointer)
        except PatchError as exc:
            raise _Failed(exc.reason) from None

    def get(self, path: list[str], side: str = "") -> Any:
        value = self.root
        for n, token in enumerate(path):
            value = _child(value, token, path[:n], side)
        return value

    def _own(self, value: Any) -> Any:
        if id(value) in self._owned:
            return value
        value = copy.copy(value)
        self._owned[id(value)] = value
        return value

    def _parent(self, path: list[str], side: str = "") -> dict[str, Any] | list[Any]:
        """The container holding ``path``'s last step, copied (with every container
        above it) if the document still shares it with the input."""
        if not isinstance(self.root, (dict, list)):
            raise _Failed(f"the {side}document is {_a(self.root)}, not an object or array")
        container: dict[str, Any] | list[Any] = self._own(self.root)
        self.root = container
        for n, token in enumerate(path[:-1]):
            child = _child(container, token, path[:n], side)
            if not isinstance(child, (dict, list)):
                where = format_pointer(tuple(path[: n + 1]))
                raise _Failed(f"{side}{where} is {_a(child)}, not an object or array")
            child = self._own(child)
            container[_step(container, token, path[:n], side)] = child  # type: ignore[index]
            container = child
        return container

    def add(self, path: list[str], value: Any) -> None:
        if not path:
            self.root = value
            return
        container, token = self._parent(path), path[-1]
        if isinstance(container, dict):
            container[token] = value
        elif token == "-":
            container.append(value)
        else:
            container.insert(_index_token(token, len(container), path[:-1], end=True), value)

    def replace(self, path: list[str], value: Any) -> None:
        if not path:
            self.root = value
            return
        container = self._parent(path)
        container[_step(container, path[-1], path[:-1])] = value  # type: ignore[index]

    def remove(self, path: list[str], side: str = "") -> None:
        if not path:
            raise _Failed("the whole document cannot be removed")
        container = self._parent(path, side)
        del container[_step(container, path[-1], path[:-1], side)]  # type: ignore[arg-type]


def _step(container: dict[str, Any] | list[Any], token: str, above: list[str], side: str = "") -> str | int:
    """The key or index ``token`` names in ``container``, which must hold it."""
    if isinstance(container, dict):
        if token not in container:
            where = f" in {side}{format_pointer(tuple(above))}" if above else (f" in {side}document" if side else "")
            raise _Failed(f"no member {token!r}{where}")
        return token
    return _index_token(token, len(container), above, side)


def _index_token(token: str, length: int, above: list[str], side: str = "", end: bool = False) -> int:
    """A list index token, checked: digits without leading zeros, naming an element of a
    list of ``length`` (or, with ``end``, the place just past its last one)."""
    if token == "-":
        raise _Failed(f"'-' (past the end of {side}{format_pointer(tuple(above)) or 'the document'}) names no element")
    if not _INDEX.fullmatch(token):
        raise _Failed(f"{token!r} is not an array index")
    i = int(token)
    if i > length or (i == length and not end):
        raise _Failed(f"index {i} out of range for a list of {length}")
    return i


def _child(value: Any, token: str, above: list[str], side: str = "") -> Any:
    if isinstance(value, (dict, list)):
        return value[_step(value, token, above, side)]  # type: ignore[index]
    where = format_pointer(tuple(above)) or "the document"
    raise _Failed(f"{side}{where} is {_a(value)}, not an object or array")


def _a(value: Any) -> str:
    """``an int``, ``a str``, ``None``: what a value is, in a message."""
    name = type(value).__name__
    return "None" if value is None else ("an " if name[0] in "aeiouAEIOU" else "a ") + name


def _json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON sees it: numbers by value, booleans apart from numbers, arrays
    (lists or tuples) element by element, objects member by member."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, (dict, list, tuple)) or isinstance(b, (dict, list, tuple)):
        return False
    return bool(a == b)


# -- --stat --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DiffStatRow:
    """The changes under one top-level key (None: a change of the whole value)."""

    key: str | int | None
    added: int = 0
    removed: int = 0
    modified: int = 0
    bytes_added: int = 0
    bytes_removed: int = 0

    @property
    def changes(self) -> int:
        return self.added + self.removed + self.modified


@dataclass(frozen=True, slots=True)
class DiffStat:
    """A ``--stat`` of a diff: a row per top-level key, in the diff's order, and totals.

    Bytes are those of canonical JSON (a value JSON cannot express: its ``repr``); a
    modified string counts only its differing middle, past the common prefix and suffix."""

    rows: tuple[DiffStatRow, ...]

    @property
    def added(self) -> int:
        return sum(r.added for r in self.rows)

    @property
    def removed(self) -> int:
        return sum(r.removed for r in self.rows)

    @property
    def modified(self) -> int:
        return sum(r.modified for r in self.rows)

    @property
    def changes(self) -> int:
        return sum(r.changes for r in self.rows)

    @property
    def bytes_added(self) -> int:
        return sum(r.bytes_added for r in self.rows)

    @property
    def bytes_removed(self) -> int:
        return sum(r.bytes_removed for r in self.rows)

    def __str__(self) -> str:
        """One line per key, then the totals::

             messages | 2 added, 1 modified | +1.2 KiB -40 B
             3 paths changed, 2 added, 1 modified, +1.2 KiB -40 B
        """
        names = [format_path(() if r.key is None else (r.key,)) for r in self.rows]
        counts = [_counts(r) for r in self.rows]
        w1, w2 = max(map(len, names), default=0), max(map(len, counts), default=0)
        lines = [f" {name:<{w1}} | {c:<{w2}} | {_bytes(r)}" for name, c, r in zip(names, counts, self.rows)]
        total = f"{self.changes} path{'' if self.changes == 1 else 's'} changed"
        if self.changes:
            total += f", {_counts(self)}, {_bytes(self)}"
        return "\n".join([*lines, " " + total])


def _counts(x: DiffStatRow | DiffStat) -> str:
    return ", ".join(f"{n} {kind}" for n, kind in ((x.added, "added"), (x.removed, "removed"),
                                                     (x.modified, "modified")) if n)


def _bytes(x: DiffStatRow | DiffStat) -> str:
    return f"+{_size(x.bytes_added)} -{_size(x.bytes_removed)}"


def _size(n: int) -> str:
    """``40 B``, ``1.2 KiB``, ``3.0 MiB``."""
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            break
        value /= 1024
    return f"{value:.1f} {unit}"


def diff_stat(changes: Iterable[Change]) -> DiffStat:
    """Count ``changes`` and their bytes per top-level key (the first step of each path)."""
    rows: dict[str | int | None, list[int]] = {}
    for change in changes:
        key = change.path[0] if change.path else None
        row = rows.setdefault(key, [0, 0, 0, 0, 0])
        if change.kind == "added":
            row[0] += 1
            row[3] += _json_size(change.new)
        elif change.kind == "removed":
            row[1] += 1
            row[4] += _json_size(change.old)
        else:
            row[2] += 1
            if isinstance(change.old, str) and isinstance(change.new, str):
                old, new = _differing_middle(change.old, change.new)
                row[3] += len(new.encode())
                row[4] += len(old.encode())
            else:
                row[3] += _json_size(change.new)
                row[4] += _json_size(change.old)
    return DiffStat(tuple(DiffStatRow(key, *counts) for key, counts in rows.items()))


def _json_size(value: Any) -> int:
    """The bytes of ``value`` as canonical JSON, or of its ``repr`` if JSON cannot hold it."""
    value = plain_value(value)
    try:
        return len(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
    except TypeError:
        return len(repr(value).encode())


def _differing_middle(old: str, new: str) -> tuple[str, str]:
    """What is left of two strings without their common prefix and suffix."""
    n = min(len(old), len(new))
    start = 0
    while start < n and old[start] == new[start]:
        start += 1
    end = 0
    while end < n - start and old[-1 - end] == new[-1 - end]:
        end += 1
    return old[start : len(old) - end], new[start : len(new) - end]
