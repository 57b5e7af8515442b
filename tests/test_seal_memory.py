"""What sealing holds: a zstd context of a few MiB, made for one pack and dropped with it;
at most twice a pack's frames in memory while it seals; nothing it decoded kept for reads.
The pack it makes is one zstd frame that the readers before it decode."""

from __future__ import annotations

import random
import sqlite3
import tracemalloc
from pathlib import Path

import pytest
import zstandard

import snapvc
from snapvc.backends.sqlite import packs
from snapvc.store.codec import WINDOW_MAX


def _text(seed: int, size: int) -> str:
    """Words that compress like prose (about 2-3x), not like a repeated string."""
    rng = random.Random(seed)
    words = [f"w{rng.randrange(5000)}" for _ in range(size // 5)]
    return " ".join(words)[:size]


def _store(repo: snapvc.Repository) -> packs.SqlitePackStore:
    store = repo.backend.objects
    assert isinstance(store, packs.SqlitePackStore)
    return store


def _finished_streams(store: packs.SqlitePackStore) -> list[int]:
    with store.file.lock:
        store._current()
        return [s for s, numbers in store._streams.items() if store._blocks[numbers[-1]].state == packs.FINISHED]


def test_a_sealing_context_is_a_few_mib_whatever_the_pack() -> None:
    """The tables of the match finder are capped (``SEAL_TABLE_LOG``): level 9's own, for
    a pack of a MiB or more, make a context of 10 MiB."""
    for size in (1 << 20, packs.JOIN_BYTES):
        params = packs.seal_parameters(size)
        assert params.hash_log <= packs.SEAL_TABLE_LOG and params.chain_log <= packs.SEAL_TABLE_LOG
        assert 1 << params.window_log <= packs.JOIN_BYTES  # readers before this decode it (WINDOW_MAX)
        assert params.estimated_compression_context_size() <= 6 << 20
    raw = _text(1, 2 << 20).encode()
    compressor = packs.seal_compressor(len(raw))
    body = compressor.compress(raw)
    # Beside its tables, zstd allocates an input buffer as large as the pack, which a pack
    # given whole never fills (only what is touched is resident).
    assert compressor.memory_size() - len(raw) <= 6 << 20
    assert zstandard.ZstdDecompressor(max_window_size=WINDOW_MAX).decompress(body) == raw


def test_a_sealed_pack_is_one_frame_a_standard_decoder_reads(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packs, "STREAM_BLOCKS", 4)
    path = tmp_path / "r.snapvc"
    states = [{"i": i, "text": _text(i, 20_000)} for i in range(9)]
    with snapvc.open(path) as repo:
        ids = [repo.commit(state, message=f"s{i}").id for i, state in enumerate(states)]
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT data FROM packs WHERE state = ?", (packs.SEALED,)).fetchall()
    conn.close()
    assert rows
    for (data,) in rows:
        frame = zstandard.get_frame_parameters(data)
        assert frame.content_size > 0 and frame.window_size <= packs.JOIN_BYTES
        assert len(zstandard.ZstdDecompressor(max_window_size=WINDOW_MAX).decompress(data)) == frame.content_size
    with snapvc.open(path) as repo:
        for oid, state in zip(ids, states, strict=True):
            assert repo.checkout(oid) == state
        assert repo.fsck().ok


def test_a_seal_keeps_nothing_it_decoded_for_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither the streams it joins nor the packs its walk of the newest state passes
    through (``layout.read_order``) stay among the decoded streams kept for reads."""
    monkeypatch.setattr(packs, "STREAM_BLOCKS", 4)
    monkeypatch.setattr(packs, "CLOSE_SEAL_BYTES", 0)
    path = tmp_path / "r.snapvc"
    messages: list[str] = []
    with snapvc.open(path) as repo:
        _store(repo)._want_seal = lambda: None  # type: ignore[method-assign]  # sealed by hand below
        for i in range(8):
            messages.append(_text(i, 3000))
            repo.commit({"i": i, "messages": list(messages)}, message=f"s{i}")
    with snapvc.open(path) as repo:  # a fresh process: nothing decoded yet
        store = _store(repo)
        first, second = _finished_streams(store)
        assert store.seal([first])
        assert store.seal([second])  # the newest state's older objects are in the first pack
        assert not store._readers
        assert repo.checkout("main")["messages"] == messages
        assert repo.fsck().ok


def test_a_seal_holds_its_frames_about_twice_at_most(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Python's part of a seal's memory, at its peak: two of the frames read, the streams'
    decoded bytes and the bytes to compress, and the compressed pack's buffer (as large
    as the frames until it shrinks to the pack), not all of them at once (before: 3.9
    times the frames)."""
    monkeypatch.setattr(packs, "STREAM_BLOCKS", 64)
    monkeypatch.setattr(packs, "CLOSE_SEAL_BYTES", 0)
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo:
        _store(repo)._want_seal = lambda: None  # type: ignore[method-assign]  # sealed by hand below
        for i in range(64):
            repo.commit({"i": i, "text": _text(i, 40_000)}, message=f"s{i}")
    with snapvc.open(path) as repo:
        store = _store(repo)
        (stream,) = _finished_streams(store)
        frames = store._stream_size(stream)
        assert frames > 2 << 20
        tracemalloc.start()
        try:
            assert store.seal([stream])
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak <= 3 * frames, (peak, frames)


def test_by_the_time_a_seal_compresses_the_writers_own_stream_is_no_longer_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The process that wrote a stream keeps its bytes for reads while it writes; once the
    stream is finished and its frames are read for a seal, they go, before the seal's
    compression takes its memory (the swap drops the rows anyway)."""
    monkeypatch.setattr(packs, "STREAM_BLOCKS", 4)
    monkeypatch.setattr(packs, "CLOSE_SEAL_BYTES", 0)
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo:
        store = _store(repo)
        store._want_seal = lambda: None  # type: ignore[method-assign]  # sealed by hand below
        for i in range(5):
            repo.commit({"i": i, "text": _text(i, 5000)}, message=f"s{i}")
        (finished,) = _finished_streams(store)
        assert finished in store._readers  # the writer's own bytes, kept while it wrote
        kept_when_compressing: list[list[int]] = []

        def stopping() -> bool:  # asked once the frames are read, before they are compressed
            kept_when_compressing.append(list(store._readers))
            return False

        assert store.seal([finished], stopping)
        assert kept_when_compressing and finished not in kept_when_compressing[0]
        assert repo.checkout("main") == {"i": 4, "text": _text(4, 5000)}
