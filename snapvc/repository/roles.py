"""The roles a repository plays for the layers above it: what gc, fsck, stats, sync, git
export, ``State`` and threads may use, instead of the whole ``snapvc.Repository``.

    Storage      the stores, the write lock, cache invalidation, commits by id:
                 what gc, fsck and the graph walks of maintenance need
    Versioned    Storage, plus reading and moving history through the repository's
                 rules (refs moved only to stored commits, the reflog written):
                 what sync, git export, stats, ``State`` and threads need

``RepositoryCore`` (and so ``snapvc.Repository``) fills both; a test double, or a
read-only wrapper, need only fill the role its caller takes. A caller that takes a role
cannot reach the layers beside it (``snapvc.maintenance`` from ``snapvc.agent``, or the
other way), which is what keeps the import graph of ``docs/design.md`` acyclic.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from snapvc.backends.base import Backend
from snapvc.encoding.paths import StatePath
from snapvc.encoding.reader import Loader, MapView
from snapvc.ids import ObjectId
from snapvc.objects import Commit
from snapvc.refs.base import RefStore
from snapvc.repository.history import HistoryEntry
from snapvc.store.codec import VerifiedStore
from snapvc.store.commit_index import CommitIndex

if TYPE_CHECKING:  # the diff layer loads when a diff or merge runs, not with the repository
    from snapvc.diff.changes import Change
    from snapvc.diff.merge import MergeResult, Resolve

__all__ = ["Storage", "Versioned"]


class Storage(Protocol):
    """A repository's storage, as maintenance reads and sweeps it."""

    location: str
    backend: Backend
    store: VerifiedStore  # compressed and verified: what the repository reads and writes
    refs: RefStore
    loader: Loader
    clock: Callable[[], float]
    # Every write of the repository object holds it (commits, ref moves, a sweep): hold
    # it around a write made beside the repository's own, in the same transaction.
    write_lock: threading.RLock

    commits: CommitIndex  # every commit's fields, so log and rev walks read no state

    def invalidate_caches(self) -> None:
        """Forget everything cached that could name an object a sweep deleted."""

    def check_stored(self, oid: ObjectId, ref: str | None) -> None:
        """Raise unless commit ``oid`` and its root tree are stored (inside the
        transaction that moves ``ref`` to it)."""

    def get_commit(self, oid: ObjectId, *, rev: str | None = None, walking: bool = False) -> Commit: ...

    def close(self) -> None: ...


class Versioned(Storage, Protocol):
    """A repository's history, as the layers above the repository read and move it."""

    author: str
    durability: str  # "sync", "normal" or "batch": settable, as a runner sets it for its run

    @property
    def head(self) -> str: ...

    def branch_ref(self, branch: str | None) -> str:
        """The full ref name of ``branch``; of HEAD's branch when None."""

    def swap_ref(self, ref: str, expected: ObjectId | None, new: ObjectId | None, reason: str) -> bool:
        """Compare-and-swap ``ref``, once ``new`` is checked to be stored, in one transaction."""

    def resolve(self, rev: str | ObjectId = "HEAD") -> ObjectId: ...

    def load_state(self, commit_id: ObjectId, ref: str) -> dict[str, Any]:
        """The state of ``commit_id`` as a fresh dict, taught to ``ref``'s encode cache."""

    def snapshot(self, rev: str | ObjectId = "HEAD") -> MapView: ...

    def log(self, rev: str | ObjectId | Sequence[str | ObjectId] = "HEAD", limit: int | None = None,
            where: Mapping[str, Any] | Callable[[Commit], bool] | None = None, *,
            since: datetime | float | None = None, until: datetime | float | None = None,
            paths: StatePath | Iterable[StatePath] | None = None) -> Iterator[Commit]: ...

    def history(self, rev: str | ObjectId | Sequence[str | ObjectId], path: StatePath, *,
                limit: int | None = None, oldest_first: bool = False) -> Iterator[HistoryEntry]: ...

    def versions(self, rev: str | ObjectId = "HEAD") -> dict[str, int]: ...

    def diff(self, a: str | ObjectId | Mapping[str, Any], b: str | ObjectId | Mapping[str, Any],
             paths: StatePath | Iterable[StatePath] | None = None) -> list[Change]: ...

    def commit(self, state: Mapping[str, Any], branch: str | None = None, message: str = "",
               metadata: dict[str, Any] | None = None, *, author: str | None = None,
               parents: tuple[str | ObjectId, ...] | None = None, date: datetime | None = None,
               _dirty_paths: Iterable[tuple[Any, ...]] | None = None,
               _objects: Mapping[ObjectId, bytes] | None = None) -> Commit: ...

    def commit_tree(self, state: Mapping[str, Any], parents: Sequence[str | ObjectId] = (), message: str = "",
                    metadata: dict[str, Any] | None = None, *, author: str | None = None,
                    date: datetime | None = None) -> Commit: ...

    def branch(self, name: str, at: str | ObjectId = "HEAD", *, force: bool = False) -> Commit: ...

    def branches(self) -> dict[str, ObjectId]: ...

    def delete_branch(self, name: str) -> ObjectId: ...

    def tag(self, name: str, at: str | ObjectId = "HEAD", *, force: bool = False) -> Commit: ...

    def tags(self) -> dict[str, ObjectId]: ...

    def reset(self, branch: str, to: str | ObjectId) -> Commit: ...

    def merge_base(self, a: str | ObjectId, b: str | ObjectId) -> ObjectId | None: ...

    def merge(self, source: str | ObjectId, into: str | None = None, message: str | None = None,
              resolve: Resolve = None, *, metadata: dict[str, Any] | None = None, author: str | None = None,
              no_ff: bool = False) -> MergeResult: ...

    def deferred(self) -> AbstractContextManager[None]: ...
