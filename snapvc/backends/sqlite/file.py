"""The embedded default's file: one SQLite file holds objects, refs, reflog and the commit index.

``SqliteFile`` owns the connection, the file's identity (``application_id``), the format
version, the durability mode, the table ``meta`` and the write-ahead log's checkpoints;
each store over it (objects in ``snapvc.backends.sqlite.objects``, refs in
``snapvc.backends.sqlite.refs``, the commit index in ``snapvc.backends.sqlite.commit_index``)
creates its own tables on it. The file runs in WAL mode.

Durability modes (``snapvc.open(path, durability=...)``):

=========  ====================  =====================================================
mode       SQLite synchronous    what survives
=========  ====================  =====================================================
``sync``   FULL                  every returned commit survives a process crash and a
                                 power loss
``normal`` NORMAL (default)      every returned commit survives a process crash; a
                                 power loss may lose the last few commits, never the
                                 file's consistency
``batch``  OFF                   every returned commit survives a process crash; a
                                 power loss may lose recent commits or, rarely, damage
                                 the file: for bulk imports and throwaway runs
=========  ====================  =====================================================

A file this process may not write (on a read-only file system, such as a backup snapshot
or a read-only mount; not writable by this user; in a folder where SQLite cannot keep its
write-ahead log) is opened read-only (SQLite's ``mode=ro``): everything reads, and every
write is refused with a ``RepositoryError`` saying why. Where SQLite cannot make the
``-shm`` file it reads a log with, and no log holds changes, the file is read as it is
(``immutable=1``); a log holding changes it cannot read is refused with that reason, never
read past.
"""

from __future__ import annotations

import os
import re
import sqlite3
import stat
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from snapvc.backends.base import check_durability
from snapvc.errors import (
    DamagedRowsError,
    FormatVersionError,
    InvalidArgumentError,
    NotARepositoryError,
    RepositoryError,
    RepositoryFolderError,
    RepositoryNotFoundError,
)
from snapvc.ids import ID_SIZE, ObjectId

__all__ = ["SqliteFile", "BackgroundWork", "SYNCHRONOUS", "FORMAT_VERSION", "DICTIONARY_FORMAT", "PACKS_FORMAT", "CREATABLE_FORMATS",
           "APPLICATION_ID", "BATCH",
           "batched", "wrong", "is_number"]

# 'snvc' — marks the SQLite file as a snapvc repository.
APPLICATION_ID = 0x736E7663
# Format 1: the first; format 2 adds compression dictionaries (codec 2 frames). A file
# stays at 1 until a dictionary is written into it. Format 3 keeps objects in packs
# (``snapvc.backends.sqlite.packs``: zstd streams that span commits) and commits and the
# reflog in lean rows; new files are made at 3, older ones move by ``upgrade``
# (``snapvc.backends.sqlite.upgrade``).
FORMAT_VERSION = 3
DICTIONARY_FORMAT = 2
PACKS_FORMAT = 3
# The formats a new file may be made at (``snapvc.open(path, format=2)`` writes a file
# that snapvc releases before format 3 read).
CREATABLE_FORMATS = (2, 3)
# The durability modes (``snapvc.backends.base.DURABILITY_MODES``) as SQLite's ``synchronous``.
SYNCHRONOUS = {"sync": "FULL", "normal": "NORMAL", "batch": "OFF"}
_SQLITE_MAGIC = b"SQLite format 3\x00"
# Stored frames run from a few bytes to ~8 KB: 8 KiB pages leave less unused space at the
# end of each page than the default 4 KiB (measured: 3% smaller files on agent runs).
PAGE_SIZE = 8192
# Format 3 keeps objects in a few large rows (packs) and the rest in small tables, each of
# which takes at least a page: there 4 KiB pages waste less (measured on the agent run:
# 8 KiB pages add ~40 KB, a few tables' one mostly empty page each).
PACKS_PAGE_SIZE = 4096
WAL_BYTES = 256 << 10
# The write-ahead log may outgrow WAL_BYTES while a background checkpoint runs; past this,
# the next commit folds it in itself.
WAL_MAX_BYTES = 4 * WAL_BYTES
# How long a statement waits for another connection's lock before it fails (ms).
BUSY_TIMEOUT_MS = 30000
# SQLite's default limit on bound variables per statement is 32766; stay well below.
BATCH = 500


def wrong(value: object) -> str:
    """What a stored value is, for an error about a damaged row: ``is 3 bytes``, ``is text 'old'``."""
    if value is None:
        return "is NULL"
    if isinstance(value, bytes):
        return f"is {len(value)} bytes"
    if isinstance(value, str):
        return f"is text {value[:40]!r}"
    return f"is the number {value!r}"


def is_number(value: object) -> bool:
    """Whether a stored value is a number (a time, an age): SQLite hands back int or float."""
    return type(value) is int or type(value) is float


def _file_kind(mode: int) -> str:
    """What a path that is not a regular file or a folder is, for an error message."""
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _read_only_reason(path: Path) -> str | None:
    """Why this process may not write the repository file at ``path``, or None if it may."""
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return "it is on a read-only file system"
    except (AttributeError, OSError):  # no statvfs (Windows): the checks below decide
        pass
    if not _may_write(path):
        return "this user may not write the file"
    if (why := _unwritable_folder(path.parent)) is not None and not all(
            _may_write(Path(f"{path}{end}")) for end in ("-wal", "-shm")):
        return f"its folder {why}, and SQLite keeps its write-ahead log there"
    return None


def _unwritable_folder(folder: Path) -> str | None:
    """Why files cannot be made in ``folder``, or None if they can."""
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "is on a read-only file system"
    except (AttributeError, OSError):
        pass
    return None if _may_write(folder, os.W_OK | os.X_OK) else "may not be written by this user"


def _may_write(path: Path, mode: int = os.W_OK) -> bool:
    effective = os.access in os.supports_effective_ids
    return os.access(path, mode, effective_ids=effective)


_CREATED = re.compile(r"CREATE (?:UNIQUE )?(?:TABLE|INDEX) IF NOT EXISTS (\w+)")


def _created_name(statement: str) -> str:
    """The table or index a ``CREATE ... IF NOT EXISTS`` statement makes (any other
    statement stands for itself: no name in the file, so it always runs)."""
    found = _CREATED.match(statement)
    return found.group(1) if found is not None else statement


class SqliteFile:
    """One open snapvc SQLite file, shared by the stores that live in it."""

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True, durability: str = "normal",
                 format: int = FORMAT_VERSION) -> None:
        check_durability(durability)
        if format not in CREATABLE_FORMATS:
            raise InvalidArgumentError("format", f"a new file is made at format {' or '.join(map(str, CREATABLE_FORMATS))}, "
                                                 f"not {format!r}")
        self._new_format = format
        # The file's format version, read (or set, for a new file) when it opens.
        self.format = format
        self.path = Path(path)
        self.durability = durability
        # Why this process may not write the file (see the module notes), or None.
        self.read_only: str | None = None
        exists = self.path.exists()
        if not exists and not create:
            raise RepositoryNotFoundError(f"no snapvc repository at {str(self.path)!r}")
        if exists:
            self._check_foreign_file(create)
            self.read_only = _read_only_reason(self.path)
        elif not self.path.parent.exists():
            raise RepositoryFolderError(f"cannot create {str(self.path)!r}: folder {str(self.path.parent)!r} does not exist")
        elif not self.path.parent.is_dir():
            raise RepositoryFolderError(f"cannot create {str(self.path)!r}: {str(self.path.parent)!r} is a file, not a folder")
        elif (why := _unwritable_folder(self.path.parent)) is not None:
            raise RepositoryFolderError(f"cannot create {str(self.path)!r}: folder {str(self.path.parent)!r} {why}")
        # isolation_level=None: we issue BEGIN/COMMIT ourselves, so write order is explicit.
        try:
            self.conn = self._connect_read_only() if self.read_only else sqlite3.connect(
                str(self.path), isolation_level=None, check_same_thread=False, timeout=30.0)
        except sqlite3.Error as exc:  # no permission to the file or its folder, and the like
            raise RepositoryError(f"cannot open {str(self.path)!r}: {exc}") from None
        self.lock = threading.RLock()
        self._depth = 0
        # ``PRAGMA data_version`` as read in the write transaction in progress (None: not
        # read in it yet): no other connection commits before it ends (``data_version``).
        self._write_version: int | None = None
        self._schema: set[str] = set()  # the names in sqlite_master, as ``_setup`` and ``make_tables`` know them
        # Called, newest first, when the write transaction in progress rolls back: a store
        # drops what it remembered of that write (``on_rollback``).
        self._rollback_hooks: list[Callable[[], None]] = []
        self._checkpointer: _Checkpointer | None = None
        try:
            self._setup(exists, create)
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            raise NotARepositoryError(f"{str(self.path)!r} is not a snapvc repository: {exc}") from None
        except BaseException:  # refused (a newer format, a damaged one): not left open
            self.conn.close()
            raise

    def _connect_read_only(self) -> sqlite3.Connection:
        """A read-only connection (``mode=ro``); ``immutable=1`` where SQLite cannot make
        the ``-shm`` file beside the file and no write-ahead log holds changes."""
        uri = f"file:{urllib.parse.quote(os.path.abspath(self.path))}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=30.0)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.OperationalError as exc:
            conn.close()
            # No -shm file, and none can be made: CANTOPEN on a read-only file system,
            # READONLY_DIRECTORY (or READONLY_CANTINIT) in a folder the user may not write.
            code = getattr(exc, "sqlite_errorcode", 0)
            if code != sqlite3.SQLITE_CANTOPEN and code & 0xFF != sqlite3.SQLITE_READONLY:
                raise
        try:
            logged = os.stat(self._wal_path).st_size
        except FileNotFoundError:
            logged = 0
        if logged:
            raise RepositoryError(
                f"{str(self.path)!r} cannot be read: {self.read_only}, and its write-ahead log {self._wal_path!r} holds "
                f"changes not yet in the file, which SQLite reads only with {str(self.path) + '-shm'!r}, which it cannot "
                f"make there; copy the file with its -wal file to a folder you may write, and open the copy")
        return sqlite3.connect(uri + "&immutable=1", uri=True, isolation_level=None, check_same_thread=False,
                               timeout=30.0)

    def _check_foreign_file(self, create: bool) -> None:
        """Refuse what is not a snapvc file before SQLite touches it: a folder; a pipe, a
        socket or a device (opening a pipe waits for a writer forever, and SQLite would
        write into a device); a file of another format; and, unless asked to create a
        repository, an empty file, which SQLite would silently turn into one."""
        mode = self.path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise NotARepositoryError(f"{str(self.path)!r} is a folder, not a snapvc repository file")
        if not stat.S_ISREG(mode):
            raise NotARepositoryError(f"{str(self.path)!r} is {_file_kind(mode)}, not a snapvc repository file")
        # O_NONBLOCK: should the path become a pipe after the check above, the read below
        # returns at once instead of waiting for a writer.
        fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise NotARepositoryError(f"{str(self.path)!r} is not a regular file, not a snapvc repository file")
            head = os.read(fd, len(_SQLITE_MAGIC))
        finally:
            os.close(fd)
        if not head and not create:
            raise NotARepositoryError(f"{str(self.path)!r} is an empty file, not a snapvc repository")
        if head and head != _SQLITE_MAGIC:
            raise NotARepositoryError(f"{str(self.path)!r} is not a snapvc repository (not an SQLite file)")

    def _setup(self, existed: bool, create: bool) -> None:
        c = self.conn
        app_id = c.execute("PRAGMA application_id").fetchone()[0]
        # The tables and indexes there are: a store's ``make_tables`` writes only when one is missing.
        self._schema = {name for (name,) in c.execute("SELECT name FROM sqlite_master")}
        has_tables = bool(self._schema)
        if app_id != APPLICATION_ID and (app_id != 0 or has_tables):
            raise NotARepositoryError(
                f"{str(self.path)!r} is an SQLite file of another application (application_id {app_id:#x})"
            )
        if app_id != APPLICATION_ID and (not create or self.read_only):
            # An empty database: it becomes a repository only when creation was asked for.
            made = f" (and it cannot be made one: {self.read_only})" if create else ""
            raise NotARepositoryError(f"{str(self.path)!r} is an empty SQLite database, not a snapvc repository{made}")
        if not existed or not has_tables:
            page_size = PACKS_PAGE_SIZE if self._new_format >= PACKS_FORMAT else PAGE_SIZE
            c.execute(f"PRAGMA page_size={page_size}")  # fixed once the file has pages
            if self._new_format >= PACKS_FORMAT:
                # Packs are rewritten as they are recompressed and repacked: the pages they
                # free go back to the file system (``release_free_pages``), not kept as
                # free space inside the file.
                c.execute("PRAGMA auto_vacuum=INCREMENTAL")
        if not self.read_only:
            c.execute("PRAGMA journal_mode=WAL")
        c.execute(f"PRAGMA synchronous={SYNCHRONOUS[self.durability]}")
        c.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        # The write-ahead log is folded into the file by a background thread once it holds
        # WAL_BYTES (see ``_Checkpointer``), not by the commit that crosses the mark, and is
        # truncated back to that size, so the store on disk is never much larger than what
        # it holds and no commit waits for a checkpoint's fsync.
        c.execute("PRAGMA wal_autocheckpoint=0")
        c.execute("PRAGMA journal_size_limit=0")
        if app_id != APPLICATION_ID:
            with self.transaction():
                c.execute(f"PRAGMA application_id={APPLICATION_ID}")
                # (WITHOUT ROWID in format 3: a table keyed by text needs no second index.)
                lean = " WITHOUT ROWID" if self._new_format >= PACKS_FORMAT else ""
                c.execute(f"CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL){lean}")
                # A process that made the file first wrote these rows already: keep them
                # (only an existing key is skipped, never a row that breaks a constraint).
                c.execute(
                    "INSERT INTO meta (key, value) VALUES ('format', ?), ('created', ?) ON CONFLICT (key) DO NOTHING",
                    ("1" if self._new_format < PACKS_FORMAT else str(self._new_format), str(time.time())),
                )
        stored = self.get_meta("format")
        if stored is not None and not (type(stored) is str and stored.isascii() and stored.isdigit()):
            raise FormatVersionError(
                f"{str(self.path)!r} records its format version as {stored!r}, which is no version number: the "
                f"file is damaged, or another tool wrote its table 'meta'"
            )
        version = int(stored or 1)
        if version > FORMAT_VERSION:
            raise FormatVersionError(
                f"{str(self.path)!r} has format version {version}; this snapvc reads up to {FORMAT_VERSION}: upgrade snapvc"
            )
        self.format = version

    def on_rollback(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` if the write transaction in progress rolls back (a store drops
        what it remembered of the write); forgotten once the transaction commits."""
        assert self._depth, "on_rollback is for a write transaction in progress"
        self._rollback_hooks.append(hook)

    def release_free_pages(self) -> None:
        """Give the pages freed inside the file (a pack rewritten) back to the file
        system, in a format 3 file (``auto_vacuum=INCREMENTAL``); nothing in older ones.
        Not inside a write transaction: it runs after one."""
        with self.lock:
            if self._depth:
                return
            try:
                # executescript steps the pragma to its end (execute frees one page a step).
                self.conn.executescript("PRAGMA incremental_vacuum;")
            except sqlite3.Error:
                pass  # busy with another writer: the next call frees them

    def set_durability(self, durability: str) -> None:
        """Change the durability mode of this connection from the next commit on."""
        check_durability(durability)
        with self.lock:
            self.conn.execute(f"PRAGMA synchronous={SYNCHRONOUS[durability]}")
            self.durability = durability

    def data_version(self) -> int:
        """SQLite's ``PRAGMA data_version`` (the caller holds the lock): another number once
        another connection committed a write since this one last read it. Read once in a
        write transaction, which no other connection's write can follow until it ends."""
        if self._depth and self._write_version is not None:
            return self._write_version
        version: int = self.conn.execute("PRAGMA data_version").fetchone()[0]
        if self._depth:
            self._write_version = version
        return version

    def get_meta(self, key: str) -> str | None:
        with self.reading(f"the setting {key!r} of table 'meta'"):
            row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    @contextmanager
    def reading(self, what: str) -> Iterator[sqlite3.Connection]:
        """The connection, under the lock, for a read of ``what`` (e.g. ``"ref
        'refs/heads/main'"``): SQLite's error on a damaged file (a bad page, a record that
        does not decode) becomes a ``RepositoryError`` naming the file and what was read."""
        with self.lock:
            try:
                yield self.conn
            except sqlite3.Error as exc:
                raise RepositoryError(f"{str(self.path)!r}: {what} cannot be read: {exc}") from None

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction, under the lock: every read inside (refs, reflog, packs,
        the commit index, ``meta``), whichever store makes it, sees the file as it was
        when the snapshot began, never a write another connection committed meanwhile
        (WAL mode: writers go on beside it). For fsck, which must not take a ref that
        moved while it read for damage. Inside a write transaction, that transaction is
        the snapshot. Writers of this process wait for the lock until it ends."""
        with self.lock:
            c = self.conn
            if c.in_transaction:
                yield c
                return
            try:
                c.execute("BEGIN")
                # A deferred transaction takes its snapshot at its first read: now (a
                # read of the file's header only, which every open has read already).
                c.execute("PRAGMA schema_version").fetchone()
            except sqlite3.Error as exc:
                if c.in_transaction:
                    c.execute("ROLLBACK")
                raise RepositoryError(f"{str(self.path)!r}: cannot start a read: {exc}") from None
            try:
                yield c
            finally:
                if c.in_transaction:
                    c.execute("ROLLBACK")  # a read: nothing to keep

    def damaged(self, rows: dict[str, str], readable: object = None) -> DamagedRowsError:
        """The error for rows of this file holding values of the wrong type or size."""
        return DamagedRowsError(str(self.path), rows, readable)

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction() as c:
            c.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                      (key, value))

    def make_tables(self, statements: Iterable[str]) -> None:
        """Run a store's ``CREATE ... IF NOT EXISTS`` statements, in one write, unless
        the file has every table and index they name already (as when it opened: an
        open then takes no write lock); in a file opened read-only, none: its tables
        are there, or a read of one that is not says so."""
        statements = list(statements)
        names = {_created_name(statement) for statement in statements}
        if self.read_only or names <= self._schema:
            return
        with self.transaction() as c:
            for statement in statements:
                c.execute(statement)
        self._schema |= names

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (BEGIN IMMEDIATE); nested uses join the outer one. A
        ``RepositoryError`` saying why in a file opened read-only."""
        if self.read_only:
            raise RepositoryError(f"{str(self.path)!r} is open read-only ({self.read_only}): it can be read, "
                                  f"not written; nothing was written")
        with self.lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self.conn
                finally:
                    self._depth -= 1
                return
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:  # locked by another writer past the busy timeout, and the like
                raise RepositoryError(f"{str(self.path)!r}: cannot start a write: {exc}") from exc
            self._depth = 1
            self._write_version = None
            try:
                yield self.conn
                self.conn.execute("COMMIT")
                self._rollback_hooks.clear()
            except BaseException as exc:
                # SQLite has rolled back already after some errors (a full disk): then a
                # ROLLBACK of ours would fail and hide the error that matters.
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                hooks, self._rollback_hooks = self._rollback_hooks, []
                for hook in reversed(hooks):
                    hook()
                if isinstance(exc, sqlite3.Error):
                    raise RepositoryError(f"{str(self.path)!r}: {exc}; the write was rolled back, the repository "
                                          f"is as it was before it") from exc
                raise
            finally:
                self._depth = 0
                self._write_version = None
        self._maybe_checkpoint()

    def _maybe_checkpoint(self) -> None:
        try:
            size = os.stat(self._wal_path).st_size
        except FileNotFoundError:
            return
        if size >= WAL_MAX_BYTES:
            # Writes outran the background checkpoints: fold the log in here, once. (Not
            # during one of ours: SQLite runs one checkpoint at a time, and would refuse.)
            # Without waiting: a long reader (an fsck's snapshot) keeps the log from
            # being reset, and a commit must not wait for it (SQLite would wait the busy
            # timeout, on every commit while the reader lasts); what can be copied is,
            # and a later commit resets the log.
            with self.lock, self._checkpointer.running if self._checkpointer is not None else nullcontext():
                self.conn.execute("PRAGMA busy_timeout=0")
                try:
                    self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                finally:
                    self.conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        elif size >= WAL_BYTES:
            if self._checkpointer is None:
                self._checkpointer = _Checkpointer(self.path)
            self._checkpointer.request()

    def ids_with_prefix(self, table: str, hex_prefix: str, limit: int) -> list[ObjectId]:
        """Up to ``limit`` ids of ``table`` (keyed by a 32-byte ``id``) whose hex form
        starts with ``hex_prefix``: a range scan between the prefix padded with 0s and with fs."""
        digits = hex_prefix.lower()
        low = bytes.fromhex((digits + "0" * 64)[:64])
        high = bytes.fromhex((digits + "f" * 64)[:64])
        with self.reading(f"table {table!r}"):
            rows = self.conn.execute(
                f"SELECT rowid, id FROM {table} WHERE id >= ? AND id <= ? ORDER BY id LIMIT ?", (low, high, limit)
            ).fetchall()
        return self.read_ids(table, rows)

    def read_ids(self, table: str, rows: Iterable[tuple[int, object]]) -> list[ObjectId]:
        """The ids of ``(rowid, id)`` rows of ``table``; ``DamagedRowsError`` naming each row
        whose id is not 32 bytes (with the ids that are, for fsck)."""
        ids: list[ObjectId] = []
        damaged: dict[str, str] = {}
        for rowid, raw in rows:
            if type(raw) is bytes and len(raw) == ID_SIZE:
                ids.append(ObjectId(raw))
            else:
                damaged[f"table {table!r} row {rowid}"] = f"its id {wrong(raw)}, not 32 bytes"
        if damaged:
            raise self.damaged(damaged, ids)
        return ids

    @property
    def _wal_path(self) -> str:
        return str(self.path) + "-wal"

    def close(self) -> None:
        with self.lock:
            if self._checkpointer is not None:
                self._checkpointer.stop()
                self._checkpointer = None
            self.conn.close()


_CHECKPOINT_PASSES = 4


class BackgroundWork:
    """A daemon thread that runs ``work`` once each time it is asked (``request``; asks
    that come while it works make one more pass, not one each) until ``stop``, which
    waits for the pass under way. ``work`` checks ``stopping`` to give up early. Used by
    the write-ahead log's checkpoints and the pack store's sealer."""

    def __init__(self, name: str) -> None:
        self._wanted = threading.Event()
        self.stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def request(self) -> None:
        self._wanted.set()

    def stop(self, wait: bool = True) -> None:
        """End the thread; ``wait``: until the pass under way is over."""
        self.stopping = True
        self._wanted.set()
        if wait:
            self._thread.join()

    def work(self) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """Run in the thread once it stops (release what ``work`` opened)."""

    def _run(self) -> None:
        try:
            while True:
                self._wanted.wait()
                self._wanted.clear()
                if self.stopping:
                    return
                self.work()
        finally:
            self.finish()


class _Checkpointer(BackgroundWork):
    """Folds the write-ahead log into the file when asked, with a connection of its own
    (``PRAGMA wal_checkpoint(PASSIVE)``: it never takes the write lock, so commits go on
    meanwhile; the next commit after a complete one starts the log from its beginning).
    SQLite releases the GIL while it works, so the checkpoint's page copies and its fsync
    run beside the caller's work instead of inside one unlucky commit."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._conn: sqlite3.Connection | None = None
        self.running = threading.Lock()  # held while a checkpoint runs
        super().__init__(f"snapvc-checkpoint-{path.name}")

    def work(self) -> None:
        if self._conn is None:
            self._conn = sqlite3.connect(str(self._path), isolation_level=None, check_same_thread=False, timeout=30.0)
        # Each pass copies what the log held when it began; commits meanwhile add more.
        # The log restarts from its beginning only once all of it is copied.
        with self.running:
            for _ in range(_CHECKPOINT_PASSES):
                try:
                    busy, logged, copied = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                except sqlite3.Error:
                    break  # busy or closing: the next request tries again; close checkpoints anyway
                if busy or copied >= logged or self.stopping:
                    break

    def finish(self) -> None:
        if self._conn is not None:
            self._conn.close()


def batched(ids: Iterable[ObjectId]) -> Iterator[list[ObjectId]]:
    """``ids`` in lists of at most ``BATCH``: one statement's worth of bound variables
    (``WHERE id IN (?, ?, ...)``), for every table of the file."""
    batch: list[ObjectId] = []
    for oid in ids:
        batch.append(oid)
        if len(batch) >= BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


