"""Pack rows of a format 3 file whose recorded values lie or are out of range (see
``snapvc.backends.sqlite.packs``): a row that decodes to more than its sizes declare,
sizes that declare more than any pack holds, a time of 1e300, a ``pack_generation``
that is no number, a damaged pack that holds only garbage or waits to be sealed. Each
is refused or reported naming the pack and object, without allocating what the row
claims; gc sweeps around damage nothing reachable needs; ``close`` never raises after
the commits were stored. (Damaged ids, sizes and data as such: tests/test_fsck_packs.py.)"""

from __future__ import annotations

import sqlite3
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard

import snapvc
from snapvc.backends.sqlite import packs
from tests.test_fsck import _make, _sql

# A zstd bomb's decoded size: large enough that decoding it shows in the peak memory
# (it compresses to a few KB), small enough that a regression does not hurt the machine.
BOMB = 64 << 20


def _rows(path: Path) -> list[tuple[int, int, int, bytes]]:
    """Every ``packs`` row as (number, stream, state, data)."""
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT number, stream, state, data FROM packs ORDER BY number").fetchall()
    conn.close()
    return rows


def _one_pack(path: Path) -> tuple[int, bytes]:
    """A repository whose objects are in one sealed pack: its number and decoded bytes."""
    _make(path)
    with snapvc.open(path) as repo:
        repo.gc(grace=0, reflog_expiry=0)  # seals everything into packs
    rows = _rows(path)
    number, _, _, data = max(rows, key=lambda r: len(r[3]))
    return number, zstandard.ZstdDecompressor().decompress(data)


def _peak(action: Callable[..., object], *args: object) -> tuple[int, BaseException | None]:
    """The most memory Python allocated while ``action(*args)`` ran, and what it raised."""
    tracemalloc.start()
    try:
        try:
            action(*args)
        except BaseException as exc:  # noqa: BLE001 - returned for the caller to check
            raised: BaseException | None = exc
        else:
            raised = None
        return tracemalloc.get_traced_memory()[1], raised
    finally:
        tracemalloc.stop()


def test_a_pack_that_decodes_past_its_recorded_sizes_is_corrupt_without_inflating_it(tmp_path: Path) -> None:
    """The pack's bytes decode to its true frames and then BOMB more zero bytes: the
    objects read right, but the row lies about its size. Reads stop at what the sizes
    declare, and the end of a whole pack is checked: a CorruptObjectError naming the
    pack and an object, for checkout, fsck and gc alike; no step decodes the bomb."""
    path = tmp_path / "bomb.snapvc"
    number, raw = _one_pack(path)
    bomb = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(raw + bytes(BOMB))
    assert len(bomb) < 64 << 10
    _sql(path, "UPDATE packs SET data = ? WHERE number = ?", bomb, number)
    with snapvc.open(path) as repo:
        peak, raised = _peak(lambda: repo.checkout("main"))
        assert isinstance(raised, snapvc.SnapvcError), raised
        assert f"pack {number}" in str(raised) and "more than" in str(raised), raised
        assert peak < BOMB // 4, peak
        peak, raised = _peak(repo.fsck)
        assert raised is None and peak < BOMB // 4, (peak, raised)
        report = repo.fsck()
        assert not report.ok and all(p.kind == "corrupt" for p in report.problems)
        assert any(f"pack {number}" in p.message and "more than" in p.message for p in report.problems)
        peak, raised = _peak(lambda: repo.gc(grace=0))
        assert isinstance(raised, snapvc.RepositoryError) and peak < BOMB // 4, (peak, raised)
        assert "gc stopped before deleting anything" in str(raised)


def test_a_bomb_in_place_of_a_pack_is_refused_without_inflating_it(tmp_path: Path) -> None:
    """A pack whose bytes are replaced by a few KB that decode to BOMB zero bytes."""
    path = tmp_path / "zeros.snapvc"
    number, _ = _one_pack(path)
    bomb = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(bytes(BOMB))
    _sql(path, "UPDATE packs SET data = ? WHERE number = ?", bomb, number)
    with snapvc.open(path) as repo:
        peak, raised = _peak(lambda: repo.checkout("main"))
        assert isinstance(raised, snapvc.SnapvcError) and peak < BOMB // 4, (peak, raised)
        peak, raised = _peak(repo.fsck)
        assert raised is None and peak < BOMB // 4, (peak, raised)


def test_sizes_that_declare_more_than_any_pack_holds_name_the_row(tmp_path: Path) -> None:
    """A small row whose sizes declare 4 GiB for each of its objects: the row is damaged
    (named by fsck, its objects missing), and nothing decodes towards what it declares."""
    path = tmp_path / "huge.snapvc"
    number, _ = _one_pack(path)
    conn = sqlite3.connect(path)
    (ids,) = conn.execute("SELECT ids FROM packs WHERE number = ?", (number,)).fetchone()
    conn.close()
    count = len(ids) // 32
    huge = zstandard.ZstdCompressor().compress(b"\xff\xff\xff\xff" * count)
    bomb = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(bytes(BOMB))
    _sql(path, "UPDATE packs SET sizes = ?, data = ? WHERE number = ?", huge, bomb, number)
    with snapvc.open(path) as repo:
        peak, raised = _peak(lambda: repo.checkout("main"))
        assert isinstance(raised, snapvc.SnapvcError) and peak < BOMB // 4, (peak, raised)
        peak, raised = _peak(repo.fsck)
        assert raised is None and peak < BOMB // 4, (peak, raised)
        report = repo.fsck()
        storage = [p for p in report.problems if p.kind == "storage"]
        assert any(f"table 'packs' row {number}" in p.message and "more than" in p.message for p in storage), report


def _stating(size: int, data: bytes) -> bytes:
    """A zstd frame of ``data`` whose header states ``size`` as its content size (a lie,
    unless it is ``len(data)``)."""
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    descriptor = frame[4]
    assert not descriptor & 0xE3  # no content size, no single segment, no dictionary id: a window byte follows
    return frame[:4] + bytes((descriptor | 0xC0,)) + frame[5:6] + size.to_bytes(8, "little") + frame[6:]


HUGE = 1 << 30  # what a lying header states: allocating it would show at once


def test_a_sizes_column_stating_a_huge_size_is_a_damaged_row_without_allocating_it(tmp_path: Path) -> None:
    path = tmp_path / "stated.snapvc"
    number, _ = _one_pack(path)
    conn = sqlite3.connect(path)
    (ids,) = conn.execute("SELECT ids FROM packs WHERE number = ?", (number,)).fetchone()
    conn.close()
    _sql(path, "UPDATE packs SET sizes = ? WHERE number = ?", _stating(HUGE, b"\0" * (len(ids) // 8)), number)
    with snapvc.open(path) as repo:
        peak, raised = _peak(repo.fsck)
        assert raised is None and peak < HUGE // 16, (peak, raised)
        report = repo.fsck()
        assert any(f"table 'packs' row {number}" in p.message for p in report.problems), report


def test_frames_declaring_or_stating_huge_sizes_are_corrupt_without_allocating_them() -> None:
    """Frames of a store that compresses each object (format 2, S3): a declared size of
    1 GiB on a frame that decodes to 100 bytes, a zstd header stating 1 GiB, a stored
    dictionary stating 1 GiB. Each is a CorruptObjectError naming the object; none
    allocates what it claims."""
    from snapvc.backends.memory.objects import MemoryObjectStore
    from snapvc.store.codec import CompressedStore, _varint

    oid = snapvc.ObjectId(b"\x07" * 32)
    small = zstandard.ZstdCompressor(write_content_size=False).compress(b"x" * 100)
    frames = {
        "declared": bytes((1,)) + _varint(HUGE) + small,
        "stated": bytes((1,)) + _varint(100) + _stating(HUGE, b"x" * 100),
        "stated, dictionary frame": bytes((2,)) + _varint(100) + _varint(1) + _stating(HUGE, b"x" * 100),
        "declared, dictionary frame": bytes((2,)) + _varint(HUGE) + _varint(1) + small,
    }
    for what, frame in frames.items():
        inner = MemoryObjectStore()
        inner.put_dictionary(zstandard.ZstdCompressor(write_content_size=True).compress(bytes(range(256)) * 64))
        inner.put_many([(oid, frame)])
        peak, raised = _peak(CompressedStore(inner).get_many, [oid])
        assert isinstance(raised, snapvc.CorruptObjectError) and oid.hex in str(raised), (what, raised)
        assert peak < HUGE // 16, (what, peak)
    # A stored dictionary whose header states 1 GiB.
    inner = MemoryObjectStore()
    inner.put_dictionary(_stating(HUGE, bytes(range(256)) * 64))
    inner.put_many([(oid, bytes((2,)) + _varint(100) + _varint(1) + small)])
    peak, raised = _peak(lambda: CompressedStore(inner).get_many([oid]))
    assert isinstance(raised, snapvc.CorruptObjectError) and "dictionary 1" in str(raised), raised
    assert peak < HUGE // 16, peak


def _add_damaged_pending_pack(path: Path, count: int = 3) -> tuple[int, list[bytes]]:
    """A pack still to seal (PACKED) holding ``count`` objects nothing refers to, whose
    bytes do not decode: its number and its ids."""
    ids = [bytes([0xD0 + i]) * 32 for i in range(count)]
    sizes = zstandard.ZstdCompressor(write_content_size=True).compress((100).to_bytes(4, "little") * count)
    conn = sqlite3.connect(path)
    with conn:
        (number,) = conn.execute("SELECT max(number) + 1000 FROM packs").fetchone()
        conn.execute("INSERT INTO packs VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (number, number, packs.PACKED, 1, b"".join(ids), sizes, b"\x28\xb5\x2f\xfd" + b"\xee" * 40))
    conn.close()
    return number, ids


def test_a_damaged_pack_waiting_to_be_sealed_neither_fails_close_nor_kills_the_sealer(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "pending.snapvc"
    _make(path)
    number, ids = _add_damaged_pending_pack(path)
    repo = snapvc.open(path)
    store = repo.backend.objects
    tip = repo.commit({"fresh": "state " * 50}, branch="next")
    # The background sealer's pass, run here so that what it raises is seen: nothing.
    sealer = packs._Sealer(store)
    try:
        sealer.work()
    finally:
        sealer.stop()
    assert f"pack {number} is not sealed" in caplog.text
    repo.commit({"fresh": "more " * 50}, branch="next")
    repo.close()  # seals what is pending: not the damaged pack, and raises nothing
    states = {n: state for n, _, state, _ in _rows(path)}
    assert states[number] == packs.PACKED
    with snapvc.open(path) as repo:
        assert repo.checkout("next~1") == {"fresh": "state " * 50} and repo.resolve("next~1") == tip.id
        report = repo.fsck()
    assert {p.object_id for p in report.problems} == set(ids)
    assert all(p.kind == "corrupt" and f"pack {number}" in p.message for p in report.problems)


@pytest.mark.parametrize("when", [1e300, float("inf"), -1e300])
def test_a_pack_time_out_of_range_is_a_damaged_row_for_fsck_gc_and_close(tmp_path: Path, when: float) -> None:
    path = tmp_path / "time.snapvc"
    _make(path)
    with snapvc.open(path) as repo:
        repo.gc(grace=0, reflog_expiry=0)
    number = max(_rows(path), key=lambda r: len(r[3]))[0]
    _sql(path, "UPDATE packs SET time = ?, state = ? WHERE number = ?", when, packs.PACKED, number)
    with snapvc.open(path) as repo:
        report = repo.fsck()
        assert any(p.kind == "storage" and f"table 'packs' row {number}" in p.message and "its time" in p.message
                   for p in report.problems), report
        with pytest.raises(snapvc.RepositoryError, match=f"table 'packs' row {number}"):
            repo.gc(grace=0)
        repo.commit({"fresh": 1}, branch="next")
    with snapvc.open(path) as repo:  # (closed above without raising)
        assert repo.checkout("next") == {"fresh": 1}


@pytest.mark.parametrize("value", ["abc", "1e300", "", b"\x01", 1.5])
def test_a_pack_generation_that_is_no_count_is_named_by_fsck_and_mended_by_the_next_rewrite(
        tmp_path: Path, value: object) -> None:
    path = tmp_path / "generation.snapvc"
    _make(path)
    _sql(path, "INSERT INTO meta (key, value) VALUES ('pack_generation', ?) "
               "ON CONFLICT (key) DO UPDATE SET value = excluded.value", value)
    with snapvc.open(path) as repo:
        report = repo.fsck()
        assert [p.message for p in report.problems if "pack_generation" in p.message], report
        repo.commit({"fresh": 1}, branch="next")  # then close seals it: a rewrite
    with snapvc.open(path) as repo:
        assert repo.checkout("next") == {"fresh": 1}
        assert repo.fsck().ok
        repo.gc(grace=0, reflog_expiry=0)
        assert repo.fsck().ok


def _insert_row(path: Path, ids: bytes, sizes: bytes, when: object, data: bytes, state: int = packs.SEALED,
                stream: int | None = None) -> int:
    """A ``packs`` row as another tool might write it: its number."""
    conn = sqlite3.connect(path)
    with conn:
        (number,) = conn.execute("SELECT max(number) + 1000 FROM packs").fetchone()
        conn.execute("INSERT INTO packs VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (number, number if stream is None else stream, state, when, ids, sizes, data))
    conn.close()
    return number


def test_damaged_packs_holding_only_garbage_are_swept_and_reported(tmp_path: Path) -> None:
    """Packs nothing reachable needs: one whose bytes do not decode, one whose ids are no
    32-byte ids, one whose time is 1e300. gc sweeps the garbage there is, drops them and
    says so; fsck, which named them, is clean afterwards."""
    path = tmp_path / "garbage.snapvc"
    _make(path)
    with snapvc.open(path) as repo:
        repo.commit({"scratch": "s" * 5000}, branch="scratch")
        repo.delete_branch("scratch")
    undecodable, ids = _add_damaged_pending_pack(path)
    sizes = zstandard.ZstdCompressor().compress((10).to_bytes(4, "little"))
    bad_ids = _insert_row(path, b"\x01" * 33, sizes, 1, b"")
    bad_time = _insert_row(path, b"\xe1" * 32, sizes, 1e300, zstandard.ZstdCompressor().compress(bytes(10)))
    with snapvc.open(path) as repo:
        before = repo.fsck()
        assert not before.ok
        named = " ".join(p.message for p in before.problems)
        assert f"pack {undecodable}" in named and f"row {bad_ids}" in named and f"row {bad_time}" in named
        report = repo.gc(grace=0, reflog_expiry=0)
        assert set(ids) <= set(report.removed_objects)
        assert len(report.removed_objects) > len(ids)  # the scratch branch's objects: swept too
        assert any(f"row {bad_ids}" in d for d in report.damage) and any(f"row {bad_time}" in d for d in report.damage)
        assert "damage: dropped" in str(report)
        assert repo.fsck().ok
        assert repo.checkout("main")["doc"]
    assert {n for n, *_ in _rows(path)}.isdisjoint({undecodable, bad_ids, bad_time})


def test_a_damaged_pack_that_also_holds_young_objects_is_left_whole_and_reported(tmp_path: Path) -> None:
    """A stream of two damaged rows: garbage (old) then young objects. It cannot be
    rewritten without the young ones, which cannot be read: it stays as it is, its
    garbage is reported as not removed, and the rest is swept."""
    path = tmp_path / "mixed.snapvc"
    _make(path)
    sizes = zstandard.ZstdCompressor().compress((10).to_bytes(4, "little"))
    first = _insert_row(path, b"\xe2" * 32, sizes, 1, b"\x28\xb5\x2f\xfd\x00\xee\xee", state=packs.OPEN)
    second = _insert_row(path, b"\xe3" * 32, sizes, 4e9, b"\xee" * 8, state=packs.FINISHED, stream=first)
    with snapvc.open(path) as repo:
        repo.commit({"scratch": "s" * 5000}, branch="scratch")
        repo.delete_branch("scratch")
        report = repo.gc(grace=0, reflog_expiry=0)
        assert b"\xe2" * 32 not in report.removed_objects and report.removed_objects
        assert any("not removed" in d and (b"\xe2" * 32).hex()[:12] in d for d in report.damage), report.damage
    assert {first, second} <= {n for n, *_ in _rows(path)}


def test_an_unexpected_failure_of_a_seal_is_logged_and_the_sealer_and_the_rows_live_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever a seal raises (a bug, not a busy file), the background pass logs it naming
    the file and returns: the thread lives on, no row changes, every commit reads back."""
    path = tmp_path / "seal.snapvc"
    _make(path)
    repo = snapvc.open(path)
    store = repo.backend.objects
    tip = repo.commit({"fresh": "state " * 50}, branch="next")
    before = _rows(path)

    def broken_seal(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a seal that fails unexpectedly")

    monkeypatch.setattr(store, "seal", broken_seal)
    monkeypatch.setattr(store, "seal_plan", lambda now: [[1]])  # one group, so that the seal is tried
    sealer = packs._Sealer(store)
    try:
        sealer.work()
    finally:
        sealer.stop()
    assert "sealing in the background failed" in caplog.text and str(path) in caplog.text
    assert "a seal that fails unexpectedly" in caplog.text
    assert _rows(path) == before
    monkeypatch.undo()
    repo.close()
    with snapvc.open(path) as repo:
        assert repo.checkout(tip.id) == {"fresh": "state " * 50} and repo.fsck().ok
