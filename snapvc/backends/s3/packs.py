"""The packs of a repository on S3: objects and commits packed per write, and the index of them.

Many small PUTs are slow (a client manages a few hundred a second) while one large
object goes up at tens of MB/s, so a repository on S3 never stores an object per key.
Everything one write brings — a commit's new objects and the commit itself — goes up
as one *pack*: one PUT, however many objects. Reads fetch single frames by byte range.

Layout under ``s3://bucket/prefix/``::

    snapvc.json                     the repository marker: format version
    packs/<ms>-<random>.pack        packs, named by the writer's clock (oldest first)
    index/<ms>-<random>.idx         consolidated index: the headers of many packs in one object
    dictionaries/<n>                zstd dictionaries (codec.py), created with If-None-Match
    refs/..., reflog/...            refs and their reflog (``snapvc.backends.s3.refs``)
    meta/<key>                      small settings: the gc epoch, remotes

A pack is ``MAGIC``, a 4-byte little-endian header length, a msgpack header, then the
frames back to back. The header lists every object (id, offset into the frames, length,
age) and holds each commit of the pack whole (its canonical bytes and age): reading
the headers of a repository's packs gives the object index *and* the commit index,
so ``log`` and ``main~400`` never fetch a frame. An entry of length ``TOUCH`` stores
no frame: it refreshes the age of an object stored in an earlier pack (invariant 4).

Readers list ``packs/`` once, read each pack's header (one ranged GET; a small pack
comes whole and its frames are kept in the cache), and list again only when asked
for an id they do not know. With a cache folder (``DiskCache``), headers and frames are
kept on local disk too, for the next process on the machine. A client starting cold reads the newest consolidated index
first (one GET for the headers of thousands of packs; a writer adds one every
``INDEX_EVERY`` packs), then the headers of the packs newer than it. ``repack`` merges
small packs (a pack per commit, for a branch committed straight to S3) into large ones. Objects are immutable and packs are written whole, so a
reader never sees half a pack. gc rewrites the packs that hold garbage without it and
deletes the old ones (``delete_many``).

Inside ``Backend.transaction()`` writes are buffered and go up as one pack when the
transaction ends (before its ref moves: objects first, then the refs, invariant 1), or
before any ref moves outside it (``flush``). There is no multi-key atomicity on S3: a crash after a pack went up and
before its ref moved leaves an unreferenced pack, which gc removes after its grace.

gc beside writers
-----------------
S3 gives gc no lock: a writer may commit while a gc sweeps, and its commit may need an
object the gc found unreachable and old (content dropped and brought back: a branch
reset, a value restored). Recording only a touch of such an object is not enough: the
touch's pack may go up after the gc last listed the packs, and the gc deletes the
bytes it touched. Two rules close that window, under two bounds (``GcTiming``): *D*,
the longest write (from its first look at what is stored — encoding, ``has_many``, a
put — to its last ref move; a ``deferred()`` block, a push or a clone is one write), and
*S*, the largest difference between the clocks of any two clients.

- **A writer relies only on recent bytes.** It skips an object as stored
  (``reusable_many``, which ``Backend.reusable`` answers with: a commit, a push) and
  records a touch instead of its bytes (``put_objects``) only when a pack holds the
  object's *bytes* (a frame, not a touch) written less than ``reuse_window`` (*R*) ago,
  by the ages in the pack headers it has read (``Packs.reusable``). Otherwise it uploads
  the bytes again, in its own pack. An object goes up again at most once per *R*. What
  a commit reuses through the encoder's caches (the unchanged parts of the state last
  committed on its branch) is not concerned; the first commit after a restart, or a
  push, finds those parts stored instead, and sends again the ones older than *R*.
- **A writer reuses its encode cache only on the commits it came from.** What a commit
  takes from its branch's encode cache without storing it (values, tree nodes, the
  delta bases of new frames) is part of the commits the cache learnt it from
  (``EncodeCache.sources``: the writer's last commit there, states checked out since).
  It takes them only when each is a parent of the new commit or an ancestor of one
  (``RepositoryCore._may_rely_on``, before encoding; ``Backend.sweeps_beside_writers``);
  otherwise, as after another client reset the branch, it encodes the state afresh.
- **gc removes only what stayed old.** It plans at time *plan* (its clock), keeps what
  refs, young reflog entries and young commits reach, reads the refs again just before
  it deletes, then lists the packs once more and removes from the packs of that listing
  only the *entries* (a frame, a touch, a commit) aged below its cutoff,
  ``plan - grace``. An entry written since, even of an id it meant to remove, stays,
  and a pack written after that listing is not touched (``Packs.delete``).

Why nothing a returned commit needs is lost when ``grace >= R + D + 2S``
(``GcTiming.min_grace``; ``Repository.gc`` refuses less on S3 unless forced). Take a
write whose ref move to commit C landed, and an object X that C needs. If the move
landed before gc read the refs again, gc marked C and kept X. Otherwise the write
started after ``plan - D`` (true time), and X is, for C, one of:

1. bytes the write uploaded itself: their age is at least ``plan - D - S`` (the
   writer's clock may run S behind) and the cutoff at most ``plan + S - grace`` (gc's
   may run S ahead), so the entry is at or above the cutoff when ``grace >= D + 2S``,
   and stays (a pack gc did not list is not rewritten at all);
2. bytes stored before that the write relied on: younger than R on the writer's clock
   when it looked, so aged at least ``plan - D - S - R``, at or above the cutoff when
   ``grace >= R + D + 2S``: that entry stays too;
3. part of a commit the parent reaches (itself or an ancestor), the parent being the
   commit the ref held when the write's compare-and-swap won: what the encode cache
   gave (second rule) and a new frame's delta base (named by the cache too), a merge's
   trees built from its parents. The ref held the parent when gc read the refs (so gc
   marked it and its ancestors), or an earlier write moved the ref there after that, and
   the same three cases hold for that write, back to a commit gc marked.

The gc epoch is no part of this argument: a writer on S3 reads it at most once a second
(``S3Backend.gc_epoch``) and compares it before its ref moves, so a sweep may run in
between. The epoch check of ``Repository.commit`` only drops the caches that name what
a sweep removed, for the cases below. Not covered (run gc with the writers stopped if
you do these): a ref moved to an *existing* commit that no ref or young reflog entry
reached when gc read them again (a reset to an id found in an old log, a
``commit_tree`` commit older than the grace); a state holding a lazy view of a commit
the new commit's parents do not reach (``snapshot``, a ``cherry_pick`` from elsewhere),
committed while a client deletes the ref that reaches it; and a push or clone into a
repository holding the commits it sends only unreachably (they are not sent again).
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import msgpack

from snapvc.backends.s3.cache import DiskCache, FrameCache
from snapvc.backends.s3.client import S3Client
from snapvc.backends.s3.packfile import TOUCH, decode_pack_header, encode_pack
from snapvc.errors import InvalidArgumentError, RepositoryError
from snapvc.ids import ObjectId
from snapvc.objects import COMMIT, Commit, split_object

__all__ = ["GcTiming", "Packs", "PackEntry", "HEAD_BYTES", "CACHE_BYTES", "INDEX_EVERY", "REPACK_SMALL", "REPACK_TARGET"]

# The first ranged read of a pack: its header, and the whole pack when it is this small.
HEAD_BYTES = 64 << 10
# Frames kept in memory (hot objects, own writes, small packs read whole), and on disk
# when a cache folder is given.
CACHE_BYTES = 64 << 20
# A consolidated index of every pack's header is written once this many packs (or an
# eighth of those it covers, if more) are not in one.
INDEX_EVERY = 64
# ``repack`` merges packs smaller than this into packs of up to REPACK_TARGET bytes.
REPACK_SMALL = 1 << 20
REPACK_TARGET = 64 << 20


@dataclass(frozen=True)
class GcTiming:
    """The bounds gc on S3 relies on to run beside writers (see "gc beside writers" in
    the module docstring), in seconds. Every client of one repository must use the same:
    a writer that relies on older bytes than ``reuse_window`` allows, or a write that
    takes longer than ``longest_write``, can lose objects to a gc running meanwhile.

    ``longest_write``: the longest a write may take from its first look at what is stored
    to its last ref move (a commit, a ``deferred()`` block, a push, a clone);
    ``clock_skew``: the largest difference between the clocks of any two clients;
    ``reuse_window``: a writer relies on bytes already stored only if they were written
    less than this long ago, and otherwise uploads them again."""

    reuse_window: float = 15 * 60.0
    longest_write: float = 10 * 60.0
    clock_skew: float = 150.0

    def __post_init__(self) -> None:
        for name in ("reuse_window", "longest_write", "clock_skew"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < math.inf:
                raise InvalidArgumentError(f"GcTiming.{name}", f"GcTiming.{name} is a number of seconds >= 0, "
                                                               f"got {value!r}")

    @property
    def min_grace(self) -> float:
        """The shortest grace period a gc may use while writers are active:
        ``reuse_window + longest_write + 2 * clock_skew`` (30 minutes by default)."""
        return self.reuse_window + self.longest_write + 2 * self.clock_skew


@dataclass(slots=True)
class PackEntry:
    """Where one object's frame is: in which pack, at which offset, how long, and its age."""

    pack: str  # the pack's key; "" for an object in the pending (unwritten) pack
    offset: int
    length: int
    mtime: float


class Packs:
    """The packs of one repository on S3: the index of every object and commit they
    hold, the pending pack of the current transaction, and the frame cache.

    ``S3ObjectStore`` and ``S3CommitIndex`` are two faces of one ``Packs``: a commit and
    its objects go up in the same pack. ``timing`` bounds what a write may rely on (see
    "gc beside writers" in the module docstring)."""

    def __init__(self, client: S3Client, clock: Callable[[], float] = time.time, cache_bytes: int = CACHE_BYTES,
                 disk: DiskCache | None = None, timing: GcTiming | None = None) -> None:
        self.client = client
        self.clock = clock
        self.timing = timing or GcTiming()
        self.lock = threading.RLock()
        self.objects: dict[ObjectId, PackEntry] = {}  # the first location of each object
        self.ages: dict[ObjectId, float] = {}  # the latest age of each object
        self.frame_ages: dict[ObjectId, float] = {}  # the latest age of an entry holding each object's bytes
        self.commits: dict[ObjectId, Commit] = {}
        self.commit_ages: dict[ObjectId, float] = {}
        self.pack_ids: dict[str, list[ObjectId]] = {}  # pack key -> the ids (objects and commits) it holds
        self.heads: dict[str, bytes] = {}  # pack key -> its header's bytes (for the consolidated index)
        self.pack_ends: dict[str, int] = {}  # pack key -> its size
        self.indexed = 0  # how many known packs the newest index this client read or wrote covers
        self.loaded = False
        self.cache = FrameCache(cache_bytes, disk)
        # The pending pack: writes buffered in a transaction of the owning thread.
        self._depth = 0
        self._owner: int | None = None
        self._pending_objects: list[tuple[ObjectId, bytes | None, float]] = []
        self._pending_frames: dict[ObjectId, bytes] = {}
        self._pending_commits: list[tuple[Commit, float]] = []

    # -- the index ------------------------------------------------------------------------

    def ensure_loaded(self) -> None:
        if not self.loaded:
            self.refresh()

    def refresh(self) -> None:
        """List the packs and read the headers of those not known yet. When a pack this
        client knew is gone (a gc rewrote it), the index is read again from scratch."""
        listed = dict(self.client.list("packs/"))
        with self.lock:
            if not set(self.pack_ids) <= set(listed):
                self._reset()
            cold = not self.pack_ids
        if cold and len(listed) > 1:
            self._load_index(listed)
        with self.lock:
            known = set(self.pack_ids)
        new = sorted(k for k in listed if k not in known and k.endswith(".pack"))
        headers = list(self.client.pool.map(lambda key: (key, self._read_header(key, listed[key])), new))
        with self.lock:
            for key, found in headers:
                if found is not None:
                    self._add_pack(key, *found)
            self.loaded = True
        self._maybe_write_index()

    def _read_header(self, key: str, size: int) -> tuple[int, dict[str, Any], bytes] | None:
        disk = self.cache.disk
        kept = disk.head(key) if disk is not None else None
        if kept is not None:
            try:
                decoded = decode_pack_header(key, kept)
            except RepositoryError:
                decoded = 0  # a damaged copy on disk: the pack's own header is read instead
            if not isinstance(decoded, int):
                return decoded[0], decoded[1], kept
        try:
            head = self.client.get_range(key, 0, min(size, HEAD_BYTES))
            decoded = decode_pack_header(self.client.where(key), head)
            if isinstance(decoded, int):
                head += self.client.get_range(key, len(head), decoded)
                decoded = decode_pack_header(self.client.where(key), head)
                assert not isinstance(decoded, int)
        except FileNotFoundError:
            return None  # deleted by a gc since the listing
        start, header = decoded
        if len(head) == size:  # the whole pack came: keep its frames
            self.cache.put_many([(raw, head[start + offset : start + offset + length])
                                 for raw, offset, length, _ in header["objects"] if length != TOUCH])
        if disk is not None:
            disk.put_head(key, head[:start])
        return start, header, head[:start]

    def _add_pack(self, key: str, start: int, header: dict[str, Any], head: bytes) -> None:
        """Index pack ``key`` from its header (``head``: the header's bytes, kept for the
        consolidated index)."""
        ids: list[ObjectId] = []
        end = start
        for raw, offset, length, mtime in header["objects"]:
            oid = ObjectId(raw)
            ids.append(oid)
            if length != TOUCH:
                end = max(end, start + offset + length)
                known = self.objects.get(oid)
                if known is None or not known.pack or known.pack > key:
                    self.objects[oid] = PackEntry(key, start + offset, length, mtime)
                if mtime > self.frame_ages.get(oid, -1.0):
                    self.frame_ages[oid] = mtime
            if mtime > self.ages.get(oid, -1.0):
                self.ages[oid] = mtime
        for data, mtime in header["commits"]:
            data = bytes(data)
            oid = ObjectId.of(data)
            kind, payload = split_object(oid, data)
            if kind == COMMIT:
                self.commits[oid] = Commit.decode(oid, payload)
                ids.append(oid)
                if mtime > self.commit_ages.get(oid, -1.0):
                    self.commit_ages[oid] = mtime
        self.pack_ids[key] = ids
        self.heads[key] = head
        self.pack_ends[key] = end

    def _load_index(self, listed: dict[str, int]) -> None:
        """A cold start: read the newest consolidated index (the headers of many packs in
        one object) instead of each pack's header; packs it names that are gone (a gc
        rewrote them) are skipped, packs newer than it are read one by one after."""
        indexes = [key for key, _ in self.client.list("index/") if key.endswith(".idx")]
        for key in reversed(indexes[-2:]):
            found = self.client.get(key)
            if found is None:
                continue  # replaced by a newer one meanwhile
            try:
                entries = msgpack.unpackb(found[0], raw=False)
            except Exception as exc:
                raise RepositoryError(f"{self.client.where(key)}: damaged index: {exc}") from None
            with self.lock:
                for pack, head in entries:
                    if pack in listed and pack not in self.pack_ids:
                        decoded = decode_pack_header(self.client.where(pack), head)
                        if isinstance(decoded, int):
                            raise RepositoryError(f"{self.client.where(key)}: damaged index entry for {pack}")
                        self._add_pack(pack, decoded[0], decoded[1], head)
                self.indexed = len(self.pack_ids)
            return

    def _maybe_write_index(self) -> None:
        """Every ``INDEX_EVERY`` packs, a client that knows every pack writes their headers
        as one index object (and removes indexes older than the one before it), so a new
        client reads one object instead of thousands of pack headers."""
        with self.lock:
            if not self.loaded or len(self.pack_ids) - self.indexed < max(INDEX_EVERY, self.indexed // 8):
                return
            entries = sorted(self.heads.items())
            self.indexed = len(entries)
        data = msgpack.packb(entries, use_bin_type=True)
        key = self._new_key("index/", ".idx")
        try:
            self.client.put(key, data, create=True)
            older = [k for k, _ in self.client.list("index/") if k < key]
            if len(older) > 1:
                self.client.delete(older[:-1])
        except RepositoryError:
            # Best effort: the index only saves reads (a client that may only read, a
            # server that failed): the write that triggered it stands, and this client
            # tries again INDEX_EVERY packs later.
            pass

    def _new_key(self, folder: str, suffix: str) -> str:
        """A new pack's or index's name: the writer's clock in ms (oldest sort first) and
        random bytes (no two writers share one)."""
        return f"{folder}{int(self.clock() * 1000):013d}-{secrets.token_hex(6)}{suffix}"

    def _reset(self) -> None:
        """Forget everything read from packs (the pending pack stays)."""
        self.pack_ids.clear()
        self.heads.clear()
        self.pack_ends.clear()
        self.indexed = 0
        self.objects = {oid: e for oid, e in self.objects.items() if not e.pack}
        self.ages = {oid: t for oid, t in self.ages.items() if oid in self.objects}
        self.frame_ages.clear()  # a pending frame's age is not in it: see ``reusable``
        pending_commits = {c.id for c, _ in self._pending_commits}
        self.commits = {oid: c for oid, c in self.commits.items() if oid in pending_commits}
        self.commit_ages = {oid: t for oid, t in self.commit_ages.items() if oid in pending_commits}

    # -- transactions -------------------------------------------------------------------

    def begin(self) -> None:
        with self.lock:
            me = threading.get_ident()
            if self._depth and self._owner != me:
                # S3Backend.transaction holds the backend's lock from begin to end, so
                # another thread's transaction cannot be open here.
                raise AssertionError("an S3 transaction is open in another thread")
            self._owner = me
            self._depth += 1

    def end(self, ok: bool) -> None:
        with self.lock:
            self._depth -= 1
            if self._depth:
                return
            self._owner = None
            if not ok:
                self._discard_pending()
                return
            try:
                self.flush()
            except BaseException:
                self._discard_pending()  # the transaction failed: none of its writes stay
                raise

    def _buffering(self) -> bool:
        return self._depth > 0 and self._owner == threading.get_ident()

    def in_transaction(self) -> bool:
        """Whether the calling thread is inside a transaction (its writes are buffered)."""
        return self._buffering()

    def _discard_pending(self) -> None:
        for oid, _, _ in self._pending_objects:
            entry = self.objects.get(oid)
            if entry is not None and entry.pack == "":
                del self.objects[oid]
        for commit, _ in self._pending_commits:
            if not any(commit.id in ids for ids in self.pack_ids.values()):
                self.commits.pop(commit.id, None)
        self._pending_objects, self._pending_frames, self._pending_commits = [], {}, []

    def flush(self) -> None:
        """Write the pending pack, if any (before a ref moves: objects first)."""
        with self.lock:
            if not self._pending_objects and not self._pending_commits:
                return
            objects, frames, commits = self._pending_objects, self._pending_frames, self._pending_commits
            self._pending_objects, self._pending_frames, self._pending_commits = [], {}, []
            try:
                self._write_pack(objects, [(c.encode(), t) for c, t in commits])
            except BaseException:
                self._pending_objects, self._pending_frames, self._pending_commits = objects, frames, commits
                raise

    def _write_pack(self, objects: list[tuple[ObjectId, bytes | None, float]], commits: list[tuple[bytes, float]]) -> None:
        """Put a new pack and index it here (a write of this client)."""
        key, data = self._put_pack(objects, commits)
        decoded = decode_pack_header(self.client.where(key), data)
        assert not isinstance(decoded, int)
        start, header = decoded
        with self.lock:
            self._add_pack(key, start, header, data[:start])
        self.cache.put_many([(oid, frame) for oid, frame, _ in objects if frame is not None])
        if self.cache.disk is not None:
            self.cache.disk.put_head(key, data[:start])
        self._maybe_write_index()

    # -- writes ----------------------------------------------------------------------------

    def reusable(self, oid: ObjectId, now: float) -> bool:
        """Whether a write may rely on ``oid`` being stored instead of uploading its bytes:
        the pending pack of the caller's transaction holds them, or a pack holds them with
        an age under ``timing.reuse_window`` (a touch does not count: it holds no bytes).
        Older bytes may be going away under a gc that runs meanwhile (module docstring)."""
        if oid in self._pending_frames and self._buffering():
            return True
        return oid in self.objects and self.frame_ages.get(oid, -math.inf) >= now - self.timing.reuse_window

    def put_objects(self, items: Iterable[tuple[ObjectId, bytes]]) -> None:
        """Store each (id, frame): a touch when ``reusable``, else the frame, even of an
        object stored long ago (a gc may be removing that copy)."""
        now = float(self.clock())
        with self.lock:
            self.ensure_loaded()
            batch: list[tuple[ObjectId, bytes | None, float]] = []
            seen: set[ObjectId] = set()
            for oid, frame in items:
                oid = oid if type(oid) is ObjectId else ObjectId(oid)
                if oid in seen:
                    continue
                seen.add(oid)
                batch.append((oid, None if self.reusable(oid, now) else bytes(frame), now))
            if not batch:
                return
            if self._buffering():
                for oid, kept, mtime in batch:
                    self._pending_objects.append((oid, kept, mtime))
                    self.ages[oid] = mtime
                    if kept is not None:
                        self._pending_frames[oid] = kept
                        if oid not in self.objects:  # an older copy keeps its place if the transaction fails
                            self.objects[oid] = PackEntry("", 0, len(kept), mtime)
                return
        self._write_pack(batch, [])

    def add_commit(self, commit: Commit) -> None:
        now = float(self.clock())
        with self.lock:
            if self._buffering():
                self._pending_commits.append((commit, now))
                self.commits.setdefault(commit.id, commit)
                self.commit_ages[commit.id] = now
                return
        self._write_pack([], [(commit.encode(), now)])

    # -- reads -------------------------------------------------------------------------------

    def get_frames(self, ids: Iterable[ObjectId]) -> dict[ObjectId, bytes]:
        self.ensure_loaded()
        out: dict[ObjectId, bytes] = {}
        missing: list[ObjectId] = []
        by_pack: dict[str, list[tuple[ObjectId, PackEntry]]] = {}
        with self.lock:
            for oid in ids:
                pending = self._pending_frames.get(oid)
                if pending is not None:
                    out[oid] = pending
                    continue
                cached = self.cache.get(oid)
                if cached is not None and oid in self.objects:
                    out[oid] = cached
                    continue
                entry = self.objects.get(oid)
                if entry is None:
                    missing.append(oid)
                else:
                    by_pack.setdefault(entry.pack, []).append((oid, entry))
        if missing:
            self.refresh()  # another writer may have added them
            with self.lock:
                for oid in missing:
                    entry = self.objects.get(oid)
                    if entry is not None:
                        by_pack.setdefault(entry.pack, []).append((oid, entry))
        if by_pack:
            results = list(self.client.pool.map(self._read_frames, by_pack.items()))
            retry: list[ObjectId] = []
            for found, gone in results:
                out.update(found)
                retry.extend(gone)
            if retry:  # a gc rewrote those packs meanwhile
                self.refresh()
                with self.lock:
                    again: dict[str, list[tuple[ObjectId, PackEntry]]] = {}
                    for oid in retry:
                        entry = self.objects.get(oid)
                        if entry is not None:
                            again.setdefault(entry.pack, []).append((oid, entry))
                for found, _ in map(self._read_frames, again.items()):
                    out.update(found)
        return out

    def _read_frames(self, item: tuple[str, list[tuple[ObjectId, PackEntry]]]) -> tuple[dict[ObjectId, bytes], list[ObjectId]]:
        """The frames ``wanted`` of pack ``key``: by range, or a small pack whole (a
        checkout reads a tree level by level, and would come back for the next level),
        keeping all its frames in the cache. Ids whose pack is gone are returned apart."""
        key, wanted = item
        try:
            if self.pack_ends.get(key, HEAD_BYTES + 1) <= HEAD_BYTES:
                found = self.client.get(key)
                if found is None:
                    return {}, [oid for oid, _ in wanted]
                whole = found[0]
                with self.lock:
                    held = [(oid, e) for oid in self.pack_ids.get(key, ()) if (e := self.objects.get(oid)) and e.pack == key]
                self.cache.put_many([(oid, whole[e.offset : e.offset + e.length]) for oid, e in held])
                frames = [whole[e.offset : e.offset + e.length] for _, e in wanted]
            else:
                frames = self.client.get_ranges(key, [(e.offset, e.offset + e.length) for _, e in wanted])
        except FileNotFoundError:
            return {}, [oid for oid, _ in wanted]
        out = {oid: frame for (oid, _), frame in zip(wanted, frames, strict=True)}
        self.cache.put_many(list(out.items()))
        return out, []

    # -- deletes (gc) ------------------------------------------------------------------------

    def delete(self, ids: Iterable[ObjectId], *, objects: bool, older_than: float = math.inf) -> int:
        """Remove objects (``objects``) or commits: every pack of a fresh listing that
        holds one is written again without it, and then deleted. Only entries older than
        ``older_than`` (gc's cutoff) go: one written since gc judged the id old (its bytes
        uploaded again, a touch, a commit sent again) stays, and packs written after the
        listing are not touched (module docstring). Returns how many ids are gone."""
        self.refresh()
        with self.lock:
            doomed = {oid for oid in ids if (oid in self.objects if objects else oid in self.commits)}
            if not doomed:
                return 0
            packs = [key for key, held in self.pack_ids.items() if not doomed.isdisjoint(held)]
        for key in packs:
            self._rewrite_without(key, doomed, objects=objects, older_than=older_than)
        self.cache.drop(doomed)
        self.refresh()  # the rewritten packs replace the old ones
        with self.lock:
            return sum(1 for oid in doomed if oid not in (self.objects if objects else self.commits))

    def _rewrite_without(self, key: str, doomed: set[ObjectId], *, objects: bool, older_than: float) -> None:
        whole = self.client.get(key)
        if whole is None:
            return
        data = whole[0]
        decoded = decode_pack_header(self.client.where(key), data)
        if isinstance(decoded, int):
            raise RepositoryError(f"{self.client.where(key)}: truncated pack")
        start, header = decoded
        kept_objects: list[tuple[ObjectId, bytes | None, float]] = []
        for raw, offset, length, mtime in header["objects"]:
            oid = ObjectId(raw)
            if objects and oid in doomed and mtime < older_than:
                continue
            frame = None if length == TOUCH else data[start + offset : start + offset + length]
            kept_objects.append((oid, frame, mtime))
        kept_commits = [(bytes(c), t) for c, t in header["commits"]
                        if objects or t >= older_than or ObjectId.of(bytes(c)) not in doomed]
        if len(kept_objects) == len(header["objects"]) and len(kept_commits) == len(header["commits"]):
            return  # every entry of a doomed id here is younger than the cutoff: the pack stays as it is
        if kept_objects or kept_commits:
            # The same name with a suffix sorts right after the old pack: first bytes stay first.
            new_key = key[: -len(".pack")] + f"-{secrets.token_hex(3)}.pack"
            self.client.put(new_key, encode_pack(kept_objects, kept_commits), create=True)
        self.client.delete([key])

    def repack(self, small: int = REPACK_SMALL, target: int = REPACK_TARGET) -> int:
        """Merge the packs smaller than ``small`` bytes into packs of up to ``target``
        bytes, then delete them; returns how many packs were merged. A branch committed
        straight to S3 has a pack per commit, and a new client's checkout reads a range of
        each pack holding part of the state: after a repack, a few. The new packs are
        written before the old ones go, so a reader finds every object throughout (one
        reading an old pack meanwhile lists again)."""
        chosen = sorted(key for key, size in self.client.list("packs/") if size < small and key.endswith(".pack"))
        if len(chosen) < 2:
            return 0
        objects: dict[ObjectId, tuple[bytes | None, float]] = {}
        commits: dict[ObjectId, tuple[bytes, float]] = {}
        read: list[str] = []
        for key, found in zip(chosen, self.client.pool.map(self.client.get, chosen), strict=True):
            if found is None:
                continue  # a gc rewrote it meanwhile
            read.append(key)
            decoded = decode_pack_header(self.client.where(key), found[0])
            if isinstance(decoded, int):
                raise RepositoryError(f"{self.client.where(key)}: truncated pack")
            start, header = decoded
            for raw, offset, length, mtime in header["objects"]:
                oid = ObjectId(raw)
                frame = None if length == TOUCH else found[0][start + offset : start + offset + length]
                known = objects.get(oid)
                if known is None:
                    objects[oid] = (frame, mtime)
                else:  # the first frame stays; the age is the latest
                    objects[oid] = (known[0] if known[0] is not None else frame, max(known[1], mtime))
            for data, mtime in header["commits"]:
                data = bytes(data)
                oid = ObjectId.of(data)
                commits[oid] = (data, max(mtime, commits.get(oid, (data, mtime))[1]))
        batch: list[tuple[ObjectId, bytes | None, float]] = []
        size = 0
        for oid, (frame, mtime) in objects.items():
            batch.append((oid, frame, mtime))
            size += len(frame) if frame is not None else 0
            if size >= target:
                self._put_pack(batch, [])
                batch, size = [], 0
        self._put_pack(batch, list(commits.values()))
        self.client.delete(read)
        self.refresh()
        return len(read)

    def _put_pack(self, objects: list[tuple[ObjectId, bytes | None, float]],
                  commits: list[tuple[bytes, float]]) -> tuple[str, bytes]:
        """Put a new pack; its key and bytes."""
        key, data = self._new_key("packs/", ".pack"), encode_pack(objects, commits)
        self.client.put(key, data, create=True)
        return key, data

    def stored_bytes(self) -> int:
        return sum(e.length for e in self.objects.values())
