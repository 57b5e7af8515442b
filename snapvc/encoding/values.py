"""Inline value encoding: msgpack plus a fixed set of extension types.

Plain data maps onto msgpack directly (None, bool, int within 64 bits, float64, str,
bytes, arrays, maps with str keys sorted by code point). Everything else that snapvc
stores exactly is an extension type, whose codes are part of the format:

====  ===========  =====================================================
code  name         data
====  ===========  =====================================================
0     REF          32-byte ObjectId of a child object (only as a node entry)
1     TUPLE        msgpack array of the elements
2     BIGINT       two's-complement big-endian bytes of an int beyond 64 bits
3     DATETIME     msgpack ``[isoformat, zone key or nil, fold]`` (with a zone key the
                   isoformat is the wall time, without offset)
4     DATE         isoformat
5     TIME         msgpack ``[isoformat, zone key or nil, fold]``
6     TIMEDELTA    msgpack ``[days, seconds, microseconds]``
7     UUID         16 bytes
8     DECIMAL      ``str(decimal)`` (exact, incl. NaN, -0, exponent)
9     TYPED        msgpack ``[type name, fields map]`` (see ``adapters``)
====  ===========  =====================================================

NaN is stored as the one canonical quiet NaN, so equal states hash equal.
"""

from __future__ import annotations

import datetime as _dt
import uuid
from decimal import Decimal
from collections.abc import Callable
from typing import Any, Final
from zoneinfo import ZoneInfo

import msgpack

from snapvc.encoding.adapters import adapter_for_name
from snapvc.errors import FormatVersionError, UnsupportedValueError
from snapvc.ids import ObjectId
from snapvc.objects import MAX_DEPTH

__all__ = [
    "EXT_REF",
    "REF_PREFIX",
    "ref_encoding",
    "is_ref",
    "array_header",
    "map_header",
    "new_packer",
    "decode_inline",
    "ext_hook",
    "MAX_DEPTH",
    "SCALAR_EXT_TYPES",
    "ext_encoding",
]

EXT_REF: Final = 0
EXT_TUPLE: Final = 1
EXT_BIGINT: Final = 2
EXT_DATETIME: Final = 3
EXT_DATE: Final = 4
EXT_TIME: Final = 5
EXT_TIMEDELTA: Final = 6
EXT_UUID: Final = 7
EXT_DECIMAL: Final = 8
EXT_TYPED: Final = 9

# msgpack "ext 8" header for 32 bytes of type 0: every reference starts with these bytes.
REF_PREFIX: Final = b"\xc7\x20\x00"
INT_MIN: Final = -(1 << 63)
INT_LIMIT: Final = 1 << 64
# Containers nest at most MAX_DEPTH deep (``snapvc.objects``, where the one rule for states
# and commit metadata is kept): deeper states are refused with an error naming the path,
# so that no reader (checkout, diff, merge, JSON), recursive as each is, ever meets
# Python's recursion limit (about 330 levels for a list diff at the top of the stack).
# The scalar types stored as extension types (an int only beyond 64 bits).
SCALAR_EXT_TYPES: Final = (_dt.datetime, _dt.date, _dt.time, _dt.timedelta, uuid.UUID, Decimal)

_ARRAY_SMALL = [bytes((0x90 | n,)) for n in range(16)]
_MAP_SMALL = [bytes((0x80 | n,)) for n in range(16)]


def array_header(n: int) -> bytes:
    if n < 16:
        return _ARRAY_SMALL[n]
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def map_header(n: int) -> bytes:
    if n < 16:
        return _MAP_SMALL[n]
    if n < 0x10000:
        return b"\xde" + n.to_bytes(2, "big")
    return b"\xdf" + n.to_bytes(4, "big")


def ref_encoding(oid: bytes) -> bytes:
    return REF_PREFIX + oid


def is_ref(enc: bytes) -> bool:
    return enc.startswith(REF_PREFIX)


def new_packer() -> msgpack.Packer:
    """A packer for scalars and extension types (not thread-safe: one per encoder)."""
    return msgpack.Packer(use_bin_type=True, autoreset=True)


def _zone_key(tz: _dt.tzinfo | None) -> str | None:
    return tz.key if isinstance(tz, ZoneInfo) else None


def ext_payload_for(value: Any, pack: Any) -> tuple[int, bytes] | None:
    """The (code, data) of a scalar extension type for ``value``, or None if it is not one."""
    t = type(value)
    if t is int:
        length = (value.bit_length() + 8) // 8
        return EXT_BIGINT, value.to_bytes(length, "big", signed=True)
    if t is _dt.datetime or t is _dt.time:
        key = _zone_key(value.tzinfo)
        wall = value.replace(tzinfo=None) if key is not None else value
        return (EXT_DATETIME if t is _dt.datetime else EXT_TIME), pack([wall.isoformat(), key, value.fold])
    if t is _dt.date:
        return EXT_DATE, value.isoformat().encode()
    if t is _dt.timedelta:
        return EXT_TIMEDELTA, pack([value.days, value.seconds, value.microseconds])
    if t is uuid.UUID:
        return EXT_UUID, value.bytes
    if t is Decimal:
        return EXT_DECIMAL, str(value).encode()
    return None


def ext_encoding(value: Any, pack: Callable[[Any], bytes]) -> bytes:
    """The inline encoding of a scalar stored as an extension type: an int beyond 64 bits
    or one of ``SCALAR_EXT_TYPES`` (callers check the type first)."""
    found = ext_payload_for(value, pack)
    if found is None:
        raise UnsupportedValueError("value", f"{type(value).__qualname__} is not a scalar stored as an extension type")
    return pack(msgpack.ExtType(*found))


def _with_zone(value: Any, key: str | None, fold: int) -> Any:
    if key is not None:
        value = value.replace(tzinfo=ZoneInfo(key))
    return value.replace(fold=fold) if fold else value


def ext_hook(code: int, data: bytes) -> Any:
    """Turns extension types back into values; a REF becomes its ``ObjectId``. A code
    not in the table above raises ``FormatVersionError``; damaged data raises whatever
    its decoder does (the caller names the object or value it was in)."""
    if code == EXT_REF:
        return ObjectId(data)
    if code == EXT_TUPLE:
        return tuple(msgpack.unpackb(data, ext_hook=ext_hook, raw=False))
    if code == EXT_BIGINT:
        return int.from_bytes(data, "big", signed=True)
    if code == EXT_DATETIME:
        iso, key, fold = msgpack.unpackb(data, raw=False)
        return _with_zone(_dt.datetime.fromisoformat(iso), key, fold)
    if code == EXT_DATE:
        return _dt.date.fromisoformat(data.decode())
    if code == EXT_TIME:
        iso, key, fold = msgpack.unpackb(data, raw=False)
        return _with_zone(_dt.time.fromisoformat(iso), key, fold)
    if code == EXT_TIMEDELTA:
        days, seconds, micros = msgpack.unpackb(data)
        return _dt.timedelta(days=days, seconds=seconds, microseconds=micros)
    if code == EXT_UUID:
        return uuid.UUID(bytes=data)
    if code == EXT_DECIMAL:
        return Decimal(data.decode())
    if code == EXT_TYPED:
        name, fields = msgpack.unpackb(data, ext_hook=ext_hook, raw=False)
        return adapter_for_name(name).from_fields(fields)
    raise FormatVersionError(f"an inline value of extension type {code}, unknown to this snapvc version")


def decode_inline(data: bytes) -> Any:
    """Decode msgpack bytes written by the encoder (node payloads, inline values)."""
    return msgpack.unpackb(data, ext_hook=ext_hook, raw=False)
