"""Repositories written by earlier format versions stay readable, byte for byte the same states.

``tests/fixtures/v1.snapvc`` and ``v2.snapvc`` were each written once by
``tests/fixtures/make_fixtures.py``, from the same history: two branches and a tag; v1
holds full and delta frames, v2 dictionary frames as well. A corrupted copy shows that
damage is found and named, and that what does not depend on it still reads.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

import snapvc
from snapvc.store.codec import CODEC_ZSTD_DELTA, CODEC_ZSTD_DICT
from tests.fixtures.make_fixtures import fixture_states

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MAIN = "5bb9608afc757ef6b301dbbdca90e7249251dff0693abe737bb97761207aa02e"
# The frames each version's fixture must hold, so that reading it tests their decoding.
CODECS = {1: {CODEC_ZSTD_DELTA}, 2: {CODEC_ZSTD_DELTA, CODEC_ZSTD_DICT}}


@pytest.fixture(params=sorted(CODECS))
def version(request: pytest.FixtureRequest) -> int:
    return request.param


@pytest.fixture
def copy(tmp_path: Path, version: int) -> Path:
    target = tmp_path / f"v{version}.snapvc"
    shutil.copy(FIXTURES / f"v{version}.snapvc", target)
    return target


def test_fixture_holds_the_frames_of_its_version(copy: Path, version: int) -> None:
    conn = sqlite3.connect(copy)
    codecs = dict(conn.execute("SELECT substr(data, 1, 1), count(*) FROM objects GROUP BY 1").fetchall())
    (stated,) = conn.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
    conn.close()
    assert int(stated) == version
    for codec in CODECS[version]:
        assert codecs.get(bytes([codec]), 0) > 10


def test_every_commit_reads_back_exactly(copy: Path) -> None:
    states = fixture_states()
    with snapvc.open(copy, create=False) as repo:
        assert repo.resolve("main").hex == MAIN
        log = list(repo.log("main"))
        assert [c.message for c in log] == [f"step {i}" for i in range(40, 0, -1)]
        for commit, state in zip(log, reversed(states), strict=True):
            assert repo.checkout(commit.id) == state
            assert commit.metadata["step"] == state["step"]
        assert repo.checkout("side") == {"side": True}
        assert repo.checkout("side~1") == states[19]
        assert repo.checkout("v1") == states[34]


def test_writing_to_an_old_repository_continues_its_history(copy: Path) -> None:
    with snapvc.open(copy, create=False) as repo:
        state = repo.checkout("main")
        state["messages"].append({"role": "user", "content": "one more"})
        commit = repo.commit(state, message="step 41")
        assert commit.parents == (snapvc.ObjectId.from_hex(MAIN),)
        assert repo.checkout("main") == state


def test_a_corrupted_object_is_named_and_the_rest_still_reads(copy: Path) -> None:
    with snapvc.open(copy, create=False) as repo:
        root = repo.get_commit(repo.resolve("side")).tree
    conn = sqlite3.connect(copy)
    (data,) = conn.execute("SELECT data FROM objects WHERE id = ?", (root,)).fetchone()
    damaged = bytearray(data)
    damaged[-1] ^= 0x40
    conn.execute("UPDATE objects SET data = ? WHERE id = ?", (bytes(damaged), root))
    conn.commit()
    conn.close()
    with snapvc.open(copy, create=False) as repo:
        with pytest.raises(snapvc.CorruptObjectError) as err:
            repo.checkout("side")
        assert root.hex in str(err.value)
        assert repo.checkout("main") == fixture_states()[-1]


def test_commits_missing_from_the_index_are_read_from_their_objects(copy: Path) -> None:
    # Files of these versions keep commit objects in the object store too: a commit the
    # index lacks (copied in by a sync, say) is read from there and indexed again.
    conn = sqlite3.connect(copy)
    conn.execute("DELETE FROM commits")
    conn.commit()
    conn.close()
    with snapvc.open(copy, create=False) as repo:
        assert repo.checkout("main") == fixture_states()[-1]
        assert [c.message for c in repo.log("main")][:2] == ["step 40", "step 39"]
        assert repo.resolve(MAIN[:10]).hex == MAIN

