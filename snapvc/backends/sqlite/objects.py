"""Objects in table ``objects(id, data, mtime)`` of a ``SqliteFile``, and the compression
dictionaries their frames name in table ``dictionaries``."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from snapvc.backends.sqlite.file import DICTIONARY_FORMAT, SqliteFile, batched, is_number, wrong
from snapvc.errors import CorruptObjectError, ObjectNotFoundError, RepositoryError, SnapvcError
from snapvc.ids import ObjectId
from snapvc.store.base import StoreCapabilities, StoreSizes, unsupported

__all__ = ["SqliteObjectStore"]


class SqliteObjectStore:
    """Objects in table ``objects(id, data, mtime)`` of a ``SqliteFile``.

    Reads ask for ``CAST(data AS BLOB)``: a damaged or hand-edited row may hold text,
    which SQLite would otherwise hand back decoded (or fail to decode) as a str; as
    bytes it goes on to verification, which names the object as corrupt.

    It keeps dictionaries; every write to the file is seen at once, also another
    process's, so there is nothing to refresh."""

    capabilities = StoreCapabilities(dictionaries=True, refresh=False)

    def __init__(self, file: SqliteFile, clock: Callable[[], float] = time.time) -> None:
        self.file = file
        self._clock = clock
        file.make_tables([
            "CREATE TABLE IF NOT EXISTS objects (id BLOB PRIMARY KEY, data BLOB NOT NULL, mtime INTEGER NOT NULL)",
            # Compression dictionaries (snapvc.store.codec): few, never changed.
            "CREATE TABLE IF NOT EXISTS dictionaries (number INTEGER PRIMARY KEY, data BLOB NOT NULL)",
        ])

    def get_many(self, ids: Iterable[ObjectId]) -> dict[ObjectId, bytes]:
        out: dict[ObjectId, bytes] = {}
        c = self.file.conn
        with self.file.lock:
            for batch in batched(ids):
                try:
                    if len(batch) == 1:
                        row = c.execute("SELECT CAST(data AS BLOB) FROM objects WHERE id = ?", batch).fetchone()
                        if row is not None:
                            out[batch[0]] = row[0]
                        continue
                    marks = ",".join("?" * len(batch))
                    for raw, data in c.execute(f"SELECT id, CAST(data AS BLOB) FROM objects WHERE id IN ({marks})",
                                               batch):
                        out[ObjectId(raw)] = data
                except sqlite3.DatabaseError as exc:
                    raise self._unreadable(batch, exc) from None
        return out

    def _upgraded(self, exc: Exception) -> RepositoryError | None:
        """The error for a query that failed because table ``objects`` (or
        ``dictionaries``) is gone: another process upgraded the file to format 3
        (``snapvc.backends.sqlite.upgrade``) while this one had it open; None for any
        other failure."""
        if "no such table" not in str(exc):
            return None
        return RepositoryError(f"{str(self.file.path)!r} was upgraded to format 3 by another process while this one "
                               f"had it open at format {self.file.format}: close the repository and open it again")

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Inside a write transaction: the clear error of ``_upgraded`` for a table gone."""
        try:
            yield
        except sqlite3.Error as exc:
            upgraded = self._upgraded(exc)
            if upgraded is None:
                raise
            raise upgraded from None

    @contextmanager
    def _reading(self, what: str) -> Iterator[sqlite3.Connection]:
        """``SqliteFile.reading``, and the clear error of ``_upgraded`` first."""
        with self.file.reading(what) as c:
            try:
                yield c
            except sqlite3.Error as exc:
                upgraded = self._upgraded(exc)
                if upgraded is None:
                    raise
                raise upgraded from None

    def _unreadable(self, batch: list[ObjectId], exc: sqlite3.DatabaseError) -> SnapvcError:
        """A damaged page of the file under the rows of ``batch`` (a bad block): the
        object when there is one, else the file, so that fsck can look one by one."""
        upgraded = self._upgraded(exc)
        if upgraded is not None:
            return upgraded
        if len(batch) == 1:
            return CorruptObjectError(batch[0], f"its row in {str(self.file.path)!r} cannot be read: {exc}")
        return RepositoryError(f"{str(self.file.path)!r}: {len(batch)} objects cannot be read ({exc}); "
                               f"run 'snapvc fsck'")

    def get(self, oid: ObjectId) -> bytes:
        with self.file.lock:
            try:
                row = self.file.conn.execute("SELECT CAST(data AS BLOB) FROM objects WHERE id = ?", (oid,)).fetchone()
            except sqlite3.DatabaseError as exc:
                raise self._unreadable([oid], exc) from None
        if row is None:
            raise ObjectNotFoundError(oid)
        data: bytes = row[0]  # CAST(... AS BLOB): bytes, whatever the row holds
        return data

    def put_many(self, items: Iterable[tuple[ObjectId, bytes]]) -> None:
        now = int(self._clock())
        rows = [(oid, data, now) for oid, data in items]
        if not rows:
            return
        with self.file.transaction() as c, self._writing():
            c.executemany(
                "INSERT INTO objects (id, data, mtime) VALUES (?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET mtime = excluded.mtime",
                rows,
            )

    def has_many(self, ids: Iterable[ObjectId]) -> set[ObjectId]:
        out: set[ObjectId] = set()
        c = self.file.conn
        with self._reading("table 'objects'"):
            for batch in batched(ids):
                marks = ",".join("?" * len(batch))
                out.update(ObjectId(r[0]) for r in c.execute(f"SELECT id FROM objects WHERE id IN ({marks})", batch))
        return out

    def ids_with_prefix(self, hex_prefix: str, limit: int = 2) -> list[ObjectId]:
        try:
            return self.file.ids_with_prefix("objects", hex_prefix, limit)
        except RepositoryError as exc:
            upgraded = self._upgraded(exc)
            if upgraded is None:
                raise
            raise upgraded from None

    def iter_ids(self) -> Iterator[ObjectId]:
        with self._reading("the ids of table 'objects'"):
            rows = self.file.conn.execute("SELECT rowid, id FROM objects").fetchall()
        return iter(self.file.read_ids("objects", rows))

    def mtimes(self, ids: Iterable[ObjectId]) -> dict[ObjectId, float]:
        out: dict[ObjectId, float] = {}
        damaged: dict[str, str] = {}
        c = self.file.conn
        with self._reading("the ages of table 'objects'"):
            for batch in batched(ids):
                marks = ",".join("?" * len(batch))
                for raw, mtime in c.execute(f"SELECT id, mtime FROM objects WHERE id IN ({marks})", batch):
                    if is_number(mtime):
                        out[ObjectId(raw)] = float(mtime)
                    else:  # an age gc cannot compare: it must not guess one
                        damaged[f"object {raw.hex()}"] = f"its age (mtime) {wrong(mtime)}, not a number"
        if damaged:
            raise self.file.damaged(damaged, out)
        return out

    def delete_many(self, ids: Iterable[ObjectId]) -> int:
        removed = 0
        with self.file.transaction() as c, self._writing():
            for batch in batched(ids):
                marks = ",".join("?" * len(batch))
                removed += c.execute(f"DELETE FROM objects WHERE id IN ({marks})", batch).rowcount
        return removed

    def dictionaries(self) -> dict[int, bytes]:
        # As bytes, whatever type the row holds: a damaged one then fails to decompress,
        # and every object that needs it is named as corrupt.
        with self._reading("table 'dictionaries'"):
            return dict(self.file.conn.execute("SELECT number, CAST(data AS BLOB) FROM dictionaries").fetchall())

    def put_dictionary(self, data: bytes) -> int:
        with self.file.transaction() as c, self._writing():
            # Files that hold dictionary frames need a snapvc that reads them.
            c.execute("UPDATE meta SET value = ? WHERE key = 'format' AND CAST(value AS INTEGER) < ?",
                      (str(DICTIONARY_FORMAT), DICTIONARY_FORMAT))
            number = c.execute("INSERT INTO dictionaries (data) VALUES (?)", (data,)).lastrowid
        assert number is not None  # an INSERT into a rowid table always sets it
        return number

    def sizes(self) -> StoreSizes:
        with self._reading("table 'objects'"):
            count, total = self.file.conn.execute("SELECT count(*), coalesce(sum(length(data)), 0) FROM objects").fetchone()
        return StoreSizes(objects=count, stored_bytes=total)

    def refresh(self) -> None:
        raise unsupported(self, "refresh")

    def get_unframed_many(self, ids: Iterable[ObjectId]) -> tuple[dict[ObjectId, bytes], dict[ObjectId, bytes]]:
        raise unsupported(self, "get_unframed_many")

    def close(self) -> None:
        pass
