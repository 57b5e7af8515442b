"""A repository on S3-compatible object storage: ``snapvc.open("s3://bucket/prefix", endpoint=..., region=...)``.

Assembles the S3 object store and commit index (``snapvc.backends.s3.objects`` and
``snapvc.backends.s3.commit_index``, two faces of the packs) and the S3
ref store (``snapvc.backends.s3.refs``, conditional writes) over one client. Needs the ``s3``
extra (``pip install '.[s3]'`` in a clone: obstore). Credentials come from the environment,
as for any AWS client (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ...).

What a transaction means here: S3 has no multi-key atomicity, so
``Backend.transaction()`` buffers the objects, commits and ref moves made inside it
and sends them when it ends: the objects and commits as one pack, then each moved ref
by a conditional write (objects first, then the refs: invariant 1). A failed
transaction, or one whose pack fails to go up, sends nothing of what it buffered and
forgets it. A ref another writer moved meanwhile is reported when the transaction ends
(``RefConflictError``): the pack stays, unreferenced, for gc. A crash between a pack
and its ref writes leaves the same: never a ref to something missing.

What gc means here: nothing excludes writers from a sweep, so writers rely only on
recently stored bytes and the sweep removes only entries that stayed older than its
cutoff, which is safe for grace periods of at least ``GcTiming.min_grace`` (30 minutes
by default; ``snapvc.backends.s3.packs``, "gc beside writers", has the rules and why they hold).
``open_s3_backend(..., gc_timing=GcTiming(...))`` states other bounds; every client of
one repository must state the same.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from snapvc.backends.base import Backend, check_durability
from snapvc.backends.s3.cache import DiskCache
from snapvc.backends.s3.client import S3Client, S3Location, S3Stats, check_or_create_marker, read_meta, write_meta
from snapvc.backends.s3.commit_index import S3CommitIndex
from snapvc.backends.s3.objects import S3ObjectStore
from snapvc.backends.s3.packs import GcTiming, Packs
from snapvc.backends.s3.refs import S3RefStore
from snapvc.errors import InvalidArgumentError
from snapvc.ids import ObjectId

__all__ = ["S3Backend", "open_s3_backend"]

# How long a read gc epoch is trusted: a request per commit at most once a second (see ``Backend.gc_epoch``).
_EPOCH_SECONDS = 1.0


class S3Backend(Backend):
    """A ``Backend`` whose three stores live under one S3 prefix, over one client and one
    ``Packs``."""

    objects: S3ObjectStore
    refs: S3RefStore
    sweeps_beside_writers = True  # nothing on S3 excludes writers from a gc's sweep

    def __init__(self, location: str, client: S3Client, packs: Packs, refs: S3RefStore, *,
                 durability: str = "normal") -> None:
        super().__init__(location, S3ObjectStore(packs), refs, S3CommitIndex(packs), durability=durability)
        self.client = client
        self.packs = packs
        self._lock = threading.RLock()
        self._epoch_read: tuple[float, int] | None = None
        self._epoch_seen: int | None = None  # the epoch last read, kept when a read expires

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One locked section whose writes go up as one pack (see the module docstring)."""
        with self._lock:
            outermost = not self.packs.in_transaction()
            self.packs.begin()
            ok = False
            try:
                yield
                ok = True
            finally:
                try:
                    self.packs.end(ok)  # the pack first...
                except BaseException:
                    ok = False  # it did not go up: nothing of the transaction is sent
                    raise
                finally:
                    if outermost:
                        if ok:
                            self.refs.write_pending()  # ...then the refs that name it
                        else:
                            self.refs.discard_pending()

    def gc_epoch(self) -> int:
        """The gc epoch (``Backend.gc_epoch``). When it moved since this client last read
        it, another client's gc rewrote packs: the pack index is read again first, so no
        write trusts an object the sweep removed to be stored."""
        now = time.monotonic()
        if self._epoch_read is None or now - self._epoch_read[0] > _EPOCH_SECONDS:
            epoch = int(read_meta(self.client, "gc_epoch") or 0)
            if self._epoch_seen is not None and epoch != self._epoch_seen and self.packs.loaded:
                self.packs.refresh()
            self._epoch_read, self._epoch_seen = (now, epoch), epoch
        return self._epoch_read[1]

    def bump_gc_epoch(self) -> None:
        self._epoch_read = None
        write_meta(self.client, "gc_epoch", str(self.gc_epoch() + 1))
        self._epoch_read = None

    def reusable(self, ids: Iterable[ObjectId]) -> set[ObjectId]:
        """The stored ids whose bytes were stored recently enough for a write to rely on
        (``S3ObjectStore.reusable_many``): older ones a gc may be removing meanwhile."""
        return self.objects.reusable_many(ids)

    def min_gc_grace(self) -> float:
        """``GcTiming.min_grace``: below it, a gc may remove what a concurrent write relies on."""
        return self.packs.timing.min_grace

    def delete_garbage(self, ids: list[ObjectId], *, commits: bool, older_than: float) -> int:
        """Remove gc's doomed objects or commits, keeping every entry of theirs stored at
        or after ``older_than`` (the sweep's cutoff): writers may have stored them again
        since the sweep read their ages, as nothing here excludes them (``Packs.delete``)."""
        return self.packs.delete(ids, objects=not commits, older_than=older_than)

    def get_setting(self, key: str) -> str | None:
        return read_meta(self.client, f"setting-{key}")

    def set_setting(self, key: str, value: str) -> None:
        write_meta(self.client, f"setting-{key}", value)


    def repack(self) -> int:
        """Merge the small packs (a pack per commit made straight to S3) into large ones,
        so a new client's checkout reads a few packs rather than one per commit; returns
        how many packs were merged (``snapvc.backends.s3.packs.Packs.repack``)."""
        return self.packs.repack()

    @property
    def s3_stats(self) -> S3Stats:
        """Requests and bytes this backend exchanged with the server (``S3Stats``)."""
        return self.client.stats

    def close(self) -> None:
        super().close()
        self.client.close()
        if self.packs.cache.disk is not None:
            self.packs.cache.disk.close()


def open_s3_backend(url: str, *, create: bool = True, durability: str = "normal",
                    clock: Callable[[], float] | None = None, endpoint: str | None = None,
                    region: str | None = None, cache_dir: str | os.PathLike[str] | None = None,
                    gc_timing: GcTiming | None = None) -> S3Backend:
    """The repository at ``s3://bucket/prefix``: ``endpoint`` (e.g. ``http://127.0.0.1:8333``
    for a local server; default ``AWS_ENDPOINT_URL`` or AWS) and ``region`` (default
    ``AWS_REGION``). Created (a marker object under the prefix) unless ``create`` is False.
    ``cache_dir``: a folder where pack headers and frames read or written are kept on
    local disk (``snapvc.backends.s3.cache.DiskCache``), for later processes on the machine.
    ``gc_timing``: the bounds gc relies on beside writers (``snapvc.backends.s3.GcTiming``;
    the same for every client of the repository).
    ``durability`` is accepted for symmetry: a PUT that returned is durable on the server."""
    check_durability(durability)
    if gc_timing is not None and not isinstance(gc_timing, GcTiming):
        raise InvalidArgumentError("gc_timing", f"gc_timing is a snapvc.backends.s3.GcTiming, not {gc_timing!r}")
    location = S3Location.parse(url, endpoint, region)
    client = S3Client(location)
    try:
        check_or_create_marker(client, create=create)
    except BaseException:
        client.close()
        raise
    tick = clock or time.time
    disk = DiskCache(cache_dir, location.url) if cache_dir is not None else None
    packs = Packs(client, tick, disk=disk, timing=gc_timing)
    refs = S3RefStore(client, tick, before_write=packs.flush, buffering=packs.in_transaction)
    return S3Backend(location.url, client, packs, refs, durability=durability)
