"""The content-defined chunker: where a long str or bytes is cut into chunks.

A str or bytes of more than ``CHUNK_THRESHOLD`` bytes (UTF-8 for a str) is stored as a
TEXT tree over BLOB chunks. The cuts are content-defined (FastCDC, ``pyfastcdc``): each
falls where a rolling hash of the bytes before it says so, so a cut depends on the
bytes around it alone, and an edit in the middle of a long document changes about one
chunk; every chunk before and after it is the same object as before. ``CDC_AVG`` is the
average chunk size aimed at (FastCDC's minimum and maximum are a quarter and four
times it). Both constants are part of the format: other values give other ids.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from pyfastcdc import FastCDC

__all__ = ["CHUNK_THRESHOLD", "CDC_AVG", "chunk_spans"]

CHUNK_THRESHOLD: Final = 8192
CDC_AVG: Final = 4096

# Holds only its parameters: each ``cut_buf`` walks a buffer with a chunker of its own,
# so the one instance is safe to share between threads.
_fastcdc: Final = FastCDC(avg_size=CDC_AVG)


def chunk_spans(data: bytes) -> Iterator[tuple[int, int]]:
    """``(offset, length)`` of each chunk of ``data``, in order, covering it all: a
    function of the bytes alone."""
    for chunk in _fastcdc.cut_buf(data):
        yield chunk.offset, chunk.length
