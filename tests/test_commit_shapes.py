"""Commits of the shapes agents really hand over: containers rebuilt at every step
(``{**state, "messages": messages + [new]}``), typed values (dataclasses, pydantic
models), and both changed in place. Whatever the shape, what is stored is exactly the
state: the same tree as encoding it from scratch. And the work of a commit follows the
change: counted here in containers encoded, never timed."""

from __future__ import annotations

import copy
import dataclasses
import functools
import random
from typing import Any

import pydantic
import pytest

import snapvc
from snapvc.encoding import writer
from tests.test_chunking import commit_fails, edit_container, fresh_tree


@dataclasses.dataclass
class Note:
    title: str
    tags: list[str]
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(slots=True)
class Point:
    x: int
    labels: list[str]


class Message(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    role: str
    content: str
    meta: dict[str, Any] = {}
    parts: list[Any] = []


def leaf(rnd: random.Random) -> Any:
    return rnd.choice([1, 1.0, True, "s", None, -0.0, 0.0, b"b", "x" * rnd.choice([10, 3000]), (1, 2)])


def value(rnd: random.Random, depth: int) -> Any:
    if depth > 2 or rnd.random() < 0.25:
        return leaf(rnd)
    pick = rnd.random()
    n = rnd.choice([0, 1, 3, 20, 70]) if depth == 0 else rnd.choice([0, 1, 3])
    if pick < 0.35:
        return [value(rnd, depth + 1) for _ in range(n)]
    if pick < 0.7:
        return {f"k{i}": value(rnd, depth + 1) for i in range(n)}
    if pick < 0.8:
        return Note(f"t{rnd.randrange(9)}", [f"g{i}" for i in range(rnd.randrange(3))], {"v": value(rnd, depth + 1)})
    if pick < 0.88:
        return Point(rnd.randrange(9), ["a"] * rnd.randrange(3))
    return Message(role="user", content=f"c{rnd.randrange(99)}", meta={"n": value(rnd, depth + 1)},
                   parts=[value(rnd, depth + 1)])


def places(state: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    """Every container and typed value in ``state`` with its path."""
    out = [(path, state)]
    t = type(state)
    if t is dict:
        for k, v in state.items():
            out += places(v, (*path, k))
    elif t is list:
        for i, v in enumerate(state):
            out += places(v, (*path, i))
    elif t in (Note, Point, Message):
        for name in ("tags", "extra", "labels", "meta", "parts"):
            if hasattr(state, name):
                out += places(getattr(state, name), (*path, name))
    return [(p, v) for p, v in out if type(v) in (dict, list, Note, Point, Message)]


def edit(rnd: random.Random, target: Any) -> None:
    """One random change made in place to ``target``."""
    t = type(target)
    if t is list or t is dict:
        edit_container(rnd, target, value, leaf)
        return
    op = rnd.random()
    if t is Note:
        if op < 0.5:
            target.title = f"t{rnd.randrange(99)}"
        else:
            target.extra = {"w": value(rnd, 1)}
    elif t is Point:
        target.x = target.x + 1 if op < 0.5 else -0.0  # type: ignore[assignment]
    else:
        if op < 0.3:
            target.content = f"edited {rnd.randrange(99)}"
        elif op < 0.6:
            setattr(target, f"x{rnd.randrange(3)}", value(rnd, 1))  # an extra field
        else:
            target.meta = {"m": value(rnd, 1)}


def rebuilt(state: Any, path: tuple[Any, ...], change: Any) -> Any:
    """``state`` with new containers along ``path`` (each a copy of the old holding the
    same other elements), ``change`` applied to the copy of the container at the end: an
    immutable update, as LangGraph's reducers and functional agent loops make."""
    t = type(state)
    if not path:
        if t is dict:
            copied: Any = dict(state)
        elif t is list:
            copied = list(state)
        else:
            copied = copy.copy(state)
        change(copied)
        return copied
    step, rest = path[0], path[1:]
    if t is dict:
        return {**state, step: rebuilt(state[step], rest, change)}
    if t is list:
        return [*state[:step], rebuilt(state[step], rest, change), *state[step + 1:]]
    copied = copy.copy(state)  # a typed value: a new object holding the same other fields
    setattr(copied, step, rebuilt(getattr(state, step), rest, change))
    return copied


SHAPES = ["in place", "rebuilt", "mixed"]


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
def test_random_edits_in_every_shape_match_encoding_from_scratch(shape: str) -> None:
    for seed in range(6):
        rnd = random.Random(f"{shape} {seed}")
        repo = snapvc.open("memory://")
        state: dict[str, Any] = {
            "messages": [value(rnd, 1) for _ in range(rnd.choice([20, 90]))],
            "models": [Message(role="assistant", content=f"m{i}", meta={"i": [i]}) for i in range(30)],
            "notes": {f"n{i}": Note(f"t{i}", ["a"]) for i in range(20)},
            "other": value(rnd, 0),
        }
        held: list[Any] = []  # old versions still held by the caller, committed on a side branch
        for step in range(25):
            for _ in range(rnd.choice([1, 2, 4])):
                path, target = rnd.choice(places(state))
                if shape == "in place" or (shape == "mixed" and rnd.random() < 0.5):
                    edit(rnd, target)
                else:
                    held.append(state)
                    state = rebuilt(state, path, functools.partial(edit, rnd))
            if step % 8 == 5:
                commit_fails(repo, state)
            c = repo.commit(state)
            assert repo.get_commit(c.id).tree == fresh_tree(state), (shape, seed, step)
            if held and step % 6 == 2:  # an old state, its containers taken over since
                old = rnd.choice(held)
                side = repo.commit(old, branch="side")
                assert repo.get_commit(side.id).tree == fresh_tree(old), (shape, seed, step)
        assert repo.checkout("main") == state


def test_a_list_taken_over_by_its_rebuilt_copy_is_still_committed_right_when_changed() -> None:
    repo = snapvc.open("memory://")
    messages = [{"role": "user", "content": f"m{i}", "tags": [i]} for i in range(100)]
    state = {"messages": messages}
    repo.commit(state)
    grown = {"messages": messages + [{"role": "assistant", "content": "new", "tags": []}]}
    repo.commit(grown)  # the new list takes over the old one's encoding
    messages[3]["tags"].append("edited")  # shared by both lists
    messages.append({"role": "user", "content": "only in the old list", "tags": []})
    for tree_of in (grown, state):
        c = repo.commit(tree_of)
        assert repo.get_commit(c.id).tree == fresh_tree(tree_of)
        assert repo.checkout(c.id) == tree_of


def test_a_model_changed_in_place_inside_a_rebuilt_list_is_stored() -> None:
    repo = snapvc.open("memory://")
    models = [Message(role="user", content=f"m{i}", meta={"k": [i]}) for i in range(80)]
    repo.commit({"messages": models})
    models = models + [Message(role="assistant", content="answer")]
    models[10].meta["k"].append("in place")
    models[20].content = "assigned"  # pydantic records the field as set, in place
    models[30].__pydantic_fields_set__.discard("meta")
    point = Point(1, ["a"])
    state = {"messages": models, "point": point, "note": Note("t", ["a"])}
    repo.commit(state)
    point.labels.append("b")
    del state["note"].extra  # a dataclass attribute deleted: the class has no default for it
    state["note"].__dict__["extra"] = {"again": 1}
    c = repo.commit(state)
    assert repo.get_commit(c.id).tree == fresh_tree(state)
    back = repo.checkout("main")
    assert back["messages"][10].meta == {"k": [10, "in place"]}
    assert back["messages"][20].content == "assigned"
    assert "meta" not in back["messages"][30].model_fields_set
    assert back["point"].labels == ["a", "b"] and back["note"].extra == {"again": 1}


def test_a_computed_field_is_read_each_time() -> None:
    """A dataclass whose field is a property computed from elsewhere cannot be confirmed
    by what it holds: its fields are built each time."""
    source = {"value": 1}

    @dataclasses.dataclass
    class Computed:
        name: str

    Computed.name = property(lambda self: f"v{source['value']}")  # type: ignore[assignment,method-assign]
    repo = snapvc.open("memory://")
    state = {"items": [Computed.__new__(Computed) for _ in range(20)]}
    first = repo.commit(state)
    source["value"] = 2
    c = repo.commit(state)
    assert repo.get_commit(c.id).tree == fresh_tree(state) != repo.get_commit(first.id).tree


def count_encoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A counter of the dicts and typed values the encoder encodes (not reused whole)."""
    calls = [0]
    encode_dict = writer.Encoder._encode_dict

    def counting(self: writer.Encoder, *args: Any, **kwargs: Any) -> bytes:
        calls[0] += 1
        return encode_dict(self, *args, **kwargs)

    monkeypatch.setattr(writer.Encoder, "_encode_dict", counting)
    return calls


@pytest.mark.parametrize("typed", [False, True], ids=["dicts", "pydantic models"])
def test_a_rebuilt_history_costs_the_new_elements_not_the_old_ones(typed: bool,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def message(i: int) -> Any:
        if typed:
            return Message(role="user", content=f"message {i} " * 20, meta={"tags": [i]})
        return {"role": "user", "content": f"message {i} " * 20, "meta": {"tags": [i]}}

    repo = snapvc.open("memory://")
    state: dict[str, Any] = {"messages": [], "notes": {f"n{i}": f"note {i}" for i in range(40)}}
    calls = count_encoded(monkeypatch)
    per_commit = []
    for step in range(300):
        messages = state["messages"] + [message(2 * step), message(2 * step + 1)]
        if step % 25 == 24:  # one message removed and one replaced in the middle, as by id
            messages = [*messages[:10], *messages[11:20], message(-step), *messages[21:]]
        state = {**state, "messages": messages, "notes": {**state["notes"], f"n{step % 40}": f"changed at {step}"}}
        calls[0] = 0
        repo.commit(state)
        per_commit.append(calls[0])
    # Each commit encodes the root, the notes, and the new messages (and their meta):
    # as many at 600 messages as at 20, also when elements moved.
    assert per_commit[10] == per_commit[-2] <= 8, per_commit[:12]
    assert max(per_commit[10:]) <= 10, per_commit
    c = repo.commit(state)
    assert repo.get_commit(c.id).tree == fresh_tree(state)
