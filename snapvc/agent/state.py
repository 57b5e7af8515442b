"""The working copy: a branch's latest state as a mutable mapping with dotted paths,
committed by ``snapshot()`` at a cost that follows what changed.

    state = repo.state("main")                      # loads main's latest state
    state.set("research.findings", ["a", "b"])      # missing dicts on the way are created
    state.get("research.findings.0")                # "a": integer steps index lists
    state.append("messages", {"role": "user", "content": "hi"})  # only the new element is dirty
    cp = state.snapshot(message="step 3", token_usage={"input": 120, "output": 40})
    state.restore(cp)                               # the working copy becomes cp's state

Dirty paths
-----------
A ``State`` records which paths may have changed since its last snapshot, so that
``snapshot()`` lets the encoder trust every other container without looking at it (see
``Encoder.encode_root``). Correctness comes first: a snapshot must never miss a change,
also one made in place through an object the caller holds. So a path is dirty when

- ``set``, ``delete`` or ``update`` changed it (until the next snapshot), or
- a value that can change in place (anything but str, bytes, numbers, None, dates,
  UUIDs and decimals) was handed out by ``get``/``state[key]`` or put in by ``set``:
  the caller holds it and may change it at any time, so its path stays *watched*,
  checked at every snapshot, until ``set``/``delete`` replaces it or the working copy is
  reloaded (``restore``, ``reset``).

Removing an element of a list shifts the ones after it, so it makes the whole list
dirty (and watched, if something below was). A snapshot checks the dirty and watched
paths as a plain commit checks a whole state, and the containers above them shallowly;
all else is reused as it is. Values are owned by the working copy: do not put one
mutable object in two ``State``s, nor in a ``State`` and a dict you commit yourself.

Loading (``repo.state``, ``restore``, ``reset``, ``fork``) builds fresh objects and tells
the encoder what each large one is stored as (``snapvc.encoding.seed``): the first
snapshot after it checks the whole state and encodes only what changed.

A ``State`` is not thread-safe; use one per thread or task.
"""

from __future__ import annotations

import copy
import datetime as _dt
import re
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, Final

import orjson

from snapvc.encoding.jsonable import SCALAR_TYPES, from_jsonable, to_jsonable
from snapvc.encoding.paths import StatePath, parse_path
from snapvc.encoding.reader import MapView, SeqView
from snapvc.encoding.writer import MAX_DEPTH, Encoder
from snapvc.errors import MalformedJsonError, PathError, UnknownRevisionError, UnsupportedValueError
from snapvc.ids import ObjectId
from snapvc.objects import Commit
from snapvc.refs.names import HEADS, ref_name_problem, short_name

if TYPE_CHECKING:
    from snapvc.diff.changes import Change
    from snapvc.repository.history import HistoryEntry
    from snapvc.repository.roles import Versioned

__all__ = ["Checkpoint", "State", "checkpoint_at"]


# Values that cannot change in place: handing one out needs no watching.
_SCALARS: Final = SCALAR_TYPES
_INDEX = re.compile(r"-?[0-9]+")
_MISSING: Final = object()


# -- checkpoints ----------------------------------------------------------------------------


@dataclass(frozen=True, eq=False, kw_only=True, slots=True)
class Checkpoint:
    """One snapshot of a working copy: a commit seen as a checkpoint record.

    - ``id``: the commit id (hex); ``parent_id`` its first parent's, or None;
    - ``branch``: the branch (thread) it was taken on;
    - ``version``: the commit's generation, 1 + its parent's: 1, 2, 3 … along a branch's
      history. A fork continues its parent's numbers, and after a ``reset`` to version 2
      the next snapshot is version 3 again;
    - ``values``: the state, a read-only mapping (lazy: a key's lookup reads only its path);
    - ``token_usage``: as given to ``snapshot`` (stored as ``metadata["token_usage"]`` in
      the commit); ``metadata``: the commit's other metadata; ``namespace``:
      ``metadata["namespace"]`` if it is a str, else "";
    - ``created_at``: when the commit was made (UTC); ``message``: its message.

    ``to_dict()`` gives a JSON-safe dict and ``Checkpoint.from_dict`` rebuilds an equal
    record. Two records are equal when every field is, the values by content.
    """

    id: str
    branch: str
    version: int
    values: Mapping[str, Any] = field(repr=False)
    token_usage: Any
    metadata: dict[str, Any]
    created_at: _dt.datetime
    parent_id: str | None
    namespace: str
    message: str

    @classmethod
    def from_commit(cls, repo: Versioned, commit: Commit, branch: str) -> Checkpoint:
        """The checkpoint record of ``commit`` (its values read lazily from ``repo``)."""
        metadata = orjson.loads(commit.metadata_json)
        token_usage = metadata.pop("token_usage", None)
        namespace = metadata.get("namespace", "")
        return cls(
            id=commit.id.hex,
            branch=branch,
            version=commit.generation,
            values=repo.snapshot(commit.id),
            token_usage=token_usage,
            metadata=metadata,
            created_at=commit.time,
            parent_id=commit.parent.hex if commit.parent is not None else None,
            namespace=namespace if isinstance(namespace, str) else "",
            message=commit.message,
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict of the record, values included (read in full). Values JSON
        cannot hold exactly (bytes, tuples, NaN, dates, big ints, typed values…) are
        tagged ``{"$snapvc": kind, ...}``; never pickled."""
        values = self.values.to_dict() if isinstance(self.values, MapView) else dict(self.values)
        return {
            "id": self.id,
            "branch": self.branch,
            "version": self.version,
            "values": to_jsonable(values, "values"),
            "token_usage": self.token_usage,
            "metadata": self.metadata,
            "created_at": self.created_at.isoformat(),
            "parent_id": self.parent_id,
            "namespace": self.namespace,
            "message": self.message,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Checkpoint:
        """The record ``to_dict`` described (e.g. after a JSON round trip);
        ``MalformedJsonError`` names what is missing or of the wrong kind in it."""
        if not isinstance(data, Mapping):
            raise MalformedJsonError("checkpoint record", f"a record is a JSON object, not a {type(data).__name__}")
        missing = [k for k in _RECORD_KEYS if k not in data]
        if missing:
            raise MalformedJsonError("checkpoint record", f"missing {', '.join(map(repr, missing))}")
        values = from_jsonable(data["values"], "values")
        if type(values) is not dict:
            raise MalformedJsonError("checkpoint record", f"'values' is a {type(values).__name__}, not a dict")
        if not isinstance(data["metadata"], Mapping):
            raise MalformedJsonError("checkpoint record",
                                     f"'metadata' is a {type(data['metadata']).__name__}, not a JSON object")
        try:
            created_at = _dt.datetime.fromisoformat(data["created_at"])
        except (TypeError, ValueError) as exc:
            raise MalformedJsonError("checkpoint record", f"'created_at' is not an ISO 8601 time: {exc}") from None
        return cls(
            id=data["id"],
            branch=data["branch"],
            version=data["version"],
            values=MappingProxyType(values),
            token_usage=data["token_usage"],
            metadata=dict(data["metadata"]),
            created_at=created_at,
            parent_id=data["parent_id"],
            namespace=data["namespace"],
            message=data["message"],
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Checkpoint):
            return NotImplemented
        return (
            self.id == other.id
            and self.branch == other.branch
            and self.version == other.version
            and self.token_usage == other.token_usage
            and self.metadata == other.metadata
            and self.created_at == other.created_at
            and self.parent_id == other.parent_id
            and self.namespace == other.namespace
            and self.message == other.message
            and _content_id(self.values) == _content_id(other.values)
        )

    def __hash__(self) -> int:
        return hash((self.id, self.branch))


_RECORD_KEYS = ("id", "branch", "version", "values", "token_usage", "metadata", "created_at", "parent_id",
                "namespace", "message")


def _content_id(values: Mapping[str, Any]) -> ObjectId:
    """The root id of a state: equal exactly when the states are (types, NaN, -0.0 included)."""
    if isinstance(values, MapView):
        return values.id
    return Encoder().encode_root(dict(values))


# -- path sets ------------------------------------------------------------------------------

_ALL: Final = object()  # in a _PathSet: this path and everything below it


class _PathSet:
    """A set of paths where a path covers everything below it (a trie of dicts)."""

    __slots__ = ("root",)

    def __init__(self) -> None:
        self.root: Any = {}

    def add(self, path: tuple[Any, ...]) -> None:
        if not path:
            self.root = _ALL
            return
        node = self.root
        for key in path[:-1]:
            if node is _ALL:
                return
            node = node.setdefault(key, {})
        if node is not _ALL:
            node[path[-1]] = _ALL

    def discard(self, path: tuple[Any, ...]) -> None:
        """Forget ``path`` and what is below it (not a path above it that covers it)."""
        if not path:
            self.root = {}
            return
        node = self.root
        for key in path[:-1]:
            if node is _ALL:
                return
            node = node.get(key)
            if node is None:
                return
        if node is not _ALL:
            node.pop(path[-1], None)

    def touches(self, path: tuple[Any, ...]) -> bool:
        """True if a path of the set is ``path``, above it or below it."""
        node = self.root
        for key in path:
            if node is _ALL:
                return True
            node = node.get(key)
            if node is None:
                return False
        return node is _ALL or bool(node)

    def paths(self) -> list[tuple[Any, ...]]:
        if self.root is _ALL:
            return [()]
        out: list[tuple[Any, ...]] = []
        stack: list[tuple[tuple[Any, ...], Any]] = [((), self.root)]
        while stack:
            prefix, node = stack.pop()
            for key, child in node.items():
                if child is _ALL:
                    out.append((*prefix, key))
                else:
                    stack.append(((*prefix, key), child))
        return out

    def copy(self) -> _PathSet:
        other = _PathSet()
        other.root = self.root if self.root is _ALL else _copy_trie(self.root)
        return other

    def update(self, other: _PathSet) -> None:
        for path in other.paths():
            self.add(path)

    def clear(self) -> None:
        self.root = {}


def _copy_trie(node: dict[Any, Any]) -> dict[Any, Any]:
    return {k: (v if v is _ALL else _copy_trie(v)) for k, v in node.items()}


# -- the working copy -----------------------------------------------------------------------


class _NotThere(Exception):
    """A path that does not exist (a missing key, an index out of range)."""


class State(MutableMapping[str, Any]):
    """A working copy of a branch's state. Get one with ``repo.state(branch)``.

    ``get``/``set``/``delete``/``update`` take dotted paths (``"research.findings.0"``:
    a step into a dict is a key, into a list or tuple an index, negative ones from the
    end) or tuples of steps (``("a.b", 0)``, for keys holding dots). ``state[key]``,
    ``in``, ``len`` and iteration are about top-level keys, taken as they are.

    ``snapshot()`` commits the working copy on the branch and returns a ``Checkpoint``;
    ``restore``, ``reset``, ``fork`` and ``rollback_on_error`` move through history.
    The working copy is based on the branch tip it was loaded from or last committed
    (``base``); if another writer moved the branch since, ``snapshot`` raises
    ``RefConflictError`` rather than replace their commit's state unseen.
    """

    def __init__(self, repo: Versioned, branch: str, *, metadata: Mapping[str, Any] | None = None) -> None:
        self.repo = repo
        self.branch = branch
        self.metadata = dict(metadata or {})  # stamped on every snapshot, under its own
        self._data: dict[str, Any] = {}
        self._base: ObjectId | None = None
        self._dirty = _PathSet()  # changed since the last snapshot
        self._watched = _PathSet()  # held by the caller: checked at every snapshot
        self._scopes: list[_Rollback] = []
        self._checkpoint: Checkpoint | None = None
        tip = repo.refs.get(repo.branch_ref(branch))
        self._load(tip)
        self._base = tip

    # -- reading ----------------------------------------------------------------------------

    @property
    def base(self) -> ObjectId | None:
        """The commit the working copy is based on (the branch tip when it was loaded or
        last snapshotted); None before the branch's first commit."""
        return self._base

    @property
    def checkpoint(self) -> Checkpoint | None:
        """The checkpoint of ``base``: the last snapshot, or what was loaded."""
        if self._base is None:
            return None
        if self._checkpoint is None or self._checkpoint.id != self._base.hex:
            self._checkpoint = Checkpoint.from_commit(self.repo, self.repo.get_commit(self._base), self.branch)
        return self._checkpoint

    def checkpoints(self, limit: int | None = None) -> Iterator[Checkpoint]:
        """The checkpoints of the history behind ``base``, newest first."""
        if self._base is None:
            return
        for commit in self.repo.log(self._base, limit=limit):
            yield Checkpoint.from_commit(self.repo, commit, self.branch)

    def get(self, path: StatePath, default: Any = None) -> Any:
        """The value at ``path``, or ``default`` if a key or index on it is missing.
        Stepping into a value that is not a dict, list or tuple raises ``PathError``.

        The value is the working copy's own object, not a copy: changing a dict or list
        you got changes the state (and the next snapshot sees it)."""
        steps = parse_path(path)
        try:
            parent, key, where = self._locate(steps, path, create=False)
        except _NotThere:
            return default
        value = parent[key]
        self._hand_out(where, value)
        return value

    def __getitem__(self, key: str) -> Any:
        value = self.get((key,), _MISSING)
        if value is _MISSING:
            raise PathError(key, "no such key")
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        base = self._base.short if self._base is not None else "no commit yet"
        return f"<snapvc.State {self.branch!r} at {base}: {len(self._data)} keys>"

    # -- changing ---------------------------------------------------------------------------

    def set(self, path: StatePath, value: Any) -> None:
        """Set the value at ``path``, creating missing dicts on the way. A list index must
        exist (to append, ``state.get("a.list").append(x)``)."""
        steps = parse_path(path)
        if isinstance(value, MapView):
            value = value.to_dict()
        elif isinstance(value, SeqView):
            value = value.to_list()
        if len(steps) > 1:  # changes the top-level value in place
            self._before_change(steps[0])
        parent, key, where = self._locate(steps, path, create=True)
        if type(parent) is tuple:
            raise PathError(path, f"{_show(where[:-1])} is a tuple, which cannot change in place; set the whole tuple")
        parent[key] = value
        self._watched.discard(where)
        self._dirty.add(where)
        if type(value) not in _SCALARS:
            self._watched.add(where)

    def delete(self, path: StatePath) -> None:
        """Remove the key or list element at ``path``; ``PathError`` if there is none."""
        steps = parse_path(path)
        if len(steps) > 1:
            self._before_change(steps[0])
        try:
            parent, key, where = self._locate(steps, path, create=False)
        except _NotThere as exc:
            raise PathError(path, str(exc)) from None
        if type(parent) is tuple:
            raise PathError(path, f"{_show(where[:-1])} is a tuple, which cannot change in place; set the whole tuple")
        del parent[key]
        self._watched.discard(where)
        if type(parent) is list:  # the elements after it moved: the whole list is dirty
            above = where[:-1]
            if self._watched.touches(above):
                self._watched.add(above)
            self._dirty.add(above)
        else:
            self._dirty.add(where)

    def append(self, path: StatePath, value: Any) -> None:
        """Append a copy of ``value`` to the list at ``path`` (created, empty, if missing).

        This is the way to grow a message history: the working copy keeps its own copy
        of the value (changing ``value`` afterwards does not change the state), so only
        the new element is dirty and nothing stays watched, and a snapshot costs the
        new element, not the history. (Appending to a list you got with ``get`` works
        too, but that list is then watched: checked whole at every snapshot.)"""
        self.extend(path, (value,))

    def extend(self, path: StatePath, values: Iterable[Any]) -> None:
        """Append a copy of each of ``values`` to the list at ``path`` (see ``append``)."""
        steps = parse_path(path)
        self._before_change(steps[0])
        try:
            parent, key, where = self._locate(steps, path, create=False)
            target = parent[key]
        except _NotThere:
            parent, key, where = self._locate(steps, path, create=True)
            if type(parent) is tuple:
                raise PathError(path, f"{_show(where[:-1])} is a tuple, which cannot change in place") from None
            target = parent[key] = []
            self._dirty.add(where)
        if type(target) is not list:
            raise PathError(path, f"is a {type(target).__name__}, not a list: only lists can be appended to")
        # All copied before any is appended: a value refused leaves the list as it was.
        copies = [_own_copy(value, (*where, len(target) + i)) for i, value in enumerate(values)]
        for value in copies:
            target.append(value)
            self._dirty.add((*where, len(target) - 1))

    def update(self, other: Mapping[StatePath, Any] | Iterable[tuple[StatePath, Any]] = (), /, **kwargs: Any) -> None:  # type: ignore[override]
        """``set`` each (path, value): ``state.update({"a.b": 1, "c": 2})``."""
        items = other.items() if isinstance(other, Mapping) else other
        for path, value in items:
            self.set(path, value)
        for path, value in kwargs.items():
            self.set(path, value)

    def __setitem__(self, key: str, value: Any) -> None:
        self.set((key,), value)

    def __delitem__(self, key: str) -> None:
        self.delete((key,))

    # -- history ----------------------------------------------------------------------------

    def snapshot(self, message: str | None = None, metadata: dict[str, Any] | None = None,
                 token_usage: Any = None) -> Checkpoint:
        """Commit the working copy on the branch; returns its ``Checkpoint``.

        Only the dirty and watched paths are checked and encoded (see the module notes);
        ``token_usage`` (JSON) is stored as ``metadata["token_usage"]``. Raises
        ``RefConflictError`` if the branch moved since ``base``."""
        meta = {**self.metadata, **metadata} if metadata else dict(self.metadata)
        if token_usage is not None:
            meta["token_usage"] = token_usage
        commit = self.repo.commit(
            self._data,
            branch=self.branch,
            message=message or "",
            metadata=meta,
            parents=(self._base,) if self._base is not None else (),
            _dirty_paths=self._dirty.paths() + self._watched.paths(),
        )
        self._base = commit.id
        self._dirty.clear()
        self._checkpoint = Checkpoint.from_commit(self.repo, commit, self.branch)
        return self._checkpoint

    def restore(self, target: Checkpoint | Commit | ObjectId | str | Mapping[str, Any]) -> None:
        """Make the working copy exactly the state of ``target`` (a checkpoint, commit,
        id or rev, from any branch, or the values of a state): keys it does not hold
        are gone. A checkpoint whose commit this repository does not hold (one read
        back with ``Checkpoint.from_dict``, or from another repository) restores its
        values.

        Like ``git checkout <rev> -- .``, this changes content only: the branch stays
        where it is until the next ``snapshot``, which commits the restored state on top
        of the branch tip (``base``), so nothing in the history is lost. To move the
        branch back instead, use ``reset``."""
        if isinstance(target, Checkpoint):
            try:
                commit_id = self._commit_id(target)
            except UnknownRevisionError:
                target = target.values
            else:
                self._load(commit_id)
                return
        if isinstance(target, Mapping):
            values = _own_copy(target) if isinstance(target, MapView) else _own_copy(dict(target))
            self._load(None)
            self._data = values
            return
        self._load(self._commit_id(target))

    def reset(self, to: Checkpoint | Commit | ObjectId | str) -> Checkpoint:
        """Move the branch to ``to`` (time travel, ``repo.reset``) and load its state;
        uncommitted changes are dropped. Undo with ``state.reset(f"{branch}@{{1}}")``."""
        commit = self.repo.reset(self.branch, self._commit_id(to))
        self._load(commit.id)
        self._base = commit.id
        self._checkpoint = Checkpoint.from_commit(self.repo, commit, self.branch)
        return self._checkpoint

    def fork(self, name: str, at: Checkpoint | Commit | ObjectId | str | None = None) -> State:
        """Create branch ``name`` at ``at`` (default: ``base``, the last snapshot) and
        return a working copy of it. Uncommitted changes stay in this working copy and
        are not carried over: snapshot first to fork with them."""
        start = self._commit_id(at) if at is not None else self._base
        if start is None:
            raise UnknownRevisionError(f"{self.branch}: nothing to fork from yet; snapshot first")
        self.repo.branch(name, at=start)
        return State(self.repo, name)

    def versions(self) -> dict[str, int]:
        """How many snapshots along the branch's history changed each top-level field
        of ``base`` (QitOS's state versions): ``{"scratchpad": 3, "step": 5}``. A field
        counts a snapshot that added it or changed its value (``repo.versions``)."""
        return {} if self._base is None else self.repo.versions(self._base)

    def history(self, path: StatePath, *, limit: int | None = None,
                oldest_first: bool = False) -> list[HistoryEntry]:
        """The snapshots behind ``base`` that changed the value at ``path``, newest first
        (oldest first if asked), each a ``HistoryEntry(commit, kind, value, old)``:
        ``state.restore(state.history("key", oldest_first=True)[0].commit)``."""
        if self._base is None:
            return []
        return list(self.repo.history(self._base, path, limit=limit, oldest_first=oldest_first))

    def diff(self, other: State | Checkpoint | Commit | ObjectId | str | Mapping[str, Any] | None = None,
             paths: StatePath | Iterable[StatePath] | None = None) -> list[Change]:
        """The changes from ``other`` to this working copy, uncommitted ones included,
        as ``git diff <other>``: ``other`` defaults to ``base`` (what the next snapshot
        would record). It may be a checkpoint, commit, id, rev, another ``State`` or a
        state in memory. ``paths`` restricts it, as in ``repo.diff``."""
        if other is None:
            other = self._base if self._base is not None else {}
        if isinstance(other, State):
            other = other._data
        elif isinstance(other, (Checkpoint, Commit)):
            other = self._commit_id(other)
        return self.repo.diff(other, self._data, paths=paths)

    def rollback_on_error(self) -> _Rollback:
        """A context manager (``with`` or ``async with``): if the block raises, the
        working copy returns to what it was when the block began, and the error goes on.

        The branch is not moved back: snapshots taken inside the block stay in history.
        Entering copies the containers of watched values (strings and bytes are shared,
        not copied); other top-level values are copied when the block first changes or
        gets them. Blocks nest; do not interleave blocks of one State across tasks."""
        return _Rollback(self)

    # -- internals --------------------------------------------------------------------------

    def _commit_id(self, target: Checkpoint | Commit | ObjectId | str) -> ObjectId:
        if isinstance(target, Checkpoint):
            return self.repo.get_commit(ObjectId.from_hex(target.id)).id
        if isinstance(target, Commit):
            return target.id
        return self.repo.resolve(target)

    def _load(self, commit_id: ObjectId | None) -> None:
        self._data = (self.repo.load_state(commit_id, self.repo.branch_ref(self.branch))
                      if commit_id is not None else {})
        self._watched.clear()
        self._dirty.clear()
        # Fresh objects: checked whole at the next snapshot, against what the load taught
        # the encoder (their stored encodings), so that costs the checks, not an encoding.
        self._dirty.add(())

    def _locate(self, steps: tuple[str | int, ...], path: StatePath, *, create: bool) -> tuple[Any, Any, tuple[Any, ...]]:
        """(container, key or index, normalized path) of the last step of ``steps``.
        ``create`` makes missing dicts on the way (and checks that the container may
        change); a missing key or index raises ``_NotThere``."""
        node: Any = self._data
        where: list[Any] = []
        last = len(steps) - 1
        for i, step in enumerate(steps):
            t = type(node)
            if t is dict:
                if type(step) is not str:
                    raise PathError(path, f"{_show(where)} is a dict, whose keys are str: {step!r} is not one")
                if i == last:
                    if not create and step not in node:
                        raise _NotThere(f"{_show(where)} has no key {step!r}")
                    return node, step, (*where, step)
                child = node.get(step, _MISSING)
                if child is _MISSING:
                    if not create:
                        raise _NotThere(f"{_show(where)} has no key {step!r}")
                    rest = steps[i + 1 :]
                    for s in rest:
                        if type(s) is not str:
                            raise PathError(path, f"{_show((*where, step))} does not exist, and {s!r} is not a key")
                    top: dict[Any, Any] = {}
                    inner = top
                    for s in rest[:-1]:
                        inner[s] = {}
                        inner = inner[s]
                    node[step] = top
                    return inner, rest[-1], (*where, step, *rest)
                node = child
                where.append(step)
            elif t is list or t is tuple:
                index = _index(step)
                if index is None:
                    raise PathError(path, f"{_show(where)} is a {t.__name__}: {step!r} is not an index")
                n = len(node)
                if index < 0:
                    index += n
                if not 0 <= index < n:
                    message = f"index {step} is out of range for {_show(where)}, a {t.__name__} of {n}"
                    if create:
                        raise PathError(path, message)
                    raise _NotThere(message)
                if i == last:
                    return node, index, (*where, index)
                node = node[index]
                where.append(index)
            else:
                raise PathError(path, f"{_show(where)} is a {t.__name__}, not a dict, list or tuple")
        raise AssertionError("unreachable: a path has at least one step")

    def _hand_out(self, where: tuple[Any, ...], value: Any) -> None:
        """The caller gets ``value`` itself: if it can change in place, watch its path."""
        if type(value) not in _SCALARS:
            self._before_change(where[0])
            self._watched.add(where)

    def _before_change(self, key: Any) -> None:
        """Open rollback blocks copy the top-level value ``key`` before it can change in
        place (a top-level ``set`` or ``delete`` replaces a value without changing it)."""
        for scope in self._scopes:
            scope.keep(key)


def _own_copy(value: Any, where: tuple[Any, ...] = ()) -> Any:
    """A copy of ``value`` that shares no mutable object with it (immutable values are
    shared as they are): plain containers are copied here, anything else by ``deepcopy``.
    ``where`` is its path in the state: a container deeper than a state may nest is
    refused there, as a snapshot would refuse it, before the copy meets Python's
    recursion limit."""
    t = type(value)
    if t in _SCALARS:
        return value
    if (t is dict or t is list or t is tuple) and len(where) >= MAX_DEPTH:
        raise _too_deep(where)
    if t is dict:
        return {k: v if type(v) in _SCALARS else _own_copy(v, (*where, k)) for k, v in value.items()}
    if t is list:
        return [v if type(v) in _SCALARS else _own_copy(v, (*where, i)) for i, v in enumerate(value)]
    if t is tuple:
        return tuple([v if type(v) in _SCALARS else _own_copy(v, (*where, i)) for i, v in enumerate(value)])
    if isinstance(value, MapView):
        return value.to_dict()
    if isinstance(value, SeqView):
        return value.to_list()
    return copy.deepcopy(value)


def _too_deep(where: tuple[Any, ...]) -> UnsupportedValueError:
    """The error of a snapshot's encoder for a container at ``where``, too deep to store."""
    return UnsupportedValueError("state" + "".join(f"[{step!r}]" for step in where),
                                 f"nested deeper than {MAX_DEPTH} containers, the most a state may hold")


def _index(step: str | int) -> int | None:
    if type(step) is int:
        return step
    if type(step) is str and _INDEX.fullmatch(step):
        return int(step)
    return None


def _show(where: Iterable[Any]) -> str:
    where = tuple(where)
    return repr(".".join(map(str, where))) if where else "the state"


# -- rollback -------------------------------------------------------------------------------


class _Rollback:
    """What ``State.rollback_on_error`` returns: a ``with``/``async with`` block that puts
    the working copy back as it was at entry if the block raises."""

    def __init__(self, state: State) -> None:
        self._state = state

    def __enter__(self) -> State:
        s = self._state
        self._root = s._data
        self._top = dict(s._data)
        self._copies: dict[str, Any] = {}
        self._memo: dict[int, Any] = {}
        self._dirty = s._dirty.copy()
        self._watched = s._watched.copy()
        if s._watched.root is _ALL:
            held: Iterable[str] = list(self._top)
        else:
            held = [k for k in s._watched.root if k in self._top]
        for key in held:
            self.keep(key)
        s._scopes.append(self)
        return s

    def keep(self, key: str) -> None:
        """Copy the value ``key`` had at entry, before it may change in place. (It has not
        changed yet: whatever could change it would have called this first.)"""
        if key in self._copies or key not in self._top:
            return
        value = self._top[key]
        if type(value) not in _SCALARS:
            self._copies[key] = _copy_value(value, self._memo, (key,))

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        s = self._state
        if self in s._scopes:
            s._scopes.remove(self)
        if exc_type is None:
            return
        now = s._data
        restored = {k: self._copies.get(k, v) for k, v in self._top.items()}
        dirty = self._dirty
        dirty.update(s._dirty)
        for key in {*now, *restored}:
            if key in self._copies or now.get(key, _MISSING) is not restored.get(key, _MISSING):
                dirty.add((key,))
        self._root.clear()
        self._root.update(restored)
        s._data = self._root
        s._dirty = dirty
        # The copies hold one object at two paths where the values at entry did, and
        # such paths are watched: keep watching what was watched at entry.
        s._watched = self._watched

    async def __aenter__(self) -> State:
        return self.__enter__()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.__exit__(exc_type, exc, tb)


def _copy_value(value: Any, memo: dict[int, Any], where: tuple[Any, ...]) -> Any:
    """A copy of a value's containers; str, bytes and other immutable scalars are shared.
    ``memo`` keeps objects held twice held twice in the copy. ``where`` is the value's
    path: one nested deeper than a state may be is refused, as ``_own_copy`` does."""
    t = type(value)
    if t in _SCALARS:
        return value
    done = memo.get(id(value))
    if done is not None:
        return done[1]
    if (t is dict or t is list or t is tuple) and len(where) >= MAX_DEPTH:
        raise _too_deep(where)
    if t is dict:
        out: Any = {}
        memo[id(value)] = (value, out)
        for k, v in value.items():
            out[k] = _copy_value(v, memo, (*where, k))
        return out
    if t is list:
        out = []
        memo[id(value)] = (value, out)
        out.extend(_copy_value(v, memo, (*where, i)) for i, v in enumerate(value))
        return out
    if t is tuple:
        out = tuple(_copy_value(v, memo, (*where, i)) for i, v in enumerate(value))
        memo[id(value)] = (value, out)
        return out
    out = copy.deepcopy(value)  # a typed value (dataclass, model, registered type)
    memo[id(value)] = (value, out)
    return out


def checkpoint_at(repo: Versioned, rev: str | ObjectId = "HEAD") -> Checkpoint:
    """The checkpoint record of the commit at ``rev`` (an id, a prefix, any rev): its
    ``branch`` is the branch ``rev`` names, else the first branch (by name) whose
    first-parent history holds the commit, else ""."""
    oid = repo.resolve(rev)
    commit = repo.get_commit(oid)
    branch = None
    if isinstance(rev, str):
        ref = repo.refs.get_symbolic("HEAD") if rev == "HEAD" else rev if rev.startswith(HEADS) else HEADS + rev
        if ref is not None and ref_name_problem(ref) is None and repo.refs.get(ref) == oid:
            branch = short_name(ref)
    if branch is None:
        branch = next((b for b, tip in sorted(repo.branches().items()) if _on_first_parents(repo, tip, commit)), "")
    return Checkpoint.from_commit(repo, commit, branch)


def _on_first_parents(repo: Versioned, tip: ObjectId, commit: Commit) -> bool:
    """Whether ``commit`` is on the first-parent history of ``tip``."""
    oid: ObjectId | None = tip
    while oid is not None:
        if oid == commit.id:
            return True
        c = repo.get_commit(oid, walking=True)
        if c.generation <= commit.generation:
            return False
        oid = c.parent
    return False
