"""The object store of a repository on S3: frames in packs (``snapvc.backends.s3.packs``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

from snapvc.backends.s3.client import PreconditionFailed
from snapvc.backends.s3.packs import Packs
from snapvc.errors import ObjectNotFoundError
from snapvc.ids import ObjectId
from snapvc.store.base import StoreCapabilities, StoreSizes, unsupported, with_prefix

__all__ = ["S3ObjectStore"]


class S3ObjectStore:
    """The ``ObjectStore`` of a repository on S3 (frames in packs; see the module docstring).

    ``has_many`` answers from the index this client has read; a stale answer ("absent")
    only makes a writer store an object again. What a write may skip as stored is
    narrower (``reusable_many``: bytes stored recently), so that a gc running meanwhile
    cannot remove what the write relies on. Reads of ids it does not know list the packs
    again first.

    It keeps dictionaries (``dictionaries/<n>``) and, knowing only the packs it has read,
    can be told to read what other clients wrote since (``refresh``)."""

    capabilities = StoreCapabilities(dictionaries=True, refresh=True)

    def __init__(self, packs: Packs) -> None:
        self.packs = packs
        self.client = packs.client
        self._dictionaries: dict[int, bytes] = {}

    def refresh(self) -> None:
        """Read the packs other writers added since this client last looked."""
        self.packs.refresh()

    def get_unframed_many(self, ids: Iterable[ObjectId]) -> tuple[dict[ObjectId, bytes], dict[ObjectId, bytes]]:
        raise unsupported(self, "get_unframed_many")

    def get_many(self, ids: Iterable[ObjectId]) -> dict[ObjectId, bytes]:
        return self.packs.get_frames(ids)

    def get(self, oid: ObjectId) -> bytes:
        found = self.packs.get_frames([oid])
        try:
            return found[oid]
        except KeyError:
            raise ObjectNotFoundError(oid, self.client.where("packs/")) from None

    def put_many(self, items: Iterable[tuple[ObjectId, bytes]]) -> None:
        self.packs.put_objects(items)

    def has_many(self, ids: Iterable[ObjectId]) -> set[ObjectId]:
        self.packs.ensure_loaded()
        known = self.packs.objects
        return {oid for oid in ids if oid in known}

    def reusable_many(self, ids: Iterable[ObjectId]) -> set[ObjectId]:
        """The subset of ``ids`` a write may skip as stored: those whose bytes a pack holds
        from less than ``GcTiming.reuse_window`` ago (``Packs.reusable``). The others it
        puts again, and their bytes go up again (module docstring, "gc beside writers")."""
        self.packs.ensure_loaded()
        now = float(self.packs.clock())
        with self.packs.lock:
            return {oid for oid in ids if self.packs.reusable(oid, now)}

    def ids_with_prefix(self, hex_prefix: str, limit: int = 2) -> list[ObjectId]:
        self.packs.refresh()
        return with_prefix(list(self.packs.objects), hex_prefix, limit)

    def iter_ids(self) -> Iterator[ObjectId]:
        self.packs.refresh()
        return iter(list(self.packs.objects))

    def mtimes(self, ids: Iterable[ObjectId]) -> dict[ObjectId, float]:
        self.packs.ensure_loaded()
        objects, ages = self.packs.objects, self.packs.ages
        return {oid: ages[oid] for oid in ids if oid in objects and oid in ages}

    def delete_many(self, ids: Iterable[ObjectId], older_than: float = math.inf) -> int:
        """Remove the ids' entries older than ``older_than`` (``Packs.delete``)."""
        return self.packs.delete(ids, objects=True, older_than=older_than)

    def sizes(self) -> StoreSizes:
        self.packs.refresh()
        return StoreSizes(objects=len(self.packs.objects), stored_bytes=self.packs.stored_bytes())

    def dictionaries(self) -> dict[int, bytes]:
        """Every dictionary: one listing, and a read of each not read before (a dictionary
        never changes, so those are kept)."""
        numbers = {int(name): key for key, _ in self.client.list("dictionaries/")
                   if (name := key.rsplit("/", 1)[-1]).isdigit()}
        unread = [key for number, key in numbers.items() if number not in self._dictionaries]
        for key, found in zip(unread, self.client.pool.map(self.client.get, unread), strict=True):
            if found is not None:
                self._dictionaries[int(key.rsplit("/", 1)[-1])] = found[0]
        return {number: self._dictionaries[number] for number in numbers if number in self._dictionaries}

    def put_dictionary(self, data: bytes) -> int:
        """The next free number, taken with If-None-Match: two writers never share one."""
        taken = [int(k.rsplit("/", 1)[-1]) for k, _ in self.client.list("dictionaries/") if k.rsplit("/", 1)[-1].isdigit()]
        number = max(taken, default=0) + 1
        while True:
            try:
                self.client.put(f"dictionaries/{number}", data, create=True)
                self._dictionaries[number] = bytes(data)
                return number
            except PreconditionFailed:
                number += 1

    def close(self) -> None:
        pass
