"""Long map keys: a map whose keys are long is stored in work and space that follow its
size, and reads back whole.

An inner node of a large map holds the first key of each child. A long key (about 480
bytes or more) closes such a node by itself; when every entry of an inner level but the
last does, the level is cut by its child references instead (``prolly.inner_level_rule``),
so the tree comes down to one root. The tests count the levels the encoder plans rather
than time anything: a tree that never comes down to one root is stopped at ``_LEVELS``.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from typing import Any

import pytest

import snapvc
import snapvc.encoding.trees as trees_module
from snapvc.encoding.splice import TreeSplicer
from snapvc.encoding.writer import element_encoder
from snapvc.ids import ObjectId

# More levels than any tree of these tests can need (a map of 10**6 keys has about 6).
_LEVELS = 64


class NeverEndingTree(AssertionError):
    pass


@pytest.fixture
def planned_levels(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts the levels the encoder plans (``plan_level`` calls) since the count was last
    set to 0; planning more than ``_LEVELS`` is stopped with ``NeverEndingTree``."""
    calls = [0]
    plan_level = trees_module.plan_level

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] > _LEVELS:
            raise NeverEndingTree(f"more than {_LEVELS} tree levels planned: the tree never comes down to one root")
        return plan_level(*args, **kwargs)

    monkeypatch.setattr(trees_module, "plan_level", counted)
    yield calls


def stored_bytes(repo: snapvc.Repository) -> int:
    """The bytes of every object in the store (uncompressed)."""
    return sum(len(repo.store.get(oid)) for oid in repo.store.iter_ids())


def random_text(rnd: random.Random, n: int) -> str:
    """``n`` characters that do not compress, so stored sizes count what is stored."""
    return "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))


def fresh_tree(state: dict[str, Any]) -> ObjectId:
    repo = snapvc.open("memory://")
    return repo.get_commit(repo.commit(copy.deepcopy(state)).id).tree


@pytest.mark.parametrize("key_chars", [9_000, 20_000, 200_000])
def test_a_long_key_beside_another_key_is_committed_and_read_back(planned_levels: list[int], key_chars: int) -> None:
    """``{long key: 1, 'v': long value}``: the map is a tree of two leaves, the first led
    by the long key; it is committed planning a few levels, storing about the key and the
    value once, and reads back whole."""
    rnd = random.Random(key_chars)
    key = random_text(rnd, key_chars)
    state = {key: 1, "v": random_text(rnd, key_chars * 3 // 2)}
    repo = snapvc.open("memory://")
    c = repo.commit(state)
    assert planned_levels[0] <= 8
    size = len(key) * 5 // 2
    assert stored_bytes(repo) < 3 * size  # the key is held by a few nodes, not one per level
    assert repo.checkout(c.id) == state
    assert dict(repo.snapshot(c.id)) == state
    assert [(ch.path, ch.kind) for ch in repo.diff({}, c.id)] == [((key,), "added"), (("v",), "added")]
    assert repo.diff(c.id, {**state, key: 2})[0].path == (key,)


def test_many_medium_keys_are_committed_with_linear_storage(planned_levels: list[int]) -> None:
    """300 keys of 600 characters: every inner entry holds a key too long to share a node
    by the size rule; the levels are cut by their references, and the store holds about
    the keys' bytes."""
    rnd = random.Random(3)
    state = {"m": {random_text(rnd, 600): i for i in range(300)}}
    repo = snapvc.open("memory://")
    c = repo.commit(state)
    assert planned_levels[0] <= 12
    assert stored_bytes(repo) < 2 * 300 * 600
    assert repo.checkout(c.id) == state


def test_edits_to_a_map_of_long_keys_give_the_ids_of_a_fresh_encoding(planned_levels: list[int]) -> None:
    """Commits that change, add and remove keys of a large map of long keys (re-encoded
    by their changes, reusing old nodes) give the tree encoding the state anew gives,
    also when an edit turns a level from one cut by its references into one cut by size
    and back (a short key added at or removed from the front)."""
    rnd = random.Random(5)
    big: dict[str, Any] = {random_text(rnd, rnd.choice([500, 700, 3000])): i for i in range(150)}
    state: dict[str, Any] = {"big": big}
    repo = snapvc.open("memory://")
    repo.commit(state)
    for step in range(12):
        keys = sorted(big)
        op = step % 4
        if op == 0:
            big[rnd.choice(keys)] = f"changed {step}"
        elif op == 1:
            big[random_text(rnd, 900)] = step
        elif op == 2:
            big["!short"] = step  # sorts first: the first leaf is led by a short key
        else:
            big.pop("!short", None)
            del big[rnd.choice(keys)]
        planned_levels[0] = 0
        c = repo.commit(state)
        planned_levels[0] = 0
        assert repo.get_commit(c.id).tree == fresh_tree(state), step
    assert repo.checkout("main") == state


@pytest.mark.parametrize("short_first", [False, True])
def test_a_splice_of_a_map_of_long_keys_gives_the_ids_of_a_fresh_encoding(planned_levels: list[int],
                                                                         short_first: bool) -> None:
    """A merge edits a large stored map from its old tree (``TreeSplicer``): with long
    keys the tree is the one encoding the edited map anew gives."""
    rnd = random.Random(7)
    mapping = {random_text(rnd, 700): i for i in range(120)}
    if short_first:
        mapping["!"] = "short"
    repo = snapvc.open("memory://")
    repo.commit({"m": mapping})
    splicer = TreeSplicer(repo.loader)
    new_map = dict(mapping)
    changes: dict[str, bytes | None] = {}
    for key in rnd.sample(sorted(mapping), 5):
        changes[key] = None
        del new_map[key]
    added = random_text(rnd, 800)
    changes[added] = splicer.encode("added")
    new_map[added] = "added"
    view = splicer.map(repo.snapshot()["m"], changes)
    planned_levels[0] = 0
    assert view is not None and view.id == element_encoder()(new_map)[3:]


def test_a_merge_of_maps_of_long_keys_gives_the_merged_state_and_its_fresh_ids(planned_levels: list[int]) -> None:
    """Two branches edit a large map of long keys; the merge (built from the old tree)
    holds both sides' edits and has the tree encoding the merged state anew gives."""
    rnd = random.Random(9)
    big = {random_text(rnd, 700): i for i in range(150)}
    keys = sorted(big)
    repo = snapvc.open("memory://")
    repo.commit({"m": big})
    repo.branch("side")
    ours = {**big, keys[3]: "ours", "!" * 600: "new on main"}
    repo.commit({"m": ours})
    repo.switch("side")
    theirs = {**big, keys[100]: "theirs"}
    del theirs[keys[50]]
    repo.commit({"m": theirs})
    repo.switch("main")
    planned_levels[0] = 0
    repo.merge("side")
    merged = {**ours, keys[100]: "theirs"}
    del merged[keys[50]]
    assert repo.checkout("main") == {"m": merged}
    planned_levels[0] = 0
    assert repo.get_commit(repo.resolve("main")).tree == fresh_tree({"m": merged})
