"""The pack store of a format 3 file (``snapvc.backends.sqlite.packs``) on real files:
damaged rows are named, and gc of garbage in this process's open stream leaves the
writer to start a new stream."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

import snapvc
from snapvc.errors import SnapvcError


@pytest.mark.parametrize("column,value,named", [
    pytest.param("data", "not zstd", "row", marks=pytest.mark.xfail(
        strict=True, raises=SnapvcError,
        reason="fsck's batch read (maintenance/graph.read_frames -> SqlitePackStore.get_many) raises the "
               "CorruptObjectError of an undecodable pack instead of reporting it")),
    ("ids", b"\x01" * 31, "row")])
def test_a_damaged_packs_row_is_named(tmp_path: Path, column: str, value: object, named: str) -> None:
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo:
        repo.commit({"text": "x" * 5000, "n": list(range(300))}, message="one")
    conn = sqlite3.connect(path)
    (number,) = conn.execute("SELECT min(number) FROM packs").fetchone()
    conn.execute(f"UPDATE packs SET {column} = ? WHERE number = ?", (value, number))
    conn.commit()
    conn.close()
    with snapvc.open(path, create=False) as repo:
        with pytest.raises(SnapvcError) as caught:
            repo.checkout("main")
        message = str(caught.value)
        assert f"row {number}" in message or "object" in message
        assert not repo.fsck().ok


def test_gc_of_garbage_in_the_open_stream_then_more_commits(tmp_path: Path) -> None:
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo:
        for i in range(5):
            repo.commit({"step": i, "text": f"step {i} " * 200}, branch="scratch", message=f"s{i}")
        kept = [repo.commit({"step": i, "kept": f"kept {i} " * 200}, branch="main", message=f"k{i}").id
                for i in range(3)]
        repo.delete_branch("scratch")
        report = repo.gc(grace=timedelta(0), reflog_expiry=timedelta(0))
        assert report.to_dict()
        more = [repo.commit({"step": i, "more": f"more {i} " * 200}, branch="main", message=f"m{i}").id
                for i in range(4)]
        for i, oid in enumerate(kept):
            assert repo.checkout(oid) == {"step": i, "kept": f"kept {i} " * 200}
        for i, oid in enumerate(more):
            assert repo.checkout(oid) == {"step": i, "more": f"more {i} " * 200}
        assert repo.fsck().ok
    with snapvc.open(path, create=False) as repo:
        assert repo.checkout("main") == {"step": 3, "more": "more 3 " * 200}
        assert repo.fsck().ok
