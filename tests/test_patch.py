"""Changes applied, as JSON Patch, summed up and shown as text: the laws that tie them to
the diff (applying a diff of a and b to a gives b, stored or not), RFC 6902's own
examples, and exact output on small cases."""

from __future__ import annotations

import copy
import math
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapvc
from snapvc import DiffStat, PatchError, PathError, apply_changes, apply_patch, diff_stat, to_json_patch
from snapvc.diff.changes import Change, diff_values
from snapvc.diff.patch import DiffStatRow, format_pointer, parse_pointer
from tests.exact import same

LAWS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# -- values, and edits of them -------------------------------------------------------

keys = st.text(st.sampled_from("ab~/0 1é"), max_size=4) | st.text(st.characters(exclude_categories=("Cs",)), max_size=6)


def small_values(json_only: bool, nan: bool = False) -> st.SearchStrategy[Any]:
    leaves = (st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
              | st.floats(allow_nan=nan, allow_infinity=not json_only) | st.text(st.characters(exclude_categories=("Cs",)), max_size=12))
    if not json_only:
        leaves = leaves | st.binary(max_size=12)

    def containers(kids: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        out = st.lists(kids, max_size=6) | st.dictionaries(keys, kids, max_size=6)
        return out if json_only else out | st.lists(kids, max_size=4).map(tuple)

    return st.recursive(leaves, containers, max_leaves=20)


SMALL = {json_only: small_values(json_only) for json_only in (True, False)}


def big_list(seed: int, size: int, kind: int) -> list[Any]:
    """A list long enough to be stored as a tree of several nodes."""
    if kind == 0:
        return [f"message {seed}-{i}" for i in range(size)]
    return [{"role": "user" if i % 2 else "assistant", "content": f"turn {i} of {seed}", "n": i} for i in range(size)]


big_lists = st.builds(big_list, st.integers(0, 999), st.sampled_from([150, 400, 400, 2_500]), st.integers(0, 1))
big_maps = st.builds(lambda seed, size: {f"k{i:04d}": f"value {i} of {seed}" for i in range(size)},
                     st.integers(0, 999), st.sampled_from([100, 600]))
long_strings = st.builds(lambda seed: f"document {seed} " + "lorem ipsum dolor " * 250, st.integers(0, 999))


@st.composite
def states(draw: st.DrawFn, json_only: bool) -> dict[str, Any]:
    """A state: a map of small nested values, sometimes with a long list, a large map or
    a long string in it (objects of their own, the lists and maps trees of nodes)."""
    out = draw(st.dictionaries(keys, SMALL[json_only], max_size=5))
    if draw(st.booleans()):
        out["big"] = draw(big_lists | big_maps | long_strings)
    return out


def edit(draw: st.DrawFn, value: Any, json_only: bool) -> Any:
    """``value`` with one random edit somewhere inside it (not modified in place)."""
    new = SMALL[json_only]
    if isinstance(value, dict) and value:
        out = dict(value)
        key = draw(st.sampled_from(sorted(out)))
        what = draw(st.sampled_from(["descend", "descend", "add", "remove", "replace"]))
        if what == "descend":
            out[key] = edit(draw, out[key], json_only)
        elif what == "add":
            out[draw(keys)] = draw(new)
        elif what == "remove":
            del out[key]
        else:
            out[key] = draw(new)
        return out
    if isinstance(value, (list, tuple)) and value:
        items = list(value)
        i = draw(st.integers(0, len(items) - 1))
        what = draw(st.sampled_from(["descend", "descend", "insert", "delete", "replace", "append", "extend", "cut"]))
        if what == "descend":
            items[i] = edit(draw, items[i], json_only)
        elif what == "insert":
            items.insert(i, draw(new))
        elif what == "delete":
            del items[i]
        elif what == "replace":
            items[i] = draw(new)
        elif what == "append":
            items.append(draw(new))
        elif what == "extend":
            items.extend(draw(st.lists(new, min_size=1, max_size=5)))
        else:
            del items[i : i + draw(st.integers(1, 30))]
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, dict):
        return {draw(keys): draw(new)}
    if isinstance(value, str) and len(value) > 100:
        at = draw(st.integers(0, len(value)))
        return value[:at] + draw(st.text(max_size=5)) + value[at:]
    return draw(new)


@st.composite
def pairs(draw: st.DrawFn, json_only: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two states: mostly the second a few edits away from the first, sometimes unrelated."""
    a = draw(states(json_only))
    if draw(st.integers(0, 4)) == 0:
        return a, draw(states(json_only))
    b = a
    for _ in range(draw(st.integers(1, 4))):
        b = edit(draw, b, json_only)
    return a, b


# -- the laws ------------------------------------------------------------------------


@pytest.mark.slow
@LAWS
@given(pairs())
def test_applying_a_diff_gives_the_target(pair: tuple[Any, Any]) -> None:
    a, b = pair
    before = copy.deepcopy(a)
    assert same(apply_changes(a, diff_values(a, b)), b)
    assert same(a, before)  # the input is left as it was


@LAWS
@given(SMALL[False], SMALL[False])
def test_applying_a_diff_of_any_two_values(a: Any, b: Any) -> None:
    assert same(apply_changes(a, diff_values(a, b)), b)


@pytest.mark.slow
@LAWS
@given(pairs(json_only=True))
def test_a_json_patch_of_a_diff_gives_the_target(pair: tuple[Any, Any]) -> None:
    a, b = pair
    before = copy.deepcopy(a)
    patch = to_json_patch(diff_values(a, b))
    assert same(apply_patch(a, patch), b)
    assert same(a, before)
    assert same(apply_patch(a, orjson.dumps(patch)), b)  # through its JSON text too


@LAWS
@given(small_values(json_only=False, nan=True))
def test_a_value_has_no_diff_with_itself(a: Any) -> None:
    assert list(diff_values(a, a)) == []
    assert list(diff_values(a, copy.deepcopy(a))) == []


@pytest.mark.slow
@settings(LAWS, max_examples=100)
@given(pairs())
def test_the_stored_diff_equals_the_diff_in_memory(pair: tuple[Any, Any]) -> None:
    a, b = pair
    repo = snapvc.open("memory://")
    ca, cb = repo.commit({"s": a}), repo.commit({"s": b})
    stored = repo.diff(ca.id, cb.id)
    assert stored == list(diff_values({"s": a}, {"s": b}))
    assert same(apply_changes({"s": a}, stored), {"s": b})


def test_a_stored_tuple_is_diffed_and_patched_element_by_element() -> None:
    items = tuple(f"item {i}" for i in range(2_000))
    edited = (*items[:5], "new", *items[6:1500], *items[1510:], "last")
    repo = snapvc.open("memory://")
    ca, cb = repo.commit({"t": items}), repo.commit({"t": edited})
    changes = repo.diff(ca.id, cb.id)
    assert changes[0] == Change(("t", 5), "modified", "item 5", "new")
    assert [c.kind for c in changes[1:]] == ["removed"] * 10 + ["added"]
    assert same(apply_changes({"t": items}, changes), {"t": edited})


def test_two_messages_appended_to_a_thousand() -> None:
    messages = [{"role": "user", "content": f"message {i}"} for i in range(1_000)]
    more = [*messages, {"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}]
    repo = snapvc.open("memory://")
    ca, cb = repo.commit({"messages": messages}), repo.commit({"messages": more})
    changes = repo.diff(ca.id, cb.id)
    assert changes == [Change(("messages", 1000), "added", None, more[1000]),
                       Change(("messages", 1001), "added", None, more[1001])]
    assert to_json_patch(changes) == [{"op": "add", "path": "/messages/1000", "value": more[1000]},
                                      {"op": "add", "path": "/messages/1001", "value": more[1001]}]
    assert apply_patch({"messages": messages}, to_json_patch(changes)) == {"messages": more}
    assert len(messages) == 1_000


# -- applying changes ----------------------------------------------------------------


def test_changes_apply_per_list_in_three_passes() -> None:
    old = {"l": ["a", "b", "c", "d", "e"]}
    new = {"l": ["x", "a", "c", ["d2"], "e", "f"]}
    changes = list(diff_values(old, new))
    assert same(apply_changes(old, changes), new)
    assert to_json_patch(changes) == [
        {"op": "remove", "path": "/l/1"},
        {"op": "add", "path": "/l/0", "value": "x"},
        {"op": "add", "path": "/l/5", "value": "f"},
        {"op": "replace", "path": "/l/3", "value": ["d2"]},
    ]


def test_unchanged_subtrees_are_shared_and_changed_ones_copied() -> None:
    old = {"keep": [1, 2], "edit": {"n": [1]}, "t": (1, [2])}
    new = apply_changes(old, [Change(("edit", "n", 0), "modified", 1, 2), Change(("t", 1, 0), "modified", 2, 3)])
    assert new == {"keep": [1, 2], "edit": {"n": [2]}, "t": (1, [3])}
    assert new["keep"] is old["keep"]
    assert old == {"keep": [1, 2], "edit": {"n": [1]}, "t": (1, [2])}


def test_the_whole_value_replaced() -> None:
    assert apply_changes([1], list(diff_values([1], {"a": 1}))) == {"a": 1}
    assert to_json_patch(diff_values([1], "x")) == [{"op": "replace", "path": "", "value": "x"}]
    assert apply_changes(5, []) == 5


@pytest.mark.parametrize(("state", "change", "message"), [
    ({"a": 1}, Change(("b",), "removed", 1), "state path ('b',): no key 'b'"),
    ({"a": 1}, Change(("b",), "modified", 1, 2), "state path ('b',): no key 'b'"),
    ({"a": 1}, Change(("a",), "added", None, 2), "state path ('a',): key 'a' to add is already there"),
    ({"l": [1, 2]}, Change(("l", 2), "removed", 1), "state path ('l', 2): index 2 out of range for a list of 2"),
    ({"l": [1, 2]}, Change(("l", 3), "added", None, 1), "state path ('l', 3): index 3 out of range for a list of 2"),
    ({"l": [1, 2]}, Change(("l", "x"), "modified", 1, 2), "state path ('l', 'x'): 'x' is not a list index"),
    ({"a": 1}, Change(("a", "b"), "modified", 1, 2), "state path ('a', 'b'): a is an int, not a container"),
    ({"a": {"b": 1}}, Change(("a", "c", 0), "removed", 1), "state path ('a', 'c', 0): no key 'c'"),
])
def test_a_change_that_leads_nowhere(state: Any, change: Change, message: str) -> None:
    before = copy.deepcopy(state)
    with pytest.raises(PathError) as caught:
        apply_changes(state, [Change(("ok",), "added", None, 1), change])
    assert str(caught.value) == message
    assert caught.value.path == change.path
    assert state == before


# -- JSON Pointer ---------------------------------------------------------------------


@pytest.mark.parametrize(("path", "pointer"), [
    ((), ""), (("",), "/"), (("a/b",), "/a~1b"), (("m~n",), "/m~0n"), (("~1",), "/~01"), (("a", 0, "b"), "/a/0/b"),
    (("/~", "~/"), "/~1~0/~0~1"),
])
def test_pointers_escape_tilde_then_slash(path: tuple[Any, ...], pointer: str) -> None:
    assert format_pointer(path) == pointer
    assert parse_pointer(pointer) == [str(step) for step in path]


@LAWS
@given(st.lists(keys, max_size=5))
def test_a_pointer_round_trips(path: list[str]) -> None:
    assert parse_pointer(format_pointer(tuple(path))) == path
    document: Any = 1
    for key in reversed(path):
        document = {key: document}
    assert apply_patch(document, [{"op": "replace", "path": format_pointer(tuple(path)), "value": 2}]) == (
        apply_changes(document, [Change(tuple(path), "modified", 1, 2)]))


# -- RFC 6902, Appendix A -------------------------------------------------------------

RFC_EXAMPLES = [
    ("A.1 adding an object member", {"foo": "bar"},
     [{"op": "add", "path": "/baz", "value": "qux"}], {"baz": "qux", "foo": "bar"}),
    ("A.2 adding an array element", {"foo": ["bar", "baz"]},
     [{"op": "add", "path": "/foo/1", "value": "qux"}], {"foo": ["bar", "qux", "baz"]}),
    ("A.3 removing an object member", {"baz": "qux", "foo": "bar"},
     [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
    ("A.4 removing an array element", {"foo": ["bar", "qux", "baz"]},
     [{"op": "remove", "path": "/foo/1"}], {"foo": ["bar", "baz"]}),
    ("A.5 replacing a value", {"baz": "qux", "foo": "bar"},
     [{"op": "replace", "path": "/baz", "value": "boo"}], {"baz": "boo", "foo": "bar"}),
    ("A.6 moving a value", {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
     [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
     {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}}),
    ("A.7 moving an array element", {"foo": ["all", "grass", "cows", "eat"]},
     [{"op": "move", "from": "/foo/1", "path": "/foo/3"}], {"foo": ["all", "cows", "eat", "grass"]}),
    ("A.8 testing a value: success", {"baz": "qux", "foo": ["a", 2, "c"]},
     [{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}],
     {"baz": "qux", "foo": ["a", 2, "c"]}),
    ("A.10 adding a nested member object", {"foo": "bar"},
     [{"op": "add", "path": "/child", "value": {"grandchild": {}}}], {"foo": "bar", "child": {"grandchild": {}}}),
    ("A.11 ignoring unrecognized elements", {"foo": "bar"},
     [{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}], {"foo": "bar", "baz": "qux"}),
    ("A.14 ~ escape ordering", {"/": 9, "~1": 10},
     [{"op": "test", "path": "/~01", "value": 10}], {"/": 9, "~1": 10}),
    ("A.16 adding an array value", {"foo": ["bar"]},
     [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}], {"foo": ["bar", ["abc", "def"]]}),
]

RFC_ERRORS = [
    ("A.9 testing a value: error", {"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "bar"}],
     "patch operation 0 (test /baz): value is 'qux', not 'bar'"),
    ("A.12 adding to a nonexistent target", {"foo": "bar"}, [{"op": "add", "path": "/baz/bat", "value": "qux"}],
     "patch operation 0 (add /baz/bat): no member 'baz'"),
    ("A.13 invalid JSON Patch document", {"foo": "bar"},
     '[{"op": "add", "path": "/baz", "value": "qux", "op": "remove"}]',
     "patch: member 'op' appears twice in one object"),
    ("A.15 comparing strings and numbers", {"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": "10"}],
     "patch operation 0 (test /~01): value is 10, not '10'"),
]


@pytest.mark.parametrize(("name", "document", "patch", "expected"), RFC_EXAMPLES, ids=[e[0] for e in RFC_EXAMPLES])
def test_rfc_6902_examples(name: str, document: Any, patch: list[dict[str, Any]], expected: Any) -> None:
    before = copy.deepcopy(document)
    assert same(apply_patch(document, patch), expected)
    assert same(apply_patch(document, orjson.dumps(patch).decode()), expected)
    assert same(document, before)


@pytest.mark.parametrize(("name", "document", "patch", "message"), RFC_ERRORS, ids=[e[0] for e in RFC_ERRORS])
def test_rfc_6902_error_examples(name: str, document: Any, patch: Any, message: str) -> None:
    before = copy.deepcopy(document)
    with pytest.raises(PatchError) as caught:
        apply_patch(document, patch)
    assert str(caught.value) == message
    assert document == before


PATCH_ERRORS = [
    ({"messages": [1, 2, 3, 4, 5]},
     [{"op": "test", "path": "/messages/0", "value": 1}, {"op": "add", "path": "/x", "value": 1},
      {"op": "replace", "path": "/x", "value": 2}, {"op": "remove", "path": "/messages/7"}],
     "patch operation 3 (remove /messages/7): index 7 out of range for a list of 5"),
    ({"l": [1]}, [{"op": "add", "path": "/l/2", "value": 0}], "patch operation 0 (add /l/2): index 2 out of range for a list of 1"),
    ({"l": [1]}, [{"op": "remove", "path": "/l/-"}],
     "patch operation 0 (remove /l/-): '-' (past the end of /l) names no element"),
    ({"l": [1]}, [{"op": "replace", "path": "/l/01", "value": 0}], "patch operation 0 (replace /l/01): '01' is not an array index"),
    ({"l": [1]}, [{"op": "add", "path": "/l/-1", "value": 0}], "patch operation 0 (add /l/-1): '-1' is not an array index"),
    ({"l": [1]}, [{"op": "add", "path": "/l/+1", "value": 0}], "patch operation 0 (add /l/+1): '+1' is not an array index"),
    ({"a": 1}, [{"op": "add", "path": "a", "value": 0}],
     "patch operation 0 (add a): pointer 'a' must be empty or start with '/'"),
    ({"a": 1}, [{"op": "add", "path": "/a~2", "value": 0}],
     "patch operation 0 (add /a~2): bad escape in pointer token 'a~2': '~' must be followed by 0 or 1"),
    ({"a": 1}, [{"op": "add", "path": "/a/b", "value": 0}], "patch operation 0 (add /a/b): /a is an int, not an object or array"),
    ({"a": 1}, [{"op": "remove", "path": "/a/b"}], "patch operation 0 (remove /a/b): /a is an int, not an object or array"),
    ({"a": {"b": 1}}, [{"op": "test", "path": "/a/c", "value": 1}], "patch operation 0 (test /a/c): no member 'c' in /a"),
    ({"a": 1}, [{"op": "remove", "path": ""}], 'patch operation 0 (remove ""): the whole document cannot be removed'),
    ({"a": {"b": 1}}, [{"op": "move", "from": "/a", "path": "/a/b/c"}],
     "patch operation 0 (move /a/b/c from /a): cannot move a value into one of its own children"),
    ({"a": 1}, [{"op": "copy", "from": "/b", "path": "/c"}], "patch operation 0 (copy /c from /b): no member 'b'"),
    ({"a": [1]}, [{"op": "move", "from": "/a/-", "path": "/c"}],
     "patch operation 0 (move /c from /a/-): '-' (past the end of from /a) names no element"),
    ({"a": 1}, [{"op": "frob", "path": "/a"}], "patch operation 0 (frob /a): unknown op 'frob'"),
    ({"a": 1}, [{"path": "/a"}], "patch operation 0 (? /a): no 'op' member"),
    ({"a": 1}, [{"op": "add", "path": "/b"}], "patch operation 0 (add /b): no 'value' member"),
    ({"a": 1}, [{"op": "move", "path": "/b"}], "patch operation 0 (move /b): no 'from' member"),
    ({"a": 1}, [{"op": "remove", "path": 3}], "patch operation 0 (remove ?): 'path' must be a string, not int"),
    ({"a": 1}, ["remove"], "patch operation 0 (? ?): an operation is an object, not a str"),
    ({"a": 1}, '{"op": "remove"}', "patch: a patch is a list of operations, not a dict"),
    ({"a": 1}, "[{", "patch: not valid JSON: "),
    ({"a": True}, [{"op": "test", "path": "/a", "value": 1}], "patch operation 0 (test /a): value is True, not 1"),
    ({"a": [1, {"b": 2}]}, [{"op": "test", "path": "/a", "value": [True, {"b": 2}]}],
     "patch operation 0 (test /a): value is [1, {'b': 2}], not [True, {'b': 2}]"),
    (3, [{"op": "add", "path": "/a", "value": 1}], "patch operation 0 (add /a): the document is an int, not an object or array"),
]


@pytest.mark.parametrize(("document", "patch", "message"), PATCH_ERRORS)
def test_a_failed_patch_names_the_operation_and_changes_nothing(document: Any, patch: Any, message: str) -> None:
    before = copy.deepcopy(document)
    with pytest.raises(PatchError) as caught:
        apply_patch(document, patch)
    assert str(caught.value).startswith(message)
    assert isinstance(caught.value, ValueError)
    assert same(document, before)


def test_a_patch_is_atomic() -> None:
    document = {"messages": [{"n": 1}, {"n": 2}], "meta": {"count": 2}}
    before = copy.deepcopy(document)
    patch = [{"op": "add", "path": "/messages/-", "value": {"n": 3}}, {"op": "replace", "path": "/meta/count", "value": 3},
             {"op": "remove", "path": "/messages/0/n"}, {"op": "move", "from": "/meta", "path": "/m"},
             {"op": "test", "path": "/m/count", "value": 4}]
    with pytest.raises(PatchError) as caught:
        apply_patch(document, patch)
    assert (caught.value.index, caught.value.op, caught.value.path) == (4, "test", "/m/count")
    assert same(document, before)
    assert apply_patch(document, patch[:4]) == {"messages": [{}, {"n": 2}, {"n": 3}], "m": {"count": 3}}
    assert same(document, before)


def test_patch_operations_on_the_whole_document_and_copies() -> None:
    assert apply_patch({"a": 1}, [{"op": "replace", "path": "", "value": [1]}]) == [1]
    assert apply_patch({"a": 1}, [{"op": "add", "path": "", "value": 2}]) == 2
    assert apply_patch({"a": 1}, [{"op": "move", "from": "", "path": ""}]) == {"a": 1}
    assert apply_patch({"a": [1]}, [{"op": "copy", "from": "", "path": "/b"}]) == {"a": [1], "b": {"a": [1]}}
    copied = apply_patch({"a": [1]}, [{"op": "copy", "from": "/a", "path": "/b"}, {"op": "add", "path": "/b/-", "value": 2}])
    assert copied == {"a": [1], "b": [1, 2]}  # a copy is a copy, not the same list twice
    assert apply_patch([1, 2], [{"op": "test", "path": "/0", "value": 1.0}, {"op": "add", "path": "/-", "value": 3}]) == [1, 2, 3]
    assert apply_patch({"a": {"b": [1]}}, [{"op": "test", "path": "", "value": {"a": {"b": [1.0]}}}]) == {"a": {"b": [1]}}
    assert apply_patch({}, "[]") == {}


# -- --stat and unified text ----------------------------------------------------------


def test_diff_stat_counts_changes_and_bytes_per_top_level_key() -> None:
    old = {"messages": ["hi", "there"], "notes": "the quick brown fox", "plan": {"steps": 3}, "blob": b"\x00" * 10}
    new = {"messages": ["hi", "there", "x" * 1200, "ok"], "notes": "the quick red fox", "plan": {"steps": [1, 2]}}
    stat = diff_stat(diff_values(old, new))
    assert stat == DiffStat((
        DiffStatRow("blob", removed=1, bytes_removed=len(repr(b"\x00" * 10))),
        DiffStatRow("messages", added=2, bytes_added=1202 + 4),
        DiffStatRow("notes", modified=1, bytes_added=3, bytes_removed=5),
        DiffStatRow(("plan"), modified=1, bytes_added=5, bytes_removed=1),
    ))
    assert (stat.changes, stat.added, stat.removed, stat.modified, stat.bytes_added, stat.bytes_removed) == (
        5, 2, 1, 2, 1214, 49)
    assert str(stat) == (
        " blob     | 1 removed  | +0 B -43 B\n"
        " messages | 2 added    | +1.2 KiB -0 B\n"
        " notes    | 1 modified | +3 B -5 B\n"
        " plan     | 1 modified | +5 B -1 B\n"
        " 5 paths changed, 2 added, 1 removed, 2 modified, +1.2 KiB -49 B"
    )


def test_diff_stat_of_nothing_and_of_the_whole_value() -> None:
    assert str(diff_stat([])) == " 0 paths changed"
    stat = diff_stat(diff_values("héllo", "hallo"))
    assert stat.rows == (DiffStatRow(None, modified=1, bytes_added=1, bytes_removed=2),)
    assert str(stat) == " <root> | 1 modified | +1 B -2 B\n 1 path changed, 1 modified, +1 B -2 B"
    assert str(diff_stat([Change((3, "a"), "added", None, "x" * 3 * 1024 * 1024)])) == (
        " [3] | 1 added | +3.0 MiB -0 B\n 1 path changed, 1 added, +3.0 MiB -0 B")


def test_unified_diff_of_strings() -> None:
    old = "".join(f"line {i}\n" for i in range(10))
    new = old.replace("line 5\n", "line five\n")
    assert Change(("notes", "a b"), "modified", old, new).unified(context=1) == (
        "--- a/notes['a b']\n"
        "+++ b/notes['a b']\n"
        "@@ -5,3 +5,3 @@\n"
        " line 4\n"
        "-line 5\n"
        "+line five\n"
        " line 6\n"
    )
    assert Change(("s",), "modified", "one\ntwo", "one\nthree").unified() == (
        "--- a/s\n+++ b/s\n@@ -1,2 +1,2 @@\n one\n-two\n\\ No newline at end of file\n"
        "+three\n\\ No newline at end of file\n"
    )


def test_unified_diff_of_other_values() -> None:
    change = Change(("plan",), "modified", {"steps": [1, 2], "done": False}, {"steps": [1, 3], "done": False})
    assert change.unified() == (
        "--- a/plan\n+++ b/plan\n@@ -2,6 +2,6 @@\n"
        '   "done": false,\n'
        '   "steps": [\n'
        "     1,\n"
        "-    2\n"
        "+    3\n"
        "   ]\n"
        " }\n"
    )
    assert Change(("m", 2), "added", None, {"role": "user"}).unified() == (
        '--- a/m[2]\n+++ b/m[2]\n@@ -0,0 +1,3 @@\n+{\n+  "role": "user"\n+}\n')
    assert Change(("b",), "removed", b"\x00", None).unified() == "--- a/b\n+++ b/b\n@@ -1 +0,0 @@\n-b'\\x00'\n"
    assert Change(("n",), "modified", 1, 1.0).unified() == "--- a/n\n+++ b/n\n@@ -1 +1 @@\n-1\n+1.0\n"


def test_nan_is_kept_out_of_the_equality_laws_only() -> None:
    a = {"x": [1.0, math.nan]}
    assert list(diff_values(a, copy.deepcopy(a))) == []
    assert same(apply_changes(a, diff_values(a, {"x": [math.nan]})), {"x": [math.nan]})
