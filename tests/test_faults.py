"""Storage faults injected with ``FaultyStore``: a failed n-th write, a torn write, a full
disk, a flipped bit, a truncated read, a lost object. Every operation either completes
or raises a clear error (the storage's ``OSError``, or a ``SnapvcError`` naming the
object), and everything committed before stays readable."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest

import snapvc
from snapvc.backends.open import open_backend
from snapvc.errors import CorruptObjectError, ObjectNotFoundError
from snapvc.ids import hash_bytes
from snapvc.api import Repository
from snapvc.store.codec import open_object_store
from snapvc.store.faulty import FaultyStore

SEED = int(os.environ.get("SNAPVC_FAULT_SEED", "20261123"))
OPERATIONS = 800


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        self.now += 7.0
        return self.now


def _faulty_repo(location: str, clock: Clock, **options: object) -> tuple[Repository, FaultyStore]:
    backend = open_backend(location, clock=clock, **options)
    faulty = FaultyStore(backend.objects, seed=SEED)
    backend.objects = faulty
    return Repository(backend, clock=clock), faulty


def _check_all(repo: Repository, expected: dict[bytes, dict]) -> None:
    fresh = Repository(repo.backend, clock=repo.clock)  # nothing answered from caches
    for oid, state in expected.items():
        assert fresh.checkout(snapvc.ObjectId(oid)) == state


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "sqlite-format-2", "memory"])
def test_random_operations_under_write_faults_lose_nothing_committed(tmp_path: Path, kind: str) -> None:
    rng = random.Random(SEED)
    clock = Clock()
    # A format 3 file writes packs; a format 2 file one frame a row, with deltas and a dictionary.
    options = {"format": 2} if kind == "sqlite-format-2" else {}
    repo, faulty = _faulty_repo(str(tmp_path / "faults.snapvc") if kind != "memory" else "memory://", clock, **options)
    expected: dict[bytes, dict] = {}
    state: dict = {"messages": [], "doc": "draft " * 800, "n": 0}
    repo.commit(state, message="start")
    expected[repo.resolve("main")] = {**state, "messages": []}
    outcomes = {"completed": 0, "raised": 0}
    for step in range(OPERATIONS):
        op = rng.choice(["commit", "commit", "commit", "branch", "reset", "merge", "gc"])
        fault = rng.random()
        if fault < 0.4:
            faulty.fail_write(1 if op != "gc" else rng.randint(1, 2), torn=rng.random() < 0.5)
        elif fault < 0.55:
            faulty.disk_full(rng.randint(0, 4000))
        branches = list(repo.branches())
        try:
            if op == "commit":
                branch = rng.choice(branches)
                new = repo.checkout(branch)
                new["n"] = step
                new["messages"].append({"step": step, "text": f"message {step} " * rng.randint(1, 300)})
                if rng.random() < 0.3:
                    new["doc"] = new["doc"][:rng.randint(0, 4000)] + f" edit {step} " + new["doc"][4000:]
                c = repo.commit(new, branch=branch, message=f"step {step}")
                expected[c.id] = new
            elif op == "branch":
                repo.branch(f"b{step}", at=rng.choice(branches))
            elif op == "reset" and len(expected) > 1:
                repo.reset(rng.choice(branches), to=snapvc.ObjectId(rng.choice(list(expected))))
            elif op == "merge" and len(branches) > 1:
                a, b = rng.sample(branches, 2)
                result = repo.merge(a, into=b, resolve="theirs")
                if result.commit is not None:
                    expected[result.commit.id] = repo.checkout(result.commit.id)
            elif op == "gc":
                repo.gc(grace=0, reflog_expiry=3600)
                expected = {oid: s for oid, s in expected.items() if repo.commits.get(snapvc.ObjectId(oid))}
            outcomes["completed"] += 1
        except OSError as exc:
            assert exc.errno in (errno.EIO, errno.ENOSPC) and "injected" in str(exc) + str(exc.strerror)
            outcomes["raised"] += 1
        finally:
            faulty.heal()
        if step % 25 == 0:
            _check_all(repo, expected)
    _check_all(repo, expected)
    assert repo.fsck().ok
    # The run trained a compression dictionary, inside a commit that faults may roll back
    # (a store that compresses itself keeps none).
    assert bool(repo.backend.objects.capabilities.dictionaries) is (kind != "sqlite")
    if repo.backend.objects.capabilities.dictionaries:
        assert repo.backend.objects.dictionaries()
    print(f"{kind}: {OPERATIONS} operations, {faulty.injected} write faults injected, {outcomes}")
    assert faulty.injected >= 150 and outcomes["raised"] == faulty.injected and outcomes["completed"] >= 400
    repo.close()


def _sample_repo(path: Path) -> list[bytes]:
    with snapvc.open(path) as repo:
        state: dict = {"messages": [], "doc": "words and more words " * 2000}
        for i in range(30):
            state["messages"].append({"i": i, "text": f"reply {i} " * 80})
            state["doc"] = state["doc"].replace("more", f"more{i}", 1)
            repo.commit(state)
        return list(repo.backend.objects.iter_ids())


@pytest.mark.parametrize("fault", ["flip", "truncate", "hide"])
def test_a_damaged_read_is_an_error_naming_the_object_or_the_right_bytes(tmp_path: Path, fault: str) -> None:
    path = tmp_path / "reads.snapvc"
    ids = _sample_repo(path)
    backend = open_backend(str(path))
    faulty = FaultyStore(backend.objects, seed=SEED)
    reads = 0
    errors = 0
    for oid in ids:
        for _ in range(5):
            getattr(faulty, {"flip": "flip_bits", "truncate": "truncate_reads", "hide": "hide"}[fault])(oid)
            store = open_object_store(faulty)  # fresh: no cached bytes or bases
            reads += 1
            try:
                data = store.get(oid)
            except (CorruptObjectError, ObjectNotFoundError) as exc:
                assert exc.object_id == oid  # names the damaged object
                errors += 1
            else:
                assert hash_bytes(data) == oid  # a bit that changed nothing read (a frame's depth byte)
            faulty.heal()
    print(f"{fault}: {reads} damaged reads, {errors} errors, {faulty.injected} faults injected")
    assert errors >= reads * 0.9
    backend.close()


def test_fsck_under_read_faults_reports_instead_of_crashing(tmp_path: Path) -> None:
    path = tmp_path / "fsck.snapvc"
    ids = _sample_repo(path)
    rng = random.Random(SEED)
    victims = rng.sample(ids, 12)
    backend = open_backend(str(path))
    faulty = FaultyStore(backend.objects, seed=SEED)
    backend.objects = faulty
    repo = Repository(backend)
    faulty.flip_bits(*victims[:6])
    faulty.truncate_reads(*victims[6:])
    report = repo.fsck()
    named = {p.object_id for p in report.problems}
    assert not report.ok and named & set(victims)
    assert all(p.kind in ("corrupt", "missing") for p in report.problems)
    faulty.heal()
    assert repo.fsck().ok  # the damage was on the way, not on disk
    repo.close()


def test_a_failed_commit_leaves_no_trace_and_the_next_one_works(tmp_path: Path) -> None:
    clock = Clock()
    repo, faulty = _faulty_repo(str(tmp_path / "one.snapvc"), clock)
    first = repo.commit({"doc": "a" * 9000})
    objects = repo.backend.objects.sizes().objects
    faulty.fail_write(1, torn=True)
    with pytest.raises(OSError, match="injected write fault"):
        repo.commit({"doc": "b" * 9000, "more": "c" * 9000})
    assert repo.resolve("main") == first.id and repo.backend.objects.sizes().objects == objects
    faulty.disk_full(10)
    with pytest.raises(OSError) as raised:
        repo.commit({"doc": "d" * 9000})
    assert raised.value.errno == errno.ENOSPC
    faulty.heal()
    second = repo.commit({"doc": "b" * 9000, "more": "c" * 9000})
    assert repo.checkout("main") == {"doc": "b" * 9000, "more": "c" * 9000} and second.parents == (first.id,)
    assert repo.fsck().ok
    repo.close()


def test_a_dictionary_trained_in_a_failed_commit_is_not_used_after_it(tmp_path: Path) -> None:
    """A format 2 file's first large commit trains the zstd dictionary its frames are
    compressed with, and stores it in the commit's transaction. If the commit fails, the
    dictionary was rolled back with it: the next commit must not compress with it (its
    frames would name a dictionary that is not stored), nor take the failed commit's
    objects for stored ones."""
    rnd = random.Random(SEED)
    vocabulary = ["agent", "tool", "search", "result", "plan", "source", "claim", "evidence", "draft", "the", "of"]
    state = {"library": {f"doc-{i}": " ".join(rnd.choice(vocabulary) for _ in range(800)) for i in range(80)}}
    repo, faulty = _faulty_repo(str(tmp_path / "two.snapvc"), Clock(), format=2)
    faulty.fail_write(1)
    with pytest.raises(OSError, match="injected write fault"):
        repo.commit(state)
    assert repo.backend.objects.dictionaries() == {}  # rolled back with the commit
    state["library"]["doc-0"] += " and one more word"
    made = repo.commit(state)
    repo.close()
    with snapvc.open(tmp_path / "two.snapvc", create=False) as fresh:
        assert fresh.checkout(made.id) == state
        assert fresh.fsck().ok


def test_a_write_fault_during_gc_deletes_nothing(tmp_path: Path) -> None:
    clock = Clock()
    repo, faulty = _faulty_repo(str(tmp_path / "gc.snapvc"), clock)
    repo.commit({"keep": "k" * 5000})
    repo.commit({"drop": "d" * 5000})
    repo.reset("main", to="main~1")
    clock.now += 40 * 86400
    before = repo.backend.objects.sizes()
    faulty.fail_write(1)
    with pytest.raises(OSError):
        repo.gc(grace=0, reflog_expiry=0)
    assert repo.backend.objects.sizes() == before and len(repo.reflog("main")) == 3
    faulty.heal()
    assert repo.gc(grace=0, reflog_expiry=0).removed_objects
    assert repo.checkout("main") == {"keep": "k" * 5000} and repo.fsck().ok
    repo.close()


def test_a_full_sqlite_file_is_a_clear_error_and_the_repository_stays_usable(tmp_path: Path) -> None:
    """SQLite's own "disk full" (a page limit): it rolls the transaction back itself, and
    a second ROLLBACK used to raise "cannot rollback - no transaction is active" instead."""
    path = tmp_path / "full.snapvc"
    repo = snapvc.open(path)
    repo.commit({"n": 0})
    repo.backend.file.conn.execute("PRAGMA max_page_count = 40")
    committed = 0
    with pytest.raises(snapvc.RepositoryError, match="database or disk is full") as raised:
        for n in range(1, 100):
            repo.commit({"n": n, "doc": os.urandom(20_000).hex()})
            committed = n
    assert str(path) in str(raised.value) and "rolled back" in str(raised.value)
    assert repo.checkout("main")["n"] == committed and repo.fsck().ok
    repo.backend.file.conn.execute("PRAGMA max_page_count = 1000000")
    repo.commit({"n": "after", "doc": "x" * 30_000})
    assert repo.checkout("main")["n"] == "after" and repo.fsck().ok
    repo.close()
