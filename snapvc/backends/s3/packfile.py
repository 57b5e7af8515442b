"""The pack format of a repository on S3: many objects and commits in one S3 object.

A pack is ``MAGIC``, a 4-byte little-endian header length, a msgpack header, then the
frames back to back. The header (``{"v": PACK_FORMAT, "objects": [...], "commits":
[...]}``) lists every object (id, offset into the frames, length, age) and holds each
commit of the pack whole (its canonical bytes and age). An entry of length ``TOUCH``
stores no frame: it refreshes the age of an object stored in an earlier pack
(invariant 4). ``snapvc.backends.s3.packs`` reads and writes them.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack

from snapvc.errors import RepositoryError
from snapvc.ids import ObjectId

__all__ = ["MAGIC", "PACK_FORMAT", "TOUCH", "encode_pack", "decode_pack_header"]

MAGIC = b"SNVPACK1"
PACK_FORMAT = 1
TOUCH = 0xFFFFFFFF


def encode_pack(objects: list[tuple[ObjectId, bytes | None, float]], commits: list[tuple[bytes, float]]) -> bytes:
    """A pack of ``objects`` (id, frame or None for a touch, age) and ``commits``
    (canonical bytes, age)."""
    entries = []
    offset = 0
    frames = []
    for oid, frame, mtime in objects:
        if frame is None:
            entries.append((bytes(oid), 0, TOUCH, mtime))
        else:
            entries.append((bytes(oid), offset, len(frame), mtime))
            frames.append(frame)
            offset += len(frame)
    header: bytes = msgpack.packb({"v": PACK_FORMAT, "objects": entries, "commits": commits}, use_bin_type=True)
    return MAGIC + struct.pack("<I", len(header)) + header + b"".join(frames)


def decode_pack_header(where: str, head: bytes) -> tuple[int, dict[str, Any]] | int:
    """The frames' start and the header of a pack from its first bytes, or how many
    bytes are needed when ``head`` is too short. Errors name the pack by ``where``."""
    if len(head) < len(MAGIC) + 4 or not head.startswith(MAGIC):
        raise RepositoryError(f"{where} is not a snapvc pack (bad magic)")
    (size,) = struct.unpack_from("<I", head, len(MAGIC))
    start: int = len(MAGIC) + 4 + size
    if len(head) < start:
        return start
    try:
        header = msgpack.unpackb(head[len(MAGIC) + 4 : start], raw=False)
    except Exception as exc:
        raise RepositoryError(f"{where}: damaged pack header: {exc}") from None
    if not isinstance(header, dict) or header.get("v") != PACK_FORMAT:
        raise RepositoryError(f"{where}: unknown pack format {header.get('v') if isinstance(header, dict) else '?'}")
    return start, header
