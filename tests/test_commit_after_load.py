"""The first commit after a load: ``repo.checkout``, ``repo.state()`` or a new process.

What a checkout hands out is taught to the encoder (``snapvc.encoding.seed``), so the
next commit encodes what changed, not the state again; and since it is checked as the
encoder's own work is, by identity, a value changed in place after the load is stored.
Work is counted in containers encoded, never timed."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import snapvc
from snapvc.backends.open import open_backend
from snapvc.errors import RefConflictError
from snapvc.store.faulty import FaultyStore
from tests.test_chunking import fresh_tree
from tests.test_commit_shapes import Message, Note, Point, count_encoded, edit, places, value


def history(n: int) -> dict[str, Any]:
    return {
        "messages": [{"role": "user" if i % 2 else "assistant", "content": f"message {i} " * 30,
                      "tool_calls": [{"id": f"call_{i}", "args": {"q": i}}]} for i in range(n)],
        "models": [Message(role="tool", content=f"result {i} " * 10, meta={"i": [i]}) for i in range(n // 4)],
        "documents": {f"doc-{k:03d}": f"document {k} " * 400 for k in range(60)},
        "notes": {f"note-{k:02d}": f"short {k}" for k in range(30)},
        "shape": (1, [2, 3], {"t": "tuple"}),
        "counters": {"step": n},
    }


def step(state: dict[str, Any], i: int) -> None:
    state["messages"].append({"role": "assistant", "content": f"new {i}", "tool_calls": []})
    state["documents"][f"doc-{i % 60:03d}"] = f"rewritten {i} " * 400
    state["notes"][f"note-{i % 30:02d}"] = f"changed {i}"
    state["counters"]["step"] = i


@pytest.mark.parametrize("size", [400, 1600])
def test_the_first_commit_after_reopening_encodes_the_change(tmp_path: Path, size: int,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "run.snapvc"
    with snapvc.open(path) as repo:
        repo.commit(history(size))
    calls = count_encoded(monkeypatch)
    with snapvc.open(path) as repo:  # a new process sees a repository opened afresh
        state = repo.checkout("main")
        step(state, 1)
        calls[0] = 0
        c = repo.commit(state)
        # the root, the messages' new element, the changed maps, the counters: not the history
        assert calls[0] <= 8, calls[0]
        assert repo.get_commit(c.id).tree == fresh_tree(state)
        working = repo.state("main")
        working.extend("messages", [{"role": "user", "content": "through the working copy"}])
        calls[0] = 0
        checkpoint = working.snapshot()
        assert calls[0] <= 8, calls[0]
        assert repo.get_commit(snapvc.ObjectId.from_hex(checkpoint.id)).tree == fresh_tree(dict(working))


@pytest.mark.slow
def test_values_changed_in_place_after_a_checkout_are_stored(tmp_path: Path) -> None:
    for seed in range(6):
        rnd = random.Random(seed)
        path = tmp_path / f"r{seed}.snapvc"
        with snapvc.open(path) as repo:
            start: dict[str, Any] = {
                "messages": [value(rnd, 1) for _ in range(120)],
                "models": [Message(role="assistant", content=f"m{i}", meta={"i": [i]}) for i in range(70)],
                "notes": {f"n{i}": Note(f"t{i}", ["a"]) for i in range(20)},
                "points": [Point(i, ["p"]) for i in range(20)],
                "big": {f"k{i:04d}": {"v": [i], "s": "x" * (i % 3000)} for i in range(300)},
                "other": value(rnd, 0),
            }
            repo.commit(start)
        with snapvc.open(path) as repo:
            state = repo.checkout("main")
            for commit_no in range(6):
                for _ in range(rnd.choice([1, 3])):
                    edit(rnd, rnd.choice(places(state))[1])
                c = repo.commit(state)
                assert repo.get_commit(c.id).tree == fresh_tree(state), (seed, commit_no)
            assert repo.checkout("main") == state


def test_a_state_loaded_then_changed_in_place_through_its_views(tmp_path: Path) -> None:
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo:
        repo.commit(history(300))
    with snapvc.open(path) as repo:
        working = repo.state("main")
        messages = working.get("messages")  # handed out: watched
        messages[17]["tool_calls"][0]["args"]["q"] = "edited in place"
        working.get("models")[3].meta["i"].append("in place")
        checkpoint = working.snapshot()
        back = repo.checkout(checkpoint.id)
        assert back["messages"][17]["tool_calls"][0]["args"]["q"] == "edited in place"
        assert back["models"][3].meta == {"i": [3, "in place"]}
        assert repo.get_commit(snapvc.ObjectId.from_hex(checkpoint.id)).tree == fresh_tree(back)


def test_a_checkout_of_an_old_commit_then_a_commit_on_another_branch(tmp_path: Path) -> None:
    repo = snapvc.open(tmp_path / "r.snapvc")
    first = repo.commit(history(200))
    state = repo.checkout("main")
    step(state, 1)
    repo.commit(state)
    old = repo.checkout(first.id)  # taught to HEAD's branch, main
    old["messages"][0]["content"] = "changed in the old state"
    c = repo.commit(old, branch="side")
    assert repo.get_commit(c.id).tree == fresh_tree(old)
    step(old, 2)
    c = repo.commit(old)
    assert repo.get_commit(c.id).tree == fresh_tree(old)
    assert repo.checkout("main") == old


def test_loads_replace_what_they_taught_the_encoder(tmp_path: Path) -> None:
    """Reading many states does not keep them all alive: the repository records what the
    last load handed out, and teaches it to the encoder at the next commit, not before."""
    repo = snapvc.open(tmp_path / "r.snapvc")
    state = history(100)
    for i in range(10):
        step(state, i)
        repo.commit(state)
    cache = repo._encode_caches["refs/heads/main"]
    for rev in range(10):
        loaded = repo.checkout(f"main~{rev}")
        assert cache.loaded == {}  # nothing taught at a checkout
        assert list(repo._loads) == ["refs/heads/main"] and repo._loads["refs/heads/main"][1].value is loaded
    latest = repo.checkout("main")
    step(latest, 99)
    repo.commit(latest)
    assert cache.loaded == {} and repo._loads == {}


def test_a_container_too_large_to_teach_is_encoded_anew(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from snapvc.encoding import seed

    monkeypatch.setattr(seed, "SEED_MAX_ENTRIES", 150)
    repo = snapvc.open(tmp_path / "r.snapvc")
    repo.commit(history(400))
    state = repo.checkout("main")
    taught = []
    seed_as_taught = seed.EncodeCache.seed

    def seeding(cache: seed.EncodeCache, obj: Any, *args: Any) -> None:
        taught.append(id(obj))
        seed_as_taught(cache, obj, *args)

    monkeypatch.setattr(seed.EncodeCache, "seed", seeding)
    step(state, 1)
    c = repo.commit(state)
    assert id(state["messages"]) not in taught and id(state["documents"]) in taught
    assert repo.get_commit(c.id).tree == fresh_tree(state)


class _RaceOnce:
    """A repository clock that, when armed, first moves main through another handle on the
    same file: the commit reading it (after encoding, before storing) then loses the race
    for the ref, as beside a writer in another process."""

    def __init__(self, other: snapvc.Repository) -> None:
        self.other = other
        self.armed = False

    def __call__(self) -> float:
        if self.armed:
            self.armed = False
            self.other.commit({"other": "moved main meanwhile"}, branch="main")
        return 1_700_000_000.0


FailingWriter = tuple[snapvc.Repository, Callable[[str, dict[str, Any]], None]]


@pytest.fixture
def failing_writer(tmp_path: Path) -> Iterator[FailingWriter]:
    """A repository at tmp_path/r.snapvc whose commits can fail, and ``fail(failure, state)``,
    which makes a commit of ``state`` fail after encoding it: it loses the race for main
    to another writer ("lost race"), or its write of objects fails ("failed write")."""
    path = tmp_path / "r.snapvc"
    other = snapvc.open(path)
    race = _RaceOnce(other)
    backend = open_backend(str(path))
    faulty = FaultyStore(backend.objects)
    backend.objects = faulty
    repo = snapvc.Repository(backend, clock=race)

    def fail(failure: str, state: dict[str, Any]) -> None:
        if failure == "lost race":
            race.armed = True
            with pytest.raises(RefConflictError):
                repo.commit(state, parents=(repo.resolve("main"),))
        else:
            faulty.fail_write(1)
            with pytest.raises(OSError, match="injected write fault"):
                repo.commit(state)

    yield repo, fail
    repo.close()
    other.close()


def _described(repo: snapvc.Repository) -> dict[str, Any]:
    """What main's encode cache describes: for each entry kept for the next commit, the
    object it describes and what it records of it (by identity), and what each path held.
    (Not which encoder run last confirmed an entry: each run has a number of its own.)"""
    cache = repo._encode_caches["refs/heads/main"]
    entries = {}
    for held in (cache.old, cache.loaded):
        for key, e in held.items():
            entries[key] = (id(e), id(e.obj), e.enc, id(e.tree), list(e.entries), list(map(id, e.vals)),
                            [(k, id(kid), enc) for k, kid, enc in e.kids], e.deep.sizes() if e.deep else None)
    return {"entries": entries, "new": dict(cache.new), "paths": dict(cache.old_paths),
            "chunks": dict(cache.old_chunks), "at": {path: id(e) for path, e in cache.old_at.items()}}


def _change(state: dict[str, Any], how: str, i: int) -> None:
    """Change ``state`` in one of the ways the encoder remembers cheaply: appending to a
    list (its entry grows in place), setting a key of a large dict (its entry is patched
    in place), or rebuilding a large list at the same path (the new list takes over the
    old one's entry). What is added is large enough to be stored as objects of its own."""
    if how == "append":
        state["messages"].append({"role": "assistant", "content": f"appended {i} " * 800, "tool_calls": []})
    elif how == "dict in place":
        state["documents"][f"doc-{i % 60:03d}"] = f"rewritten {i} " * 400
    else:
        state["messages"] = [*state["messages"], {"role": "user", "content": f"rebuilt {i} " * 800}]
    state["counters"]["step"] = i


@pytest.mark.parametrize("how", ["append", "dict in place", "rebuilt"])
@pytest.mark.parametrize("failure", ["lost race", "failed write"])
def test_a_failed_commit_leaves_the_encoder_as_it_was(failing_writer: FailingWriter, how: str, failure: str) -> None:
    """A commit that fails after encoding (its ref moved meanwhile, or its write failed)
    stored nothing: what it encoded is forgotten and what it changed in the encoder's
    entries is undone, so the next commit of the same objects stores all it names."""
    repo, fail = failing_writer
    state = history(80)
    repo.commit(state)
    for i in range(3):  # the encoder now knows these very objects
        _change(state, how, i)
        repo.commit(state)
    _change(state, how, 10)
    before = _described(repo)
    fail(failure, state)
    assert _described(repo) == before
    _change(state, how, 11)  # the failed change stays, another one joins it
    c = repo.commit(state)
    assert repo.get_commit(c.id).tree == fresh_tree(state)
    with snapvc.open(repo.location) as fresh:  # nothing answered from this writer's caches
        assert fresh.checkout(c.id) == state
        assert fresh.fsck().ok


@pytest.mark.parametrize("failure", ["lost race", "failed write"])
def test_what_a_failed_commit_stored_at_its_paths_is_forgotten(failing_writer: FailingWriter, failure: str) -> None:
    """The encoder also remembers what each path held (a long string's chunks, a node or
    tree, a large list to take over), for a new value at the same path. A failed commit's
    are forgotten: a later commit that does not touch those paths keeps the last stored
    ones, and one that puts the failed values there again stores them."""
    repo, fail = failing_writer
    state = history(40)
    document = state["documents"]["doc-000"] = "the first draft " * 2000  # chunked
    repo.commit(state)
    # The failed commit: a new draft, a large list of large parts at a new path, and a
    # long list (a tree of nodes) of small entries at another.
    extra = [{"part": i, "text": f"part {i} " * 800} for i in range(20)]
    state["documents"]["doc-000"] = "the second draft " * 2000
    state["extra"] = list(extra)
    state["log"] = [{"entry": i, "note": "the failed attempt"} for i in range(300)]
    fail(failure, state)
    # A commit that leaves those paths as they were stored, then one that puts the
    # failed values there again, as new objects.
    state["documents"]["doc-000"] = document
    del state["extra"], state["log"]
    state["counters"]["step"] = 1
    repo.commit(state)
    state["documents"]["doc-000"] = "".join(["the second draft "] * 2000)
    state["extra"] = [*extra, {"part": 20, "text": "one more"}]
    state["log"] = [{"entry": i, "note": "the failed attempt"} for i in range(300)]
    c = repo.commit(state)
    assert repo.get_commit(c.id).tree == fresh_tree(state)
    with snapvc.open(repo.location) as fresh:  # nothing answered from this writer's caches
        assert fresh.checkout(c.id) == state
        assert fresh.fsck().ok
