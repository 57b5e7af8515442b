"""The pack store of a format 3 file (``snapvc.backends.sqlite.packs``) on real files:
damaged rows are named; gc of garbage in this process's open stream, a rolled-back
commit and a rewrite by the sealer each leave the writer to start a new stream; two
processes write at once; a writer killed mid-stream leaves a stream others read and seal."""

from __future__ import annotations

import gc
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import weakref
from datetime import timedelta
from pathlib import Path

import pytest

import snapvc
from snapvc.backends.sqlite import packs
from snapvc.errors import RefConflictError, SnapvcError


@pytest.mark.parametrize("column,value,named", [
    ("data", "not zstd", "row"),
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


def test_a_rolled_back_commit_leaves_no_trace_and_the_next_one_reads_back(tmp_path: Path) -> None:
    """A commit whose transaction fails after its block was compressed: the stream it was
    appended to is abandoned (its compressor holds bytes no row has), the next commit
    starts another, and everything reads back."""
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo:
        first = repo.commit({"text": "a " * 3000}, message="one")
        with pytest.raises(RefConflictError):
            repo.commit({"text": "b " * 3000}, message="lost", parents=[repo.commit({"x": 1}, branch="other").id])
        after = repo.commit({"text": "c " * 3000}, message="two")
        assert repo.checkout(first.id) == {"text": "a " * 3000}
        assert repo.checkout(after.id) == {"text": "c " * 3000}
        assert repo.fsck().ok
    with snapvc.open(path) as repo:  # a fresh process's view: decoded from the rows alone
        assert repo.checkout("main") == {"text": "c " * 3000}
        assert [c.message for c in repo.log("main")] == ["two", "one"]


_WRITER = """
import sys, snapvc
with snapvc.open(sys.argv[1]) as repo:
    for i in range(int(sys.argv[3])):
        repo.commit({"who": sys.argv[2], "i": i, "text": f"{sys.argv[2]} step {i} " * 100}, branch=sys.argv[2],
                    message=f"{sys.argv[2]} {i}")
"""


def test_two_processes_commit_at_once_each_with_its_own_stream(tmp_path: Path) -> None:
    path = tmp_path / "r.snapvc"
    snapvc.open(path).close()
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), name, "60"]) for name in ("a", "b")]
    try:
        assert [p.wait(timeout=120) for p in procs] == [0, 0]
    finally:  # none left running if one hangs
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    with snapvc.open(path) as repo:
        for name in ("a", "b"):
            log = list(repo.log(name))
            assert len(log) == 60
            for commit in log:
                i = int(commit.message.split()[1])
                assert repo.checkout(commit.id) == {"who": name, "i": i, "text": f"{name} step {i} " * 100}
        assert repo.fsck().ok


def test_a_writer_killed_mid_stream_leaves_an_open_stream_that_is_read_then_sealed(tmp_path: Path,
                                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.snapvc"
    snapvc.open(path).close()
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), "a", "100000"])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with snapvc.open(path) as repo:
                if "refs/heads/a" in repo.refs.list("") and len(list(repo.log("a", limit=20))) >= 20:
                    break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    conn = sqlite3.connect(path)
    open_rows = conn.execute("SELECT count(*) FROM packs WHERE state = ?", (packs.OPEN,)).fetchone()[0]
    conn.close()
    assert open_rows  # the writer's stream was never finished
    with snapvc.open(path) as repo:
        log = list(repo.log("a"))
        for commit in log:
            i = int(commit.message.split()[1])
            assert repo.checkout(commit.id) == {"who": "a", "i": i, "text": f"a step {i} " * 100}
        store = repo.backend.objects
        assert isinstance(store, packs.SqlitePackStore)
        monkeypatch.setattr(packs, "STALE_SECONDS", -1)  # the dead writer's stream counts as stale now
        assert store.seal_all() >= 1
        assert repo.fsck().ok
        assert [c.id for c in repo.log("a")] == [c.id for c in log]
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM packs WHERE state = ?", (packs.OPEN,)).fetchone()[0] == 0
    conn.close()


def test_the_sealer_swaps_packs_while_another_thread_commits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Streams end every few commits, so the background sealer swaps packs in over and
    over while commits go on; every state reads back, during and after."""
    monkeypatch.setattr(packs, "STREAM_BLOCKS", 4)
    path = tmp_path / "r.snapvc"
    done: list[tuple[str, dict[str, object]]] = []  # (commit id, state), appended once committed
    errors: list[BaseException] = []

    def state(i: int) -> dict[str, object]:
        return {"i": i, "messages": [f"message {j} " * 20 for j in range(i + 1)]}

    with snapvc.open(path) as repo:
        def read_back() -> None:
            try:
                for _ in range(200):
                    for oid, expected in done[-5:]:
                        assert repo.checkout(oid) == expected
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        for i in range(40):
            done.append((repo.commit(state(i), message=f"s{i}").id.hex, state(i)))
        reader = threading.Thread(target=read_back)
        reader.start()
        for i in range(40, 120):
            done.append((repo.commit(state(i), message=f"s{i}").id.hex, state(i)))
        reader.join()
        assert not errors, errors
        for oid, expected in done:
            assert repo.checkout(oid) == expected
    conn = sqlite3.connect(path)
    sealed = conn.execute("SELECT count(*) FROM packs WHERE state = ?", (packs.SEALED,)).fetchone()[0]
    conn.close()
    assert sealed >= 1
    with snapvc.open(path) as repo:
        assert repo.fsck().ok
        for oid, expected in done:
            assert repo.checkout(oid) == expected


def test_the_blocks_after_a_damaged_block_of_a_stream_are_named_not_misread(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The offsets of a stream's later blocks count the bytes of the blocks before them:
    after a block whose row is damaged, they are left out and named, and the blocks before
    it read as ever."""
    monkeypatch.setattr(packs, "CLOSE_SEAL_BYTES", 0)  # the stream stays in its blocks
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo:
        ids = [repo.commit({"i": i, "text": f"block {i} " * 300}, message=f"s{i}").id for i in range(3)]
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT number FROM packs WHERE stream = (SELECT min(number) FROM packs) ORDER BY number")
    first, middle, last = [n for (n,) in rows.fetchall()][:3]
    conn.execute("UPDATE packs SET ids = ? WHERE number = ?", (b"\x01" * 31, middle))
    conn.commit()
    conn.close()
    with snapvc.open(path) as repo:
        assert repo.checkout(ids[0]) == {"i": 0, "text": "block 0 " * 300}
        report = repo.fsck()
        text = "\n".join(str(p) for p in report.problems)
        assert f"row {middle}" in text and f"row {last}" in text and f"follows damaged row {middle}" in text
        assert f"row {first}" not in text


def test_a_repository_dropped_without_close_takes_its_sealer_along(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The sealer holds its store weakly: dropping a repository that never closed frees
    its store (decoded streams, connection) and ends the thread, not one leak per file."""
    monkeypatch.setattr(packs, "STREAM_BLOCKS", 2)  # a stream ends, so a sealer starts
    path = tmp_path / "dropped.snapvc"
    repo = snapvc.open(path)
    for i in range(6):
        repo.commit({"i": i, "text": f"step {i} " * 200}, message=f"s{i}")
    store = repo.backend.objects
    assert isinstance(store, packs.SqlitePackStore) and store._sealer is not None
    thread = store._sealer._thread
    collected = threading.Event()
    weakref.finalize(store, collected.set)
    del repo, store
    # A pass under way holds the store until it ends: wait for that, at most 30 s.
    deadline = time.monotonic() + 30
    while not collected.is_set() and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.02)
    assert collected.is_set()
    thread.join(timeout=30)
    assert not thread.is_alive()


def test_a_closing_repository_leaves_what_is_too_much_to_seal_to_the_next_writer_and_gc_seals_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """More pending than CLOSE_SEAL_BYTES is left as it is on close (finished streams), so
    that close never waits long; gc seals it. Every state reads back."""
    monkeypatch.setattr(packs, "CLOSE_SEAL_BYTES", 1 << 10)
    path = tmp_path / "r.snapvc"
    states = [{"step": i, "log": [f"line {j} of a growing log, step {j % 7}" for j in range(40 * i)]}
              for i in range(1, 12)]
    with snapvc.open(path) as repo:
        ids = [repo.commit(state, message=f"step {i}").id for i, state in enumerate(states)]

    def rows() -> list[tuple[int, int]]:
        conn = sqlite3.connect(path)
        try:
            return conn.execute("SELECT state, length(data) FROM packs").fetchall()
        finally:
            conn.close()

    assert {state for state, _ in rows()} == {packs.OPEN, packs.FINISHED}
    with snapvc.open(path) as repo:
        assert [repo.checkout(oid) for oid in ids] == states
        repo.gc()
        assert [repo.checkout(oid) for oid in ids] == states
        assert repo.fsck().ok
    assert {state for state, _ in rows()} == {packs.SEALED}


def test_a_seal_gives_up_when_another_process_appended_to_the_stream_meanwhile(tmp_path: Path) -> None:
    """A sealer reads a stream whose writer seems gone (stale), compresses it without the
    lock, and swaps the pack in. The writer comes back meanwhile and appends a block to
    its stream: the swap must not go ahead (the new block would be left behind a stream
    that no longer exists, its objects lost); the seal gives up and the stream stays."""
    now = [1_700_000_000.0]
    path = tmp_path / "r.snapvc"
    with snapvc.open(path, clock=lambda: now[0]) as writer, snapvc.open(path, clock=lambda: now[0]) as sealer:
        writer.commit({"step": 0, "text": "first " * 200})
        writer.commit({"step": 1, "text": "second " * 200})
        now[0] += packs.STALE_SECONDS + 1  # the writer's open stream looks abandoned
        store = sealer.backend.objects
        assert isinstance(store, packs.SqlitePackStore)
        with sealer.backend.file.lock:
            plan = store.seal_plan(now[0])
        assert len(plan) == 1
        appended: list[snapvc.Commit] = []

        def writer_comes_back() -> bool:  # called while the sealer compresses, holding no lock
            if not appended:
                appended.append(writer.commit({"step": 2, "text": "third " * 200}))
            return False

        swapped = store.seal(plan[0], writer_comes_back)
        assert appended and not swapped
        conn = sqlite3.connect(path)
        blocks = conn.execute("SELECT count(*) FROM packs WHERE stream = ?", (plan[0][0],)).fetchone()[0]
        conn.close()
        assert blocks == 3  # the stream as the writer left it, its appended block included
    with snapvc.open(path) as repo:
        assert repo.checkout(appended[0].id) == {"step": 2, "text": "third " * 200}
        assert repo.fsck().ok
