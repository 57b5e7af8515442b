"""Rev syntax: parsing (a table, round trips) and resolving over a small fake commit graph."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snapvc.errors import (
    AmbiguousRevisionError,
    InvalidRevisionError,
    RevisionError,
    UnknownRevisionError,
)
from snapvc.ids import ObjectId
from snapvc.backends.memory.refs import MemoryRefStore
from snapvc.refs import Rev, parse_rev, resolve_rev

# --- parsing -----------------------------------------------------------------------

PARSED = [
    ("main", Rev("main")),
    ("main~", Rev("main", (("~", 1),))),
    ("main~3", Rev("main", (("~", 3),))),
    ("main^", Rev("main", (("^", 1),))),
    ("main^2", Rev("main", (("^", 2),))),
    ("main^0", Rev("main", (("^", 0),))),
    ("main~0", Rev("main", (("~", 0),))),
    ("main~2^2~1", Rev("main", (("~", 2), ("^", 2), ("~", 1)))),
    ("main^^~", Rev("main", (("^", 1), ("^", 1), ("~", 1)))),
    ("main~10", Rev("main", (("~", 10),))),
    ("main@{0}", Rev("main", (("@", 0),))),
    ("main@{12}~2", Rev("main", (("@", 12), ("~", 2)))),
    ("HEAD", Rev("HEAD")),
    ("@", Rev("HEAD")),
    ("@~2", Rev("HEAD", (("~", 2),))),
    ("@{1}", Rev("HEAD", (("@", 1),))),
    ("@@{1}", Rev("HEAD", (("@", 1),))),
    ("refs/heads/feature/x~1", Rev("refs/heads/feature/x", (("~", 1),))),
    ("a@b^2", Rev("a@b", (("^", 2),))),
    ("3fa9c0de", Rev("3fa9c0de")),
]


@pytest.mark.parametrize(("text", "rev"), PARSED)
def test_parse(text: str, rev: Rev) -> None:
    assert parse_rev(text) == rev
    assert parse_rev(str(rev)) == rev


INVALID = [
    ("", 0, "empty"),
    ("~1", 0, "before '~'"),
    ("^", 0, "before '^'"),
    ("main~x", 5, "unexpected 'x'"),
    ("main~1 ", 6, "unexpected ' '"),
    ("main^2a", 6, "unexpected 'a'"),
    ("main~1@{1}", 6, "directly follow"),
    ("main@{1}@{2}", 8, "directly follow"),
    ("main@{1", 4, "not closed"),
    ("main@{}", 4, "'@{N}'"),
    ("main@{x}", 4, "'@{N}'"),
    ("main@{-1}", 4, "previous checkout"),
    ("main^{commit}", 4, "'^{...}'"),
    ("a..b", 1, "'..'"),
    ("ma in~1", 2, "space"),
    ("main:path", 4, "':'"),
    ("x.lock~1", 1, ".lock"),
    ("refs/heads/", 10, "ends with '/'"),
]


@pytest.mark.parametrize(("text", "pos", "what"), INVALID)
def test_parse_errors_name_text_and_position(text: str, pos: int, what: str) -> None:
    with pytest.raises(InvalidRevisionError) as info:
        parse_rev(text)
    message = str(info.value)
    assert repr(text) in message
    assert f"at position {pos}" in message
    assert what in message


_names = st.sampled_from(["main", "HEAD", "refs/heads/x/y", "v1.0", "abcd1234", "a@b"])
_steps = st.lists(st.tuples(st.sampled_from(["~", "^"]), st.integers(0, 20)), max_size=5)


@given(_names, st.none() | st.integers(0, 30), _steps)
def test_str_round_trips(base: str, reflog: int | None, steps: list[tuple[str, int]]) -> None:
    rev = Rev(base, ((("@", reflog),) if reflog is not None else ()) + tuple(steps))
    assert parse_rev(str(rev)) == rev


# --- resolving ---------------------------------------------------------------------
#
#   r0 <- a1 <- a2 <---------- m3 <- a4 <- a5   main, HEAD -> main
#          \                  /
#           b1 <-------------'                  feature
#   tags: v1 = a2;  origin/main = a1;  two extra objects share the prefix "abcd"


def _oid(n: int) -> ObjectId:
    return ObjectId(bytes([n]) * 32)


R0, A1, A2, B1, M3, A4, A5 = (_oid(n) for n in (0x10, 0x11, 0x12, 0x21, 0x13, 0x14, 0x15))
X1 = ObjectId(bytes.fromhex("abcd01") + bytes(29))
X2 = ObjectId(bytes.fromhex("abcd02") + bytes(29))
GRAPH: dict[ObjectId, tuple[ObjectId, ...]] = {
    R0: (),
    A1: (R0,),
    A2: (A1,),
    B1: (A1,),
    M3: (A2, B1),
    A4: (M3,),
    A5: (A4,),
    X1: (),
    X2: (),
}


def find_prefix(hex_prefix: str) -> list[ObjectId]:
    return [oid for oid in sorted(GRAPH) if oid.hex.startswith(hex_prefix)][:2]


def parents(oid: ObjectId) -> tuple[ObjectId, ...]:
    return GRAPH[oid]


@pytest.fixture
def refs() -> MemoryRefStore:
    store = MemoryRefStore(clock=lambda: 1000.0)
    store.compare_and_swap("refs/heads/main", None, A5, "commit")
    store.compare_and_swap("refs/heads/feature", None, B1, "branch")
    store.compare_and_swap("refs/tags/v1", None, A2, "tag")
    store.compare_and_swap("refs/remotes/origin/main", None, A1, "fetch")
    store.set_symbolic("HEAD", "refs/heads/main")
    return store


def resolve(text: str, refs: MemoryRefStore) -> ObjectId:
    return resolve_rev(text, refs=refs, find_prefix=find_prefix, parents=parents)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("main", A5),
        ("main~", A4),
        ("main~1", A4),
        ("main^", A4),
        ("main~2", M3),
        ("main~3", A2),  # first parents only
        ("main~2^", A2),
        ("main~2^1", A2),
        ("main~2^2", B1),
        ("main~2^2~1", A1),
        ("main^0", A5),
        ("main~0", A5),
        ("main~5", R0),
        ("main^^^^^", R0),
        ("HEAD", A5),
        ("HEAD~2^2", B1),
        ("@", A5),
        ("@~1", A4),
        ("feature", B1),
        ("feature~1", A1),
        ("v1", A2),
        ("tags/v1", A2),
        ("heads/main", A5),
        ("refs/heads/main~1", A4),
        ("refs/tags/v1", A2),
        ("origin/main", A1),
        (A5.hex, A5),
        (A5.hex[:4], A5),
        (A5.hex[:9].upper(), A5),
        (M3.hex[:10] + "^2", B1),
        ("abcd01", X1),
    ],
)
def test_resolve(refs: MemoryRefStore, text: str, expected: ObjectId) -> None:
    assert resolve(text, refs) == expected


def test_branch_wins_over_tag_of_the_same_name(refs: MemoryRefStore) -> None:
    refs.compare_and_swap("refs/tags/main", None, R0, "tag")
    assert resolve("main", refs) == A5
    assert resolve("tags/main", refs) == R0


def test_ref_named_like_hex_wins_over_object(refs: MemoryRefStore) -> None:
    refs.compare_and_swap("refs/heads/" + A1.hex[:6], None, B1, "branch")
    assert resolve(A1.hex[:6], refs) == B1
    assert resolve(A1.hex[:7], refs) == A1


def test_root_ref(refs: MemoryRefStore) -> None:
    refs.compare_and_swap("ORIG_HEAD", None, A2, "reset")
    assert resolve("ORIG_HEAD~1", refs) == A1


def test_detached_head(refs: MemoryRefStore) -> None:
    refs.compare_and_swap("HEAD", None, A2, "checkout")
    assert refs.get_symbolic("HEAD") is None
    assert resolve("HEAD", refs) == A2
    assert resolve("@^", refs) == A1


def test_unborn_head() -> None:
    store = MemoryRefStore()
    store.set_symbolic("HEAD", "refs/heads/main")
    with pytest.raises(UnknownRevisionError, match="refs/heads/main, which has no commits yet"):
        resolve("HEAD", store)


def test_ambiguous_prefix_lists_candidates(refs: MemoryRefStore) -> None:
    with pytest.raises(AmbiguousRevisionError) as info:
        resolve("abcd", refs)
    message = str(info.value)
    assert X1.short in message and X2.short in message
    assert "'abcd'" in message


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("nope", "no branch, tag or object matches 'nope'"),
        ("refs/heads/nope", "no branch, tag or object matches"),
        ("ffff", "no branch, tag or object matches 'ffff'"),
        ("abc", "at least 4 hex digits"),
        ("main~6", "main~6: main has only 5 ancestors along first parents"),
        ("main~2^2~3", "main~2^2~3: main~2^2 has only 2 ancestors along first parents"),
        ("main~2^3", "main~2 has only 2 parents, so it has no parent 3"),
        ("main~5^", "main~5 is a root commit, so it has no parent 1"),
        ("feature^2", "feature has only 1 parent, so it has no parent 2"),
    ],
)
def test_unknown(refs: MemoryRefStore, text: str, what: str) -> None:
    with pytest.raises(UnknownRevisionError) as info:
        resolve(text, refs)
    assert what in str(info.value)


def test_errors_are_revision_errors(refs: MemoryRefStore) -> None:
    for text in ["nope", "abcd", "main~x"]:
        with pytest.raises(RevisionError):
            resolve(text, refs)


# --- reflog: @{N} --------------------------------------------------------------------


@pytest.fixture
def moved(refs: MemoryRefStore) -> MemoryRefStore:
    # refs/heads/work: created at r0, then a1, a2, a4 (current)
    refs.compare_and_swap("refs/heads/work", None, R0, "branch: created")
    refs.compare_and_swap("refs/heads/work", R0, A1, "commit")
    refs.compare_and_swap("refs/heads/work", A1, A2, "commit")
    refs.compare_and_swap("refs/heads/work", A2, A4, "reset")
    return refs


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("work", A4),
        ("work@{0}", A4),
        ("work@{1}", A2),
        ("work@{2}", A1),
        ("work@{3}", R0),
        ("work@{2}~1", R0),
        ("work@{1}^", A1),
        ("refs/heads/work@{1}", A2),
    ],
)
def test_reflog_revs(moved: MemoryRefStore, text: str, expected: ObjectId) -> None:
    assert resolve(text, moved) == expected


def test_reflog_out_of_range(moved: MemoryRefStore) -> None:
    with pytest.raises(UnknownRevisionError, match="did not exist before"):
        resolve("work@{4}", moved)
    with pytest.raises(UnknownRevisionError, match="has only 4 entries"):
        resolve("work@{5}", moved)
    with pytest.raises(UnknownRevisionError, match="has only 1 entry"):
        resolve("feature@{2}", moved)


def test_reflog_of_deleted_branch_recovers_it(moved: MemoryRefStore) -> None:
    moved.compare_and_swap("refs/heads/work", A4, None, "branch: deleted")
    with pytest.raises(UnknownRevisionError):
        resolve("work", moved)
    assert resolve("work@{1}", moved) == A4
    assert resolve("work@{2}", moved) == A2
    with pytest.raises(UnknownRevisionError, match="does not exist now"):
        resolve("work@{0}", moved)


def test_head_reflog_follows_its_branch(refs: MemoryRefStore) -> None:
    refs.compare_and_swap("refs/heads/main", A5, A4, "reset")
    assert resolve("HEAD@{1}", refs) == A5
    assert resolve("@{1}", refs) == A5
    assert resolve("@{0}", refs) == A4


def test_reflog_needs_a_ref(refs: MemoryRefStore) -> None:
    with pytest.raises(InvalidRevisionError, match="needs a ref"):
        resolve(A5.hex[:8] + "@{1}", refs)
