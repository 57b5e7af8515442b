"""A long bytes value edited near its start and grown near its end (a message history
serialized whole, with a new header) is cut again only around the two changes: the old
chunks between them are recognised where they start again, moved, and taken as they
were, neither cut nor hashed. The cuts are always the ones a cut from scratch makes."""

from __future__ import annotations

import random
from pathlib import Path


import snapvc
from snapvc.encoding.chunker import chunk_spans, rechunk
from snapvc.encoding.writer import RECHUNK_MIN, Encoder


def _text(rng: random.Random, words: list[bytes], count: int) -> bytes:
    return b" ".join(rng.choice(words) for _ in range(count))


def _words(rng: random.Random) -> list[bytes]:
    return [bytes(rng.choice(b"abcdefghij klmnop") for _ in range(rng.randint(2, 9))) for _ in range(3000)]


def _check(new: bytes, old: bytes) -> tuple[int, int]:
    """Rechunk ``new`` from ``old``; assert it cuts as a cut from scratch does and that
    every moved chunk holds the old chunk's bytes. (chunks cut anew, chunks moved)"""
    old_starts = [offset for offset, _ in chunk_spans(old)]
    again = rechunk(new, old, old_starts)
    shift = len(new) - len(old)
    starts = old_starts[: again.head] + [offset for offset, _ in again.spans] + [s + shift for s in old_starts[again.tail:]]
    assert starts == [offset for offset, _ in chunk_spans(new)]
    ends = old_starts[1:] + [len(old)]
    for i, k in again.moved.items():
        offset, length = again.spans[i]
        assert new[offset:offset + length] == old[old_starts[k]:ends[k]]
    return len(again.spans) - len(again.moved), len(again.moved)


def test_rechunking_cuts_what_a_cut_from_scratch_cuts_after_edits_anywhere() -> None:
    rng = random.Random(7)
    words = _words(rng)
    for _ in range(150):
        old = _text(rng, words, rng.randint(2000, 40000))
        new = bytearray(old)
        for _ in range(rng.randint(1, 3)):
            at = rng.randint(0, len(new))
            what = rng.random()
            if what < 0.4:
                new[at:at] = _text(rng, words, rng.randint(1, 300))
            elif what < 0.7:
                del new[at:at + rng.randint(1, 3000)]
            else:
                new[at:at + 5] = _text(rng, words, 2)
        _check(bytes(new), old)


def test_a_value_edited_near_its_start_and_grown_near_its_end_is_cut_around_the_changes() -> None:
    rng = random.Random(3)
    words = _words(rng)
    body = _text(rng, words, 60000)  # about 100 chunks
    old = b"header one" + body + b"end"
    new = b"header number two" + body + _text(rng, words, 500) + b"end"
    cut, moved = _check(new, old)
    assert len(list(chunk_spans(new))) > 70 and cut <= 12, (cut, moved)  # not the 70-odd chunks


def test_the_encoder_hashes_only_the_chunks_around_the_changes(tmp_path: Path, chunks_hashed: list[int]) -> None:
    rng = random.Random(5)
    words = _words(rng)
    body = _text(rng, words, 2 * RECHUNK_MIN // 5)  # past RECHUNK_MIN: kept, to be rechunked
    hashed = chunks_hashed
    with snapvc.open(tmp_path / "r.snapvc") as repo:
        repo.commit({"blob": b"head 1" + body + b"tail"}, branch="b")
        hashed.clear()
        value = b"head 22" + body + _text(rng, words, 300) + b"tail"
        repo.commit({"blob": value}, branch="b")
        assert 0 < len(hashed) <= 12, len(hashed)  # not the value's hundreds of chunks
        assert repo.checkout("b") == {"blob": value}
        assert repo.get_commit(repo.resolve("b")).tree == Encoder().encode_root({"blob": value})
