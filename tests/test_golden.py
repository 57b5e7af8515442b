"""The format is a public promise: fixed values and commits have fixed ids.

If one of these fails, the canonical encoding changed and every existing repository
would see new ids for the same states. Such a change needs a new format version (new
object kinds or codecs that old readers refuse clearly), never a silent edit here.
"""

from __future__ import annotations

import pytest

import snapvc
from snapvc.encoding.writer import Encoder
from snapvc.ids import ObjectId
from snapvc.objects import Commit
from tests.golden_values import golden_states

GOLDEN_TREES = {
    "empty": "59f949db4f239416846dbd40067e26649efea700e1a882f445b50198259ce919",
    "one-int": "91a3a84405d940f70c34f02c08d649621bbba2a09f0384c8bf8150335d970d9a",
    "scalars": "83426ff37537731f642531c95df9f203772402f1d2dc1bf6693dd9b26ec8e355",
    "text-bytes": "064c0baba98d1e12dc981480d11fdbf5af5a61ae9670ed8668f21aed7baf01a5",
    "containers": "c25ddd8cc61e0a3b7c5fdea73280240a2229dd99d9af58d6dfa5ea3a3e30f5c4",
    "ext-types": "1896e8404f223b4e0ad98cffc22fd8fdab6fd2276b0f9b396581658e95e9db47",
    "typed": "a4a3ebe099b6d3dd8798f280f88176472778aeee2d7547f1262925220592cafe",
    "long-text": "c726b7701cbf8b3ac082e5af07f49dee045e06fde0fd480c5474828636d805bc",
    "chunked-text": "89e704156b7bc450f062a6db42557844a5f33ad86302b360a58303a0ad6fe335",
    "long-list": "8c2ee3cfc444e0211ebbc64684a525e23a768c36f4442060e7ab4478b3bfe383",
    "wide-map": "9553a944acef39342c5a37251f32c61be73943b3af6ff364b22e7387e43ace41",
    "messages": "2479de205ac8f6c8d2bc261d714b456b420d7aea9ce846886acf8c2dad0b3ea8",
}

GOLDEN_COMMITS = [
    "cba94e21e68217c16bf27f9ad68b4306c9d81d4b03cfb8d28fee8eb6d9a1ab06",
    "9981279a193ad9aa16d1aa1be9f82fa4ac28b2c4be796403f305c725dbdd57fb",
    "7114d5ceab6b8f68fb2cd79bb04195281cb1748990e60676a09225646eccb59e",
]


@pytest.mark.parametrize("name", sorted(GOLDEN_TREES))
def test_tree_ids_are_frozen(name: str) -> None:
    state = golden_states()[name]
    assert Encoder().encode_root(state).hex == GOLDEN_TREES[name]


@pytest.mark.parametrize("name", sorted(GOLDEN_TREES))
def test_golden_states_round_trip_through_a_repository(name: str) -> None:
    state = golden_states()[name]
    with snapvc.open("memory://") as repo:
        commit = repo.commit(state)
        assert commit.tree.hex == GOLDEN_TREES[name]
        back = repo.checkout()
    if name == "scalars":  # NaN is not equal to itself
        assert repr(back.pop("nan")) == repr(state.pop("nan")) == "nan"
    assert back == state


def _golden_commits() -> list[Commit]:
    tree = ObjectId.from_hex(GOLDEN_TREES["empty"])
    c1, _ = Commit.create(tree=tree, parents=(), author="ada", timestamp_us=1_700_000_000_000_000, message="first",
                          metadata={"step": 1, "agent": "researcher"}, generation=1)
    c2, _ = Commit.create(tree=tree, parents=(c1.id,), author="ada", timestamp_us=1_700_000_001_000_000,
                          message="second", metadata={}, generation=2)
    c3, _ = Commit.create(tree=tree, parents=(c2.id, c1.id), author="bob", timestamp_us=1_700_000_002_500_000,
                          message="merge\n\nbody", metadata={"usage": {"tokens": 10}}, generation=3)
    return [c1, c2, c3]


def test_commit_ids_are_frozen() -> None:
    assert [c.id.hex for c in _golden_commits()] == GOLDEN_COMMITS


def test_commit_encoding_round_trips() -> None:
    for commit in _golden_commits():
        data = commit.encode()
        assert ObjectId.of(data) == commit.id
        back = Commit.decode(commit.id, data[1:])
        assert back == commit and back.metadata == commit.metadata and back.time == commit.time


def test_metadata_key_order_does_not_change_the_id() -> None:
    tree = ObjectId.from_hex(GOLDEN_TREES["empty"])
    a, _ = Commit.create(tree=tree, parents=(), author="x", timestamp_us=1, message="m", metadata={"a": 1, "b": 2}, generation=1)
    b, _ = Commit.create(tree=tree, parents=(), author="x", timestamp_us=1, message="m", metadata={"b": 2, "a": 1}, generation=1)
    assert a.id == b.id


def test_commit_ids_in_a_repository_follow_clock_and_author() -> None:
    now = [1_700_000_000.0]
    with snapvc.open("memory://", clock=lambda: now[0], author="ada") as repo:
        c1 = repo.commit({}, message="first", metadata={"step": 1, "agent": "researcher"})
        now[0] += 1
        c2 = repo.commit({}, message="second")
    assert [c1.id.hex, c2.id.hex] == GOLDEN_COMMITS[:2]


# numpy arrays and scalars (the ``numpy`` extra): typed values ``numpy:ndarray`` and
# ``numpy:generic`` (see ``snapvc.encoding.arrays``); the chunked one is cut like bytes.
GOLDEN_ARRAY_TREES = {
    "array-small": "12a0e95c7722c2ab68d29b1e5779aea9fabe742aa1aa1ca3d50dc6bb691dc156",
    "array-layouts": "f899294411b50c152ed17d3a84944a2a4c36a33769d67b8db3d542ff8fcedfed",
    "array-chunked": "e7eddf3a1670c6a50fdd0846515ae34af87b503a7d52c14f682804b0c711227d",
    "numpy-scalars": "2fde597eecf2a30aeafe95e73fd10b3e82300e9fcf141d6447fa3aa710ef8dc0",
}


def _golden_array_states() -> dict[str, dict[str, object]]:
    import numpy as np

    return {
        "array-small": {"a": np.arange(6, dtype="<i4").reshape(2, 3)},
        "array-layouts": {"f": np.asfortranarray(np.arange(6, dtype=">f8").reshape(2, 3)),
                          "zero_d": np.array(1.5, dtype="<f2"), "empty": np.zeros((0, 4), dtype="|u1"),
                          "structured": np.array([(1, 2.5)], dtype=[("x", "<i2"), ("y", ">f8")])},
        "array-chunked": {"emb": np.arange(20_000, dtype="<i4").reshape(1000, 20)},
        "numpy-scalars": {"f": np.float32(1.5), "i": np.int64(-3), "s": np.str_("héllo"), "b": np.bool_(True)},
    }


@pytest.mark.parametrize("name", sorted(GOLDEN_ARRAY_TREES))
def test_array_tree_ids_are_frozen(name: str) -> None:
    state = _golden_array_states()[name]
    assert Encoder().encode_root(state).hex == GOLDEN_ARRAY_TREES[name]
    with snapvc.open("memory://") as repo:
        assert repo.commit(state).tree.hex == GOLDEN_ARRAY_TREES[name]
        back = repo.checkout()
    assert {k: (type(v), v.dtype.str, v.shape, v.tobytes(order="A")) for k, v in back.items()} == \
        {k: (type(v), v.dtype.str, v.shape, v.tobytes(order="A")) for k, v in state.items()}  # type: ignore[attr-defined]
