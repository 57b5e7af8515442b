"""A map that grows by a key a commit (one entry per checkpoint, say) costs the key, not
the map: the encoder places the keys added on dirty paths into what it remembers of the
map, and encodes only them; the trees are the ones a fresh encoder makes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import snapvc
from snapvc import UnsupportedValueError
from snapvc.encoding.writer import Encoder


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[snapvc.Repository]:
    with snapvc.open(tmp_path / "repo.snapvc", author="tester") as r:
        yield r


def _key(i: int) -> str:
    # Most keys sort after the ones before (checkpoint ids do); every fifth sorts among them.
    return f"k{i:05d}" if i % 5 else f"j{i:05d}"


def test_a_map_growing_by_a_key_a_commit_checks_no_old_entry(repo: snapvc.Repository,
                                                             entries_checked: list[int]) -> None:
    state = repo.state("w")
    per_commit = []
    for i in range(120):
        state.extend(("writes", _key(i)), [["task", "messages", {"n": i, "text": "x" * (i % 40)}, "", i]])
        state.set(("latest",), [["task", i]])
        entries_checked.clear()
        state.snapshot(message=f"step {i}")
        per_commit.append(len(entries_checked))
    assert max(per_commit[20:]) <= 4, per_commit  # not the map's 20 to 120 keys
    tip = repo.get_commit(repo.resolve("w"))
    assert tip.tree == Encoder().encode_root(repo.checkout("w"))  # the tree a fresh encoder makes
    assert list(repo.checkout("w")["writes"]) == sorted(_key(i) for i in range(120))


def test_a_commit_that_fails_after_keys_were_added_leaves_the_map_as_stored(repo: snapvc.Repository) -> None:
    state = repo.state("w")
    for i in range(40):
        state.extend(("writes", _key(i)), [[i, "x" * i]])
        state.snapshot()
    state.extend(("writes", _key(40)), [[40, object()]])
    with pytest.raises(UnsupportedValueError):
        state.snapshot()
    state.delete(("writes", _key(40)))
    state.extend(("writes", _key(41)), [[41, "y"]])
    state.extend(("writes", _key(45)), [[45, "z"]])  # a key placed among the old ones
    state.snapshot()
    expected = {"writes": {_key(i): [[i, "x" * i]] for i in range(40)} | {_key(41): [[41, "y"]], _key(45): [[45, "z"]]}}
    assert repo.checkout("w") == expected
    assert repo.get_commit(repo.resolve("w")).tree == Encoder().encode_root(expected)
    state.extend(("writes", _key(46)), [[46, "w"]])
    state.snapshot()
    expected["writes"][_key(46)] = [[46, "w"]]
    assert repo.get_commit(repo.resolve("w")).tree == Encoder().encode_root(expected)
