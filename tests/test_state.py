"""The State working copy: dotted paths, dirty-path tracking (a snapshot never misses a
change, and costs what changed), checkpoints, restore, reset, fork and rollback."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import math
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import snapvc
from snapvc import (
    Checkpoint,
    PathError,
    RefConflictError,
    State,
    UnknownRevisionError,
    UnsupportedValueError,
)
from snapvc.encoding.writer import EncodeCache, Encoder
from tests.fakes import TickingClock


@pytest.fixture(params=["memory", "sqlite"])
def repo(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[snapvc.Repository]:
    location = "memory://" if request.param == "memory" else tmp_path / "repo.snapvc"
    with snapvc.open(location, clock=TickingClock(), author="tester") as r:
        yield r


def committed(repo: snapvc.Repository, rev: str = "main") -> dict[str, Any]:
    return repo.checkout(repo.resolve(rev))


def object_count(repo: snapvc.Repository) -> int:
    return sum(1 for _ in repo.store.iter_ids())


# -- loading and the mapping protocol -----------------------------------------------------


def test_a_new_branch_starts_empty_and_the_first_snapshot_creates_it(repo: snapvc.Repository) -> None:
    state = repo.state("main")
    assert len(state) == 0 and state.base is None and state.checkpoint is None
    assert "main" not in repo.branches()
    state["a"] = 1
    cp = state.snapshot(message="first")
    assert repo.branches()["main"].hex == cp.id
    assert cp.version == 1 and cp.parent_id is None and cp.branch == "main"
    assert state.base is not None and state.base.hex == cp.id


def test_state_loads_the_latest_commit(repo: snapvc.Repository) -> None:
    repo.commit({"a": 1}, branch="main")
    repo.commit({"a": 2, "b": [1, 2]}, branch="main")
    state = repo.state("main")
    assert dict(state) == {"a": 2, "b": [1, 2]}
    assert state.checkpoint is not None and state.checkpoint.version == 2
    assert repo.state().branch == "main"  # HEAD's branch by default


def test_mapping_protocol_on_top_level_keys(repo: snapvc.Repository) -> None:
    state = repo.state()
    state["messages"] = [{"role": "user"}]
    state["a.b"] = 1  # [] takes a top-level key as it is
    assert state["a.b"] == 1 and "a.b" in state and "a" not in state
    assert len(state) == 2 and sorted(state) == ["a.b", "messages"]
    assert state["messages"][0]["role"] == "user"
    del state["a.b"]
    assert "a.b" not in state
    with pytest.raises(KeyError):
        state["missing"]
    assert state.pop("missing", 7) == 7
    assert state.setdefault("x", 3) == 3 and state["x"] == 3
    with pytest.raises(PathError, match="'missing'"):
        del state["missing"]
    state.snapshot()
    assert committed(repo) == {"messages": [{"role": "user"}], "x": 3}


# -- dotted paths ------------------------------------------------------------------------


def test_set_creates_missing_dicts_and_get_reads_through_lists(repo: snapvc.Repository) -> None:
    state = repo.state()
    state.set("research.findings", ["a", "b"])
    state.set("research.meta.deep.er", 1)
    assert state.get("research.findings.0") == "a"
    assert state.get("research.findings.-1") == "b"
    assert state.get("research.meta") == {"deep": {"er": 1}}
    state.set("research.findings.1", "B")
    state.set(("odd.key", "with.dots"), 5)  # a tuple of steps for keys holding dots
    assert state.get(("odd.key", "with.dots")) == 5
    state.set(("research", "findings", 0), "A")
    state.snapshot()
    assert committed(repo) == {"research": {"findings": ["A", "B"], "meta": {"deep": {"er": 1}}},
                               "odd.key": {"with.dots": 5}}


def test_get_default_for_missing_keys_and_indexes(repo: snapvc.Repository) -> None:
    state = repo.state()
    state.update({"a.b": [1, 2], "c": 2})
    assert state.get("a.x") is None
    assert state.get("a.x.y", "dflt") == "dflt"
    assert state.get("a.b.5", "dflt") == "dflt"
    assert state.get("a.b.-3", "dflt") == "dflt"
    assert state.get("nothing") is None


@pytest.mark.parametrize(
    "call, path, words",
    [
        (lambda s: s.get("c.x"), "c.x", "'c' is a int, not a dict"),
        (lambda s: s.set("c.x", 1), "c.x", "'c' is a int"),
        (lambda s: s.get("a.b.x"), "a.b.x", "'a.b' is a list: 'x' is not an index"),
        (lambda s: s.set("a.b.7", 1), "a.b.7", "index 7 is out of range for 'a.b', a list of 2"),
        (lambda s: s.set("t.0", 1), "t.0", "'t' is a tuple, which cannot change in place"),
        (lambda s: s.delete("t.0"), "t.0", "'t' is a tuple"),
        (lambda s: s.delete("a.zzz"), "a.zzz", "'a' has no key 'zzz'"),
        (lambda s: s.delete("a.b.9"), "a.b.9", "out of range"),
        (lambda s: s.get(""), "", "is empty"),
        (lambda s: s.set("a..b", 1), "a..b", "empty step"),
        (lambda s: s.set("a.", 1), "a.", "empty step"),
        (lambda s: s.get(()), (), "is empty"),
        (lambda s: s.get(("a", 1.5)), ("a", 1.5), "steps are str keys or int indexes"),
        (lambda s: s.get(("a", 0)), ("a", 0), "'a' is a dict, whose keys are str"),
        (lambda s: s.set(("new", 0), 1), ("new", 0), "'new' does not exist, and 0 is not a key"),
        (lambda s: s.get(3), 3, "a dotted str or a tuple"),
    ],
)
def test_a_bad_path_is_a_clear_error_naming_it(repo: snapvc.Repository, call: Any, path: Any, words: str) -> None:
    state = repo.state()
    state.update({"a.b": [1, 2], "c": 2, "t": (1, 2)})
    with pytest.raises(PathError) as info:
        call(state)
    assert info.value.path == path
    assert repr(path) in str(info.value) and words in str(info.value)
    assert isinstance(info.value, KeyError) and isinstance(info.value, snapvc.SnapvcError)
    assert state.get("new") is None  # a failed set created nothing


def test_delete_and_update(repo: snapvc.Repository) -> None:
    state = repo.state()
    state.update({"a.b": 1, "a.c": [1, 2, 3], "d": 2}, e=5)
    state.delete("a.b")
    state.delete("a.c.0")
    state.delete("d")
    state.snapshot()
    assert committed(repo) == {"a": {"c": [2, 3]}, "e": 5}


# -- a snapshot never misses a change -------------------------------------------------------


def test_snapshot_finds_in_place_changes_to_values_handed_out(repo: snapvc.Repository) -> None:
    state = repo.state()
    state.set("research", {"findings": [{"text": "x"}], "notes": {"n": 1}})
    state.set("messages", [])
    state.snapshot()
    findings = state.get("research.findings")
    findings.append({"text": "y"})
    findings[0]["text"] = "X"
    state["messages"].append({"role": "user"})
    state.snapshot()
    assert committed(repo) == {"research": {"findings": [{"text": "X"}, {"text": "y"}], "notes": {"n": 1}},
                               "messages": [{"role": "user"}]}
    # The caller still holds them: changes after later snapshots are found too.
    for i in range(3):
        state.set("counter", i)
        state.snapshot()
    findings[1]["text"] = "Y"
    deep = findings[0]
    state.snapshot()
    deep["more"] = [1]
    state.snapshot()
    assert committed(repo)["research"]["findings"] == [{"text": "X", "more": [1]}, {"text": "Y"}]


def test_snapshot_finds_changes_to_a_value_the_caller_set_and_kept(repo: snapvc.Repository) -> None:
    state = repo.state()
    mine = {"plan": ["a"]}
    state.set("scratch.mine", mine)
    state.snapshot()
    mine["plan"].append("b")
    state.snapshot()
    assert committed(repo)["scratch"] == {"mine": {"plan": ["a", "b"]}}
    shared: list[int] = []
    state.set("x", shared)
    state.set("y", shared)
    state.snapshot()
    shared.append(1)
    state.delete("x")  # still held at y
    state.snapshot()
    assert committed(repo)["y"] == [1] and "x" not in committed(repo)


def test_items_and_values_hand_out_values_too(repo: snapvc.Repository) -> None:
    state = repo.state()
    state.update({"a": [1], "b": {"c": 1}})
    state.snapshot()
    for key, value in state.items():
        assert key in state
        if isinstance(value, list):
            value.append(2)
        else:
            value["c"] = 2
    state.snapshot()
    assert committed(repo) == {"a": [1, 2], "b": {"c": 2}}


def test_removing_a_list_element_shifts_the_watched_ones_after_it(repo: snapvc.Repository) -> None:
    state = repo.state()
    state.set("items", [{"i": 0}, {"i": 1}, {"i": 2}])
    state.snapshot()
    held = state.get("items.2")
    state.delete("items.0")  # held is now items.1
    state.snapshot()
    held["i"] = 20
    state.snapshot()
    assert committed(repo) == {"items": [{"i": 1}, {"i": 20}]}


def test_a_failed_snapshot_loses_no_change(repo: snapvc.Repository) -> None:
    state = repo.state()
    state.set("a.b", 1)
    state.snapshot()
    state.set("a.c", 2)
    state.set("bad", {1, 2})
    with pytest.raises(UnsupportedValueError, match=r"state\['bad'\]"):
        state.snapshot()
    state.delete("bad")
    state.snapshot()
    assert committed(repo) == {"a": {"b": 1, "c": 2}}


def test_random_operations_always_snapshot_the_working_copy(repo: snapvc.Repository) -> None:
    """A small property test: whatever mix of sets, deletes, in-place changes through held
    values and snapshots, each snapshot stores exactly the working copy."""
    rnd = random.Random(7)
    state = repo.state()
    held: list[Any] = []

    def some_value(depth: int = 0) -> Any:
        kind = rnd.randrange(5 if depth < 2 else 3)
        if kind == 0:
            return rnd.randrange(100)
        if kind == 1:
            return "s" * rnd.randrange(3000)
        if kind == 2:
            return None
        if kind == 3:
            return [some_value(depth + 1) for _ in range(rnd.randrange(4))]
        return {rnd.choice("abcd"): some_value(depth + 1) for _ in range(rnd.randrange(4))}

    def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, child in items:
            yield (*prefix, key)
            yield from paths(child, (*prefix, key))

    for _ in range(300):
        op = rnd.randrange(6)
        existing = list(paths(dict(state._data)))
        if op == 0 or not existing:
            try:
                state.set(rnd.choice("pqrs") + "." + rnd.choice("xyz"), some_value())
            except PathError:  # a step into a list or a scalar
                pass
        elif op == 1:
            path = rnd.choice(existing)
            state.set(path, some_value()) if path[-1] != 0 or rnd.random() < 0.5 else state.delete(path)
        elif op == 2:
            state.delete(rnd.choice(existing))
        elif op == 3:
            value = state.get(rnd.choice(existing))
            if isinstance(value, (dict, list)):
                held.append(value)
        elif op == 4 and held:
            target = rnd.choice(held)
            if isinstance(target, list):
                target.append(some_value(1)) if rnd.random() < 0.6 or not target else target.pop(0)
            else:
                target[rnd.choice("abcd")] = some_value(1)
        else:
            state.snapshot()
            assert committed(repo) == state._data
    state.snapshot()
    assert committed(repo) == state._data


# -- a snapshot costs what changed -----------------------------------------------------------


def large_state() -> dict[str, Any]:
    return {
        "docs": [{"id": i, "title": f"doc {i}", "text": f"document {i} " + "words " * 700} for i in range(600)],
        "library": {f"book-{i:04d}": {"pages": i, "summary": "summary " * 300} for i in range(400)},
        "messages": [{"role": "user", "content": f"message {i}"} for i in range(300)],
        "blob": bytes(range(256)) * 400,
    }


def test_one_set_on_a_large_state_writes_and_visits_only_what_changed(repo: snapvc.Repository,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    repo.commit(large_state(), branch="main")
    state = repo.state("main")
    state.snapshot()  # the first snapshot after loading encodes the loaded objects once
    visits = {"containers": 0}
    encode_dict, encode_seq = Encoder._encode_dict, Encoder._encode_seq

    def counting_dict(self: Encoder, *args: Any, **kwargs: Any) -> bytes:
        visits["containers"] += 1
        return encode_dict(self, *args, **kwargs)

    def counting_seq(self: Encoder, *args: Any, **kwargs: Any) -> bytes:
        visits["containers"] += 1
        return encode_seq(self, *args, **kwargs)

    monkeypatch.setattr(Encoder, "_encode_dict", counting_dict)
    monkeypatch.setattr(Encoder, "_encode_seq", counting_seq)
    for path, value in [("docs.321.title", "new title"), ("library.book-0123.pages", -1),
                        ("messages.150.content", "edited"), ("new.key", 1)]:
        before = object_count(repo)
        visits["containers"] = 0
        state.set(path, value)
        state.snapshot()
        # A changed leaf node, the path of tree nodes above it, the root, the commit.
        assert object_count(repo) - before <= 12, path
        assert visits["containers"] <= 12, path  # of about 2,000 containers in the state
        assert state.get(path) == value
    state["messages"].append({"role": "assistant", "content": "appended"})  # a watched list: checked as usual
    state.snapshot()
    expected = large_state()
    expected["docs"][321]["title"] = "new title"
    expected["library"]["book-0123"]["pages"] = -1
    expected["messages"][150]["content"] = "edited"
    expected["messages"].append({"role": "assistant", "content": "appended"})
    expected["new"] = {"key": 1}
    assert committed(repo) == expected
    assert repo.get_commit(repo.resolve("main")).tree == Encoder().encode_root(expected)


def test_append_keeps_a_copy_and_visits_only_the_new_element(repo: snapvc.Repository,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    repo.commit(large_state(), branch="main")
    state = repo.state("main")
    state.snapshot()
    visits = {"containers": 0}
    encode_dict = Encoder._encode_dict

    def counting_dict(self: Encoder, *args: Any, **kwargs: Any) -> bytes:
        visits["containers"] += 1
        return encode_dict(self, *args, **kwargs)

    monkeypatch.setattr(Encoder, "_encode_dict", counting_dict)
    expected = large_state()
    for i in range(5):
        message = {"role": "assistant", "content": f"reply {i}", "tool_calls": [{"id": f"call_{i}"}]}
        state.append("messages", message)
        message["content"] = "changed after the append"  # the state kept its own copy
        message["tool_calls"][0]["id"] = "changed too"
        expected["messages"].append({"role": "assistant", "content": f"reply {i}", "tool_calls": [{"id": f"call_{i}"}]})
        visits["containers"] = 0
        state.snapshot()
        assert visits["containers"] <= 4  # the root, the new message and its call: not the 300 before
    state.extend("log.entries", [1, (2, [3])])  # missing lists are created
    expected["log"] = {"entries": [1, (2, [3])]}
    state.snapshot()
    assert committed(repo) == expected
    assert state.get("messages.-1.content") == "reply 4"


def test_append_to_something_else_than_a_list_is_refused(repo: snapvc.Repository) -> None:
    state = repo.state("main")
    state.set("notes", {"a": 1})
    state.set("pair", (1, 2))
    for path in ("notes", "notes.a", "pair"):
        with pytest.raises(PathError) as info:
            state.append(path, 3)
        assert path in str(info.value) and "not a list" in str(info.value)
    assert state.get("notes") == {"a": 1} and state.get("pair") == (1, 2)


def test_a_plain_commit_after_state_snapshots_still_sees_every_change() -> None:
    """Snapshots through dirty paths leave some cache entries without their flat
    snapshot; a later commit without dirty paths then checks those containers child by child."""
    cache = EncodeCache()
    state = large_state()
    encoder = Encoder(cache)
    encoder.encode_root(state)
    cache.commit()
    state["docs"][5]["title"] = "changed"
    encoder = Encoder(cache)
    assert encoder.encode_root(state, [("docs", 5, "title")]) == Encoder().encode_root(state)
    cache.commit()
    state["docs"][7]["text"] = "changed in place, no dirty path told"
    state["library"]["book-0001"]["pages"] = 99
    assert Encoder(cache).encode_root(state) == Encoder().encode_root(state)


def test_dirty_paths_above_and_below_are_checked_and_others_trusted() -> None:
    cache = EncodeCache()
    state = {"a": {"b": [1, {"c": 2}]}, "x": {"y": [3]}}
    Encoder(cache).encode_root(state)
    cache.commit()
    state["a"]["b"][1]["c"] = 20
    state["x"]["y"].append(4)  # not told: trusted, so the stale encoding is kept
    trusted = Encoder(cache).encode_root(state, [("a", "b")])
    state["x"]["y"].pop()
    assert trusted == Encoder().encode_root(state)
    assert Encoder(cache).encode_root(state, [()]) == Encoder().encode_root(state)  # () = everything


# -- checkpoints ---------------------------------------------------------------------------


def test_checkpoint_fields(repo: snapvc.Repository) -> None:
    state = repo.state("main")
    state["step"] = 1
    first = state.snapshot(message="one", metadata={"namespace": "research", "agent": "a"},
                           token_usage={"input": 10, "output": 2})
    state["step"] = 2
    second = state.snapshot()
    assert (first.version, second.version) == (1, 2)
    assert second.parent_id == first.id and first.parent_id is None
    assert first.token_usage == {"input": 10, "output": 2} and second.token_usage is None
    assert first.metadata == {"namespace": "research", "agent": "a"} and first.namespace == "research"
    assert second.metadata == {} and second.namespace == ""
    assert first.message == "one" and second.message == ""
    assert first.created_at.tzinfo == dt.UTC and first.created_at < second.created_at
    commit = repo.get_commit(repo.resolve(first.id))
    assert commit.metadata["token_usage"] == {"input": 10, "output": 2}
    assert dict(first.values) == {"step": 1} and dict(second.values) == {"step": 2}
    with pytest.raises(TypeError):
        first.values["step"] = 3  # type: ignore[index]
    assert [cp.version for cp in state.checkpoints()] == [2, 1]
    assert state.checkpoint == second


@dataclass
class Finding:
    text: str
    score: float
    tags: tuple[str, ...]


def test_checkpoint_round_trips_through_json_exactly(repo: snapvc.Repository) -> None:
    values = {
        "bytes": b"\x00\xffraw",
        "long bytes": bytes(range(256)) * 100,
        "tuple": (1, "two", (3.0,)),
        "when": dt.datetime(2024, 3, 31, 2, 30, tzinfo=ZoneInfo("Europe/Paris")),
        "naive": dt.datetime(2024, 1, 1, 12, 0, 0, 5),
        "day": dt.date(2024, 2, 29),
        "span": dt.timedelta(days=1, microseconds=3),
        "nan": float("nan"),
        "inf": [float("inf"), float("-inf"), -0.0, 0.1],
        "big": 2**100,
        "negative big": -(2**64),
        "money": Decimal("1.10"),
        "id": uuid.UUID(int=7),
        "tagged": {"$snapvc": "not a tag", "n": None, "t": True},
        "finding": Finding("x", 0.5, ("a",)),
        "nested": [{"a": [b"b", ("c", {"d": float("nan")})]}],
    }
    state = repo.state()
    state.update({(k,): v for k, v in values.items()})
    cp = state.snapshot(message="all the types", metadata={"step": 3}, token_usage={"total": 12})
    record = cp.to_dict()
    text = json.dumps(record, allow_nan=False)  # strictly JSON
    back = Checkpoint.from_dict(json.loads(text))
    assert back == cp and cp == back
    assert type(back.values["bytes"]) is bytes and back.values["bytes"] == values["bytes"]
    assert back.values["tuple"] == values["tuple"] and type(back.values["tuple"][2]) is tuple
    assert back.values["when"] == values["when"] and back.values["when"].tzinfo == ZoneInfo("Europe/Paris")
    assert math.isnan(back.values["nan"]) and math.copysign(1, back.values["inf"][2]) == -1
    assert back.values["big"] == 2**100 and back.values["finding"] == values["finding"]
    assert back.values["tagged"] == {"$snapvc": "not a tag", "n": None, "t": True}
    assert back.created_at == cp.created_at and back.version == cp.version
    different = Checkpoint.from_dict({**record, "values": {**record["values"], "nan": 1.0}})
    assert different != cp
    assert hash(back) == hash(cp)
    with pytest.raises(ValueError, match="missing 'values'"):
        Checkpoint.from_dict({k: v for k, v in record.items() if k != "values"})


# -- restore, reset, fork --------------------------------------------------------------------


def test_restore_makes_the_working_copy_exactly_that_state(repo: snapvc.Repository) -> None:
    state = repo.state()
    state.update({"a": 1, "b": [1]})
    first = state.snapshot()
    state.update({"a": 2, "c": {"new": True}})
    state["b"].append(2)
    second = state.snapshot()
    state.set("uncommitted", 1)
    state.restore(first)
    assert dict(state) == {"a": 1, "b": [1]}  # c and uncommitted are gone
    assert repo.branches()["main"].hex == second.id  # the branch did not move
    third = state.snapshot(message="back to the first state")
    assert third.parent_id == second.id and third.version == 3
    assert committed(repo) == {"a": 1, "b": [1]}
    state.restore("main~1")  # any rev
    assert dict(state) == {"a": 2, "b": [1, 2], "c": {"new": True}}
    state.get("b").append(3)
    state.snapshot()
    assert committed(repo)["b"] == [1, 2, 3]


def test_reset_moves_the_branch_and_reloads(repo: snapvc.Repository) -> None:
    state = repo.state()
    cps = []
    for i in range(3):
        state["step"] = i
        cps.append(state.snapshot())
    state["step"] = 99  # dropped by the reset
    cp = state.reset(cps[0])
    assert cp == cps[0] and dict(state) == {"step": 0}
    assert repo.branches()["main"].hex == cps[0].id
    state["step"] = 10
    again = state.snapshot()
    assert again.version == 2 and again.parent_id == cps[0].id
    state.reset("main@{2}")  # the reflog undoes it: main before the reset
    assert dict(state) == {"step": 2}


def test_fork_starts_a_branch_at_the_last_snapshot(repo: snapvc.Repository) -> None:
    state = repo.state()
    state["plan"] = "a"
    base = state.snapshot()
    state["plan"] = "uncommitted"
    other = state.fork("try-b")
    assert isinstance(other, State) and other.branch == "try-b"
    assert dict(other) == {"plan": "a"}  # uncommitted changes stay where they were made
    assert state["plan"] == "uncommitted"
    other["plan"] = "b"
    forked = other.snapshot()
    assert forked.parent_id == base.id and forked.version == 2 and forked.branch == "try-b"
    assert committed(repo, "main") == {"plan": "a"}
    early = other.fork("from-root", at=base)
    assert dict(early) == {"plan": "a"}
    with pytest.raises(snapvc.RefExistsError):
        state.fork("try-b")
    with pytest.raises(UnknownRevisionError, match="snapshot first"):
        repo.state("empty").fork("x")


def test_snapshot_refuses_to_replace_a_commit_it_has_not_seen(repo: snapvc.Repository) -> None:
    state = repo.state()
    state["a"] = 1
    state.snapshot()
    repo.commit({"a": "someone else"}, branch="main")
    state["a"] = 2
    with pytest.raises(RefConflictError):
        state.snapshot()
    assert committed(repo) == {"a": "someone else"}


# -- rollback ------------------------------------------------------------------------------


def test_rollback_on_error_restores_the_working_copy(repo: snapvc.Repository) -> None:
    state = repo.state()
    state.update({"messages": [{"role": "user"}], "scratch": {"n": 1}, "keep": "k"})
    state.snapshot()
    held = state["messages"]  # handed out before the block
    state.set("scratch.pending", True)  # uncommitted at entry: kept by the rollback
    with pytest.raises(RuntimeError, match="tool failed"), state.rollback_on_error() as same:
        assert same is state
        held.append({"role": "tool"})
        state.get("scratch")["n"] = 2
        state.set("new.key", 1)
        state.delete("keep")
        state.set("scratch", "replaced")
        raise RuntimeError("tool failed")
    assert dict(state) == {"messages": [{"role": "user"}], "scratch": {"n": 1, "pending": True}, "keep": "k"}
    state.snapshot()
    assert committed(repo) == {"messages": [{"role": "user"}], "scratch": {"n": 1, "pending": True}, "keep": "k"}
    with state.rollback_on_error():
        state["messages"].append({"role": "assistant"})
    state.snapshot()
    assert committed(repo)["messages"] == [{"role": "user"}, {"role": "assistant"}]


def test_rollback_on_error_async_and_nested(repo: snapvc.Repository) -> None:
    state = repo.state()
    state.update({"a": {"n": 0}, "b": [0]})

    async def run() -> None:
        async with state.rollback_on_error():
            state.set("a.n", 1)
            with pytest.raises(ValueError):
                async with state.rollback_on_error():
                    state.set("a.n", 2)
                    state["b"].append(2)
                    await asyncio.sleep(0)
                    raise ValueError("inner")
            assert dict(state) == {"a": {"n": 1}, "b": [0]}
            state["b"].append(1)
            raise KeyError("outer")

    with pytest.raises(KeyError, match="outer"):
        asyncio.run(run())
    assert dict(state) == {"a": {"n": 0}, "b": [0]}
    cp = state.snapshot()
    assert dict(cp.values) == {"a": {"n": 0}, "b": [0]}


def test_rollback_after_snapshot_and_restore_inside_the_block(repo: snapvc.Repository) -> None:
    state = repo.state()
    state.update({"a": [1], "b": 1})
    first = state.snapshot()
    with pytest.raises(RuntimeError), state.rollback_on_error():
        state["a"].append(2)
        state.snapshot()  # stays in history
        state.restore(first)
        state["c"] = 3
        raise RuntimeError
    assert dict(state) == {"a": [1], "b": 1}
    assert committed(repo) == {"a": [1, 2], "b": 1}
    state.snapshot()
    assert committed(repo) == {"a": [1], "b": 1}
