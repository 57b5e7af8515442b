"""A store that fails on purpose: for testing what a repository does when storage breaks.

``FaultyStore`` wraps a backend (the frames layer, below compression and verification,
where a real disk's faults land) and, when told to, fails the n-th write, fails every
write once the disk is "full", tears a write (stores part of a batch, then fails), or
damages what reads return: a flipped bit, a truncated frame, an object gone. It lives
in the library, not only in the tests, so that code built on snapvc can check its own
handling of storage faults the same way (as kopia's ``blobtesting/faulty.go`` does)::

    backend = snapvc.backends.open.open_backend("test.snapvc")
    faulty = FaultyStore(backend.objects)
    backend.objects = faulty
    repo = snapvc.Repository(backend)
    faulty.fail_write(1)          # the next write fails
    faulty.flip_bits(oid)         # reads of oid return it with one bit flipped

Every fault it injects is counted in ``injected``. What snapvc promises under them:
a write fault makes the operation raise (the error is the ``OSError`` the fault
raised) and leaves the repository as it was; a damaged read raises
``CorruptObjectError`` or ``ObjectNotFoundError`` naming the object, never returns wrong
data and never raises anything else.
"""

from __future__ import annotations

import errno
import random
import threading
from collections.abc import Iterable, Iterator

from snapvc.errors import ObjectNotFoundError
from snapvc.ids import ObjectId
from snapvc.store.base import RawObjectStore, StoreCapabilities, StoreSizes

__all__ = ["FaultyStore"]


class FaultyStore:
    """A ``RawObjectStore`` over ``inner`` that injects the faults asked for (see the
    module docstring); it has the abilities ``inner`` declares."""

    def __init__(self, inner: RawObjectStore, seed: int = 0) -> None:
        self.inner = inner
        self.injected = 0  # faults injected so far
        self.writes = 0  # writes so far (put_many and delete_many calls)
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._fail_at: int | None = None
        self._fail_error: BaseException | None = None
        self._torn = False
        self._room: int | None = None  # bytes left before the disk is full
        self._flip: set[bytes] | None = None  # ids whose reads get a bit flipped (empty: every id)
        self._truncate: set[bytes] | None = None
        self._hidden: set[bytes] = set()
        self._read_rate = 0.0

    # -- arming faults --------------------------------------------------------------------

    def fail_write(self, n: int = 1, error: BaseException | None = None, *, torn: bool = False) -> None:
        """Make the ``n``-th write from now (1: the next) raise ``error`` (default: an
        ``OSError`` EIO). ``torn``: it stores the first half of its batch first."""
        with self._lock:
            self._fail_at = self.writes + n
            self._fail_error = error
            self._torn = torn

    def disk_full(self, after_bytes: int = 0) -> None:
        """Writes raise ``OSError(ENOSPC)`` once ``after_bytes`` more bytes would be stored."""
        with self._lock:
            self._room = after_bytes

    def flip_bits(self, *ids: bytes, rate: float = 1.0) -> None:
        """Reads of ``ids`` (none given: of every object) return the frame with one random
        bit flipped, each read with probability ``rate``."""
        with self._lock:
            self._flip = set(ids)
            self._read_rate = rate

    def truncate_reads(self, *ids: bytes, rate: float = 1.0) -> None:
        """Reads of ``ids`` (none given: of every object) return a random prefix of the frame."""
        with self._lock:
            self._truncate = set(ids)
            self._read_rate = rate

    def hide(self, *ids: bytes) -> None:
        """Reads act as if ``ids`` were not stored (a lost block)."""
        with self._lock:
            self._hidden.update(ids)

    def heal(self) -> None:
        """Stop every fault; what was stored stays as it is."""
        with self._lock:
            self._fail_at = self._room = self._flip = self._truncate = None
            self._hidden = set()
            self._read_rate = 0.0

    # -- faults on the way ----------------------------------------------------------------

    def _damage(self, oid: bytes, frame: bytes) -> bytes:
        if self._flip is not None and (not self._flip or oid in self._flip) and frame \
                and self._random.random() < self._read_rate:
            bit = self._random.randrange(len(frame) * 8)
            self.injected += 1
            frame = frame[: bit // 8] + bytes((frame[bit // 8] ^ (1 << bit % 8),)) + frame[bit // 8 + 1 :]
        if self._truncate is not None and (not self._truncate or oid in self._truncate) and frame \
                and self._random.random() < self._read_rate:
            self.injected += 1
            frame = frame[: self._random.randrange(len(frame))]
        return frame

    def put_many(self, items: Iterable[tuple[ObjectId, bytes]]) -> None:
        items = list(items)
        with self._lock:
            self.writes += 1
            if self._fail_at is not None and self.writes == self._fail_at:
                self._fail_at = None
                self.injected += 1
                error = self._fail_error or OSError(errno.EIO, f"injected write fault (write {self.writes})")
                if self._torn:
                    self.inner.put_many(items[: len(items) // 2])
                raise error
            if self._room is not None:
                size = sum(len(data) for _, data in items)
                if size > self._room:
                    self.injected += 1
                    raise OSError(errno.ENOSPC, f"No space left on device (injected: {size} bytes, "
                                                f"{self._room} left)")
                self._room -= size
        self.inner.put_many(items)

    def get_many(self, ids: Iterable[ObjectId]) -> dict[ObjectId, bytes]:
        ids = list(ids)
        if self._hidden:
            with self._lock:
                kept = [oid for oid in ids if oid not in self._hidden]
                self.injected += len(ids) - len(kept)
            ids = kept
        found = self.inner.get_many(ids)
        if self._flip is None and self._truncate is None:
            return found
        with self._lock:
            return {oid: self._damage(oid, frame) for oid, frame in found.items()}

    def get(self, oid: ObjectId) -> bytes:
        found = self.get_many([oid])
        if oid not in found:
            raise ObjectNotFoundError(oid)
        return found[oid]

    # -- passed through -------------------------------------------------------------------

    def has_many(self, ids: Iterable[ObjectId]) -> set[ObjectId]:
        return {oid for oid in self.inner.has_many(ids) if oid not in self._hidden}

    def ids_with_prefix(self, hex_prefix: str, limit: int = 2) -> list[ObjectId]:
        return self.inner.ids_with_prefix(hex_prefix, limit)

    def iter_ids(self) -> Iterator[ObjectId]:
        return (oid for oid in self.inner.iter_ids() if oid not in self._hidden)

    def mtimes(self, ids: Iterable[ObjectId]) -> dict[ObjectId, float]:
        return self.inner.mtimes(ids)

    def delete_many(self, ids: Iterable[ObjectId]) -> int:
        with self._lock:
            self.writes += 1
            if self._fail_at is not None and self.writes == self._fail_at:
                self._fail_at = None
                self.injected += 1
                raise self._fail_error or OSError(errno.EIO, f"injected write fault (write {self.writes}: a delete)")
        return self.inner.delete_many(ids)

    def sizes(self) -> StoreSizes:
        return self.inner.sizes()

    @property
    def capabilities(self) -> StoreCapabilities:
        return self.inner.capabilities

    def dictionaries(self) -> dict[int, bytes]:
        return self.inner.dictionaries()

    def put_dictionary(self, data: bytes) -> int:
        return self.inner.put_dictionary(data)

    def refresh(self) -> None:
        self.inner.refresh()

    def get_unframed_many(self, ids: Iterable[ObjectId]) -> tuple[dict[ObjectId, bytes], dict[ObjectId, bytes]]:
        # Faults are done to frames: while any is set, every object comes as its frame.
        if self._hidden or self._flip is not None or self._truncate is not None:
            return {}, self.get_many(ids)
        return self.inner.get_unframed_many(ids)

    def close(self) -> None:
        self.inner.close()
