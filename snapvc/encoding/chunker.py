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
from typing import Final, NamedTuple

from pyfastcdc import FastCDC

__all__ = ["CHUNK_THRESHOLD", "CDC_AVG", "CDC_MAX", "Rechunked", "chunk_spans", "rechunk"]

CHUNK_THRESHOLD: Final = 8192
CDC_AVG: Final = 4096

# Holds only its parameters: each ``cut_buf`` walks a buffer with a chunker of its own,
# so the one instance is safe to share between threads.
_fastcdc: Final = FastCDC(avg_size=CDC_AVG)
# The longest chunk FastCDC makes: how far past a chunk's start its cut may depend on the bytes.
CDC_MAX: Final = int(_fastcdc.max_size)
# Bytes compared at a time when looking for where two versions of a value part.
_BLOCK: Final = 1 << 22
# How an old chunk is recognised where a new one starts (``rechunk``): by its first
# bytes, then by all of them; and how many new chunks are cut before looking.
_OPENING: Final = 64
_CUT_BEFORE_LOOKING: Final = 4


def chunk_spans(data: bytes) -> Iterator[tuple[int, int]]:
    """``(offset, length)`` of each chunk of ``data``, in order, covering it all: a
    function of the bytes alone."""
    for chunk in _fastcdc.cut_buf(data):
        yield chunk.offset, chunk.length


class Rechunked(NamedTuple):
    """The chunks of new bytes, given the chunks of the bytes that stood before them: old
    chunks ``[0:head]`` again, at the same offsets; then the new ``spans``; then old chunks
    ``[tail:]``, moved by the difference of the two lengths."""

    head: int
    spans: list[tuple[int, int]]
    tail: int
    moved: dict[int, int]  # spans[i] is the old chunk moved[i] (the same bytes, moved): taken without hashing


def rechunk(data: bytes, old: bytes, old_starts: list[int]) -> Rechunked:
    """The same chunks as ``chunk_spans(data)``, found in time that follows what changed
    since ``old`` (whose chunks start at ``old_starts``), not the length of ``data``.

    FastCDC cuts each chunk from its own start, looking at no byte past its cut and at
    most ``CDC_MAX`` bytes: an old chunk that lies within the prefix both versions share
    (found with ``memcmp``, far cheaper than cutting and hashing) and did not meet the
    old end is cut the same way again, and cutting restarted at an old chunk's start
    gives the cuts a run from the very beginning gives. Likewise, once a new chunk starts
    at an old chunk's start (moved by the change of length) inside the suffix both share,
    every later cut is the old one: the same bytes, the same distance from the end.
    Appending to a long value cuts only its last chunks; a change in its middle, about
    the chunks around it. Between two changes (a value edited near its start and grown
    near its end), a new chunk that starts where an old chunk's bytes start again, moved,
    is that chunk, and so are the old chunks after it as far as the bytes stay the same
    (``_moved_run``): they are taken as they were (``Rechunked.moved``), not cut again."""
    m, n = len(old), len(data)
    both = min(m, n)
    same = _common_prefix(old, data, both)
    count = len(old_starts)
    head = 0
    while (head < count and (old_starts[head + 1] if head + 1 < count else m) <= same
           and old_starts[head] + CDC_MAX <= both):
        head += 1
    start = old_starts[head] if head < count else m
    # Old chunks starting inside the shared suffix, by where they would start now.
    suffix = _common_suffix(old, data, both - same)
    shift = n - m
    resume = {s + shift: j for j, s in enumerate(old_starts[head:], head) if s >= m - suffix and s + shift > start}
    spans: list[tuple[int, int]] = []
    moved: dict[int, int] = {}
    openings: dict[bytes, int] | None = None  # an old chunk by its first bytes, made when first needed
    view = memoryview(data)
    pos = start
    while pos < n:
        jumped = False
        for chunk in _fastcdc.cut_buf(view[pos:]):
            offset = chunk.offset + pos
            j = resume.get(offset)
            if j is not None:
                return Rechunked(head, spans, j, moved)
            if len(spans) >= _CUT_BEFORE_LOOKING and offset + CDC_MAX <= n:
                if openings is None:
                    openings = {old[s:s + _OPENING]: k for k, s in enumerate(old_starts) if s + CDC_MAX <= m}
                k = openings.get(bytes(view[offset:offset + _OPENING]))
                if k is not None:
                    run = _moved_run(data, old, old_starts, k, offset)
                    if run:
                        for k_run, (at, length) in run:
                            if (j := resume.get(at)) is not None:
                                return Rechunked(head, spans, j, moved)
                            moved[len(spans)] = k_run
                            spans.append((at, length))
                        pos = run[-1][1][0] + run[-1][1][1]
                        jumped = True
                        break
            spans.append((offset, chunk.length))
        if not jumped:
            break
    return Rechunked(head, spans, count, moved)


def _moved_run(data: bytes, old: bytes, old_starts: list[int], k: int, at: int) -> list[tuple[int, tuple[int, int]]]:
    """The old chunks from ``k`` on that ``data`` holds again from ``at``, each with where
    it starts and its length there: as many as lie within the bytes both share from
    those places, each starting at least ``CDC_MAX`` bytes before the end of both (so
    that its cut depended on its own bytes alone)."""
    m, n = len(old), len(data)
    q = old_starts[k]
    same = _common_prefix(old, data, min(m - q, n - at), q, at)
    run: list[tuple[int, tuple[int, int]]] = []
    count = len(old_starts)
    while k < count:
        s = old_starts[k]
        end = old_starts[k + 1] if k + 1 < count else m
        here = at + (s - q)
        if end - q > same or s + CDC_MAX > m or here + CDC_MAX > n:
            break
        run.append((k, (here, end - s)))
        k += 1
    return run


def _common_prefix(a: bytes, b: bytes, limit: int, a_at: int = 0, b_at: int = 0) -> int:
    """How many bytes ``a`` from ``a_at`` and ``b`` from ``b_at`` share (at most ``limit``):
    ``startswith`` over a memoryview compares in place, without copying."""
    view = memoryview(a)[a_at:]
    lo = 0
    while lo < limit:
        hi = min(limit, lo + _BLOCK)
        if b.startswith(view[lo:hi], b_at + lo):
            lo = hi
            continue
        while hi - lo > 1:  # a[:lo] == b[:lo], and a[lo:hi] != b[lo:hi]
            mid = (lo + hi) // 2
            if b.startswith(view[lo:mid], b_at + lo):
                lo = mid
            else:
                hi = mid
        return lo
    return limit


def _common_suffix(a: bytes, b: bytes, limit: int) -> int:
    """How many trailing bytes ``a`` and ``b`` share (at most ``limit``)."""
    view = memoryview(a)
    m, n = len(a), len(b)
    lo = 0
    while lo < limit:
        hi = min(limit, lo + _BLOCK)
        if b.endswith(view[m - hi : m - lo], 0, n - lo):
            lo = hi
            continue
        while hi - lo > 1:  # the last lo bytes are the same, the last hi are not
            mid = (lo + hi) // 2
            if b.endswith(view[m - mid : m - lo], 0, n - lo):
                lo = mid
            else:
                hi = mid
        return lo
    return limit
