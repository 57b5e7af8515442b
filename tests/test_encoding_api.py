"""The encoding layer's public seams: reading a stored node by name (``read_node``), the
chunker, and the cache's flat snapshot, as the layers above use them."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import snapvc
from snapvc.encoding import identity
from snapvc.encoding.cache import DeepSnapshot
from snapvc.encoding.chunker import CHUNK_THRESHOLD, chunk_spans
from snapvc.encoding.nodes import StoredNode, read_node
from snapvc.encoding.writer import Encoder
from snapvc.errors import CorruptObjectError
from snapvc.objects import BLOB, MAP, SEQ, TEXT, object_bytes


@dataclasses.dataclass
class Point:
    x: int
    y: int


def _text(n: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefghij klmnop\n") for _ in range(n))


def test_read_node_names_what_each_kind_of_node_holds(tmp_path: Path) -> None:
    long_text = _text(3 * CHUNK_THRESHOLD)
    state = {
        "messages": [{"role": "user", "content": f"message {i} " + "x" * 80} for i in range(400)],
        "pair": tuple(f"element {i} " + "y" * 100 for i in range(40)),
        "doc": long_text,
        "blob": bytes(range(256)) * 40,
        "points": {f"p{i:03}": Point(i, -i) for i in range(3)},
    }
    with snapvc.open(tmp_path / "r.snapvc") as repo:
        repo.commit(state)
        loader = repo.loader

        def node(oid: bytes) -> StoredNode:
            return read_node(oid, loader.fetch(oid))

        root = node(repo.get_commit(repo.resolve("main")).tree)

        assert (root.kind, root.value_type, root.typed_name, root.is_leaf) == (MAP, "dict", None, True)
        assert set(root.entries) == set(state) and root.refs == {"messages", "pair", "doc", "blob"}

        # A long list is a tree: its inner levels name children and the entries below each.
        messages = node(root.entries["messages"])
        assert (messages.kind, messages.value_type, messages.is_leaf) == (SEQ, "list", False)
        assert len(messages.children) == len(messages.counts) > 1 and sum(messages.counts) == 400
        leaves = [messages]
        while not leaves[0].is_leaf:
            leaves = [node(c) for n in leaves for c in n.children]
        assert [v for leaf in leaves for v in leaf.entries] == state["messages"]
        assert all(not leaf.refs for leaf in leaves)  # small dicts are inline in their leaf

        pair = node(root.entries["pair"])
        assert pair.value_type == "tuple"

        # A long str is a TEXT tree over chunks; each chunk a BLOB with its bytes.
        doc = node(root.entries["doc"])
        assert (doc.kind, doc.value_type) == (TEXT, "str")
        pieces = [doc]
        while not pieces[0].is_leaf:
            pieces = [node(c) for n in pieces for c in n.children]
        data = b""
        for leaf in pieces:
            for i, piece in enumerate(leaf.entries):
                assert i in leaf.refs
                chunk = node(piece)
                assert (chunk.kind, chunk.value_type) == (BLOB, "blob")
                data += chunk.data
        assert data.decode() == long_text
        assert node(root.entries["blob"]).value_type == "bytes"

        # A dict of typed values inline in the root: the values are rebuilt as their class.
        assert root.entries["points"] == state["points"]


def test_read_node_names_a_typed_value_stored_as_an_object(tmp_path: Path) -> None:
    @dataclasses.dataclass
    class Doc:
        title: str
        body: str

    snapvc.register_type(Doc, name="tests.encoding_api.Doc")
    with snapvc.open(tmp_path / "r.snapvc") as repo:
        repo.commit({"doc": Doc("t", _text(5000))})
        tree = repo.get_commit(repo.resolve("main")).tree
        root = read_node(tree, repo.loader.fetch(tree))
        doc = read_node(root.entries["doc"], repo.loader.fetch(root.entries["doc"]))
        assert (doc.kind, doc.value_type, doc.typed_name) == (MAP, "typed", "tests.encoding_api.Doc")
        assert doc.entries["title"] == "t" and "body" in doc.refs


def _node_bytes(kind: int, payload: list[object]) -> tuple[bytes, bytes]:
    import msgpack

    oid, data = object_bytes(kind, msgpack.packb(payload, use_bin_type=True))
    return bytes(oid), data


@pytest.mark.parametrize(("kind", "payload", "says"), [
    (TEXT, [0, 0, [b"abc"], [3]], "4 fields, not 5"),  # a TEXT leaf without its reference positions
    (MAP, [0, 1, ["a"], [b"\x00" * 32]], "4 fields, not 5"),  # an inner MAP node without its counts
    (MAP, [7, 0, {}, []], "type tag is 7"),
    (SEQ, [0, 0, [1, 2], 5], "cannot read seq node"),  # reference positions that are not a list
])
def test_read_node_refuses_a_node_of_the_wrong_shape_naming_the_object(kind: int, payload: list[object], says: str) -> None:
    oid, data = _node_bytes(kind, payload)
    with pytest.raises(CorruptObjectError, match=says) as raised:
        read_node(oid, data)
    assert bytes(raised.value.object_id) == oid


def test_chunk_spans_cover_the_bytes_and_an_edit_changes_about_one_chunk() -> None:
    data = _text(100_000, seed=3).encode()
    spans = list(chunk_spans(data))
    assert spans[0][0] == 0 and sum(length for _, length in spans) == len(data)
    assert all(start + length == nxt for (start, length), (nxt, _) in zip(spans, spans[1:]))
    edited = data[:50_000] + b"an edit in the middle" + data[50_000:]
    before = {data[s:s + n] for s, n in spans}
    after = [edited[s:s + n] for s, n in chunk_spans(edited)]
    assert sum(chunk not in before for chunk in after) <= 2


def test_the_encoder_stores_long_text_as_the_chunker_cuts_it() -> None:
    text = _text(4 * CHUNK_THRESHOLD, seed=5)
    encoder = Encoder()
    encoder.encode_root({"doc": text})
    chunks = {bytes(oid) for oid, raw in encoder.objects.items() if raw[0] == BLOB}
    data = text.encode()
    assert chunks == {bytes(object_bytes(BLOB, data[s:s + n])[0]) for s, n in chunk_spans(data)}


def test_a_deep_snapshot_sees_a_change_in_place_below_the_values_it_recorded() -> None:
    inner = {"a": [1, 2, {"b": "c"}]}
    point = Point(1, 2)
    snapshot = DeepSnapshot.of([inner, point])
    assert snapshot is not None and snapshot.same()
    inner["a"][2]["b"] = "changed"
    assert not snapshot.same()
    snapshot = DeepSnapshot.of([inner, point])
    assert snapshot is not None and snapshot.same()
    point.x = 5
    assert not snapshot.same()
    assert DeepSnapshot.of([{1, 2}]) is None  # nothing proves a set unchanged: refused


def test_a_deep_snapshot_of_many_typed_values_records_them_all_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # A message history is thousands of typed values: they are recorded in a few passes
    # over them all, not one Python call each, and a change to any is still seen.
    pydantic = pytest.importorskip("pydantic")

    class Note(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="allow")
        text: str
        tags: list[str] = []

    notes = [Note(text=f"n{i}", tags=["a", str(i)], more={"i": [i]}) for i in range(2000)] + [Point(i, i) for i in range(500)]
    calls = {"add_dicts": 0, "add_object": 0}
    add_dicts, add_object = DeepSnapshot._add_dicts, DeepSnapshot.add_object

    def counted_add_dicts(self: DeepSnapshot, dicts: list[dict[Any, Any]]) -> None:
        calls["add_dicts"] += 1
        add_dicts(self, dicts)

    def counted_add_object(self: DeepSnapshot, obj: Any) -> None:
        calls["add_object"] += 1
        add_object(self, obj)

    monkeypatch.setattr(DeepSnapshot, "_add_dicts", counted_add_dicts)
    monkeypatch.setattr(DeepSnapshot, "add_object", counted_add_object)
    snapshot = DeepSnapshot.of(notes)
    assert snapshot is not None and snapshot.same()
    assert calls["add_object"] == 0 and calls["add_dicts"] <= 10, calls  # a few a level of depth
    assert len(snapshot.objs) == 2500
    for change in (lambda: notes[7].tags.append("b"), lambda: setattr(notes[1999], "text", "x"),
                   lambda: notes[3].more["i"].append(1), lambda: notes[4].model_fields_set.discard("tags"),
                   lambda: setattr(notes[2300], "y", 0)):
        snapshot = DeepSnapshot.of(notes)
        assert snapshot is not None and snapshot.same()
        change()
        assert not snapshot.same()


@pytest.fixture(params=[True, False], ids=["by address", "element by element"])
def identity_compare(request: pytest.FixtureRequest) -> Iterator[bool]:
    """Both ways ``snapvc.encoding.identity`` compares lists (the second where an id is
    not an address): every test using it runs both."""
    identity.compare_by_address(request.param)
    try:
        yield request.param
    finally:
        identity.compare_by_address(True)


def test_same_objects_is_identity_not_equality(identity_compare: bool) -> None:
    big, other_big = 10**30, int("1" + "0" * 30)  # equal ints, two objects
    lst, text = [1, 2], "".join(["te", "xt"])
    held = [1, 1.0, 0.0, big, lst, text, None, {"k": 1}]
    assert identity.same_objects(held, list(held))
    assert identity.same_objects([], [])
    for position, equal_other in [(0, True), (1, 1), (2, -0.0), (3, other_big), (4, [1, 2]), (5, "text"),
                                  (7, {"k": True})]:
        changed = list(held)
        changed[position] = equal_other
        assert changed == held and not identity.same_objects(changed, held), position
    assert not identity.same_objects(held[:-1], held) and not identity.same_objects(held, held[:-1])
    assert identity.same_prefix(held, tuple(held[:3])) and identity.same_prefix(held[:3], held)
    assert identity.same_prefix([], held) and not identity.same_prefix([True, *held[1:3]], held)


def test_a_deep_snapshot_sees_a_value_replaced_by_an_equal_one(identity_compare: bool) -> None:
    """1 and True, 0.0 and -0.0 are equal but stored differently; an equal list put in
    place of another is a new container to watch."""
    inner: dict[str, Any] = {"n": 1, "z": 0.0, "items": [[1], "x"]}
    for change in (lambda: inner.__setitem__("n", True), lambda: inner.__setitem__("z", -0.0),
                   lambda: inner["items"].__setitem__(0, [1])):
        snapshot = DeepSnapshot.of([inner])
        assert snapshot is not None and snapshot.same()
        change()
        assert not snapshot.same()


def test_values_replaced_in_place_by_equal_ones_are_stored(identity_compare: bool) -> None:
    messages = [{"role": "user", "n": i, "flag": 0, "tags": [i]} for i in range(40)]
    repo = snapvc.open("memory://")
    state = {"messages": messages}
    repo.commit(state)
    messages[5]["flag"] = False  # equal to 0, stored as a bool
    messages[9]["tags"] = [9]  # an equal, new list ...
    c = repo.commit(state)
    assert repo.checkout(c.id)["messages"][5]["flag"] is False
    messages[9]["tags"].append("later")  # ... watched from then on
    c = repo.commit(state)
    assert repo.checkout(c.id) == state


def test_a_deep_snapshot_of_many_dicts_sees_a_change_in_any_of_them(identity_compare: bool) -> None:
    """The dicts are checked a run at a time: a change in any run, or across two, counts."""
    def change_at(i: int) -> list[Callable[[list[dict[str, Any]]], None]]:
        return [
            lambda ds: ds[i].__setitem__("n", True),  # equal to 1, stored apart
            lambda ds: ds[i].__setitem__("renamed", ds[i].pop("tags")),  # same values, another key
            lambda ds: ds[i + 1].__setitem__("moved", ds[i].pop("tags")),  # one dict to the next
            lambda ds: ds[i]["tags"].append("x"),
        ]

    for i in (0, 510, 511, 1023, 1498):
        for change in change_at(i):
            dicts: list[dict[str, Any]] = [{"n": 1, "tags": [k]} for k in range(1500)]
            snapshot = DeepSnapshot.of([dicts])
            assert snapshot is not None and snapshot.same()
            change(dicts)
            assert not snapshot.same(), i


@dataclasses.dataclass
class Note:
    text: str
    tags: dict[str, Any]


def _set_key(d: dict[str, Any], value: Any) -> None:
    d["n"] = value


def _set_text(note: Note, value: str) -> None:
    note.text = value


def test_a_deep_snapshot_sees_every_way_of_changing_a_dict(identity_compare: bool) -> None:
    """Each way of changing a dict's keys or values, also by code run often enough for the
    interpreter to specialize it, and a typed value's attribute set, is seen; a value set
    again to the very object it held is no change."""
    def fresh() -> dict[str, Any]:
        return {"n": 1, "a": "x", "b": [1], "c": {"d": 2}}

    shared = "same"
    changes: list[Callable[[dict[str, Any]], Any]] = [
        lambda d: d.__setitem__("n", True), lambda d: d.__setitem__("new", 1), lambda d: d.pop("a"),
        lambda d: d.__setitem__("z", d.pop("n")),  # the same values under another key
        lambda d: d.update(zip(("a", "n", "b", "c"), [d.pop(k) for k in list(d)])),  # the same values in order
        lambda d: d.popitem(), lambda d: d.clear(), lambda d: d.update(n=1.0), lambda d: d.setdefault("e", 0),
        lambda d: d.__ior__({"a": "y"}), lambda d: d.__delitem__("c"), lambda d: d["c"].__setitem__("d", 3),
        lambda d: d.update({str(k): k for k in range(100)}),  # grown past its table
    ]
    for change in changes:
        d = fresh()
        snapshot = DeepSnapshot.of([d])
        assert snapshot is not None and snapshot.same()
        change(d)
        assert not snapshot.same(), change
    d = fresh()
    d["a"] = shared
    snapshot = DeepSnapshot.of([d])
    assert snapshot is not None
    for i in range(200):  # a hot loop: each store is seen
        _set_key(d, d["n"])  # the very object again: no change
        assert snapshot.same(), i
        _set_key(d, i + 2)
        assert not snapshot.same(), i
        snapshot = DeepSnapshot.of([d])
        assert snapshot is not None
    own = Note("first", {"k": 1})
    own.__dict__ = dict(own.__dict__)  # a dict of its own, which stores are specialized for
    for note in (Note("first", {"k": 1}), own):
        for i in range(200):
            snapshot = DeepSnapshot.of([note])
            assert snapshot is not None and snapshot.same()
            _set_text(note, f"text {i}")
            assert not snapshot.same(), i


def test_a_deep_snapshot_checks_a_dict_by_one_number_however_many_keys_it_has() -> None:
    """Where the interpreter stamps dicts with version numbers (CPython), a check compares
    one number per dict, not its keys and values: what a commit compares for a long
    history of wide messages follows the count of containers."""
    if identity.dict_versions() is None:
        pytest.skip("this interpreter keeps no version numbers of dicts")
    messages = [{f"field {k}": f"value {i} {k}" for k in range(20)} | {"calls": [{"id": i}]} for i in range(300)]
    snapshot = DeepSnapshot.of([messages])
    assert snapshot is not None and snapshot.same()
    compared = (len(snapshot.vnums) + len(snapshot.keys) + len(snapshot.vals) + len(snapshot.slens)
                + len(snapshot.items) + len(snapshot.orefs))
    # 600 dicts, a number each; 301 lists, their lengths and items
    assert len(snapshot.vdicts) == 600 and compared == 600 + 301 + 300 + 300
    messages[150]["field 3"] = "edited in place"
    assert not snapshot.same()


def test_a_rebuilt_history_records_only_its_new_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    """A list rebuilt as ``old + [new]`` (as LangGraph's reducers hand it over) takes over
    the old list's snapshot and grows it: what a commit records in snapshots follows the
    new messages, as many at 300 steps as at 100, not the history. (Until its snapshot
    holds 256 containers, the state's root copies it into its own: a bounded cost.)"""
    recorded = [0]
    add_all, add_dicts, add_seq = DeepSnapshot.add_all, DeepSnapshot._add_dicts, DeepSnapshot._add_seq

    def counting_all(self: DeepSnapshot, other: DeepSnapshot) -> None:
        recorded[0] += other.containers()
        add_all(self, other)

    def counting_dicts(self: DeepSnapshot, dicts: list[dict[Any, Any]]) -> None:
        recorded[0] += len(dicts)
        add_dicts(self, dicts)

    def counting_seq(self: DeepSnapshot, s: Any) -> None:
        recorded[0] += 1
        add_seq(self, s)

    monkeypatch.setattr(DeepSnapshot, "add_all", counting_all)
    monkeypatch.setattr(DeepSnapshot, "_add_dicts", counting_dicts)
    monkeypatch.setattr(DeepSnapshot, "_add_seq", counting_seq)

    def recorded_per_commit(steps: int) -> list[int]:
        repo = snapvc.open("memory://")
        state: dict[str, Any] = {"messages": [], "notes": {f"note {k}": "x" for k in range(20)}, "step": 0}
        counts = []
        for i in range(steps):
            call = {"id": f"call_{i}", "arguments": {"q": f"question {i}"}}
            new = [{"role": "assistant", "content": f"said {i} " * 30, "tool_calls": [call]},
                   {"role": "tool", "tool_call_id": f"call_{i}", "content": f"result {i} " * 30}]
            state = {**state, "messages": state["messages"] + new, "notes": {**state["notes"], "last": str(i)},
                     "step": i}
            recorded[0] = 0
            repo.commit(state)
            counts.append(recorded[0])
        repo.close()
        return counts[-10:]

    short, long = recorded_per_commit(100), recorded_per_commit(300)
    assert short == long and max(long) <= 20, (short, long)


def test_a_deep_snapshot_cut_back_and_grown_again_checks_what_it_holds(identity_compare: bool) -> None:
    """What a failed commit added to a snapshot is forgotten (``truncate``); what is added
    after is checked, however the snapshot reads its dicts (in runs read by readers made
    once, which a cut must not leave reading the forgotten dicts)."""
    kept = [{"n": i} for i in range(2100)]
    snapshot = DeepSnapshot.of([kept])
    assert snapshot is not None and snapshot.same()
    sizes = snapshot.sizes()
    failed = [{"n": i} for i in range(1000)]
    grown = DeepSnapshot.of([failed])
    assert grown is not None
    snapshot.add_all(grown)
    assert snapshot.same()  # (all of it read: 3,100 dicts)
    snapshot.truncate(sizes)
    failed[0]["n"] = "changed, but forgotten"
    assert snapshot.same()
    again = [{"n": i} for i in range(1000)]
    grown = DeepSnapshot.of([again])
    assert grown is not None
    snapshot.add_all(grown)
    assert snapshot.same()
    for changed in (again[500], again[999], kept[2099]):
        changed["n"] = "changed"
        assert not snapshot.same()
        changed["n"] = "changed back"
        snapshot = DeepSnapshot.of([kept, again])
        assert snapshot is not None and snapshot.same()
