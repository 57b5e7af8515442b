"""Values come back exactly as they were committed, type included, and the same value
always gets the same ids, whoever built it, in whatever order, in whatever repository."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import math
import random
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import orjson
import pydantic
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import snapvc
from snapvc.encoding.reader import MapView, SeqView, is_tuple, tree_root
from snapvc.ids import ObjectId

PARIS = ZoneInfo("Europe/Paris")


# -- typed values used in states (module level, so a reader can find their classes) ------


@dataclasses.dataclass
class Note:
    title: str
    body: str
    tags: list[str]
    score: float = 0.0


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int
    label: tuple[str, ...] = ()


@dataclasses.dataclass
class Folder:
    name: str
    notes: list[Note]
    corner: Point | None = None


class Message(pydantic.BaseModel):
    role: str
    content: str
    tokens: int = 0
    attachment: bytes = b""


class Loose(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    name: str


class WithPrivate(pydantic.BaseModel):
    name: str
    _cursor: int = pydantic.PrivateAttr(default=0)


class Conversation(pydantic.BaseModel):
    id: uuid.UUID
    started: dt.datetime
    messages: list[Message]
    extra: dict[str, Any] = {}


# -- exact comparison ---------------------------------------------------------------------


def assert_same(expected: Any, actual: Any, where: str = "state") -> None:
    """``actual`` equals ``expected`` and has the same type at every level; floats keep
    their sign and NaN-ness, Decimals their exact text, datetimes their zone and instant."""
    assert type(actual) is type(expected), f"{where}: {type(expected).__name__} came back as {type(actual).__name__}"
    if isinstance(expected, float):
        if math.isnan(expected):
            assert math.isnan(actual), f"{where}: NaN came back as {actual!r}"
        else:
            assert actual == expected, f"{where}: {expected!r} != {actual!r}"
            assert math.copysign(1.0, actual) == math.copysign(1.0, expected), f"{where}: sign of {expected!r} lost"
    elif isinstance(expected, Decimal):
        assert str(actual) == str(expected), f"{where}: Decimal {expected} came back as {actual}"
    elif isinstance(expected, (dt.datetime, dt.time)):
        assert actual == expected, f"{where}: {expected!r} != {actual!r}"
        assert actual.fold == expected.fold, f"{where}: fold of {expected!r} lost"
        if isinstance(expected.tzinfo, ZoneInfo):
            assert isinstance(actual.tzinfo, ZoneInfo) and actual.tzinfo.key == expected.tzinfo.key, where
        else:
            assert actual.tzinfo == expected.tzinfo, f"{where}: zone {expected.tzinfo!r} != {actual.tzinfo!r}"
        if isinstance(expected, dt.datetime):
            assert actual.utcoffset() == expected.utcoffset(), f"{where}: offset of {expected!r} changed"
    elif isinstance(expected, dict):
        assert set(actual) == set(expected), f"{where}: keys {sorted(expected)} != {sorted(actual)}"
        for key in expected:
            assert_same(expected[key], actual[key], f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), f"{where}: length {len(expected)} != {len(actual)}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            assert_same(e, a, f"{where}[{i}]")
    elif dataclasses.is_dataclass(expected):
        for f in dataclasses.fields(expected):
            assert_same(getattr(expected, f.name), getattr(actual, f.name), f"{where}.{f.name}")
    elif isinstance(expected, pydantic.BaseModel):
        for name in type(expected).model_fields:
            assert_same(getattr(expected, name), getattr(actual, name), f"{where}.{name}")
    else:
        assert actual == expected, f"{where}: {expected!r} != {actual!r}"


# -- repositories -------------------------------------------------------------------------


RoundTrip = Callable[[dict[str, Any]], dict[str, Any]]


@pytest.fixture(params=["memory", "sqlite"])
def round_trip(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RoundTrip]:
    """Commit a state and read it back; on SQLite through a freshly opened repository, so
    the value really comes from the file."""
    if request.param == "memory":
        repo = snapvc.open("memory://")

        def through_memory(state: dict[str, Any]) -> dict[str, Any]:
            repo.commit(state, message="round trip")
            return repo.checkout("main")

        yield through_memory
    else:
        path = tmp_path / "values.snapvc"
        counter = iter(range(1_000_000))

        def through_file(state: dict[str, Any]) -> dict[str, Any]:
            branch = f"b{next(counter)}"
            with snapvc.open(path) as writer:
                writer.commit(state, branch=branch)
            with snapvc.open(path, create=False) as reader:
                return reader.checkout(branch)

        yield through_file


def tree_of(state: dict[str, Any], repo: snapvc.Repository | None = None, branch: str = "main") -> ObjectId:
    repo = repo or snapvc.open("memory://")
    c = repo.commit(state, branch=branch)
    return repo.get_commit(c.id).tree


def check(round_trip: RoundTrip, state: dict[str, Any]) -> None:
    expected = copy.deepcopy(state)
    assert_same(expected, round_trip(state))
    assert_same(expected, state)  # committing never changes the caller's state


def random_text(n: int, seed: int = 7) -> str:
    rnd = random.Random(seed)
    words = ["agent", "tool", "plan", "observe", "reflect", "memory", "é", "naïve", "日本語", "🙂", "result", "\n"]
    out = []
    size = 0
    while size < n:
        w = rnd.choice(words)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n]


def random_bytes(n: int, seed: int = 11) -> bytes:
    return random.Random(seed).randbytes(n)


# -- every supported type -----------------------------------------------------------------


def test_none_and_bools(round_trip: RoundTrip) -> None:
    check(round_trip, {"none": None, "yes": True, "no": False, "mixed": [True, 1, False, 0, None]})


def test_ints_of_any_size(round_trip: RoundTrip) -> None:
    ints = [0, 1, -1, 127, 128, -32, -33, 255, 256, 2**31, 2**32, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**64 + 1,
            -(2**63), -(2**63) - 1, 10**100, -(10**100), 2**1000 + 12345]
    check(round_trip, {"ints": ints, "big": 2**64, "small": -(2**63) - 1, "googol": 10**100})


def test_floats_keep_sign_nan_and_infinities(round_trip: RoundTrip) -> None:
    floats = [0.0, -0.0, 1.5, -2.25, 0.1, 1e308, -1e308, 5e-324, -5e-324, math.inf, -math.inf, math.nan, math.pi]
    state = {"floats": floats, "negative zero": -0.0, "nan": math.nan, "inf": math.inf, "-inf": -math.inf,
             "in a tuple": (-0.0, math.nan)}
    back = round_trip(copy.deepcopy(state))
    assert_same(state, back)
    assert math.copysign(1.0, back["negative zero"]) == -1.0
    assert math.copysign(1.0, back["floats"][0]) == 1.0
    assert math.isnan(back["nan"]) and back["inf"] == math.inf and back["-inf"] == -math.inf


def test_ints_and_floats_stay_apart(round_trip: RoundTrip) -> None:
    check(round_trip, {"one": 1, "one point oh": 1.0, "zero": 0, "zero point oh": 0.0, "true": True})


def test_strings(round_trip: RoundTrip) -> None:
    state = {
        "empty": "",
        "ascii": "hello",
        "accents": "déjà vu, naïve café",
        "cjk": "日本語のテキスト",
        "emoji": "🙂🚀👩‍👩‍👧",
        "nul": "a\x00b",
        "512 chars": "é" * 512,
        "600 chars, 1200 bytes": "é" * 600,
        "2 KB of emoji": "🙂" * 600,
        "3 KB": random_text(3000),
        "50 KB": random_text(50_000),
        "50 KB of emoji": "🙂🚀" * 6500,
    }
    assert len(state["3 KB"]) == 3000 and len(state["50 KB"]) == 50_000
    check(round_trip, state)


def test_bytes(round_trip: RoundTrip) -> None:
    state = {
        "empty": b"",
        "short": b"\x00\x01\xff",
        "2 KB": random_bytes(2048),
        "5 KB": random_bytes(5 * 1024),
        "100 KB random": random_bytes(100 * 1024),
        "100 KB zeros": bytes(100 * 1024),
        "in a list": [b"a", random_bytes(9000, seed=3)],
    }
    check(round_trip, state)


def test_str_and_bytes_stay_apart(round_trip: RoundTrip) -> None:
    text = random_text(20_000)
    check(round_trip, {"s": "abc", "b": b"abc", "long s": text, "long b": text.encode()})


def test_lists_and_tuples(round_trip: RoundTrip) -> None:
    state = {
        "empty list": [],
        "empty tuple": (),
        "one": (1,),
        "nested tuples": ((1, (2, (3, ()))), ((),), ("a", b"b", None)),
        "tuple of 200": tuple(range(200)),
        "tuple of 200 strings": tuple(f"item {i}" * 10 for i in range(200)),
        "list of tuples": [(i, str(i)) for i in range(100)],
        "tuple of lists": ([1, 2], [], [[3]]),
        "list in tuple in list": [([{"k": (1, [2, (3,)])}],)],
        "long list": list(range(5000)),
    }
    check(round_trip, state)


def test_dict_nesting(round_trip: RoundTrip) -> None:
    deep: dict[str, Any] = {"leaf": 1}
    for i in range(60):
        deep = {f"level {i}": deep, "n": i}
    state = {
        "empty": {},
        "keys": {"": 0, " ": 1, "a.b": 2, "é": 3, "🙂": 4, "0": 5, "None": 6},
        "deep": deep,
        "wide": {f"key {i}": {"i": i, "even": i % 2 == 0} for i in range(3000)},
    }
    check(round_trip, state)


def test_dates_times_and_durations(round_trip: RoundTrip) -> None:
    state = {
        "naive": dt.datetime(2024, 5, 17, 13, 45, 30, 123456),
        "utc": dt.datetime(2024, 5, 17, 13, 45, 30, tzinfo=dt.UTC),
        "offset": dt.datetime(2024, 5, 17, 13, 45, tzinfo=dt.timezone(dt.timedelta(hours=-5, minutes=-30))),
        "paris summer": dt.datetime(2024, 7, 1, 9, 0, tzinfo=PARIS),
        "paris winter": dt.datetime(2024, 1, 1, 9, 0, 0, 1, tzinfo=PARIS),
        "min": dt.datetime.min,
        "max": dt.datetime.max,
        "date": dt.date(1999, 12, 31),
        "time": dt.time(23, 59, 59, 999999),
        "time utc": dt.time(8, 30, tzinfo=dt.UTC),
        "timedelta": dt.timedelta(days=-3, seconds=5, microseconds=7),
        "big timedelta": dt.timedelta(days=999_999_999),
        "list": [dt.date(2020, 2, 29), dt.timedelta(0)],
    }
    check(round_trip, state)


def test_datetime_in_the_repeated_hour_keeps_its_instant(round_trip: RoundTrip) -> None:
    # 2024-10-27 02:30 happens twice in Paris; fold=1 is the second one (UTC+1).
    first = dt.datetime(2024, 10, 27, 2, 30, tzinfo=PARIS, fold=0)
    second = dt.datetime(2024, 10, 27, 2, 30, tzinfo=PARIS, fold=1)
    assert first.utcoffset() != second.utcoffset()
    back = round_trip({"first": first, "second": second})
    assert back["first"].timestamp() == first.timestamp()
    assert back["second"].timestamp() == second.timestamp()
    assert_same({"first": first, "second": second}, back)


def test_uuids_and_decimals(round_trip: RoundTrip) -> None:
    state = {
        "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "uuid4": uuid.UUID(int=random.Random(5).getrandbits(128), version=4),
        "nil": uuid.UUID(int=0),
        "decimals": [Decimal("-0.00"), Decimal("NaN"), Decimal("1E+3"), Decimal("sNaN"), Decimal("-Infinity"),
                     Decimal("0.1000"), Decimal("123456789012345678901234567890.123456789")],
        "price": Decimal("19.990"),
    }
    back = round_trip(copy.deepcopy(state))
    assert_same(state, back)
    assert str(back["decimals"][0]) == "-0.00"
    assert back["decimals"][1].is_nan() and not back["decimals"][1].is_snan()
    assert str(back["decimals"][2]) == "1E+3"


def test_dataclasses_small_and_large(round_trip: RoundTrip) -> None:
    small = Note("todo", "buy milk", ["home"], 0.5)
    large = Note("report", random_text(12_000), [f"t{i}" for i in range(50)], -0.0)
    corner = Point(1, -2, ("a", "b"))
    state = {
        "note": small,
        "large": large,
        "point": corner,
        "in a list": [small, corner, {"deeper": [Point(3, 4)]}],
        "folder": Folder("inbox", [small, large], corner),
        "in a dict": {"by id": {"n1": small, "p1": Point(0, 0)}},
    }
    check(round_trip, state)
    back = round_trip(copy.deepcopy(state))
    with pytest.raises(dataclasses.FrozenInstanceError):
        back["point"].x = 5  # type: ignore[misc]


def test_pydantic_models_small_and_large(round_trip: RoundTrip) -> None:
    small = Message(role="user", content="hi", tokens=2, attachment=b"")
    large = Message(role="tool", content=random_text(15_000), tokens=4000, attachment=random_bytes(11_000))
    convo = Conversation(
        id=uuid.UUID(int=42),
        started=dt.datetime(2024, 3, 1, 12, tzinfo=dt.UTC),
        messages=[small, large],
        extra={"note": Note("n", "b", [])},
    )
    state = {
        "message": small,
        "large": large,
        "conversation": convo,
        "in a list": [small, {"m": large}, [convo]],
        "in a dict": {"by role": {"user": small, "tool": large}},
    }
    check(round_trip, state)


def test_pydantic_model_keeps_which_fields_were_set(round_trip: RoundTrip) -> None:
    # A model built with defaults dumps differently with exclude_unset: that is part of its value.
    msg = Message(role="user", content="hi")
    back = round_trip({"m": msg})["m"]
    assert type(back) is Message
    assert back == msg
    assert back.model_dump(exclude_unset=True) == msg.model_dump(exclude_unset=True) == {"role": "user", "content": "hi"}
    assert back.model_fields_set == {"role", "content"}


def test_pydantic_model_keeps_its_extra_fields(round_trip: RoundTrip) -> None:
    loose = Loose(name="n", score=3, history=[1, 2])
    assert loose.model_extra == {"score": 3, "history": [1, 2]}
    back = round_trip({"m": loose})["m"]
    assert type(back) is Loose
    assert back.model_extra == {"score": 3, "history": [1, 2]}
    assert back.model_fields_set == loose.model_fields_set == {"name", "score", "history"}
    assert back == loose


def test_pydantic_model_keeps_its_private_attributes(round_trip: RoundTrip) -> None:
    model = WithPrivate(name="n")
    model._cursor = 42
    back = round_trip({"m": model})["m"]
    assert type(back) is WithPrivate
    assert back._cursor == 42
    assert back == model


class Aliased(pydantic.BaseModel):
    name: str = pydantic.Field(alias="title")


def test_a_pydantic_model_with_every_field_stored_is_rebuilt_as_model_construct_makes_it(
        round_trip: RoundTrip, monkeypatch: pytest.MonkeyPatch) -> None:
    models = [Message(role="user", content="hi"), Loose(name="n", score=3), Loose(name="n"),
              Message(role="tool", content="x", tokens=3, attachment=b"a")]
    built: Counter[str] = Counter()
    real = pydantic.BaseModel.model_construct.__func__  # type: ignore[attr-defined]

    def counted(cls: type[pydantic.BaseModel], *args: Any, **kwargs: Any) -> Any:
        built[cls.__name__] += 1
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(pydantic.BaseModel, "model_construct", classmethod(counted))
    back = round_trip({"m": models, "private": WithPrivate(name="p"), "aliased": Aliased(title="t")})
    # Every field given by name: set directly, as model_construct sets them (its search for
    # aliases, defaults and post-init hooks finds nothing to do).
    for model, again in zip(models, back["m"]):
        made = real(type(model), **dict(model))
        object.__setattr__(made, "__pydantic_fields_set__", set(model.model_fields_set))
        if model.model_extra:
            object.__setattr__(made, "__pydantic_extra__", dict(model.model_extra))
        assert type(again) is type(model) and again == model == made
        assert list(again.__dict__) == list(made.__dict__) and again.__pydantic_extra__ == made.__pydantic_extra__
        assert again.__pydantic_private__ is made.__pydantic_private__ is None
        assert again.model_fields_set == model.model_fields_set
    # A private attribute (a post-init hook) or an alias: model_construct itself.
    assert back["private"] == WithPrivate(name="p") and back["aliased"] == Aliased(title="t")
    assert built == {"WithPrivate": 1, "Aliased": 1}


def test_everything_together(round_trip: RoundTrip) -> None:
    state = {
        "messages": [
            {"role": "user", "content": f"question {i}", "at": dt.datetime(2024, 1, 1, tzinfo=PARIS) + dt.timedelta(minutes=i),
             "id": uuid.UUID(int=i), "cost": Decimal(i) / 100, "raw": bytes([i % 256]) * (i % 7)}
            for i in range(300)
        ],
        "memory": {"facts": ("sky", "blue"), "score": -0.0, "nan": math.nan, "big": 2**70},
        "notes": [Note("a", random_text(3000), ["x"]), Message(role="system", content="be brief")],
        "blob": random_bytes(30_000),
    }
    check(round_trip, state)


def test_memory_and_file_repositories_agree(tmp_path: Path) -> None:
    state = {"m": Message(role="user", content=random_text(20_000)), "t": tuple(range(100)), "f": -0.0}
    memory = snapvc.open("memory://")
    with snapvc.open(tmp_path / "a.snapvc") as file:
        assert tree_of(copy.deepcopy(state), memory) == tree_of(copy.deepcopy(state), file)


# -- property: decode(encode(x)) == x, and same value => same id ----------------------------


keys = st.text(max_size=8)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.binary(max_size=20)
    | st.sampled_from(["x" * 700, "é" * 1100, "🙂" * 3000, b"\x01" * 3000, bytes(9000)])
)


def long_list(inner: list[Any], n: int, at: int) -> list[Any]:
    """``n`` entries of about 50 bytes with ``inner`` among them: past 64 entries a list
    is planned as a prolly tree, and from about 4 KiB (leaves hold that much) it has
    several nodes."""
    filler = [f"entry {i} of {n}: " + "lorem " * 6 for i in range(n)]
    at = min(at, n)
    return [*filler[:at], *inner, *filler[at:]]


def long_map(inner: dict[str, Any], n: int) -> dict[str, Any]:
    """A map of ``n`` filler entries and ``inner``, for prolly trees of maps."""
    return {**{f"key {i:05d}": f"value {i} of {n}: " + "ipsum " * 6 for i in range(n)}, **inner}


entry_counts = st.integers(0, 64) | st.integers(65, 700)  # one node at most, or a tree
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=8)
    | st.lists(inner, max_size=8).map(tuple)
    | st.dictionaries(keys, inner, max_size=8)
    | st.builds(long_list, st.lists(inner, max_size=3), entry_counts, st.integers(0, 700))
    | st.builds(long_list, st.lists(inner, max_size=3), entry_counts, st.integers(0, 700)).map(tuple)
    | st.builds(long_map, st.dictionaries(keys, inner, max_size=3), entry_counts),
    max_leaves=40,
)
states = st.dictionaries(keys, values, max_size=6)


def read_lazily(view: Any, expected: Any, reached: Counter[str], where: str = "state") -> None:
    """Read a stored value through its lazy views, one key or index at a time (each lookup
    walks its tree from the root), checking each against ``expected``; count the
    containers stored as trees of several nodes."""
    if isinstance(view, (MapView, SeqView)):
        _, parts = tree_root(view)
        if parts and parts[0].level >= 0:  # the root is an inner node: the container has several nodes
            reached["multi-node " + ("map" if isinstance(view, MapView) else "list")] += 1
    if isinstance(view, MapView):
        assert type(expected) is dict and sorted(view) == sorted(expected), where
        for key in expected:
            read_lazily(view[key], expected[key], reached, f"{where}[{key!r}]")
    elif isinstance(view, SeqView):
        assert type(expected) is (tuple if is_tuple(view) else list) and len(view) == len(expected), where
        for i in reversed(range(len(expected))):  # from the end: no reader may rely on reading in order
            read_lazily(view[i], expected[i], reached, f"{where}[{i}]")
    else:
        assert_same(expected, view, where)


def reversed_order(value: Any) -> Any:
    """The same value, every dict built in the opposite insertion order."""
    if type(value) is dict:
        return {k: reversed_order(value[k]) for k in reversed(list(value))}
    if type(value) is list:
        return [reversed_order(v) for v in value]
    if type(value) is tuple:
        return tuple(reversed_order(v) for v in value)
    return value


@pytest.mark.slow
def test_round_trip_and_same_tree_whatever_the_insertion_order(tmp_path: Path) -> None:
    reached: Counter[str] = Counter()
    files = iter(range(1_000_000))

    # Derandomized: the same examples every run, so a failure reproduces.
    @settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(states)
    def round_trip(state: dict[str, Any]) -> None:
        path = tmp_path / f"{next(files)}.snapvc"
        with snapvc.open(path) as repo:
            c = repo.commit(state)
        with snapvc.open(path, create=False) as repo:  # read back from the file
            assert_same(state, repo.checkout("main"))
            assert_same(state, repo.snapshot("main").to_dict())
            found: Counter[str] = Counter()
            read_lazily(repo.snapshot("main"), state, found)
            tree = repo.get_commit(c.id).tree
        # The same value, every dict built in the opposite order: the same tree.
        other = reversed_order(state)
        assert list(other) == list(reversed(list(state)))
        assert tree_of(other) == tree
        reached["examples"] += 1
        for kind in found:
            event(f"holds a {kind} tree")
            reached[kind] += 1

    round_trip()
    # The generator reaches what it is for: stored trees of several nodes, read back lazily.
    assert reached["multi-node list"] >= reached["examples"] // 3, reached
    assert reached["multi-node map"] >= reached["examples"] // 3, reached


@settings(max_examples=60, deadline=None)
@given(st.datetimes(timezones=st.none() | st.timezones()), st.times(timezones=st.none() | st.timezones()))
def test_datetimes_and_times_in_any_zone_round_trip(when: dt.datetime, at: dt.time) -> None:
    repo = snapvc.open("memory://")
    repo.commit({"when": when, "at": at, "both": [when, (at,)]})
    back = repo.checkout("main")
    assert_same({"when": when, "at": at, "both": [when, (at,)]}, back)
    if when.tzinfo is not None:
        assert back["when"].timestamp() == when.timestamp()


def test_insertion_order_of_large_maps_does_not_matter() -> None:
    items = [(f"key {i}", {"i": i, "text": f"value {i}" * 5}) for i in range(3000)]
    shuffled = items[:]
    random.Random(3).shuffle(shuffled)
    assert tree_of({"m": dict(items)}) == tree_of({"m": dict(shuffled)}) == tree_of({"m": dict(reversed(items))})


def test_different_values_get_different_trees() -> None:
    pairs = [
        ({"a": 1}, {"a": 1.0}),
        ({"a": 1}, {"a": True}),
        ({"a": 0.0}, {"a": -0.0}),
        ({"a": "x"}, {"a": b"x"}),
        ({"a": [1, 2]}, {"a": (1, 2)}),
        ({"a": []}, {"a": ()}),
        ({"a": None}, {}),
        ({"a": Decimal("1.0")}, {"a": Decimal("1.00")}),
        ({"a": dt.datetime(2024, 1, 1)}, {"a": dt.datetime(2024, 1, 1, tzinfo=dt.UTC)}),
        ({"a": Point(1, 2)}, {"a": {"x": 1, "y": 2, "label": ()}}),
    ]
    for left, right in pairs:
        assert tree_of(left) != tree_of(right), (left, right)


# -- the same state gets the same ids: across repositories, and whatever its history ------


def element(i: int) -> Any:
    if i % 50 == 0:
        return f"long element {i} " + "x" * 3000  # an object of its own
    if i % 7 == 0:
        return (i, f"t{i}")
    return {"i": i, "text": f"element number {i}", "flag": i % 3 == 0}


def test_same_state_in_two_repositories_gives_the_same_tree(tmp_path: Path) -> None:
    state = {
        "messages": [element(i) for i in range(2000)],
        "map": {f"k{i}": element(i) for i in range(3000)},
        "doc": random_text(40_000),
        "blob": random_bytes(20_000),
    }
    one = tree_of(copy.deepcopy(state), snapvc.open("memory://"))
    with snapvc.open(tmp_path / "two.snapvc") as repo:
        # A repository with history of its own: earlier, unrelated commits change nothing.
        repo.commit({"unrelated": list(range(100))}, branch="main")
        two = tree_of(copy.deepcopy(state), repo)
    assert one == two


def test_large_list_history_independence() -> None:
    n = 2000
    direct = tree_of({"l": [element(i) for i in range(n)]})

    repo = snapvc.open("memory://")
    items = [element(i) for i in range(1200)]
    state = {"l": items}
    repo.commit(state)
    for i in range(1200, n):  # grown by appends, committed now and then
        items.append(element(i))
        if i % 97 == 0:
            repo.commit(state)
    items[700] = {"replaced": True}
    items[1500] = "something else"
    repo.commit(state)
    items[700] = element(700)  # reverted by equal values, not the same objects
    items[1500] = element(1500)
    items.insert(0, "head")
    items.append("tail")
    repo.commit(state)
    del items[0]
    items.pop()
    c = repo.commit(state)
    assert repo.get_commit(c.id).tree == direct
    assert repo.checkout("main")["l"] == [element(i) for i in range(n)]

    # Built from the end backwards, in a second repository.
    repo2 = snapvc.open("memory://")
    back: list[Any] = []
    state2 = {"l": back}
    for i in reversed(range(n)):
        back.insert(0, element(i))
        if i % 250 == 0:
            repo2.commit(state2)
    assert repo2.get_commit(repo2.resolve("main")).tree == direct


def test_large_map_history_independence() -> None:
    n = 3000
    direct = tree_of({"m": {f"key {i:05d}": element(i) for i in range(n)}})

    repo = snapvc.open("memory://")
    order = list(range(n))
    random.Random(9).shuffle(order)
    m: dict[str, Any] = {}
    state = {"m": m}
    for step, i in enumerate(order):
        m[f"key {i:05d}"] = element(i)
        if step % 400 == 0:
            repo.commit(state)
    m["key 01000"] = "changed"
    m["extra"] = [1, 2, 3]
    del m["key 02999"]
    repo.commit(state)
    m["key 01000"] = element(1000)
    del m["extra"]
    m["key 02999"] = element(2999)
    c = repo.commit(state)
    assert repo.get_commit(c.id).tree == direct
    assert repo.checkout("main")["m"] == {f"key {i:05d}": element(i) for i in range(n)}


@pytest.mark.slow
def test_long_text_history_independence() -> None:
    doc = random_text(60_000)
    direct = tree_of({"doc": doc})
    repo = snapvc.open("memory://")
    repo.commit({"doc": doc[:30_000]})
    repo.commit({"doc": doc[:30_000] + "INSERTED" + doc[30_000:]})
    repo.commit({"doc": doc.replace("agent", "AGENT", 3)})
    c = repo.commit({"doc": "".join(list(doc))})
    assert repo.get_commit(c.id).tree == direct


# -- property: from_jsonable(to_jsonable(x)) == x, typed scalars readable --------------------


typed_scalars = (
    st.datetimes(timezones=st.none() | st.timezones(), allow_imaginary=False).flatmap(
        lambda when: st.sampled_from([when, when.replace(fold=1)]))
    | st.times(timezones=st.none() | st.timezones()).flatmap(lambda at: st.sampled_from([at, at.replace(fold=1)]))
    | st.dates()
    | st.timedeltas()
    | st.uuids()
    | st.decimals(allow_nan=True, allow_infinity=True)
    | st.sampled_from([Decimal("-0"), Decimal("sNaN"), Decimal("-sNaN7"), Decimal("-NaN"), Decimal("1.10"),
                       Decimal("1E+3"), Decimal("-0E-7")])
    | st.integers(min_value=2**63, max_value=2**200) | st.integers(max_value=-(2**63) - 1, min_value=-(2**200))
)


@settings(max_examples=300, deadline=None)
@given(st.lists(typed_scalars | scalars, max_size=6).map(tuple) | typed_scalars)
def test_typed_values_have_a_readable_json_form_that_reads_back_exactly(value: Any) -> None:
    form = snapvc.to_jsonable({"v": value})
    assert "msgpack" not in orjson.dumps(form).decode()  # readable: no opaque encoding
    assert_same({"v": value}, snapvc.from_jsonable(orjson.loads(orjson.dumps(form))))


def test_typed_values_json_forms_as_documented() -> None:
    paris = dt.datetime(2025, 10, 26, 2, 30, fold=1, tzinfo=PARIS)
    assert snapvc.to_jsonable(paris) == {"$snapvc": "datetime", "value": "2025-10-26T02:30:00+01:00",
                                         "zone": "Europe/Paris", "fold": 1}
    assert snapvc.to_jsonable(dt.datetime(2025, 1, 2, 3, 4, 5, 6)) == {"$snapvc": "datetime",
                                                                       "value": "2025-01-02T03:04:05.000006"}
    assert snapvc.to_jsonable(Decimal("1.10")) == {"$snapvc": "decimal", "value": "1.10"}
    assert snapvc.to_jsonable(uuid.UUID(int=1)) == {"$snapvc": "uuid", "value": "00000000-0000-0000-0000-000000000001"}
    assert snapvc.to_jsonable(dt.timedelta(days=1, seconds=30)) == {"$snapvc": "timedelta", "days": 1, "seconds": 30,
                                                                    "microseconds": 0}
    assert snapvc.to_jsonable(2**64) == {"$snapvc": "int", "value": "18446744073709551616"}
    huge = -(10**5000)  # more digits than Python converts to decimal text: written in hex
    assert snapvc.from_jsonable(snapvc.to_jsonable(huge)) == huge
    # The form earlier versions wrote is still read.
    assert snapvc.from_jsonable({"$snapvc": "value", "msgpack": "2AcBAgMEBQYHCAkKCwwNDg8Q"}) == uuid.UUID(
        bytes=bytes(range(1, 17)))
    with pytest.raises(snapvc.errors.MalformedJsonError, match="decimal"):
        snapvc.from_jsonable({"x": {"$snapvc": "decimal", "value": "one"}})
