"""The ``ObjectStore`` protocol: a map from ``ObjectId`` to bytes.

Every layer of the store speaks it. A backend (memory, sqlite) keeps whatever bytes
it is handed; wrappers around a backend change them on the way: ``CompressedStore``
turns an object's canonical bytes into a self-describing frame and back, and
``VerifiedStore`` checks that what comes back hashes to the id that was asked for.
The repository uses ``open_object_store(backend)``, which stacks both.

Invariants every implementation keeps (tested by ``tests/test_store_conformance.py``):
- objects are immutable; putting an id that exists is a no-op that refreshes its
  GC age (``mtime``);
- ``get_many`` leaves out ids it does not have, ``get`` raises ``ObjectNotFoundError``;
- ``ids_with_prefix`` finds every id starting with the given bytes of hex;
- a dictionary, once put, keeps its number and bytes for the life of the store.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from snapvc.ids import ObjectId

__all__ = ["ObjectStore", "StoreSizes"]


@dataclass(frozen=True, slots=True)
class StoreSizes:
    """How much a store holds: object count and bytes as stored (after compression)."""

    objects: int
    stored_bytes: int


@runtime_checkable
class ObjectStore(Protocol):
    def get_many(self, ids: Iterable[ObjectId]) -> dict[ObjectId, bytes]:
        """The bytes of each id that is present; absent ids are left out."""
        ...

    def get(self, oid: ObjectId) -> bytes:
        """The bytes of ``oid``; ``ObjectNotFoundError`` if absent."""
        ...

    def put_many(self, items: Iterable[tuple[ObjectId, bytes]]) -> None:
        """Store each (id, bytes); an id already present only has its age refreshed."""
        ...

    def has_many(self, ids: Iterable[ObjectId]) -> set[ObjectId]:
        """The subset of ``ids`` that is present."""
        ...

    def ids_with_prefix(self, hex_prefix: str, limit: int = 2) -> list[ObjectId]:
        """Up to ``limit`` ids whose hex form starts with ``hex_prefix`` (lowercase)."""
        ...

    def iter_ids(self) -> Iterator[ObjectId]:
        """Every id in the store, in no particular order."""
        ...

    def mtimes(self, ids: Iterable[ObjectId]) -> dict[ObjectId, float]:
        """When each present id was last put (seconds since the epoch), for GC grace periods."""
        ...

    def delete_many(self, ids: Iterable[ObjectId]) -> int:
        """Remove the ids (GC only); returns how many were present."""
        ...

    def sizes(self) -> StoreSizes:
        ...

    def dictionaries(self) -> dict[int, bytes]:
        """Every compression dictionary the store's frames may name, by number."""
        ...

    def put_dictionary(self, data: bytes) -> int:
        """Keep a new compression dictionary (in the current transaction, if any); returns
        the number frames use to name it. Dictionaries are never changed or deleted."""
        ...

    def close(self) -> None:
        ...
