"""Values snapvc cannot store exactly are refused with ``UnsupportedValueError`` naming
the place in the state, and a refused commit leaves the repository as it was."""

from __future__ import annotations

import array
import copy
import enum
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import snapvc
from snapvc import UnsupportedValueError

WHEN = "state['memory'][3]['when']"


class Opaque:
    """A plain class: no adapter, and snapvc never pickles."""

    def __init__(self) -> None:
        self.value = 1


class FailingFields:
    pass


class NotADictFields:
    pass


snapvc.register_type(FailingFields, lambda obj: 1 / 0, lambda fields: FailingFields(), name="tests:FailingFields")
snapvc.register_type(NotADictFields, lambda obj: [1, 2], lambda fields: NotADictFields(), name="tests:NotADictFields")


class Text(str):
    pass


class Items(list):  # type: ignore[type-arg]
    pass


class Color(enum.Enum):
    RED = 1


class Mode(enum.StrEnum):
    FAST = "fast"


def make_state() -> dict[str, Any]:
    return {
        "memory": [{"what": f"fact {i}", "when": f"2024-01-{i + 1:02d}", "tags": ["t"]} for i in range(10)],
        "messages": [{"role": "user", "content": f"message {i} " + "words " * 40, "tags": [i]} for i in range(300)],
        "scratch": {"notes": "thinking", "plan": ["a", "b"]},
    }


BAD_VALUES: dict[str, tuple[Callable[[], Any], str]] = {
    "set": (lambda: {1, 2}, "set"),
    "empty set": (set, "set"),
    "frozenset": (lambda: frozenset({"a"}), "frozenset"),
    "object": (Opaque, "Opaque"),
    "bare object": (object, "object"),
    "function": (lambda: len, "builtin_function_or_method"),
    "OrderedDict": (lambda: OrderedDict(a=1), "OrderedDict"),
    "defaultdict": (lambda: defaultdict(list), "defaultdict"),
    "bytearray": (lambda: bytearray(b"abc"), "bytearray"),
    "memoryview": (lambda: memoryview(b"abc"), "memoryview"),
    "array": (lambda: array.array("i", [1, 2]), "array"),
    "str subclass": (lambda: Text("x"), "Text"),
    "list subclass": (lambda: Items([1]), "Items"),
    "complex": (lambda: 1 + 2j, "complex"),
    "enum": (lambda: Color.RED, "Color"),
    "str enum": (lambda: Mode.FAST, "Mode"),
    "lone surrogate": (lambda: "ok \ud800 not ok", "surrogate"),
    "lone surrogate in a long str": (lambda: "x" * 5000 + "\udfff", "surrogate"),
    "failing adapter": (FailingFields, "FailingFields"),
    "adapter returning a list": (NotADictFields, "NotADictFields"),
}


@pytest.fixture(params=["memory", "sqlite"])
def repo(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[snapvc.Repository]:
    location = "memory://" if request.param == "memory" else tmp_path / "unsupported.snapvc"
    with snapvc.open(location) as r:
        yield r


def assert_unharmed(repo: snapvc.Repository, tip: snapvc.ObjectId, expected: dict[str, Any], log_length: int) -> None:
    assert repo.resolve("main") == tip
    assert repo.branches() == {"main": tip}
    assert repo.checkout("main") == expected
    assert len(list(repo.log("main"))) == log_length
    assert len(repo.reflog("main")) == log_length


# -- the path names the exact place --------------------------------------------------------


@pytest.mark.parametrize("name", list(BAD_VALUES))
def test_bad_value_names_its_path(repo: snapvc.Repository, name: str) -> None:
    make, reason = BAD_VALUES[name]
    state = make_state()
    state["memory"][3]["when"] = make()
    with pytest.raises(UnsupportedValueError) as info:
        repo.commit(state)
    assert info.value.path == WHEN
    assert str(info.value).startswith(WHEN + ": ")
    assert reason in str(info.value)
    assert isinstance(info.value, snapvc.SnapvcError)
    assert repo.branches() == {}


@pytest.mark.parametrize(
    ("key", "shown"),
    [(1, "1"), (None, "None"), ((1, 2), "(1, 2)"), (b"k", "b'k'"), ("bad \udc80 key", "\\udc80"),
     (Text("sub"), "'sub'"), (Mode.FAST, "Mode")],
)
def test_bad_dict_key_names_the_dict_and_the_key(repo: snapvc.Repository, key: Any, shown: str) -> None:
    state = make_state()
    state["memory"][3]["when"] = {"fine": 1, key: "x"}
    with pytest.raises(UnsupportedValueError) as info:
        repo.commit(state)
    assert info.value.path == WHEN
    assert shown in str(info.value)


def test_bad_value_in_a_large_list_and_map(repo: snapvc.Repository) -> None:
    state = make_state()
    state["messages"][257]["tags"] = [1, 2, {3}]
    with pytest.raises(UnsupportedValueError) as info:
        repo.commit(state)
    assert info.value.path == "state['messages'][257]['tags'][2]"

    state = make_state()
    state["big"] = {f"key {i}": i for i in range(2000)}
    state["big"]["key 1234"] = {"inner": [None, Opaque()]}
    with pytest.raises(UnsupportedValueError) as info:
        repo.commit(state)
    assert info.value.path == "state['big']['key 1234']['inner'][1]"


def test_keys_that_need_quoting_are_shown_as_python(repo: snapvc.Repository) -> None:
    state = {"it's": {"a\nb": [0, {"é 🙂": {1}}]}}
    with pytest.raises(UnsupportedValueError) as info:
        repo.commit(state)
    assert info.value.path == "state[\"it's\"]['a\\nb'][1]['é 🙂']"


def test_bad_value_inside_a_tuple_and_a_typed_value(repo: snapvc.Repository) -> None:
    with pytest.raises(UnsupportedValueError) as info:
        repo.commit({"t": (1, (2, {3}))})
    assert info.value.path == "state['t'][1][1]"


# -- cycles ---------------------------------------------------------------------------------


def test_list_containing_itself(repo: snapvc.Repository) -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    with pytest.raises(UnsupportedValueError) as info:
        repo.commit({"a": loop})
    assert info.value.path == "state['a'][1]"
    assert "cycle" in str(info.value)


def test_dict_containing_itself_through_a_list(repo: snapvc.Repository) -> None:
    d: dict[str, Any] = {"x": 1}
    d["l"] = [d]
    with pytest.raises(UnsupportedValueError) as info:
        repo.commit({"a": {"b": d}})
    assert info.value.path == "state['a']['b']['l'][0]"
    assert "cycle" in str(info.value)


def test_state_containing_itself(repo: snapvc.Repository) -> None:
    state: dict[str, Any] = {"x": 1}
    state["me"] = state
    with pytest.raises(UnsupportedValueError) as info:
        repo.commit(state)
    assert info.value.path == "state['me']"


def test_shared_objects_are_not_cycles(repo: snapvc.Repository) -> None:
    shared = {"k": [1, 2, 3]}
    state = {"a": shared, "b": [shared, shared], "c": {"d": shared}}
    repo.commit(state)
    back = repo.checkout("main")
    assert back == state
    back["a"]["k"].append(4)  # a checkout never shares mutable objects
    assert back["b"][0]["k"] == [1, 2, 3] and back["c"]["d"]["k"] == [1, 2, 3]


# -- the root must be a plain dict -------------------------------------------------------


@pytest.mark.parametrize(
    "root", [[1, 2], "state", None, 3, (("a", 1),), OrderedDict(a=1), defaultdict(int), {1: "a"}.items()]
)
def test_root_must_be_a_plain_dict(repo: snapvc.Repository, root: Any) -> None:
    with pytest.raises(UnsupportedValueError) as info:
        repo.commit(root)
    assert info.value.path == "state"
    assert repo.branches() == {}


def test_root_with_a_bad_key(repo: snapvc.Repository) -> None:
    with pytest.raises(UnsupportedValueError) as info:
        repo.commit({"ok": 1, 2: "no"})
    assert info.value.path == "state"
    assert "2" in str(info.value)


# -- a refused commit leaves the repository unharmed ----------------------------------------


@pytest.mark.parametrize("name", ["set", "object", "OrderedDict", "lone surrogate", "failing adapter"])
def test_refused_commit_of_a_fresh_state_changes_nothing(repo: snapvc.Repository, name: str) -> None:
    first = make_state()
    repo.commit(first, message="one")
    second = make_state()
    second["scratch"]["notes"] = "more thinking"
    tip = repo.commit(second, message="two").id
    expected = copy.deepcopy(second)

    bad = make_state()
    bad["memory"][3]["when"] = BAD_VALUES[name][0]()
    with pytest.raises(UnsupportedValueError):
        repo.commit(bad, message="bad")
    assert_unharmed(repo, tip, expected, 2)

    bad["memory"][3]["when"] = "fixed"
    c = repo.commit(bad, message="three")
    assert c.parents == (tip,)
    assert repo.checkout("main") == bad
    assert [x.message for x in repo.log("main")] == ["three", "two", "one"]


@pytest.mark.parametrize("name", ["set", "object", "bytearray", "lone surrogate in a long str", "failing adapter"])
def test_refused_commit_of_the_same_objects_changes_nothing(repo: snapvc.Repository, name: str) -> None:
    # The failing commit reuses cached work for everything but the changed element.
    state = make_state()
    repo.commit(state, message="one")
    state["messages"].append({"role": "assistant", "content": "answer"})
    tip = repo.commit(state, message="two").id
    good_tree = repo.get_commit(tip).tree
    expected = copy.deepcopy(state)

    good = state["memory"][3]["when"]
    state["memory"][3]["when"] = BAD_VALUES[name][0]()
    with pytest.raises(UnsupportedValueError) as info:
        repo.commit(state, message="bad")
    assert info.value.path == WHEN
    assert_unharmed(repo, tip, expected, 2)

    # The same Python objects again, with the value put back: same state, same tree.
    state["memory"][3]["when"] = good
    same = repo.commit(state, message="same again")
    assert repo.get_commit(same.id).tree == good_tree
    assert repo.checkout("main") == expected

    # And a real change after the failure is stored, not hidden by what the cache saw.
    state["memory"][3]["when"] = "changed"
    state["messages"][100]["tags"].append("late")
    c = repo.commit(state, message="three")
    back = repo.checkout("main")
    assert back == state
    assert back["memory"][3]["when"] == "changed" and back["messages"][100]["tags"] == [100, "late"]
    assert c.parents == (same.id,)


def test_refused_commit_after_an_in_place_mutation_of_a_cached_list(repo: snapvc.Repository) -> None:
    state = make_state()
    tip = repo.commit(state).id
    expected = copy.deepcopy(state)

    state["messages"][150]["tags"].append({"a set"})
    with pytest.raises(UnsupportedValueError) as info:
        repo.commit(state)
    assert info.value.path == "state['messages'][150]['tags'][1]"
    assert_unharmed(repo, tip, expected, 1)

    state["messages"][150]["tags"][1] = "a str"
    repo.commit(state)
    assert repo.checkout("main")["messages"][150]["tags"] == [150, "a str"]
    assert repo.checkout("main") == state


def test_refused_commit_after_an_append_to_a_cached_list(repo: snapvc.Repository) -> None:
    state = make_state()
    tip = repo.commit(state).id
    expected = copy.deepcopy(state)

    state["messages"].append({"role": "user", "content": Opaque()})
    with pytest.raises(UnsupportedValueError) as info:
        repo.commit(state)
    assert info.value.path == "state['messages'][300]['content']"
    assert_unharmed(repo, tip, expected, 1)

    state["messages"][-1]["content"] = "plain text"
    repo.commit(state)
    assert repo.checkout("main") == state

    state["messages"].pop()
    c = repo.commit(state)
    assert repo.get_commit(c.id).tree == repo.get_commit(tip).tree


def test_refused_cycle_in_cached_objects_changes_nothing(repo: snapvc.Repository) -> None:
    state = make_state()
    tip = repo.commit(state).id
    expected = copy.deepcopy(state)

    state["messages"][5]["back"] = state["messages"]
    with pytest.raises(UnsupportedValueError) as info:
        repo.commit(state)
    assert info.value.path == "state['messages'][5]['back']"
    assert_unharmed(repo, tip, expected, 1)

    del state["messages"][5]["back"]
    c = repo.commit(state)
    assert repo.get_commit(c.id).tree == repo.get_commit(tip).tree


def test_refused_commit_on_a_branch_leaves_other_branches_alone(repo: snapvc.Repository) -> None:
    state = make_state()
    main_tip = repo.commit(state, branch="main").id
    other = make_state()
    other["scratch"] = {"other": True}
    other_tip = repo.commit(other, branch="other").id

    other["scratch"]["bad"] = {1}
    with pytest.raises(UnsupportedValueError) as info:
        repo.commit(other, branch="other")
    assert info.value.path == "state['scratch']['bad']"
    assert repo.branches() == {"main": main_tip, "other": other_tip}
    assert repo.checkout("other")["scratch"] == {"other": True}
    assert repo.checkout("main") == state


def test_refused_commit_in_a_file_repository_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "reopen.snapvc"
    state = make_state()
    with snapvc.open(path) as repo:
        tip = repo.commit(state).id
        objects = repo.store.sizes().objects
        state["memory"][3]["when"] = {1}
        with pytest.raises(UnsupportedValueError):
            repo.commit(state)
        # Nothing of the refused commit reached the file.
        assert repo.store.sizes().objects == objects
    with snapvc.open(path, create=False) as repo:
        assert repo.resolve("main") == tip
        state["memory"][3]["when"] = "2024-01-04"
        assert repo.checkout("main") == state
