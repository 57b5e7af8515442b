"""An in-process object store, for tests and throwaway runs (``snapvc.open("memory://")``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator

from snapvc.errors import ObjectNotFoundError
from snapvc.ids import ObjectId
from snapvc.store.base import StoreCapabilities, StoreSizes, unsupported, with_prefix

__all__ = ["MemoryObjectStore"]


class MemoryObjectStore:
    """A ``RawObjectStore`` in a dict: it keeps dictionaries; every write is seen at once,
    so there is nothing to refresh."""

    capabilities = StoreCapabilities(dictionaries=True, refresh=False)

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._data: dict[ObjectId, bytes] = {}
        self._mtime: dict[ObjectId, float] = {}
        self._clock = clock
        self._lock = threading.Lock()
        self._dictionaries: dict[int, bytes] = {}

    def get_many(self, ids: Iterable[ObjectId]) -> dict[ObjectId, bytes]:
        data = self._data
        return {oid: data[oid] for oid in ids if oid in data}

    def get(self, oid: ObjectId) -> bytes:
        try:
            return self._data[oid]
        except KeyError:
            raise ObjectNotFoundError(oid) from None

    def put_many(self, items: Iterable[tuple[ObjectId, bytes]]) -> None:
        now = self._clock()
        with self._lock:
            for oid, data in items:
                self._data.setdefault(oid, bytes(data))
                self._mtime[oid] = now

    def has_many(self, ids: Iterable[ObjectId]) -> set[ObjectId]:
        return {oid for oid in ids if oid in self._data}

    def ids_with_prefix(self, hex_prefix: str, limit: int = 2) -> list[ObjectId]:
        return with_prefix(self._data, hex_prefix, limit)

    def iter_ids(self) -> Iterator[ObjectId]:
        return iter(list(self._data))

    def mtimes(self, ids: Iterable[ObjectId]) -> dict[ObjectId, float]:
        return {oid: self._mtime[oid] for oid in ids if oid in self._mtime}

    def delete_many(self, ids: Iterable[ObjectId]) -> int:
        removed = 0
        with self._lock:
            for oid in ids:
                if self._data.pop(oid, None) is not None:
                    self._mtime.pop(oid, None)
                    removed += 1
        return removed

    def sizes(self) -> StoreSizes:
        return StoreSizes(objects=len(self._data), stored_bytes=sum(map(len, self._data.values())))

    def dictionaries(self) -> dict[int, bytes]:
        return dict(self._dictionaries)

    def put_dictionary(self, data: bytes) -> int:
        with self._lock:
            number = len(self._dictionaries) + 1
            self._dictionaries[number] = bytes(data)
            return number

    def refresh(self) -> None:
        raise unsupported(self, "refresh")

    def get_unframed_many(self, ids: Iterable[ObjectId]) -> tuple[dict[ObjectId, bytes], dict[ObjectId, bytes]]:
        raise unsupported(self, "get_unframed_many")

    def close(self) -> None:
        pass
