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
size of those entries. Chains are at most ``MAX_DELTA_DEPTH`` (8) long, so a read decodes at
most that many frames. A base must outlive the deltas that use it (GC keeps it; see
docs/design.md). Codec 2 is reserved for shared dictionaries; this version refuses it
with ``FormatVersionError``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import zstandard

from snapvc.errors import CorruptObjectError, FormatVersionError, ObjectNotFoundError
from snapvc.ids import ObjectId, hash_bytes
from snapvc.store.base import ObjectStore, StoreSizes

__all__ = ["CompressedStore", "VerifiedStore", "open_object_store", "encode_frame", "encode_delta_frame", "decode_frame", "MAX_DELTA_DEPTH"]

CODEC_RAW = 0
CODEC_ZSTD = 1
CODEC_ZSTD_DICT = 2
CODEC_ZSTD_DELTA = 3
KNOWN_CODECS = {CODEC_RAW: "raw", CODEC_ZSTD: "zstd", CODEC_ZSTD_DICT: "zstd-dict", CODEC_ZSTD_DELTA: "zstd-delta"}

# Objects this small rarely shrink; store them raw and skip the compressor's overhead.
MIN_COMPRESS = 64
# Largest canonical object we agree to decompress (a hard bound against corrupt sizes).
MAX_OBJECT = 1 << 31
ZSTD_LEVEL = 3
# Against a base, level 1 finds the shared bytes as well as level 3, at a quarter of the cost.
DELTA_LEVEL = 1

_compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=False, write_checksum=False)
_decompressor = zstandard.ZstdDecompressor()


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


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    value = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated or overlong length")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def encode_frame(data: bytes) -> bytes:
    """The full frame for canonical bytes ``data``: zstd when it saves space, raw otherwise."""
    header = _varint(len(data))
    if len(data) >= MIN_COMPRESS:
        body = _compressor.compress(data)
        if len(body) < len(data):
            return bytes((CODEC_ZSTD,)) + header + body
    return bytes((CODEC_RAW,)) + header + data


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


def frame_base(oid: ObjectId, frame: bytes) -> ObjectId | None:
    """The base id of a delta frame, None for a full one."""
    if not frame or frame[0] != CODEC_ZSTD_DELTA:
        return None
    try:
        _, pos = _read_varint(frame, 1)
        return ObjectId(frame[pos + 1 : pos + 33])
    except ValueError:
        raise CorruptObjectError(oid, "truncated delta frame header") from None


def decode_frame(oid: ObjectId, frame: bytes, base: bytes | None = None) -> bytes:
    """The canonical bytes inside ``frame`` (``base``: the canonical bytes of a delta
    frame's base); ``CorruptObjectError`` naming ``oid`` if it is damaged."""
    if not frame:
        raise CorruptObjectError(oid, "empty frame")
    codec = frame[0]
    try:
        size, pos = _read_varint(frame, 1)
    except ValueError as exc:
        raise CorruptObjectError(oid, f"bad frame header: {exc}") from None
    if size > MAX_OBJECT:
        raise CorruptObjectError(oid, f"declared size {size} exceeds the limit {MAX_OBJECT}")
    if codec == CODEC_RAW:
        data = frame[pos:]
    elif codec == CODEC_ZSTD or codec == CODEC_ZSTD_DELTA:
        decompressor = _decompressor
        if codec == CODEC_ZSTD_DELTA:
            if base is None:
                raise ValueError("a delta frame needs its base")
            pos += 33
            decompressor = zstandard.ZstdDecompressor(
                dict_data=zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
            )
        body = frame[pos:]
        try:
            # A zstd frame that states its own size is trusted only if it matches ours:
            # otherwise decompression would allocate what it states, not what we allow.
            stated = zstandard.frame_content_size(body)
            if stated not in (-1, size):
                raise CorruptObjectError(oid, f"declared size {size}, the zstd frame says {stated}")
            data = decompressor.decompress(body, max_output_size=size)
        except zstandard.ZstdError as exc:
            raise CorruptObjectError(oid, f"zstd: {exc}") from None
    elif codec in KNOWN_CODECS:
        raise FormatVersionError(
            f"object {oid} uses codec {KNOWN_CODECS[codec]!r}, which this snapvc version cannot read; upgrade snapvc"
        )
    else:
        raise CorruptObjectError(oid, f"unknown codec byte {codec}")
    if len(data) != size:
        raise CorruptObjectError(oid, f"declared size {size}, decoded {len(data)} bytes")
    return bytes(data)


class _Wrapper:
    """Forwards everything a wrapper does not change to the store it wraps."""

    def __init__(self, inner: ObjectStore) -> None:
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

    def get(self, oid: ObjectId) -> bytes:
        found = self.get_many((oid,))  # type: ignore[attr-defined]
        try:
            return found[oid]
        except KeyError:
            raise ObjectNotFoundError(oid) from None


MAX_DELTA_DEPTH = 8


class CompressedStore(_Wrapper):
    """Canonical bytes in, frames to the backend; frames from the backend, canonical bytes out.

    ``put_many(items, bases)`` may store an object as a delta against the base named for
    it in ``bases`` (new id -> base id), when the base is at hand and the delta is smaller.
    A bounded cache of recent canonical bytes serves as bases and speeds up delta chains.
    """

    def __init__(self, inner: ObjectStore, cache_bytes: int = 16 << 20) -> None:
        super().__init__(inner)
        self._recent: dict[bytes, tuple[bytes, int]] = {}  # id -> (canonical bytes, depth)
        self._recent_size = 0
        self._cache_bytes = cache_bytes

    def _remember(self, oid: bytes, data: bytes, depth: int) -> None:
        if oid in self._recent or len(data) > self._cache_bytes // 16:
            return
        self._recent[oid] = (data, depth)
        self._recent_size += len(data)
        while self._recent_size > self._cache_bytes:
            old, _ = self._recent.pop(next(iter(self._recent)))
            self._recent_size -= len(old)

    def put_many(self, items: Iterable[tuple[ObjectId, bytes]], bases: dict[ObjectId, ObjectId] | None = None) -> None:
        frames = []
        for oid, data in items:
            frame = None
            depth = 0
            base_id = bases.get(oid) if bases else None
            if base_id is not None:
                known = self._recent.get(base_id)
                if known is not None and known[1] < MAX_DELTA_DEPTH:
                    depth = known[1] + 1
                    frame = encode_delta_frame(data, base_id, known[0], depth)
                    if frame is None:
                        depth = 0
            if frame is None:
                frame = encode_frame(data)
            frames.append((oid, frame))
            self._remember(oid, data, depth)
        self.inner.put_many(frames)

    def forget(self, ids: Iterable[bytes]) -> None:
        """Drop ``ids`` from the cache of recent objects (their write was rolled back)."""
        for oid in ids:
            known = self._recent.pop(oid, None)
            if known is not None:
                self._recent_size -= len(known[0])

    def delete_many(self, ids: Iterable[ObjectId]) -> int:
        ids = list(ids)
        self.forget(ids)
        return self.inner.delete_many(ids)

    def get_many(self, ids: Iterable[ObjectId]) -> dict[ObjectId, bytes]:
        out: dict[ObjectId, bytes] = {}
        wanted = []
        for oid in ids:
            known = self._recent.get(oid)
            if known is not None:
                out[oid] = known[0]
            else:
                wanted.append(oid)
        if not wanted:
            return out
        frames = self.inner.get_many(wanted)
        bases = {oid: frame_base(oid, frame) for oid, frame in frames.items() if frame and frame[0] == CODEC_ZSTD_DELTA}
        base_bytes = self.get_many([b for b in set(bases.values()) if b is not None]) if bases else {}
        for oid, frame in frames.items():
            base_id = bases.get(oid)
            base = None
            if base_id is not None:
                base = base_bytes.get(base_id)
                if base is None:
                    raise CorruptObjectError(oid, f"its delta base {base_id} is missing")
            data = decode_frame(oid, frame, base)
            self._remember(oid, data, frame_depth(frame))
            out[oid] = data
        return out


class VerifiedStore(_Wrapper):
    """Checks on every read that the bytes hash to the id asked for (invariant 6)."""

    def put_many(self, items: Iterable[tuple[ObjectId, bytes]], bases: dict[ObjectId, ObjectId] | None = None) -> None:
        if bases:
            self.inner.put_many(items, bases)  # type: ignore[call-arg]
        else:
            self.inner.put_many(items)

    def forget(self, ids: Iterable[bytes]) -> None:
        """Drop ``ids`` from any cache below (their write was rolled back)."""
        forget = getattr(self.inner, "forget", None)
        if forget is not None:
            forget(ids)

    def get_many(self, ids: Iterable[ObjectId]) -> dict[ObjectId, bytes]:
        found = self.inner.get_many(ids)
        for oid, data in found.items():
            if hash_bytes(data) != oid:
                raise CorruptObjectError(oid, "content does not match its id (blake3 mismatch)")
        return found


def open_object_store(backend: ObjectStore) -> VerifiedStore:
    """The stack the repository reads and writes through: verification over compression over ``backend``."""
    return VerifiedStore(CompressedStore(backend))
