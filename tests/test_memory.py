"""Memory with an owner: a closed repository frees what it holds without waiting for the
cycle collector, and the caches it owns stay within their budgets in bytes."""

from __future__ import annotations

import gc
import os
import random
import sqlite3
import time
import tracemalloc
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import snapvc
from snapvc.backends.sqlite import packs
from snapvc.encoding import cache as cache_module
from snapvc.encoding.reader import ObjectCache


@contextmanager
def no_cycle_collector() -> Iterator[None]:
    """Only reference counting frees objects inside the block."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _use_everything(repo: snapvc.Repository, path: Path | None) -> list[weakref.ref[Any]]:
    """Commit, check out, read lazily, walk the log and history, diff, count versions and
    work through a ``State``; with ``path``, wait for the background sealer to seal once.
    Weak references to what the repository owns."""
    state: dict[str, Any] = {"step": 0, "messages": [], "notes": {}}
    for i in range(8):
        state["step"] = i
        state["messages"].append({"role": "user", "content": f"message {i} " * 40})
        state["notes"][f"n{i % 3}"] = f"note {i}"
        repo.commit(state, message=f"step {i}")
    loaded = repo.checkout("main")
    loaded["step"] = 99
    repo.commit(loaded, message="after a checkout")
    assert repo.snapshot("main")["messages"][3]["content"].startswith("message 3")
    assert len(list(repo.log("main", limit=5))) == 5
    assert list(repo.history("main", "notes.n1", limit=2))
    assert repo.diff("main~2", "main") and repo.diff("main", {"step": 1})
    assert repo.versions("main")["messages"] == 8
    work = repo.state("main")
    work.set("notes.n9", "from the working copy")
    work.snapshot(message="working copy")
    repo.thread("run-1").save({"i": 1})
    if path is not None:
        store = repo.backend.objects
        assert isinstance(store, packs.SqlitePackStore) and store._sealer is not None
        deadline = time.monotonic() + 30
        while _sealed(path) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _sealed(path) > 0, "the background sealer did not seal"
    return [weakref.ref(o) for o in (repo, repo.backend, repo.store, repo.loader, repo.loader.cache)]


def _sealed(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT count(*) FROM packs WHERE state = ?", (packs.SEALED,)).fetchone()[0])
    finally:
        conn.close()


@pytest.mark.parametrize("where", ["embedded", "memory"])
def test_a_closed_and_dropped_repository_is_freed_without_the_cycle_collector(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """No reference cycle keeps a repository, its store, loader or caches: once closed
    and dropped, reference counting alone frees them (a closed repository's caches are
    not left to a full collection, which may not come for a long time)."""
    monkeypatch.setattr(packs, "STREAM_BLOCKS", 2)  # streams end, so the sealer starts
    path = tmp_path / "r.snapvc" if where == "embedded" else None
    with no_cycle_collector():
        repo = snapvc.open(path if path is not None else "memory://")
        owned = _use_everything(repo, path)
        repo.close()
        del repo
        alive = [r() for r in owned if r() is not None]
        assert not alive, f"still alive after close, without gc.collect(): {alive}"


def test_close_empties_the_caches_a_repository_owns(tmp_path: Path) -> None:
    """A closed repository that something still refers to keeps none of what it cached:
    read objects, encodings, commits."""
    repo = snapvc.open(tmp_path / "r.snapvc")
    _use_everything(repo, None)
    assert repo.loader.cache.size > 0 and repo._encode_caches and repo._commit_cache
    repo.close()
    assert repo.loader.cache.size == 0
    assert not repo._encode_caches and not repo._commit_cache and not repo._verified_commits


def _text_state(documents: int, words: int) -> dict[str, Any]:
    rng = random.Random(0)
    vocabulary = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 9))) for _ in range(3000)]
    return {"docs": {f"d{i}": " ".join(rng.choice(vocabulary) for _ in range(words)) for i in range(documents)}}


def test_a_checkout_larger_than_the_read_caches_stays_within_their_budgets(tmp_path: Path) -> None:
    """A state larger than the read caches' budgets: a checkout keeps at most the object
    cache's ``bulk_bytes`` of what it read, and while it builds the state, it does not
    hold the stored bytes beside the values made from them (what it holds at its peak,
    beyond what it hands out and what the caches keep, is a fraction of the state)."""
    state = _text_state(400, 2000)
    size = sum(len(text) for text in state["docs"].values())
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo:
        repo.commit(state)
    budget = 1 << 20
    assert size > 4 * budget
    with snapvc.open(path) as repo:
        repo.loader.cache = ObjectCache(budget)
        repo.store.inner._cache_bytes = budget  # the recent objects the store keeps for deltas
        gc.collect()
        tracemalloc.start()
        try:
            got = repo.checkout()
            held, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert got == state
        largest = max(len(data) for data in repo.loader.cache._data.values())
        assert repo.loader.cache.size <= repo.loader.cache.bulk_bytes + largest
        assert peak - held < size // 2, f"a checkout of {size} bytes peaked {peak - held} bytes above what it kept"


def test_an_encode_cache_keeps_what_stood_at_old_paths_within_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpointer writing a large bytes value at a new path each time: the encode
    cache keeps the values it may rechunk from (and the trees it may reuse) within its
    budget in bytes, not every value it ever stored (tracemalloc counts the values this
    test made that are still alive)."""
    budget = 4 << 20
    monkeypatch.setattr(cache_module, "CHUNKS_BUDGET", budget)
    value_size = 3 << 19  # 1.5 MiB: kept for rechunking
    repo = snapvc.open("memory://")
    tracemalloc.start()
    try:
        for i in range(12):
            repo.commit({f"blob-{i}": os.urandom(value_size)}, message=f"step {i}")  # made here: traced to this file
        alive = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, __file__)])
    finally:
        tracemalloc.stop()
    kept = sum(stat.size for stat in alive.statistics("filename"))
    assert kept <= budget + 2 * value_size, f"{kept} bytes of old values kept alive"
    cache = repo._encode_caches["refs/heads/main"]
    assert cache.chunks.old_bytes <= budget + cache_module._chunks_bytes([b""] * 64, bytes(value_size))
    repo.close()


def test_a_stream_decoded_to_its_end_and_a_closed_store_keep_no_decoder(tmp_path: Path) -> None:
    """A pack read to its end lets its decompressor go (its window and the compressed
    bytes fed to it), keeping only the decoded bytes reads use; a closed store keeps no
    stream and no directory, even while something still refers to it."""
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo:
        for i in range(20):
            repo.commit({"messages": [f"message {j} " * 50 for j in range(i + 1)]}, message=f"step {i}")
    repo = snapvc.open(path)
    store = repo.backend.objects
    assert isinstance(store, packs.SqlitePackStore)
    assert repo.fsck().ok  # reads every object: every stream to its end
    readers = list(store._readers.values())
    assert readers and all(reader.ended for reader in readers)
    assert all(reader.decompressor is None for reader in readers)
    assert repo.checkout()["messages"][-1] == "message 19 " * 50  # read again from the decoded bytes
    repo.close()
    assert not store._readers and not store._where and not store._blocks
