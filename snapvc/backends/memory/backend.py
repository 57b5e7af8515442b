"""The memory backend (``memory://``): everything in this process, for tests and throwaway runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from snapvc.backends.base import Backend
from snapvc.backends.memory.commit_index import MemoryCommitIndex
from snapvc.backends.memory.objects import MemoryObjectStore
from snapvc.backends.memory.refs import MemoryRefStore

__all__ = ["MEMORY_URL", "MemoryBackend", "open_memory_backend"]

MEMORY_URL = "memory://"


class MemoryBackend(Backend):
    """A ``Backend`` in this process: a transaction is one locked section."""

    def __init__(self, objects: MemoryObjectStore, refs: MemoryRefStore, commits: MemoryCommitIndex, *,
                 durability: str = "normal") -> None:
        super().__init__(MEMORY_URL, objects, refs, commits, durability=durability)
        self._lock = threading.RLock()
        self._gc_epoch = 0  # the count of gc sweeps (SQLite keeps it in its file)
        self._settings: dict[str, str] = {}

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            yield

    @contextmanager
    def consistent_read(self) -> Iterator[None]:
        """Under the lock every write takes: no write lands while the reads inside run."""
        with self._lock:
            yield

    def gc_epoch(self) -> int:
        return self._gc_epoch

    def bump_gc_epoch(self) -> None:
        self._gc_epoch += 1

    def get_setting(self, key: str) -> str | None:
        return self._settings.get(key)

    def set_setting(self, key: str, value: str) -> None:
        self._settings = {**self._settings, key: value}



def open_memory_backend(*, durability: str = "normal", clock: Callable[[], float] | None = None) -> MemoryBackend:
    """A new, empty memory repository's backend (``clock``: for reproducible ages)."""
    tick = clock or time.time
    return MemoryBackend(MemoryObjectStore(tick), MemoryRefStore(tick), MemoryCommitIndex(tick), durability=durability)
