"""Repositories on S3 (``snapvc.backends.s3``: ``backend``, ``packs``, ``objects``, ``refs``),
against a real SeaweedFS server (tests/conftest.py): packs per write, conditional ref
writes, the reflog in ref bodies, gc rewriting packs, and what a transaction means."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest

import snapvc
from snapvc.errors import FormatVersionError, RefConflictError, RefError, RepositoryError, RepositoryNotFoundError
from snapvc.ids import ObjectId
from snapvc.backends.s3.refs import REFLOG_TAIL, S3RefStore
from snapvc.backends.s3.client import S3Client, S3Location, parse_s3_url
from tests.fakes import TickingClock

MAIN = "refs/heads/main"


def oid(n: int) -> ObjectId:
    return ObjectId(n.to_bytes(32, "big"))


def packs(repo: snapvc.Repository) -> list[str]:
    return [key for key, _ in repo.backend.client.list("packs/")]


def test_locations_are_parsed_and_refused_with_their_text() -> None:
    assert parse_s3_url("s3://bucket/a/b/") == ("bucket", "a/b")
    assert parse_s3_url("s3://bucket") == ("bucket", "")
    with pytest.raises(RepositoryError, match="s3:/nobucket"):
        parse_s3_url("s3:/nobucket")
    with pytest.raises(TypeError, match="endpoint"):
        snapvc.open("memory://", endpoint="http://127.0.0.1:1")


def test_a_missing_repository_is_named(s3_url: str) -> None:
    with pytest.raises(RepositoryNotFoundError) as info:
        snapvc.open(s3_url, create=False)
    assert s3_url.removeprefix("s3://") in str(info.value)


def test_a_newer_format_is_refused(s3_url: str) -> None:
    snapvc.open(s3_url).close()
    client = S3Client(S3Location.parse(s3_url))
    client.put("snapvc.json", json.dumps({"snapvc": "repository", "format": 99}).encode())
    with pytest.raises(FormatVersionError, match="99"):
        snapvc.open(s3_url)
    client.close()


def test_a_repository_on_s3_works_as_any_other(s3_url: str) -> None:
    with snapvc.open(s3_url) as repo:
        c1 = repo.commit({"messages": ["hi"], "plan": "start"}, message="one", metadata={"agent": "a"})
        repo.branch("try-b")
        c2 = repo.commit({"messages": ["hi", "there"], "plan": "start"}, message="two")
        repo.commit({"messages": ["hi"], "plan": "web"}, branch="try-b", message="fork")
        assert repo.merge("try-b", into="main").ok
        repo.tag("v1", at=c2.id)
        repo.reset("main", to="main~1")
        repo.reset("main", to="main@{1}")
    with snapvc.open(s3_url, create=False) as again:  # a second client: nothing cached
        assert again.checkout("main") == {"messages": ["hi", "there"], "plan": "web"}
        assert [c.message for c in again.log("main")][-2:] == ["two", "one"]
        assert again.resolve("v1") == c2.id and again.resolve(c1.id.hex[:8]) == c1.id
        assert [c.id for c in again.log("main", where={"agent": "a"})] == [c1.id]
        assert [e.reason.split(":")[0] for e in again.reflog("main")][:2] == ["reset", "reset"]
        assert again.fsck().ok


def test_each_commit_is_one_pack_and_deferred_commits_share_one(s3_url: str) -> None:
    with snapvc.open(s3_url) as repo:
        state = {"doc": "x" * 50_000, "messages": [f"message {i} " * 40 for i in range(200)]}
        repo.commit(state)
        assert len(packs(repo)) == 1
        before = repo.backend.s3_stats.copy()
        state["messages"].append("one more")
        repo.commit(state, branch="main")
        spent = repo.backend.s3_stats - before
        assert len(packs(repo)) == 2
        assert spent.requests["PUT"] == 2  # the pack, then the ref
        with repo.deferred():
            for i in range(5):
                state["messages"].append(f"deferred {i}")
                repo.commit(state, branch="main")
        assert len(packs(repo)) == 3
    with snapvc.open(s3_url, create=False) as again:
        assert again.checkout("main") == state and len(list(again.log("main"))) == 7


def test_a_failed_transaction_sends_nothing(s3_url: str) -> None:
    with snapvc.open(s3_url) as repo:
        repo.commit({"a": 1})
        count = len(packs(repo))
        with pytest.raises(RefConflictError):
            repo.commit({"a": 2}, parents=())  # main exists: the commit expected no parent
        assert len(packs(repo)) == count
        with pytest.raises(ValueError):
            with repo.backend.transaction():
                repo.backend.objects.put_many([(oid(7), b"\x00\x01x")])
                raise ValueError("the write failed")
        assert len(packs(repo)) == count and not repo.backend.objects.has_many([oid(7)])


def test_a_commit_whose_pack_fails_to_go_up_leaves_nothing_behind(s3_url: str) -> None:
    with snapvc.open(s3_url) as repo:
        first = repo.commit({"a": 1})
        put = repo.backend.client.put

        def failing(key: str, data: bytes, **kw: object) -> str:
            if key.startswith("packs/"):
                raise RepositoryError(f"writing {key} failed: connection reset")
            return put(key, data, **kw)

        repo.backend.client.put = failing  # type: ignore[method-assign]
        with pytest.raises(RepositoryError):
            repo.commit({"a": 2})
        repo.backend.client.put = put  # type: ignore[method-assign]
        assert repo.resolve("main") == first.id
        third = repo.commit({"a": 3})
        assert [c.id for c in repo.log("main")] == [third.id, first.id]  # the failed commit stays out
    with snapvc.open(s3_url, create=False) as again:
        assert again.checkout("main") == {"a": 3} and again.fsck().ok


def test_objects_go_up_before_the_ref_that_names_them(s3_url: str) -> None:
    with snapvc.open(s3_url) as repo:
        order: list[str] = []
        put = repo.backend.client.put

        def recording(key: str, data: bytes, **kw: object) -> str:
            order.append(key.split("/")[0])
            return put(key, data, **kw)

        repo.backend.client.put = recording  # type: ignore[method-assign]
        repo.commit({"state": list(range(1000))})
        assert order == ["packs", "refs"]


def test_a_rewritten_ref_body_never_repeats_its_etag(s3_url: str) -> None:
    client = S3Client(S3Location.parse(s3_url))
    refs = S3RefStore(client)
    refs.compare_and_swap(MAIN, None, oid(1), "A")
    first = refs._read(MAIN)
    refs.compare_and_swap(MAIN, oid(1), oid(2), "B")
    refs.compare_and_swap(MAIN, oid(2), oid(1), "A again")  # A -> B -> A
    again = refs._read(MAIN)
    assert again.target == first.target and again.etag != first.etag
    assert again.generation == first.generation + 2
    # A writer still holding the first body loses, though the target is the same (no ABA).
    stale = S3RefStore(client)
    assert stale._write(MAIN, first, type(first)(first.generation, oid(3), None, [])) is False
    assert refs.get(MAIN) == oid(1)
    client.close()


def test_a_move_that_landed_but_was_sent_again_is_a_move_not_a_conflict(s3_url: str) -> None:
    client = S3Client(S3Location.parse(s3_url))
    refs = S3RefStore(client)
    refs.compare_and_swap(MAIN, None, oid(1), "A")
    put = client.put

    def answer_lost(key: str, data: bytes, **kw: object) -> str:
        put(key, data, **kw)  # the write lands; its answer is lost and the request sent again
        client.put = put  # type: ignore[method-assign]
        return put(key, data, **kw)  # ...which fails its own If-Match: 412

    client.put = answer_lost  # type: ignore[method-assign]
    assert refs.compare_and_swap(MAIN, oid(1), oid(2), "B")
    assert refs.get(MAIN) == oid(2)
    assert [e.reason for e in refs.reflog(MAIN)] == ["B", "A"]
    assert not refs.compare_and_swap(MAIN, oid(1), oid(3), "C")  # a real conflict is still one
    client.close()


def test_a_damaged_ref_body_is_named_with_its_key(s3_url: str) -> None:
    client = S3Client(S3Location.parse(s3_url))
    client.put("refs/refs%2Fheads%2Fmain", b'{"generation": "x"')
    with pytest.raises(RefError, match=f"'{MAIN}': damaged body at {client.where('refs/refs%2Fheads%2Fmain')}"):
        S3RefStore(client).get(MAIN)
    client.close()


def test_the_reflog_spills_into_segments_and_reads_whole(s3_url: str) -> None:
    client = S3Client(S3Location.parse(s3_url))
    refs = S3RefStore(client, clock=TickingClock())
    moves = REFLOG_TAIL * 4 + 7
    current = None
    for n in range(1, moves + 1):
        assert refs.compare_and_swap(MAIN, current, oid(n), f"move {n}")
        current = oid(n)
    log = refs.reflog(MAIN)
    assert [e.reason for e in log] == [f"move {n}" for n in range(moves, 0, -1)]
    assert [e.new for e in reversed(log)] == [oid(n) for n in range(1, moves + 1)]
    assert len(client.list("reflog/refs%2Fheads%2Fmain/")) >= 2
    assert len(refs._read(MAIN).reflog) <= REFLOG_TAIL
    assert refs.reflog(MAIN, limit=3) == log[:3]
    cutoff = log[99].time  # keep the newest 100 entries (the oldest are in segments)
    assert refs.expire_reflog(cutoff) == moves - 100
    assert [e.reason for e in refs.reflog(MAIN)] == [f"move {n}" for n in range(moves, moves - 100, -1)]
    segment = client.list("reflog/refs%2Fheads%2Fmain/")[0][0]
    client.put(segment, b"[[1, null")
    with pytest.raises(RefError, match=f"damaged reflog segment .*{segment}"):
        refs.reflog(MAIN)
    client.close()


def test_two_writers_of_one_branch_one_wins_the_other_is_told(s3_url: str) -> None:
    snapvc.open(s3_url).close()
    a, b = snapvc.open(s3_url), snapvc.open(s3_url)
    base = a.commit({"n": 0})
    results: dict[str, object] = {}
    barrier = threading.Barrier(2)

    def write(repo: snapvc.Repository, name: str) -> None:
        barrier.wait()
        try:
            results[name] = repo.commit({"n": name}, parents=(base.id,))
        except RefConflictError as exc:
            results[name] = exc

    threads = [threading.Thread(target=write, args=(r, n)) for r, n in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [n for n, r in results.items() if isinstance(r, snapvc.Commit)]
    lost = [r for r in results.values() if isinstance(r, RefConflictError)]
    assert len(won) == 1 and len(lost) == 1 and lost[0].ref == MAIN
    assert a.checkout("main") == {"n": won[0]}
    a.close()
    b.close()


def test_gc_rewrites_the_packs_that_hold_garbage(s3_url: str) -> None:
    with snapvc.open(s3_url) as repo:
        repo.commit({"keep": "k" * 5000})
        repo.branch("doomed")
        repo.commit({"keep": "k" * 5000, "gone": "g" * 9000}, branch="doomed")
        repo.commit({"keep": "k" * 5000, "more": "m" * 3000})
        repo.delete_branch("doomed")
        report = repo.gc(grace=0, reflog_expiry=0, force=True)  # no other writer
        assert report.removed_objects and len(report.removed_commits) == 1
        assert repo.fsck().ok
    with snapvc.open(s3_url, create=False) as again:
        assert again.checkout("main") == {"keep": "k" * 5000, "more": "m" * 3000}
        assert again.commits.count() == 2 and again.fsck().ok


def test_a_writer_does_not_trust_objects_another_clients_gc_removed(s3_url: str) -> None:
    gone = {"doc": "d" * 9000, "n": 1}  # an object of its own besides the root
    with snapvc.open(s3_url) as writer:
        writer.commit({"n": 0})
        writer.commit(gone, branch="doomed")
        writer.delete_branch("doomed")
        with snapvc.open(s3_url) as cleaner:
            assert cleaner.gc(grace=0, reflog_expiry=0, force=True).removed_objects
        writer.backend._epoch_read = None  # as a second later: the epoch is read again
        writer.commit(gone)  # the same objects again, on main
    with snapvc.open(s3_url, create=False) as reader:
        assert reader.checkout("main") == gone and reader.fsck().ok


def test_writers_train_dictionaries_under_numbers_of_their_own(s3_url: str) -> None:
    snapvc.open(s3_url).close()
    from snapvc.backends.s3.objects import S3ObjectStore
    from snapvc.backends.s3.packs import Packs

    stores = [S3ObjectStore(Packs(S3Client(S3Location.parse(s3_url)))) for _ in range(2)]
    numbers = [store.put_dictionary(f"dictionary {i}".encode()) for i, store in enumerate(stores)]
    assert sorted(numbers) == [1, 2]
    assert stores[0].dictionaries() == {1: b"dictionary 0", 2: b"dictionary 1"}
    for store in stores:
        store.client.close()


def test_a_deferred_block_whose_branch_moved_meanwhile_is_told_at_its_end(s3_url: str) -> None:
    repo, other = snapvc.open(s3_url), snapvc.open(s3_url)
    repo.commit({"n": 0})
    with pytest.raises(RefConflictError) as info:
        with repo.deferred():
            repo.commit({"n": 1})
            repo.commit({"n": 2})
            assert repo.checkout("main") == {"n": 2}  # the block sees its own moves
            other.commit({"n": "other"})  # another writer moves main before the block ends
    assert info.value.ref == MAIN
    assert repo.checkout("main") == {"n": "other"} and other.fsck().ok
    repo.close()
    other.close()


def test_a_new_client_reads_one_consolidated_index_instead_of_every_pack_header(
        s3_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from snapvc.backends.s3 import packs as s3_packs

    monkeypatch.setattr(s3_packs, "INDEX_EVERY", 8)
    with snapvc.open(s3_url) as repo:
        state: dict[str, object] = {"log": []}
        for n in range(20):
            state = {"log": [*state["log"], f"entry {n} " * 30], "n": n}  # type: ignore[misc]
            repo.commit(state, message=f"commit {n}")
        assert len(packs(repo)) == 20
        assert [key for key, _ in repo.backend.client.list("index/")]
    with snapvc.open(s3_url, create=False) as fresh:
        before = fresh.backend.s3_stats.copy()
        assert [c.message for c in fresh.log("main")] == [f"commit {n}" for n in range(19, -1, -1)]
        reads = (fresh.backend.s3_stats - before).requests.get("GET", 0)
        assert reads <= 1 + 1 + 7, reads  # the ref, the index, the headers of the packs after it: not 20 headers
        assert fresh.checkout("main") == state
        # gc rewrites packs the index names: a cold client skips them and reads the new ones.
        fresh.branch("gone")
        fresh.commit({"gone": "x" * 4000}, branch="gone")
        fresh.delete_branch("gone")
        fresh.gc(grace=0, reflog_expiry=0, force=True)
    with snapvc.open(s3_url, create=False) as again:
        assert again.checkout("main") == state and len(list(again.log("main"))) == 20 and again.fsck().ok


def test_repack_merges_small_packs_and_keeps_every_object(s3_url: str) -> None:
    with snapvc.open(s3_url) as repo:
        state: dict[str, object] = {"log": []}
        for n in range(12):
            state = {"log": [*state["log"], f"entry {n} " * 40], "n": n}  # type: ignore[misc]
            repo.commit(state, message=f"commit {n}")
        repo.backend.objects.put_many([(c.tree, b"") for c in list(repo.log("main"))[:1]])  # a touch entry too
        ids = set(repo.backend.objects.iter_ids())
        ages = repo.backend.objects.mtimes(ids)
        assert repo.backend.repack() == 13
        assert len(packs(repo)) == 1
        assert set(repo.backend.objects.iter_ids()) == ids and repo.backend.objects.mtimes(ids) == ages
    with snapvc.open(s3_url, create=False) as fresh:
        before = fresh.backend.s3_stats.copy()
        assert fresh.checkout("main") == state
        # The rev's ref lookups and one pack, read whole with its header: not a read per pack.
        assert (fresh.backend.s3_stats - before).requests["GET"] <= 8
        assert len(list(fresh.log("main"))) == 12 and fresh.fsck().ok


def test_moves_of_a_transaction_land_on_a_body_changed_by_no_move(s3_url: str) -> None:
    client = S3Client(S3Location.parse(s3_url))
    other = S3RefStore(client)
    other.compare_and_swap(MAIN, None, oid(1), "create")
    inside = S3RefStore(client, buffering=lambda: True)
    assert inside.compare_and_swap(MAIN, oid(1), oid(2), "in the block")
    assert inside.compare_and_swap(MAIN, oid(2), oid(3), "in the block again")
    assert other.get(MAIN) == oid(1)  # nothing written before the block ends
    assert other.expire_reflog(float("inf")) == 1  # the body changes; the ref does not move
    inside.write_pending()
    assert other.get(MAIN) == oid(3)
    assert [(e.old, e.new, e.reason) for e in other.reflog(MAIN)] == [
        (oid(2), oid(3), "in the block again"), (oid(1), oid(2), "in the block")]
    assert inside.compare_and_swap(MAIN, oid(3), oid(4), "moved again")
    other.compare_and_swap(MAIN, oid(3), oid(5), "a real move meanwhile")
    with pytest.raises(RefConflictError):
        inside.write_pending()
    assert other.get(MAIN) == oid(5)
    client.close()


def test_a_cache_folder_serves_the_next_process(s3_url: str, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with snapvc.open(s3_url, cache_dir=cache) as repo:
        state: dict[str, object] = {"log": []}
        for n in range(10):
            state = {"log": [*state["log"], f"entry {n} " * 40], "n": n}  # type: ignore[misc]
            repo.commit(state, message=f"commit {n}")
    def pack_reads(repo: snapvc.Repository) -> list[str]:
        """Record the keys of packs and indexes this client reads from the server."""
        client, read = repo.backend.client, []
        for method in ("get", "get_range", "get_ranges"):
            def reading(key: str, *args: object, _inner: object = getattr(client, method)) -> object:
                if key.startswith(("packs/", "index/")):
                    read.append(key)
                return _inner(key, *args)  # type: ignore[operator]
            setattr(client, method, reading)
        return read

    with snapvc.open(s3_url, create=False, cache_dir=cache) as warm:
        read = pack_reads(warm)
        assert warm.checkout("main") == state and len(list(warm.log("main"))) == 10
        assert read == []  # headers and frames came from the disk; only refs from the server
    with snapvc.open(s3_url, create=False) as cold:
        read = pack_reads(cold)
        assert cold.checkout("main") == state
        assert len(read) >= 10
    (path,) = cache.glob("*.cache")
    damaged = sqlite3.connect(path)
    damaged.execute("UPDATE heads SET head = x'00'")
    damaged.commit()
    damaged.close()
    with snapvc.open(s3_url, create=False, cache_dir=cache) as again:
        read = pack_reads(again)
        assert again.checkout("main") == state and len(list(again.log("main"))) == 10
        assert read  # the headers damaged on disk came from the server again
