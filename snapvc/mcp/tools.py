"""What each tool of ``snapvc mcp`` does, on an open ``Repository``, as JSON-ready dicts.

Kept apart from the MCP SDK (``snapvc.mcp.server`` registers these): each method takes
plain arguments, reads or writes through the public ``Repository`` and returns a dict
of JSON values, typed values in snapvc's JSON form (``to_jsonable``: a datetime is
``{"$snapvc": "datetime", ...}``). Bad input raises a ``SnapvcError`` naming what was
wrong; the server turns it into a tool error result for the model to read.

An answer costs what it shows. States are read through ``repo.snapshot``, which loads
only the nodes on the path asked for; a value too long to show whole is cut to a
preview with its size (``MAX_VALUE_CHARS``), and a large map or list comes a page of
children at a time (``offset``, ``limit``, ``next_offset``), each child whole when it is
small, else as its kind, size and a preview.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from snapvc.api import Repository
from snapvc.diff.changes import Change, plain_value
from snapvc.encoding.arrays import change_summary as array_change_summary
from snapvc.encoding.arrays import header_json, is_array
from snapvc.encoding.jsonable import child_keys, from_jsonable, json_head, json_size, kind_and_size, to_jsonable
from snapvc.encoding.reader import MapView, SeqView
from snapvc.errors import InvalidArgumentError, PathError, RefConflictError, RefNotFoundError
from snapvc.ids import ObjectId
from snapvc.objects import Commit, shown_metadata
from snapvc.refs.names import HEADS, branch_ref, short_name

__all__ = ["MAX_VALUE_CHARS", "PREVIEW_CHARS", "Tools", "parse_steps", "path_text", "value_json"]

MAX_VALUE_CHARS = 20_000  # a value whose JSON is longer is cut to a preview of ...
PREVIEW_CHARS = 500  # ... this many characters
CHILD_CHARS = 2_000  # a child in a page of a map or list is shown whole up to this size
MAX_PAGE = 500  # the most commits, changes or children one call gives

Steps = tuple[str, ...]


def parse_steps(text: str, what: str = "path") -> Steps:
    """A path as a model writes it: dotted (``research.findings.0``) or a JSON Pointer
    (``/research/findings/0``, for keys holding dots); ``""`` or ``"/"`` is the root.
    Steps stay text: a step of digits is an index where it meets a list, a key where
    it meets a map."""
    if text in ("", "/"):
        return ()
    if text.startswith("/"):  # an empty key is a step of its own here, as in RFC 6901 (but "/" alone is the root)
        return tuple(s.replace("~1", "/").replace("~0", "~") for s in text[1:].split("/"))
    steps = tuple(text.split("."))
    if "" in steps:
        raise PathError(text, f"the {what} has an empty step: write a.b.0, or /a/b/0 for keys holding dots")
    return steps


def path_text(steps: Sequence[str | int]) -> str:
    """A path as the tools take it back: dotted (``messages.3.content``), or a JSON Pointer
    (``/a.b/0``) when a key holds a dot or a slash, or is empty."""
    keys = [str(step) for step in steps]
    if all(type(step) is int or (key and "." not in key and "/" not in key) for step, key in zip(steps, keys)):
        return ".".join(keys)
    return "".join("/" + key.replace("~", "~0").replace("/", "~1") for key in keys)


def _check_range(name: str, value: int, lo: int, hi: int) -> int:
    if not lo <= value <= hi:
        raise InvalidArgumentError(name, f"{name}={value} is out of range: give {lo} to {hi}")
    return value


def _time(text: str | None, name: str) -> datetime | None:
    """An ISO 8601 time (``2026-11-23``, ``2026-11-23T10:00:00+00:00``; without a zone,
    the server's local time, as git takes it)."""
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidArgumentError(name, f"{name}={text!r} is not an ISO 8601 time such as 2026-11-23T10:00:00Z") from None
    return when if when.tzinfo is not None else when.astimezone()


# -- values as JSON ---------------------------------------------------------------------------


def _json_text(value: Any, where: str) -> tuple[Any, str]:
    found = to_jsonable(value, where)
    return found, orjson.dumps(found).decode()


def value_json(value: Any, where: str, max_chars: int = MAX_VALUE_CHARS) -> tuple[Any, int | None]:
    """``value`` (plain or a lazy view) in snapvc's JSON form, cut to a preview past
    ``max_chars``, and the length of its whole JSON text (None for a large stored map or
    list, summarised unread rather than measured)."""
    if isinstance(value, (MapView, SeqView)):
        small = _small_json(value, where, max_chars)
        if small is None:
            return _summary(value, where), None
        value = small
        text = orjson.dumps(value).decode()
        return value, len(text)
    size = json_size(value, where)  # measured first: a long str, bytes or array is never written whole to be cut
    if size > max_chars:
        return {"$truncated": True, "size": size, "preview": "".join(json_head(value, where, PREVIEW_CHARS))[:PREVIEW_CHARS]}, size
    found, text = _json_text(value, where)
    return found, len(text)


def _summary(node: Any, where: str) -> dict[str, Any]:
    """A large stored map or list as its kind, size and first keys or items."""
    kind, size = kind_and_size(node)
    head = list(itertools.islice(iter(node), 10)) if kind == "map" else None
    preview = {"$truncated": True, "kind": kind, "size": size,
               "hint": f"too large to show whole: read it a page at a time with checkout path={where!r}"}
    if head is not None:
        preview["first_keys"] = head
    return preview


def _small_json(node: Any, where: str, budget: int) -> Any | None:
    """``node`` in JSON form if its JSON text takes about ``budget`` characters or fewer,
    else None. Its size is counted first, reading lazily and stopping as soon as the
    budget is spent: a large subtree costs no more than the budget to find so."""
    left = budget

    def count(value: Any) -> None:
        nonlocal left
        if isinstance(value, (MapView, Mapping)):
            for key in value:
                left -= len(key) + 4
                if left < 0:
                    raise _TooLarge
                count(value[key])
        elif isinstance(value, (SeqView, list, tuple)):
            for i in range(len(value)):
                left -= 1
                if left < 0:
                    raise _TooLarge
                count(value[i])
        else:
            left -= json_size(value, where)  # a long str, bytes or array measured, not written
            if left < 0:
                raise _TooLarge

    try:
        count(node)
    except _TooLarge:
        return None
    return to_jsonable(plain_value(node), where)


class _TooLarge(Exception):
    """Raised inside ``_small_json`` when the budget is spent; never leaves it."""


def _step(node: Any, step: str, steps: Steps, at: int) -> Any:
    """The child ``step`` of ``node``; ``PathError`` naming the path and what is there
    when there is none."""
    shown = ".".join(steps)
    here = ".".join(steps[:at]) or "the root"
    if isinstance(node, Mapping):
        if step not in node:
            raise PathError(shown, f"no key {step!r} in the map at {here}")
        return node[step]
    if isinstance(node, (SeqView, list, tuple)):
        if not step.lstrip("-").isdigit() or not -len(node) <= int(step) < len(node):
            raise PathError(shown, f"no index {step!r} in the list of {len(node)} at {here}")
        return node[int(step)]
    raise PathError(shown, f"{here} holds a {type(node).__name__}, not a map or a list")


def _value_at(root: Any, steps: Steps) -> Any:
    node = root
    for at, step in enumerate(steps):
        node = _step(node, step, steps, at)
    return node


def _change_json(change: Change) -> dict[str, Any]:
    """A change as the diff tool gives it: the path, its kind, and the old and new values
    (cut to a preview past ``MAX_VALUE_CHARS``, with the size of their JSON text)."""
    where = path_text(change.path)
    out: dict[str, Any] = {"path": where, "steps": list(change.path), "kind": change.kind}
    for side, value, present in (("old", change.old, change.kind != "added"), ("new", change.new, change.kind != "removed")):
        if not present:
            continue
        if is_array(value):  # its dtype, shape and size, never its values: a summary says what changed
            out[side] = header_json(value)
            out[f"{side}_size"] = out[side]["bytes"]
        else:
            out[side], out[f"{side}_size"] = value_json(value, where)
    if is_array(change.old) and is_array(change.new):
        out["summary"] = array_change_summary(change.old, change.new)
    return out


def _page(items: Iterator[Any], offset: int, limit: int) -> tuple[list[Any], int | None]:
    """Items ``offset`` to ``offset + limit`` and the offset of the next page (None when
    none is left): one more item is read to know."""
    found = list(itertools.islice(items, offset, offset + limit + 1))
    if len(found) > limit:
        return found[:limit], offset + limit
    return found, None


# -- the tools --------------------------------------------------------------------------------


class Tools:
    """The tools of one server on one open repository. ``Repository`` is thread-safe:
    the SDK runs each call on a worker thread of its own."""

    def __init__(self, repo: Repository) -> None:
        self.repo = repo

    def commit_json(self, commit: Commit, labels: Mapping[bytes, list[str]] | None = None) -> dict[str, Any]:
        out = {"id": commit.id.hex, "short": commit.id.hex[:12], "parents": [p.hex for p in commit.parents],
               "author": commit.author, "time": commit.time.isoformat(), "message": commit.message,
               "metadata": shown_metadata(commit, MAX_VALUE_CHARS, show_damage=True), "generation": commit.generation}
        if labels is not None:
            out["refs"] = labels.get(commit.id, [])
        return out

    def _labels(self) -> dict[bytes, list[str]]:
        """The refs at each commit, as ``git log --decorate`` shows them."""
        labels: dict[bytes, list[str]] = {}
        head = self.repo.refs.get_symbolic("HEAD")
        for name, oid in self.repo.branches().items():
            if head == HEADS + name:
                labels.setdefault(oid, []).insert(0, f"HEAD -> {name}")
            else:
                labels.setdefault(oid, []).append(name)
        for name, oid in self.repo.tags().items():
            labels.setdefault(oid, []).append(f"tag: {name}")
        return labels

    def _commit(self, rev: str) -> Commit:
        return self.repo.get_commit(self.repo.resolve(rev), rev=rev)

    # -- reading --

    def refs(self) -> dict[str, Any]:
        repo = self.repo
        head_ref = repo.refs.get_symbolic("HEAD")
        head = repo.refs.get(head_ref) if head_ref else repo.refs.get("HEAD")

        def listed(refs: Mapping[str, Any]) -> list[dict[str, Any]]:
            out = []
            for name, oid in refs.items():
                commit = repo.get_commit(oid, walking=True)
                out.append({"name": name, "commit": oid.hex, "short": oid.hex[:12], "time": commit.time.isoformat(),
                            "message": commit.message.splitlines()[0] if commit.message else ""})
            return out

        return {"head": {"branch": short_name(head_ref) if head_ref else None, "commit": head.hex if head else None},
                "branches": listed(repo.branches()), "tags": listed(repo.tags())}

    def log(self, rev: str | None, where: Mapping[str, Any] | None, path: str | None, since: str | None,
            until: str | None, limit: int, offset: int) -> dict[str, Any]:
        _check_range("limit", limit, 1, MAX_PAGE)
        _check_range("offset", offset, 0, 1 << 62)
        repo = self.repo
        if rev is not None:
            starts: list[str] = [rev]
        elif repo.head in repo.branches():
            starts = ["HEAD"]
        else:  # HEAD's branch has no commit: every branch, as 'snapvc log' does (threads live on branches)
            starts = list(repo.branches())
        if not starts:
            return {"commits": [], "next_offset": None}
        commits = repo.log(starts, where=dict(where) if where else None, since=_time(since, "since"),
                           until=_time(until, "until"), paths=[parse_steps(path)] if path else None)
        page, following = _page(commits, offset, limit)
        labels = self._labels()
        return {"commits": [self.commit_json(c, labels) for c in page], "next_offset": following}

    def show(self, rev: str, limit: int) -> dict[str, Any]:
        _check_range("limit", limit, 1, MAX_PAGE)
        commit = self._commit(rev)
        changes = self.repo.diff(commit.parents[0] if commit.parents else {}, commit.id)
        counts = {kind: sum(1 for c in changes if c.kind == kind) for kind in ("added", "removed", "modified")}
        return {**self.commit_json(commit, self._labels()),
                "changes": [{"path": path_text(c.path), "kind": c.kind} for c in changes[:limit]],
                "changes_total": len(changes), "counts": counts}

    def diff(self, a: str, b: str | None, path: str | None, limit: int, offset: int) -> dict[str, Any]:
        _check_range("limit", limit, 1, MAX_PAGE)
        _check_range("offset", offset, 0, 1 << 62)
        old_commit = self._commit(a)
        if b is None:  # what commit a changed against its first parent
            new_commit = old_commit
            old: Any = old_commit.parents[0] if old_commit.parents else {}
            shown_a = old.hex if old_commit.parents else None
        else:
            new_commit = self._commit(b)
            old, shown_a = old_commit.id, old_commit.id.hex
        changes = self.repo.diff(old, new_commit.id, paths=[parse_steps(path)] if path else None)
        page = changes[offset:offset + limit]
        following = offset + limit if offset + limit < len(changes) else None
        return {"a": shown_a, "b": new_commit.id.hex, "changes": [_change_json(c) for c in page],
                "changes_total": len(changes), "next_offset": following}

    def checkout(self, rev: str, path: str, limit: int, offset: int) -> dict[str, Any]:
        _check_range("limit", limit, 1, MAX_PAGE)
        _check_range("offset", offset, 0, 1 << 62)
        commit = self._commit(rev)
        steps = parse_steps(path)
        node = _value_at(self.repo.snapshot(commit.id), steps)
        where = path_text(steps)
        kind, size = kind_and_size(node)
        out: dict[str, Any] = {"commit": commit.id.hex, "path": where, "kind": kind, "size": size}
        if kind == "value":
            if isinstance(node, str) and len(node) > MAX_VALUE_CHARS:  # a long text: read a slice at a time
                end = min(offset + MAX_VALUE_CHARS, len(node))
                return out | {"value": node[offset:end], "offset": offset,
                              "next_offset": end if end < len(node) else None}
            value, _ = value_json(node, where)
            return out | {"value": value}
        if offset == 0 and size <= limit:
            whole = _small_json(node, where, MAX_VALUE_CHARS)
            if whole is not None:
                return out | {"value": whole}
        # Too large to give whole: a page of its children, each whole when small.
        keys = child_keys(node, kind, size, offset, limit)
        children = []
        for key in keys:
            child = node[key]
            here = path_text((*steps, key))
            child_kind, child_size = kind_and_size(child)
            shown = _small_json(child, here, CHILD_CHARS)
            entry: dict[str, Any] = {"key": key, "kind": child_kind, "size": child_size}
            if shown is not None:
                entry["value"] = shown
            else:
                entry["preview"] = ("".join(json_head(child, here, PREVIEW_CHARS))[:PREVIEW_CHARS] if child_kind == "value"
                                    else f"{{{child_size} keys}}" if child_kind == "map" else f"[{child_size} items]")
            children.append(entry)
        following = offset + len(keys) if offset + len(keys) < size else None
        return out | {"children": children, "offset": offset, "next_offset": following}

    def history(self, path: str, rev: str, limit: int, offset: int, oldest_first: bool) -> dict[str, Any]:
        _check_range("limit", limit, 1, MAX_PAGE)
        _check_range("offset", offset, 0, 1 << 62)
        steps = parse_steps(path)
        if not steps:
            raise PathError(path, "the history of a path needs a path below the root, such as messages")
        start = self._commit(rev)
        where = path_text(steps)
        entries = self.repo.history(start.id, steps, limit=offset + limit + 1, oldest_first=oldest_first)
        page, following = _page(iter(entries), offset, limit)
        out = []
        for entry in page:
            item: dict[str, Any] = {"commit": self.commit_json(entry.commit), "kind": entry.kind}
            if entry.kind != "removed":
                item["value"], item["value_size"] = value_json(entry.value, where)
            if entry.kind != "added":
                item["old"], item["old_size"] = value_json(entry.old, where)
            out.append(item)
        return {"path": where, "entries": out, "next_offset": following}

    def reflog(self, ref: str, limit: int) -> dict[str, Any]:
        _check_range("limit", limit, 1, MAX_PAGE)
        entries = self.repo.reflog(ref, limit)
        if not entries and ref != "HEAD" and self.repo.refs.get(self.repo.branch_ref(ref)) is None:
            raise RefNotFoundError(ref, f"no branch or tag {ref!r} has ever existed here")
        return {"ref": ref, "entries": [{"old": e.old.hex if e.old else None, "new": e.new.hex if e.new else None,
                                         "time": datetime.fromtimestamp(e.time, UTC).isoformat(), "reason": e.reason}
                                        for e in entries]}

    # -- writing (each move of a ref lands in the reflog) --

    def commit(self, branch: str | None, message: str, metadata: Mapping[str, Any] | None,
               set_values: Mapping[str, Any] | None, delete: Sequence[str] | None,
               state: Mapping[str, Any] | None, expected_tip: str | None) -> dict[str, Any]:
        repo = self.repo
        if state is not None and (set_values or delete):
            raise InvalidArgumentError("state", "give either a whole state, or values to set and paths to delete, "
                                                "not both")
        if state is None and not set_values and not delete:
            raise InvalidArgumentError("set", "nothing to commit: give values to set, paths to delete, or a whole state")
        name = short_name(repo.branch_ref(branch))
        ref = branch_ref(name)
        tip = repo.refs.get(ref)
        if expected_tip is not None and tip != self._commit(expected_tip).id:
            raise RefConflictError(ref, self._commit(expected_tip).id, tip)  # another writer came first: read it again
        meta = dict(metadata or {})
        if state is not None:
            values = from_jsonable(dict(state), "state")
            commit = repo.commit(values, branch=name, message=message, metadata=meta,
                                 parents=(tip,) if tip is not None else ())
        else:
            work = repo.state(name)
            if work.base != tip:  # moved between reading the tip and loading it: the commit below would refuse anyway
                raise RefConflictError(ref, tip, work.base)
            for dotted, value in (set_values or {}).items():
                work.set(_state_path(dotted), from_jsonable(value, f"set[{dotted!r}]"))
            for dotted in delete or ():
                work.delete(_state_path(dotted))
            commit = repo.get_commit(ObjectId.from_hex(work.snapshot(message, meta).id))
        return {"branch": name, "ref": ref, "commit": self.commit_json(commit), "previous": tip.hex if tip else None}

    def branch(self, name: str, at: str, force: bool) -> dict[str, Any]:
        old = self.repo.refs.get(branch_ref(name))
        commit = self.repo.branch(name, at, force=force)
        return {"ref": branch_ref(name), "commit": commit.id.hex, "previous": old.hex if old else None}

    def reset(self, branch: str, to: str) -> dict[str, Any]:
        ref = self.repo.branch_ref(branch)
        old = self.repo.refs.get(ref)
        commit = self.repo.reset(branch, to)
        return {"ref": ref, "commit": commit.id.hex, "previous": old.hex if old else None,
                "undo": f"reset branch={short_name(ref)!r} to={short_name(ref)}@{{1}}"}


def _state_path(dotted: str) -> str | Steps:
    """A path for ``State.set``/``delete``: dotted text as it is, a JSON Pointer as steps."""
    steps = parse_steps(dotted)
    if not steps:
        raise PathError(dotted, "is the root: to replace the whole state, give it as state")
    return dotted if not dotted.startswith("/") else steps

