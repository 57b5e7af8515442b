"""The order of a sealed pack's objects (``snapvc.backends.sqlite.layout``) and what a
fresh read of it costs, counted: the branches' newest states come first, walked together
a level at a time as a read from their roots asks for them, the chunks of long strings
after the nodes, history last; so a checkout decodes the newest state and no history,
and one value decodes and fetches only the start of the pack. A pack in any order reads back (packs written before
the order was chosen, and by any reader: the format is unchanged)."""

from __future__ import annotations

import gc
import random
import sqlite3
import tracemalloc
from pathlib import Path
from typing import Any

import zstandard

import snapvc
from snapvc.backends.sqlite import layout, packs
from snapvc.encoding.nodes import children_of, decode_node
from snapvc.ids import ID_SIZE, ObjectId
from snapvc.objects import BLOB, MAP, SEQ, TEXT
from snapvc.store.codec import BLOCK_MAX, decode_frame


def _words(rng: random.Random, n: int) -> str:
    vocabulary = ["agent", "tool", "result", "plan", "search", "file", "error", "retry", "answer", "context",
                  "token", "model", "step", "state", "value", "list", "query", "cache", "merge", "branch"]
    return " ".join(rng.choice(vocabulary) + str(rng.randrange(1000)) for _ in range(n))


def _run(path: Path, steps: int = 60, fork: bool = False) -> dict[str, Any]:
    """A small agent run: a growing message list, notes rewritten each step, a long
    document edited every tenth step; a side branch from the middle; with ``fork``, a
    branch from the end with one commit more, made last (the newest state). Closed
    (sealed)."""
    rng = random.Random(0)
    state: dict[str, Any] = {"messages": [], "notes": {f"n{k}": _words(rng, 8) for k in range(20)},
                             "document": _words(rng, 50_000)}
    with snapvc.open(path) as repo:
        for i in range(steps):
            state["messages"].append({"role": "assistant", "content": _words(rng, 40 + i % 50), "step": i})
            state["notes"][f"n{i % 20}"] = _words(rng, 8)
            if i % 10 == 9:
                cut = len(state["document"]) // 2 + i
                state["document"] = state["document"][:cut] + _words(rng, 30) + state["document"][cut + 200:]
            repo.commit(state, message=f"step {i}")
            if i == steps // 2:
                repo.branch("side", at="main")
        if fork:
            repo.branch("fork", at="main")
            cut = len(state["document"]) // 3
            repo.commit({**state, "messages": [*state["messages"], {"role": "user", "content": "and then?"}],
                         "document": state["document"][:cut] + _words(rng, 30) + state["document"][cut:]},
                        branch="fork", message="fork")
        repo.gc()  # every object in one sealed pack
    return state


def _pack(path: Path) -> tuple[int, list[bytes], list[int], int]:
    """The file's one sealed pack: its number, its ids and frame lengths in order, and
    the length of its data."""
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT number, state, ids, sizes, length(data) FROM packs").fetchall()
    conn.close()
    assert [row[1] for row in rows] == [packs.SEALED], rows
    number, _, ids, sizes, length = rows[0]
    count = len(ids) // ID_SIZE
    lengths = packs._read_sizes(sizes, count)
    assert lengths is not None
    return number, [ids[i : i + ID_SIZE] for i in range(0, len(ids), ID_SIZE)], lengths, length


def _walk(repo: snapvc.Repository, root: ObjectId) -> list[tuple[bytes, int]]:
    """(id, kind) of every object reachable from tree ``root``, level by level."""
    out: list[tuple[bytes, int]] = []
    seen: set[bytes] = set()
    level = [bytes(root)]
    while level:
        data = repo.store.get_many([ObjectId(oid) for oid in level if oid not in seen])
        below: list[bytes] = []
        for oid in level:
            if oid in seen:
                continue
            seen.add(oid)
            canonical = data[ObjectId(oid)]
            out.append((oid, canonical[0]))
            if canonical[0] in (MAP, SEQ, TEXT):
                kind, node = decode_node(oid, canonical, rebuild_types=False)
                below += [bytes(child) for child in children_of(kind, node)]
        level = below
    return out


def _depths(repo: snapvc.Repository, root: ObjectId) -> dict[bytes, int]:
    """How many levels below tree ``root`` each object reachable from it first is."""
    depths: dict[bytes, int] = {}
    level = [bytes(root)]
    depth = 0
    while level:
        level = [oid for oid in dict.fromkeys(level) if oid not in depths]
        data = repo.store.get_many([ObjectId(oid) for oid in level])
        below: list[bytes] = []
        for oid in level:
            depths[oid] = depth
            canonical = data[ObjectId(oid)]
            if canonical[0] in (MAP, SEQ, TEXT):
                kind, node = decode_node(oid, canonical, rebuild_types=False)
                below += [bytes(child) for child in children_of(kind, node)]
        level = below
        depth += 1
    return depths


def test_a_sealed_pack_puts_the_newest_state_first_with_the_top_of_the_other_branch_then_history(
        tmp_path: Path) -> None:
    """The pack starts with the branches' roots, the newest commit's first; then the
    newest state's nodes a level at a time, with the other branch's own nodes among them
    while they add at most an eighth (``layout.FOREIGN_SHARE``) to the newest state's
    bytes; then the newest state's chunks; then the rest of the other branch's nodes and
    its own chunks; then history."""
    path = tmp_path / "r.snapvc"
    _run(path)
    _, ids, lengths, _ = _pack(path)
    size = dict(zip(ids, lengths, strict=True))
    with snapvc.open(path) as repo:
        main_root, side_root = (repo.get_commit(repo.resolve(name)).tree for name in ("main", "side"))
        main = _walk(repo, main_root)
        side = _walk(repo, side_root)
        depth = _depths(repo, main_root)
        for oid, d in _depths(repo, side_root).items():
            depth.setdefault(oid, d)
    assert ids[:2] == [bytes(main_root), bytes(side_root)]
    newest = {oid for oid, _ in main}
    nodes = [oid for oid, kind in main if kind != BLOB]
    chunks = [oid for oid, kind in main if kind == BLOB]
    side_nodes = {oid for oid, kind in side if kind != BLOB} - newest
    side_chunks = {oid for oid, kind in side if kind == BLOB} - newest
    assert chunks and side_nodes and side_chunks
    first_chunk = ids.index(chunks[0])
    top = ids[:first_chunk]
    ahead = [oid for oid in top if oid in side_nodes]
    assert set(top) - set(ahead) == set(nodes) and ahead
    assert sum(size[oid] for oid in ahead) <= sum(size[oid] for oid in newest) // layout.FOREIGN_SHARE
    levels = [depth[oid] for oid in top]
    assert levels == sorted(levels) and levels[-1] > 2
    after = ids[first_chunk:]
    assert set(after[: len(chunks)]) == set(chunks)
    rest = side_nodes - set(ahead)
    assert set(after[len(chunks) : len(chunks) + len(rest)]) == rest
    assert set(after[len(chunks) + len(rest) : len(chunks) + len(rest) + len(side_chunks)]) == side_chunks
    history = set(ids) - newest - side_nodes - side_chunks
    assert history, "the run leaves history behind"


def test_a_fresh_checkout_decodes_the_newest_state_and_one_value_only_the_start_of_the_pack(tmp_path: Path) -> None:
    """Counted on a newly opened repository: a checkout of the newest state decodes its
    objects and at most a zstd block more, none of the history behind them; one message
    read through a snapshot decodes no chunk of the long document and fetches only part
    of the pack's row from the file."""
    path = tmp_path / "r.snapvc"
    state = _run(path)
    number, ids, lengths, stored = _pack(path)
    declared = sum(lengths)
    size = dict(zip(ids, lengths, strict=True))
    with snapvc.open(path) as repo:
        main = _walk(repo, repo.get_commit(repo.resolve("main")).tree)
    newest = sum(size[oid] for oid, _ in main)
    nodes = sum(size[oid] for oid, kind in main if kind != BLOB)
    assert newest + 2 * BLOCK_MAX < declared  # the history is more than a block or two

    with snapvc.open(path) as repo:
        assert repo.checkout("main") == state
        reader = repo.backend.objects._readers[number]
        assert newest <= len(reader.decoded) <= newest + BLOCK_MAX

    with snapvc.open(path) as repo:
        assert repo.snapshot("main")["messages"][30]["step"] == 30
        reader = repo.backend.objects._readers[number]
        assert len(reader.decoded) <= nodes + BLOCK_MAX < newest
        assert 0 < reader.fetched < stored  # the rest of the row was never read


def test_a_fresh_read_of_a_branch_behind_a_newer_fork_decodes_the_levels_above_its_value_only(
        tmp_path: Path) -> None:
    """Counted on a newly opened repository: the root of a branch a newer fork was made
    from is among the first objects of the pack (not behind the fork's whole state), and
    one message of it read through a snapshot decodes no more than the nodes of the two
    states and a zstd block: none of their long document's chunks."""
    path = tmp_path / "r.snapvc"
    state = _run(path, fork=True)
    number, ids, lengths, _ = _pack(path)
    size = dict(zip(ids, lengths, strict=True))
    with snapvc.open(path) as repo:
        main_root, fork_root = (repo.get_commit(repo.resolve(name)).tree for name in ("main", "fork"))
        main = _walk(repo, main_root)
        fork = _walk(repo, fork_root)
    nodes = sum(size[oid] for oid in {oid for oid, kind in main + fork if kind != BLOB})
    chunks = sum(size[oid] for oid in {oid for oid, kind in main + fork if kind == BLOB})
    assert chunks > 2 * BLOCK_MAX
    with snapvc.open(path) as repo:
        assert repo.snapshot("main")["messages"][30] == state["messages"][30]
        assert len(repo.backend.objects._readers[number].decoded) <= nodes + BLOCK_MAX
    assert ids[0] == bytes(fork_root) and bytes(main_root) in ids[:3]


def test_a_fresh_checkout_of_the_newest_of_many_unrelated_states_decodes_little_more_than_it(
        tmp_path: Path) -> None:
    """Threads of an agent, each on a branch of its own and sharing nothing, committed in
    turn into one pack: a fresh checkout of the newest decodes its own state and at most
    an eighth more of the others' (``layout.FOREIGN_SHARE``), not the top levels of
    every thread; and another thread's root is still among the pack's first objects."""
    path = tmp_path / "r.snapvc"
    rng = random.Random(3)
    states: list[dict[str, Any]] = [{"messages": []} for _ in range(12)]
    with snapvc.open(path) as repo:
        for step in range(20):
            for t, state in enumerate(states):
                state["messages"].append({"role": "assistant", "content": _words(rng, 60), "step": step})
                repo.commit(state, branch=f"thread-{t}", message=f"{t}/{step}")
        repo.gc()
    number, ids, lengths, _ = _pack(path)
    size = dict(zip(ids, lengths, strict=True))
    with snapvc.open(path) as repo:
        newest = sum(size[oid] for oid, _ in _walk(repo, repo.get_commit(repo.resolve("thread-11")).tree))
        other_root = bytes(repo.get_commit(repo.resolve("thread-0")).tree)
    assert newest * 2 + BLOCK_MAX < sum(lengths)
    with snapvc.open(path) as repo:
        assert repo.checkout("thread-11") == states[11]
        decoded = len(repo.backend.objects._readers[number].decoded)
    assert newest <= decoded <= newest + newest // layout.FOREIGN_SHARE
    assert other_root in ids[: len(states)]


def test_a_pack_in_any_order_reads_back(tmp_path: Path) -> None:
    """Readers find an object through its row's ids and sizes, never through where a
    layout puts it: the pack rewritten with its objects shuffled (as packs written before
    the order was chosen, in the order their objects came) reads back whole and is
    sound, and sealing it again puts the newest state first again."""
    path = tmp_path / "r.snapvc"
    state = _run(path, steps=20)
    number, ids, lengths, _ = _pack(path)
    conn = sqlite3.connect(path)
    (data,) = conn.execute("SELECT data FROM packs WHERE number = ?", (number,)).fetchone()
    raw = zstandard.ZstdDecompressor().decompress(data)
    frames = []
    offset = 0
    for length in lengths:
        frames.append(raw[offset : offset + length])
        offset += length
    reordered = list(zip(ids, frames, strict=True))
    random.Random(1).shuffle(reordered)
    conn.execute("UPDATE packs SET ids = ?, sizes = ?, data = ?, state = ? WHERE number = ?",
                 (b"".join(oid for oid, _ in reordered), packs._pack_sizes(len(f) for _, f in reordered),
                  zstandard.ZstdCompressor(level=3, write_content_size=True).compress(
                      b"".join(f for _, f in reordered)), packs.PACKED, number))
    conn.commit()
    conn.close()
    with snapvc.open(path) as repo:
        assert repo.checkout("main") == state
        assert repo.fsck().ok
        newest = [oid for oid, _ in _walk(repo, repo.get_commit(repo.resolve("main")).tree)]
        branches = set(newest) | {oid for oid, _ in _walk(repo, repo.get_commit(repo.resolve("side")).tree)}
        assert repo.backend.objects.seal_all() == 1
    resealed = _pack(path)[1]
    assert resealed[0] == newest[0] and set(resealed[: len(branches)]) == branches
    with snapvc.open(path) as repo:
        assert repo.checkout("main") == state
        assert repo.fsck().ok


def test_a_fresh_read_of_a_few_objects_indexes_no_ids_and_a_checkout_indexes_them_all(tmp_path: Path) -> None:
    """A newly opened repository finds the few objects of one value by searching its
    rows' ids (a fresh read pays for what it reads, not for every id of the file); a
    read of more objects than ``SEARCHES`` indexes every id, once."""
    path = tmp_path / "r.snapvc"
    state = _run(path, steps=20)
    _, ids, _, _ = _pack(path)
    with snapvc.open(path) as repo:
        store = repo.backend.objects
        assert repo.snapshot("main")["messages"][10]["step"] == 10
        assert store._where == {} and 0 < store._searches <= packs.SEARCHES
        assert repo.checkout("main") == state
        assert set(store._where) == set(ids) and not store._unindexed


def test_an_upgraded_file_is_sealed_with_the_newest_state_first(tmp_path: Path) -> None:
    """``upgrade`` seals the packs it wrote as the sealer does: the newest state first."""
    path = tmp_path / "r.snapvc"
    rng = random.Random(2)
    state: dict[str, Any] = {"documents": {f"d{k}": _words(rng, 2000) for k in range(10)}, "messages": []}
    with snapvc.open(path, format=2) as repo:
        for i in range(10):
            state["messages"].append(_words(rng, 50))
            state["documents"][f"d{i}"] = _words(rng, 2000)
            repo.commit(state, message=f"s{i}")
        repo.upgrade()
    _, ids, _, _ = _pack(path)
    with snapvc.open(path) as repo:
        newest = [oid for oid, _ in _walk(repo, repo.get_commit(repo.resolve("main")).tree)]
    assert ids[: len(newest)] == newest


def test_a_read_of_a_pack_decodes_to_the_object_it_asks_for_and_not_a_block_beyond(tmp_path: Path) -> None:
    """A sealed pack is decoded straight to the end of the furthest object a read asks
    for (``FrameReader``), not to the end of the zstd block that holds it; the last block
    of a pack is decoded whole, and its end checked."""
    path = tmp_path / "r.snapvc"
    _run(path)
    number, ids, lengths, _ = _pack(path)
    declared = sum(lengths)
    ends = [sum(lengths[: k + 1]) for k in range(len(ids))]
    picks = [k for k in range(0, len(ids), max(1, len(ids) // 7)) if declared - ends[k] > BLOCK_MAX]
    assert len(picks) >= 3
    for k in picks:
        with snapvc.open(path) as repo:
            oid = ObjectId(ids[k])
            assert ObjectId.of(repo.store.get_many([oid])[oid]) == oid
            reader = repo.backend.objects._readers[number]
            assert len(reader.decoded) == ends[k] and not reader.ended
    with snapvc.open(path) as repo:
        oid = ObjectId(ids[-1] if declared - ends[-2] <= BLOCK_MAX else ids[-2])
        repo.store.get_many([oid])
        reader = repo.backend.objects._readers[number]
        assert len(reader.decoded) == declared and reader.ended and reader.decompressor is None


def test_a_fresh_read_copies_each_objects_bytes_once_out_of_the_decoded_pack(tmp_path: Path) -> None:
    """Counted with tracemalloc on a newly opened repository: a read of every object of a
    sealed pack holds at most the pack's decoded bytes and one copy of each object's
    bytes, not a frame of each beside them (the store hands its raw frames' canonical
    bytes out, ``get_unframed_many``); what it hands out is what a read of the frames
    gives."""
    path = tmp_path / "r.snapvc"
    _run(path)
    number, ids, lengths, _ = _pack(path)
    declared = sum(lengths)
    wanted = [ObjectId(oid) for oid in ids]
    with snapvc.open(path) as repo:
        repo.backend.objects.has_many([])  # the directory is loaded before the count starts
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            got = repo.store.get_many(wanted)
            peak = tracemalloc.get_traced_memory()[1] - before
        finally:
            tracemalloc.stop()
        assert len(repo.backend.objects._readers[number].decoded) == declared
        frames = repo.backend.objects.get_many(wanted)
    handed = sum(map(len, got.values()))
    assert declared - handed == sum(len(frame) - len(got[oid]) for oid, frame in frames.items()) > 0
    assert all(decode_frame(oid, frames[oid]) == data for oid, data in got.items())
    # Decoded bytes and the objects' bytes, and what a dict of them and the pack's
    # directory take beside (~200 bytes an object): no frame of each (another `declared`).
    assert declared + handed <= peak <= declared + handed + 256 * len(ids) + BLOCK_MAX, (peak, declared, len(ids))


def test_the_index_of_a_files_ids_adds_no_object_for_the_cyclic_gc_to_track(tmp_path: Path) -> None:
    """Counted on a newly opened file: indexing every id (a checkout's lookups) keeps one
    int an id (its row and place in it, the offset found from the row when asked), no
    tuple an id that the cyclic garbage collector would walk at every collection."""
    path = tmp_path / "r.snapvc"
    state = _run(path)
    _, ids, _, _ = _pack(path)
    with snapvc.open(path) as repo:
        store = repo.backend.objects
        store.get_many([])  # the directory is loaded, nothing indexed yet
        assert store._where == {} and store._unindexed
        for block in store._blocks.values():
            assert block.ids  # (the ids as the rows give them, before the count)
        collecting = gc.isenabled()
        gc.disable()
        try:
            before = len(gc.get_objects())
            store.has_many([])
            tracked = len(gc.get_objects()) - before
        finally:
            if collecting:
                gc.enable()
        assert set(store._where) == set(ids) and len(ids) > 300
        assert tracked <= 4, tracked
        assert repo.checkout("main") == state
