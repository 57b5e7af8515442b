"""Per-path history and log filters: the commits that changed a path, compared with
every parent, found by reading only the nodes on the path."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import snapvc
from snapvc import HistoryEntry, PathError
from snapvc.diff.changes import diff_values
from tests.fakes import TickingClock


@pytest.fixture(params=["memory", "sqlite"])
def repo(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[snapvc.Repository]:
    location = "memory://" if request.param == "memory" else tmp_path / "repo.snapvc"
    with snapvc.open(location, clock=TickingClock(), author="tester") as r:
        yield r


def summary(entries: list[HistoryEntry]) -> list[tuple[str, str, Any, Any]]:
    return [(e.commit.message, e.kind, e.value, e.old) for e in entries]


# -- history over a linear run ------------------------------------------------------------


def test_history_of_a_key_added_modified_removed_and_added_again(repo: snapvc.Repository) -> None:
    plans = [None, "draft", None, "outline", "outline", "final", None, None, "draft", 1, 1.0, True, 1]
    for i, plan in enumerate(plans):
        scratchpad = {"other": f"step {i}"} | ({} if plan is None else {"plan": plan})
        repo.commit({"scratchpad": scratchpad, "step": i}, message=f"c{i}")
    assert summary(list(repo.history("main", "scratchpad.plan"))) == [
        ("c12", "modified", 1, True),
        ("c11", "modified", True, 1.0),  # 1, 1.0 and True are three values
        ("c10", "modified", 1.0, 1),
        ("c9", "modified", 1, "draft"),
        ("c8", "added", "draft", None),
        ("c6", "removed", None, "final"),
        ("c5", "modified", "final", "outline"),
        ("c3", "added", "outline", None),
        ("c2", "removed", None, "draft"),
        ("c1", "added", "draft", None),
    ]
    assert [e.commit.id for e in repo.history("main", ("scratchpad", "plan"))] == [
        e.commit.id for e in repo.history("main", "scratchpad.plan")]
    assert summary(list(repo.history("main~10", "scratchpad.plan"))) == [
        ("c2", "removed", None, "draft"), ("c1", "added", "draft", None)]
    other = list(repo.history("main", "scratchpad.other"))
    assert len(other) == len(plans) and other[-1].kind == "added" and other[-1].commit.message == "c0"


def test_a_root_commit_holding_the_path_is_an_entry(repo: snapvc.Repository) -> None:
    first = repo.commit({"plan": {"steps": ["a", "b"]}})
    repo.commit({"plan": {"steps": ["a", "b"]}, "unrelated": 1})
    (entry,) = repo.history("main", "plan")
    assert entry == HistoryEntry(first, "added", {"steps": ["a", "b"]}, None)
    assert list(repo.history("main", "plan.missing")) == []


def test_limit(repo: snapvc.Repository) -> None:
    for i in range(6):
        repo.commit({"n": i}, message=f"c{i}")
    assert [e.commit.message for e in repo.history("main", "n", limit=2)] == ["c5", "c4"]
    assert list(repo.history("main", "n", limit=0)) == []
    assert len(list(repo.history("main", "n", limit=100))) == 6


def test_stored_values_compare_by_id_and_come_back_whole(repo: snapvc.Repository) -> None:
    big = {f"k{i}": f"value {i} " * 20 for i in range(300)}  # a prolly tree of its own
    document = "lorem ipsum " * 2000  # a TEXT object
    repo.commit({"big": big, "doc": document}, message="c0")
    repo.commit({"big": big, "doc": document, "n": 1}, message="c1")
    changed = dict(big, k150="new")
    repo.commit({"big": changed, "doc": document + "!", "n": 1}, message="c2")
    entries = list(repo.history("main", "big"))
    assert summary(entries) == [("c2", "modified", changed, big), ("c0", "added", big, None)]
    entries[0].value["k1"] = "mutated"  # a fresh copy for the caller
    assert next(repo.history("main", "big")).value == changed
    assert [e.commit.message for e in repo.history("main", "big.k150")] == ["c2", "c0"]
    assert [e.commit.message for e in repo.history("main", "big.k151")] == ["c0"]
    assert [e.kind for e in repo.history("main", "doc")] == ["modified", "added"]


def test_dotted_tuple_and_index_paths(repo: snapvc.Repository) -> None:
    long = [f"event {i}" for i in range(3000)]  # a stored list, several levels deep
    repo.commit({"a.b": {"c": 1}, "messages": ["hi", "there"], "events": long}, message="c0")
    repo.commit({"a.b": {"c": 2}, "messages": ["hi", "you"], "events": long[:1500] + ["edited"] + long[1501:]},
                message="c1")  # fmt: skip
    repo.commit({"a.b": {"c": 2}, "messages": ["hi"], "events": long[:1500] + ["edited"] + long[1501:] + ["x"]},
                message="c2")  # fmt: skip
    assert [e.commit.message for e in repo.history("main", ("a.b", "c"))] == ["c1", "c0"]
    assert list(repo.history("main", "a.b.c")) == []  # the key "a" does not exist
    assert summary(list(repo.history("main", "messages.1"))) == [
        ("c2", "removed", None, "you"), ("c1", "modified", "you", "there"), ("c0", "added", "there", None)]
    assert [e.commit.message for e in repo.history("main", ("messages", 1))] == ["c2", "c1", "c0"]
    assert summary(list(repo.history("main", ("events", 1500)))) == [
        ("c1", "modified", "edited", "event 1500"), ("c0", "added", "event 1500", None)]
    assert [e.commit.message for e in repo.history("main", "events.3000")] == ["c2"]
    assert [e.commit.message for e in repo.history("main", "events.2999")] == ["c0"]
    assert list(repo.history("main", ("events", -1))) == []  # indices are positions from 0
    assert list(repo.history("main", ("messages", "1"))) != []  # a str of digits meets a list as an index
    assert list(repo.history("main", ("a.b", 0))) == []  # an int is not a map's key
    assert list(repo.history("main", "messages.0.x")) == []  # no step into a str


def test_bad_paths_raise_path_error_naming_them(repo: snapvc.Repository) -> None:
    repo.commit({"a": 1})
    for bad in ("", "a..b", ".a", ("a", 1.5), (), 42):
        with pytest.raises(PathError) as info:
            repo.history("main", bad)  # type: ignore[arg-type]
        assert repr(bad) in str(info.value)
    with pytest.raises(PathError, match="'a..b'"):
        list(repo.log(paths=["a", "a..b"]))


# -- merges ---------------------------------------------------------------------------------


def test_a_merge_that_took_the_path_from_a_parent_is_not_an_entry(repo: snapvc.Repository) -> None:
    base = repo.commit({"plan": "x", "other": 0}, message="base")
    a = repo.commit({"plan": "y", "other": 0}, message="a")
    repo.branch("side", at=base.id)
    b = repo.commit({"plan": "x", "other": 1}, branch="side", message="b")
    both = repo.commit({"plan": "y", "other": 1}, message="both", parents=(a.id, b.id))
    assert summary(list(repo.history("main", "plan"))) == [("a", "modified", "y", "x"), ("base", "added", "x", None)]
    assert [e.commit.message for e in repo.history("main", "other")] == ["b", "base"]
    # Each path from one parent, so the merge is like neither parent on the two together.
    assert [c.message for c in repo.log(paths=["plan", "other"])] == ["both", "b", "a", "base"]
    assert [c.message for c in repo.log(paths="plan")] == ["a", "base"]
    # The value from the second parent: still not a change of the path.
    theirs = repo.commit({"plan": "x", "other": 1}, message="theirs", parents=(both.id, b.id))
    assert [e.commit.message for e in repo.history("main", "plan", limit=1)] == ["a"]
    # A value unlike every parent's is an entry; kind and old are against the first parent.
    repo.branch("third", at=base.id)
    c = repo.commit({"other": 0}, branch="third", message="c")
    mine = repo.commit({"plan": "z", "other": 1}, message="mine", parents=(theirs.id, c.id))
    assert summary(list(repo.history("main", "plan"))) == [
        ("mine", "modified", "z", "x"), ("c", "removed", None, "x"), ("a", "modified", "y", "x"),
        ("base", "added", "x", None)]
    assert next(repo.history("main", "plan")) == HistoryEntry(mine, "modified", "z", "x")
    assert [e.commit.message for e in repo.history("third", "plan")] == ["c", "base"]
    assert next(repo.history("third", "plan")).kind == "removed"
    added = repo.commit({"plan": "w"}, branch="third", message="from nothing", parents=(c.id, mine.id))
    assert next(repo.history("third", "plan")) == HistoryEntry(added, "added", "w", None)


# -- against a model: each commit's value read whole ------------------------------------------


_MISSING = object()


def model_value(state: Any, path: tuple[str | int, ...]) -> Any:
    for step in path:
        if type(state) is dict and type(step) is str:
            state = state.get(step, _MISSING)
        elif type(state) in (list, tuple) and type(step) is int and 0 <= step < len(state):
            state = state[step]
        else:
            return _MISSING
        if state is _MISSING:
            break
    return state


def model_same(a: Any, b: Any) -> bool:
    if a is _MISSING or b is _MISSING:
        return a is b
    return not list(diff_values(a, b))


def random_leaf(rng: random.Random) -> Any:
    return rng.choice([
        0, 1, 1.0, True, None, "note", "note " * 600, b"bytes", (1, "t"), [1, 2], [1, [2, 3]],
        {"k": 1}, {"k": 1.0}, {f"f{j}": f"field {j} " * 12 for j in range(40)},
        [f"item {j}" for j in range(400)], [f"item {j}" for j in range(399)] + ["other"],
    ])


def random_state(rng: random.Random, i: int) -> dict[str, Any]:
    state: dict[str, Any] = {"i": i}
    shape = rng.randrange(5)
    if shape == 0:
        return state
    if shape == 1:
        state["a"] = "a scalar"
    elif shape == 2:
        state["a"] = [random_leaf(rng), random_leaf(rng)]
    else:
        state["a"] = {"b": random_leaf(rng)} if rng.random() < 0.8 else {"c": 1}
        if rng.random() < 0.5:
            state["a"]["wide"] = {f"w{j}": j for j in range(rng.choice([10, 500]))}
    return state


@pytest.mark.parametrize("seed", range(4))
def test_history_equals_comparing_whole_states(seed: int) -> None:
    rng = random.Random(seed)
    repo = snapvc.open("memory://")
    states = []
    for i in range(60):
        state = random_state(rng, i) if rng.random() < 0.7 or not states else dict(states[-1], i=i)
        states.append(state)
        repo.commit(state, message=f"c{i}")
    for path in [("a", "b"), ("a", 1), ("a", "wide", "w7"), ("a", "b", 1), ("a", "b", "k")]:
        expected = []
        for i in reversed(range(len(states))):
            now = model_value(states[i], path)
            before = model_value(states[i - 1], path) if i else _MISSING
            if not model_same(now, before):
                kind = "added" if before is _MISSING else "removed" if now is _MISSING else "modified"
                expected.append((f"c{i}", kind, None if now is _MISSING else now,
                                 None if before is _MISSING else before))
        assert summary(list(repo.history("main", path))) == expected, path
        assert [c.message for c in repo.log(paths=path)] == [e[0] for e in expected]


# -- log filters ------------------------------------------------------------------------------


def test_log_since_and_until_are_inclusive(repo: snapvc.Repository) -> None:
    commits = [repo.commit({"n": i}, message=f"c{i}", metadata={"odd": i % 2 == 1}) for i in range(6)]

    def messages(**filters: Any) -> list[str]:
        return [c.message for c in repo.log(**filters)]

    assert messages(since=commits[2].time) == ["c5", "c4", "c3", "c2"]
    assert messages(until=commits[2].time) == ["c2", "c1", "c0"]
    assert messages(since=commits[2].time, until=commits[4].time) == ["c4", "c3", "c2"]
    assert messages(since=commits[2].timestamp_us / 1e6) == ["c5", "c4", "c3", "c2"]
    assert messages(until=commits[3].timestamp_us // 1_000_000) == ["c3", "c2", "c1", "c0"]
    naive_local = commits[3].time.astimezone().replace(tzinfo=None)  # a naive datetime is local time
    assert messages(since=naive_local) == ["c5", "c4", "c3"]
    in_utc_plus_2 = commits[3].time.astimezone(timezone(timedelta(hours=2)))
    assert messages(until=in_utc_plus_2) == ["c3", "c2", "c1", "c0"]
    assert messages(since=commits[5].time + timedelta(microseconds=1)) == []
    assert messages(since=datetime(2000, 1, 1, tzinfo=UTC), limit=2) == ["c5", "c4"]
    assert messages(since=commits[1].time, until=commits[4].time, where={"odd": True}) == ["c3", "c1"]
    with pytest.raises(TypeError, match="since"):
        list(repo.log(since="yesterday"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="until"):
        list(repo.log(until=True))


def test_log_paths_with_where_and_times(repo: snapvc.Repository) -> None:
    states = [{"plan": "a", "n": 0}, {"plan": "a", "n": 1}, {"plan": "b", "n": 1}, {"n": 2},
              {"plan": "b", "n": 2}, {"plan": "b", "n": 2, "notes": {"x": 1}}]
    commits = [repo.commit(s, message=f"c{i}", metadata={"i": i}) for i, s in enumerate(states)]
    assert [c.message for c in repo.log(paths="plan")] == ["c4", "c3", "c2", "c0"]
    assert [c.message for c in repo.log(paths=("plan",))] == ["c4", "c3", "c2", "c0"]
    assert [c.message for c in repo.log(paths=["plan", "n"])] == ["c4", "c3", "c2", "c1", "c0"]
    assert [c.message for c in repo.log(paths=["notes.x", "notes"])] == ["c5"]
    assert [c.message for c in repo.log(paths=[])] == []
    assert [c.message for c in repo.log(paths="plan", where=lambda c: c.metadata["i"] % 2 == 0)] == ["c4", "c2",
                                                                                                     "c0"]
    assert [c.message for c in repo.log(paths="plan", since=commits[3].time, limit=1)] == ["c4"]
    assert [c.message for c in repo.log(paths="plan", until=commits[1].time)] == ["c0"]


# -- what is read ---------------------------------------------------------------------------


@pytest.mark.slow
def test_history_reads_only_the_nodes_on_the_path() -> None:
    rng = random.Random(5)
    commits = 500
    repo = snapvc.open("memory://")
    # The scratchpad is a map object of its own (its notes fill more than a node holds
    # inline); the library beside it is 10,000 documents, each an object of its own.
    body = "text " * 420
    state = {
        "scratchpad": {f"note-{k:02d}": f"note {k} " * 12 for k in range(25)},
        "library": {f"doc-{k:05d}": f"document {k} " + body for k in range(10_000)},
    }
    for i in range(commits):
        for key in rng.sample(sorted(state["scratchpad"]), 3):
            state["scratchpad"][key] = f"note {i} {rng.random()} " * 4
        if i % 100 == 99:
            state["library"][f"doc-{rng.randrange(10_000):05d}"] = f"edited at {i} " + body
        repo.commit(state, message=f"step {i}")

    repo.loader.cache.clear()
    before = repo.loader.objects_read
    assert repo.checkout("main") == state
    in_one_state = repo.loader.objects_read - before

    repo.loader.cache.clear()
    before = repo.loader.objects_read
    entries = list(repo.history("main", "scratchpad.note-07"))
    read = repo.loader.objects_read - before
    assert entries and entries[-1].commit.message == "step 0"
    assert entries[0].value == state["scratchpad"]["note-07"]
    depth = 2  # the root, then the scratchpad
    assert read <= commits * depth, read
    assert read < in_one_state / 10, (read, in_one_state)

    repo.loader.cache.clear()
    before = repo.loader.objects_read
    assert [c.id for c in repo.log(paths="scratchpad.note-07")] == [e.commit.id for e in entries]
    assert repo.loader.objects_read - before <= commits * depth
