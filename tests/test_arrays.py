"""numpy arrays and scalars in a state: exact round trips, refusals naming the path,
what an append or a changed row stores, diffs that summarise, JSON, and reading where
numpy is not installed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import snapvc
from snapvc.diff.changes import diff_values
from snapvc.encoding.chunker import CDC_MAX, chunk_spans, rechunk
from snapvc.encoding.writer import Encoder

ROWS, DIM = 20_000, 64  # 5 MB of float32: chunked, and rechunked from where it differs


def same_array(a: Any, b: Any) -> bool:
    """Equal as stored: type, dtype (byte order included), shape, layout and bytes."""
    return (type(a) is type(b) and a.dtype == b.dtype and a.dtype.str == b.dtype.str and a.shape == b.shape
            and a.flags.f_contiguous == b.flags.f_contiguous and a.flags.c_contiguous == b.flags.c_contiguous
            and a.tobytes(order="A") == b.tobytes(order="A"))


def stored(repo: snapvc.Repository) -> int:
    return repo.store.sizes().stored_bytes


def embeddings(rows: int = ROWS, seed: int = 0) -> Any:
    return np.random.default_rng(seed).standard_normal((rows, DIM), dtype=np.float32)


# -- round trips ---------------------------------------------------------------------------

DTYPES = st.one_of(hnp.scalar_dtypes(), hnp.byte_string_dtypes(), hnp.unicode_string_dtypes(),
                   hnp.array_dtypes(subtype_strategy=hnp.scalar_dtypes(), max_size=3))
ENDIAN = st.sampled_from(["<", ">", "="])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), dtype=DTYPES, order=st.sampled_from(["C", "F"]), endian=ENDIAN)
def test_arrays_round_trip_exactly(data: st.DataObject, dtype: Any, order: str, endian: str) -> None:
    if dtype.fields is None:
        dtype = dtype.newbyteorder(endian) if dtype.byteorder != "|" else dtype
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5))
    array = data.draw(hnp.arrays(dtype, shape))
    array = np.asfortranarray(array) if order == "F" else array
    with snapvc.open("memory://") as repo:
        commit = repo.commit({"a": array, "nested": {"list": [array]}})
        back = repo.checkout()
        assert Encoder().encode_root({"a": array, "nested": {"list": [array]}}) == commit.tree
    for got in (back["a"], back["nested"]["list"][0]):
        assert same_array(got, array)
        assert got.flags.writeable and got.flags.owndata or got.base is not None
        got[...] = array  # writeable: filled in place without complaint


def test_layouts_and_shapes() -> None:
    base = np.arange(24, dtype=">i4").reshape(2, 3, 4)
    values = {"c": base, "f": np.asfortranarray(base), "zero_d": np.array(3.5, dtype="<f2"),
              "empty": np.zeros((0, 5), dtype="u1"), "empty_f": np.asfortranarray(np.zeros((3, 0), dtype="f8")),
              "strided": np.arange(10)[::2], "transposed": base[0].T[::-1],
              "structured": np.array([(1, 2.0)], dtype=[("x", "<i2"), ("y", ">f8")]),
              "dates": np.array(["2020-01-01", "NaT"], dtype="M8[D]")}
    with snapvc.open("memory://") as repo:
        repo.commit(values)
        back = repo.checkout()
    for key in ("c", "f", "zero_d", "empty", "empty_f", "structured", "dates"):
        assert same_array(back[key], values[key]), key
    # A view that is no contiguous array is stored as the values it shows, in C order.
    for key in ("strided", "transposed"):
        assert back[key].flags.c_contiguous and np.array_equal(back[key], values[key]) and back[key].flags.writeable
    assert back["f"].flags.f_contiguous and not back["f"].flags.c_contiguous


@pytest.mark.parametrize("value", [np.float32(1.5), np.float64(-0.0), np.int64(-3), np.uint8(255), np.bool_(True),
                                   np.str_("héllo"), np.bytes_(b"ab"), np.complex64(1 + 2j),
                                   np.datetime64("2020-01-02T03:04"), np.timedelta64(5, "s")])
def test_numpy_scalars_round_trip_with_their_type(value: Any) -> None:
    with snapvc.open("memory://") as repo:
        repo.commit({"v": value, "in_list": [value]})
        back = repo.checkout()
    for got in (back["v"], back["in_list"][0]):
        assert type(got) is type(value) and got.dtype == value.dtype and got.tobytes() == value.tobytes()
    json_back = snapvc.from_jsonable(json.loads(json.dumps(snapvc.to_jsonable(value))))
    assert type(json_back) is type(value) and json_back.tobytes() == value.tobytes()


def test_an_array_changed_in_place_deep_in_the_state_is_stored() -> None:
    """An array is mutable: holding the same object as last commit proves nothing."""
    array = np.zeros(10, dtype="i8")
    state = {"agent": {"memory": {"vectors": array, "notes": ["a"] * 20}}, "other": list(range(100))}
    with snapvc.open("memory://") as repo:
        repo.commit(state)
        array[3] = 7
        repo.commit(state)
        assert repo.checkout()["agent"]["memory"]["vectors"][3] == 7
        working = repo.state()
        working.snapshot()
        working.get("agent.memory.vectors")[4] = 9  # in place, through the working copy
        working.snapshot()
        assert repo.checkout()["agent"]["memory"]["vectors"][4] == 9


# -- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(("make", "words"), [
    (lambda: np.array([1, None], dtype=object), "holds Python objects"),
    (lambda: np.array([(1, None)], dtype=[("a", "i4"), ("b", "O")]), "holds Python objects"),
    (lambda: np.matrix([[1, 2]]), "numpy.matrix (an ndarray subclass)"),
    (lambda: np.ma.masked_array([1, 2], mask=[0, 1]), "(an ndarray subclass)"),
    (lambda: np.zeros(2, dtype=np.dtype("f8", metadata={"unit": "m"})), "does not survive its description"),
], ids=["object", "object-field", "matrix", "masked", "metadata"])
@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_what_cannot_be_stored_exactly_is_refused_naming_the_path(make: Any, words: str) -> None:
    value = make()
    with snapvc.open("memory://") as repo:
        with pytest.raises(snapvc.UnsupportedValueError) as caught:
            repo.commit({"run": {"steps": [{"x": value}]}})
        assert caught.value.path == "state['run']['steps'][0]['x']"
        assert words in caught.value.reason
        with pytest.raises(snapvc.UnsupportedValueError) as caught:
            snapvc.to_jsonable({"x": value})
        assert caught.value.path == "state['x']"


# -- what a commit stores ------------------------------------------------------------------


def test_appending_rows_stores_about_the_rows() -> None:
    emb = embeddings()
    with snapvc.open("memory://") as repo:
        repo.commit({"emb": emb})
        whole = stored(repo)
        assert whole >= emb.nbytes // 2  # random floats compress little
        for step in range(3):
            emb = np.concatenate([emb, embeddings(10, seed=step + 1)])
            before = stored(repo)
            commit = repo.commit({"emb": emb})
            added = stored(repo) - before
            # The new rows (2,560 bytes), the chunks around the old end, the tree's spine.
            assert added <= 10 * DIM * 4 + 3 * CDC_MAX, added
            assert commit.tree == Encoder().encode_root({"emb": emb})  # the ids a fresh encoder gives
        assert same_array(repo.checkout()["emb"], emb)


def test_a_changed_row_stores_about_one_chunk() -> None:
    emb = embeddings()
    with snapvc.open("memory://") as repo:
        repo.commit({"emb": emb})
        emb = emb.copy()
        emb[ROWS // 2] += 1.0
        before = stored(repo)
        commit = repo.commit({"emb": emb})
        assert stored(repo) - before <= 3 * CDC_MAX
        assert commit.tree == Encoder().encode_root({"emb": emb})
        emb[7] = 0.0  # in place this time
        before = stored(repo)
        repo.commit({"emb": emb})
        assert stored(repo) - before <= 3 * CDC_MAX
        assert same_array(repo.checkout()["emb"], emb)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(0, 300_000), edits=st.lists(
    st.tuples(st.sampled_from(["append", "insert", "delete", "flip", "truncate"]), st.floats(0, 1),
              st.integers(0, 40_000)), max_size=3))
def test_rechunking_gives_the_cuts_of_cutting_anew(seed: int, size: int, edits: list[tuple[str, float, int]]) -> None:
    rng = np.random.default_rng(seed)
    old = rng.integers(0, 256 if seed % 3 else 2, size, dtype=np.uint8).tobytes()  # some of it low-entropy
    new = bytearray(old)
    for kind, where, n in edits:
        at = int(where * len(new))
        if kind == "append":
            new += rng.bytes(n)
        elif kind == "insert":
            new[at:at] = rng.bytes(n % 500)
        elif kind == "delete":
            del new[at:at + n % 500]
        elif kind == "flip" and new:
            new[min(at, len(new) - 1)] ^= 1
        else:
            del new[at:]
    new_bytes = bytes(new)
    old_spans = list(chunk_spans(old))
    again = rechunk(new_bytes, old, [start for start, _ in old_spans])
    shift = len(new_bytes) - len(old)
    got = old_spans[:again.head] + again.spans + [(start + shift, n) for start, n in old_spans[again.tail:]]
    assert got == list(chunk_spans(new_bytes))


# -- diffs and merges ----------------------------------------------------------------------


def two_commits(path: Path | str = "memory://") -> snapvc.Repository:
    repo = snapvc.open(str(path))
    emb = embeddings(5_000)
    repo.commit({"emb": emb, "small": np.arange(4), "s": np.float32(2.5)}, message="one")
    emb = np.concatenate([emb, np.ones((3, DIM), "f4")])
    emb[10] = 0.0
    emb[20] = 1.0
    repo.commit({"emb": emb, "small": np.arange(4), "s": np.float32(3.5), "new": np.zeros((2, 2))}, message="two")
    return repo


def test_a_diff_names_the_array_and_summarises_the_change() -> None:
    with two_commits() as repo:
        changes = repo.diff("HEAD~1", "HEAD")
    assert [(c.path, c.kind) for c in changes] == [(("emb",), "modified"), (("new",), "added"), (("s",), "modified")]
    assert str(changes[0]) == "~ emb: array <f4 (5000, 64) -> (5003, 64): 3 rows appended, 2 rows changed"
    assert str(changes[1]) == "+ new: array <f8 (2, 2), 32 bytes"
    pairs = [(np.zeros((3, 2)), np.eye(3, 2), "array <f8 (3, 2): 2 rows changed"),
             (np.zeros(4), np.zeros(2), "array <f8 (4,) -> (2,): 2 rows removed from the end"),
             (np.zeros(2, ">f8"), np.zeros(2, "<f8"), "array >f8 -> <f8 (2,)"),
             (np.zeros((2, 3)), np.asfortranarray(np.zeros((2, 3))), "array <f8 (2, 3), order C -> F")]
    for old, new, text in pairs:
        assert [str(c) for c in diff_values({"x": old}, {"x": new})] == [f"~ x: {text}"]
    same = np.array([np.nan, -0.0])
    assert list(diff_values({"x": same}, {"x": same.copy()})) == []  # the same bits: no change
    assert len(list(diff_values({"x": np.array([0.0])}, {"x": np.array([-0.0])}))) == 1


def test_merge_takes_an_array_changed_on_one_side_and_conflicts_when_both_changed() -> None:
    with snapvc.open("memory://") as repo:
        base = np.arange(6.0)
        repo.commit({"v": base, "n": 1})
        repo.branch("other")
        repo.commit({"v": base + 1, "n": 1}, branch="main")
        repo.commit({"v": base, "n": 2}, branch="other")
        merged = repo.merge("other", into="main")
        assert not merged.conflicts
        back = repo.checkout("main")
        assert same_array(back["v"], base + 1) and back["n"] == 2
        repo.commit({"v": base * 5, "n": 2}, branch="other")
        conflicted = repo.merge("other", into="main")
        assert [c.path for c in conflicted.conflicts] == [("v",)]


# -- the command line, JSON and the web view -----------------------------------------------

NO_NUMPY = """
import sys
class _NoNumpy:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" or name.startswith("numpy."):
            raise ImportError("numpy is not installed here")
        return None
sys.meta_path.insert(0, _NoNumpy())
"""


def _python(code: str, *args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, input=stdin, capture_output=True, text=True,
                          timeout=120)


def _snapvc(repo: Path, *args: str, numpy: bool = True, stdin: str | None = None) -> str:
    code = ("" if numpy else NO_NUMPY) + "import sys, runpy; sys.argv[0] = 'snapvc'; runpy.run_module('snapvc', run_name='__main__')"
    done = _python(code, *args, "--repo", str(repo), cwd=repo.parent, stdin=stdin)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("numpy", [True, False], ids=["numpy", "without-numpy"])
def test_the_command_summarises_shows_and_commits_arrays_back(tmp_path: Path, numpy: bool) -> None:
    path = tmp_path / "a.snapvc"
    two_commits(path).close()
    text = _snapvc(path, "--color", "never", "diff", "HEAD~1", "HEAD", numpy=numpy)
    assert "~ emb: array <f4 (5000, 64) -> (5003, 64): 3 rows appended, 2 rows changed" in text
    assert "+ new: array <f8 (2, 2), 32 bytes" in text
    found = {c["where"]: c for c in json.loads(_snapvc(path, "diff", "HEAD~1", "HEAD", "--json", numpy=numpy))}
    assert found["emb"]["summary"] == "array <f4 (5000, 64) -> (5003, 64): 3 rows appended, 2 rows changed"
    assert found["emb"]["new"] == {"$snapvc": "ndarray", "dtype": "<f4", "shape": [5003, 64], "order": "C",
                                   "bytes": 5003 * DIM * 4}
    whole = _snapvc(path, "checkout", "HEAD", numpy=numpy)
    if numpy:
        small = json.loads(_snapvc(path, "checkout", "HEAD", "--path", "new"))
        assert small == {"$snapvc": "ndarray", "dtype": "<f8", "shape": [2, 2], "order": "C",
                         "values": [[0.0, 0.0], [0.0, 0.0]]}
    else:  # read as stored: a typed value of its fields
        assert json.loads(whole)["new"]["type"] == "numpy:ndarray"
    assert "No change to the state" in _snapvc(path, "commit", "-b", "main", numpy=numpy, stdin=whole)
    assert "no problems" in _snapvc(path, "fsck", numpy=numpy)


@pytest.mark.slow
def test_snapvc_without_numpy(tmp_path: Path) -> None:
    path = tmp_path / "a.snapvc"
    two_commits(path).close()
    # Importing snapvc, and storing and reading states without arrays, never imports numpy.
    lean = _python("import sys, snapvc\nr = snapvc.open('memory://')\nr.commit({'a': [1, b'x' * 20000]})\n"
                   "r.checkout(); list(r.diff('HEAD', 'HEAD'))\nprint('numpy' in sys.modules)", cwd=tmp_path)
    assert lean.stdout.strip() == "False", lean.stderr
    read = _python(NO_NUMPY + f"import snapvc\nsnapvc.open({str(path)!r}).checkout()", cwd=tmp_path)
    assert read.returncode == 1 and "snapvc.errors.NumpyMissingError" in read.stderr
    assert "'numpy:ndarray'" in read.stderr and "pip install '.[numpy]'" in read.stderr
    # Kept as stored, it is shown, and committed back as the very same value.
    kept = _python(NO_NUMPY + "import sys, snapvc\nfrom snapvc.encoding.adapters import keep_unknown_types\n"
                   f"keep_unknown_types()\nr = snapvc.open({str(path)!r})\ntree = r.get_commit(r.resolve('HEAD')).tree\n"
                   "s = r.checkout()\nprint(type(s['emb']).__name__, s['emb'].type_name, s['emb'].fields['shape'])\n"
                   "print(r.commit(s, message='again').tree == tree, 'numpy' in sys.modules)", cwd=tmp_path)
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout.split() == ["StoredTypedValue", "numpy:ndarray", "[5003,", "64]", "True", "False"]


def test_json_round_trip() -> None:
    values = [np.arange(6, dtype=">i2").reshape(2, 3), np.asfortranarray(np.arange(6.0).reshape(2, 3)),
              np.array(2.5, "f4"), np.zeros((0, 3)), np.array([np.nan, -0.0, np.inf]), np.arange(2000, dtype="u1"),
              np.array([(1, 2.0)], dtype=[("x", "<i2"), ("y", ">f8")]), np.array(["ab", "c"]), np.array([1 + 2j])]
    for value in values:
        shown = json.loads(json.dumps(snapvc.to_jsonable({"v": value})))
        assert same_array(snapvc.from_jsonable(shown)["v"], value)
    assert snapvc.to_jsonable(np.array([[1, 2]], dtype="<i4")) == {
        "$snapvc": "ndarray", "dtype": "<i4", "shape": [1, 2], "order": "C", "values": [[1, 2]]}
    with pytest.raises(snapvc.MalformedJsonError) as caught:
        snapvc.from_jsonable({"x": {"$snapvc": "ndarray", "dtype": "<i4", "shape": [3], "order": "C",
                                    "base64": "AAAA"}})
    assert caught.value.path == "state['x']"


def test_the_web_view_gives_an_array_change_as_a_summary() -> None:
    from snapvc.ui.api import change_json

    with two_commits() as repo:
        changes = repo.diff("HEAD~1", "HEAD")
    shown = change_json(changes[0])
    assert shown["text_diff"] == ["array <f4 (5000, 64) -> (5003, 64): 3 rows appended, 2 rows changed"]
    assert shown["old"]["shape"] == [5000, 64] and "values" not in shown["new"] and "base64" not in shown["new"]


def test_gc_and_fsck_keep_every_chunk_of_an_array(tmp_path: Path) -> None:
    with two_commits(tmp_path / "a.snapvc") as repo:
        repo.reset("main", to="HEAD~1")
        report = repo.gc(grace=0, reflog_expiry=0, force=True)
        assert report.removed_objects  # the second commit's new chunks (or their deltas' bases kept)
        assert repo.fsck().ok
        assert same_array(repo.checkout()["emb"], embeddings(5_000))


def test_the_web_view_shows_a_large_array_by_its_summary_without_encoding_it() -> None:
    from snapvc.ui.api import MAX_VALUE_CHARS, _value_json

    large = np.zeros(MAX_VALUE_CHARS, dtype=np.float64)
    shown, length = _value_json(large, "state['emb']")
    assert shown == {"$truncated": True, "reason": "too large to show whole", "size": length,
                     "preview": f"array <f8 ({MAX_VALUE_CHARS},), {large.nbytes} bytes"}
    small, _ = _value_json(np.arange(3), "state['x']")
    assert small == {"$snapvc": "ndarray", "dtype": "<i8", "shape": [3], "order": "C", "values": [0, 1, 2]}


@pytest.mark.slow
def test_reading_an_array_without_numpy_names_its_path(tmp_path: Path) -> None:
    path = tmp_path / "deep.snapvc"
    with snapvc.open(str(path)) as repo:  # one inline array, one an object of its own, deep in long lists
        repo.commit({"log": [{"n": i} for i in range(500)] + [{"small": np.arange(3)}]})
        repo.commit({"log": [{"n": i} for i in range(300)] + [{"big": [np.zeros(5000)]}]})
    for rev, where in (("HEAD~1", "state['log'][500]['small']"), ("HEAD", "state['log'][300]['big'][0]")):
        read = _python(NO_NUMPY + f"import snapvc\nsnapvc.open({str(path)!r}).checkout({rev!r})", cwd=tmp_path)
        assert read.returncode == 1 and f"a numpy value at {where} (stored as 'numpy:ndarray')" in read.stderr, \
            read.stderr
