"""Stored-object frames: compression and read verification, as wrappers around any backend.

A frame is what a backend keeps for one object:

    byte 0      codec: 0 raw, 1 zstd, 2 zstd with a trained dictionary, 3 zstd delta
    varint      length of the object's canonical bytes (bounds decompression)
    [codec 2]   varint dictionary number
    [codec 3]   32-byte id of the base object the delta is against
    rest        the body

The id is the blake3 of the *canonical* bytes (kind tag + payload), never of the frame,
so how an object is compressed can change without changing any id. Codecs 2 and 3 are
reserved in the format so that dictionaries and deltas can arrive without breaking
existing repositories; this version writes codecs 0 and 1 and refuses the others with
``FormatVersionError``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import zstandard

from snapvc.errors import CorruptObjectError, FormatVersionError, ObjectNotFoundError
from snapvc.ids import ObjectId, hash_bytes
from snapvc.store.base import ObjectStore, StoreSizes

__all__ = ["CompressedStore", "VerifiedStore", "open_object_store", "encode_frame", "decode_frame"]

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
    """The frame for canonical bytes ``data``: zstd when it saves space, raw otherwise."""
    header = _varint(len(data))
    if len(data) >= MIN_COMPRESS:
        body = _compressor.compress(data)
        if len(body) < len(data):
            return bytes((CODEC_ZSTD,)) + header + body
    return bytes((CODEC_RAW,)) + header + data


def decode_frame(oid: ObjectId, frame: bytes) -> bytes:
    """The canonical bytes inside ``frame``; ``CorruptObjectError`` naming ``oid`` if it is damaged."""
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
    elif codec == CODEC_ZSTD:
        try:
            data = _decompressor.decompress(frame[pos:], max_output_size=size)
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


def frame_codec(frame: bytes) -> str:
    """The codec name of a frame, for stats."""
    return KNOWN_CODECS.get(frame[0], f"unknown({frame[0]})") if frame else "empty"


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


class CompressedStore(_Wrapper):
    """Canonical bytes in, frames to the backend; frames from the backend, canonical bytes out."""

    def put_many(self, items: Iterable[tuple[ObjectId, bytes]]) -> None:
        self.inner.put_many((oid, encode_frame(data)) for oid, data in items)

    def get_many(self, ids: Iterable[ObjectId]) -> dict[ObjectId, bytes]:
        return {oid: decode_frame(oid, frame) for oid, frame in self.inner.get_many(ids).items()}


class VerifiedStore(_Wrapper):
    """Checks on every read that the bytes hash to the id asked for (invariant 6)."""

    def put_many(self, items: Iterable[tuple[ObjectId, bytes]]) -> None:
        self.inner.put_many(items)

    def get_many(self, ids: Iterable[ObjectId]) -> dict[ObjectId, bytes]:
        found = self.inner.get_many(ids)
        for oid, data in found.items():
            if hash_bytes(data) != oid:
                raise CorruptObjectError(oid, "content does not match its id (blake3 mismatch)")
        return found


def open_object_store(backend: ObjectStore) -> ObjectStore:
    """The stack the repository reads and writes through: verification over compression over ``backend``."""
    return VerifiedStore(CompressedStore(backend))
