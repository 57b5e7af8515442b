"""Stored-object frames: compression and read verification, as wrappers around any backend.

A frame is what a backend keeps for one object:

    byte 0      codec: 0 raw, 1 zstd, 2 zstd with a trained dictionary, 3 zstd delta
    varint      length of the object's canonical bytes (bounds decompression)
    [codec 2]   varint dictionary number
    [codec 3]   1 byte: delta depth (1 + the base's depth; a full frame has depth 0),
                then the 32-byte id of the base object
    rest        the body

The id is the blake3 of the *canonical* bytes (kind tag + payload), never of the frame,
so how an object is compressed can change without changing any id.

A delta frame (codec 3) is the object compressed with zstd using the canonical bytes of
an earlier object — its *base*, usually the previous version of the same tree node — as
dictionary: a scratchpad or list node rewritten with a few new entries costs about the
size of those entries. Chains are at most ``MAX_DELTA_DEPTH`` long, so a read decodes at
most that many frames. A base must outlive the deltas that use it (GC keeps it; see
docs/design.md).

A dictionary frame (codec 2) is compressed with a zstd dictionary trained on this
repository's own objects: small objects alone compress poorly (a 4 KB chunk of prose
shrinks ~2.2x, the same text with the vocabulary of the rest of the repository ~3x).
``CompressedStore`` collects samples of the first objects it writes as full frames;
once it has ``TRAIN_AFTER_BYTES`` of them it trains a ``DICTIONARY_BYTES`` dictionary,
hands it to the backend, which numbers it (``put_dictionary``), and compresses every
later full frame with it. Dictionaries are never changed or deleted; a backend without
dictionary support simply never gets codec 2 frames.

Threads: a zstd context (compressor, decompressor) is not safe to use from two threads at
once: two threads sharing one corrupt the process's heap. Every thread has its own
(``_contexts``, and per dictionary in ``Dictionary``); a delta frame's context is made
for that frame alone. ``CompressedStore`` may be read from any number of threads beside
its one writer at a time (the repository's write lock makes writes take turns).
"""

from __future__ import annotations

import array
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

import zstandard

from snapvc.errors import CorruptObjectError, InvalidArgumentError, InvalidObjectIdError, ObjectNotFoundError
from snapvc.ids import ObjectId, hash_bytes
from snapvc.store.base import CanonicalStore, ObjectStore, RawObjectStore, StoreSizes

__all__ = [
    "CompressedStore", "VerifiedStore", "open_object_store", "encode_frame", "encode_delta_frame", "decode_frame",
    "raw_frame_body",
    "Dictionary", "train_dictionary", "MAX_DELTA_DEPTH", "decompress_bounded", "BlockFeeder", "FrameReader", "BLOCK_MAX",
    "WINDOW_MAX",
]

CODEC_RAW = 0
CODEC_ZSTD = 1
CODEC_ZSTD_DICT = 2
CODEC_ZSTD_DELTA = 3
KNOWN_CODECS = {CODEC_RAW: "raw", CODEC_ZSTD: "zstd", CODEC_ZSTD_DICT: "zstd-dict", CODEC_ZSTD_DELTA: "zstd-delta"}

# Objects this small rarely shrink; store them raw and skip the compressor's overhead.
MIN_COMPRESS = 64
# Largest canonical object we agree to decompress (a hard bound against corrupt sizes).
MAX_OBJECT = 1 << 31
# A frame declaring more than this is decoded a few zstd blocks at a time (BlockFeeder),
# so that memory follows what it truly decodes to, never what it declares; smaller ones
# in one call, into a buffer of the declared size.
ONE_CALL_BYTES = 1 << 20
# The largest window a frame may ask a decompressor to allocate (zstd's own limit is
# 128 MiB; the levels written here ask for 2 MiB, 8 MiB at most).
WINDOW_MAX = 32 << 20
# zstd's frame magic number, and the most one compressed zstd block decodes to.
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
BLOCK_MAX = 128 << 10
ZSTD_LEVEL = 3
# Deltas are small inputs (a node and its base, a few KB): measured on the agent run's
# 1,800 deltas, level 5 writes 9% less than levels 1-3 for 12 us more each (37 -> 49 us);
# levels beyond 7 cost 3-6x the time for nothing more.
DELTA_LEVEL = 5
# Dictionary training: sample full frames until this many bytes are collected (at most
# SAMPLE_MAX_BYTES, so a large first commit gives a broad sample), each sample at most
# SAMPLE_OBJECT_BYTES; then train a dictionary of DICTIONARY_BYTES. Measured on the agent
# run: 64 KiB saves 27% of the full frames (110 KiB: 30%, at twice the training time).
DICTIONARY_BYTES = 64 << 10
TRAIN_AFTER_BYTES = 256 << 10
SAMPLE_MAX_BYTES = 1 << 20
SAMPLE_OBJECT_BYTES = 16 << 10
# Training gives up on samples too few or too alike; it is tried again on this many times more.
RETRAIN_FACTOR = 2
MAX_TRAIN_ATTEMPTS = 3

# Batches at least this large are compressed by zstd's threads, one per core.
PARALLEL_ITEMS = 64
PARALLEL_BYTES = 1 << 20
_CORES = os.cpu_count() or 1


class _Contexts(threading.local):
    """This thread's zstd contexts (see the module docstring). Made on a thread's first
    use: making a context per call would cost ~20 us, against ~3 us to compress a small
    object with one made already."""

    def __init__(self) -> None:
        self.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=False, write_checksum=False)
        self.decompressor = zstandard.ZstdDecompressor(max_window_size=WINDOW_MAX)


_contexts = _Contexts()


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def decompress_bounded(data: bytes, limit: int, decompressor: zstandard.ZstdDecompressor | None = None) -> bytes:
    """``data``, one zstd frame, decompressed to at most ``limit`` bytes; a frame that
    states a larger size is refused before anything is allocated (zstd allocates what a
    frame states, whatever ``max_output_size`` allows). ``zstandard.ZstdError`` if it
    does not decode within ``limit``."""
    stated = zstandard.frame_content_size(data)
    if stated > limit:
        raise zstandard.ZstdError(f"the frame states {stated} bytes, more than the {limit} allowed")
    return (decompressor or _contexts.decompressor).decompress(data, max_output_size=limit)


class BlockFeeder:
    """One zstd frame decoded a few whole blocks at a time, as its compressed bytes come
    (``add``): ``take(budget)`` feeds the decompressor the next blocks that decode to at
    most ``budget`` bytes (at least one block), since a block decodes to at most its
    stated size (raw, RLE) or ``BLOCK_MAX`` (compressed). So what a frame decodes to is
    never held beyond what its reader asked for, by more than a block, however little of
    it is stored (a zstd bomb); the caller compares it with what was declared."""

    def __init__(self, decompressor: zstandard.ZstdDecompressor) -> None:
        self._decompressor = decompressor.decompressobj()
        self._pending = b""  # compressed bytes added; those from ``_fed`` on not yet fed
        self._fed = 0
        self._started = False  # the frame header was fed
        self._checksum = False  # the frame ends with a 4-byte checksum
        self._last = False  # the frame's last block was fed

    def add(self, data: bytes) -> None:
        """More compressed bytes, after those added before."""
        self._pending = self._pending[self._fed :] + data
        self._fed = 0

    def take(self, budget: int) -> bytes | None:
        """Feed the next whole blocks that decode to at most ``budget`` bytes (at least
        one block); what they decode to, or None if no whole block is left (more bytes
        are needed, or the frame ended). ``zstandard.ZstdError`` if the bytes are no zstd
        frame."""
        buf = self._pending
        start = pos = self._fed
        if not self._started:
            if not _ZSTD_MAGIC.startswith(buf[:4]) or (len(buf) > 4 and buf[4] & 0x08):
                raise zstandard.ZstdError("not a zstd frame")
            if len(buf) < 6:
                return None
            descriptor = buf[4]
            single = descriptor >> 5 & 1
            pos = 5 + (1 - single) + (0, 1, 2, 4)[descriptor & 3] + (single, 2, 4, 8)[descriptor >> 6]
            if len(buf) < pos:
                return None
            self._checksum = bool(descriptor & 0x04)
        bound = 0
        blocks = 0
        while not self._last and len(buf) >= pos + 3:
            header = int.from_bytes(buf[pos : pos + 3], "little")
            kind, size = header >> 1 & 3, header >> 3
            if kind == 3 or (kind == 2 and size > BLOCK_MAX):
                raise zstandard.ZstdError(f"a block header of type {kind} and size {size}")
            out = BLOCK_MAX if kind == 2 else size
            stored = 1 if kind == 1 else size
            if len(buf) < pos + 3 + stored or (blocks and bound + out > budget):
                break
            pos += 3 + stored
            bound += out
            blocks += 1
            if header & 1:
                self._last = True
                pos += 4 * self._checksum
        if pos == start:
            return None
        self._started = True
        self._fed = pos
        return self._decompressor.decompress(memoryview(buf)[start:pos])


# An empty skippable zstd frame: what ``_Source`` gives after a frame's last bytes (see
# there). Read where a block header is due, its first bytes state a block larger than
# any (``BLOCK_MAX``): a frame cut short does not decode.
_NOTHING_MORE = b"\x50\x2a\x4d\x18\x00\x00\x00\x00"


class _Source:
    """The compressed bytes of a ``FrameReader``'s frame, as zstd's reader asks for them:
    ``more()`` while a read is under way, set by that read (so that nothing outlives it,
    and what gives the bytes holds no reference from here).

    Once ``more()`` has no more, it gives ``_NOTHING_MORE`` once before the end: zstd's
    reader decodes only while it holds input, and would otherwise keep back for good
    what it decoded from the last bytes but could not yet hand out. After a whole
    frame it is an empty frame that zstd skips; in a frame cut short, a block header
    no frame holds, and the frame does not decode."""

    def __init__(self) -> None:
        self.more: Callable[[], bytes] | None = None
        self._ended = False

    def read(self, size: int) -> bytes:  # the file protocol: ``size`` is only a hint here
        data = self.more() if self.more is not None else b""
        if data or self._ended:
            return data
        self._ended = True
        return _NOTHING_MORE


class FrameReader:
    """One zstd frame whose compressed bytes are all there to be had, decoded straight
    into its reader's buffer as far as it asks (``read_into``); compressed bytes are
    asked of ``more`` only when the decoder needs them, b"" meaning the frame's bytes
    end there. No more is decoded than asked, so what a frame declares or holds (a zstd
    bomb) never costs more than its reader's buffer and the window its header states
    (at most ``WINDOW_MAX``). It decodes in one pass with no copy between zstd and the
    buffer, at zstd's own speed. For a whole frame only (its last block included): a
    frame that may still grow, or ends without a last block, is ``BlockFeeder``'s."""

    def __init__(self) -> None:
        self._source = _Source()
        self._reader = zstandard.ZstdDecompressor(max_window_size=WINDOW_MAX).stream_reader(
            self._source, read_size=BLOCK_MAX, read_across_frames=False)  # type: ignore[arg-type]  # has read()

    def read_into(self, buffer: bytearray, end: int, more: Callable[[], bytes]) -> None:
        """Decode the frame's next bytes onto the end of ``buffer`` until it holds
        ``end`` bytes, or the frame ends. ``zstandard.ZstdError`` if it does not decode."""
        have = len(buffer)
        if have >= end:
            return
        buffer += bytes(end - have)
        self._source.more = more
        try:
            with memoryview(buffer) as view:
                while have < end and (got := self._reader.readinto(view[have:end])):
                    have += got
        finally:
            self._source.more = None
            del buffer[have:]

    def ended(self, more: Callable[[], bytes]) -> bool:
        """Whether the frame ends where it was decoded to (nothing more decodes)."""
        self._source.more = more
        try:
            return not self._reader.read(1)
        finally:
            self._source.more = None


def _decompress_in_steps(decompressor: zstandard.ZstdDecompressor, body: bytes, size: int) -> bytes:
    """``body``, one zstd frame, decoded a few blocks at a time (``BlockFeeder``), to
    ``size`` bytes and at most a block more; ``zstandard.ZstdError`` if it decodes to
    more."""
    feeder = BlockFeeder(decompressor)
    feeder.add(body)
    out = bytearray()
    while (got := feeder.take(max(size - len(out), 1))) is not None:
        out += got
        if len(out) > size:
            raise zstandard.ZstdError(f"it decodes to more than the {size} bytes declared")
    return bytes(out)


class _BadVarint(Exception):
    """A frame header's length that runs past the frame's end or past 64 bits: each
    caller turns it into a ``CorruptObjectError`` naming the object, or skips the frame."""


def _read_varint(buf: bytes | bytearray, pos: int) -> tuple[int, int]:
    shift = 0
    value = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise _BadVarint("truncated or overlong length")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def encode_frame(data: bytes, dictionary: Dictionary | None = None, body: bytes | None = None) -> bytes:
    """The full frame for canonical bytes ``data``: zstd (with ``dictionary`` if given)
    when it saves space, raw otherwise. ``body``: ``data`` already compressed that way."""
    header = _varint(len(data))
    if len(data) >= MIN_COMPRESS:
        if body is None:
            body = dictionary.compress(data) if dictionary is not None else _contexts.compressor.compress(data)
        if len(body) < len(data):
            if dictionary is not None:
                return bytes((CODEC_ZSTD_DICT,)) + header + _varint(dictionary.number) + body
            return bytes((CODEC_ZSTD,)) + header + body
    return bytes((CODEC_RAW,)) + header + data


def compress_many(items: list[bytes], dictionary: Dictionary | None = None) -> list[bytes]:
    """Each of ``items`` zstd-compressed (with ``dictionary`` if given), as ``encode_frame``
    would: a large batch (a first commit of fresh data) is compressed on every core, by
    zstd's own threads."""
    compressor = dictionary.compressor() if dictionary is not None else _contexts.compressor
    if len(items) >= PARALLEL_ITEMS and sum(map(len, items)) >= PARALLEL_BYTES and _CORES > 1 and all(items):
        # (zstd's batch call leaves out empty inputs, so it gets none.)
        inputs: list[bytes | bytearray | memoryview[int]] = list(items)  # zstd's stubs take any byte string
        result = compressor.multi_compress_to_buffer(inputs, threads=_CORES)
        bodies = [result[i].tobytes() for i in range(len(result))]
        if len(bodies) == len(items):
            return bodies
    return [compressor.compress(data) for data in items]


class Dictionary:
    """A numbered zstd dictionary of one store, ready to compress and decompress with,
    from any thread: each thread gets its own contexts."""

    def __init__(self, number: int, data: bytes) -> None:
        self.number = number
        self.data = data
        self._dict = zstandard.ZstdCompressionDict(data, dict_type=zstandard.DICT_TYPE_FULLDICT)
        self._dict.precompute_compress(level=ZSTD_LEVEL)
        self._local = threading.local()  # zstd contexts are not to be shared across threads
        # zstd builds a dictionary's decompression tables on its first decompression,
        # without a lock: build them now, before any other thread can see this dictionary.
        self.decompress(self.compress(b"\0" * MIN_COMPRESS), MIN_COMPRESS)

    def compressor(self) -> zstandard.ZstdCompressor:
        found = getattr(self._local, "compressor", None)
        if found is None:
            found = self._local.compressor = zstandard.ZstdCompressor(
                level=ZSTD_LEVEL, dict_data=self._dict, write_content_size=False, write_checksum=False,
                write_dict_id=False,
            )
        return found

    def compress(self, data: bytes) -> bytes:
        return self.compressor().compress(data)

    def decompressor(self) -> zstandard.ZstdDecompressor:
        found = getattr(self._local, "decompressor", None)
        if found is None:
            found = self._local.decompressor = zstandard.ZstdDecompressor(dict_data=self._dict,
                                                                          max_window_size=WINDOW_MAX)
        return found

    def decompress(self, body: bytes, size: int) -> bytes:
        if size > ONE_CALL_BYTES:
            return _decompress_in_steps(self.decompressor(), body, size)
        return decompress_bounded(body, size, self.decompressor())


def train_dictionary(samples: list[bytes]) -> bytes | None:
    """A ``DICTIONARY_BYTES`` zstd dictionary trained on ``samples``, or None if zstd finds
    them too few or too alike to train on."""
    try:
        inputs: list[bytes | bytearray | memoryview[int]] = list(samples)  # zstd's stubs take any byte string
        return zstandard.train_dictionary(DICTIONARY_BYTES, inputs, level=ZSTD_LEVEL).as_bytes()
    except zstandard.ZstdError:
        return None


def raw_frame_body(buffer: bytes | bytearray, start: int, end: int) -> int | None:
    """Where the canonical bytes of the raw frame (codec 0) in ``buffer[start:end]``
    begin, if that is a raw frame whose header states exactly the bytes that follow it
    (at most ``MAX_OBJECT``); None for any other frame, which ``decode_frame`` decodes
    or names as damaged. A store that keeps raw frames hands out the bytes from there
    on without copying the frame first."""
    if start >= end or buffer[start] != CODEC_RAW:
        return None
    try:
        size, pos = _read_varint(buffer, start + 1)
    except _BadVarint:
        return None
    if pos > end or size != end - pos or size > MAX_OBJECT:
        return None
    return pos


def encode_delta_frame(data: bytes, base_id: ObjectId, base: bytes, depth: int) -> bytes | None:
    """A delta frame for ``data`` against ``base`` (at ``depth``, >= 1), or None if it does
    not compress (a dictionary only adds information, so a delta that compresses is
    rarely larger than a full frame)."""
    dictionary = zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    body = zstandard.ZstdCompressor(level=DELTA_LEVEL, dict_data=dictionary, write_content_size=False,
                                    write_checksum=False).compress(data)
    frame = bytes((CODEC_ZSTD_DELTA,)) + _varint(len(data)) + bytes((depth,)) + base_id + body
    return frame if len(body) + 34 < len(data) else None


def frame_depth(frame: bytes) -> int:
    """How many delta frames must be decoded to read this one (0 for a full frame)."""
    if frame and frame[0] == CODEC_ZSTD_DELTA:
        _, pos = _read_varint(frame, 1)
        return frame[pos]
    return 0


def frame_dictionary(oid: ObjectId, frame: bytes) -> int | None:
    """The dictionary number of a dictionary frame, None for any other."""
    if not frame or frame[0] != CODEC_ZSTD_DICT:
        return None
    try:
        _, pos = _read_varint(frame, 1)
        return _read_varint(frame, pos)[0]
    except _BadVarint:
        raise CorruptObjectError(oid, "truncated dictionary frame header") from None


def frame_base(oid: ObjectId, frame: bytes) -> ObjectId | None:
    """The base id of a delta frame, None for a full one."""
    if not frame or frame[0] != CODEC_ZSTD_DELTA:
        return None
    try:
        _, pos = _read_varint(frame, 1)
        return ObjectId(frame[pos + 1 : pos + 33])
    except (_BadVarint, InvalidObjectIdError):
        raise CorruptObjectError(oid, "truncated delta frame header") from None


def decode_frame(oid: ObjectId, frame: bytes, base: bytes | None = None, dictionary: Dictionary | None = None) -> bytes:
    """The canonical bytes inside ``frame`` (``base``: the canonical bytes of a delta
    frame's base; ``dictionary``: the dictionary a dictionary frame names);
    ``CorruptObjectError`` naming ``oid`` if it is damaged."""
    if not frame:
        raise CorruptObjectError(oid, "empty frame")
    codec = frame[0]
    try:
        size, pos = _read_varint(frame, 1)
    except _BadVarint as exc:
        raise CorruptObjectError(oid, f"bad frame header: {exc}") from None
    if size > MAX_OBJECT:
        raise CorruptObjectError(oid, f"declared size {size} exceeds the limit {MAX_OBJECT}")
    if codec == CODEC_RAW:
        data = frame[pos:]
    elif codec == CODEC_ZSTD_DICT:
        if dictionary is None:
            raise InvalidArgumentError("dictionary", f"object {oid}: a dictionary frame is decoded with its dictionary")
        try:
            _, pos = _read_varint(frame, pos)
            data = dictionary.decompress(frame[pos:], size)
        except _BadVarint as exc:
            raise CorruptObjectError(oid, f"bad frame header: {exc}") from None
        except zstandard.ZstdError as exc:
            raise CorruptObjectError(oid, f"zstd: {exc}") from None
    elif codec == CODEC_ZSTD or codec == CODEC_ZSTD_DELTA:
        decompressor = _contexts.decompressor
        if codec == CODEC_ZSTD_DELTA:
            if base is None:
                raise InvalidArgumentError("base", f"object {oid}: a delta frame is decoded with its base's bytes")
            pos += 33
            decompressor = zstandard.ZstdDecompressor(
                dict_data=zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT),
                max_window_size=WINDOW_MAX,
            )
        body = frame[pos:]
        try:
            # A zstd frame that states its own size is trusted only if it matches ours:
            # otherwise decompression would allocate what it states, not what we allow.
            stated = zstandard.frame_content_size(body)
            if stated not in (-1, size):
                raise CorruptObjectError(oid, f"declared size {size}, the zstd frame says {stated}")
            data = _decompress_in_steps(decompressor, body, size) if size > ONE_CALL_BYTES else \
                decompressor.decompress(body, max_output_size=size)
        except zstandard.ZstdError as exc:
            raise CorruptObjectError(oid, f"zstd: {exc}") from None
    else:
        raise CorruptObjectError(oid, f"unknown codec byte {codec}")
    if len(data) != size:
        raise CorruptObjectError(oid, f"declared size {size}, decoded {len(data)} bytes")
    return bytes(data)


# Longer chains store less (measured on the agent run: 8 -> 16 saves 5% of the file) but a
# read of a deep object decodes more frames (a fresh checkout of it took 31 -> 53 ms).
MAX_DELTA_DEPTH = 16
# The longest chain a read follows: as deep as a frame's depth byte can state. Writers keep
# chains to MAX_DELTA_DEPTH (a little more where another writer stored an object first,
# with another frame); anything longer is a damaged or hostile file.
MAX_DELTA_CHAIN = 255


class _DictionaryUnusable(Exception):
    """A compression dictionary that is missing or does not decode: a read that needs it
    turns this into a ``CorruptObjectError`` naming its object; a writer writes without it."""


_Inner = TypeVar("_Inner", bound=ObjectStore)


class _PassThrough(Generic[_Inner]):
    """What a wrapper forwards unchanged to the store it wraps (``inner``): the wrappers
    below override only what they change."""

    def __init__(self, inner: _Inner) -> None:
        self.inner = inner

    def has_many(self, ids: Iterable[ObjectId]) -> set[ObjectId]:
        return self.inner.has_many(ids)

    def ids_with_prefix(self, hex_prefix: str, limit: int = 2) -> list[ObjectId]:
        return self.inner.ids_with_prefix(hex_prefix, limit)

    def iter_ids(self) -> Iterator[ObjectId]:
        return self.inner.iter_ids()

    def mtimes(self, ids: Iterable[ObjectId]) -> dict[ObjectId, float]:
        return self.inner.mtimes(ids)

    def delete_many(self, ids: Iterable[ObjectId]) -> int:
        return self.inner.delete_many(ids)

    def sizes(self) -> StoreSizes:
        return self.inner.sizes()

    def close(self) -> None:
        self.inner.close()

    def get_many(self, ids: Iterable[ObjectId]) -> dict[ObjectId, bytes]:
        return self.inner.get_many(ids)

    def get(self, oid: ObjectId) -> bytes:
        found = self.get_many((oid,))
        try:
            return found[oid]
        except KeyError:
            raise ObjectNotFoundError(oid) from None


class CompressedStore(_PassThrough[RawObjectStore]):
    """Canonical bytes in, frames to the backend; frames from the backend, canonical bytes out.

    ``put_many(items, bases)`` may store an object as a delta against the base named for
    it in ``bases`` (new id -> base id), when the base is at hand and the delta is smaller.
    A bounded cache of recent canonical bytes serves as bases and speeds up delta chains.
    Full frames use the store's trained dictionary once there is one (see the module
    docstring), if the backend keeps dictionaries (``StoreCapabilities.dictionaries``).

    Reads may run in any number of threads, beside one writer at a time (``put_many``,
    ``forget``: the repository's write lock makes them take turns; the samples for the
    dictionary are the writer's alone). What reads and writes share, the cache of recent
    objects and the dictionaries, is guarded by ``_lock``, which is never held while the
    backend is called: callers may hold the backend's own lock (a transaction) when they
    call here, and a read waiting for that lock must not hold ours.
    """

    def __init__(self, inner: RawObjectStore, cache_bytes: int = 16 << 20) -> None:
        super().__init__(inner)
        self._recent: dict[bytes, tuple[bytes, int]] = {}  # id -> (canonical bytes, depth)
        self._recent_size = 0
        self._cache_bytes = cache_bytes
        self._dictionaries: dict[int, Dictionary] = {}
        self._stored_dictionaries: dict[int, bytes] = {}
        self._loaded_dictionaries = False
        self._writing: Dictionary | None = None  # the dictionary new full frames use
        # The dictionary this store trained: a rolled-back write (``forget``) may have taken
        # it along, so it is dropped then and trained again later (a committed one stays
        # readable from the backend either way).
        self._unconfirmed: Dictionary | None = None
        self._keeps_dictionaries = inner.capabilities.dictionaries
        self._raw_frames = inner.capabilities.compresses
        self._samples: list[bytes] = []
        self._sampled = 0
        self._train_at = TRAIN_AFTER_BYTES
        self._train_attempts = 0
        self._lock = threading.Lock()

    # -- dictionaries ---------------------------------------------------------------------

    def _load_dictionaries(self) -> None:
        """Read the backend's dictionaries (kept compressed; decoded on first use) and
        pick the newest one for writing."""
        if self._loaded_dictionaries or not self._keeps_dictionaries:
            return
        stored = self.inner.dictionaries()
        with self._lock:
            self._stored_dictionaries = stored
            self._loaded_dictionaries = True
        if self._writing is None and stored:
            try:
                newest = self._build_dictionary(max(stored))
            except _DictionaryUnusable:
                return  # a damaged dictionary is not written with; reads that need it report it
            with self._lock:
                if self._writing is None:
                    self._writing = newest

    def _build_dictionary(self, number: int) -> Dictionary:
        """Dictionary ``number`` ready to use; ``_DictionaryUnusable`` if it is missing or
        damaged (the caller names the object that needs it, or writes without it)."""
        with self._lock:
            found = self._dictionaries.get(number)
            stored = self._stored_dictionaries.get(number)
        if found is None:
            if stored is None:  # a rolled-back write took it along meanwhile
                raise _DictionaryUnusable(f"its compression dictionary {number} is missing")
            try:
                data = decompress_bounded(stored, 4 * DICTIONARY_BYTES)
                found = Dictionary(number, data)
            except zstandard.ZstdError as exc:
                raise _DictionaryUnusable(f"its compression dictionary {number} is damaged: {exc}") from None
            with self._lock:  # two threads may both have built it: all use the first
                found = self._dictionaries.setdefault(number, found)
        return found

    def _dictionary(self, oid: ObjectId, number: int) -> Dictionary:
        """Dictionary ``number``, which the frame of ``oid`` names."""
        if number not in self._dictionaries and number not in self._stored_dictionaries:
            self._loaded_dictionaries = False  # another process may have added it since
            self._load_dictionaries()
            if number not in self._stored_dictionaries:
                raise CorruptObjectError(oid, f"its compression dictionary {number} is missing")
        try:
            return self._build_dictionary(number)
        except _DictionaryUnusable as exc:
            raise CorruptObjectError(oid, str(exc)) from None

    def _sample(self, full: list[bytes]) -> None:
        """Collect samples of objects about to be stored as full frames; once there are
        enough, train the dictionary they (and every later full frame) are compressed with."""
        if self._writing is not None or not self._keeps_dictionaries or self._train_attempts >= MAX_TRAIN_ATTEMPTS:
            return
        # Spread the samples over the whole batch: the first objects of a large first
        # commit are often all of one kind (a binary blob's chunks, say), and a dictionary
        # trained on those alone serves the rest badly.
        room = SAMPLE_MAX_BYTES - self._sampled
        offered = sum(min(len(data), SAMPLE_OBJECT_BYTES) for data in full)
        step = max(1, -(-offered // room)) if room > 0 else 0
        for data in full[::step] if step else ():
            if self._sampled >= SAMPLE_MAX_BYTES:
                break
            sample = data[:SAMPLE_OBJECT_BYTES]
            self._samples.append(sample)
            self._sampled += len(sample)
        if self._sampled < self._train_at:
            return
        self._loaded_dictionaries = False
        self._load_dictionaries()  # another process may have trained one meanwhile
        if self._writing is not None:
            self._samples, self._sampled = [], 0
            return
        self._train_attempts += 1
        trained = train_dictionary(self._samples)
        if trained is None:
            self._train_at *= RETRAIN_FACTOR
            if self._train_at > SAMPLE_MAX_BYTES or self._train_attempts >= MAX_TRAIN_ATTEMPTS:
                self._train_attempts = MAX_TRAIN_ATTEMPTS  # give up: plain zstd frames it is
                self._samples, self._sampled = [], 0
            return
        # Kept zstd-compressed: a trained dictionary is mostly text, and shrinks ~2x.
        stored = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True).compress(trained)
        number = self.inner.put_dictionary(stored)
        made = Dictionary(number, trained)
        with self._lock:
            self._stored_dictionaries[number] = stored
            self._writing = self._dictionaries[number] = self._unconfirmed = made
        self._samples, self._sampled = [], 0

    # -- objects --------------------------------------------------------------------------

    def _remember(self, oid: bytes, data: bytes, depth: int) -> None:
        """Keep ``data`` among the recent objects (the caller holds ``_lock``)."""
        if oid in self._recent or len(data) > self._cache_bytes // 16:
            return
        self._recent[oid] = (data, depth)
        self._recent_size += len(data)
        while self._recent_size > self._cache_bytes:
            old, _ = self._recent.pop(next(iter(self._recent)))
            self._recent_size -= len(old)

    def put_many(self, items: Iterable[tuple[ObjectId, bytes]], bases: dict[ObjectId, ObjectId] | None = None) -> None:
        """Frame and store ``items``. A caller whose write is rolled back afterwards (an
        enclosing transaction failed) must call ``forget`` with the same ids."""
        items = list(items)
        if self._raw_frames:  # the backend compresses the frames together (see StoreCapabilities)
            with self._lock:
                for oid, data in items:
                    self._remember(oid, data, 0)
            self.inner.put_many([(oid, bytes((CODEC_RAW,)) + _varint(len(data)) + data) for oid, data in items])
            return
        frames: list[tuple[ObjectId, bytes] | None] = []
        full: list[tuple[int, ObjectId, bytes]] = []  # (index in frames, id, bytes) still to frame
        for oid, data in items:
            frame = None
            depth = 0
            base_id = bases.get(oid) if bases else None
            if base_id is not None:
                with self._lock:
                    known = self._recent.get(base_id)
                if known is not None and known[1] < MAX_DELTA_DEPTH:
                    depth = known[1] + 1
                    frame = encode_delta_frame(data, base_id, known[0], depth)
                    if frame is None:
                        depth = 0
            if frame is None:
                full.append((len(frames), oid, data))
                frames.append(None)
            else:
                frames.append((oid, frame))
            with self._lock:
                self._remember(oid, data, depth)
        if full:
            if self._writing is None:
                self._load_dictionaries()
                self._sample([data for _, _, data in full if len(data) >= MIN_COMPRESS])
            dictionary = self._writing
            worth = [item for item in full if len(item[2]) >= MIN_COMPRESS]
            bodies = dict(zip([oid for _, oid, _ in worth], compress_many([data for _, _, data in worth], dictionary),
                              strict=True))
            for i, oid, data in full:
                frames[i] = (oid, encode_frame(data, dictionary, bodies.get(oid)))
        self.inner.put_many([frame for frame in frames if frame is not None])  # every slot is filled above

    def _evict(self, ids: Iterable[bytes]) -> None:
        with self._lock:
            for oid in ids:
                known = self._recent.pop(oid, None)
                if known is not None:
                    self._recent_size -= len(known[0])

    def forget(self, ids: Iterable[bytes]) -> None:
        """Drop ``ids`` from the cache of recent objects (their write was rolled back), and
        a dictionary trained in that write (it was rolled back with it)."""
        self._evict(ids)
        with self._lock:
            if self._unconfirmed is not None:
                self._dictionaries.pop(self._unconfirmed.number, None)
                self._stored_dictionaries.pop(self._unconfirmed.number, None)
                self._writing = None
                self._unconfirmed = None
                self._train_attempts = 0

    def delete_many(self, ids: Iterable[ObjectId]) -> int:
        ids = list(ids)
        self._evict(ids)
        return self.inner.delete_many(ids)

    def forget_all(self) -> None:
        """Drop every recent object (a gc may have deleted them: none may serve as a delta
        base again) and reload the dictionaries when next needed."""
        with self._lock:
            self._recent.clear()
            self._recent_size = 0
            self._loaded_dictionaries = False

    def get_many(self, ids: Iterable[ObjectId], _depth: int = 0) -> dict[ObjectId, bytes]:
        """Canonical bytes of ``ids``; ``_depth`` is for reading delta bases (``_read_bases``)."""
        out: dict[ObjectId, bytes] = {}
        wanted = []
        with self._lock:
            for oid in ids:
                known = self._recent.get(oid)
                if known is not None:
                    out[oid] = known[0]
                else:
                    wanted.append(oid)
        if not wanted:
            return out
        if self._raw_frames:
            # Raw frames: the store hands out their canonical bytes, taken out of the frames
            # where it keeps them (one copy, not a frame's and then its bytes'); a frame
            # that is not a whole raw frame comes as a frame, decoded (or named) below.
            unframed, frames = self.inner.get_unframed_many(wanted)
            if unframed:
                out.update(unframed)
                with self._lock:
                    for oid, body in unframed.items():
                        self._remember(oid, body, 0)
            if not frames:
                return out
        else:
            frames = self.inner.get_many(wanted)
        bases = {oid: frame_base(oid, frame) for oid, frame in frames.items() if frame and frame[0] == CODEC_ZSTD_DELTA}
        base_bytes = self._read_bases(bases, _depth) if bases else {}
        decoded = self._decode_batch(frames) if len(frames) >= PARALLEL_ITEMS else {}
        read: list[tuple[ObjectId, bytes, int]] = []  # to remember, all under the lock at once
        for oid, frame in frames.items():
            data = decoded.get(oid)
            if data is not None:
                read.append((oid, data, 0))
                out[oid] = data
                continue
            base_id = bases.get(oid)
            base = None
            dictionary = None
            if base_id is not None:
                base = base_bytes.get(base_id)
                if base is None:
                    raise CorruptObjectError(oid, f"its delta base {base_id} is missing")
            elif frame and frame[0] == CODEC_ZSTD_DICT:
                number = frame_dictionary(oid, frame)  # not None: this is a dictionary frame
                dictionary = self._dictionary(oid, number) if number is not None else None
            data = decode_frame(oid, frame, base, dictionary)
            read.append((oid, data, frame_depth(frame)))
            out[oid] = data
        with self._lock:
            for oid, data, depth in read:
                self._remember(oid, data, depth)
        return out

    def _read_bases(self, bases: dict[ObjectId, ObjectId | None], depth: int) -> dict[ObjectId, bytes]:
        """The canonical bytes of the bases of delta frames (``bases``: frame -> base), read
        through ``get_many``, so a base that is itself a delta has its base read in turn;
        ``depth``: how many frames deep in their chains these are. A chain that loops (a
        frame based on itself, two frames based on each other) or runs on without end can
        only be damage: it is reported naming a frame of it, where a plain recursion
        would run out of stack."""
        for oid, base in bases.items():
            if base == oid:
                raise CorruptObjectError(oid, "its delta base is itself")
        if depth >= MAX_DELTA_CHAIN:
            raise self._endless_chain(next(oid for oid, base in bases.items() if base is not None))
        return self.get_many({base for base in bases.values() if base is not None}, depth + 1)

    def _endless_chain(self, oid: ObjectId) -> CorruptObjectError:
        """The error for a chain deeper than any writer makes, through ``oid``: it loops
        (which frames), or it is only too long."""
        chain = [oid]
        while len(chain) <= MAX_DELTA_CHAIN:
            frame = self.inner.get_many([chain[-1]]).get(chain[-1])
            base = frame_base(chain[-1], frame) if frame is not None else None
            if base is None:
                break
            if base in chain:
                loop = chain[chain.index(base):] + [base]
                return CorruptObjectError(oid, f"its delta chain loops: {' -> '.join(o.short for o in loop)}")
            chain.append(base)
        return CorruptObjectError(oid, f"its delta chain is more than {MAX_DELTA_CHAIN} frames long")

    def _decode_batch(self, frames: dict[ObjectId, bytes]) -> dict[ObjectId, bytes]:
        """Full zstd frames of a large read (a checkout of a large state) decoded by zstd's
        own threads, per dictionary; whatever this leaves out is decoded one by one."""
        groups: dict[int | None, list[tuple[ObjectId, bytes, int]]] = {}
        for oid, frame in frames.items():
            if not frame or frame[0] not in (CODEC_ZSTD, CODEC_ZSTD_DICT):
                continue
            try:
                size, pos = _read_varint(frame, 1)
                number = None
                if frame[0] == CODEC_ZSTD_DICT:
                    number, pos = _read_varint(frame, pos)
            except _BadVarint:
                continue
            if 0 < size <= ONE_CALL_BYTES:  # larger ones are decoded in steps, one by one
                groups.setdefault(number, []).append((oid, frame[pos:], size))
        out: dict[ObjectId, bytes] = {}
        for number, group in groups.items():
            if len(group) < PARALLEL_ITEMS or sum(size for _, _, size in group) < PARALLEL_BYTES:
                continue
            try:
                decompressor = (_contexts.decompressor if number is None
                                else self._dictionary(group[0][0], number).decompressor())
                # The sizes as zstd reads them: an array of 64-bit unsigned integers.
                sizes = array.array("Q", [size for _, _, size in group]).tobytes()
                bodies: list[bytes | bytearray | memoryview[int]] = [body for _, body, _ in group]
                result = decompressor.multi_decompress_to_buffer(bodies, decompressed_sizes=sizes, threads=_CORES)
                decoded = [result[i].tobytes() for i in range(len(result))]
            except (zstandard.ZstdError, CorruptObjectError, ValueError):
                continue  # one by one, so that a damaged frame is named
            if len(decoded) != len(group):
                continue
            for (oid, _, size), data in zip(group, decoded, strict=True):
                if len(data) == size:
                    out[oid] = data
        return out


class VerifiedStore(_PassThrough[CanonicalStore]):
    """Checks on every read that the bytes hash to the id asked for (invariant 6); all
    else passes to the ``CanonicalStore`` below (``CompressedStore``)."""

    def put_many(self, items: Iterable[tuple[ObjectId, bytes]], bases: dict[ObjectId, ObjectId] | None = None) -> None:
        self.inner.put_many(items, bases)

    def forget(self, ids: Iterable[bytes]) -> None:
        """Drop ``ids`` from every cache below (their write was rolled back)."""
        self.inner.forget(ids)

    def forget_all(self) -> None:
        """Drop every cache below (a gc ran)."""
        self.inner.forget_all()

    def get_many(self, ids: Iterable[ObjectId]) -> dict[ObjectId, bytes]:
        found = self.inner.get_many(ids)
        for oid, data in found.items():
            if hash_bytes(data) != oid:
                raise CorruptObjectError(oid, "content does not match its id (blake3 mismatch)")
        return found


def open_object_store(backend: RawObjectStore) -> VerifiedStore:
    """The stack the repository reads and writes through: verification over compression over ``backend``."""
    return VerifiedStore(CompressedStore(backend))
