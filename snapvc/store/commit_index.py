"""The ``CommitIndex`` protocol: where commits are kept, every commit's fields at hand, so
that ``log``, ``where=`` filters and rev walks (``main~400``) never decode objects or read state.

A commit is an object like any other (its id is the hash of its canonical bytes, which
``Commit.encode`` rebuilds exactly from the fields), but it is kept here rather than in
the object store: storing it in both would cost a second copy and a second id index
entry per commit (on the agent run, 6% of the file). Repositories written before keep
their commit objects in the object store too; a commit found only there (or copied in
by a sync) is indexed when first read.

A commit written without moving a ref (``Repository.commit_tree``: an import building
history first; a sync before it moves the ref) also gets an age, as objects have: gc's
grace period protects it by this age, not by the commit's own timestamp, which may be
any date. An index either records ages apart, when asked (``touch``, declared by
``CommitIndexCapabilities.touch``: memory, SQLite), or records every commit's age when
it is added (S3, in the pack header): then there is nothing to touch. A commit made on a
ref needs none: the ref and its reflog reach it from the moment it is written (one
transaction). Ages older than any grace period are dropped by gc (``forget_mtimes``): a
commit without one counts as old.

Each backend has one (``snapvc.backends.{memory,sqlite,s3}.commit_index``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from snapvc.ids import ObjectId
from snapvc.objects import Commit

__all__ = ["CommitIndex", "CommitIndexCapabilities"]


@dataclass(frozen=True, slots=True)
class CommitIndexCapabilities:
    """The optional abilities of a ``CommitIndex``; one left out raises
    ``UnsupportedOperationError``, and callers check here first.

    ``touch``: ``touch`` records an age for commits no ref reaches yet, apart from
    ``add``; without, ``add`` records every commit's age itself and a caller has
    nothing more to do."""

    touch: bool = False


@runtime_checkable
class CommitIndex(Protocol):
    @property
    def capabilities(self) -> CommitIndexCapabilities:
        """What this index can do beyond the protocol's core; fixed for its life."""
        ...

    def add(self, commit: Commit) -> None: ...

    def get(self, oid: ObjectId) -> Commit | None: ...

    def get_many(self, ids: Iterable[ObjectId]) -> dict[ObjectId, Commit]:
        """The commits of ``ids`` the index holds, by id (an id it lacks is left out): a
        listing of many branches reads their tips together, not one query each."""
        ...

    def first_parent_chain(self, oid: ObjectId, limit: int) -> list[Commit]:
        """``oid``'s commit and up to ``limit - 1`` of its first-parent ancestors, newest
        first, as far as the index has them (for reading history in one batch)."""
        ...

    def count(self) -> int: ...

    def ids(self) -> list[ObjectId]: ...

    def ids_with_prefix(self, hex_prefix: str, limit: int = 2) -> list[ObjectId]:
        """Up to ``limit`` commit ids whose hex form starts with ``hex_prefix`` (lowercase)."""
        ...

    def touch(self, ids: Iterable[ObjectId]) -> None:
        """Record now as the age of these commits (written, but no ref reaches them yet);
        ``capabilities.touch``."""
        ...

    def mtimes(self) -> dict[ObjectId, float]:
        """When each commit that has an age was last touched (seconds since the epoch)."""
        ...

    def forget_mtimes(self, before: float) -> int:
        """Drop the ages older than ``before`` (gc: they no longer protect anything)."""
        ...

    def delete_many(self, ids: Iterable[ObjectId]) -> int:
        """Remove commits (gc only); returns how many were present."""
        ...
