"""The object-store protocols: maps from ``ObjectId`` to bytes, in two layers.

- ``RawObjectStore`` is what each backend implements (``snapvc.backends``): it keeps
  whatever bytes it is handed, the *frames*, and declares the optional abilities it has
  in ``capabilities`` (a ``StoreCapabilities``), as restic's backends state their
  ``Properties()``: a caller reads them, it never probes for a method.
- ``CanonicalStore`` is what the repository reads and writes through
  (``snapvc.store.codec.open_object_store``): canonical bytes in and out.
  ``CompressedStore`` turns an object's canonical bytes into a self-describing frame
  over a ``RawObjectStore`` and back (deltas against a base, trained dictionaries), and
  ``VerifiedStore`` checks that what comes back hashes to the id that was asked for.

Both share ``ObjectStore``, the map itself.

Invariants every implementation keeps (tested by ``tests/test_store_conformance.py``):
- objects are immutable; putting an id that exists is a no-op that refreshes its
  GC age (``mtime``);
- ``get_many`` leaves out ids it does not have, ``get`` raises ``ObjectNotFoundError``;
- ``ids_with_prefix`` finds every id starting with the given bytes of hex;
- a dictionary, once put, keeps its number and bytes for the life of the store;
- an ability a store does not declare raises ``UnsupportedOperationError`` when called,
  and no caller calls it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from snapvc.errors import UnsupportedOperationError
from snapvc.ids import ObjectId

__all__ = ["ObjectStore", "RawObjectStore", "CanonicalStore", "StoreCapabilities", "StoreSizes", "unsupported",
           "with_prefix"]


@dataclass(frozen=True, slots=True)
class StoreSizes:
    """How much a store holds: object count and bytes as stored (after compression)."""

    objects: int
    stored_bytes: int


@dataclass(frozen=True, slots=True)
class StoreCapabilities:
    """The optional abilities of a ``RawObjectStore``. A store whose ``capabilities`` leave
    one out raises ``UnsupportedOperationError`` from its methods, and callers check here
    before they call them.

    ``dictionaries``: it keeps numbered compression dictionaries (``dictionaries``,
    ``put_dictionary``), so ``CompressedStore`` trains one and writes dictionary frames;
    without, every full frame is plain zstd.
    ``refresh``: it answers from what this client has read so far (S3's pack index), and
    ``refresh`` reads what other clients wrote since; without, every write anywhere is
    seen at once (one SQLite file, one process's memory) and there is nothing to refresh.

    ``compresses``: it compresses what it keeps itself, across objects and commits (the
    packs of a format 3 SQLite file), so ``CompressedStore`` hands it raw frames (codec 0):
    a frame compressed alone, or as a delta, would only hide the bytes its own
    compression would find again. It reads them back without their headers
    (``get_unframed_many``).
    """

    dictionaries: bool = False
    refresh: bool = False
    compresses: bool = False


def unsupported(store: object, ability: str) -> UnsupportedOperationError:
    """The error for a call of ``ability``, which ``store`` does not declare."""
    return UnsupportedOperationError(f"{type(store).__name__} does not declare {ability!r} in its capabilities; "
                                     f"callers check its capabilities first")


@runtime_checkable
class ObjectStore(Protocol):
    """A map from ``ObjectId`` to bytes: what every layer of the store speaks."""

    def get_many(self, ids: Iterable[ObjectId]) -> dict[ObjectId, bytes]:
        """The bytes of each id that is present; absent ids are left out."""
        ...

    def get(self, oid: ObjectId) -> bytes:
        """The bytes of ``oid``; ``ObjectNotFoundError`` if absent."""
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

    def close(self) -> None:
        ...


@runtime_checkable
class RawObjectStore(ObjectStore, Protocol):
    """What a backend implements: frames in, frames out (``snapvc.store.codec`` makes and
    reads them), with its optional abilities declared in ``capabilities``."""

    @property
    def capabilities(self) -> StoreCapabilities:
        """What this store can do beyond the map (``StoreCapabilities``); fixed for its life."""
        ...

    def put_many(self, items: Iterable[tuple[ObjectId, bytes]]) -> None:
        """Store each (id, frame); an id already present only has its age refreshed."""
        ...

    def dictionaries(self) -> dict[int, bytes]:
        """Every compression dictionary the store's frames may name, by number
        (``capabilities.dictionaries``)."""
        ...

    def put_dictionary(self, data: bytes) -> int:
        """Keep a new compression dictionary (in the current transaction, if any); returns
        the number frames use to name it. Dictionaries are never changed or deleted
        (``capabilities.dictionaries``)."""
        ...

    def refresh(self) -> None:
        """Read what other clients stored since this one last looked (``capabilities.refresh``)."""
        ...

    def get_unframed_many(self, ids: Iterable[ObjectId]) -> tuple[dict[ObjectId, bytes], dict[ObjectId, bytes]]:
        """``get_many`` of a store that keeps raw frames (``capabilities.compresses``), the
        frame headers left behind: the canonical bytes of each id whose frame is a whole
        raw frame (``snapvc.store.codec.raw_frame_body``), copied once from where the store
        keeps them, and the frame of every other id present (for ``decode_frame``)."""
        ...


@runtime_checkable
class CanonicalStore(ObjectStore, Protocol):
    """What the repository writes and reads through: an object's canonical bytes (kind
    tag + payload, whose blake3 is its id), however the store below keeps them."""

    def put_many(self, items: Iterable[tuple[ObjectId, bytes]], bases: dict[ObjectId, ObjectId] | None = None) -> None:
        """Store each (id, canonical bytes). ``bases`` (new id -> id of an earlier object,
        usually the previous version of the same node) names what an object may be stored
        as a delta against. A caller whose write is rolled back afterwards (an enclosing
        transaction failed) must call ``forget`` with the same ids."""
        ...

    def forget(self, ids: Iterable[bytes]) -> None:
        """Drop ``ids`` from every cache (their write was rolled back: none may serve as a
        delta base or be read back from memory)."""
        ...

    def forget_all(self) -> None:
        """Drop every cache (a gc may have deleted what they hold; dictionaries may have
        been added by a sync)."""
        ...


def with_prefix(ids: Iterable[ObjectId], hex_prefix: str, limit: int) -> list[ObjectId]:
    """The first ``limit`` of ``ids`` whose hex starts with ``hex_prefix``: the prefix
    lookup of a store that keeps its ids in memory (two found are enough to call a
    prefix ambiguous)."""
    found = []
    for oid in ids:
        if oid.hex.startswith(hex_prefix):
            found.append(oid)
            if len(found) >= limit:
                break
    return found
