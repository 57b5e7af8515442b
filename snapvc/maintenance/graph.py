"""Walking a repository's object graph for gc and fsck: roots, commits, trees.

Both need the same things: the roots (refs, reflog entries, young objects), every
commit reachable from them (all parents, not only the first), and every object their
trees reach, read in batches through the verified store so that a damaged object is
named rather than silently skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol, TypeVar

from snapvc.encoding.nodes import children_of, decode_node
from snapvc.errors import CorruptObjectError, InvalidObjectIdError, ObjectNotFoundError, SnapvcError
from snapvc.ids import ObjectId
from snapvc.objects import BLOB, COMMIT, MAP, SEQ, TEXT, Commit, split_object
from snapvc.repository.roles import Storage
from snapvc.store.codec import VerifiedStore, frame_base

__all__ = ["Progress", "no_progress", "BATCH", "ref_roots", "reflog_roots", "read_children", "read_commit", "read_batch",
           "read_frames", "with_bases", "batches", "Edge"]

T = TypeVar("T")


class Progress(Protocol):
    """``progress(items, total, description)`` yields ``items``, showing how far it got;
    the CLI passes ``snapvc.cli.common.progress`` (a bar on a terminal)."""

    def __call__(self, items: Iterable[T], total: int, description: str) -> Iterator[T]: ...

BATCH = 500

# An edge from a node to a child, labelled with the step it adds to a state path:
# ("key", k) a map entry, ("index", i) a list element at position i of its leaf,
# ("offset", n) a list subtree whose first element is at n, None: the same container.
Edge = tuple[ObjectId, tuple[str, Any] | None]


def no_progress(items: Iterable[T], total: int, description: str) -> Iterator[T]:
    """``items`` unchanged: the default when no one is watching."""
    return iter(items)


def batches(ids: list[ObjectId], size: int = BATCH) -> list[list[ObjectId]]:
    return [ids[i : i + size] for i in range(0, len(ids), size)]


def ref_roots(repo: Any) -> dict[str, ObjectId]:
    """Every direct ref (a detached HEAD included), name -> commit id."""
    return dict(repo.refs.list(""))


def reflog_roots(repo: Any, since: float | None) -> dict[ObjectId, str]:
    """Commit ids named by reflog entries after ``since`` (None: all), each with the
    reflog it is in (``refs/heads/main@{reflog}``)."""
    out: dict[ObjectId, str] = {}
    for name in repo.refs.reflog_names():
        for entry in repo.refs.reflog(name):
            if since is not None and entry.time <= since:
                continue
            for oid in (entry.new, entry.old):
                if oid is not None:
                    out.setdefault(oid, f"{name}@{{reflog}}")
    return out


def read_children(oid: ObjectId, data: bytes) -> list[Edge]:
    """The children of an object from its canonical bytes, with path labels; raises
    ``CorruptObjectError`` naming ``oid`` if it does not decode."""
    kind, _ = split_object(oid, data)
    if kind == BLOB:
        return []
    if kind == COMMIT:
        raise CorruptObjectError(oid, "a commit object where a state node was expected")
    kind, node = decode_node(oid, data, rebuild_types=False)  # a walk needs no user classes
    try:
        ids = children_of(kind, node)
        if node[1]:  # an inner node: children are parts of the same container
            if kind == SEQ:
                offsets, at = [], 0
                for count in node[3]:
                    offsets.append(at)
                    at += count
                return [(ObjectId(c), ("offset", o)) for c, o in zip(ids, offsets, strict=True)]
            return [(ObjectId(c), None) for c in ids]
        if kind == MAP:
            return [(ObjectId(node[2][k]), ("key", k)) for k in node[3]]
        if kind == SEQ:
            return [(ObjectId(node[2][i]), ("index", i)) for i in node[3]]
        if kind == TEXT:
            return [(ObjectId(c), None) for c in ids]
    except InvalidObjectIdError as exc:  # a child reference that is not 32 bytes: this node is damaged
        raise CorruptObjectError(oid, f"bad node layout: {exc}") from None
    except SnapvcError:
        raise
    except Exception as exc:  # a node whose layout is wrong: bad indexes, wrong types
        raise CorruptObjectError(oid, f"bad node layout: {type(exc).__name__}: {exc}") from None
    raise CorruptObjectError(oid, f"unexpected kind {kind}")


def read_commit(repo: Storage, store: VerifiedStore, oid: ObjectId) -> Commit:
    """Commit ``oid`` from the index (or, in older files, the object store), checked
    against its id; ``ObjectNotFoundError`` if it is in neither."""
    commit = repo.commits.get(oid)
    if commit is not None:
        if ObjectId.of(commit.encode()) != oid:
            raise CorruptObjectError(oid, "the commit index holds a damaged copy: its fields do not hash to its id")
        return commit
    data = store.get(oid)  # ObjectNotFoundError when absent
    kind, payload = split_object(oid, data)
    if kind != COMMIT:
        raise CorruptObjectError(oid, f"named as a commit, but it is an object of kind {kind}")
    return Commit.decode(oid, payload)


def read_batch(store: Any, ids: list[ObjectId]) -> tuple[dict[ObjectId, bytes], dict[ObjectId, SnapvcError]]:
    """Canonical bytes of ``ids`` through ``store`` (a verified one): what was read, and the
    error of each id that could not be (missing, corrupt). A batch that fails is read
    again one by one, so each damaged object is named."""
    try:
        found = store.get_many(ids)
        errors: dict[ObjectId, SnapvcError] = {oid: ObjectNotFoundError(oid) for oid in ids if oid not in found}
        return found, errors
    except SnapvcError:
        pass
    found, errors = {}, {}
    for oid in ids:
        try:
            got = store.get_many([oid])
        except SnapvcError as exc:
            errors[oid] = exc
            continue
        if oid in got:
            found[oid] = got[oid]
        else:
            errors[oid] = ObjectNotFoundError(oid)
    return found, errors


def read_frames(raw: Any, ids: list[ObjectId]) -> tuple[dict[ObjectId, int], dict[ObjectId, ObjectId]]:
    """The stored size of each of ``ids`` and the base of each delta frame among them,
    from a backend's raw frames (nothing is decompressed). A frame whose header is
    damaged has no base here: reading it fails anyway, and fsck names it."""
    sizes: dict[ObjectId, int] = {}
    bases: dict[ObjectId, ObjectId] = {}
    for oid, frame in raw.get_many(ids).items():
        sizes[oid] = len(frame)
        try:
            base = frame_base(oid, frame)
        except SnapvcError:
            continue
        if base is not None:
            bases[oid] = base
    return sizes, bases


def with_bases(kept: Iterable[ObjectId], bases: dict[ObjectId, ObjectId]) -> set[ObjectId]:
    """``kept`` and, transitively, the delta bases their frames need."""
    out = set(kept)
    for oid in list(out):
        base = bases.get(oid)
        while base is not None and base not in out:
            out.add(base)
            base = bases.get(base)
    return out
