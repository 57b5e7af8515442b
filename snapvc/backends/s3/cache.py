"""Caches of frames and pack headers of a repository on S3: ``FrameCache`` in memory,
over an optional ``DiskCache`` in a local folder shared by the processes of a machine.
Both hold immutable things (a frame by its object's id, a header by its pack's unique
key), so nothing they hold is ever stale."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

__all__ = ["DiskCache", "FrameCache", "DISK_CACHE_BYTES"]

DISK_CACHE_BYTES = 1 << 30


class DiskCache:
    """Frames and pack headers of one repository kept in a local SQLite file, shared by
    the processes of a machine and kept across restarts (``snapvc.open(..., cache_dir=)``).

    Both are immutable (a frame is named by its object's id, a header by its pack's
    unique key), so nothing here is ever stale; a frame is served only for an id the
    index knows, and reads verify it as any. Past ``limit_bytes`` the oldest frames go."""

    def __init__(self, folder: str | os.PathLike[str], location: str, limit_bytes: int = DISK_CACHE_BYTES) -> None:
        folder = Path(folder).expanduser()
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{hashlib.sha256(location.encode()).hexdigest()[:24]}.cache"
        self._limit = limit_bytes
        self._lock = threading.Lock()
        self._written = 0
        self._conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False, timeout=30.0)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=OFF")  # a cache: losing it costs only reads
        self._conn.execute("CREATE TABLE IF NOT EXISTS frames (id BLOB PRIMARY KEY, data BLOB NOT NULL)")
        self._conn.execute("CREATE TABLE IF NOT EXISTS heads (pack TEXT PRIMARY KEY, head BLOB NOT NULL)")

    def get(self, oid: bytes) -> bytes | None:
        with self._lock:
            row = self._conn.execute("SELECT data FROM frames WHERE id = ?", (bytes(oid),)).fetchone()
        return None if row is None else bytes(row[0])

    def put_many(self, items: list[tuple[bytes, bytes]]) -> None:
        if not items:
            return
        with self._lock:
            self._conn.execute("BEGIN")
            # A cache of what the packs hold: a frame already kept for this id is one the
            # object verifies from as well (reads check the hash), so keeping it loses nothing.
            self._conn.executemany("INSERT OR IGNORE INTO frames (id, data) VALUES (?, ?)",
                                   [(bytes(oid), frame) for oid, frame in items])
            self._conn.execute("COMMIT")
            self._written += sum(len(frame) for _, frame in items)
            if self._written > self._limit // 16:
                self._written = 0
                self._evict()

    def _evict(self) -> None:
        (total,) = self._conn.execute("SELECT coalesce(sum(length(data)), 0) FROM frames").fetchone()
        if total > self._limit:
            (count,) = self._conn.execute("SELECT count(*) FROM frames").fetchone()
            doomed = max(1, int(count * (total - self._limit * 3 // 4) / total))
            self._conn.execute("DELETE FROM frames WHERE rowid IN (SELECT rowid FROM frames ORDER BY rowid LIMIT ?)",
                               (doomed,))

    def head(self, pack: str) -> bytes | None:
        with self._lock:
            row = self._conn.execute("SELECT head FROM heads WHERE pack = ?", (pack,)).fetchone()
        return None if row is None else bytes(row[0])

    def put_head(self, pack: str, head: bytes) -> None:
        with self._lock:
            # A pack is written once under its key and never changed: a header kept for
            # it already is the same bytes (and a damaged copy is read from the pack instead).
            self._conn.execute("INSERT OR IGNORE INTO heads (pack, head) VALUES (?, ?)", (pack, head))

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class FrameCache:
    """A byte-bounded LRU of frames by id in memory, over a ``DiskCache`` if given."""

    def __init__(self, limit: int, disk: DiskCache | None = None) -> None:
        self._data: OrderedDict[bytes, bytes] = OrderedDict()
        self._size = 0
        self._limit = limit
        self._lock = threading.Lock()
        self.disk = disk

    def get(self, oid: bytes) -> bytes | None:
        with self._lock:
            found = self._data.get(oid)
            if found is not None:
                self._data.move_to_end(oid)
                return found
        if self.disk is not None:
            found = self.disk.get(oid)
            if found is not None:
                self._remember(oid, found)
        return found

    def put(self, oid: bytes, frame: bytes) -> None:
        self.put_many([(oid, frame)])

    def put_many(self, items: list[tuple[bytes, bytes]]) -> None:
        for oid, frame in items:
            self._remember(oid, frame)
        if self.disk is not None:
            self.disk.put_many(items)

    def _remember(self, oid: bytes, frame: bytes) -> None:
        if len(frame) > self._limit // 16:
            return
        with self._lock:
            if oid in self._data:
                return
            self._data[oid] = frame
            self._size += len(frame)
            while self._size > self._limit:
                _, old = self._data.popitem(last=False)
                self._size -= len(old)

    def drop(self, ids: Iterable[bytes]) -> None:
        with self._lock:
            for oid in ids:
                old = self._data.pop(oid, None)
                if old is not None:
                    self._size -= len(old)
