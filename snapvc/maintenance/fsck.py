"""Integrity check: read and verify everything a repository holds, and name what is wrong.

``fsck`` (as ``git fsck`` and ``restic check --read-data``):

1. reads every stored object through a fresh verified stack (no cache answers): its
   frame decodes (delta base and dictionary present), its bytes hash to its id, its
   payload decodes as its kind says, and every object it refers to is present;
2. checks every commit of the commit index: its fields hash to its id, its tree and
   parents are present;
3. checks every ref and every reflog entry names a commit that is present (a stored
   object of another kind is no commit), that every commit's tree is a state node and
   its parents commits, and that no node has a commit for a child;
4. reads every value the file holds that a read could trip on (ids, targets, times,
   ages, settings) and names each row of the wrong type or size;
5. walks from the refs and the reflog to find what reaches each damaged object (the
   refs, the commits and the state paths, e.g. ``main 1a2b3c4d5e6f: state['messages'][3]``),
   and what nothing reaches (dangling: harmless, gc removes it). As for ``git fsck``, a
   missing object is a problem only where something reached names or needs it: named
   only by dangling objects (a commit that outlived its parent, a frame whose delta
   base is gone), it is history gc removed before them, and they are listed as dangling.

``salvage`` writes out every commit that is still whole (its whole state readable) as
exact JSON, with an index of what it saved and what it could not.
"""

from __future__ import annotations

import functools
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from snapvc.maintenance import sync
from snapvc.encoding.jsonable import to_jsonable
from snapvc.errors import CorruptObjectError, DamagedRowsError, ObjectNotFoundError, RefError, RepositoryError, SnapvcError
from snapvc.files import write_atomically
from snapvc.ids import ObjectId
from snapvc.maintenance.stats import plural
from snapvc.maintenance.graph import Edge, Progress, batches, no_progress, read_batch, read_children, read_frames, with_bases
from snapvc.objects import COMMIT, KIND_NAMES, Commit, split_object
from snapvc.refs.base import ReflogEntry
from snapvc.store.codec import open_object_store

if TYPE_CHECKING:
    from snapvc.repository.roles import Versioned

__all__ = ["Problem", "FsckReport", "SalvageResult", "fsck", "salvage", "no_progress"]

_MAX_PATHS = 5  # per problem: enough to find it, not a flood
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong: ``kind`` is ``"missing"`` (referred to, not stored), ``"corrupt"``
    (stored, but does not verify or decode, or names an object of the wrong kind),
    ``"bad-ref"`` (a ref or reflog entry naming no commit, or whose row is damaged) or
    ``"storage"`` (the file itself is damaged: SQLite's integrity check fails, a table
    cannot be read, a row holds a value of the wrong type or size); ``object_id`` what
    it is about (None for storage and damaged rows); ``refs`` the refs (and reflogs)
    from which it is reached; ``paths`` where, as ``ref commit: state path``."""

    kind: str
    object_id: ObjectId | None
    message: str
    refs: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()

    def __str__(self) -> str:
        text = f"{self.kind} {self.object_id}: {self.message}" if self.object_id is not None else \
            f"{self.kind}: {self.message}"
        if self.refs:
            text += f"\n  reached from {', '.join(self.refs)}"
        for path in self.paths:
            text += f"\n  at {path}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "object": self.object_id.hex if self.object_id is not None else None,
                "message": self.message, "refs": list(self.refs),
                "paths": list(self.paths)}


@dataclass(frozen=True, slots=True)
class FsckReport:
    """What ``fsck`` checked and found. ``ok`` when ``problems`` is empty; ``dangling``
    objects and commits (nothing reaches them, and no reached object is a delta on them)
    are not problems: gc removes them once older than its grace period."""

    objects: int
    commits: int
    refs: int
    reflog_entries: int
    problems: tuple[Problem, ...]
    dangling_objects: tuple[ObjectId, ...]
    dangling_commits: tuple[ObjectId, ...]
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        head = (f"checked {plural(self.objects, 'object')}, {plural(self.commits, 'commit')}, "
                f"{plural(self.refs, 'ref')} and {plural(self.reflog_entries, 'reflog entry', 'reflog entries')} "
                f"in {self.seconds:.2f} s: ")
        if self.ok:
            head += "no problems"
        else:
            kinds: dict[str, int] = {}
            for p in self.problems:
                kinds[p.kind] = kinds.get(p.kind, 0) + 1
            head += ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        if self.dangling_objects or self.dangling_commits:
            head += (f"; {plural(len(self.dangling_objects), 'dangling object')} and "
                     f"{plural(len(self.dangling_commits), 'dangling commit')} (gc removes them)")
        return "\n".join([head, *map(str, self.problems)])

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "objects": self.objects, "commits": self.commits, "refs": self.refs,
                "reflog_entries": self.reflog_entries, "problems": [p.to_dict() for p in self.problems],
                "dangling_objects": [o.hex for o in self.dangling_objects],
                "dangling_commits": [c.hex for c in self.dangling_commits], "seconds": round(self.seconds, 3)}


class _Graph:
    """Everything stored, as edges: objects to children (with path labels), commits to
    tree and parents; and what is wrong with each damaged id."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []  # what of the file itself could not be read
        self.edges: dict[ObjectId, list[Edge]] = {}
        self.commits: dict[ObjectId, Commit] = {}
        self.present: set[ObjectId] = set()
        self.indexed: set[ObjectId] = set()  # the commit index's ids
        self.bad: dict[ObjectId, tuple[str, str]] = {}  # id -> (kind, message)
        self.bases: dict[ObjectId, ObjectId] = {}  # delta frame -> its base
        # Stored frames that do not decode because a delta base below them is not stored:
        # missing history, a problem only where something reached needs them (``fsck``).
        self.baseless: set[ObjectId] = set()

    def lacks_base(self, oid: ObjectId) -> bool:
        """Whether a delta base below frame ``oid`` (its base, its base's base...) is not stored."""
        seen = {oid}
        while oid in self.bases:
            oid = self.bases[oid]
            if oid not in self.present:
                return True
            if oid in seen:
                return False
            seen.add(oid)
        return False

    def note_missing(self, child: ObjectId, parent: ObjectId, what: str) -> None:
        if child not in self.present and child not in self.bad:
            self.bad[child] = ("missing", f"{what}, named by {parent}, is not stored")

    def add_commit(self, commit: Commit) -> None:
        """A commit read whole; fields that log, show or salvage could not use (metadata
        that is no JSON object, a time out of range: only a forged commit hashes right
        with them) make it damaged too."""
        self.commits[commit.id] = commit
        try:
            if not isinstance(orjson.loads(commit.metadata_json), dict):
                self.bad[commit.id] = ("corrupt", "its metadata is not a JSON object")
            commit.time  # noqa: B018 - out of range raises
        except (ValueError, TypeError, OverflowError, OSError) as exc:
            self.bad[commit.id] = ("corrupt", f"its fields cannot be read: {type(exc).__name__}: {exc}")

    def note_kind(self, oid: ObjectId, child: ObjectId, what: str, commit: bool) -> None:
        """``oid`` names ``child`` as ``what``, which must be a commit (``commit``) or a
        state node: the other kind makes ``oid`` damaged (checkout would refuse it)."""
        wrong = child in self.edges if commit else child in self.commits
        if wrong and oid not in self.bad:
            found = "a state node" if commit else "a commit"
            self.bad[oid] = ("corrupt", f"{what} {child} is {found}, not {'a commit' if commit else 'a state node'}")


def _read_all(repo: Versioned, progress: Progress, graph: _Graph | None = None) -> _Graph:
    graph = graph if graph is not None else _Graph()
    raw = repo.backend.objects
    store = open_object_store(raw)
    ids: list[ObjectId] = _storage_read(graph, "the list of objects", lambda: list(raw.iter_ids()), [])
    graph.present.update(ids)
    index_ids: list[ObjectId] = _storage_read(graph, "the commit index", repo.commits.ids, [])
    graph.present.update(index_ids)
    graph.indexed.update(index_ids)
    # Ages and the gc epoch: gc and every commit read them, and a damaged one stops them.
    _storage_read(graph, "the ages of commits", repo.commits.mtimes, dict[ObjectId, float]())
    _storage_read(graph, "the gc epoch", repo.backend.gc_epoch, 0)
    _storage_read(graph, "the remotes", lambda: sync.remotes(repo), dict[str, sync.Remote]())
    # A store that compresses itself keeps raw frames: no delta bases to read.
    deltas = not raw.capabilities.compresses
    parts = batches(ids)
    for batch in progress(parts, len(parts), "checking objects"):
        _storage_read(graph, "the ages of objects", functools.partial(raw.mtimes, batch), dict[ObjectId, float]())
        try:
            if deltas:
                graph.bases.update(read_frames(raw, batch)[1])
            found, errors = read_batch(store, batch)
        except (*_STORAGE_ERRORS, SnapvcError):
            # A damaged page under some row of the batch, or a frame or pack that does not
            # decode (a pack's error names one of its objects): one by one, so that each
            # damaged object is named.
            found, errors = _read_one_by_one(raw, store, batch, graph, deltas)
        for oid, exc in errors.items():
            if isinstance(exc, ObjectNotFoundError):
                graph.present.discard(oid)  # listed, then deleted (a gc beside): whoever needs it says so
            else:
                graph.bad[oid] = ("corrupt", str(exc))
        for oid, data in found.items():
            try:
                kind, payload = split_object(oid, data)
                if kind == COMMIT:
                    graph.add_commit(Commit.decode(oid, payload))
                else:
                    graph.edges[oid] = read_children(oid, data)
            except SnapvcError as exc:
                graph.bad[oid] = ("corrupt", str(exc))
    # Only once every listed id is known: a base may sit in a later batch.
    graph.baseless.update(oid for oid, (kind, _) in graph.bad.items() if kind == "corrupt" and graph.lacks_base(oid))
    for oid in progress(index_ids, len(index_ids), "checking commits"):
        try:
            commit = repo.commits.get(oid)
        except CorruptObjectError as exc:  # a row holding values of the wrong type or size
            graph.bad[oid] = ("corrupt", str(exc))
            continue
        except (*_STORAGE_ERRORS, SnapvcError) as exc:
            graph.bad[oid] = ("corrupt", f"its commit index row cannot be read: {exc}")
            continue
        if commit is None:
            continue
        if ObjectId.of(commit.encode()) != oid:
            graph.bad[oid] = ("corrupt", "the commit index holds a damaged copy: its fields do not hash to its id")
            continue
        graph.add_commit(commit)
    for oid, edges in graph.edges.items():
        for child, _ in edges:
            graph.note_missing(child, oid, "a child object")
            graph.note_kind(oid, child, "its child", commit=False)
    for oid, commit in graph.commits.items():
        graph.note_missing(commit.tree, oid, "the state tree of a commit")
        graph.note_kind(oid, commit.tree, "its state tree", commit=False)
        for parent in commit.parents:
            graph.note_missing(parent, oid, "a parent commit")
            graph.note_kind(oid, parent, "its parent", commit=True)
    return graph


# What a damaged file raises: SQLite's own errors, or the store's error for a batch of
# rows that cannot be read (a single row is a CorruptObjectError, handled as any); a
# damaged ref (S3 names the key of its body) is a RefError.
_STORAGE_ERRORS = (sqlite3.Error, RepositoryError, RefError)


def _storage_read(graph: _Graph, what: str, read: Callable[[], T], default: T, kind: str = "storage") -> T:
    """``read()``, with a problem of ``kind`` noted for each damaged row it met (and what
    it could read returned), or for the whole read (and ``default`` returned)."""
    try:
        return read()
    except DamagedRowsError as exc:
        graph.problems += [Problem(kind, None, f"{row}: {message} (a damaged row of {exc.file!r})")
                           for row, message in exc.damaged.items()]
        return exc.readable  # type: ignore[return-value]
    except _STORAGE_ERRORS as exc:
        graph.problems.append(Problem(kind, None, f"{what} cannot be read: {exc}"))
        return default


def _read_one_by_one(raw: Any, store: Any, batch: list[ObjectId], graph: _Graph,
                     deltas: bool) -> tuple[dict[ObjectId, bytes], dict[ObjectId, SnapvcError]]:
    found: dict[ObjectId, bytes] = {}
    errors: dict[ObjectId, SnapvcError] = {}
    for oid in batch:
        try:
            if deltas:
                graph.bases.update(read_frames(raw, [oid])[1])
            got, failed = read_batch(store, [oid])
        except CorruptObjectError as exc:
            errors[oid] = exc
            continue
        except (*_STORAGE_ERRORS, SnapvcError) as exc:
            errors[oid] = CorruptObjectError(oid, f"its row cannot be read: {exc}")
            continue
        found.update(got)
        errors.update(failed)
    return found, errors


def _integrity(repo: Versioned) -> list[str]:
    """The storage's own check below the objects (SQLite's of its file: b-trees, pages, indexes)."""
    return repo.backend.integrity_problems()


def _not_a_commit(repo: Versioned, graph: _Graph, oid: ObjectId) -> str | None:
    """Why ``oid``, which a ref or a reflog entry names, is no commit (None: it is one,
    or it is damaged, which the walk reports)."""
    if oid in graph.commits or oid in graph.bad:
        return None
    if oid not in graph.present:
        return "which is not stored"
    try:  # a state node: read again for its kind, which only this rare case needs
        kind, _ = split_object(oid, open_object_store(repo.backend.objects).get(oid))
        return f"which is a {KIND_NAMES[kind]} object, not a commit"
    except SnapvcError as exc:
        return f"which is not a commit ({exc})"


def _step(path: tuple[Any, ...]) -> str:
    return "state" + "".join(f"[{p!r}]" for p in path)


class _Walk:
    """A walk from one root over the graph in memory: what it reaches, and the first
    path to each damaged id."""

    def __init__(self, graph: _Graph) -> None:
        self.graph = graph
        self.seen: set[ObjectId] = set()
        self.paths: dict[ObjectId, list[str]] = {}

    def _hit(self, oid: ObjectId, where: str) -> None:
        if oid in self.graph.bad:
            found = self.paths.setdefault(oid, [])
            if len(found) < _MAX_PATHS:
                found.append(where)

    def from_commit(self, start: ObjectId, label: str) -> None:
        waiting = [start]
        while waiting:
            oid = waiting.pop()
            if oid in self.seen:
                continue
            self.seen.add(oid)
            self._hit(oid, f"{label}: commit {oid.short}")
            commit = self.graph.commits.get(oid)
            if commit is None:
                continue
            self._tree(commit.tree, f"{label} {oid.short}")
            waiting.extend(commit.parents)

    def _tree(self, root: ObjectId, where: str) -> None:
        waiting: list[tuple[ObjectId, tuple[Any, ...], int]] = [(root, (), 0)]
        while waiting:
            oid, path, offset = waiting.pop()
            self._hit(oid, f"{where}: {_step(path)}")
            if oid in self.seen:
                continue
            self.seen.add(oid)
            for child, label in self.graph.edges.get(oid, ()):
                if label is None:
                    waiting.append((child, path, offset))
                elif label[0] == "key":
                    waiting.append((child, (*path, label[1]), 0))
                elif label[0] == "index":
                    waiting.append((child, (*path, offset + label[1]), 0))
                else:
                    waiting.append((child, path, offset + label[1]))


def _ref_moved(repo: Versioned, name: str, oid: ObjectId, reflog: bool) -> bool:
    """Whether ref ``name`` (its reflog, with ``reflog``), read again, no longer names
    ``oid``: it moved (or the entry expired) while fsck read, which is no damage. (Within
    one snapshot it reads the same, and says no.)"""
    try:
        if reflog:
            return all(oid not in (entry.new, entry.old) for entry in repo.refs.reflog(name))
        return repo.refs.get(name) != oid
    except (*_STORAGE_ERRORS, SnapvcError):
        return False  # a damaged ref: reported as read


def fsck(repo: Versioned, progress: Progress = no_progress) -> FsckReport:
    """Check everything (see the module docstring).

    Everything is read in one consistent read (``Backend.consistent_read``: one read
    transaction of an SQLite file), so writers and a gc beside it are never taken for
    damage. Where there is none (S3), the refs and the reflog are read first, then the
    objects and commits: a writer stores a commit and its objects before it moves a ref
    to it, so whatever a ref read first names is in the listing read after; and a ref
    naming a commit not stored is read again before it is reported (a gc beside may have
    removed what the ref named before it moved)."""
    with repo.backend.consistent_read():
        return _fsck(repo, progress)


def _fsck(repo: Versioned, progress: Progress) -> FsckReport:
    started = time.perf_counter()
    graph = _Graph()
    refs: dict[str, ObjectId] = _storage_read(graph, "the refs", lambda: repo.refs.list(""), {}, "bad-ref")
    _storage_read(graph, "HEAD", lambda: repo.refs.get_symbolic("HEAD"), None, "bad-ref")
    names: list[str] = _storage_read(graph, "the reflog", repo.refs.reflog_names, [], "bad-ref")
    reflogs: dict[str, list[ReflogEntry]] = {
        name: _storage_read(graph, f"the reflog of {name}", functools.partial(repo.refs.reflog, name), [], "bad-ref")
        for name in names}
    _read_all(repo, progress, graph)
    problems: list[Problem] = [Problem("storage", None, text) for text in _integrity(repo)]
    roots: dict[str, list[ObjectId]] = {}
    for name, oid in refs.items():
        roots.setdefault(name, []).append(oid)
        problem = _not_a_commit(repo, graph, oid)
        if problem is not None and not _ref_moved(repo, name, oid, reflog=False):
            problems.append(Problem("bad-ref", oid, f"ref {name} names {oid}, {problem}", (name,)))
    reflog_entries = 0
    for name, entries in reflogs.items():
        for n, entry in enumerate(entries):
            reflog_entries += 1
            for moved in (entry.new, entry.old):
                if moved is None:
                    continue
                oid = moved
                roots.setdefault(f"{name}@{{reflog}}", []).append(oid)
                problem = _not_a_commit(repo, graph, oid)
                if problem is not None and not _ref_moved(repo, name, oid, reflog=True):
                    problems.append(Problem("bad-ref", oid, f"reflog entry {name}@{{{n}}} ({entry.reason!r}) names "
                                            f"{oid}, {problem}", (f"{name}@{{{n}}}",)))
    everything = _Walk(graph)  # one walk from every root: what is reached at all
    for label, starts in roots.items():
        for oid in starts:
            everything.from_commit(oid, label.removeprefix("refs/heads/"))
    reached = everything.seen
    reaching: dict[ObjectId, list[str]] = {}
    paths: dict[ObjectId, list[str]] = {}
    if graph.bad.keys() & reached:
        # Which refs reach each damaged id: a walk per ref (and per reflog), only now.
        for label, starts in roots.items():
            walk = _Walk(graph)
            for oid in starts:
                walk.from_commit(oid, label.removeprefix("refs/heads/"))
            for oid, found in walk.paths.items():
                reaching.setdefault(oid, []).append(label)
                known = paths.setdefault(oid, [])
                known.extend(found[: _MAX_PATHS - len(known)])
    problems += graph.problems
    needed = with_bases(reached, graph.bases)  # old nodes kept as delta bases are not dangling
    for oid, (kind, message) in graph.bad.items():
        # A missing id named only by what nothing reaches is no loss, as for git fsck: gc
        # keeps old nodes as delta bases of newer ones, without the children it deleted,
        # and on S3 a commit whose ref move lost to a reset may outlive its parent, and
        # the bases of its frames, which a sweep removed meanwhile (``snapvc.maintenance.gc``).
        # Such a frame is stored but cannot be read: dangling, unless something reached needs it.
        if (kind == "missing" and oid not in reached) or (oid in graph.baseless and oid not in needed):
            continue
        problems.append(Problem(kind, oid, message, tuple(reaching.get(oid, ())), tuple(paths.get(oid, ()))))
    dangling_objects = tuple(oid for oid in graph.edges if oid not in needed)
    dangling_objects += tuple(oid for oid in graph.baseless if oid not in needed)
    dangling_commits = tuple(oid for oid in graph.commits if oid not in reached)
    return FsckReport(
        # Damaged ids count with the objects or commits they were stored as.
        objects=len(graph.edges) + sum(1 for oid in graph.bad if oid in graph.present and oid not in graph.edges
                                       and oid not in graph.commits and oid not in graph.indexed),
        commits=len(graph.commits) + sum(1 for oid in graph.indexed if oid not in graph.commits),
        refs=len(refs), reflog_entries=reflog_entries, problems=tuple(problems),
        dangling_objects=dangling_objects, dangling_commits=dangling_commits,
        seconds=time.perf_counter() - started,
    )


@dataclass(frozen=True, slots=True)
class SalvageResult:
    """What ``salvage`` wrote to ``folder``: the commits saved whole, and those it could not."""

    folder: Path
    saved: tuple[ObjectId, ...]
    damaged: tuple[ObjectId, ...]

    def __str__(self) -> str:
        return (f"saved {plural(len(self.saved), 'whole commit')} to {self.folder}; "
                f"{len(self.damaged):,} damaged left out")


def salvage(repo: Versioned, folder: str | Path, progress: Progress = no_progress) -> SalvageResult:
    """Write the state of every commit that is still whole to ``folder/<commit id>.json``
    (exact JSON, ``snapvc.to_jsonable``'s form) and ``folder/index.json`` listing every
    commit: id, refs at it, message, metadata, time, and whether it was saved. A commit is
    whole when every object its state reaches is present and sound."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    with repo.backend.consistent_read():  # as fsck's: what it saves is one state of the repository
        return _salvage(repo, out, progress)


def _salvage(repo: Versioned, out: Path, progress: Progress) -> SalvageResult:
    graph = _read_all(repo, progress)
    damaged_below: dict[ObjectId, bool] = {}

    def damaged(root: ObjectId) -> bool:
        # Iterative post-order: states may be deep, Python's stack is not.
        waiting: list[tuple[ObjectId, bool]] = [(root, False)]
        while waiting:
            oid, done = waiting.pop()
            if oid in damaged_below:
                continue
            children = [c for c, _ in graph.edges.get(oid, ())]
            if done:
                damaged_below[oid] = oid in graph.bad or oid not in graph.edges or any(damaged_below[c] for c in children)
                continue
            waiting.append((oid, True))
            waiting.extend((c, False) for c in children if c not in damaged_below)
        return damaged_below[root]

    labels: dict[ObjectId, list[str]] = {}
    refs: dict[str, ObjectId] = _storage_read(graph, "the refs", lambda: repo.refs.list(""), {})
    for name, oid in refs.items():
        labels.setdefault(oid, []).append(name)
    saved: list[ObjectId] = []
    lost: list[ObjectId] = []
    index: list[dict[str, Any]] = []
    commits = sorted(graph.commits.values(), key=lambda c: (c.timestamp_us, c.id))
    for commit in progress(commits, len(commits), "saving commits"):
        whole = commit.id not in graph.bad and not damaged(commit.tree)
        if whole:
            try:
                state = repo.loader.materialize(commit.tree)
                write_atomically(out / f"{commit.id.hex}.json", orjson.dumps(to_jsonable(state)))
            except SnapvcError:
                whole = False
        (saved if whole else lost).append(commit.id)
        try:
            metadata, when = orjson.loads(commit.metadata_json), commit.time.isoformat()
        except (ValueError, TypeError, OverflowError, OSError):  # a damaged commit (fsck names it): listed still
            metadata, when = None, None
        index.append({"id": commit.id.hex, "refs": labels.get(commit.id, []), "message": commit.message,
                      "metadata": metadata, "time": when, "parents": [p.hex for p in commit.parents], "saved": whole})
    write_atomically(out / "index.json", orjson.dumps(index, option=orjson.OPT_INDENT_2))
    return SalvageResult(out, tuple(saved), tuple(lost))
