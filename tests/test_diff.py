"""A diff turns one state into the other (checked by replaying it, independently of the
diff's own alignment code), a diff of two stored states equals the diff of the same states
built as plain Python values, and it reads only the objects on the paths to what changed."""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import snapvc
from snapvc.diff.changes import Change, diff_values
from snapvc.encoding.reader import tree_root
from tests.exact import same


@dataclasses.dataclass
class Note:
    title: str
    score: int


def random_value(rng: random.Random, i: int) -> Any:
    """Values of every shape a state holds: inline scalars and containers, typed values,
    long strings (one object, or a chunked tree), and nested maps and lists that are
    objects of their own."""
    pick = rng.randrange(12)
    if pick == 0:
        return rng.randrange(1000)
    if pick == 1:
        return f"short {i} {rng.random()}"
    if pick == 2:
        return {"n": i, "text": "x" * rng.randrange(50), "flag": rng.random() < 0.5}
    if pick == 3:
        return (i, f"t{rng.randrange(9)}")
    if pick == 4:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(20)))
    if pick == 5:
        return Note(f"note {i}", rng.randrange(5))
    large = rng.random() < 0.1
    if pick == 6:
        return f"document {i} " + "lorem ipsum dolor " * (1200 if large else 150)
    if pick == 7:
        return {f"f{j}": f"field {j} of {i} " * 8 for j in range(30 if large else 5)}
    if pick == 8:
        return [f"item {j} of {i}" for j in range(300 if large else 3)]
    if pick == 9:
        return None
    if pick == 10:
        return rng.random()
    return [i, [i + 1, {"deep": i}]]


def edit_value(rng: random.Random, value: Any, i: int) -> Any:
    """A value changed a little (inside it, when it is a container) or replaced."""
    if isinstance(value, dict) and value and rng.random() < 0.7:
        out = dict(value)
        key = rng.choice(sorted(out))
        out[key] = random_value(rng, i) if rng.random() < 0.5 else f"edited {i}"
        return out
    if isinstance(value, list) and value and rng.random() < 0.7:
        items = list(value)
        items[rng.randrange(len(items))] = f"edited {i}"
        if rng.random() < 0.3:
            items.append("one more")
        return items
    if isinstance(value, str) and len(value) > 2000 and rng.random() < 0.7:
        at = rng.randrange(len(value))
        return value[:at] + f" [edit {i}] " + value[at:]
    return random_value(rng, i)


def edit_map(rng: random.Random, state: dict[str, Any], edits: int) -> None:
    keys = sorted(state)
    for n in range(edits):
        what = rng.random()
        if what < 0.5 and keys:
            key = rng.choice(keys)
            state[key] = edit_value(rng, state[key], n)
        elif what < 0.75 and keys:
            key = keys.pop(rng.randrange(len(keys)))
            del state[key]
        else:
            key = f"key-{rng.randrange(10 * len(state) + 10):07d}-new{n}"
            state[key] = random_value(rng, n)
            keys.append(key)
    if rng.random() < 0.2:  # a run of neighbouring keys removed: whole leaves go
        start = rng.randrange(max(1, len(keys) - 200))
        for key in sorted(state)[start : start + 150]:
            del state[key]


def edit_list(rng: random.Random, items: list[Any], edits: int) -> None:
    for n in range(edits):
        what = rng.random()
        if what < 0.4:
            items.append(random_value(rng, n))
        elif what < 0.7 and items:
            i = rng.randrange(len(items))
            items[i] = edit_value(rng, items[i], n)
        elif what < 0.8 and items:
            items.pop()
        elif what < 0.9 and items:
            del items[rng.randrange(len(items))]
        else:
            items.insert(rng.randrange(len(items) + 1), random_value(rng, n))


def in_memory_diff(old: Any, new: Any) -> list[Change]:
    """The diff of two plain (materialized) values. It runs the same alignment code as a
    diff of stored trees, so comparing the two shows that walking the trees changes
    nothing, not that the diff is right: ``check_changes`` shows that."""
    return list(diff_values(old, new))


# -- an independent oracle: the changes replayed on the old value give the new one ---------


def check_changes(old: Any, new: Any, changes: list[Change]) -> None:
    """``changes`` turn ``old`` into ``new``, checked without the diff's own code: they are
    replayed one container at a time as the documented indices say (``removed`` at its
    index in the old list, ``added`` and ``modified`` at their index in the new one), each
    change's ``old`` must be what stood there, a ``modified`` change is a real change of a
    value that is not compared inside (not two maps, not two lists or two tuples), and a
    list's common prefix and suffix are never touched."""
    assert same(_replay(old, new, changes, ()), new)


def _replay(old: Any, new: Any, changes: list[Change], at: Path) -> Any:
    here = [c for c in changes if len(c.path) == len(at)]
    if here:
        assert len(changes) == 1 and here[0].kind == "modified", (at, changes)
        return _modified(old, here[0])
    direct: dict[Any, list[Change]] = {}
    below: dict[Any, list[Change]] = {}
    for c in changes:
        step = c.path[len(at)]
        (direct if len(c.path) == len(at) + 1 else below).setdefault(step, []).append(c)
    if isinstance(old, dict):
        out = dict(old)
        for key, (c, *more) in direct.items():
            assert not more and key not in below, f"{c.path}: more than one change"
            if c.kind == "added":
                assert key not in old and c.old is None, c
                out[key] = c.new
            elif c.kind == "removed":
                assert key in old and same(c.old, old[key]) and c.new is None, c
                del out[key]
            else:
                assert key in old, c
                out[key] = _modified(old[key], c)
        for key, under in below.items():
            assert key in old and isinstance(new, dict) and key in new, under[0]
            out[key] = _replay(old[key], new[key], under, (*at, key))
        return out
    assert isinstance(old, (list, tuple)) and type(new) is type(old), f"changes below {at}, a {type(old).__name__}"
    removed = {i: c for i, cs in direct.items() for c in cs if c.kind == "removed"}
    added = {j: c for j, cs in direct.items() for c in cs if c.kind == "added"}
    modified = {j: c for j, cs in direct.items() for c in cs if c.kind == "modified"}
    assert sum(len(cs) for cs in direct.values()) == len(removed) + len(added) + len(modified), direct
    # What both lists start and end with is common, never a change.
    prefix = 0
    while prefix < min(len(old), len(new)) and same(old[prefix], new[prefix]):
        prefix += 1
    suffix = 0
    while suffix < min(len(old), len(new)) - prefix and same(old[-1 - suffix], new[-1 - suffix]):
        suffix += 1
    for i, c in removed.items():
        assert prefix <= i < len(old) - suffix and same(c.old, old[i]) and c.new is None, c
    for j in [*added, *modified, *below]:
        assert prefix <= j < len(new) - suffix, f"{(*at, j)}: inside the common ends of the lists"
    length = len(old) - len(removed) + len(added)
    assert all(j < length for j in added), f"{at}: an element added past the end of the new list"
    kept = iter([x for i, x in enumerate(old) if i not in removed])
    out = [added[j].new if j in added else next(kept) for j in range(length)]
    for j, c in modified.items():
        assert j not in added and j < len(out), c
        out[j] = _modified(out[j], c)
    for j, under in below.items():
        assert j not in added and j not in modified and j < len(out) and j < len(new), under[0]
        out[j] = _replay(out[j], new[j], under, (*at, j))
    return type(old)(out)


def _modified(old: Any, c: Change) -> Any:
    """The new value of a ``modified`` change, checked against the value it replaces."""
    assert same(c.old, old), f"{c.path}: the change's old value {c.old!r} is not {old!r}"
    assert not same(c.old, c.new), f"{c.path}: a change that changes nothing"
    both = {type(c.old), type(c.new)}
    assert not both <= {dict} and both not in ({list}, {tuple}), f"{c.path}: two {both} compared whole, not inside"
    return c.new


def check_history(repo: snapvc.Repository, states: list[dict[str, Any]], rng: random.Random) -> None:
    """Commit ``states``, then diff pairs of them: each diff replays from one state to
    the other, and equals the diff of the same states read back whole."""
    commits = [repo.commit(s) for s in states]
    plain = [repo.checkout(c.id) for c in commits]
    pairs = [(j - 1, j) for j in range(1, len(commits))] + [(j, j - 1) for j in range(1, len(commits))]
    pairs += [(rng.randrange(len(commits)), rng.randrange(len(commits))) for _ in range(4)]
    for i, j in pairs:
        changes = repo.diff(commits[i].id, commits[j].id)
        check_changes(states[i], states[j], changes)
        assert changes == in_memory_diff(plain[i], plain[j]), (i, j)


def root_level(repo: snapvc.Repository, path: str) -> int:
    view = repo.snapshot()[path]
    _, parts = tree_root(view)
    return parts[0].level + 1


@pytest.mark.slow
@pytest.mark.parametrize(("size", "seed"), [(40, 1), (300, 2), (3_000, 3), (8_000, 4)])
def test_map_diff_replays_to_the_new_state(size: int, seed: int) -> None:
    rng = random.Random(seed)
    repo = snapvc.open("memory://")
    entries = {f"key-{10 * i:07d}": random_value(rng, i) for i in range(size)}
    states = [{"entries": copy.deepcopy(entries), "other": 1}]
    for step in range(5):
        edit_map(rng, entries, rng.choice([1, 3, 20]))
        states.append({"entries": copy.deepcopy(entries), "other": step})
    check_history(repo, states, rng)
    if size >= 3_000:
        assert root_level(repo, "entries") >= 2


@pytest.mark.slow
@pytest.mark.parametrize(("size", "seed"), [(30, 5), (400, 6), (3_000, 7), (8_000, 8)])
def test_list_diff_replays_to_the_new_state(size: int, seed: int) -> None:
    rng = random.Random(seed)
    repo = snapvc.open("memory://")
    items = [random_value(rng, i) for i in range(size)]
    states = [{"items": copy.deepcopy(items)}]
    for _ in range(5):
        edit_list(rng, items, rng.choice([1, 3, 20]))
        states.append({"items": copy.deepcopy(items)})
    for _ in range(2):  # the common case: a growing list
        items.extend(random_value(rng, i) for i in range(rng.choice([1, 50])))
        states.append({"items": copy.deepcopy(items)})
    check_history(repo, states, rng)
    if size >= 3_000:
        assert root_level(repo, "items") >= 2


@pytest.mark.slow
def test_diff_between_a_single_node_and_a_tree() -> None:
    repo = snapvc.open("memory://")
    small = {"m": {f"k{i}": i for i in range(5)}, "l": list(range(5))}
    large = {"m": {f"k{i}": i for i in range(20_000)}, "l": list(range(20_000))}
    repo.commit(small)
    repo.commit(large)
    repo.commit({"m": {}, "l": []})
    for old, new, a, b in [(small, large, "main~2", "main~1"), (large, small, "main~1", "main~2"),
                           (large, {"m": {}, "l": []}, "main~1", "main")]:
        changes = repo.diff(a, b)
        check_changes(old, new, changes)
        assert changes == in_memory_diff(old, new)


def test_a_stored_list_that_became_a_tuple_is_modified(tmp_path: Path) -> None:
    items = [f"item {i}" for i in range(2_000)]
    with snapvc.open(tmp_path / "repo.snapvc") as repo:
        repo.commit({"a": items, "b": tuple(items), "c": tuple(items)})
    with snapvc.open(tmp_path / "repo.snapvc") as repo:
        repo.commit({"a": tuple(items), "b": items[:3], "c": (*items[:5], "new", *items[6:])})
        changes = repo.diff("main~1", "main")
    assert [(c.path, c.kind) for c in changes] == [(("a",), "modified"), (("b",), "modified"), (("c", 5), "modified")]
    assert changes[0].old == items and changes[0].new == tuple(items)


def objects_read(repo: snapvc.Repository, a: str, b: str) -> tuple[int, list[Change]]:
    """The objects ``repo.diff(a, b)`` fetched from the store, with nothing cached."""
    repo.loader.cache.clear()
    before = repo.loader.objects_read
    changes = repo.diff(a, b)
    return repo.loader.objects_read - before, changes


def cost_of(change: Callable[[dict[str, Any]], None], state: dict[str, Any]) -> tuple[int, list[Change]]:
    repo = snapvc.open("memory://")
    repo.commit(state)
    change(state)
    repo.commit(state)
    return objects_read(repo, "main~1", "main")


@pytest.mark.slow
def test_a_map_diff_reads_the_paths_to_the_changes() -> None:
    entries = {f"key-{i:06d}": {"n": i, "text": "x" * 40} for i in range(100_000)}
    picked = random.Random(9).sample(sorted(entries), 10)

    def change(state: dict[str, Any]) -> None:
        for key in picked:
            state["entries"][key] = {"n": -1, "text": "x" * 40}

    read, changes = cost_of(change, {"entries": entries})
    assert [c.path for c in changes] == [("entries", key, "n") for key in sorted(picked)]
    assert all(c.kind == "modified" and c.new == -1 for c in changes)
    assert read < 200  # of about 1,800 objects in the state


@pytest.mark.slow
def test_a_list_diff_reads_the_appended_end() -> None:
    messages = [{"role": "user", "content": f"message {i}"} for i in range(200_000)]

    def change(state: dict[str, Any]) -> None:
        state["messages"].extend({"role": "assistant", "content": f"reply {i}"} for i in range(10))

    read, changes = cost_of(change, {"messages": messages})
    assert [(c.path, c.kind) for c in changes] == [(("messages", 200_000 + i), "added") for i in range(10)]
    assert changes[0].new == {"role": "assistant", "content": "reply 0"}
    assert read < 50  # of about 1,900 objects in the state


def test_unchanged_long_strings_are_not_read() -> None:
    docs = {f"doc-{i:03d}": f"document {i} " + "lorem ipsum " * 2_000 for i in range(200)}
    before = docs["doc-007"]

    def change(state: dict[str, Any]) -> None:
        state["docs"]["doc-007"] = "short now"

    read, changes = cost_of(change, {"docs": docs})
    assert [(c.path, c.kind) for c in changes] == [(("docs", "doc-007"), "modified")]
    assert changes[0].old == before and changes[0].new == "short now"
    assert read < 30  # the changed document's chunks and the map's spine, not every document


# -- lists: a sequence diff, not index by index ------------------------------------------

def messages(n: int) -> list[dict[str, Any]]:
    return [{"role": "user" if i % 2 else "assistant", "content": f"message {i}"} for i in range(n)]


def test_an_insertion_or_a_deletion_in_the_middle_is_one_change() -> None:
    repo = snapvc.open("memory://")
    state = {"messages": messages(1_000)}
    repo.commit(state)
    state["messages"].insert(500, {"role": "tool", "content": "inserted"})
    repo.commit(state)
    del state["messages"][300]
    repo.commit(state)
    assert root_level(repo, "messages") >= 2  # stored as a tree: the stored path is what is tested
    assert repo.diff("main~2", "main~1") == [Change(("messages", 500), "added", None, {"role": "tool", "content": "inserted"})]
    assert repo.diff("main~1", "main") == [Change(("messages", 300), "removed", messages(1_000)[300], None)]
    # Both at once: the removal at its index in the old list, the insertion at its index in the new one.
    assert [(c.path, c.kind) for c in repo.diff("main~2", "main")] == [(("messages", 300), "removed"), (("messages", 499), "added")]
    check_changes(repo.checkout("main~2"), state, repo.diff("main~2", "main"))
    assert repo.diff("main~2", "main") == in_memory_diff(repo.checkout("main~2"), repo.checkout("main"))


def test_a_replaced_run_pairs_its_elements_and_compares_inside() -> None:
    old = {"m": [{"k": i, "v": "x"} for i in range(10)]}
    new = {"m": [*old["m"][:4], {"k": 4, "v": "y"}, {"k": 5, "v": "z"}, {"k": 99, "v": "x"}, *old["m"][6:]]}
    changes = in_memory_diff(old, new)
    check_changes(old, new, changes)
    assert [(c.path, c.kind) for c in changes] == [
        (("m", 4, "v"), "modified"), (("m", 5, "v"), "modified"), (("m", 6), "added"),
    ]


@pytest.mark.slow
def test_an_insertion_in_a_long_list_reads_the_spine_around_it() -> None:
    inserted = {"role": "tool", "content": "in the middle"}

    def change(state: dict[str, Any]) -> None:
        state["messages"].insert(100_000, inserted)

    read, changes = cost_of(change, {"messages": messages(200_000)})
    assert changes == [Change(("messages", 100_000), "added", None, inserted)]
    assert read < 60  # of about 1,900 objects in the state


def test_a_state_in_memory_diffs_against_a_rev(tmp_path: Path) -> None:
    with snapvc.open(tmp_path / "repo.snapvc") as repo:
        repo.commit({"notes": {f"n{i}": f"note {i}" for i in range(5_000)}, "messages": messages(3), "step": 1})
        state = repo.state()
        state.set("notes.n7", "changed")
        state.append("messages", {"role": "user", "content": "more"})
        state["step"] = 2
        expected = [
            Change(("messages", 3), "added", None, {"role": "user", "content": "more"}),
            Change(("notes", "n7"), "modified", "note 7", "changed"),
            Change(("step",), "modified", 1, 2),
        ]
        assert repo.diff("main", state) == expected
        assert repo.diff("main", repo.checkout("main") | {"step": 2}) == [Change(("step",), "modified", 1, 2)]
        before = state.snapshot()
        assert repo.diff(before, "main") == []  # a Checkpoint is a side too
        objects = repo.stats().objects
        repo.diff("main", {"other": list(range(10_000))})
        assert repo.stats().objects == objects  # nothing of a state in memory is stored


@pytest.mark.slow
def test_paths_limit_the_diff_and_what_it_reads() -> None:
    repo = snapvc.open("memory://")
    state = {"entries": {f"key-{i:06d}": {"n": i} for i in range(50_000)}, "plan": {"goal": "a", "steps": [1, 2]}}
    repo.commit(state)
    state["entries"]["key-000007"] = {"n": -1}
    state["plan"]["steps"].append(3)
    state["plan"]["done"] = True
    repo.commit(state)
    repo.loader.cache.clear()
    before = repo.loader.objects_read
    assert repo.diff("main~1", "main", paths=["plan.steps"]) == [Change(("plan", "steps", 2), "added", None, 3)]
    assert repo.loader.objects_read - before < 10  # the entries map is not read
    assert repo.diff("main~1", "main", paths=[("plan",), "plan.steps"]) == [
        Change(("plan", "done"), "added", None, True), Change(("plan", "steps", 2), "added", None, 3),
    ]
    assert repo.diff("main~1", "main", paths=["missing.path"]) == []
    assert repo.diff("main~1", {"plan": 1}, paths=["entries"])[0].kind == "removed"


def test_key_changes_compares_two_checkpoints_key_by_key() -> None:
    repo = snapvc.open("memory://")
    state = repo.state()
    state.update({"a": 1, "b": {"x": 1}, "c": 3})
    before = state.snapshot()
    state.delete("c")
    state.set("b.x", 2)
    state["d"] = 4
    after = state.snapshot()
    summary = snapvc.key_changes(repo.diff(before, after))
    assert (summary.added, summary.removed, summary.changed) == ({"d"}, {"c"}, {"b"})
    assert str(summary) == "Added: ['d'], Removed: ['c'], Changed: ['b']"


# -- views of the repository commit as references ----------------------------------------

def test_a_view_commits_as_a_reference_to_what_is_stored() -> None:
    repo = snapvc.open("memory://")
    repo.commit({"docs": {f"d{i}": "text " * 500 + str(i) for i in range(300)}, "step": 1})
    objects = repo.stats().objects
    repo.loader.cache.clear()
    before = repo.loader.objects_read
    docs = repo.snapshot()["docs"]
    repo.commit({"docs": docs, "step": 2})
    assert repo.loader.objects_read - before <= 2  # the roots of the state and of the view; nothing below
    assert repo.stats().objects == objects + 1  # the new root (the commit is counted apart)
    assert repo.checkout()["docs"] == repo.checkout("main~1")["docs"]


def test_a_view_commits_to_the_same_tree_as_its_value() -> None:
    repo = snapvc.open("memory://")
    repo.commit({"small": 1})  # a root small enough to be inline, were it not the root
    root = repo.snapshot()
    other = snapvc.open("memory://")
    other.commit({"list": list(range(5_000))})
    as_views = repo.commit({"nested": root, "list": other.snapshot()["list"]})
    plain = repo.commit({"nested": {"small": 1}, "list": list(range(5_000))})
    assert as_views.tree == plain.tree


def test_leaves_of_a_large_map_compare_values_stored_alike_only() -> None:
    repo = snapvc.open("memory://")
    entries: dict[str, Any] = {f"key-{i:05d}": f"note {i}" for i in range(5_000)}
    entries.update({"key-00100": 1, "key-00200": 1.0, "key-00300": b"x" * 32, "key-00400": float("nan"),
                    "key-00500": "text " * 600, "key-00600": {"n": 1}})
    before = repo.commit({"entries": entries})
    entries.update({"key-00100": True, "key-00200": 1, "key-00300": "x" * 32, "key-00400": float("nan"),
                    "key-00500": "text " * 599, "key-00600": {"n": 1.0}, "key-00700": "note 700"})
    entries["key-05000"] = "new"
    del entries["key-00800"]
    after = repo.commit({"entries": entries})
    changes = repo.diff(before.id, after.id)
    check_changes(repo.checkout(before.id), {"entries": entries}, changes)
    assert changes == in_memory_diff(repo.checkout(before.id), repo.checkout(after.id))
    assert [(c.path[1:], c.kind) for c in changes] == [
        (("key-00100",), "modified"), (("key-00200",), "modified"), (("key-00300",), "modified"),
        (("key-00500",), "modified"), (("key-00600", "n"), "modified"), (("key-00800",), "removed"),
        (("key-05000",), "added")]
