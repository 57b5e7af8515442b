"""The behaviour every ``ObjectStore`` shares; a new backend is done when it passes here.

The suite runs over each raw backend and over the stack the repository uses
(``open_object_store(backend)``: verification over compression over the backend). The
stack has a second part of its own: what it does with damaged or unknown frames.
"""

from __future__ import annotations

import random
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import zstandard

from snapvc.errors import CorruptObjectError, ObjectNotFoundError
from snapvc.ids import ObjectId
from snapvc.objects import BLOB, object_bytes
from snapvc.store.base import ObjectStore, StoreSizes
from snapvc.store.codec import open_object_store
from snapvc.backends.memory.objects import MemoryObjectStore
from snapvc.backends.sqlite.file import SqliteFile
from snapvc.backends.sqlite.objects import SqliteObjectStore


class FakeClock:
    """Whole seconds, moved only by the test."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Stores:
    store: ObjectStore  # what the tests talk to
    raw: ObjectStore  # the backend under it (the same object for a raw backend)
    clock: FakeClock
    reopen: Callable[[], ObjectStore]  # a new store over the same backend, with no caches


def make_raw(kind: str, tmp_path: Path, clock: FakeClock,
             request: pytest.FixtureRequest) -> tuple[ObjectStore, Callable[[], None], Callable[[], ObjectStore]]:
    """A raw backend, how to close it, and how to open another over the same data with
    no caches (a second process, say)."""
    if kind == "memory":
        store = MemoryObjectStore(clock=clock)
        return store, lambda: None, lambda: store
    if kind == "s3":  # a real S3 server: SeaweedFS on 127.0.0.1 (tests/conftest.py)
        from snapvc.backends.s3.client import S3Client, S3Location
        from snapvc.backends.s3.objects import S3ObjectStore
        from snapvc.backends.s3.packs import Packs

        location = S3Location.parse(request.getfixturevalue("s3_url"))
        clients = [S3Client(location)]

        def fresh() -> ObjectStore:
            clients.append(S3Client(location))
            return S3ObjectStore(Packs(clients[-1], clock))

        return S3ObjectStore(Packs(clients[0], clock)), lambda: [c.close() for c in clients], fresh
    file = SqliteFile(tmp_path / "objects.snapvc")
    store = SqliteObjectStore(file, clock=clock)
    return store, file.close, lambda: store


@pytest.fixture(params=["memory", "sqlite", "s3", "memory+codec", "sqlite+codec", "s3+codec"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    clock = FakeClock()
    backend, close, fresh = make_raw(request.param.split("+")[0], tmp_path, clock, request)
    if request.param.endswith("+codec"):
        yield Stores(open_object_store(backend), backend, clock, lambda: open_object_store(fresh()))
    else:
        yield Stores(backend, backend, clock, fresh)
    close()


@pytest.fixture(params=["memory", "sqlite", "s3"])
def raw(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    """A raw backend alone: it keeps whatever bytes it is handed, under any id."""
    backend, close, _ = make_raw(request.param, tmp_path, FakeClock(), request)
    yield backend
    close()


@pytest.fixture(params=["memory", "sqlite", "s3"])
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    clock = FakeClock()
    backend, close, fresh = make_raw(request.param, tmp_path, clock, request)
    yield Stores(open_object_store(backend), backend, clock, lambda: open_object_store(fresh()))
    close()


def blob(content: bytes) -> tuple[ObjectId, bytes]:
    """A real object: its id is the hash of its canonical bytes, so every store accepts it."""
    return object_bytes(BLOB, content)


def blobs(n: int, size: int = 40, seed: int = 0) -> list[tuple[ObjectId, bytes]]:
    rnd = random.Random(seed)
    return [blob(f"object {i} ".encode() + rnd.randbytes(size)) for i in range(n)]


# -- put / get ------------------------------------------------------------------------------


def test_put_then_get(stores: Stores) -> None:
    s = stores.store
    items = blobs(5) + [blob(b""), blob(b"x" * 100_000), blob(random.Random(1).randbytes(50_000))]
    s.put_many(items)
    for oid, data in items:
        assert s.get(oid) == data
        assert type(s.get(oid)) is bytes
    assert s.get_many([oid for oid, _ in items]) == dict(items)
    fresh = stores.reopen()
    assert fresh.get_many([oid for oid, _ in items]) == dict(items)


def test_put_many_takes_any_iterable(stores: Stores) -> None:
    items = blobs(10)
    stores.store.put_many(iter(items))
    stores.store.put_many(x for x in [])
    assert stores.store.has_many(oid for oid, _ in items) == {oid for oid, _ in items}


def test_get_of_a_missing_id_names_it(stores: Stores) -> None:
    stores.store.put_many(blobs(3))
    missing, _ = blob(b"never stored")
    with pytest.raises(ObjectNotFoundError) as info:
        stores.store.get(missing)
    assert info.value.object_id == missing
    assert missing.hex in str(info.value)
    assert isinstance(info.value, KeyError)


def test_get_many_leaves_out_missing_ids(stores: Stores) -> None:
    items = blobs(4)
    stores.store.put_many(items[:2])
    wanted = [oid for oid, _ in items]
    assert stores.store.get_many(wanted) == dict(items[:2])
    assert stores.store.get_many([]) == {}
    assert stores.store.get_many(wanted[2:]) == {}


def test_get_many_and_has_many_in_large_batches(stores: Stores) -> None:
    items = blobs(1_234, size=8)
    stores.store.put_many(items)
    ids = [oid for oid, _ in items]
    absent = [oid for oid, _ in blobs(300, size=8, seed=99)]
    mixed = ids + absent
    random.Random(2).shuffle(mixed)
    assert stores.store.get_many(mixed) == dict(items)
    assert stores.store.has_many(mixed) == set(ids)
    assert stores.raw.mtimes(mixed).keys() == set(ids)


def test_get_many_keys_are_object_ids(stores: Stores) -> None:
    items = blobs(3)
    stores.store.put_many(items)
    for oid in stores.store.get_many([oid for oid, _ in items]):
        assert isinstance(oid, ObjectId)


def test_has_many(stores: Stores) -> None:
    items = blobs(6)
    stores.store.put_many(items[::2])
    assert stores.store.has_many([oid for oid, _ in items]) == {oid for oid, _ in items[::2]}
    assert stores.store.has_many([]) == set()


# -- objects are immutable; a second put refreshes the age ---------------------------------


def test_putting_an_existing_id_keeps_the_first_bytes(raw: ObjectStore) -> None:
    # The second put must not replace what is stored (objects are immutable).
    oid, _ = blob(b"the id")
    raw.put_many([(oid, b"first")])
    raw.put_many([(oid, b"second, longer")])
    assert raw.get(oid) == b"first"
    assert raw.sizes() == StoreSizes(objects=1, stored_bytes=len(b"first"))


def test_putting_an_existing_id_is_a_no_op_that_refreshes_its_mtime(stores: Stores) -> None:
    s = stores.store
    (a, da), (b, db) = blobs(2)
    s.put_many([(a, da), (b, db)])
    first = s.mtimes([a, b])
    assert first == {a: stores.clock.now, b: stores.clock.now}
    sizes = s.sizes()

    stores.clock.advance(3600)
    s.put_many([(a, da)])
    assert s.mtimes([a, b]) == {a: first[a] + 3600, b: first[b]}
    assert s.sizes() == sizes
    assert s.get(a) == da
    assert sorted(s.iter_ids()) == sorted([a, b])


def test_putting_the_same_id_twice_in_one_batch(stores: Stores) -> None:
    (a, da), (b, db) = blobs(2)
    stores.store.put_many([(a, da), (b, db), (a, da)])
    assert stores.store.sizes().objects == 2
    assert stores.store.get(a) == da


def test_mtimes(stores: Stores) -> None:
    items = blobs(3)
    stores.store.put_many(items[:1])
    stores.clock.advance(10)
    stores.store.put_many(items[1:2])
    (a, _), (b, _), (c, _) = items
    times = stores.store.mtimes([a, b, c])
    assert times == {a: 1_700_000_000.0, b: 1_700_000_010.0}
    assert all(type(t) is float for t in times.values())
    assert stores.store.mtimes([]) == {}


# -- listing ---------------------------------------------------------------------------------


def test_iter_ids(stores: Stores) -> None:
    assert list(stores.store.iter_ids()) == []
    items = blobs(50)
    stores.store.put_many(items)
    ids = list(stores.store.iter_ids())
    assert sorted(ids) == sorted(oid for oid, _ in items)
    assert all(isinstance(oid, ObjectId) for oid in ids)


def test_iter_ids_is_a_snapshot_safe_to_delete_while_iterating(stores: Stores) -> None:
    items = blobs(20)
    stores.store.put_many(items)
    for oid in stores.store.iter_ids():
        stores.store.delete_many([oid])
    assert list(stores.store.iter_ids()) == []


def test_ids_with_prefix(stores: Stores) -> None:
    items = blobs(400)
    stores.store.put_many(items)
    ids = [oid for oid, _ in items]
    by_two: dict[str, list[ObjectId]] = {}
    for oid in ids:
        by_two.setdefault(oid.hex[:2], []).append(oid)
    shared = next(p for p, group in sorted(by_two.items()) if len(group) >= 3)

    for prefix in (shared, shared + ids[0].hex[2:3], ids[0].hex[:1], ids[0].hex[:5], ids[0].hex[:17]):
        expected = {oid for oid in ids if oid.hex.startswith(prefix)}
        assert set(stores.store.ids_with_prefix(prefix, limit=1_000)) == expected, prefix
    assert stores.store.ids_with_prefix(ids[3].hex, limit=5) == [ids[3]]

    two = stores.store.ids_with_prefix(shared, 2)
    assert len(two) == 2 and all(oid.hex.startswith(shared) for oid in two)
    assert len(stores.store.ids_with_prefix(shared)) == 2  # the default limit tells "ambiguous"
    assert len(stores.store.ids_with_prefix(shared, 1)) == 1
    assert all(isinstance(oid, ObjectId) for oid in stores.store.ids_with_prefix(shared, 10))


def test_ids_with_prefix_finds_nothing(stores: Stores) -> None:
    items = blobs(30)
    stores.store.put_many(items)
    hexes = {oid.hex[:4] for oid, _ in items}
    absent = next(f"{n:04x}" for n in range(1 << 16) if f"{n:04x}" not in hexes)
    assert stores.store.ids_with_prefix(absent, 10) == []
    # Edges of the id space.
    assert stores.store.ids_with_prefix("0000000000", 10) == []
    assert stores.store.ids_with_prefix("ffffffffff", 10) == []


def test_ids_with_prefix_at_the_edges_of_the_id_space(raw: ObjectStore) -> None:
    low = ObjectId(bytes(32))
    high = ObjectId(b"\xff" * 32)
    near = ObjectId(b"\x00" * 31 + b"\x01")
    odd = ObjectId(b"\xab\xc0" + bytes(30))
    raw.put_many([(low, b"l"), (high, b"h"), (near, b"n"), (odd, b"o")])
    assert set(raw.ids_with_prefix("0000", 10)) == {low, near}
    assert raw.ids_with_prefix("0" * 64, 10) == [low]
    assert raw.ids_with_prefix("f" * 64, 10) == [high]
    assert raw.ids_with_prefix("fff", 10) == [high]
    assert raw.ids_with_prefix("abc", 10) == [odd]
    assert raw.ids_with_prefix("abc0", 10) == [odd]
    assert raw.ids_with_prefix("abc1", 10) == []
    assert raw.ids_with_prefix("abb", 10) == []


# -- delete and sizes ---------------------------------------------------------------------


def test_delete_many(stores: Stores) -> None:
    items = blobs(10)
    stores.store.put_many(items)
    ids = [oid for oid, _ in items]
    gone = ids[:4]
    missing, _ = blob(b"not here")
    assert stores.store.delete_many(gone + [missing]) == 4
    assert stores.store.delete_many(gone) == 0
    assert stores.store.delete_many([]) == 0
    assert stores.store.get_many(ids) == dict(items[4:])
    assert stores.store.has_many(ids) == set(ids[4:])
    assert stores.store.mtimes(ids).keys() == set(ids[4:])
    assert sorted(stores.store.iter_ids()) == sorted(ids[4:])
    assert stores.store.ids_with_prefix(ids[0].hex, 5) == []
    with pytest.raises(ObjectNotFoundError):
        stores.store.get(ids[0])
    assert stores.store.sizes().objects == 6
    # A deleted object can be stored again.
    stores.store.put_many(items[:1])
    assert stores.store.get(ids[0]) == items[0][1]


def test_delete_many_in_large_batches(stores: Stores) -> None:
    items = blobs(1_100, size=4)
    stores.store.put_many(items)
    assert stores.store.delete_many(oid for oid, _ in items[:1_050]) == 1_050
    assert stores.store.sizes().objects == 50


def test_sizes(stores: Stores) -> None:
    assert stores.store.sizes() == StoreSizes(objects=0, stored_bytes=0)
    items = blobs(7, size=100)
    stores.store.put_many(items)
    sizes = stores.store.sizes()
    assert sizes.objects == 7
    # What the backend holds, byte for byte.
    frames = stores.raw.get_many([oid for oid, _ in items])
    assert sizes.stored_bytes == sum(len(f) for f in frames.values())
    if stores.store is stores.raw:
        assert sizes.stored_bytes == sum(len(d) for _, d in items)


def test_sizes_count_compressed_bytes_in_the_stack(stack: Stores) -> None:
    oid, data = blob(b"all work and no play " * 5_000)
    stack.store.put_many([(oid, data)])
    assert stack.store.sizes().objects == 1
    assert stack.store.sizes().stored_bytes < len(data) // 20


def test_implements_the_protocol(stores: Stores) -> None:
    assert isinstance(stores.store, ObjectStore)


# -- the stack: frames, compression, verification --------------------------------------------


def frame_of(stack: Stores, oid: ObjectId) -> bytes:
    return stack.raw.get(oid)


def replace_frame(stack: Stores, oid: ObjectId, frame: bytes) -> None:
    stack.raw.delete_many([oid])
    stack.raw.put_many([(oid, frame)])


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def test_tiny_objects_are_stored_raw_larger_compressible_ones_zstd(stack: Stores) -> None:
    tiny = blob(b"hi")
    small = blob(b"x" * 20)
    compressible = blob(b"the same words again and again, " * 200)
    incompressible = blob(random.Random(3).randbytes(5_000))
    stack.store.put_many([tiny, small, compressible, incompressible])
    assert frame_of(stack, tiny[0])[0] == 0
    assert frame_of(stack, small[0])[0] == 0
    assert frame_of(stack, compressible[0])[0] == 1
    assert len(frame_of(stack, compressible[0])) < len(compressible[1]) // 5
    assert frame_of(stack, incompressible[0])[0] == 0
    assert frame_of(stack, tiny[0]) == b"\x00" + varint(len(tiny[1])) + tiny[1]
    for oid, data in (tiny, small, compressible, incompressible):
        assert stack.reopen().get(oid) == data


def test_frame_declares_the_canonical_size(stack: Stores) -> None:
    oid, data = blob(b"abc" * 10_000)
    stack.store.put_many([(oid, data)])
    frame = frame_of(stack, oid)
    assert frame.startswith(b"\x01" + varint(len(data)))


@pytest.mark.parametrize("where", ["first body byte", "middle", "last"])
def test_corrupted_frame_is_reported_with_its_id(stack: Stores, where: str) -> None:
    good = blob(b"an innocent neighbour " * 50)
    oid, data = blob(b"a long compressible object; " * 300)
    stack.store.put_many([(oid, data), good])
    frame = bytearray(frame_of(stack, oid))
    header = 1 + len(varint(len(data)))
    at = {"first body byte": header, "middle": (header + len(frame)) // 2, "last": len(frame) - 1}[where]
    frame[at] ^= 0x20
    replace_frame(stack, oid, bytes(frame))

    reader = stack.reopen()
    with pytest.raises(CorruptObjectError) as info:
        reader.get(oid)
    assert info.value.object_id == oid
    assert oid.hex in str(info.value)
    with pytest.raises(CorruptObjectError):
        reader.get_many([good[0], oid])
    assert reader.get(good[0]) == good[1]


def test_raw_frame_with_other_content_fails_verification(stack: Stores) -> None:
    oid, data = blob(b"short")
    other = b"\x01" + b"shorT"
    replace_frame(stack, oid, b"\x00" + varint(len(other)) + other)
    with pytest.raises(CorruptObjectError) as info:
        stack.reopen().get(oid)
    assert info.value.object_id == oid
    assert "blake3" in str(info.value) or "match" in str(info.value)


@pytest.mark.parametrize("codec", [0, 1])
@pytest.mark.parametrize("declared", ["smaller", "larger", "zero", "huge"])
def test_declared_size_must_match(stack: Stores, codec: int, declared: str) -> None:
    oid, data = blob(b"content that is long enough to compress well " * 40)
    body = data if codec == 0 else zstandard.ZstdCompressor().compress(data)
    size = {"smaller": len(data) // 2, "larger": len(data) + 1, "zero": 0, "huge": 1 << 40}[declared]
    replace_frame(stack, oid, bytes((codec,)) + varint(size) + body)
    with pytest.raises(CorruptObjectError) as info:
        stack.reopen().get(oid)
    assert info.value.object_id == oid


@pytest.mark.parametrize("content_size_in_header", [False, True])
def test_decompression_is_bounded_by_the_declared_size(stack: Stores, content_size_in_header: bool) -> None:
    # A small frame that would decompress to 64 MB, declaring 100 bytes.
    oid, _ = blob(b"anything")
    bomb = zstandard.ZstdCompressor(write_content_size=content_size_in_header).compress(bytes(64 << 20))
    assert len(bomb) < 100_000
    replace_frame(stack, oid, b"\x01" + varint(100) + bomb)
    reader = stack.reopen()
    tracemalloc.start()
    try:
        with pytest.raises(CorruptObjectError) as info:
            reader.get(oid)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.object_id == oid
    assert peak < 8 << 20, f"reading a frame declaring 100 bytes allocated {peak >> 20} MB"


@pytest.mark.parametrize("frame", [b"", b"\x00", b"\x01", b"\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"])
def test_truncated_frames(stack: Stores, frame: bytes) -> None:
    oid, _ = blob(b"x")
    replace_frame(stack, oid, frame)
    with pytest.raises(CorruptObjectError) as info:
        stack.reopen().get(oid)
    assert info.value.object_id == oid


@pytest.mark.parametrize("codec", [4, 7, 0x80, 0xFF])
def test_unknown_codec_byte_is_corruption(stack: Stores, codec: int) -> None:
    oid, data = blob(b"payload")
    replace_frame(stack, oid, bytes((codec,)) + varint(len(data)) + data)
    with pytest.raises(CorruptObjectError) as info:
        stack.reopen().get(oid)
    assert info.value.object_id == oid
    assert str(codec) in str(info.value)


def test_a_dictionary_frame_naming_a_missing_dictionary_is_reported(stack: Stores) -> None:
    oid, data = blob(b"payload")
    replace_frame(stack, oid, b"\x02" + varint(len(data)) + b"\x07" + data)
    with pytest.raises(CorruptObjectError) as info:
        stack.reopen().get(oid)
    assert info.value.object_id == oid
    assert "dictionary 7 is missing" in str(info.value)


def prose_blobs(n: int, seed: int) -> list[tuple[ObjectId, bytes]]:
    """Objects of a few KB of word-like text sharing a vocabulary, as a repository's are."""
    vocabulary = random.Random(0)
    words = ["".join(vocabulary.choice("abcdefghijklmnoprstuvwy") for _ in range(vocabulary.randint(2, 9)))
             for _ in range(2000)]
    weights = [1 / rank for rank in range(1, len(words) + 1)]  # Zipf-like, as in prose
    rnd = random.Random(seed)
    return [blob(" ".join(rnd.choices(words, weights, k=rnd.randint(300, 900))).encode()) for _ in range(n)]


def test_a_dictionary_is_trained_on_the_first_objects_and_compresses_later_ones(stack: Stores) -> None:
    first = prose_blobs(120, seed=1)  # a few hundred KB: enough samples to train on
    stack.store.put_many(first)
    assert len(stack.raw.dictionaries()) == 1
    later = prose_blobs(40, seed=2)
    stack.store.put_many(later)
    codecs = {frame_of(stack, oid)[0] for oid, _ in later}
    assert codecs == {2}
    plain = sum(len(zstandard.ZstdCompressor(level=3).compress(data)) for _, data in later)
    assert sum(len(frame_of(stack, oid)) for oid, _ in later) < plain
    reader = stack.reopen()  # no caches: every frame and the dictionary come from the backend
    assert reader.get_many([oid for oid, _ in first + later]) == dict(first + later)


def test_a_damaged_dictionary_is_reported_by_the_reads_that_need_it(stack: Stores) -> None:
    stack.store.put_many(prose_blobs(120, seed=1))
    later = prose_blobs(5, seed=3)
    stack.store.put_many(later)
    (number, stored), = stack.raw.dictionaries().items()
    if isinstance(stack.raw, MemoryObjectStore):
        stack.raw._dictionaries[number] = stored[:20] + bytes(len(stored) - 20)
    elif hasattr(stack.raw, "client"):  # S3: the dictionary is an object of its own
        stack.raw.client.put(f"dictionaries/{number}", bytes(100))
    else:
        stack.raw.file.conn.execute("UPDATE dictionaries SET data = zeroblob(100)")
    reader = stack.reopen()
    oid = later[0][0]
    with pytest.raises(CorruptObjectError) as info:
        reader.get(oid)
    assert info.value.object_id == oid
    assert f"dictionary {number} is damaged" in str(info.value)
    more = prose_blobs(3, seed=4)
    reader.put_many(more)  # writing goes on without the damaged dictionary
    assert {frame_of(stack, o)[0] for o, _ in more} <= {0, 1}
    assert stack.reopen().get_many([o for o, _ in more]) == dict(more)


def test_a_dictionary_trained_in_a_rolled_back_write_is_not_used_afterwards(tmp_path: Path) -> None:
    file = SqliteFile(tmp_path / "rollback.snapvc")
    backend = SqliteObjectStore(file)
    store = open_object_store(backend)
    first = prose_blobs(120, seed=1)
    with pytest.raises(RuntimeError):
        with file.transaction():
            store.put_many(first)
            raise RuntimeError("the commit failed after its objects were written")
    store.forget([oid for oid, _ in first])
    assert backend.dictionaries() == {}
    later = prose_blobs(5, seed=2)
    store.put_many(later)
    assert open_object_store(backend).get_many([oid for oid, _ in later]) == dict(later)
    file.close()


def test_the_dictionary_is_trained_on_a_sample_of_the_whole_batch(stack: Stores) -> None:
    # A first commit whose first objects are all of one kind (a binary blob's chunks)
    # must not give a dictionary that knows nothing of the rest.
    rnd = random.Random(9)
    binary = [blob(rnd.randbytes(4000)) for _ in range(400)]  # 1.6 MB, first in the batch
    prose = prose_blobs(200, seed=7)
    stack.store.put_many(binary + prose)
    plain = sum(len(zstandard.ZstdCompressor(level=3).compress(data)) for _, data in prose)
    assert sum(len(frame_of(stack, oid)) for oid, _ in prose) < plain  # sampled from the blob alone: 1.3x plain


def test_a_large_batch_compressed_on_every_core_reads_back(stack: Stores) -> None:
    # Big enough for zstd's own threads (codec.PARALLEL_ITEMS/BYTES), with tiny objects
    # (stored raw) and empty ones in between, before and after the dictionary exists.
    for seed in (21, 22):
        prose = prose_blobs(300, seed=seed)
        tiny = [blob(f"tiny {seed} {i}".encode()) for i in range(20)] + [blob(b"")]
        batch = [x for pair in zip(prose, tiny * 15) for x in pair] + prose[len(tiny) * 15 :]
        stack.store.put_many(batch)
        assert stack.reopen().get_many([oid for oid, _ in batch]) == dict(batch)
    assert stack.raw.dictionaries()


def test_deleting_objects_keeps_the_dictionary_in_use(stack: Stores) -> None:
    first = prose_blobs(120, seed=1)
    stack.store.put_many(first)
    stack.store.delete_many([oid for oid, _ in first[:10]])
    later = prose_blobs(5, seed=6)
    stack.store.put_many(later)
    assert len(stack.raw.dictionaries()) == 1
    assert {frame_of(stack, oid)[0] for oid, _ in later} == {2}


def test_objects_stored_before_a_dictionary_stay_readable_after(stack: Stores) -> None:
    early = prose_blobs(3, seed=5)
    stack.store.put_many(early)
    assert {frame_of(stack, oid)[0] for oid, _ in early} == {1}
    stack.store.put_many(prose_blobs(120, seed=1))
    assert stack.raw.dictionaries()
    assert stack.reopen().get_many([oid for oid, _ in early]) == dict(early)


def test_delta_frames_round_trip_and_need_their_base(stack: Stores) -> None:
    base_id, base = blob(b"".join(f"entry {i}: some repeated text\n".encode() for i in range(400)))
    oid, data = blob(base[1:] + b"entry 400: one more line\n")
    stack.store.put_many([(base_id, base)])
    stack.store.put_many([(oid, data)], {oid: base_id})  # type: ignore[call-arg]
    frame = frame_of(stack, oid)
    assert frame[0] == 3
    assert len(frame) < 200
    assert stack.reopen().get(oid) == data

    stack.raw.delete_many([base_id])
    with pytest.raises(CorruptObjectError) as info:
        stack.reopen().get(oid)
    assert info.value.object_id == oid
    assert base_id.hex in str(info.value)


def test_delta_against_a_corrupt_base_is_reported(stack: Stores) -> None:
    base_id, base = blob(b"".join(f"row {i} of a table\n".encode() for i in range(500)))
    oid, data = blob(base[1:] + b"row 500 of a table\n")
    stack.store.put_many([(base_id, base)])
    stack.store.put_many([(oid, data)], {oid: base_id})  # type: ignore[call-arg]
    assert frame_of(stack, oid)[0] == 3
    frame = bytearray(frame_of(stack, base_id))
    frame[-1] ^= 0xFF
    replace_frame(stack, base_id, bytes(frame))
    with pytest.raises(CorruptObjectError):
        stack.reopen().get(oid)


def test_reads_verify_what_the_backend_returns(stack: Stores) -> None:
    # Two valid frames swapped between ids: each decodes, neither hashes to its id.
    a, da = blob(b"first object " * 20)
    b, db = blob(b"second object " * 20)
    stack.store.put_many([(a, da), (b, db)])
    fa, fb = frame_of(stack, a), frame_of(stack, b)
    replace_frame(stack, a, fb)
    replace_frame(stack, b, fa)
    reader = stack.reopen()
    for oid in (a, b):
        with pytest.raises(CorruptObjectError) as info:
            reader.get(oid)
        assert info.value.object_id == oid


# -- capabilities: declared, working, and the undeclared ones never called ---------------------


def _location(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "memory":
        return "memory://"
    if kind == "s3":
        return str(request.getfixturevalue("s3_url"))
    return str(tmp_path / "capabilities.snapvc")


@pytest.mark.parametrize("kind", ["memory", "sqlite", "sqlite-format-2", "s3"])
def test_every_backend_declares_its_capabilities_and_each_declared_one_works(
        kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Each raw store and commit index states what it can do; what it states works, and
    what it does not state raises ``UnsupportedOperationError`` (a ``NotImplementedError``)."""
    from snapvc.backends.open import open_backend
    from snapvc.errors import UnsupportedOperationError
    from snapvc.objects import Commit
    from snapvc.store.base import RawObjectStore, StoreCapabilities
    from snapvc.store.commit_index import CommitIndex, CommitIndexCapabilities

    location = _location(kind, tmp_path, request)
    clock = FakeClock()
    # (A format 2 file keeps one frame a row, with dictionaries; format 3 keeps packs.)
    backend = open_backend(location, clock=clock, **({"format": 2} if kind == "sqlite-format-2" else {}))
    other = open_backend(location, clock=clock) if kind != "memory" else backend  # a second client
    try:
        assert isinstance(backend.objects, RawObjectStore) and isinstance(backend.commits, CommitIndex)
        caps = backend.objects.capabilities
        assert type(caps) is StoreCapabilities
        assert caps == {"memory": StoreCapabilities(dictionaries=True, refresh=False),
                        "sqlite": StoreCapabilities(dictionaries=False, refresh=False, compresses=True),
                        "sqlite-format-2": StoreCapabilities(dictionaries=True, refresh=False),
                        "s3": StoreCapabilities(dictionaries=True, refresh=True)}[kind]

        # dictionaries: a dictionary put keeps its number and bytes, also for another client
        if caps.dictionaries:
            number = backend.objects.put_dictionary(b"a dictionary")
            assert backend.objects.dictionaries()[number] == b"a dictionary"
            assert other.objects.dictionaries()[number] == b"a dictionary"
        else:
            with pytest.raises(UnsupportedOperationError, match="put_dictionary"):
                backend.objects.put_dictionary(b"a dictionary")
            with pytest.raises(UnsupportedOperationError, match="dictionaries"):
                backend.objects.dictionaries()

        # refresh: what another client stored is known here after it (and at once without it)
        oid, frame = blob(b"stored by the other client")
        backend.objects.has_many([])  # this client has looked once
        with other.transaction():
            other.objects.put_many([(oid, frame)])
        if caps.refresh:
            backend.objects.refresh()
        else:
            with pytest.raises(UnsupportedOperationError, match="refresh"):
                backend.objects.refresh()
        assert backend.objects.has_many([oid]) == {oid}

        # touch: a commit no ref reaches gets an age, by touch or by add itself
        index_caps = backend.commits.capabilities
        assert type(index_caps) is CommitIndexCapabilities
        assert index_caps.touch is (kind != "s3")
        commit, _ = Commit.create(tree=oid, parents=(), author="a", timestamp_us=0, message="m", metadata={}, generation=1)
        with backend.transaction():
            backend.commits.add(commit)
            if index_caps.touch:
                backend.commits.touch([commit.id])
            else:
                with pytest.raises(UnsupportedOperationError, match="touch"):
                    backend.commits.touch([commit.id])
        assert backend.commits.mtimes() == {commit.id: clock.now}

        # compresses: the codec stack hands such a store raw frames (it compresses them
        # together itself); any other store gets compressible bytes compressed
        from snapvc.store.codec import CODEC_RAW, open_object_store
        big, data = blob(b"the same words again and again " * 200)
        with backend.transaction():
            open_object_store(backend.objects).put_many([(big, data)])
        assert (backend.objects.get(big)[0] == CODEC_RAW) is caps.compresses
        assert open_object_store(other.objects).get(big) == data
        # ... and hands out their canonical bytes, any other frame as it is
        if caps.compresses:
            assert backend.objects.get_unframed_many([big, oid, ObjectId.of(b"absent")]) == (
                {big: data}, {oid: frame})
        else:
            with pytest.raises(UnsupportedOperationError, match="get_unframed_many"):
                backend.objects.get_unframed_many([big])
    finally:
        if other is not backend:
            other.close()
        backend.close()


class _Declaring:
    """A raw store over ``inner`` that declares only ``capabilities`` and fails the test
    when an ability it does not declare is called (it does not raise the store's error, so
    that a caller catching errors could not hide the call)."""

    def __init__(self, inner: MemoryObjectStore, capabilities: object) -> None:
        self.inner = inner
        self.capabilities = capabilities
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> object:
        if name in ("dictionaries", "put_dictionary", "refresh", "get_unframed_many"):
            ability = {"refresh": "refresh", "get_unframed_many": "compresses"}.get(name, "dictionaries")
            if not getattr(self.capabilities, ability):
                pytest.fail(f"{name} was called on a store that does not declare {ability!r}")
            self.calls.append(name)
        return getattr(self.inner, name)


class _Untouchable:
    """A commit index over ``inner`` that declares no ``touch`` and fails the test if it is called."""

    def __init__(self, inner: object) -> None:
        from snapvc.store.commit_index import CommitIndexCapabilities

        self.inner = inner
        self.capabilities = CommitIndexCapabilities(touch=False)

    def touch(self, ids: object) -> None:
        pytest.fail("touch was called on a commit index that does not declare it")

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def test_an_ability_a_store_does_not_declare_is_never_called() -> None:
    """A repository over stores that declare nothing optional commits enough to train a
    dictionary, commits without a ref, reads, syncs, gcs and checks itself, and calls none
    of the abilities; a store that declares them gets them called."""
    from snapvc.api import Repository, clone
    from snapvc.backends.open import open_backend
    from snapvc.store.base import StoreCapabilities
    from snapvc.store.codec import CODEC_ZSTD_DICT, TRAIN_AFTER_BYTES

    def run(capabilities: StoreCapabilities) -> tuple[_Declaring, Repository]:
        backend = open_backend("memory://")
        store = _Declaring(backend.objects, capabilities)  # type: ignore[arg-type]
        backend.objects = store  # type: ignore[assignment]
        backend.commits = _Untouchable(backend.commits)  # type: ignore[assignment]
        repo = Repository(backend)
        rnd = random.Random(7)
        words = [f"word{i}" for i in range(400)]
        state = {f"doc{i}": " ".join(rnd.choice(words) for _ in range(800)) for i in range(2 * TRAIN_AFTER_BYTES // 4000)}
        repo.commit(state, message="enough prose to train a dictionary on")
        repo.commit_tree({"x": 1}, message="no ref reaches it")
        assert repo.checkout("main") == state
        copy = clone(repo, "memory://")
        assert copy.checkout("main") == state
        repo.gc(grace=0)
        assert repo.fsck().ok
        return store, repo

    plain, repo = run(StoreCapabilities())
    assert plain.calls == []
    frames = plain.inner.get_many(plain.inner.iter_ids())
    assert frames and not any(frame[0] == CODEC_ZSTD_DICT for frame in frames.values())
    repo.close()

    keeping, repo = run(StoreCapabilities(dictionaries=True))
    assert "put_dictionary" in keeping.calls and "refresh" not in keeping.calls
    frames = keeping.inner.get_many(keeping.inner.iter_ids())
    assert any(frame[0] == CODEC_ZSTD_DICT for frame in frames.values())
    repo.close()
