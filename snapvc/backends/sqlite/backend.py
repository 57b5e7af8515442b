"""The embedded default backend: one SQLite file (``snapvc.backends.sqlite.file``) holding
objects, refs and reflog, the commit index and the repository's settings."""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from snapvc.backends.base import Backend, IdMap, UpgradeResult
from snapvc.backends.sqlite.commit_index import SqliteCommitIndex
from snapvc.backends.sqlite.file import BATCH, FORMAT_VERSION, PACKS_FORMAT, SqliteFile, wrong
from snapvc.backends.sqlite.layout import branch_states
from snapvc.backends.sqlite.objects import SqliteObjectStore
from snapvc.backends.sqlite.packs import SqlitePackStore
from snapvc.backends.sqlite.refs import SqliteRefStore
from snapvc.backends.sqlite.upgrade import upgrade_file
from snapvc.errors import InvalidArgumentError, RepositoryError

__all__ = ["SqliteBackend", "SqliteIdMap", "open_sqlite_backend"]

# An id map's name becomes a table name: nothing that could be SQL.
_TABLE_NAME = re.compile(r"[a-z][a-z0-9_]*")


class SqliteIdMap:
    """An ``IdMap`` in table ``name (id BLOB PRIMARY KEY, sha BLOB NOT NULL)`` of the file
    (``sha``: its first use, git export's map to git commit ids, named the column)."""

    def __init__(self, file: SqliteFile, name: str) -> None:
        if not _TABLE_NAME.fullmatch(name):
            raise InvalidArgumentError("name", f"an id map's name is a lowercase identifier, not {name!r}")
        self.file = file
        self.table = name
        file.make_tables([f"CREATE TABLE IF NOT EXISTS {name} (id BLOB PRIMARY KEY, sha BLOB NOT NULL)"])

    def get_many(self, ids: Sequence[bytes]) -> dict[bytes, bytes]:
        found: dict[bytes, bytes] = {}
        with self.file.reading(f"table {self.table!r}"):
            for start in range(0, len(ids), BATCH):
                batch = list(ids[start : start + BATCH])
                rows = self.file.conn.execute(
                    f"SELECT id, sha FROM {self.table} WHERE id IN ({','.join('?' * len(batch))})", batch).fetchall()
                found.update((bytes(i), bytes(s)) for i, s in rows)
        return found

    def put_many(self, pairs: Mapping[bytes, bytes]) -> None:
        with self.file.transaction() as c:
            # Values are a function of the id (git export: per layout version, which names
            # the table), so a row replaced holds the same value, never another.
            c.executemany(f"INSERT OR REPLACE INTO {self.table} (id, sha) VALUES (?, ?)", list(pairs.items()))


class SqliteBackend(Backend):
    """A ``Backend`` in one SQLite file: a transaction is one SQLite write transaction;
    the gc epoch and the settings are rows of table ``meta``."""

    def __init__(self, location: str, file: SqliteFile, clock: Callable[[], float] = time.time) -> None:
        # Format 3 keeps objects in packs; formats 1 and 2, one frame a row.
        objects = SqlitePackStore(file, clock) if file.format >= PACKS_FORMAT else SqliteObjectStore(file, clock)
        refs, commits = SqliteRefStore(file, clock), SqliteCommitIndex(file, clock)
        if isinstance(objects, SqlitePackStore):
            # Bound to the ref store and the commit index only: the pack store holds no
            # reference back to its backend.
            objects.read_roots = partial(branch_states, refs, commits)
        super().__init__(location, objects, refs, commits)
        self.file = file
        self._clock = clock
        # (the file's data version, the gc epoch) when the epoch was last read (``gc_epoch``)
        self._epoch: tuple[int, int] | None = None

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.file.transaction():
            yield

    @contextmanager
    def consistent_read(self) -> Iterator[None]:
        """One read transaction of the file (``SqliteFile.snapshot``)."""
        with self.file.snapshot():
            yield

    def gc_epoch(self) -> int:
        """The count of sweeps, read again only when another connection wrote to the file
        since it was last read (``SqliteFile.data_version``, read first: a write landing
        between the two reads changes it again) or this one bumped it: a commit checks it
        in its transaction without a read of table ``meta``."""
        with self.file.lock:
            version = self.file.data_version()
            known = self._epoch
            if known is not None and known[0] == version:
                return known[1]
            stored = self.file.get_meta("gc_epoch")
            if stored is not None and not (type(stored) is str and stored.isascii() and stored.isdigit()):
                # Guessing would let a writer keep caches that may name deleted objects.
                raise self.file.damaged({"table 'meta' key 'gc_epoch'": f"it {wrong(stored)}, not a count of sweeps"})
            epoch = int(stored or 0)
            self._epoch = (version, epoch)
            return epoch

    def bump_gc_epoch(self) -> None:
        self._epoch = None
        try:
            self.file.set_meta("gc_epoch", str(self.gc_epoch() + 1))
        finally:
            self._epoch = None  # read again: the transaction it joined may yet roll back

    def get_setting(self, key: str) -> str | None:
        return self.file.get_meta(f"setting:{key}")

    def set_setting(self, key: str, value: str) -> None:
        self.file.set_meta(f"setting:{key}", value)

    @property
    def durability(self) -> str:
        return self.file.durability

    def set_durability(self, durability: str) -> None:
        self.file.set_durability(durability)

    def release_space(self) -> None:
        """After a sweep, a format 3 file seals every pack still to seal (as ``git gc``
        repacks) and gives the pages freed back to the file system
        (``SqliteFile.release_free_pages``)."""
        if isinstance(self.objects, SqlitePackStore):
            self.objects.seal_all()
        self.file.release_free_pages()

    def id_map(self, name: str) -> IdMap:
        """The ``IdMap`` called ``name``, kept in the file as a table of that name."""
        return SqliteIdMap(self.file, name)

    def upgrade(self) -> UpgradeResult:
        """Move a format 1 or 2 file to format 3 (``snapvc.backends.sqlite.upgrade``),
        then open this backend's stores again in the new layout."""
        result = upgrade_file(self.file, self._clock)
        if result.old_format != result.new_format:
            self.objects.close()
            self.objects = SqlitePackStore(self.file, self._clock)
            self.refs = SqliteRefStore(self.file, self._clock)
            self.commits = SqliteCommitIndex(self.file, self._clock)
        return result

    def integrity_problems(self) -> list[str]:
        """SQLite's own check of the file (b-trees, pages, indexes): what it reports, up
        to 20 problems; a check that cannot run is one problem."""
        path = str(self.file.path)
        try:
            with self.file.lock:
                rows = [r[0] for r in self.file.conn.execute("PRAGMA integrity_check(20)")]
        except (sqlite3.Error, RepositoryError) as exc:
            return [f"SQLite's integrity check of {path!r} failed: {exc}"]
        return [] if rows == ["ok"] else [f"SQLite's integrity check of {path!r}: {row}" for row in rows]

    def close(self) -> None:
        super().close()
        self.file.close()


def open_sqlite_backend(path: str, *, create: bool = True, durability: str = "normal",
                        clock: Callable[[], float] | None = None, format: int = FORMAT_VERSION) -> SqliteBackend:
    """The repository in the SQLite file at ``path`` (created unless ``create`` is False;
    a new file is made at ``format``, 3 or 2, which releases before 3 read)."""
    file = SqliteFile(Path(path), create=create, durability=durability, format=format)
    try:
        return SqliteBackend(path, file, clock or time.time)
    except BaseException:
        file.close()
        raise
