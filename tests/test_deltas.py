"""A rewritten node or chunk costs about what changed: in a format 2 file, a small delta
frame against what it replaces; in a format 3 file, a block of a zstd stream whose earlier
blocks hold what it repeats (``snapvc.backends.sqlite.packs``)."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import orjson
import pytest

import snapvc
from snapvc.store.codec import CODEC_ZSTD_DELTA, CODEC_ZSTD_DICT


def words(seed: int, n: int) -> str:
    rng = random.Random(seed)
    vocabulary = ["".join(rng.choice("aeioubcdfgklmnprst") for _ in range(rng.randint(2, 9))) for _ in range(800)]
    return " ".join(rng.choice(vocabulary) for _ in range(n))


def codecs(path: Path) -> dict[int, int]:
    conn = sqlite3.connect(path)
    try:
        return {row[0][0]: row[1] for row in conn.execute("SELECT substr(data, 1, 1), count(*) FROM objects GROUP BY 1")}
    finally:
        conn.close()


@pytest.mark.parametrize("format", [2, 3])
def test_a_splice_in_a_long_document_costs_about_the_splice(tmp_path: Path, format: int) -> None:
    path = tmp_path / "doc.snapvc"
    with snapvc.open(path, format=format) as repo:
        doc = words(1, 4000)  # ~25 KB: several chunks
        state = {"doc": doc, "n": 0}
        repo.commit(state)
        before = repo.store.sizes()
        middle = len(doc) // 2
        state["doc"] = doc[:middle] + words(2, 50)[:300] + doc[middle + 300 :]
        state["n"] = 1
        repo.commit(state)
        after = repo.store.sizes()
        assert after.objects - before.objects <= 5  # a chunk or two, the text node, the root, the commit
        assert after.stored_bytes - before.stored_bytes < 1500, "the new chunk should cost its change, not itself"
        if format == 2:  # (format 3 keeps raw frames in packs: no table 'objects', no delta frames)
            assert codecs(path).get(CODEC_ZSTD_DELTA, 0) >= 1
    with snapvc.open(path, create=False) as repo:  # read back through the delta, from disk
        assert repo.checkout() == state
        assert repo.checkout("main~1")["doc"] == doc


@pytest.mark.parametrize("format", [2, 3])
def test_appends_to_a_long_list_grow_the_store_by_about_the_new_elements(tmp_path: Path, format: int) -> None:
    path = tmp_path / "list.snapvc"
    with snapvc.open(path, format=format) as repo:
        state = {"messages": [{"role": "user", "content": words(i, 60)} for i in range(400)]}
        repo.commit(state)
        sizes = [repo.store.sizes().stored_bytes]
        for i in range(400, 440):
            state["messages"].append({"role": "assistant", "content": words(i, 60)})
            repo.commit(state)
            sizes.append(repo.store.sizes().stored_bytes)
        growth = [b - a for a, b in zip(sizes, sizes[1:])]
        one_message = len(orjson.dumps({"role": "assistant", "content": words(440, 60)}))
        # The last leaf and the spine above it are rewritten as deltas (format 2) or as a
        # block compressed against the stream's earlier blocks (format 3): each commit
        # costs a small multiple of one compressed message, not the whole leaf or list.
        assert sorted(growth)[len(growth) // 2] < 3 * one_message + 600
    with snapvc.open(path, create=False) as repo:
        assert repo.checkout() == state


def test_a_reader_loads_a_dictionary_another_client_trained_after_it_looked(tmp_path: Path) -> None:
    """A format 2 file's frames may name a compression dictionary. A reader that loaded
    the dictionaries before another client trained a new one reads that client's frames
    by loading it then, never reporting them corrupt."""
    path = tmp_path / "dict.snapvc"
    state = {f"doc{i}": f"Report {i}: " + words(i, 900) for i in range(60)}
    with snapvc.open(path, format=2) as reader, snapvc.open(path) as writer:
        reader.commit({"note": words(1000, 200)}, branch="reader")  # the reader loads the dictionaries: none yet
        written = writer.commit(state, branch="writer")  # large: the writer trains a dictionary and uses it
        conn = sqlite3.connect(path)
        try:
            assert conn.execute("SELECT count(*) FROM dictionaries").fetchone()[0] >= 1, "no dictionary trained"
            assert codecs(path).get(CODEC_ZSTD_DICT, 0) >= 1, "no frame names a dictionary"
        finally:
            conn.close()
        assert reader.checkout(written.id) == state
        assert reader.fsck().ok
