"""Moving a format 1 or 2 file to format 3 (``snapvc upgrade``, ``Repository.upgrade``).

Formats 1 and 2 keep one zstd frame a row in table ``objects`` (format 2 also has
compression dictionaries, table ``dictionaries``); format 3 keeps objects in packs
(``snapvc.backends.sqlite.packs``) and commits and the reflog in lean rows. ``upgrade``:

1. in ONE write transaction: every object read through the old stack (decompressed and
   verified against its id: a damaged object stops the upgrade, which then changes
   nothing), written again as raw frames into packs in batches of ``BATCH_BYTES`` (so
   memory stays bounded), tables ``objects`` and ``dictionaries`` dropped, the commit
   index and the reflog moved to their lean rows (``commit_index.upgrade_to_lean``,
   ``refs.upgrade_to_lean``), and meta ``format`` set to 3. A crash at any instant leaves
   the file wholly at its old format or wholly at 3;
2. after it: ``auto_vacuum=INCREMENTAL`` (and 4 KiB pages, when no other connection has
   the file open) set by ``VACUUM``, which rewrites the file without the old tables'
   pages and is atomic itself;
3. the packs sealed (``SqlitePackStore.seal_all``: recompressed at a high level).

Another process that has the file open at its old format finds, at its next read or
write of objects, that table ``objects`` is gone: its store raises a ``RepositoryError``
telling it to open the file again (``snapvc.backends.sqlite.objects``). Nothing it writes
can land in the old tables: the transaction that would is refused and rolled back.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

from snapvc.backends.base import UpgradeResult
from snapvc.backends.sqlite import commit_index, refs
from snapvc.backends.sqlite.commit_index import SqliteCommitIndex
from snapvc.backends.sqlite.file import PACKS_FORMAT, PACKS_PAGE_SIZE, SqliteFile
from snapvc.backends.sqlite.layout import branch_states
from snapvc.backends.sqlite.objects import SqliteObjectStore
from snapvc.backends.sqlite.packs import SqlitePackStore
from snapvc.backends.sqlite.refs import SqliteRefStore
from snapvc.errors import RepositoryError
from snapvc.ids import ObjectId
from snapvc.store.codec import CompressedStore, VerifiedStore, open_object_store

__all__ = ["upgrade_file", "BATCH_BYTES"]

# Canonical bytes read from the old table and written as packs at a time: what the
# upgrade holds in memory besides the list of ids (32 bytes an object).
BATCH_BYTES = 8 << 20
# Ids read from the old table at a time (one statement's worth of bound variables).
_READ_IDS = 500
# PRAGMA auto_vacuum's value for INCREMENTAL.
_INCREMENTAL = 2


def _file_bytes(path: Path) -> int:
    """The file and its write-ahead log, as they take space on disk now."""
    total = 0
    for p in (path, Path(str(path) + "-wal")):
        try:
            total += os.path.getsize(p)
        except FileNotFoundError:
            pass
    return total


def _stored_format(c: sqlite3.Connection) -> int:
    row = c.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
    return int(row[0]) if row is not None and str(row[0]).isdigit() else 1


def _batches(old: VerifiedStore, ids: list[ObjectId]) -> Iterator[list[tuple[ObjectId, bytes]]]:
    """The objects of ``ids`` as (id, canonical bytes), read through the verified store
    ``old``, in batches of about ``BATCH_BYTES``."""
    batch: list[tuple[ObjectId, bytes]] = []
    size = 0
    for start in range(0, len(ids), _READ_IDS):
        wanted = ids[start : start + _READ_IDS]
        found = old.get_many(wanted)
        for oid in wanted:
            data = found.get(oid)
            if data is None:  # listed a moment ago in this same transaction: the file is damaged
                raise RepositoryError(f"object {oid.hex} is listed in table 'objects' but cannot be read; "
                                      f"run 'snapvc fsck' before upgrading")
            batch.append((oid, data))
            size += len(data)
            if size >= BATCH_BYTES:
                yield batch
                batch, size = [], 0
    if batch:
        yield batch


def upgrade_file(file: SqliteFile, clock: Callable[[], float] = time.time) -> UpgradeResult:
    """Move ``file`` to format 3 (see the module docstring); a file at 3 already is left
    as it is. The stores open over ``file`` in this process must be made again afterwards
    (``SqliteBackend.upgrade`` does): they speak the old layout."""
    path = str(file.path)
    before = _file_bytes(file.path)
    if file.format >= PACKS_FORMAT:
        with file.reading("the file's settings"):
            auto_vacuum = file.conn.execute("PRAGMA auto_vacuum").fetchone()[0]
        if auto_vacuum == _INCREMENTAL:
            return UpgradeResult(path, file.format, file.format, 0, before, before)
        # An upgrade stopped after its transaction (a crash before VACUUM): finish it.
        _finish(file, SqlitePackStore(file, clock))
        return UpgradeResult(path, file.format, file.format, 0, before, _file_bytes(file.path), finished=True)
    old_format = file.format
    moved = 0
    with file.transaction() as c:
        stored = _stored_format(c)
        if stored >= PACKS_FORMAT:
            # Upgraded by another process since this one opened it.
            raise RepositoryError(f"{path!r} was upgraded to format {stored} by another process while this one had "
                                  f"it open at format {old_format}: open it again")
        old_store = SqliteObjectStore(file, clock)
        old = open_object_store(old_store)
        ids = list(old.iter_ids())
        packs = SqlitePackStore(file, clock)
        # The pack store compresses frames together: CompressedStore hands it raw frames.
        new = CompressedStore(packs)
        for batch in _batches(old, ids):
            new.put_many(batch)
            moved += len(batch)
        packs.finish_stream()  # its last block FINISHED: sealed below like the rest
        c.execute("DROP TABLE objects")
        c.execute("DROP TABLE IF EXISTS dictionaries")
        commit_index.upgrade_to_lean(file)
        refs.upgrade_to_lean(file)
        c.execute("UPDATE meta SET value = ? WHERE key = 'format'", (str(PACKS_FORMAT),))
        if c.execute("SELECT changes()").fetchone()[0] == 0:  # a format 1 file may have no row yet
            c.execute("INSERT INTO meta (key, value) VALUES ('format', ?)", (str(PACKS_FORMAT),))
    file.format = PACKS_FORMAT
    _finish(file, packs)
    return UpgradeResult(path, old_format, PACKS_FORMAT, moved, before, _file_bytes(file.path))


def _finish(file: SqliteFile, packs: SqlitePackStore) -> None:
    """What follows the upgrade's transaction: compact the file, seal the packs (the
    branches' newest states first, as a sealer's: the refs and commits are at format 3
    by now)."""
    try:
        _compact(file)
        packs.read_roots = partial(branch_states, SqliteRefStore(file), SqliteCommitIndex(file))
        packs.seal_all()
    finally:
        packs.close()
    with file.lock:
        try:
            # The sealed packs into the file, so that its size says what it holds now.
            file.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.Error:
            pass  # busy with another process's reads: its log is folded in later


def _compact(file: SqliteFile) -> None:
    """Rewrite the file without its free pages, with ``auto_vacuum=INCREMENTAL`` (and 4
    KiB pages when this is the only connection: the page size cannot change in WAL mode,
    and leaving it needs the file to itself). ``VACUUM`` is atomic: a crash leaves the
    file as it was before it, at format 3 all the same."""
    with file.lock:
        c = file.conn
        # Fold the write-ahead log in first: VACUUM copies the file through it otherwise.
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        alone = False
        page_size = c.execute("PRAGMA page_size").fetchone()[0]
        if page_size != PACKS_PAGE_SIZE:
            try:
                alone = c.execute("PRAGMA journal_mode=DELETE").fetchone()[0].lower() == "delete"
            except sqlite3.OperationalError:
                alone = False  # another connection has the file open
        try:
            if alone:
                c.execute(f"PRAGMA page_size={PACKS_PAGE_SIZE}")
            c.execute("PRAGMA auto_vacuum=INCREMENTAL")
            c.execute("VACUUM")
        except sqlite3.Error as exc:
            # The upgrade itself is committed; only the space of the old tables is kept.
            raise RepositoryError(f"{str(file.path)!r} is at format {PACKS_FORMAT} now, but could not be compacted "
                                  f"({exc}); run 'snapvc upgrade' again when no other process writes it") from None
        finally:
            if alone:
                c.execute("PRAGMA journal_mode=WAL")
