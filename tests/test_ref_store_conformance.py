"""The behaviour every ``RefStore`` backend shares; a new backend is done when it passes here."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapvc.errors import InvalidRefNameError
from snapvc.ids import ObjectId
from snapvc.backends.memory.refs import MemoryRefStore
from snapvc.backends.sqlite.refs import SqliteRefStore
from snapvc.refs import ReflogEntry, RefStore
from snapvc.backends.sqlite.file import SqliteFile
from tests.fakes import TickingClock

ROOT = Path(__file__).resolve().parents[1]
MAIN = "refs/heads/main"


def oid(n: int) -> ObjectId:
    return ObjectId(n.to_bytes(32, "big"))


A, B, C = oid(1), oid(2), oid(3)




@pytest.fixture
def clock() -> TickingClock:
    return TickingClock()


@pytest.fixture(params=["memory", "sqlite", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path, clock: TickingClock) -> Iterator[RefStore]:
    if request.param == "memory":
        yield MemoryRefStore(clock=clock)
        return
    if request.param == "s3":  # a real S3 server: SeaweedFS on 127.0.0.1 (tests/conftest.py)
        from snapvc.backends.s3.refs import S3RefStore
        from snapvc.backends.s3.client import S3Client, S3Location

        client = S3Client(S3Location.parse(request.getfixturevalue("s3_url")))
        yield S3RefStore(client, clock=clock)
        client.close()
        return
    file = SqliteFile(tmp_path / "refs.snapvc")
    refs = SqliteRefStore(file, clock=clock)
    yield refs
    refs.close()
    file.close()


def test_is_a_ref_store(store: RefStore) -> None:
    assert isinstance(store, RefStore)


def test_create_get(store: RefStore) -> None:
    assert store.get(MAIN) is None
    assert store.compare_and_swap(MAIN, None, A, "create") is True
    value = store.get(MAIN)
    assert value == A and type(value) is ObjectId


def test_cas_wins_when_expected_matches(store: RefStore) -> None:
    store.compare_and_swap(MAIN, None, A, "create")
    assert store.compare_and_swap(MAIN, A, B, "move") is True
    assert store.get(MAIN) == B


def test_cas_loses_and_changes_nothing(store: RefStore) -> None:
    store.compare_and_swap(MAIN, None, A, "create")
    assert store.compare_and_swap(MAIN, B, C, "stale") is False  # wrong expected value
    assert store.compare_and_swap(MAIN, None, C, "create again") is False  # exists already
    assert store.compare_and_swap("refs/heads/other", A, C, "missing") is False  # does not exist
    assert store.get(MAIN) == A
    assert store.get("refs/heads/other") is None
    assert [e.reason for e in store.reflog(MAIN)] == ["create"]
    assert store.reflog("refs/heads/other") == []


def test_delete(store: RefStore) -> None:
    store.compare_and_swap(MAIN, None, A, "create")
    assert store.compare_and_swap(MAIN, B, None, "stale delete") is False
    assert store.get(MAIN) == A
    assert store.compare_and_swap(MAIN, A, None, "delete") is True
    assert store.get(MAIN) is None
    assert MAIN not in store.list()
    assert store.compare_and_swap(MAIN, None, C, "recreate") is True
    assert store.get(MAIN) == C


def test_swap_to_the_same_value_is_not_a_move(store: RefStore) -> None:
    assert store.compare_and_swap(MAIN, None, None, "nothing") is True
    store.compare_and_swap(MAIN, None, A, "create")
    assert store.compare_and_swap(MAIN, A, A, "same") is True
    assert store.get(MAIN) == A
    assert [e.reason for e in store.reflog(MAIN)] == ["create"]


def test_list_with_prefix_sorted(store: RefStore) -> None:
    for i, name in enumerate(["refs/heads/zeta", "refs/tags/v1", "refs/heads/alpha", "refs/heads/a/b", "refs/headsx"]):
        store.compare_and_swap(name, None, oid(i + 1), "create")
    store.set_symbolic("HEAD", "refs/heads/alpha")
    heads = store.list("refs/heads/")
    assert list(heads) == ["refs/heads/a/b", "refs/heads/alpha", "refs/heads/zeta"]
    assert heads["refs/heads/zeta"] == oid(1)
    assert list(store.list()) == sorted(
        ["refs/heads/zeta", "refs/tags/v1", "refs/heads/alpha", "refs/heads/a/b", "refs/headsx"]
    )
    assert store.list("refs/tags/") == {"refs/tags/v1": oid(2)}
    assert store.list("refs/remotes/") == {}
    assert "HEAD" not in store.list("")  # symbolic refs are not listed


def test_list_pages_after_a_name(store: RefStore) -> None:
    names = ["refs/heads/a/1", "refs/heads/a/2", "refs/heads/a/3", "refs/heads/b", "refs/tags/t"]
    for i, name in enumerate(names):
        store.compare_and_swap(name, None, oid(i + 1), "create")
    store.compare_and_swap("refs/heads/a/2", oid(2), None, "deleted")  # a deleted ref is no page entry
    assert store.list("refs/heads/", limit=2) == {"refs/heads/a/1": oid(1), "refs/heads/a/3": oid(3)}
    assert list(store.list("refs/heads/", after="refs/heads/a/1", limit=2)) == ["refs/heads/a/3", "refs/heads/b"]
    assert list(store.list("refs/heads/", after="refs/heads/a/3")) == ["refs/heads/b"]
    assert store.list("refs/heads/", after="refs/heads/b") == {}
    assert list(store.list("refs/heads/a/", after="refs/", limit=5)) == ["refs/heads/a/1", "refs/heads/a/3"]
    assert list(store.list("", after="refs/heads/b")) == ["refs/tags/t"]
    pages, after = [], None  # every name once, page by page
    while page := store.list("refs/", after=after, limit=1):
        pages += page
        after = list(page)[-1]
    assert pages == list(store.list("refs/"))


def test_reflog_order_and_content(store: RefStore, clock: TickingClock) -> None:
    start = clock.now
    store.compare_and_swap(MAIN, None, A, "create")
    store.compare_and_swap(MAIN, A, B, "commit: two")
    store.compare_and_swap(MAIN, B, C, "reset: back")
    store.compare_and_swap("refs/heads/other", None, A, "other")
    log = store.reflog(MAIN)
    assert log == [
        ReflogEntry(MAIN, B, C, start + 3, "reset: back"),
        ReflogEntry(MAIN, A, B, start + 2, "commit: two"),
        ReflogEntry(MAIN, None, A, start + 1, "create"),
    ]
    assert all(type(e.new) is ObjectId for e in log)
    assert store.reflog(MAIN, limit=2) == log[:2]
    assert store.reflog(MAIN, limit=0) == []
    assert store.reflog_names() == ["refs/heads/main", "refs/heads/other"]


def test_reflog_survives_deletion(store: RefStore, clock: TickingClock) -> None:
    store.compare_and_swap(MAIN, None, A, "create")
    store.compare_and_swap(MAIN, A, None, "delete")
    assert store.get(MAIN) is None
    log = store.reflog(MAIN)
    assert [(e.old, e.new, e.reason) for e in log] == [(A, None, "delete"), (None, A, "create")]
    assert store.reflog_names() == [MAIN]


def test_expire_reflog(store: RefStore, clock: TickingClock) -> None:
    start = clock.now
    store.compare_and_swap(MAIN, None, A, "one")  # start + 1
    store.compare_and_swap(MAIN, A, B, "two")  # start + 2
    store.compare_and_swap("refs/heads/x", None, A, "x")  # start + 3
    assert store.expire_reflog(start + 2, name=MAIN) == 1
    assert [e.reason for e in store.reflog(MAIN)] == ["two"]
    assert store.expire_reflog(start + 10) == 2
    assert store.reflog_names() == []
    assert store.get(MAIN) == B  # refs themselves are untouched


def test_injected_clock_times_the_reflog(store: RefStore, clock: TickingClock) -> None:
    clock.now = 42.0
    store.compare_and_swap(MAIN, None, A, "create")
    (entry,) = store.reflog(MAIN)
    assert entry.time == 43.0 and isinstance(entry.time, float)


def test_symbolic_refs(store: RefStore) -> None:
    assert store.get_symbolic("HEAD") is None
    store.set_symbolic("HEAD", MAIN)  # the target need not exist yet
    assert store.get_symbolic("HEAD") == MAIN
    assert store.get("HEAD") is None
    store.set_symbolic("HEAD", "refs/heads/other")
    assert store.get_symbolic("HEAD") == "refs/heads/other"
    assert store.delete_symbolic("HEAD") is True
    assert store.delete_symbolic("HEAD") is False
    assert store.get_symbolic("HEAD") is None


def test_direct_and_symbolic_replace_each_other(store: RefStore) -> None:
    store.set_symbolic("HEAD", MAIN)
    assert store.compare_and_swap("HEAD", None, A, "detach") is True
    assert store.get_symbolic("HEAD") is None
    assert store.get("HEAD") == A
    assert store.list("") == {"HEAD": A}
    store.set_symbolic("HEAD", MAIN)  # attach again: the direct HEAD goes, and its removal is logged
    assert store.get("HEAD") is None
    assert store.get_symbolic("HEAD") == MAIN
    assert [(e.old, e.new) for e in store.reflog("HEAD")] == [(A, None), (None, A)]


@pytest.mark.parametrize("name", ["refs/heads/a..b", "refs/heads/x.lock", "refs/heads/", "main", "refs/heads/a b", "", "@"])
def test_invalid_names_are_rejected(store: RefStore, name: str) -> None:
    with pytest.raises(InvalidRefNameError):
        store.compare_and_swap(name, None, A, "create")
    with pytest.raises(InvalidRefNameError):
        store.get(name)
    with pytest.raises(InvalidRefNameError):
        store.reflog(name)
    with pytest.raises(InvalidRefNameError):
        store.set_symbolic(name, MAIN)
    with pytest.raises(InvalidRefNameError):
        store.set_symbolic("HEAD", name)
    assert store.list("") == {}


def test_symbolic_target_must_be_under_refs(store: RefStore) -> None:
    with pytest.raises(InvalidRefNameError):
        store.set_symbolic("HEAD", "ORIG_HEAD")
    with pytest.raises(InvalidRefNameError):
        store.set_symbolic("refs/x", "refs/x")


def test_values_must_be_ids(store: RefStore) -> None:
    with pytest.raises(TypeError):
        store.compare_and_swap(MAIN, None, b"short", "create")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        store.compare_and_swap(MAIN, None, A.hex, "create")  # type: ignore[arg-type]
    assert store.compare_and_swap(MAIN, None, bytes(A), "plain bytes") is True  # type: ignore[arg-type]
    assert type(store.get(MAIN)) is ObjectId


@pytest.mark.slow
def test_threads_lose_no_update(store: RefStore) -> None:
    def work() -> None:
        done = 0
        while done < 50:
            current = store.get(MAIN)
            n = int.from_bytes(current, "big") if current is not None else 0
            if store.compare_and_swap(MAIN, current, oid(n + 1), f"increment to {n + 1}"):
                done += 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.get(MAIN) == oid(200)
    assert len(store.reflog(MAIN)) == 200


# --- several processes on one SQLite file ------------------------------------------

# A worker process: opens the ref store the first argument names (code of _OPEN), then,
# once told to go, adds 1 to a counter ref by compare-and-swap N times, retrying lost races.
_WORKER = textwrap.dedent(
    """
    import sys
    from snapvc.ids import ObjectId

    kind, where, times = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if kind == "sqlite":
        from snapvc.backends.sqlite.refs import SqliteRefStore
        from snapvc.backends.sqlite.file import SqliteFile
        refs = SqliteRefStore(SqliteFile(where))
    else:
        from snapvc.backends.s3.refs import S3RefStore
        from snapvc.backends.s3.client import S3Client, S3Location
        refs = S3RefStore(S3Client(S3Location.parse(where)))
    print("ready", flush=True)
    sys.stdin.readline()  # wait until every worker is ready, so they race
    done = lost = 0
    while done < times:
        current = refs.get("refs/heads/counter")
        n = int.from_bytes(current, "big") if current is not None else 0
        if refs.compare_and_swap("refs/heads/counter", current, ObjectId((n + 1).to_bytes(32, "big")), "increment"):
            done += 1
        else:
            lost += 1
    print("lost", lost, flush=True)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "workers", "times"), [("sqlite", 2, 50), ("s3", 3, 25)])
def test_processes_racing_on_one_ref_lose_no_update(kind: str, workers: int, times: int, tmp_path: Path,
                                                    request: pytest.FixtureRequest) -> None:
    if kind == "sqlite":
        where = str(tmp_path / "shared.snapvc")
        file = SqliteFile(where)
        SqliteRefStore(file)  # create the tables before the workers start
        file.close()
    else:  # a real S3 server: SeaweedFS on 127.0.0.1 (tests/conftest.py)
        where = request.getfixturevalue("s3_url")
    racers = [subprocess.Popen([sys.executable, "-c", _WORKER, kind, where, str(times)], cwd=ROOT,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(workers)]
    try:
        for r in racers:
            assert r.stdout is not None
            line = r.stdout.readline()
            assert line == "ready\n", line + (r.stderr.read() if r.stderr else "")
        for r in racers:
            assert r.stdin is not None
            r.stdin.write("go\n")
            r.stdin.flush()
        outputs = [r.communicate(timeout=120) for r in racers]
        assert all(r.returncode == 0 for r in racers), outputs
    finally:
        for r in racers:
            if r.poll() is None:
                r.kill()
    total = workers * times
    if kind == "sqlite":
        file = SqliteFile(where)
        refs: RefStore = SqliteRefStore(file)
    else:
        from snapvc.backends.s3.refs import S3RefStore
        from snapvc.backends.s3.client import S3Client, S3Location

        client = S3Client(S3Location.parse(where))
        refs = S3RefStore(client)
    try:
        assert refs.get("refs/heads/counter") == oid(total)
        log = refs.reflog("refs/heads/counter")
        # The reflog is one unbroken chain: 0 -> 1 -> ... -> total.
        assert [e.new for e in reversed(log)] == [oid(n) for n in range(1, total + 1)]
        assert [e.old for e in reversed(log)] == [None] + [oid(n) for n in range(1, total)]
    finally:
        if kind == "sqlite":
            file.close()
        else:
            client.close()
