"""The commit index of a repository on S3: the commits held whole in the packs' headers
(``snapvc.backends.s3.packs``), so ``log`` and ``main~400`` never fetch a frame."""

from __future__ import annotations

import math
from collections.abc import Iterable

from snapvc.backends.s3.packs import Packs
from snapvc.ids import ObjectId
from snapvc.objects import Commit
from snapvc.store.base import unsupported
from snapvc.store.commit_index import CommitIndexCapabilities

__all__ = ["S3CommitIndex"]


class S3CommitIndex:
    """The ``CommitIndex`` of a repository on S3: the commits held in the packs' headers.
    Every commit's age is in the header of the pack that holds it, written by ``add``:
    there is nothing to ``touch``."""

    capabilities = CommitIndexCapabilities(touch=False)

    def __init__(self, packs: Packs) -> None:
        self.packs = packs
        self._forgotten_before = float("-inf")

    def add(self, commit: Commit) -> None:
        self.packs.add_commit(commit)

    def get(self, oid: ObjectId) -> Commit | None:
        self.packs.ensure_loaded()
        found = self.packs.commits.get(oid)
        if found is None:
            self.packs.refresh()
            found = self.packs.commits.get(oid)
        return found

    def get_many(self, ids: Iterable[ObjectId]) -> dict[ObjectId, Commit]:
        self.packs.ensure_loaded()
        wanted = list(ids)
        found = {oid: commit for oid in wanted if (commit := self.packs.commits.get(oid)) is not None}
        if len(found) < len(set(wanted)):
            # Some may be in packs another client wrote since: look once more, as ``get`` does.
            self.packs.refresh()
            commits = self.packs.commits
            found.update((oid, commit) for oid in wanted if oid not in found and (commit := commits.get(oid)) is not None)
        return found

    def first_parent_chain(self, oid: ObjectId, limit: int) -> list[Commit]:
        out: list[Commit] = []
        commit = self.get(oid)
        commits = self.packs.commits
        while commit is not None and len(out) < limit:
            out.append(commit)
            commit = commits.get(commit.parents[0]) if commit.parents else None
        return out

    def count(self) -> int:
        self.packs.refresh()
        return len(self.packs.commits)

    def ids(self) -> list[ObjectId]:
        self.packs.refresh()
        return list(self.packs.commits)

    def ids_with_prefix(self, hex_prefix: str, limit: int = 2) -> list[ObjectId]:
        self.packs.refresh()
        return [oid for oid in list(self.packs.commits) if oid.hex.startswith(hex_prefix)][:limit]

    def touch(self, ids: Iterable[ObjectId]) -> None:
        raise unsupported(self, "touch")

    def mtimes(self) -> dict[ObjectId, float]:
        self.packs.ensure_loaded()
        return {oid: t for oid, t in self.packs.commit_ages.items() if t >= self._forgotten_before}

    def forget_mtimes(self, before: float) -> int:
        """Ages live in the packs' headers and are not rewritten for this: ages older than
        ``before`` are left out of ``mtimes`` from now on (they protect nothing)."""
        self.packs.ensure_loaded()
        old = sum(1 for t in self.packs.commit_ages.values() if self._forgotten_before <= t < before)
        self._forgotten_before = max(self._forgotten_before, before)
        return old

    def delete_many(self, ids: Iterable[ObjectId], older_than: float = math.inf) -> int:
        """Remove the commits' entries older than ``older_than`` (``Packs.delete``)."""
        return self.packs.delete(ids, objects=False, older_than=older_than)
