"""The commit index of a memory repository: commits and ages in dicts of this process."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from snapvc.ids import ObjectId
from snapvc.objects import Commit
from snapvc.store.commit_index import CommitIndexCapabilities

__all__ = ["MemoryCommitIndex"]


class MemoryCommitIndex:
    """A ``CommitIndex`` in dicts; ages are recorded apart (``touch``)."""

    capabilities = CommitIndexCapabilities(touch=True)

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._commits: dict[ObjectId, Commit] = {}
        self._mtimes: dict[ObjectId, float] = {}
        self._clock = clock
        self._lock = threading.Lock()

    def add(self, commit: Commit) -> None:
        with self._lock:
            self._commits[commit.id] = commit

    def touch(self, ids: Iterable[ObjectId]) -> None:
        now = self._clock()
        with self._lock:
            self._mtimes.update(dict.fromkeys(ids, now))

    def mtimes(self) -> dict[ObjectId, float]:
        with self._lock:
            return dict(self._mtimes)

    def forget_mtimes(self, before: float) -> int:
        with self._lock:
            old = [oid for oid, t in self._mtimes.items() if t < before]
            for oid in old:
                del self._mtimes[oid]
        return len(old)

    def delete_many(self, ids: Iterable[ObjectId]) -> int:
        removed = 0
        with self._lock:
            for oid in ids:
                if self._commits.pop(oid, None) is not None:
                    removed += 1
                self._mtimes.pop(oid, None)
        return removed

    def get(self, oid: ObjectId) -> Commit | None:
        return self._commits.get(oid)

    def get_many(self, ids: Iterable[ObjectId]) -> dict[ObjectId, Commit]:
        commits = self._commits
        return {oid: commit for oid in ids if (commit := commits.get(oid)) is not None}

    def first_parent_chain(self, oid: ObjectId, limit: int) -> list[Commit]:
        out: list[Commit] = []
        commit = self._commits.get(oid)
        while commit is not None and len(out) < limit:
            out.append(commit)
            commit = self._commits.get(commit.parents[0]) if commit.parents else None
        return out

    def count(self) -> int:
        return len(self._commits)

    def ids(self) -> list[ObjectId]:
        return list(self._commits)

    def ids_with_prefix(self, hex_prefix: str, limit: int = 2) -> list[ObjectId]:
        return [oid for oid in self._commits if oid.hex.startswith(hex_prefix)][:limit]
