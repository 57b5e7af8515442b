"""The JSON API of the web view: what the page asks the server, answered from the repository.

Each answer costs what it shows. The graph comes a page at a time (``snapvc.ui.graph``:
the cursor carries the lanes); a commit's changes are a diff against its first parent,
which skips equal subtrees unread; the state tree is read through ``repo.snapshot``, so
opening a path loads the nodes on that path and the page of children asked for, never
the whole state; a value too long to show whole is cut (``MAX_VALUE_CHARS``).

Reads only, unless the server was started writable (``snapvc ui --write``); then tag,
branch, reset and undo go through the public ``Repository`` methods, and so land in the
reflog like the command line's. A write must be JSON (``Content-Type: application/json``:
a form of another site cannot send it without the browser asking the server first) and,
when the browser says where the request comes from (``Origin``), come from the server's
own page. Every request must name, in its ``Host`` header, a host the server serves: a
page of another site that makes its own name resolve to 127.0.0.1 (DNS rebinding) is
refused before it reads anything.

Errors answer ``{"error": message, "type": the SnapvcError subclass}``: 400 for bad input
(a malformed rev, path or cursor), 404 for what does not exist (a rev, a path in the
state, a ref), 403 for a refused request (``RequestRefusedError``), 409 for a ref that
exists already or moved meanwhile, 500 for a damaged repository.
"""

from __future__ import annotations

import difflib
import threading
import traceback
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from snapvc.api import Repository
from snapvc.diff.changes import Change, format_path
from snapvc.encoding.arrays import array_summary, header_json, is_array
from snapvc.encoding.arrays import change_summary as array_change_summary
from snapvc.encoding.jsonable import child_keys, json_head, json_size, kind_and_size, to_jsonable
from snapvc.encoding.reader import MapView, SeqView
from snapvc.errors import (
    InvalidArgumentError,
    MalformedJsonError,
    PathError,
    RefConflictError,
    RefExistsError,
    RefNotFoundError,
    RequestRefusedError,
    RevisionError,
    SnapvcError,
    UnknownRevisionError,
)
from snapvc.ids import ObjectId
from snapvc.objects import Commit, metadata_filter, shown_metadata
from snapvc.refs.names import HEADS, TAGS, branch_ref, short_name, tag_ref
from snapvc.ui.graph import graph_page, row_json

__all__ = ["Api", "MAX_VALUE_CHARS", "PREVIEW_CHARS", "change_json"]

MAX_VALUE_CHARS = 20_000  # a value whose JSON is longer is cut to a preview of ...
PREVIEW_CHARS = 500  # ... this many characters
CHILD_PREVIEW_CHARS = 120  # the preview of a child in the state tree
TEXT_DIFF_CHARS = 200  # strings longer than this (or of several lines) get a line diff ...
TEXT_DIFF_MAX_CHARS = 1_000_000  # ... unless longer than this; a line diff is cut to MAX_VALUE_CHARS
GRAPH_LIMIT, GRAPH_MAX = 100, 500
Path = tuple[str | int, ...]


def _status(exc: SnapvcError) -> int:
    if isinstance(exc, RequestRefusedError):
        return 403
    if isinstance(exc, (UnknownRevisionError, RefNotFoundError, PathError)):
        return 404
    if isinstance(exc, (RefExistsError, RefConflictError)):
        return 409
    if isinstance(exc, (RevisionError, InvalidArgumentError, MalformedJsonError)) or isinstance(exc, ValueError):
        return 400  # a malformed rev, an invalid ref name, a bad argument
    return 500


class OrjsonResponse(JSONResponse):
    """JSON written by orjson: several times faster than the standard library's on a
    page of a hundred commits."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def error_response(exc: SnapvcError) -> JSONResponse:
    return OrjsonResponse({"error": str(exc), "type": type(exc).__name__}, status_code=_status(exc))


# -- values as JSON --------------------------------------------------------------------------


def _cut(size: int, preview: str) -> dict[str, Any]:
    """A value too long to send whole, as the page shows it: the characters of its whole
    JSON text, and the beginning of that text (or, for an array, its summary)."""
    return {"$truncated": True, "reason": "too large to show whole", "size": size, "preview": preview}


def _value_json(value: Any, where: str) -> tuple[Any, int]:
    """``value`` in snapvc's JSON form, cut to a preview past ``MAX_VALUE_CHARS``, and the
    length of its whole JSON text. A long str, bytes or array is never turned into JSON
    whole to be cut: only its beginning is (its size is counted, or computed)."""
    if value is None:
        return None, 0
    if is_array(value) and int(header_json(value)["bytes"]) * 4 // 3 > MAX_VALUE_CHARS:
        # A large array is not turned into JSON to be cut: its base64 alone would be that long.
        size = int(header_json(value)["bytes"]) * 4 // 3
        return _cut(size, array_summary(value)), size
    if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
        size = json_size(value, where)
        return _cut(size, orjson.dumps(value[:PREVIEW_CHARS]).decode()[:PREVIEW_CHARS]), size
    if isinstance(value, bytes) and len(value) * 4 // 3 > MAX_VALUE_CHARS:
        size = json_size(value, where)
        return _cut(size, orjson.dumps(to_jsonable(value[:PREVIEW_CHARS], where)).decode()[:PREVIEW_CHARS]), size
    if isinstance(value, (Mapping, MapView, list, tuple, SeqView)):
        # Measured first, its long leaves by their length: a map holding a 60 MB array is
        # never turned into JSON whole to be cut.
        size = json_size(value, where)
        if size > MAX_VALUE_CHARS:
            return _cut(size, "".join(json_head(value, where, PREVIEW_CHARS))[:PREVIEW_CHARS]), size
    found = to_jsonable(value, where)
    text = orjson.dumps(found).decode()
    if len(text) > MAX_VALUE_CHARS:
        return _cut(len(text), text[:PREVIEW_CHARS]), len(text)
    return found, len(text)


def _text_diff(old: Any, new: Any) -> list[str] | None:
    """A unified line diff of two strings worth reading line by line, else None."""
    if not (isinstance(old, str) and isinstance(new, str)):
        return None
    if "\n" not in old and "\n" not in new and max(len(old), len(new)) <= TEXT_DIFF_CHARS:
        return None
    if max(len(old), len(new)) > TEXT_DIFF_MAX_CHARS:  # too long to diff line by line here: both sides are cut
        return None
    lines = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=3)
    out: list[str] = []
    left = MAX_VALUE_CHARS
    for line in lines:
        if line.startswith(("---", "+++")):
            continue
        if len(line) > left:
            out.append("… (the line diff is cut here: too long to show whole)")
            break
        out.append(line)
        left -= len(line) + 1
    return out


def change_json(change: Change) -> dict[str, Any]:
    """One ``Change`` as the API gives it (see the contract in the package docstring)."""
    where = format_path(change.path)
    if is_array(change.old) or is_array(change.new):  # its dtype and shape, and what changed: never its values
        return _array_change_json(change, where)
    old, old_size = _value_json(change.old, where)
    new, new_size = _value_json(change.new, where)
    return {"path": list(change.path), "path_text": where,
            "kind": "changed" if change.kind == "modified" else change.kind,
            "old": old, "new": new, "old_size": old_size, "new_size": new_size,
            "text_diff": _text_diff(change.old, change.new), "items": None}


def _array_change_json(change: Change, where: str) -> dict[str, Any]:
    """A change of or to a numpy array: each array side as its JSON form without values
    (``header_json``: dtype, shape, order, bytes), and the one-line summary as its text diff."""

    def side(value: Any) -> tuple[Any, int]:
        if is_array(value):
            header = header_json(value)
            return header, int(header["bytes"])
        return _value_json(value, where)

    old, old_size = side(change.old)
    new, new_size = side(change.new)
    summary = (array_change_summary(change.old, change.new) if is_array(change.old) and is_array(change.new)
               else array_summary(change.new if is_array(change.new) else change.old))
    return {"path": list(change.path), "path_text": where,
            "kind": "changed" if change.kind == "modified" else change.kind,
            "old": old, "new": new, "old_size": old_size, "new_size": new_size,
            "text_diff": [summary], "items": None}


def _changes_json(changes: list[Change], sizes: Callable[[Path], tuple[int, int]]) -> list[dict[str, Any]]:
    """The changes, elements added to or removed from a list gathered into one change of
    the list (``items``): appended messages read as what was appended. ``sizes(path)``
    gives the list's length before and after."""
    out: list[dict[str, Any]] = []
    lists: dict[Path, dict[str, Any]] = {}
    for change in changes:
        if change.kind != "modified" and change.path and type(change.path[-1]) is int:
            parent = change.path[:-1]
            entry = lists.get(parent)
            if entry is None:
                old_size, new_size = sizes(parent)
                entry = lists[parent] = {"path": list(parent), "path_text": format_path(parent), "kind": "changed",
                                         "old": None, "new": None, "old_size": old_size, "new_size": new_size,
                                         "text_diff": None, "items": {"added": [], "removed": []}}
                out.append(entry)
            value = change.new if change.kind == "added" else change.old
            shown, _ = _value_json(value, format_path(change.path))
            entry["items"][change.kind].append({"index": change.path[-1], "value": shown})
        else:
            out.append(change_json(change))
    return out


def _preview(value: Any) -> str:
    if is_array(value):
        return array_summary(value)
    if isinstance(value, MapView):
        return f"{{{len(value)} keys}}"
    if isinstance(value, SeqView):
        return f"[{len(value)} items]"
    if isinstance(value, str | bytes):  # only its beginning is turned into JSON
        value = value[:CHILD_PREVIEW_CHARS]
    text = orjson.dumps(to_jsonable(value)).decode()
    return text if len(text) <= CHILD_PREVIEW_CHARS else text[:CHILD_PREVIEW_CHARS - 1] + "…"


def _step(node: Any, step: str | int, path: Path, at: int) -> Any:
    """The child ``step`` of ``node``, the value at ``path[:at]``; ``PathError`` naming
    the path and what is there when there is no such child."""
    here = format_path(path[:at]) if at else "the root"
    if isinstance(node, Mapping):
        if type(step) is not str or step not in node:
            raise PathError(format_path(path), f"no key {step!r} in the map at {here}")
        return node[step]
    if isinstance(node, (SeqView, list, tuple)):
        if type(step) is not int or not 0 <= step < len(node):
            raise PathError(format_path(path), f"no index {step!r} in the list of {len(node)} at {here}")
        return node[step]
    raise PathError(format_path(path), f"{here} holds a value, not a map or a list")


def _at(root: Any, path: Path) -> Any:
    node = root
    for at, step in enumerate(path):
        node = _step(node, step, path, at)
    return node


# -- reading the request ----------------------------------------------------------------------


def _int_param(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    text = request.query_params.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise InvalidArgumentError(name, f"{name}={text!r} is not a whole number") from None
    if not lo <= value <= hi:
        raise InvalidArgumentError(name, f"{name}={value} is out of range: give {lo} to {hi}")
    return value


def _path_param(request: Request) -> Path:
    """``?path=`` as a JSON list of keys (str) and indexes (int); ``[]`` when absent."""
    text = request.query_params.get("path", "[]")
    try:
        steps = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgumentError("path", f"path={text!r} is not JSON ({exc}): give a list such as "
                                           '["messages", 3]') from None
    if not isinstance(steps, list) or any(type(s) is not str and type(s) is not int for s in steps):
        raise InvalidArgumentError("path", f"path={text!r} is not a JSON list of keys (strings) and indexes "
                                           '(integers), such as ["messages", 3]')
    return tuple(steps)


def _required(request: Request, name: str) -> str:
    text = request.query_params.get(name)
    if not text:
        raise InvalidArgumentError(name, f"the query parameter {name!r} is missing")
    return text


def _body_text(body: Mapping[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(name, f"the body's {name!r} must be a non-empty string; it is {value!r}")
    return value


# -- the handlers -----------------------------------------------------------------------------


class Api:
    """The handlers of ``/api/*`` on one open repository. Requests are answered one at a
    time (a lock): the repository is shared, and a local viewer gains nothing from more."""

    def __init__(self, repo: Repository, writable: bool = False) -> None:
        self.repo = repo
        self.writable = writable
        self.lock = threading.Lock()

    # Starlette runs these (plain functions) in its thread pool.

    def answer(self, handler: Callable[[Request], Any], request: Request, body: Any = None) -> Response:
        try:
            with self.lock:
                found = handler(request) if body is None else handler(body)
        except SnapvcError as exc:
            return error_response(exc)
        except Exception as exc:  # a bug: said in the answer (the page shows it) and on stderr
            traceback.print_exc()
            return OrjsonResponse({"error": f"{request.url.path}: unexpected {type(exc).__name__}: {exc}",
                                   "type": type(exc).__name__}, status_code=500)
        return OrjsonResponse(found)

    # -- labels and commits --

    def _labels(self, branches: Mapping[str, ObjectId] | None = None,
                tags: Mapping[str, ObjectId] | None = None) -> dict[ObjectId, list[str]]:
        """The refs pointing at each commit, as ``git log --decorate`` shows them (from
        ``branches`` and ``tags`` when the caller read them already)."""
        branches = self.repo.branches() if branches is None else branches
        tags = self.repo.tags() if tags is None else tags
        labels: dict[ObjectId, list[str]] = {}
        head_ref = self.repo.refs.get_symbolic("HEAD")
        detached = None if head_ref else self.repo.refs.get("HEAD")
        if detached is not None:
            labels.setdefault(detached, []).append("HEAD")
        for name, oid in branches.items():
            if head_ref == HEADS + name:
                labels.setdefault(oid, []).insert(0, f"HEAD -> {name}")
            else:
                labels.setdefault(oid, []).append(name)
        for name, oid in tags.items():
            labels.setdefault(oid, []).append(f"tag: {name}")
        return labels

    @staticmethod
    def _commit(commit: Commit, labels: Mapping[ObjectId, list[str]]) -> dict[str, Any]:
        return {"id": commit.id.hex, "short": commit.id.hex[:12], "parents": [p.hex for p in commit.parents],
                "message": commit.message, "time": commit.time.isoformat(),
                "metadata": shown_metadata(commit, MAX_VALUE_CHARS, show_damage=True),
                "refs": labels.get(commit.id, [])}

    def repo_info(self, request: Request) -> dict[str, Any]:
        repo = self.repo
        head_ref = repo.refs.get_symbolic("HEAD")
        head = repo.refs.get(head_ref) if head_ref else repo.refs.get("HEAD")
        return {"path": str(repo.location),
                "head": {"branch": short_name(head_ref) if head_ref else None, "commit": head.hex if head else None},
                "branches": [{"name": n, "commit": oid.hex} for n, oid in repo.branches().items()],
                "tags": [{"name": n, "commit": oid.hex} for n, oid in repo.tags().items()],
                "writable": self.writable}

    def graph(self, request: Request) -> dict[str, Any]:
        limit = _int_param(request, "limit", GRAPH_LIMIT, 1, GRAPH_MAX)
        branches, tags = self.repo.branches(), self.repo.tags()
        labels = self._labels(branches, tags)
        tips = [*branches.values(), *tags.values()]
        page = graph_page(self.repo, tips, limit, request.query_params.get("cursor") or None)
        return {"rows": [self._commit(row.commit, labels) | row_json(row) for row in page.rows], "cursor": page.cursor}

    def _resolve(self, rev: str) -> Commit:
        return self.repo.get_commit(self.repo.resolve(rev), rev=rev)

    def _sizes(self, a: ObjectId | None, b: ObjectId) -> Callable[[Path], tuple[int, int]]:
        def length(side: ObjectId | None, path: Path) -> int:
            if side is None:
                return 0
            try:
                found = _at(self.repo.snapshot(side), path)
            except PathError:
                return 0
            return len(found) if isinstance(found, (SeqView, list, tuple)) else 0

        return lambda path: (length(a, path), length(b, path))

    def commit(self, request: Request) -> dict[str, Any]:
        commit = self._resolve(request.path_params["rev"])
        parent = commit.parents[0] if commit.parents else None
        changes = self.repo.diff(parent if parent is not None else {}, commit.id)
        return self._commit(commit, self._labels()) | {"changes": _changes_json(changes, self._sizes(parent, commit.id))}

    def diff(self, request: Request) -> dict[str, Any]:
        a, b = self._resolve(_required(request, "a")), self._resolve(_required(request, "b"))
        changes = self.repo.diff(a.id, b.id)
        return {"a": a.id.hex, "b": b.id.hex, "changes": _changes_json(changes, self._sizes(a.id, b.id))}

    def state(self, request: Request) -> dict[str, Any]:
        commit = self._resolve(request.path_params["rev"])
        path = _path_param(request)
        offset = _int_param(request, "offset", 0, 0, 1 << 62)
        limit = _int_param(request, "limit", 200, 1, 1000)
        node = _at(self.repo.snapshot(commit.id), path)
        kind, size = kind_and_size(node)
        if kind == "value":
            shown, _ = _value_json(node, format_path(path))  # a value too long to send whole is cut
            return {"path": list(path), "kind": "value", "size": size, "value": shown}
        keys = child_keys(node, kind, size, offset, limit)
        children = []
        for key in keys:
            child = node[key]
            child_kind, child_size = kind_and_size(child)
            children.append({"key": key, "kind": child_kind, "size": child_size, "preview": _preview(child)})
        return {"path": list(path), "kind": kind, "size": size, "children": children, "offset": offset, "limit": limit}

    def history(self, request: Request) -> dict[str, Any]:
        path = _path_param(request)
        if not path:
            raise InvalidArgumentError("path", "the history of a path needs a path below the root, such as "
                                               '["messages"]')
        rev = request.query_params.get("rev") or "HEAD"
        limit = _int_param(request, "limit", 100, 1, 1000)
        start = self._resolve(rev)
        entries = []
        for entry in self.repo.history(start.id, path, limit=limit):
            value, _ = _value_json(entry.value, format_path(path))
            c = entry.commit
            entries.append({"commit": c.id.hex, "short": c.id.hex[:12], "time": c.time.isoformat(),
                            "message": c.message, "kind": "changed" if entry.kind == "modified" else entry.kind,
                            "value": value})
        return {"path": list(path), "entries": entries}

    def threads(self, request: Request) -> dict[str, Any]:
        wanted: dict[str, Any] = {}
        for item in request.query_params.getlist("where"):
            key, sep, text = item.partition("=")
            if not sep or not key:
                raise InvalidArgumentError("where", f"where={item!r} is not key=value (e.g. where=session_id=s1)")
            try:
                wanted[key] = orjson.loads(text)
            except orjson.JSONDecodeError:
                wanted[key] = text  # plain text, as the command line's --where reads it
        match = metadata_filter(wanted) if wanted else None  # as repo.log(where=) and the CLI's --where
        repo = self.repo
        branches = repo.branches()
        threads = repo.threads()
        names = {t.branch for t in threads}
        out = []
        for thread in threads:
            tip = branches[thread.branch]
            latest = repo.get_commit(tip)
            if match is not None and not match(latest):
                continue
            metadata = shown_metadata(latest, MAX_VALUE_CHARS, show_damage=True)
            # The lines a thread left (a LangGraph fork keeps <branch>/+fork/<id>): its
            # branches that no thread owns (its pending writes are not a line).
            forks = [b for b in branches if b.startswith(thread.branch + "/") and b not in names
                     and not b.endswith("/+writes")]
            out.append({"thread_id": thread.id, "namespace": thread.namespace, "branch": thread.branch,
                        "session": metadata.get("session_id"), "commits": latest.generation,
                        "latest": {"id": tip.hex, "short": tip.hex[:12], "time": latest.time.isoformat(),
                                   "message": latest.message, "metadata": metadata},
                        "forks": forks})
        return {"threads": out}

    def reflog(self, request: Request) -> dict[str, Any]:
        ref = request.query_params.get("ref") or "HEAD"
        limit = _int_param(request, "limit", 50, 1, 10_000)
        full = self._full_ref(ref)
        entries = self.repo.reflog(full, limit)
        return {"ref": full, "entries": [{"old": e.old.hex if e.old else None, "new": e.new.hex if e.new else None,
                                          "time": datetime.fromtimestamp(e.time, UTC).isoformat(), "reason": e.reason}
                                         for e in entries]}

    def _full_ref(self, ref: str) -> str:
        """``ref``'s full name: HEAD's branch for HEAD, a tag of that name if there is one
        and no such branch, else a branch (``RefNotFoundError`` naming it if none exists)."""
        refs = self.repo.refs
        if ref == "HEAD":
            return refs.get_symbolic("HEAD") or "HEAD"
        if ref.startswith("refs/"):
            full = ref
        elif refs.get(branch_ref(ref)) is None and refs.get(tag_ref(ref)) is not None:
            full = tag_ref(ref)
        else:
            full = branch_ref(ref)
        if refs.get(full) is None and not self.repo.reflog(full, 1):
            raise RefNotFoundError(full, f"no ref {ref!r}: neither a branch nor a tag of that name")
        return full

    # -- writes (each lands in the reflog) --

    def tag(self, body: Mapping[str, Any]) -> dict[str, Any]:
        name, rev = _body_text(body, "name"), _body_text(body, "rev")
        commit = self.repo.tag(name, rev)
        return {"ok": True, "ref": tag_ref(name), "commit": commit.id.hex}

    def branch(self, body: Mapping[str, Any]) -> dict[str, Any]:
        name, rev = _body_text(body, "name"), _body_text(body, "rev")
        commit = self.repo.branch(name, rev)
        return {"ok": True, "ref": branch_ref(name), "commit": commit.id.hex}

    def reset(self, body: Mapping[str, Any]) -> dict[str, Any]:
        branch, rev = _body_text(body, "branch"), _body_text(body, "rev")
        commit = self.repo.reset(branch, rev)
        return {"ok": True, "ref": self.repo.branch_ref(branch), "commit": commit.id.hex}

    def undo(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Move a ref back to where its last reflog entry took it from (an undo of an
        undo is a redo, as in git): a branch or tag made by that entry is deleted."""
        full = self._full_ref(_body_text(body, "ref"))
        if not full.startswith((HEADS, TAGS)):
            raise InvalidArgumentError("ref", f"{full!r} is neither a branch nor a tag: only those can be undone here")
        entries = self.repo.reflog(full, 1)
        if not entries:
            raise RefNotFoundError(full, f"{full!r} has no reflog entry to undo")
        last = entries[0]
        current = self.repo.refs.get(full)
        if current != last.new:
            raise RefConflictError(full, last.new, current)
        name = full[len(HEADS):] if full.startswith(HEADS) else full[len(TAGS):]
        if last.old is None:  # the entry made the ref: undoing it deletes the ref
            if full.startswith(HEADS):
                self.repo.delete_branch(name)
            else:
                self.repo.delete_tag(name)
            return {"ok": True, "ref": full, "commit": None}
        reason = f"undo: back to {last.old.hex[:12]} (before {last.reason!r})"
        if not self.repo.swap_ref(full, current, last.old, reason):
            raise RefConflictError(full, current, self.repo.refs.get(full))
        return {"ok": True, "ref": full, "commit": last.old.hex}


def read_json_body(raw: bytes) -> Mapping[str, Any]:
    """A write's body: a JSON object, or ``InvalidArgumentError`` saying what it is."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgumentError("body", f"the request body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidArgumentError("body", f"the request body must be a JSON object, not {type(body).__name__}")
    return body

