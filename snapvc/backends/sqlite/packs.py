"""Objects in packs: how a format 3 SQLite file keeps them.

A commit's new objects are written as one *block*: their frames (raw frames, codec 0:
this store declares ``StoreCapabilities.compresses``, see ``snapvc.store.codec``) one
after another, compressed as the next block of a zstd *stream* that the writing process
keeps open across its commits (``compressobj`` flushed once per block). Each block is
compressed with every earlier block of its stream as context, so what a commit stores
again — the growing last leaf of a message list, the spine above it — costs a few bytes
of back-references, not the bytes themselves, and no object waits for a later one: the
block is on disk when the commit returns. A stream ends after ``STREAM_BLOCKS`` blocks
or ``STREAM_BYTES`` of frames, or when its repository closes; the next write starts
another. A large write (a first commit of a large state) goes to packs of its own of at
most ``PACK_BYTES`` each, compressed on every core.

Then, in the background, finished streams are *sealed*: the ``Sealer`` reads them,
recompresses their frames as one zstd frame at ``SEAL_LEVEL`` (joined with recent small
sealed packs, up to ``JOIN_BYTES``; ``seal_parameters``), and swaps the new pack in for
the rows it replaces in one short transaction. What a seal holds is its own and brief:
the frames it read, then the bytes it compresses in one call with a context made for
that pack (a few MiB), then the pack; what it decoded to read them is not kept. It never
holds the write lock while it compresses, and a crash at any instant leaves either the
old rows or the new pack: the objects are always there.
A sealed pack puts first what a fresh read asks for first: the branches' newest states,
from their roots down (``snapvc.backends.sqlite.layout``); only the order of its objects
changes, which its ``ids`` and ``sizes`` record as for any pack.

Table ``packs`` (one row a block or a pack)::

    number  INTEGER PRIMARY KEY  the block's number
    stream  INTEGER NOT NULL     the number of its stream's first block (its own, for a pack)
    state   INTEGER NOT NULL     OPEN: its writer may append to the stream; FINISHED: the
                                 stream's last block; PACKED: a pack written whole, at the
                                 write level, or rewritten by gc (still to seal); SEALED:
                                 a pack sealed at SEAL_LEVEL
    time    INTEGER NOT NULL     when it was written (seconds): the age of its objects for
                                 gc's grace period (a sealed pack: the youngest it joined)
    ids     BLOB NOT NULL        its objects' ids, 32 bytes each, in order
    sizes   BLOB NOT NULL        each object's frame length, in order: 32-bit unsigned
                                 little-endian integers, zstd-compressed
    data    BLOB NOT NULL        the zstd bytes of this block

Finding an object by id: every row's ``ids`` and ``sizes`` are read into memory the first
time any object is looked up (the *directory*: id -> stream, offset in the stream's
decoded bytes, length; its first ``SEARCHES`` lookups search the rows' ``ids``, and only
a read of more indexes every id), then kept current: ``PRAGMA data_version`` tells when another
connection wrote, and meta key ``pack_generation`` (bumped by every swap and gc) whether
rows were replaced (a full reload) or only added (read the new rows). A read decodes a
stream from its start up to what it needs, and keeps the decoded bytes and the
decompressor (``_StreamReader``) so that the next read of the same stream goes on from
there; a pack's row is fetched from the file in parts (``FETCH_BYTES`` first), as far as
the read decodes. A pack (one whole zstd frame) is decoded by zstd's stream reader
straight into the decoded bytes, to the end of the furthest object asked for
(``FrameReader``); a stream of blocks, which may grow or end without a last block, a
few whole blocks at a time (``BlockFeeder``).

Deleting (gc) rewrites every stream holding a deleted object without it, as a pack; a
writer whose open stream was rewritten meanwhile finds its last block gone and starts a
new stream (a block is only ever appended after the block its compressor last wrote).

Damage: a row whose values are of the wrong type, out of range (a time beyond year 9999,
sizes declaring more than ``MAX_STREAM_BYTES``) or that follows such a row in its stream
is left out of the directory and named (``iter_ids`` raises ``DamagedRowsError``, which
fsck reports and gc sweeps around: ``drop_damaged``). A stream is never decoded beyond
what its rows declare (``FrameReader``, ``BlockFeeder``), and one that decodes to more is corrupt. The
sealer leaves a pack it cannot read as it is and seals the rest; it never stops a
commit or ``close``.

Threads: everything here runs under the file's lock, except the sealer's compression.
"""

from __future__ import annotations

import array
import logging
import sqlite3
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from itertools import accumulate

import zstandard

from snapvc.backends.sqlite.file import BackgroundWork, SqliteFile, batched, is_number, wrong
from snapvc.backends.sqlite.layout import WALK_BYTES, read_order
from snapvc.errors import CorruptObjectError, ObjectNotFoundError, RepositoryError, SnapvcError
from snapvc.ids import ID_SIZE, ObjectId
from snapvc.store.base import StoreCapabilities, StoreSizes, unsupported, with_prefix
from snapvc.store.codec import (
    BLOCK_MAX,
    MAX_OBJECT,
    WINDOW_MAX,
    BlockFeeder,
    FrameReader,
    decompress_bounded,
    raw_frame_body,
)

__all__ = ["SqlitePackStore", "OPEN", "FINISHED", "PACKED", "SEALED", "STREAM_BLOCKS", "STREAM_BYTES", "PACK_BYTES",
           "JOIN_BYTES", "SEAL_LEVEL", "SEAL_TABLE_LOG", "SEAL_SEARCH_LOG", "SEAL_MIN_MATCH", "SEAL_STRATEGY",
           "seal_parameters", "seal_compressor"]

OPEN, FINISHED, PACKED, SEALED = 0, 1, 2, 3
_STATES = {OPEN: "open", FINISHED: "finished", PACKED: "packed", SEALED: "sealed"}

# Blocks are compressed fast, as they are written; the sealer recompresses them together
# at a level where zstd searches further back for matches. Measured on the agent run's
# 4.9 MB of frames (500 steps), as one pack: level 3 makes 783 KB in 20 ms, level 9
# 633 KB in 82 ms, level 12 612 KB in 0.2 s, level 19 557 KB in 1.7 s, with a context of
# 40-80 MiB. Level 9 keeps sealing a fraction of what the commits cost (1.2 s of CPU for
# those 500 steps) and its context near 20 MiB (with a window of JOIN_BYTES: on 2,000
# steps' 16.6 MB of frames, 8 MiB packs are 1.89 MB where level 9's own 4 MiB window
# makes 2.14 MB, and level 19 1.67 MB in 25 times the time).
WRITE_LEVEL = 3
SEAL_LEVEL = 9
# The sealer's match finder (``seal_parameters``): zstd's lazy search, with tables of at
# most 2^SEAL_TABLE_LOG entries, SEAL_SEARCH_LOG candidates a position and matches of
# SEAL_MIN_MATCH bytes or more (frames repeat whole ids and runs of text, not short
# sequences). Measured on the agent run's 500 steps (4.9 MB of frames, one pack) and on
# 2,000 steps' first 8 MB pack, CPU medians of 9 interleaved: 617 KB in 61 ms and 884 KB
# in 102 ms, where level 9's own (lazy2, tables of 2^21) makes 634 KB in 78 ms and 901 KB
# in 119 ms, with a context of 5 MiB instead of 11 MiB. Lazy2 with these tables saves
# 0.3% more for a third more CPU; 2^21 entries 1% more for twice the context; 2^19
# entries lose 4%.
SEAL_TABLE_LOG = 20
SEAL_SEARCH_LOG = 5
SEAL_MIN_MATCH = 6
SEAL_STRATEGY = zstandard.STRATEGY_LAZY
# A stream ends after this many blocks or bytes of frames: a cold read of its last block
# decodes at most this much.
STREAM_BLOCKS = 128
STREAM_BYTES = 4 << 20
# A write this large goes to packs of its own, each at most PACK_BYTES of frames.
PACK_BYTES = 1 << 20
# The sealer joins finished streams and sealed packs into packs of up to JOIN_BYTES of
# frames; a sealed pack is joined again only while it is no larger than twice what it is
# joined with (so a byte is rewritten a few times, not once per seal).
JOIN_BYTES = 8 << 20
# Packs written whole are recompressed only while there are at most this many bytes of
# them: a large state's packs stay as written (recompressing hundreds of MB at the seal
# level would keep a core busy for minutes, to save a sixth of the bytes at best).
SEAL_PACKED_BYTES = 16 << 20
# A repository closing after it wrote seals what is pending if it is at most
# CLOSE_SEAL_BYTES (a tenth of a second at SEAL_LEVEL); more is left to the next writer's
# sealer.
CLOSE_SEAL_BYTES = 8 << 20
# An open stream whose last block is this old lost its writer (a crash): it is sealed.
STALE_SECONDS = 3600
# A read fetches a pack's row from the file in parts, the first this large: what a read
# of the objects at its start needs, not the whole pack.
FETCH_BYTES = 64 << 10
# A newly loaded directory answers this many lookups by searching its rows' ids, before
# it indexes every id (see ``SqlitePackStore._locate``).
SEARCHES = 64
# Decoded bytes kept for reads, across streams (the least recently read go first).
CACHE_BYTES = 64 << 20
# An entry of the index of ids: the row's number shifted by _ROW bits, or'd with the
# object's place among the row's ids (a row holds far fewer than 2**32 objects).
_ROW = 32
_PLACE = (1 << _ROW) - 1
# The most decoded bytes a stream or pack may declare (its rows' sizes, added up): what a
# writer makes is far less (STREAM_BYTES and a block, JOIN_BYTES), unless one frame is
# larger, which is at most a canonical object's limit. A row declaring more is damaged:
# nothing decodes towards it.
MAX_STREAM_BYTES = MAX_OBJECT + JOIN_BYTES
# A row's time is seconds since 1970 within what a date can hold (year 1 to 9999, as
# ``datetime``): a time beyond (1e300, an infinity) is damage, which gc could not compare
# or store again.
MAX_TIME = 253_402_300_799

_log = logging.getLogger("snapvc")
_GENERATION_ROW = "table 'meta' row 'pack_generation'"

_SCHEMA = (
    # AUTOINCREMENT: a number is never given twice, even after the rows with the highest
    # numbers were rewritten; a writer tells its own stream's last block by its number.
    "CREATE TABLE IF NOT EXISTS packs (number INTEGER PRIMARY KEY AUTOINCREMENT, stream INTEGER NOT NULL, "
    "state INTEGER NOT NULL, "
    "time INTEGER NOT NULL, ids BLOB NOT NULL, sizes BLOB NOT NULL, data BLOB NOT NULL)",
    "CREATE INDEX IF NOT EXISTS packs_stream ON packs (stream, number)",
)


class _SizesContexts(threading.local):
    """This thread's zstd contexts for ``sizes`` columns, made once: a context made per
    row would cost more than the row (zstd contexts are not shared across threads)."""

    def __init__(self) -> None:
        self.compressor = zstandard.ZstdCompressor(level=WRITE_LEVEL, write_content_size=True)
        self.decompressor = zstandard.ZstdDecompressor(max_window_size=WINDOW_MAX)


_sizes_contexts = _SizesContexts()


def _pack_sizes(values: Iterable[int]) -> bytes:
    """The ``sizes`` column for these frame lengths (read back at once, as an array)."""
    sizes = array.array("I", values)
    if sys.byteorder != "little":
        sizes.byteswap()
    return _sizes_contexts.compressor.compress(sizes.tobytes())


def _read_sizes(buf: bytes, count: int) -> list[int] | None:
    """The ``count`` frame lengths of a ``sizes`` column; None if it holds anything else."""
    try:
        raw = decompress_bounded(buf, 4 * count + 1, _sizes_contexts.decompressor)
    except zstandard.ZstdError:
        return None
    if len(raw) != 4 * count:
        return None
    sizes = array.array("I")
    sizes.frombytes(raw)
    if sys.byteorder != "little":
        sizes.byteswap()
    return sizes.tolist()


@dataclass(slots=True)
class _Block:
    """One row of ``packs`` as the directory knows it."""

    number: int
    stream: int
    state: int
    time: float
    start: int  # offset of its first byte in its stream's decoded bytes
    size: int  # its decoded bytes
    raw_ids: bytes  # its ``ids`` column
    lengths: list[int]  # each object's frame length, in order
    _ids: list[bytes] | None = None
    _offsets: list[int] | None = None

    @property
    def ids(self) -> list[bytes]:
        """Its objects' ids, in order: plain bytes, as fast to make as to look up by an
        ObjectId (a bytes subclass with bytes' hash and equality)."""
        if self._ids is None:
            raw = self.raw_ids
            self._ids = [raw[i : i + ID_SIZE] for i in range(0, len(raw), ID_SIZE)]
        return self._ids

    def find(self, oid: bytes) -> tuple[int, int] | None:
        """(offset in its stream, length) of ``oid`` if this row holds it, by a search of
        its ``ids`` column."""
        raw = self.raw_ids
        at = raw.find(oid)
        while at % ID_SIZE and at != -1:
            at = raw.find(oid, at + 1)
        if at == -1:
            return None
        return self.place(at // ID_SIZE)

    def place(self, index: int) -> tuple[int, int]:
        """(offset in its stream, length) of its ``index``-th object."""
        if self._offsets is None:
            self._offsets = list(accumulate(self.lengths, initial=self.start))
        return self._offsets[index], self.lengths[index]


class _StreamReader:
    """A stream decoded from its start as far as reads needed: its decoded bytes, and
    what still decodes the rest of its zstd frame (None for this process's own open
    stream, whose bytes are known without decoding, and once the stream is decoded to
    its end). A pack (PACKED, SEALED: one whole zstd frame, written at once) is decoded
    by a ``FrameReader``, straight into ``decoded``; a stream of blocks is fed a few
    blocks at a time (``BlockFeeder``): it may grow while it is read (another process's
    open stream), and its frame has no end when its writer finished it by closing.
    Either way a row never decodes to more than its sizes declare, by more than a
    block, however little of it is stored (a zstd bomb)."""

    def __init__(self, stream: int, whole: bool, decompress: bool = True) -> None:
        self.stream = stream
        self.decoded = bytearray()
        self.decompressor: FrameReader | BlockFeeder | None = None
        if decompress:
            self.decompressor = FrameReader() if whole else BlockFeeder(
                zstandard.ZstdDecompressor(max_window_size=WINDOW_MAX))
        self.next_block = stream  # the first block not yet fetched (in number order)
        self.fetched = 0  # of a stream's last row, fetched in parts: the bytes fetched so far
        self.ended = False  # decoded to its declared end, and checked that nothing follows


@dataclass(slots=True)
class _Writing:
    """This process's open stream."""

    stream: int
    last: int  # its last block's number
    blocks: int
    size: int
    compressor: zstandard.ZstdCompressionObj


class SqlitePackStore:
    """Objects in table ``packs`` of a format 3 ``SqliteFile`` (see the module docstring)."""

    capabilities = StoreCapabilities(compresses=True)

    def __init__(self, file: SqliteFile, clock: Callable[[], float] = time.time,
                 read_roots: Callable[[], list[ObjectId]] = list) -> None:
        self.file = file
        self._clock = clock
        # The trees a fresh read starts at, newest first (the branches' states): what a
        # sealed pack puts first (``layout.read_order``).
        self.read_roots = read_roots
        file.make_tables(_SCHEMA)
        # id -> (block, offset in stream, length), of every row but the newest ``_unindexed``:
        # read through ``_indexed`` or ``_locate``.
        # id -> its row's number << _ROW | its place among the row's ids (``_where_is``):
        # one int an id, made in C-speed passes, where a tuple an id cost twice the time
        self._where: dict[bytes, int] = {}
        self._unindexed: list[int] = []  # the rows whose ids are not in ``_where`` yet, in order
        self._searches = 0  # lookups answered by a search of the rows since the directory was loaded
        self._blocks: dict[int, _Block] = {}
        self._streams: dict[int, list[int]] = {}  # stream -> its blocks' numbers, in order
        self._damaged: dict[str, str] = {}  # rows the directory left out, and why
        self._damaged_numbers: set[int] = set()  # their numbers
        self._unsealable: dict[int, str] = {}  # streams a seal could not read (damaged), and why
        self._broken: dict[int, int] = {}  # stream -> its first damaged row: the rows after it are left out too
        self._copies = 0  # ids the directory met in more than one row (put again), since it was loaded
        self._loaded = False
        self._data_version: int | None = None
        self._generation: str | None = None
        self._readers: dict[int, _StreamReader] = {}  # by stream, least recently read first
        self._writing: _Writing | None = None
        self._sealer: _Sealer | None = None
        self._wrote = False

    # -- the directory --------------------------------------------------------------------

    def _current(self) -> None:
        """Bring the directory up to date with the file (the caller holds the lock)."""
        version = self.file.data_version()
        if self._loaded and version == self._data_version:
            return
        generation = self.file.get_meta("pack_generation")
        if not self._loaded or generation != self._generation:
            self._load(None)
            if generation is not None and _generation_number(generation) is None:
                self._damaged[_GENERATION_ROW] = f"its value {wrong(generation)}, not a count of rewrites"
        else:
            self._load(max(self._blocks, default=0))
        self._data_version = version
        self._generation = generation

    def _forget_directory(self) -> None:
        """Drop the directory and the streams decoded for reads (the caller holds the
        lock): what a reload starts from, and what a closed store keeps."""
        self._where.clear()
        self._unindexed.clear()
        self._searches = 0
        self._blocks.clear()
        self._streams.clear()
        self._damaged.clear()
        self._damaged_numbers.clear()
        self._unsealable.clear()
        self._broken.clear()
        self._copies = 0
        self._readers.clear()
        self._loaded = False

    def _load(self, after: int | None) -> None:
        """Read the rows numbered above ``after`` into the directory (all of it, afresh,
        for None)."""
        if after is None:
            self._forget_directory()
        try:
            rows = self.file.conn.execute(
                "SELECT number, stream, state, time, ids, sizes FROM packs WHERE number > ? ORDER BY number",
                (after or 0,)).fetchall()
        except sqlite3.Error as exc:  # a damaged page
            raise RepositoryError(f"{str(self.file.path)!r}: the list of packs cannot be read: {exc}") from None
        for number, stream, state, mtime, ids, sizes in rows:
            self._add_row(number, stream, state, mtime, ids, sizes)
        self._loaded = True

    def _add_row(self, number: int, stream: object, state: object, mtime: object, ids: object, sizes: object) -> None:
        row = f"table 'packs' row {number}"
        problem = None
        lengths: list[int] | None = None
        if type(ids) is not bytes or len(ids) % ID_SIZE:
            problem = f"its ids {wrong(ids)}, not 32-byte ids one after another"
        elif type(sizes) is not bytes or (lengths := _read_sizes(sizes, len(ids) // ID_SIZE)) is None:
            problem = f"its sizes {wrong(sizes)}, not one length for each of its {len(ids) // ID_SIZE} ids"
        elif type(stream) is not int or stream > number or (stream != number and stream not in self._streams):
            problem = f"its stream {wrong(stream)}, not a block at or before it"
        elif state not in _STATES:
            problem = f"its state {wrong(state)}, not one of {sorted(_STATES)}"
        elif not is_number(mtime) or not -MAX_TIME <= mtime <= MAX_TIME:  # type: ignore[operator]  # a number: checked first
            problem = f"its time {wrong(mtime)}, not a time in seconds since 1970"
        elif stream in self._broken:
            # Its objects' offsets in the stream count the damaged block's bytes, which
            # are not known: none of them can be found.
            problem = f"it follows damaged row {self._broken[stream]} of its stream {stream}"
        elif (declared := self._declared(stream) + sum(lengths)) > MAX_STREAM_BYTES:
            problem = (f"its sizes declare {declared} bytes of frames in stream {stream}, more than a pack may "
                       f"hold ({MAX_STREAM_BYTES})")
        if problem is not None or lengths is None:
            self._damaged[row] = problem or "unreadable"
            self._damaged_numbers.add(number)
            if type(stream) is int:
                self._broken.setdefault(stream, number)
            return
        assert type(ids) is bytes and type(stream) is int and type(state) is int and is_number(mtime)
        blocks = self._streams.setdefault(stream, [])
        start = 0
        if blocks:
            last = self._blocks[blocks[-1]]
            start = last.start + last.size
        blocks.append(number)
        self._blocks[number] = _Block(number, stream, state, float(mtime), start, sum(lengths), ids, lengths)  # type: ignore[arg-type]  # a number: checked above
        self._unindexed.append(number)

    def _indexed(self) -> dict[bytes, int]:
        """The whole directory's index, id -> its row and place in it (``_where_is``): the
        rows not in it yet are added (the caller holds the lock)."""
        if self._unindexed:
            where = self._where
            for number in self._unindexed:
                block = self._blocks.get(number)
                if block is None:
                    continue
                held = len(where)
                first = number << _ROW
                where.update(zip(block.ids, range(first, first + len(block.ids))))  # a later row's over an earlier's
                self._copies += len(block.ids) - (len(where) - held)
            self._unindexed.clear()
        return self._where

    def _where_is(self, entry: int) -> tuple[int, int, int]:
        """(row, offset in its stream, length) of an object from its ``_where`` entry."""
        number = entry >> _ROW
        return (number, *self._blocks[number].place(entry & _PLACE))

    def _locate(self, oid: bytes) -> tuple[int, int, int] | None:
        """Where ``oid`` is, as ``_indexed()`` has it (the caller holds the lock). The first
        ``SEARCHES`` lookups of a newly loaded directory that the index cannot answer yet
        search the rows' ``ids`` columns instead, the newest row first (a read of a few
        objects in a fresh process: indexing every id would cost more than the read);
        the lookup after those indexes every row."""
        entry = self._where.get(oid)
        if entry is not None:
            return self._where_is(entry)
        if not self._unindexed:
            return None
        if self._searches >= SEARCHES:
            entry = self._indexed().get(oid)
            return None if entry is None else self._where_is(entry)
        self._searches += 1
        for number in reversed(self._unindexed):
            block = self._blocks.get(number)
            if block is not None and (place := block.find(oid)) is not None:
                return number, place[0], place[1]
        return None

    def _declared(self, stream: int) -> int:
        """The decoded bytes the rows of ``stream`` in the directory declare."""
        blocks = self._streams.get(stream)
        if not blocks:
            return 0
        last = self._blocks[blocks[-1]]
        return last.start + last.size

    def _forget_rows(self, numbers: Iterable[int]) -> None:
        """Drop rows deleted by this process (a swap, a gc) from the directory."""
        self._indexed()
        for number in numbers:
            block = self._blocks.pop(number, None)
            if block is None:
                continue
            for oid in block.ids:
                if self._where.get(oid, -1) >> _ROW == number:
                    del self._where[oid]
            self._streams.pop(block.stream, None)
            self._readers.pop(block.stream, None)
        if not self._copies:
            return
        # Ids also held by a surviving row (put twice) point there again.
        for block in self._blocks.values():
            for place, oid in enumerate(block.ids):
                self._where.setdefault(oid, block.number << _ROW | place)

    def _bump_generation(self) -> None:
        """Record, in the current transaction, that rows were replaced (other processes
        reload their directory)."""
        number = _generation_number(self.file.get_meta("pack_generation") or "0")
        # A damaged value is replaced by one that no reader can hold: larger than any count
        # of rewrites (every reader then reloads its directory, as after any rewrite).
        generation = str(number + 1) if number is not None else str(time.time_ns())
        self._damaged.pop(_GENERATION_ROW, None)
        self.file.conn.execute(
            "INSERT INTO meta (key, value) VALUES ('pack_generation', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (generation,))
        self._generation = generation

    # -- reads ----------------------------------------------------------------------------

    def _decoded(self, stream: int, end: int, oid: ObjectId) -> bytearray:
        """Stream ``stream``'s decoded bytes, at least its first ``end`` (the caller holds
        the lock); ``CorruptObjectError`` naming ``oid`` if they cannot be decoded. Never
        more is decoded than the stream's rows declare: a row that decodes to more (a
        zstd bomb) is damaged, found once a whole stream is read."""
        state = self._blocks[self._streams[stream][-1]].state
        complete = state != OPEN
        reader = self._readers.pop(stream, None)
        if reader is None:
            reader = _StreamReader(stream, whole=state in (PACKED, SEALED))
        self._readers[stream] = reader  # now the most recently read
        where = f"pack {stream} of {str(self.file.path)!r}"
        declared = self._declared(stream)
        end = min(end, declared)
        try:
            if isinstance(reader.decompressor, FrameReader):
                self._read_frame(reader, end, declared, where, oid)
            else:
                self._feed_blocks(reader, end, declared, complete, where, oid)
        except (zstandard.ZstdError, CorruptObjectError) as exc:
            del self._readers[stream]
            if isinstance(exc, CorruptObjectError):
                raise
            raise CorruptObjectError(oid, f"{where} does not decode: {exc}") from None
        if len(reader.decoded) < end:
            del self._readers[stream]
            raise CorruptObjectError(oid, f"{where} ends {end - len(reader.decoded)} bytes before it")
        self._trim_readers()
        return reader.decoded

    def _read_frame(self, reader: _StreamReader, end: int, declared: int, where: str, oid: ObjectId) -> None:
        """Decode a pack (``FrameReader``) to ``end``, or to its declared end when no
        more than a block is left after ``end`` (as a stream fed whole blocks would); once
        it is decoded to what its rows declare, check that nothing follows, and let its
        decompressor go."""
        decompressor = reader.decompressor
        assert isinstance(decompressor, FrameReader)
        if declared - end <= BLOCK_MAX:
            end = declared
        more = partial(self._compressed_rows, reader.stream, reader)
        decompressor.read_into(reader.decoded, end, more)
        if len(reader.decoded) == declared:
            if not decompressor.ended(more):
                raise CorruptObjectError(oid, f"{where} decodes to more than the {declared} bytes its rows declare")
            reader.ended = True
            reader.decompressor = None  # nothing left to decode: its window and input go

    def _feed_blocks(self, reader: _StreamReader, end: int, declared: int, complete: bool, where: str,
                     oid: ObjectId) -> None:
        """Decode a stream of blocks a few blocks at a time (``BlockFeeder``) to ``end``."""
        stream = reader.stream
        feeder = reader.decompressor
        if not isinstance(feeder, BlockFeeder):
            return  # this process's own stream, or one decoded to its end: nothing to decode
        while reader.decompressor is not None and (len(reader.decoded) < end or (
                complete and len(reader.decoded) == declared and not reader.ended)):
            if len(reader.decoded) >= end:
                # Read whole: nothing may follow what its rows declare.
                got = feeder.take(1)
                if got is None and (more := self._compressed_rows(stream, reader)):
                    feeder.add(more)
                    continue
                if got:
                    raise CorruptObjectError(oid, f"{where} decodes to more than the {declared} bytes its rows "
                                                  f"declare")
                if got is None:
                    reader.ended = True
                    reader.decompressor = None  # nothing left to decode: its window and input go
                continue
            got = feeder.take(max(end - len(reader.decoded), BLOCK_MAX))
            if got is None:
                more = self._compressed_rows(stream, reader)
                if not more:
                    break
                feeder.add(more)
                continue
            reader.decoded += got
            if len(reader.decoded) > declared:
                raise CorruptObjectError(oid, f"{where} decodes to more than the {declared} bytes its rows declare")

    def _compressed_rows(self, stream: int, reader: _StreamReader) -> bytes:
        """The next compressed bytes of the rows of ``stream`` that ``reader`` has not
        fetched yet (the caller holds the lock): all the rows left, or, once one is left
        (a pack is one row), its next part (``_row_part``)."""
        later = [n for n in self._streams[stream] if n >= reader.next_block]
        if not later:
            return b""
        if len(later) == 1:
            part = self._row_part(later[0], reader)
            if part is not None:
                return part
        rows = self.file.conn.execute(
            "SELECT number, CAST(data AS BLOB) FROM packs WHERE stream = ? AND number >= ? ORDER BY number",
            (stream, later[0])).fetchall()
        if not rows:
            return b""
        reader.next_block = rows[-1][0] + 1
        data = b"".join(data for _, data in rows)
        if reader.fetched:
            data = data[reader.fetched :]
            reader.fetched = 0
        return data

    def _row_part(self, number: int, reader: _StreamReader) -> bytes | None:
        """The next part of row ``number``'s data after the ``reader.fetched`` bytes fetched
        already: ``FETCH_BYTES`` at first, then as much again as fetched so far, so that a
        read of the objects at a pack's start reads only that part of it from the file,
        and a read of all of it fetches it in a few parts. None if the row cannot be read
        in parts (its data is not a blob: damage, which the whole row's read names)."""
        try:
            with self.file.conn.blobopen("packs", "data", number, readonly=True) as blob:
                blob.seek(reader.fetched)
                part = blob.read(max(FETCH_BYTES, reader.fetched))
                left = len(blob) - blob.tell()
        except sqlite3.Error:
            return None
        if left:
            reader.fetched += len(part)
        else:
            reader.next_block = number + 1
            reader.fetched = 0
        return part

    def _trim_readers(self) -> None:
        """Drop the least recently read streams' decoded bytes past CACHE_BYTES (this
        process's own stream too: read again, it is decoded from its rows)."""
        total = sum(len(r.decoded) for r in self._readers.values())
        while total > CACHE_BYTES and len(self._readers) > 1:
            total -= len(self._readers.pop(next(iter(self._readers))).decoded)

    @contextmanager
    def _snapshot(self, what: str = "table 'packs'") -> Iterator[sqlite3.Connection]:
        """The connection, under the lock, in one read transaction (unless a write
        transaction is open already): the directory check and the rows read after it see
        the same file, never a rewrite another process committed in between."""
        with self.file.reading(what) as c:
            if c.in_transaction:
                yield c
                return
            c.execute("BEGIN")
            try:
                yield c
            finally:
                if c.in_transaction:
                    c.execute("COMMIT")

    def get_many(self, ids: Iterable[ObjectId]) -> dict[ObjectId, bytes]:
        return self._read(ids, unframe=False)[1]

    def get_unframed_many(self, ids: Iterable[ObjectId]) -> tuple[dict[ObjectId, bytes], dict[ObjectId, bytes]]:
        return self._read(ids, unframe=True)

    def _read(self, ids: Iterable[ObjectId], unframe: bool) -> tuple[dict[ObjectId, bytes], dict[ObjectId, bytes]]:
        """(canonical bytes, frames) of ``ids``: each object's bytes copied once out of its
        stream's decoded bytes, a whole raw frame's without its header if ``unframe``
        (``raw_frame_body``), any other frame as it is."""
        canonical: dict[ObjectId, bytes] = {}
        out: dict[ObjectId, bytes] = {}
        with self._snapshot():
            self._current()
            by_stream: dict[int, list[tuple[int, int, ObjectId]]] = {}
            for oid in ids:
                found = self._locate(oid)
                if found is not None:
                    by_stream.setdefault(self._blocks[found[0]].stream, []).append((found[1], found[2], oid))
            for stream, wanted in by_stream.items():
                # Decoded once as far as the furthest object asked for.
                end, _, last = max((offset + length, offset, oid) for offset, length, oid in wanted)
                try:
                    decoded = self._decoded(stream, end, last)
                except CorruptObjectError as exc:
                    if len(by_stream) == 1 and len(wanted) == 1:
                        raise
                    # As a damaged page of a format 2 file: the batch fails as a whole, and
                    # a reader that must know which objects (fsck) reads them one by one.
                    raise RepositoryError(f"{str(self.file.path)!r}: objects of pack {stream} cannot be read "
                                          f"({exc}); run 'snapvc fsck'") from None
                with memoryview(decoded) as view:
                    for offset, length, oid in wanted:
                        end = offset + length
                        body = raw_frame_body(decoded, offset, end) if unframe else None
                        if body is None:
                            out[oid] = view[offset:end].tobytes()
                        else:
                            canonical[oid] = view[body:end].tobytes()
        return canonical, out

    def get(self, oid: ObjectId) -> bytes:
        found = self.get_many([oid])
        if oid not in found:
            raise ObjectNotFoundError(oid)
        return found[oid]

    def has_many(self, ids: Iterable[ObjectId]) -> set[ObjectId]:
        with self._snapshot() as c:
            self._current()
            where = self._indexed()
            found = {oid: where[oid] >> _ROW for oid in ids if oid in where}
            # Their rows, asked of the file: a write it skipped (a trigger, a damaged
            # file) must not count as stored, though this process remembers writing it.
            rows: set[int] = set()
            for batch in batched(sorted(set(found.values()))):  # type: ignore[arg-type]  # ints bind like ids
                rows.update(n for (n,) in c.execute(
                    f"SELECT number FROM packs WHERE number IN ({','.join('?' * len(batch))})", batch))
            return {oid for oid, number in found.items() if number in rows}

    def ids_with_prefix(self, hex_prefix: str, limit: int = 2) -> list[ObjectId]:
        with self._snapshot():
            self._current()
            return with_prefix(sorted(ObjectId(oid) for oid in self._indexed()), hex_prefix, limit)

    def iter_ids(self) -> Iterator[ObjectId]:
        with self._snapshot():
            self._current()
            ids = [ObjectId(oid) for oid in self._indexed()]
            if self._damaged:
                raise self.file.damaged(dict(self._damaged), ids)
        return iter(ids)

    def mtimes(self, ids: Iterable[ObjectId]) -> dict[ObjectId, float]:
        with self._snapshot():
            self._current()
            where = self._indexed()
            return {oid: self._blocks[found >> _ROW].time for oid in ids if (found := where.get(oid)) is not None}

    def sizes(self) -> StoreSizes:
        with self._snapshot():
            self._current()
            total = self.file.conn.execute("SELECT coalesce(sum(length(data)), 0) FROM packs").fetchone()[0]
            return StoreSizes(objects=len(self._indexed()), stored_bytes=total)

    # -- writes ---------------------------------------------------------------------------

    def put_many(self, items: Iterable[tuple[ObjectId, bytes]]) -> None:
        items = list(dict(items).items())  # an id given twice is stored once
        if not items:
            return
        now = int(self._clock())
        with self.file.transaction():
            self._current()
            self.file.on_rollback(self._rolled_back)
            if sum(len(frame) for _, frame in items) >= PACK_BYTES:
                self._put_packs(items, now)
            else:
                self._put_block(items, now)
            self._wrote = True

    def _rolled_back(self) -> None:
        """The write of ``put_many`` rolled back: forget the directory (reloaded from what
        the file holds) and the stream it wrote to (its compressor holds bytes no row has)."""
        with self.file.lock:
            self._writing = None
            self._loaded = False
            self._readers.clear()

    # Past every number given so far (sqlite_sequence keeps the highest even when its row
    # is gone), never only past the rows there are now.
    _NEXT_NUMBER = ("max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'packs'), 0), "
                    "coalesce((SELECT max(number) FROM packs), 0)) + 1")

    def _next_number(self) -> int:
        number: int = self.file.conn.execute(f"SELECT {self._NEXT_NUMBER}").fetchone()[0]
        return number

    def _put_block(self, items: list[tuple[ObjectId, bytes]], now: int) -> None:
        writing = self._writing
        if writing is not None:
            # The open stream's last block as the file has it, and the next number, in one read.
            state, stream, number = self.file.conn.execute(
                f"SELECT (SELECT state FROM packs WHERE number = ?1), (SELECT stream FROM packs WHERE number = ?1), "
                f"{self._NEXT_NUMBER}", (writing.last,)).fetchone()
            if (state, stream) != (OPEN, writing.stream) or writing.stream not in self._streams:
                writing = self._writing = None  # rewritten by a gc or a sealer meanwhile
        else:
            number = self._next_number()
        if writing is None:
            compressor = zstandard.ZstdCompressor(level=WRITE_LEVEL, write_content_size=False,
                                                  write_checksum=False).compressobj()
            writing = _Writing(number, number, 0, 0, compressor)
            self._readers.pop(number, None)
            self._readers[number] = _StreamReader(number, whole=False, decompress=False)
        raw = b"".join(frame for _, frame in items)
        writing.blocks += 1
        writing.size += len(raw)
        last = writing.blocks >= STREAM_BLOCKS or writing.size >= STREAM_BYTES
        data = writing.compressor.compress(raw)
        data += writing.compressor.flush() if last else writing.compressor.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
        ids = b"".join(oid for oid, _ in items)
        sizes = _pack_sizes(len(frame) for _, frame in items)
        self.file.conn.execute("INSERT INTO packs VALUES (?, ?, ?, ?, ?, ?, ?)",
                               (number, writing.stream, FINISHED if last else OPEN, now, ids, sizes, data))
        writing.last = number
        self._add_row(number, writing.stream, FINISHED if last else OPEN, now, ids, sizes)
        reader = self._readers.get(writing.stream)
        if reader is not None and reader.decompressor is None:
            reader.decoded += raw
        self._writing = None if last else writing
        if last:
            self._want_seal()

    def _put_packs(self, items: list[tuple[ObjectId, bytes]], now: int) -> None:
        """A large write: packs of their own, of at most PACK_BYTES each, compressed on
        every core."""
        groups: list[list[tuple[ObjectId, bytes]]] = [[]]
        size = 0
        for item in items:
            if size and size + len(item[1]) > PACK_BYTES:
                groups.append([])
                size = 0
            groups[-1].append(item)
            size += len(item[1])
        raws = [b"".join(frame for _, frame in group) for group in groups]
        bodies = _compress_all(raws, WRITE_LEVEL)
        for group, body in zip(groups, bodies, strict=True):
            number = self._next_number()
            ids = b"".join(oid for oid, _ in group)
            sizes = _pack_sizes(len(frame) for _, frame in group)
            self.file.conn.execute("INSERT INTO packs VALUES (?, ?, ?, ?, ?, ?, ?)",
                                   (number, number, PACKED, now, ids, sizes, body))
            self._add_row(number, number, PACKED, now, ids, sizes)
        self._want_seal()

    def delete_many(self, ids: Iterable[ObjectId]) -> int:
        """Remove ``ids`` (gc): every stream or pack that holds one is rewritten without
        it, as a pack, in the caller's transaction."""
        doomed = set(ids)
        with self.file.transaction():
            self._current()
            where = self._indexed()
            present = {oid for oid in doomed if oid in where}
            if not present:
                return 0
            streams = sorted({self._blocks[where[oid] >> _ROW].stream for oid in present})
            for stream in streams:
                blocks = [self._blocks[n] for n in self._streams[stream]]
                kept: list[tuple[ObjectId, bytes]] = []
                if any(oid not in doomed for b in blocks for oid in b.ids):
                    try:
                        kept = [(oid, frame) for oid, frame in self._frames_of(stream) if oid not in doomed]
                    except CorruptObjectError:
                        # Damaged, and holding objects to keep: it cannot be rewritten
                        # without losing them, so it stays whole (gc reports its garbage
                        # as not removed, fsck its damage). All garbage: dropped unread.
                        present.difference_update(oid for b in blocks for oid in b.ids)
                        continue
                numbers = [b.number for b in blocks]
                self._delete_rows(numbers)
                if kept:
                    self._insert_pack(kept, PACKED, max(b.time for b in blocks), WRITE_LEVEL)
            self._bump_generation()
            if self._writing is not None and self._writing.stream in streams:
                self._writing = None
        self.file.release_free_pages()
        return len(present)

    def drop_damaged(self) -> dict[str, str]:
        """Delete the rows the directory leaves out as damaged (gc, in its sweep's
        transaction, once every object a root reaches was read without them: their
        objects cannot be read, so nothing depends on them) and mend a damaged
        ``pack_generation``; what was dropped or mended (row -> what was wrong)."""
        with self.file.transaction():
            self._current()
            dropped = dict(self._damaged)
            if not dropped:
                return {}
            self._delete_rows(sorted(self._damaged_numbers))
            self._bump_generation()
            self._loaded = False  # read afresh: the streams they broke are whole again, or gone
        self.file.release_free_pages()
        return dropped

    def _frames_of(self, stream: int) -> list[tuple[ObjectId, bytes]]:
        """Every (id, frame) of ``stream``, in order (the caller holds the lock)."""
        out = []
        for number in self._streams[stream]:
            block = self._blocks[number]
            if not block.ids:
                continue
            decoded = self._decoded(stream, block.start + block.size, ObjectId(block.ids[0]))
            offset = block.start
            for oid, length in zip(block.ids, block.lengths, strict=True):
                out.append((ObjectId(oid), bytes(decoded[offset : offset + length])))
                offset += length
        return out

    def _delete_rows(self, numbers: list[int]) -> None:
        for batch in batched(numbers):  # type: ignore[arg-type]  # ints bind like ids
            self.file.conn.execute(f"DELETE FROM packs WHERE number IN ({','.join('?' * len(batch))})", batch)
        self._forget_rows(numbers)

    def _insert_pack(self, frames: list[tuple[ObjectId, bytes]], state: int, when: float, level: int) -> int:
        body = _compress_all([b"".join(frame for _, frame in frames)], level)[0]
        return self._insert_row(b"".join(oid for oid, _ in frames), [len(frame) for _, frame in frames], state,
                                when, body)

    def _insert_row(self, ids: bytes, lengths: list[int], state: int, when: float, body: bytes) -> int:
        """A pack's row: ``ids`` (32 bytes each), their frames' ``lengths``, in order, and
        ``body``, their frames compressed as one zstd frame."""
        number = self._next_number()
        sizes = _pack_sizes(lengths)
        self.file.conn.execute("INSERT INTO packs VALUES (?, ?, ?, ?, ?, ?, ?)",
                               (number, number, state, int(when), ids, sizes, body))
        self._add_row(number, number, state, int(when), ids, sizes)
        return number

    # -- sealing --------------------------------------------------------------------------

    def _want_seal(self) -> None:
        if self._sealer is None:
            self._sealer = _Sealer(self)
        self._sealer.request()

    def seal_plan(self, now: float, budget: int | None = None, streams_only: bool = False) -> list[list[int]]:
        """The streams and packs to join into sealed packs, in groups of up to
        JOIN_BYTES of frames (the caller holds the lock): finished streams, packs written
        whole (up to SEAL_PACKED_BYTES of them), open streams whose writer is gone
        (``STALE_SECONDS``), and the newest sealed packs while they are no larger than
        twice what they would be joined with; with ``streams_only``, the streams alone.
        Nothing if what is pending is more than ``budget`` bytes."""
        self._current()
        pending: list[int] = []
        packed: list[int] = []
        for stream, numbers in self._streams.items():
            last = self._blocks[numbers[-1]]
            if stream in self._unsealable:
                continue
            if last.state == FINISHED:
                pending.append(stream)
            elif last.state == PACKED:
                packed.append(stream)
            elif last.state == OPEN and now - last.time > STALE_SECONDS and (
                    self._writing is None or self._writing.stream != stream):
                pending.append(stream)
        if not streams_only and sum(self._stream_size(s) for s in packed) <= SEAL_PACKED_BYTES:
            pending += packed
        if not pending:
            return []
        size = sum(self._stream_size(s) for s in pending)
        if budget is not None and size > budget:
            return []
        sealed = sorted((s for s, numbers in self._streams.items() if self._blocks[numbers[-1]].state == SEALED
                         and s not in self._unsealable), reverse=True) if not streams_only else []
        for stream in sealed:
            own = self._stream_size(stream)
            if own > 2 * size or own + size > JOIN_BYTES:
                break
            pending.append(stream)
            size += own
        pending.sort()
        groups: list[list[int]] = [[]]
        size = 0
        for stream in pending:
            own = self._stream_size(stream)
            if groups[-1] and size + own > JOIN_BYTES:
                groups.append([])
                size = 0
            groups[-1].append(stream)
            size += own
        # A lone pack already sealed is left as it is.
        return [g for g in groups if not (len(g) == 1 and self._blocks[self._streams[g[0]][-1]].state == SEALED)]

    def _stream_size(self, stream: int) -> int:
        last = self._blocks[self._streams[stream][-1]]
        return last.start + last.size

    def seal(self, streams: list[int], stopping: Callable[[], bool] = lambda: False,
             level: int = SEAL_LEVEL) -> bool:
        """Join ``streams`` into one sealed pack: read them (under the lock), compress at
        ``level`` (without it), and swap the pack in for their rows in one transaction, unless one
        of them changed meanwhile. Whether it was swapped in. ``stopping`` is asked once
        the frames are read, before they are compressed (in one call: at most JOIN_BYTES of
        frames, about a tenth of a second): true, the rows stay as they are."""
        with self._snapshot():
            self._current()
            if any(s not in self._streams for s in streams):
                return False
            rows = {s: list(self._streams[s]) for s in streams}
            # The streams' decoded bytes are not kept for reads (their rows are about to
            # go; this process's own finished stream included): each goes once its
            # frames are copied.
            frames: list[tuple[ObjectId, bytes]] = []
            try:
                for s in streams:
                    frames += self._frames_of(s)
                    self._readers.pop(s, None)
            except CorruptObjectError as exc:
                # A damaged pack stays as it is (its readable objects too), for fsck to
                # name and gc to drop once nothing needs it; the others are sealed without it.
                for s in streams:
                    try:
                        self._frames_of(s)
                    except CorruptObjectError as damage:
                        self._unsealable[s] = str(damage)
                        _log.warning("%s: pack %d is not sealed: %s; run 'snapvc fsck'", self.file.path, s, damage)
                if not any(s in self._unsealable for s in streams):
                    raise RepositoryError(f"{str(self.file.path)!r}: packs {streams} cannot be sealed: {exc}") from None
                return False
            finally:
                for s in streams:
                    self._readers.pop(s, None)
            when = max(self._blocks[n].time for numbers in rows.values() for n in numbers)
        seen: set[bytes] = set()
        unique = []
        for oid, frame in frames:  # an id put twice is kept once
            if oid not in seen:
                seen.add(oid)
                unique.append((oid, frame))
        del frames, seen
        walked: set[int] = set()
        unique = read_order(unique, self._read_roots(), self._walk_lookup(walked))
        with self.file.lock:  # nor what the walk decoded of other packs
            for s in walked:
                self._readers.pop(s, None)
        ids = b"".join(oid for oid, _ in unique)
        lengths = [len(frame) for _, frame in unique]
        raw = b"".join(frame for _, frame in unique)
        del unique  # the frames go before the compression's tables come: only ``raw`` is held
        if stopping():
            return False  # the repository is closing: the rows stay as they are
        body = seal_compressor(len(raw), level).compress(raw)
        del raw
        with self.file.transaction() as c:
            self._current()
            for s, numbers in rows.items():
                if self._streams.get(s) != numbers:
                    return False
                if self._writing is not None and self._writing.stream == s:
                    return False
            # Another process's writer may have appended meanwhile: only whole streams go.
            listed = [n for numbers in rows.values() for n in numbers]
            count = c.execute(f"SELECT count(*) FROM packs WHERE stream IN ({','.join('?' * len(streams))})",
                              streams).fetchone()[0]
            if count != len(listed):
                return False
            self._delete_rows(listed)
            # Below SEAL_LEVEL it stays pending, like a pack written whole.
            self._insert_row(ids, lengths, SEALED if level >= SEAL_LEVEL else PACKED, when, body)
            self._bump_generation()
        self.file.release_free_pages()
        return True

    def _read_roots(self) -> list[ObjectId]:
        """``read_roots()``, or none if they cannot be read now (a busy or damaged file:
        the order of a pack is only a hint)."""
        try:
            with self.file.lock:
                return self.read_roots()
        except (SnapvcError, sqlite3.Error):
            return []

    def _walk_lookup(self, started: set[int]) -> Callable[[bytes], bytes | None]:
        """The frame of an object in another pack, for the walk of ``read_order``: read
        under the lock one at a time (a seal holds no lock while it orders and compresses),
        decoding at most ``layout.WALK_BYTES`` more of other packs in all; None beyond.
        The streams it starts decoding are added to ``started``."""
        left = [WALK_BYTES]

        def lookup(oid: bytes) -> bytes | None:
            with self._snapshot():
                self._current()
                entry = self._indexed().get(oid)
                if entry is None:
                    return None
                number, offset, length = self._where_is(entry)
                stream = self._blocks[number].stream
                reader = self._readers.get(stream)
                cost = offset + length - (len(reader.decoded) if reader is not None else 0)
                if cost > left[0]:
                    return None
                if reader is None:
                    started.add(stream)
                left[0] -= max(cost, 0)
                try:
                    decoded = self._decoded(stream, offset + length, ObjectId(oid))
                except CorruptObjectError:
                    return None
                return bytes(decoded[offset : offset + length])

        return lookup

    def seal_all(self, budget: int | None = None, level: int = SEAL_LEVEL) -> int:
        """Seal everything there is to seal, now, at ``level`` (``snapvc gc``; a repository
        closing after it wrote, with a ``budget``: see ``seal_plan``); how many packs were
        made. Below SEAL_LEVEL only streams are sealed, into PACKED packs that a later
        seal at SEAL_LEVEL takes up again."""
        made = 0
        for _ in range(64):  # each round seals what the last one left; the plan shrinks
            with self.file.lock:
                plan = self.seal_plan(self._clock(), budget, streams_only=level < SEAL_LEVEL)
            if not plan:
                break
            progressed = False
            for group in plan:
                if self.seal(group, level=level):
                    made += 1
                    progressed = True
            if not progressed:
                break
        return made

    def finish_stream(self) -> None:
        """End this process's open stream (its last block becomes FINISHED)."""
        with self.file.lock:
            writing, self._writing = self._writing, None
            if writing is None:
                return
            with self.file.transaction() as c:
                c.execute("UPDATE packs SET state = ? WHERE number = ? AND state = ?", (FINISHED, writing.last, OPEN))
            if writing.last in self._blocks:
                self._blocks[writing.last].state = FINISHED

    # -- the rest of the protocol ---------------------------------------------------------

    def dictionaries(self) -> dict[int, bytes]:
        raise unsupported(self, "dictionaries")

    def put_dictionary(self, data: bytes) -> int:
        raise unsupported(self, "put_dictionary")

    def refresh(self) -> None:
        raise unsupported(self, "refresh")

    def close(self) -> None:
        """Finish this process's stream; if this process wrote, seal what is pending
        (see CLOSE_SEAL_BYTES), so that a closed repository is small without anyone
        waiting long."""
        sealer, self._sealer = self._sealer, None
        if sealer is not None:
            sealer.stop()
        try:
            self.finish_stream()
            if self._wrote:
                self.seal_all(CLOSE_SEAL_BYTES)
        except RepositoryError:
            pass  # busy or read-only: sealing only saves space, and the next writer seals it
        except SnapvcError as exc:  # the commits are stored: sealing only saves space
            _log.warning("%s: sealing on close stopped: %s; run 'snapvc fsck'", self.file.path, exc)
        self.file.release_free_pages()
        with self.file.lock:  # a closed repository still referred to keeps none of what it read
            self._forget_directory()


def _generation_number(value: object) -> int | None:
    """Meta key ``pack_generation`` as the count it is; None if it is damaged."""
    if type(value) is str and value.isdecimal() and len(value) <= 30:
        return int(value)
    return None


def _compress_all(raws: list[bytes], level: int) -> list[bytes]:
    """Each of ``raws`` as one zstd frame (its size in the header), on every core when
    there are several."""
    compressor = zstandard.ZstdCompressor(level=level, write_content_size=True, write_checksum=False)
    if len(raws) > 1 and all(raws):
        inputs: list[bytes | bytearray | memoryview[int]] = list(raws)
        result = compressor.multi_compress_to_buffer(inputs, threads=-1)
        return [result[i].tobytes() for i in range(len(result))]
    return [compressor.compress(raw) for raw in raws]


def seal_parameters(size: int, level: int = SEAL_LEVEL) -> zstandard.ZstdCompressionParameters:
    """The zstd parameters a sealed pack of ``size`` bytes of frames is compressed with:
    ``level``'s, with a window as large as the pack (up to JOIN_BYTES: the level's own is
    4 MiB, and what a pack repeats from further back would be stored again), and the
    match finder of ``SEAL_STRATEGY``, ``SEAL_TABLE_LOG``, ``SEAL_SEARCH_LOG`` and
    ``SEAL_MIN_MATCH``."""
    window = min(JOIN_BYTES.bit_length() - 1, max(10, (size - 1).bit_length()))
    params = zstandard.ZstdCompressionParameters.from_level(level, source_size=size, window_log=window,
                                                            write_content_size=True, write_checksum=False)
    if level != SEAL_LEVEL:
        return params
    return zstandard.ZstdCompressionParameters.from_level(
        level, source_size=size, window_log=window, write_content_size=True, write_checksum=False,
        hash_log=min(params.hash_log, SEAL_TABLE_LOG), chain_log=min(params.chain_log, SEAL_TABLE_LOG),
        search_log=SEAL_SEARCH_LOG, min_match=SEAL_MIN_MATCH, strategy=SEAL_STRATEGY)


def seal_compressor(size: int, level: int = SEAL_LEVEL) -> zstandard.ZstdCompressor:
    """A compressor for one sealed pack of ``size`` bytes of frames (``seal_parameters``),
    made for that pack and dropped with it: its tables are not held between seals."""
    return zstandard.ZstdCompressor(compression_params=seal_parameters(size, level))


class _Sealer(BackgroundWork):
    """Seals what ``SqlitePackStore.seal_plan`` names when asked; it holds the file's
    lock only to read and to swap (see ``SqlitePackStore.seal``).

    It holds its store weakly: a repository dropped without ``close`` is collected as
    before (its decoded streams, its connection), and the thread ends with it."""

    def __init__(self, store: SqlitePackStore) -> None:
        self._store = weakref.ref(store)
        super().__init__(f"snapvc-seal-{store.file.path.name}")
        weakref.finalize(store, self.stop, False)

    def work(self) -> None:
        store = self._store()
        if store is None:
            return
        try:
            with store.file.lock:
                plan = store.seal_plan(store._clock())
            for group in plan:
                if self.stopping:
                    return
                store.seal(group, lambda: self.stopping)
        except (RepositoryError, sqlite3.Error):
            # A busy or closing file. Nothing is lost: a seal changes the file only in its
            # swap, one transaction, which rolled back; the streams stay as they were and
            # are sealed on the next request or close (sealing only saves space).
            pass
        except Exception:  # noqa: BLE001 - the thread must live on: reported, and the rows stay as they were
            _log.exception("%s: sealing in the background failed; run 'snapvc fsck'", store.file.path)
