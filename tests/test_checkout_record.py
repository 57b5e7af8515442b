"""A checkout records what it hands out; the next commit is taught it.

A checkout decodes each stored object of the state once and walks nothing again: what the
next commit needs to recognise the state (``snapvc.encoding.seed``) is cut from the stored
objects at that commit, from what the checkout recorded of each container as it was built.
Whatever is changed in place between the two, in any container shape, is stored. Work is
counted (objects decoded, containers encoded), never timed."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest

import snapvc
from snapvc.encoding import nodes, reader, seed, splice, writer
from snapvc.encoding.values import ext_hook
from snapvc.errors import FormatVersionError
from snapvc.objects import BLOB, SEQ, TEXT
from tests.exact import same
from tests.golden_values import golden_states
from tests.test_chunking import fresh_tree
from tests.test_commit_shapes import Message, Note, Point


def shapes() -> dict[str, Any]:
    """A state of every container shape, each large enough to be stored as an object of
    its own (and the long list and map as trees of several nodes)."""
    return {
        "dict": {f"k{i}": {"v": [i], "text": f"value {i} " * 20} for i in range(20)},
        "list": [{"i": i, "tags": [i, "t"], "text": f"item {i} " * 15} for i in range(40)],
        "tuple": tuple({"i": i, "pair": (i, [i]), "text": f"t{i} " * 10} for i in range(60)),
        "nested": {"a": {"b": [{"c": [1, 2, {"d": "x" * 3000}]}, {"e": {"f": [{"g": "deep " * 600}]}}]}},
        "typed": [Message(role="user", content=f"m{i} " * 40, meta={"i": [i]}) for i in range(30)],
        "notes": [Note(f"title {i}", ["a", "b"], {"n": [i]}) for i in range(30)] + [Point(i, ["p"]) for i in range(30)],
        "long_list": [{"i": i, "payload": [i, {"x": "y" * (i % 50)}]} for i in range(300)],
        "big_map": {f"key-{i:04d}": {"v": i, "w": [i, i + 1]} for i in range(200)},
        "text": "a long document " * 400,
        "counters": {"step": 0},
    }


def _replace_key(state: dict[str, Any]) -> None:
    del state["big_map"]["key-0042"]
    state["big_map"]["key-0042b"] = {"v": 42, "w": [42, 43]}  # as many keys as before


# Each changes the checked-out state in place, deep inside, leaving every container it
# passes through the same object. Some changes keep the value equal (``==``) to what was
# stored but not its encoding: 1 -> 1.0, 1 -> True, 0.0 -> -0.0.
CHANGES: dict[str, Callable[[dict[str, Any]], None]] = {
    "dict: a value's list grows": lambda s: s["dict"]["k3"]["v"].append("x"),
    "dict: a key replaced": lambda s: s["dict"]["k4"].update({"w": s["dict"]["k4"].pop("v")}),
    "list: an int becomes an equal float": lambda s: s["list"][5]["tags"].__setitem__(0, 5.0),
    "list: an int becomes an equal bool": lambda s: s["list"][1].__setitem__("i", True),
    "list: an element's key replaced, same length": lambda s: s["list"][2].update({"j": s["list"][2].pop("i")}),
    "tuple: a list inside an inner tuple": lambda s: s["tuple"][3]["pair"][1].append("in place"),
    "tuple: 0 becomes -0.0": lambda s: s["tuple"][0].__setitem__("i", -0.0),
    "nested: five levels down": lambda s: s["nested"]["a"]["b"][1]["e"]["f"][0].__setitem__("g", "changed"),
    "nested: a long string replaced": lambda s: s["nested"]["a"]["b"][0]["c"][2].__setitem__("d", "z" * 3000),
    "typed: a pydantic model's field": lambda s: s["typed"][2].meta["i"].append("m"),
    "typed: a model's attribute set": lambda s: setattr(s["typed"][7], "content", "rewritten"),
    "typed: a dataclass's list": lambda s: s["notes"][3].tags.append("c"),
    "typed: a slots dataclass's list": lambda s: s["notes"][33].labels.append("q"),
    "long list: deep in an element": lambda s: s["long_list"][150]["payload"][1].__setitem__("x", "z"),
    "long list: an element replaced": lambda s: s["long_list"].__setitem__(250, {"i": "new"}),
    "big map: a value's list grows": lambda s: s["big_map"]["key-0123"]["w"].append(-1),
    "big map: a key replaced, same size": _replace_key,
}


def count_encoded_below(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A counter of the dicts and typed values the encoder meets inside the state's
    top-level containers (met again and found unchanged, or encoded)."""
    calls = [0]
    encode_dict = writer.Encoder._encode_dict

    def counting(self: writer.Encoder, *args: Any, **kwargs: Any) -> bytes:
        calls[0] += len(self._path) >= 2
        return encode_dict(self, *args, **kwargs)

    monkeypatch.setattr(writer.Encoder, "_encode_dict", counting)
    return calls


def _decodes(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counters of the nodes the reader and the seeder decode, and of the containers the
    seeder cuts encodings from."""
    counts = {"reader": 0, "seeder": 0}

    def counting(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return function(*args, **kwargs)

        return counted

    monkeypatch.setattr(reader, "decode_node", counting("reader", nodes.decode_node))

    def level(found: dict[bytes, bytes], ids: list[bytes], hook: Any, into: dict[bytes, Any]) -> list[bytes]:
        before = len(into)
        refs = nodes.decode_level(found, ids, hook, into)
        counts["reader"] += len(into) - before  # the nodes of a level, each decoded once
        return refs

    monkeypatch.setattr(reader, "decode_level", level)
    for module in (seed, splice):
        monkeypatch.setattr(module, "decode_node", counting("seeder", nodes.decode_node))
    monkeypatch.setattr(seed, "seq_leaf_encodings", counting("seeder", nodes.seq_leaf_encodings))
    monkeypatch.setattr(seed, "map_leaf_encodings", counting("seeder", nodes.map_leaf_encodings))
    return counts


def _nodes_of(repo: snapvc.Repository, tree: snapvc.ObjectId, texts: bool = True) -> int:
    """How many distinct objects below ``tree`` are nodes (not chunks of text); with
    ``texts`` False, not counting the nodes of long str and bytes values either."""
    seen: set[bytes] = set()
    frontier = [bytes(tree)]
    count = 0
    while frontier:
        oid = frontier.pop()
        if oid in seen:
            continue
        seen.add(oid)
        data = repo.loader.fetch(oid)
        if data[0] == BLOB or (data[0] == TEXT and not texts):
            continue
        count += 1
        frontier += nodes.children_of(*nodes.decode_node(oid, data, rebuild_types=False))
    return count


def test_a_checkout_decodes_each_node_once_and_teaches_nothing(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo:
        c = repo.commit(shapes())
        expected = _nodes_of(repo, c.tree)
        again = _nodes_of(repo, c.tree, texts=False)
    assert again < expected
    counts = _decodes(monkeypatch)
    with snapvc.open(path) as repo:
        for i in range(3):  # checkouts not followed by a commit: none teaches anything
            state = repo.checkout("main")
            # long strings built once are handed out again as they are (immutable)
            assert counts == {"reader": expected if i == 0 else again, "seeder": 0}, (counts, expected, again)
            counts["reader"] = 0
        state["counters"]["step"] = 1
        c = repo.commit(state)
        assert counts["seeder"] > 0  # the commit was taught what the last checkout handed out
        assert repo.get_commit(c.id).tree == fresh_tree(state)


def test_the_commit_after_a_checkout_of_every_shape_costs_the_change(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo:
        repo.commit(shapes())
    calls = count_encoded_below(monkeypatch)
    with snapvc.open(path) as repo:
        state = repo.checkout("main")
        state["counters"]["step"] = 1
        state["long_list"].append({"i": "appended"})
        state["big_map"]["key-0007"] = {"v": "set"}
        calls[0] = 0
        c = repo.commit(state)
        # the new element and value: none of the hundreds of others
        assert calls[0] <= 2, calls[0]
        assert repo.get_commit(c.id).tree == fresh_tree(state)


def test_a_state_rebuilt_around_what_a_checkout_handed_out_costs_the_change(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The next commit is taught the containers the checkout built, wherever the state
    committed holds them: here a new root dict."""
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo:
        repo.commit(shapes())
    calls = count_encoded_below(monkeypatch)
    with snapvc.open(path) as repo:
        state = repo.checkout("main")
        rebuilt = {**state, "counters": {"step": 1}, "long_list": [*state["long_list"], {"i": "new"}]}
        calls[0] = 0
        c = repo.commit(rebuilt)
        assert calls[0] <= 1, calls[0]
        assert repo.get_commit(c.id).tree == fresh_tree(rebuilt)


@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("rebuild", [False, True], ids=["same root", "rebuilt root"])
def test_a_value_changed_in_place_after_a_checkout_is_stored(tmp_path: Path, change: str, rebuild: bool) -> None:
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo:
        repo.commit(shapes())
    with snapvc.open(path) as repo:
        state = repo.checkout("main")
        CHANGES[change](state)
        committed = {**state} if rebuild else state
        c = repo.commit(committed)
        assert repo.get_commit(c.id).tree == fresh_tree(state)
        assert repo.checkout("main") == state
        # and once more, the change undone where it can be, after a second checkout
        again = repo.checkout("main")
        again["counters"]["step"] = 2
        c = repo.commit(again)
        assert repo.get_commit(c.id).tree == fresh_tree(again)


def test_a_change_between_two_checkouts_of_the_same_branch_is_stored(tmp_path: Path) -> None:
    """Only the last checkout is taught; the first one's state, changed and committed
    after it, is still stored as it is."""
    repo = snapvc.open(tmp_path / "r.snapvc")
    repo.commit(shapes())
    first = repo.checkout("main")
    second = repo.checkout("main")
    first["long_list"][10]["payload"][1]["x"] = "changed in the first"
    second["big_map"]["key-0100"]["w"].append("changed in the second")
    c = repo.commit(first)
    assert repo.get_commit(c.id).tree == fresh_tree(first)
    c = repo.commit(second)
    assert repo.get_commit(c.id).tree == fresh_tree(second)


def plain_shapes() -> dict[str, Any]:
    """``shapes`` as plain data alone (no typed value, tuple or datetime anywhere): what a
    checkout records by its containers, leaving what they hold to be checked at the commit."""
    state = shapes()
    for key in ("typed", "notes", "tuple"):
        del state[key]
    return state


# Changes in place of a plain state, each leaving the value equal (``==``) to what was
# stored, or changing it where only its bytes tell: each must be stored as it is.
PLAIN_CHANGES: dict[str, Callable[[dict[str, Any]], None]] = {
    **{name: change for name, change in CHANGES.items() if not name.startswith(("typed", "tuple"))},
    "list: 0 becomes -0.0": lambda s: s["list"][0].__setitem__("i", -0.0),
    "list: an inline list becomes an equal tuple": lambda s: s["list"][3].__setitem__("tags", (3, "t")),
    "long list: 1 becomes True deep in an element": lambda s: s["long_list"][1]["payload"].__setitem__(0, True),
    "big map: keys reordered": lambda s: s["big_map"].__setitem__(
        "key-0005", dict(reversed(list(s["big_map"]["key-0005"].items())))),
    "dict: a value's list replaced by an equal list of floats": lambda s: s["dict"]["k6"].__setitem__("v", [6.0]),
}


@pytest.mark.parametrize("change", list(PLAIN_CHANGES))
@pytest.mark.parametrize("rebuild", [False, True], ids=["same root", "rebuilt root"])
def test_a_plain_value_changed_in_place_after_a_checkout_is_stored(tmp_path: Path, change: str,
                                                                   rebuild: bool) -> None:
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo:
        repo.commit(plain_shapes())
    with snapvc.open(path) as repo:
        state = repo.checkout("main")
        PLAIN_CHANGES[change](state)
        committed = {**state} if rebuild else state
        c = repo.commit(committed)
        assert repo.get_commit(c.id).tree == fresh_tree(state)
        again = repo.checkout("main")
        again["counters"]["step"] = 2
        c = repo.commit(again)
        assert repo.get_commit(c.id).tree == fresh_tree(again)


def _snapshots(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A counter of the flat snapshots (``DeepSnapshot.of``) taken."""
    taken = [0]
    of = seed.DeepSnapshot.of.__func__  # type: ignore[attr-defined]

    def counting(cls: type[seed.DeepSnapshot], values: list[Any]) -> seed.DeepSnapshot | None:
        taken[0] += 1
        return of(cls, values)  # type: ignore[no-any-return]

    monkeypatch.setattr(seed.DeepSnapshot, "of", classmethod(counting))
    return taken


def test_a_checkout_of_plain_data_snapshots_nothing_and_its_commit_costs_the_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain state is snapshotted at the commit that follows its checkout, if one does,
    once what it holds is found as stored; a checkout alone takes no snapshot."""
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo:
        repo.commit(plain_shapes())
    taken = _snapshots(monkeypatch)
    calls = count_encoded_below(monkeypatch)
    with snapvc.open(path) as repo:
        for _ in range(3):
            state = repo.checkout("main")
        assert taken[0] == 0
        state["counters"]["step"] = 1
        state["long_list"].append({"i": "appended"})
        state["big_map"]["key-0007"] = {"v": "set"}
        calls[0] = 0
        c = repo.commit(state)
        assert taken[0] > 0
        assert calls[0] <= 2, calls[0]  # the new element and value: none of the hundreds of others
        assert repo.get_commit(c.id).tree == fresh_tree(state)


def test_a_checkout_of_typed_values_is_snapshotted_as_it_is_built(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """What the commit could not check against the stored bytes (a typed value, a tuple
    inline) is snapshotted at the checkout, before the caller can change it."""
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo:
        repo.commit({**plain_shapes(), "pairs": [{"pair": (i, [i])} for i in range(40)]})
    taken = _snapshots(monkeypatch)
    with snapvc.open(path) as repo:
        repo.checkout("main")
        assert taken[0] > 0


def test_the_leaves_of_a_plain_list_are_read_by_packing_what_was_built(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The commit after a checkout of plain data reads a list's leaves holding no
    reference by packing the values it was built with (``nodes.seq_leaf_packed``): the
    same encodings, found in C, and what they hold checked on the way."""
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo:
        repo.commit({"long_list": plain_shapes()["long_list"], "counters": {"step": 0}})
    cut = [0]
    encodings = nodes.seq_leaf_encodings

    def cutting(oid: bytes, data: bytes) -> list[bytes]:
        cut[0] += 1
        return encodings(oid, data)

    monkeypatch.setattr(seed, "seq_leaf_encodings", cutting)
    calls = count_encoded_below(monkeypatch)
    with snapvc.open(path) as repo:
        state = repo.checkout("main")
        state["long_list"].append({"i": "appended"})
        calls[0] = 0
        c = repo.commit(state)
        assert cut[0] == 0 and calls[0] <= 1, (cut[0], calls[0])
        assert repo.get_commit(c.id).tree == fresh_tree(state)


def test_a_leaf_read_by_packing_gives_what_is_cut_from_it_or_nothing() -> None:
    pack = msgpack.Packer(use_bin_type=True, strict_types=True, autoreset=True).pack
    values = ({"i": 1, "tags": [1, "t"]}, "text", 2.5, None, [True, -0.0])
    data = bytes([SEQ]) + nodes.leaf_payload(SEQ, nodes.TAG_LIST, [pack(v) for v in values], pack)
    oid = bytes(32)
    assert nodes.seq_leaf_packed(oid, data, ("before", *values), 1, pack) == nodes.seq_leaf_encodings(oid, data)
    changed = [({**values[0], "i": 1.0}, *values[1:]), (*values[:4], [1, -0.0]), (*values[:4], [True, 0.0]),
               (*values[:4], (True, -0.0)), values[:4]]
    for other in changed:
        assert nodes.seq_leaf_packed(oid, data, other, 0, pack) is None, other


def test_long_strings_read_once_are_kept_within_their_budget_and_let_go_on_close(tmp_path: Path) -> None:
    """The object cache keeps the long str and bytes a checkout built (within its budget
    in bytes, past which the first kept go first), handed out again as they are; a
    closed repository keeps none."""
    texts = {f"doc-{i}": f"document {i} " * 2000 for i in range(40)}  # 40 texts of 26 KB
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo:
        repo.commit({"docs": texts, "blob": b"\x01" * 50_000})
    repo = snapvc.open(path)
    repo.loader.cache = reader.ObjectCache(8 << 20)  # a budget for texts of 2 MiB: all of them
    first = repo.checkout("main")
    again = repo.checkout("main")
    assert again == first and all(again["docs"][k] is first["docs"][k] for k in texts)
    assert again["blob"] is first["blob"]
    repo.loader.cache = reader.ObjectCache(4 << 20)  # 1 MiB for texts: the last ones read
    repo.checkout("main")
    assert 0 < repo.loader.cache.text_size <= repo.loader.cache.text_bytes
    assert repo.checkout("main") == first
    repo.close()
    assert repo.loader.cache.text_size == 0


def test_long_strings_the_cache_lets_go_while_a_state_is_built_are_still_handed_out(tmp_path: Path) -> None:
    """A checkout takes the long strings the cache kept as its walk meets them: building
    the rest puts new ones in, which push those out before they are built."""
    texts = {f"doc-{i:03}": f"document {i} " * 2000 for i in range(120)}  # 3 MB of texts
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo:
        repo.commit({"docs": texts})
    for reopened in (False, True):
        repo = snapvc.open(path)
        repo.loader.cache = reader.ObjectCache(4 << 20)  # 1 MiB for texts: the last ones read
        assert repo.checkout("main")["docs"] == texts
        kept = dict(repo.loader.cache._texts)
        assert kept and len(kept) < len(texts)
        again = repo.state("main") if reopened else None
        got = again.get("docs") if again is not None else repo.checkout("main")["docs"]
        assert got == texts
        assert not kept.keys() & repo.loader.cache._texts.keys()  # every one kept was let go meanwhile
        repo.close()


@pytest.mark.parametrize("name", [*golden_states(), "shapes"])
def test_both_decoders_read_every_state_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Node payloads decode to the same values, types and all, with ormsgpack (a
    checkout's decoder) and with msgpack (the reference); so do errors a value's
    decoding raises."""
    state = shapes() if name == "shapes" else golden_states()[name]
    with snapvc.open(tmp_path / "r.snapvc") as repo:
        repo.commit(state)
        fast = repo.checkout("main")
        monkeypatch.setattr(nodes, "_unpack", nodes.unpack_msgpack)
        repo.loader.cache.clear()
        pure = repo.checkout("main")
    assert same(fast, pure) and same(pure, state)


def test_an_error_in_an_inline_value_is_raised_as_itself_by_either_decoder() -> None:
    payload = msgpack.packb(["x", msgpack.ExtType(99, b"newer")])  # an extension code unknown here
    for unpack in (nodes.unpack_msgpack, nodes.unpack_ormsgpack):
        with pytest.raises(FormatVersionError):
            unpack(payload, ext_hook)


def test_a_long_list_is_built_without_a_python_call_a_node(tmp_path: Path) -> None:
    # A level of a tree is decoded in one loop (``nodes.decode_level``) and a leaf holding
    # no reference is taken into its list as decoded: the Python calls a checkout makes
    # follow the depth of the trees and the values stored as objects, not their nodes.
    with snapvc.open(tmp_path / "r.snapvc") as repo:
        state = {"log": [{"i": i, "text": f"entry {i} " * 8, "tags": [i]} for i in range(3000)]}
        tree = repo.commit(state).tree
        stored = _nodes_of(repo, tree)
        assert stored > 50  # the list is a tree of many leaves
        calls = 0

        def profile(frame: Any, event: str, arg: Any) -> None:
            nonlocal calls
            calls += event == "call"

        sys.setprofile(profile)
        try:
            built = repo.loader.materialize(tree)
        finally:
            sys.setprofile(None)
        assert built == state
        assert calls < stored // 2, (calls, stored)


@pytest.mark.parametrize("rev", ["fork", "refs/heads/fork"])
def test_a_checkout_teaches_the_branch_its_name_was_looked_up_through(tmp_path: Path, rev: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A branch named short or in full (HEAD is on another branch): the next commit on it
    costs the change, in a repository object that never committed the state."""
    path = tmp_path / "r.snapvc"
    state = {"messages": [{"i": i, "text": f"message {i} " * 20, "meta": {"n": [i]}} for i in range(200)]}
    with snapvc.open(path) as repo:
        repo.commit(state)
        repo.branch("fork", at="main")
    with snapvc.open(path) as repo:
        got = repo.checkout(rev)
        calls = count_encoded_below(monkeypatch)
        got["messages"].append({"i": "appended"})
        c = repo.commit(got, branch="fork")
        assert calls[0] <= 1, calls[0]  # the new element: none of the 200 others
        assert repo.get_commit(c.id).tree == fresh_tree(got)
        assert repo.checkout("main") == state
