"""A commit writes objects for what changed, not for the whole state: an append to a
long list, an edit in a long document, a changed key in a large map each cost a handful
of new objects. Reusing earlier work never hides a change made in place."""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import snapvc
from snapvc.encoding.splice import TreeSplicer, inner_levels
from snapvc.encoding.values import new_packer
from snapvc.encoding.writer import Encoder, element_encoder
from snapvc.ids import ObjectId
from snapvc.objects import BLOB, COMMIT, MAP, SEQ, TEXT

KIND = {BLOB: "blob", MAP: "map", SEQ: "seq", TEXT: "text", COMMIT: "commit"}


@dataclasses.dataclass
class Card:
    title: str
    tags: list[str]


def message(i: int) -> dict[str, Any]:
    """A small chat message of about 300 bytes."""
    return {
        "role": "user" if i % 2 else "assistant",
        "content": f"message {i}: " + " ".join(f"word{(i * 7 + j) % 97}" for j in range(38)),
        "step": i,
    }


def written(repo: snapvc.Repository, state: dict[str, Any], **kw: Any) -> dict[str, int]:
    """Commit ``state``; the objects the commit added, counted by kind (the commit itself
    goes to the commit index, the rest to the object store)."""
    before = set(repo.store.iter_ids())
    count_before = repo.store.sizes().objects
    commits_before = repo.commits.count()
    repo.commit(state, **kw)
    new = [oid for oid in repo.store.iter_ids() if oid not in before]
    assert repo.store.sizes().objects - count_before == len(new)
    kinds: dict[str, int] = {"commit": repo.commits.count() - commits_before}
    for oid in new:
        name = KIND[repo.store.get(oid)[0]]
        kinds[name] = kinds.get(name, 0) + 1
    return kinds


def total(kinds: dict[str, int]) -> int:
    return sum(kinds.values())


def commit_fails(repo: snapvc.Repository, state: dict[str, Any]) -> None:
    """A commit of ``state`` that fails after encoding it (its write is refused): nothing
    of it may stick in the encoder's cache."""
    add = repo.commits.add

    def fail(commit: Any) -> None:
        raise RuntimeError("the disk is full")

    repo.commits.add = fail  # type: ignore[method-assign]
    try:
        with pytest.raises(RuntimeError):
            repo.commit(state)
    finally:
        repo.commits.add = add  # type: ignore[method-assign]


def fresh_tree(state: dict[str, Any]) -> ObjectId:
    """The tree id of ``state`` encoded from scratch, with no earlier work to reuse."""
    repo = snapvc.open("memory://")
    c = repo.commit(copy.deepcopy(state))
    return repo.get_commit(c.id).tree


def document(n: int, seed: int = 1) -> str:
    rnd = random.Random(seed)
    words = ["the", "agent", "reads", "a", "document", "and", "writes", "notes", "about", "each", "section", "carefully"]
    out: list[str] = []
    size = 0
    while size < n:
        w = rnd.choice(words) + rnd.choice(["", "", ",", ".", "\n"])
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n]


# -- (a) appending to a long list is O(log n) ------------------------------------------------


def append_costs(n: int, appends: int = 8) -> list[int]:
    repo = snapvc.open("memory://")
    messages = [message(i) for i in range(n)]
    state = {"messages": messages, "scratch": {"step": 0}}
    repo.commit(state)
    costs = []
    for i in range(n, n + appends):
        messages.append(message(i))
        costs.append(total(written(repo, state)))
    assert repo.checkout("main")["messages"] == messages
    return costs


def test_append_to_a_long_list_writes_few_objects() -> None:
    small = append_costs(1_000)
    large = append_costs(10_000)
    assert max(small) <= 12, small
    assert max(large) <= 12, large
    # Ten times the messages: a level more at most, nowhere near ten times the objects.
    assert sum(large) <= sum(small) + 3 * len(large), (small, large)


def test_append_rewrites_only_the_last_leaf_and_the_spine() -> None:
    repo = snapvc.open("memory://")
    messages = [message(i) for i in range(5_000)]
    state = {"messages": messages}
    repo.commit(state)
    messages.append(message(5_000))
    kinds = written(repo, state)
    assert kinds.get("commit") == 1
    assert kinds.get("blob", 0) == 0 and kinds.get("text", 0) == 0
    assert kinds.get("seq", 0) <= 6, kinds
    assert kinds.get("map", 0) <= 2, kinds


def test_many_appends_grow_the_store_linearly_not_quadratically() -> None:
    repo = snapvc.open("memory://")
    messages: list[dict[str, Any]] = []
    state = {"messages": messages}
    for i in range(2_000):
        messages.append(message(i))
        if i % 10 == 9:
            repo.commit(state)
    commits = 200
    objects = repo.store.sizes().objects
    assert objects <= 12 * commits, objects
    assert repo.checkout("main")["messages"] == messages


# -- (b) an edit in the middle of a long document stores about one chunk -------------------


@pytest.mark.parametrize("kind", ["str", "bytes"])
def test_edit_in_the_middle_of_a_long_document(kind: str) -> None:
    doc = document(20_000)
    value: Any = doc if kind == "str" else doc.encode()
    repo = snapvc.open("memory://")
    state = {"doc": value, "notes": {"n": 1}}
    first = written(repo, state)
    assert first.get("blob", 0) >= 3, first  # 20 KB is cut into several chunks

    edited = doc[:10_000] + "X" * 300 + doc[10_300:]
    assert len(edited) == len(doc)
    state["doc"] = edited if kind == "str" else edited.encode()
    kinds = written(repo, state)
    assert kinds.get("blob", 0) + kinds.get("text", 0) <= 3, kinds
    assert total(kinds) <= 6, kinds
    assert repo.checkout("main")["doc"] == state["doc"]


def test_insertion_in_a_long_document_stores_about_one_chunk() -> None:
    doc = document(60_000, seed=4)
    repo = snapvc.open("memory://")
    repo.commit({"doc": doc})
    edited = doc[:31_000] + " an inserted sentence of a few words. " + doc[31_000:]
    kinds = written(repo, {"doc": edited})
    assert kinds.get("blob", 0) <= 3, kinds
    assert total(kinds) <= 7, kinds
    assert repo.checkout("main")["doc"] == edited


# -- (c) one changed key in a large map is O(log n) ----------------------------------------


def test_changing_one_key_of_a_large_map() -> None:
    repo = snapvc.open("memory://")
    big = {f"doc-{i:05d}": {"title": f"document {i}", "score": i / 7} for i in range(5_000)}
    state = {"index": big, "other": [1, 2, 3]}
    first = total(written(repo, state))
    assert first > 50

    costs = []
    for key in ("doc-00000", "doc-02500", "doc-04999"):
        big[key] = {"title": "rewritten", "score": -1.0}
        costs.append(total(written(repo, state)))
    big["doc-99999"] = {"title": "added"}
    costs.append(total(written(repo, state)))
    del big["doc-01234"]
    costs.append(total(written(repo, state)))
    assert max(costs) <= 8, costs
    assert repo.checkout("main") == state


# -- (d) the same state again writes only the commit ----------------------------------------


def mixed_state() -> dict[str, Any]:
    """A history, a long document and a wide index: each kind of large container."""
    return {
        "messages": [message(i) for i in range(3_000)],
        "doc": document(30_000),
        "index": {f"k{i}": i for i in range(2_000)},
    }


def test_recommitting_the_same_objects_writes_only_the_commit() -> None:
    repo = snapvc.open("memory://")
    state = mixed_state()
    repo.commit(state)
    assert written(repo, state) == {"commit": 1}
    assert written(repo, state, message="again") == {"commit": 1}


def test_recommitting_an_equal_state_rebuilt_from_scratch_writes_only_the_commit() -> None:
    repo = snapvc.open("memory://")
    state = mixed_state()
    repo.commit(state)
    assert written(repo, copy.deepcopy(state)) == {"commit": 1}
    # Also in a second repository object over the same store contents: nothing is cached there.
    rebuilt = {
        "index": {f"k{i}": i for i in reversed(range(2_000))},
        "doc": "".join(document(30_000)),
        "messages": [message(i) for i in range(3_000)],
    }
    assert written(repo, rebuilt, branch="other") == {"commit": 1}


def test_a_second_branch_with_the_same_state_writes_only_the_commit() -> None:
    repo = snapvc.open("memory://")
    state = {"messages": [message(i) for i in range(1_000)]}
    repo.commit(state, branch="main")
    assert written(repo, state, branch="fork") == {"commit": 1}


# -- (e) changes made in place are always seen ----------------------------------------------


def agent_state() -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "content": f"m{i}", "meta": {"tags": [f"t{i}"], "score": i}} for i in range(250)
        ],
        "memory": {"facts": ["sky is blue"], "people": {"ada": {"role": "engineer"}}},
        "scratch": {"plan": ["read", "write"], "notes": {"draft": "v1"}},
    }


Mutation = Callable[[dict[str, Any]], None]


def swap(items: list[Any], i: int, j: int) -> None:
    items[i], items[j] = items[j], items[i]


def rename(d: dict[str, Any], old: str, new: str) -> None:
    d[new] = d.pop(old)


MUTATIONS: dict[str, Mutation] = {
    "nested dict in a list element": lambda s: s["messages"][123]["meta"].__setitem__("score", "changed"),
    "list inside a nested dict in a list element": lambda s: s["messages"][7]["meta"]["tags"].append("extra"),
    "list inside a dict": lambda s: s["scratch"]["plan"].append("review"),
    "dict inside a dict": lambda s: s["memory"]["people"]["ada"].__setitem__("role", "mathematician"),
    "key rename, same value object": lambda s: rename(s["memory"], "facts", "beliefs"),
    "key rename in a list element": lambda s: rename(s["messages"][200], "content", "text"),
    "swap two list elements": lambda s: swap(s["messages"], 10, 240),
    "swap two adjacent elements": lambda s: swap(s["messages"], 0, 1),
    "swap inside a small list": lambda s: swap(s["scratch"]["plan"], 0, 1),
    "move an element to the end": lambda s: s["messages"].append(s["messages"].pop(50)),
    "reverse a list": lambda s: s["messages"].reverse(),
    "sort a list": lambda s: s["messages"].sort(key=lambda m: -m["meta"]["score"]),
    "delete a middle element": lambda s: s["messages"].__delitem__(200),
    "pop the last element": lambda s: s["messages"].pop(),
    "insert at the front": lambda s: s["messages"].insert(0, {"role": "system", "content": "first"}),
    "clear a nested list": lambda s: s["messages"][3]["meta"]["tags"].clear(),
    "move a value between dicts": lambda s: s["scratch"].__setitem__("notes2", s["memory"].pop("people")),
    "same object under a second key": lambda s: s["scratch"].__setitem__("alias", s["memory"]["facts"]),
    "add a key to a nested dict": lambda s: s["scratch"]["notes"].__setitem__("final", "v2"),
    "delete a key of a nested dict": lambda s: s["scratch"]["notes"].pop("draft"),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_mutation_in_place_is_committed(name: str) -> None:
    repo = snapvc.open("memory://")
    state = agent_state()
    repo.commit(state, message="before")
    before = copy.deepcopy(state)

    MUTATIONS[name](state)
    assert state != before
    c = repo.commit(state, message="after")
    back = repo.checkout("main")
    assert back == state
    assert repo.get_commit(c.id).tree == fresh_tree(state)
    assert repo.checkout("main~1") == before


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_mutation_in_place_after_an_unrelated_commit_is_committed(name: str) -> None:
    # Between the two commits the mutated part was reused untouched, from the cache.
    repo = snapvc.open("memory://")
    state = agent_state()
    repo.commit(state)
    state["step"] = 1
    repo.commit(state)
    MUTATIONS[name](state)
    c = repo.commit(state)
    assert repo.checkout("main") == state
    assert repo.get_commit(c.id).tree == fresh_tree(state)


def test_a_number_changing_type_in_place_is_committed() -> None:
    # 9 == 9.0 == True-ish comparisons do not fool the encoder: the type is the value.
    repo = snapvc.open("memory://")
    state = agent_state()
    repo.commit(state)
    meta = state["messages"][9]["meta"]
    meta["score"] = 9.0
    c = repo.commit(state)
    assert type(repo.checkout("main")["messages"][9]["meta"]["score"]) is float
    assert repo.get_commit(c.id).tree == fresh_tree(state)
    state["messages"][1]["meta"]["score"] = True
    repo.commit(state)
    assert repo.checkout("main")["messages"][1]["meta"]["score"] is True


def test_mutations_then_revert_give_back_the_first_tree() -> None:
    repo = snapvc.open("memory://")
    state = agent_state()
    first = repo.commit(state)
    for name in ["swap two list elements", "key rename, same value object", "nested dict in a list element"]:
        MUTATIONS[name](state)
        repo.commit(state)
    swap(state["messages"], 10, 240)
    rename(state["memory"], "beliefs", "facts")
    state["messages"][123]["meta"]["score"] = 123
    again = repo.commit(state)
    assert repo.get_commit(again.id).tree == repo.get_commit(first.id).tree


def test_mutation_inside_a_typed_value_is_committed() -> None:
    repo = snapvc.open("memory://")
    state = {"notes": [Card("a", ["x"]), Card("b", [])]}
    repo.commit(state)
    state["notes"][0].tags.append("y")
    state["notes"][1].title = "renamed"
    repo.commit(state)
    back = repo.checkout("main")
    assert back == state
    assert dataclasses.asdict(back["notes"][0]) == {"title": "a", "tags": ["x", "y"]}


def test_random_edit_sequences_match_encoding_from_scratch() -> None:
    """Random edits in place, committed after each: what is stored is always exactly the
    state, with the same tree as encoding it from scratch."""
    for seed in range(8):
        rnd = random.Random(seed)
        repo = snapvc.open("memory://")
        state: dict[str, Any] = {"a": random_value(rnd, 0), "b": [random_value(rnd, 1) for _ in range(80)]}
        for step in range(20):
            random_edit(rnd, state)
            c = repo.commit(state)
            assert repo.checkout("main") == state, (seed, step)
            assert repo.get_commit(c.id).tree == fresh_tree(state), (seed, step)


def random_leaf(rnd: random.Random) -> Any:
    return rnd.choice([1, "s", None, 2.5, b"b", "x" * rnd.choice([10, 600, 3000]), (1, 2), True])


def random_value(rnd: random.Random, depth: int) -> Any:
    if depth > 2 or rnd.random() < 0.3:
        return random_leaf(rnd)
    n = rnd.choice([0, 1, 3, 70]) if depth == 0 else rnd.choice([0, 1, 3])
    if rnd.random() < 0.5:
        return [random_value(rnd, depth + 1) for _ in range(n)]
    return {f"k{i}": random_value(rnd, depth + 1) for i in range(n)}


def containers(value: Any, out: list[Any]) -> list[Any]:
    if type(value) in (list, dict):
        out.append(value)
        for v in value.values() if type(value) is dict else value:
            containers(v, out)
    return out


def random_edit(rnd: random.Random, state: dict[str, Any]) -> None:
    edit_container(rnd, rnd.choice(containers(state, [])))


def edit_container(rnd: random.Random, target: list[Any] | dict[str, Any],
                   make: Callable[[random.Random, int], Any] = random_value,
                   leaf: Callable[[random.Random], Any] = random_leaf) -> None:
    """One random change made in place to a list or dict: new values from ``make``, a
    list's inserted ones from ``leaf``."""
    op = rnd.random()
    if type(target) is list:
        if op < 0.3 or not target:
            target.append(make(rnd, 1))
        elif op < 0.5:
            target.pop(rnd.randrange(len(target)))
        elif op < 0.7:
            swap(target, rnd.randrange(len(target)), rnd.randrange(len(target)))
        elif op < 0.85:
            target[rnd.randrange(len(target))] = make(rnd, 1)
        else:
            target.insert(rnd.randrange(len(target) + 1), leaf(rnd))
    else:
        keys = list(target)
        if op < 0.3 or not keys:
            target[f"n{rnd.randrange(1000)}"] = make(rnd, 1)
        elif op < 0.5:
            del target[rnd.choice(keys)]
        elif op < 0.7:
            rename(target, rnd.choice(keys), f"r{rnd.randrange(1000)}")
        else:
            target[rnd.choice(keys)] = make(rnd, 1)


@pytest.mark.slow
def test_few_changes_to_a_large_map_match_encoding_from_scratch() -> None:
    """A large dict with a few values changed per commit is re-encoded by its changes
    alone (updating the remembered entry in place): still exactly the state, including
    after a failed commit, a shared sub-dict, container values replaced by scalars and
    back, and the dict moving to another path."""
    rnd = random.Random(11)
    shared = {"shared": [1, 2, 3]}
    big: dict[str, Any] = {f"key-{i:05d}": (f"value {i}" if i % 3 else {"n": i, "tags": [i]}) for i in range(3000)}
    big["key-00001"] = shared
    big["key-00002"] = shared
    state: dict[str, Any] = {"big": big, "other": {"x": 1}}
    repo = snapvc.open("memory://")
    repo.commit(state)
    keys = sorted(big)
    for step in range(40):
        for key in rnd.sample(keys, rnd.choice([1, 3, 10])):
            op = rnd.random()
            if op < 0.4:
                big[key] = f"new {step} {rnd.random()}"
            elif op < 0.6:
                big[key] = {"n": step, "tags": [step, key]}
            elif op < 0.8 and type(big[key]) is dict:
                big[key]["n"] = -step  # in place, below the map
            else:
                shared["shared"].append(step)  # in place, seen at two keys
        if step % 7 == 3:
            commit_fails(repo, state)
        if step == 20:
            state = {"moved": {"big": big}, "other": state["other"]}
        c = repo.commit(state)
        assert repo.get_commit(c.id).tree == fresh_tree(state), step
    assert repo.checkout("main") == state


def test_few_changes_through_state_match_encoding_from_scratch() -> None:
    rnd = random.Random(12)
    repo = snapvc.open("memory://")
    repo.commit({"big": {f"key-{i:05d}": f"value {i}" for i in range(3000)}})
    state = repo.state("main")
    state.snapshot()
    expected = repo.checkout("main")
    for step in range(30):
        for key in rnd.sample(sorted(expected["big"]), 5):
            value: Any = f"changed {step} {rnd.random()}" if rnd.random() < 0.7 else {"step": step}
            state.set(("big", key), value)
            expected["big"][key] = copy.deepcopy(value)
        if step % 9 == 4:
            state.delete(("big", rnd.choice(sorted(expected["big"]))))  # a key removed: positions move
            expected = {"big": dict(state.get("big"))}
        cp = state.snapshot()
        assert repo.get_commit(repo.resolve(cp.id)).tree == fresh_tree(expected), step
    assert repo.checkout("main") == expected


@pytest.mark.parametrize("make", [tuple, list])
def test_a_large_container_changing_type_at_a_path_keeps_its_new_type(make: Callable[[list[Any]], Any]) -> None:
    # The nodes of what stood at the same path last commit are reused only for the same
    # kind of container: a tuple's nodes say "tuple", a list's "list".
    items = [{"n": i, "text": f"item {i} " * 5} for i in range(2_000)]
    other = tuple if make is list else list
    repo = snapvc.open("memory://")
    repo.commit({"items": other(items)})
    repo.commit({"items": make(items)})
    back = repo.checkout("main")["items"]
    assert type(back) is make and list(back) == items
    assert repo.get_commit(repo.resolve("main")).tree == fresh_tree({"items": make(items)})


@pytest.mark.slow
@pytest.mark.parametrize("through_state", [False, True])
def test_scattered_changes_to_a_large_map_match_encoding_from_scratch(through_state: bool) -> None:
    # Values of a few hundred bytes make a map of thousands of small leaves, where ten
    # scattered changes split some leaves and merge others: the levels above must not
    # take a node that moved for one that stayed. Each commit's tree is checked against
    # encoding the same state from scratch.
    for seed in range(4):
        rnd = random.Random(seed)
        keys = [f"key-{i:06d}" for i in range(5_000)]
        entries = {k: "v" * rnd.randint(100, 500) + str(rnd.random()) for k in keys}
        repo = snapvc.open("memory://")
        repo.commit({"m": entries})
        state = repo.state("main") if through_state else None
        if state is not None:
            state.snapshot()
        for step in range(25):
            for key in rnd.sample(keys, 10):
                entries[key] = "w" * rnd.randint(100, 500) + str(rnd.random())
                if state is not None:
                    state.set(("m", key), entries[key])
            if state is not None:
                tree = repo.get_commit(repo.resolve(state.snapshot().id)).tree
            else:
                tree = repo.get_commit(repo.commit({"m": entries}).id).tree
            assert tree == Encoder().encode_root({"m": dict(entries)}), (seed, step)


@st.composite
def tail_edits(draw: st.DrawFn) -> tuple[list[str], str, int, int, list[str]]:
    """A long list and one splice near its end: an append, or ``[lo, hi)`` replaced by new
    elements where ``lo``/``hi`` are taken around the end of the second or third leaf
    from the end (once the list is stored and its leaves known), so that the leaf cut
    anew there may run on into the last one."""
    n = draw(st.integers(250, 900))  # 17 to 63 KB in leaves of about 4 KB
    seed = draw(st.integers(0, 2**32 - 1))
    rnd = random.Random(seed)
    items = [f"item {i} " + "x" * rnd.randrange(120) for i in range(n)]
    where = draw(st.sampled_from(["append", "second leaf from the end", "third leaf from the end"]))
    before, after = draw(st.integers(0, 3)), draw(st.integers(0, 2))
    new = [f"new {seed} {j} " + "y" * rnd.randrange(60) for j in range(draw(st.integers(0, 6)))]
    return items, where, before, after, new


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tail_edits())
def test_a_splice_near_the_end_of_a_list_gives_the_ids_of_a_fresh_encoding(
        case: tuple[list[str], str, int, int, list[str]]) -> None:
    """A merge builds an edited list from its old tree (``TreeSplicer``), reading only the
    leaves around the edit; the tree must be the one encoding the new list anew gives,
    also when the leaf cut anew runs on into the old last leaf."""
    items, where, before, after, new = case
    repo = snapvc.open("memory://")
    repo.commit({"l": items})
    old = repo.snapshot()["l"]
    levels = inner_levels(repo.loader, SEQ, bytes(old.id), repo.loader.node(old.id)[1], new_packer().pack)
    assume(len(levels) > 0 and len(levels[0].entries) >= 2)  # at least two leaves (rarely fewer)
    leaves = levels[0].entries  # as (reference, count)
    if where == "append":
        lo = hi = len(items)
        new = new or ["appended"]
    else:
        back = min(len(leaves), 2 if where.startswith("second") else 3)
        end = sum(count for _, count in leaves[: len(leaves) - back + 1])  # where that leaf ends
        lo, hi = max(0, end - 1 - before), min(len(items), end + after)  # its last entry goes
    splicer = TreeSplicer(repo.loader)
    view = splicer.seq(old, [(lo, hi, [splicer.encode(v) for v in new])])
    expected = [*items[:lo], *new, *items[hi:]]
    assert view is not None and view.id == element_encoder()(expected)[3:]
