"""``ObjectId``: the 32-byte blake3 address of a stored object.

An id is derived from an object's content (see ``snapvc.objects``), never chosen by a
caller. It shows as 64 hex digits; ``short`` gives the 12-digit form used in logs, and
any unique hex prefix of at least ``MIN_PREFIX`` digits names it on the command line.
"""

from __future__ import annotations

import re
from typing import Final

import blake3

from snapvc.errors import InvalidObjectIdError

__all__ = ["ObjectId", "MIN_PREFIX", "SHORT_LENGTH", "hash_bytes"]

ID_SIZE: Final = 32
MIN_PREFIX: Final = 4
SHORT_LENGTH: Final = 12
_HEX = re.compile(r"[0-9a-f]+")


def hash_bytes(data: bytes) -> bytes:
    """The 32-byte blake3 digest of ``data``."""
    return blake3.blake3(data).digest()


class ObjectId(bytes):
    """A 32-byte object address; a ``bytes`` subclass so it is hashable, orderable and
    compact. Anything else than 32 bytes (or, for ``from_hex``, 64 hex digits) raises
    ``InvalidObjectIdError``."""

    __slots__ = ()

    def __new__(cls, raw: bytes) -> ObjectId:
        if len(raw) != ID_SIZE:
            raise InvalidObjectIdError(raw, f"an object id is {ID_SIZE} bytes, got {len(raw)}")
        return super().__new__(cls, raw)

    @classmethod
    def from_hex(cls, text: str) -> ObjectId:
        """Parse a full 64-digit hex id."""
        if not isinstance(text, str):
            raise InvalidObjectIdError(text, f"an object id in hex is a str, not a {type(text).__name__}")
        text = text.strip().lower()
        if len(text) != 2 * ID_SIZE or not _HEX.fullmatch(text):
            raise InvalidObjectIdError(text, f"not a full object id: {text!r} (expected 64 hex digits)")
        return cls(bytes.fromhex(text))

    @classmethod
    def of(cls, data: bytes) -> ObjectId:
        """The id of an object whose canonical bytes (kind tag + payload) are ``data``."""
        return cls(hash_bytes(data))

    @property
    def hex(self) -> str:  # type: ignore[override]
        return bytes.hex(self)

    @property
    def short(self) -> str:
        return bytes.hex(self)[:SHORT_LENGTH]

    def __str__(self) -> str:
        return bytes.hex(self)

    def __repr__(self) -> str:
        return f"ObjectId({self.short})"


def is_hex_prefix(text: str) -> bool:
    """True if ``text`` could be an abbreviated id: 4 to 64 lowercase or uppercase hex digits."""
    return MIN_PREFIX <= len(text) <= 2 * ID_SIZE and _HEX.fullmatch(text.lower()) is not None
