"""The first commit after a load: ``repo.checkout``, ``repo.state()`` or a new process.

What a checkout hands out is taught to the encoder (``snapvc.encoding.seed``), so the
next commit encodes what changed, not the state again; and since it is checked as the
encoder's own work is, by identity, a value changed in place after the load is stored.
Work is counted in containers encoded, never timed."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

import snapvc
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
    """Reading many states does not keep them all alive: the cache holds what the last
    load handed out, until a commit."""
    repo = snapvc.open(tmp_path / "r.snapvc")
    state = history(100)
    for i in range(10):
        step(state, i)
        repo.commit(state)
    cache = repo._encode_caches["refs/heads/main"]
    sizes = []
    for rev in range(10):
        repo.checkout(f"main~{rev}")
        sizes.append(len(cache.loaded))
    assert len(set(sizes)) == 1 and sizes[0] > 0, sizes
    latest = repo.checkout("main")
    step(latest, 99)
    repo.commit(latest)
    assert cache.loaded == {}


def test_a_container_too_large_to_teach_is_encoded_anew(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from snapvc.encoding import seed

    monkeypatch.setattr(seed, "SEED_MAX_ENTRIES", 150)
    repo = snapvc.open(tmp_path / "r.snapvc")
    repo.commit(history(400))
    state = repo.checkout("main")
    cache = repo._encode_caches["refs/heads/main"]
    taught = {id(entry.obj) for entry in cache.loaded.values()}
    assert id(state["messages"]) not in taught and id(state["documents"]) in taught
    step(state, 1)
    c = repo.commit(state)
    assert repo.get_commit(c.id).tree == fresh_tree(state)
