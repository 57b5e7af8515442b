"""Bad input and hostile data: fuzzed object decoders and frames (only snapvc's own
errors come out, never a crash or a hang), decompression bombs, bad ref names, states
nested too deep, huge values, repository paths that are not repositories, and stored
data that names code: nothing is unpickled, evaluated or imported.

Hypothesis runs derandomized with a fixed example budget (``SNAPVC_FUZZ_EXAMPLES``,
default 1500 per target), so the suite is reproducible and bounded. Where atheris is
installed (Linux x86_64 wheels), ``tests/fuzz_decoders.py`` runs under libFuzzer too,
``SNAPVC_ATHERIS_RUNS`` inputs (default 200,000) from a corpus of real frames.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapvc
from snapvc.encoding.nodes import decode_node
from snapvc.encoding.reader import Loader, ObjectCache
from snapvc.encoding.writer import MAX_DEPTH
from snapvc.errors import SnapvcError
from snapvc.ids import ObjectId, hash_bytes
from snapvc.maintenance.graph import read_children
from snapvc.objects import COMMIT, MAP, SEQ, TEXT, Commit, split_object
from snapvc.store.codec import CompressedStore, Dictionary, _varint, decode_frame, encode_delta_frame, encode_frame
from snapvc.backends.memory.objects import MemoryObjectStore
from tests.privileges import without_root_file_access

EXAMPLES = int(os.environ.get("SNAPVC_FUZZ_EXAMPLES", "1500"))
# A deadline far above what a decoder takes (microseconds) catches a hang, not a slow machine.
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, deadline=5000, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
OID = ObjectId(b"\x01" * 32)
TRIED: dict[str, int] = {}  # fuzz inputs per target, printed at the end (-s)


def _count(target: str) -> None:
    TRIED[target] = TRIED.get(target, 0) + 1


def _sample_objects() -> list[bytes]:
    """Canonical bytes of real objects of every kind, for mutation."""
    repo = snapvc.open("memory://")
    state = {"messages": [{"role": "user", "content": f"m {i} " * 30} for i in range(80)],
             "doc": "prose " * 3000, "big": 10**40, "t": (1, 2.5, None), "when": __import__("datetime").date(2026, 1, 1),
             "map": {f"k{i}": i for i in range(200)}, "raw": b"\x00\xff" * 3000}
    repo.commit(state)
    store = repo.store
    out = [store.get(oid) for oid in repo.backend.objects.iter_ids()]
    out.append(next(iter(repo.log())).encode())
    return out


SAMPLES = _sample_objects()


def _decode_everything(data: bytes) -> None:
    """Every decoder a stored object meets on the way to a value."""
    try:
        kind, payload = split_object(OID, data)
        if kind == COMMIT:
            Commit.decode(OID, payload)
            return
        read_children(OID, data)
        decode_node(OID, data)
        store = {OID: data}
        Loader(lambda ids: {i: store[i] for i in ids if i in store}, ObjectCache(1 << 20)).materialize(OID)
    except SnapvcError:
        pass


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes_as_objects(data: bytes) -> None:
    _count("random objects")
    _decode_everything(data)


@pytest.mark.slow
@FUZZ
@given(st.sampled_from(SAMPLES), st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(1, 255)), min_size=1,
                                            max_size=4), st.integers(0, 8))
def test_mutated_real_objects(sample: bytes, flips: list[tuple[int, int]], cut: int) -> None:
    _count("mutated objects")
    data = bytearray(sample)
    for at, mask in flips:
        data[at % len(data)] ^= mask
    _decode_everything(bytes(data[: len(data) - cut] if cut < len(data) else data))


@pytest.mark.slow
@FUZZ
@given(st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=20)
                    | st.binary(max_size=40), lambda inner: st.lists(inner, max_size=5)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=5), max_leaves=30),
       st.sampled_from([MAP, SEQ, TEXT]))
def test_well_formed_msgpack_of_the_wrong_shape(node: Any, kind: int) -> None:
    _count("msgpack nodes")
    _decode_everything(bytes((kind,)) + msgpack.packb(node, use_bin_type=True))


@FUZZ
@given(st.integers(0, 127), st.binary(max_size=60))
def test_extension_values(code: int, payload: bytes) -> None:
    """Damaged inline values of every extension type (tuples, big ints, datetimes, typed
    values...), inside a map leaf as a reader meets them."""
    _count("extension values")
    leaf = msgpack.packb([0, 0, {"v": msgpack.ExtType(code, payload)}, []], use_bin_type=True)
    _decode_everything(bytes((MAP,)) + leaf)


DICTIONARY = Dictionary(1, zstandard.train_dictionary(16 << 10, [s[:4096] for s in SAMPLES * 4]).as_bytes())


@pytest.mark.slow
@FUZZ
@given(st.sampled_from(SAMPLES), st.integers(0, 1 << 20), st.integers(1, 255), st.integers(0, 3),
       st.integers(0, 12))
def test_damaged_frames(sample: bytes, at: int, mask: int, codec: int, cut: int) -> None:
    """Every frame kind, damaged: ``decode_frame`` returns the right bytes or raises
    ``CorruptObjectError``; never anything else, never more than the declared size."""
    _count("damaged frames")
    oid = ObjectId(hash_bytes(sample))
    base = SAMPLES[0]
    frame = [encode_frame(sample), encode_frame(sample, DICTIONARY),
             encode_delta_frame(sample, ObjectId(hash_bytes(base)), base, 1), bytes((0,)) + b"\x05" + sample][codec]
    if frame is None:
        return
    damaged = bytearray(frame)
    damaged[at % len(damaged)] ^= mask
    damaged = damaged[: max(1, len(damaged) - cut)]
    try:
        data = decode_frame(oid, bytes(damaged), base, DICTIONARY)
    except SnapvcError:
        return
    except ValueError as exc:  # a frame kind whose base or dictionary the caller did not give
        assert "needs its" in str(exc)
        return
    assert len(data) <= 1 << 31


ATHERIS_RUNS = int(os.environ.get("SNAPVC_ATHERIS_RUNS", "200000"))


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("atheris") is None,
                    reason="atheris is not installed (it has wheels for Linux x86_64 only)")
def test_coverage_guided_fuzzing_of_the_decoders(tmp_path: Path) -> None:
    """tests/fuzz_decoders.py under libFuzzer, from a corpus of real frames of every
    kind: a finding (an exception other than snapvc's own) makes it exit non-zero."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for n, sample in enumerate(SAMPLES):
        (corpus / f"full-{n}").write_bytes(encode_frame(sample))
        (corpus / f"raw-{n}").write_bytes(bytes((0,)) + _varint(len(sample)) + sample)
    script = Path(__file__).with_name("fuzz_decoders.py")
    done = subprocess.run([sys.executable, str(script), str(corpus), f"-runs={ATHERIS_RUNS}", "-max_len=4096",
                           "-seed=20261123", "-timeout=10"], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"Done {ATHERIS_RUNS} runs" in done.stderr
    TRIED["atheris (coverage-guided)"] = ATHERIS_RUNS


@pytest.mark.slow
def test_a_decompression_bomb_is_refused_without_inflating_it() -> None:
    bomb = zstandard.ZstdCompressor(level=19).compress(b"\0" * (256 << 20))  # 256 MiB in ~8 KB
    assert len(bomb) < 64 << 10
    oid = ObjectId(b"\x02" * 32)
    for stated in (100, 1 << 20):
        frame = bytes((1,)) + _varint(stated) + bomb
        with pytest.raises(snapvc.CorruptObjectError, match=oid.hex):
            decode_frame(oid, frame)
    unstated = zstandard.ZstdCompressor(level=19, write_content_size=False).compress(b"\0" * (64 << 20))
    with pytest.raises(snapvc.CorruptObjectError):
        decode_frame(oid, bytes((1,)) + _varint(1000) + unstated)
    with pytest.raises(snapvc.CorruptObjectError, match="exceeds the limit"):
        decode_frame(oid, bytes((1,)) + _varint(1 << 40) + unstated)
    # Through a store, as a repository reads it.
    inner = MemoryObjectStore()
    inner.put_many([(oid, bytes((1,)) + _varint(1000) + bomb)])
    with pytest.raises(snapvc.CorruptObjectError):
        CompressedStore(inner).get_many([oid])


@pytest.mark.parametrize("name", ["a..b", "/lead", "trail/", "a//b", "ctl\x01x", "tab\tx", "del\x7f", "a b",
                                  "x.lock", "-dash", "@", "a@{1}", "a~1", "a^", "a:b", "a?", "a*", "a[", "a\\b", "",
                                  ".hidden", "end."])
def test_bad_ref_names_are_clear_errors(name: str) -> None:
    repo = snapvc.open("memory://")
    repo.commit({"a": 1})
    with pytest.raises(snapvc.InvalidRefNameError) as raised:
        repo.branch(name)
    assert repr(name)[1:-1] in str(raised.value) or name == ""
    with pytest.raises(snapvc.SnapvcError):
        repo.tag(name)
    assert list(repo.branches()) == ["main"]


def test_a_ref_name_of_10000_characters_works(tmp_path: Path) -> None:
    with snapvc.open(tmp_path / "long.snapvc") as repo:
        repo.commit({"a": 1})
        name = "n" * 10_000
        repo.branch(name)
        assert repo.resolve(name) == repo.resolve("main") and name in repo.branches()
        repo.commit({"a": 2}, branch=name)
        assert repo.checkout(name) == {"a": 2} and repo.fsck().ok


@pytest.mark.parametrize("kind", [list, dict, tuple])
def test_states_nested_10000_deep_are_a_clear_error_not_a_recursion_error(kind: type) -> None:
    repo = snapvc.open("memory://")
    value: Any = 0
    for _ in range(10_000):
        value = {"k": value} if kind is dict else kind([value])
    with pytest.raises(snapvc.UnsupportedValueError, match=f"nested deeper than {MAX_DEPTH}") as raised:
        repo.commit({"deep": value})
    assert raised.value.path.startswith("state['deep']")
    ok: Any = 0
    for _ in range(MAX_DEPTH - 1):
        ok = {"k": ok} if kind is dict else kind([ok])
    repo.commit({"deep": ok})  # the deepest allowed: every reader copes
    assert repo.checkout("main") == {"deep": ok}
    assert repo.diff("main", {"deep": ok}) == [] and snapvc.to_jsonable(repo.checkout("main"))
    state = repo.state()
    with pytest.raises(snapvc.UnsupportedValueError):
        state["deeper"] = value
        state.snapshot()


def test_a_stored_tree_deeper_than_any_limit_is_corrupt_not_a_crash() -> None:
    """A foreign writer's MAP nodes nested 5,000 deep, each its own object."""
    objects: dict[bytes, bytes] = {}
    child = None
    for _ in range(5_000):
        entries = {"k": child} if child is not None else {"k": 1}
        data = bytes((MAP,)) + msgpack.packb([0, 0, entries, ["k"] if child is not None else []], use_bin_type=True)
        child = ObjectId(hash_bytes(data))
        objects[child] = data
    loader = Loader(lambda ids: {i: objects[i] for i in ids if i in objects}, ObjectCache(1 << 24))
    with pytest.raises(snapvc.CorruptObjectError, match="does not decode as a state"):
        loader.materialize(child)


def test_huge_ints_long_strings_and_nan_round_trip() -> None:
    repo = snapvc.open("memory://")
    state = {"int": 10**10_000, "neg": -(2**100_000), "s": "é" * (4 << 20), "b": os.urandom(3 << 20),
             "nan": float("nan"), "inf": float("-inf"), "zero": -0.0}
    repo.commit(state)
    out = repo.checkout("main")
    assert out["int"] == state["int"] and out["neg"] == state["neg"] and out["s"] == state["s"]
    assert out["b"] == state["b"] and out["nan"] != out["nan"] and out["inf"] == float("-inf")
    assert str(out["zero"]) == "-0.0"


def test_repository_paths_that_are_not_repositories(tmp_path: Path) -> None:
    text = tmp_path / "notes.snapvc"
    text.write_text("just some notes\n")
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    marked = tmp_path / "marked.db"
    conn = sqlite3.connect(marked)
    conn.execute("PRAGMA application_id = 1234")
    conn.commit()
    conn.close()
    folder = tmp_path / "folder.snapvc"
    folder.mkdir()
    for path, message in ((text, "not an SQLite file"), (other, "another application"),
                          (marked, "another application"), (folder, "is a folder")):
        with pytest.raises(snapvc.NotARepositoryError, match=message):
            snapvc.open(path)
    assert text.read_text() == "just some notes\n"  # nothing was written to them
    with pytest.raises(snapvc.RepositoryNotFoundError):
        snapvc.open(tmp_path / "missing" / "x.snapvc")
    with pytest.raises(snapvc.RepositoryNotFoundError):
        snapvc.open(tmp_path / "absent.snapvc", create=False)


_OPEN = """
import sys, snapvc
try:
    snapvc.open(sys.argv[1]).close()
except (snapvc.SnapvcError, PermissionError) as exc:
    print(f"{type(exc).__name__}: {exc}")
    sys.exit(3)
print("opened")
"""


def test_an_unreadable_repository_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "locked.snapvc"
    with snapvc.open(path) as repo:
        repo.commit({"a": 1})
    before = path.read_bytes()
    path.chmod(0)
    try:
        probe = subprocess.run(without_root_file_access(["cat", str(path)]), capture_output=True)
        assert probe.returncode != 0, "the file is still readable: the test would prove nothing"
        done = subprocess.run(without_root_file_access([sys.executable, "-c", _OPEN, str(path)]),
                              capture_output=True, text=True, timeout=60)
    finally:
        path.chmod(0o644)
    assert done.returncode == 3 and str(path) in done.stdout, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert path.read_bytes() == before


def test_an_unreadable_repository_as_root_a_folder_without_access(tmp_path: Path) -> None:
    """Root reads any file, but a path through a regular file is unreadable to anyone."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(snapvc.RepositoryFolderError, match=re.escape(f"{blocker}' is a file, not a folder")) as raised:
        snapvc.open(blocker / "repo.snapvc")
    assert isinstance(raised.value, snapvc.RepositoryNotFoundError)  # no repository is there


class _ImportWatcher(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.asked: list[str] = []

    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        self.asked.append(name)
        return None


def test_stored_type_names_are_never_imported_or_evaluated() -> None:
    """A typed value names its type as ``module:qualname``; a hostile one names a module
    that would run code on import. Reading it raises UnknownTypeError, and imports nothing."""
    repo = snapvc.open("memory://")
    for name in ("os:system", "snapvc_evil_module:Thing", "builtins:eval", "__import__('os').system('x')"):
        payload = msgpack.packb([name, 0, {"a": 1}, []], use_bin_type=True)
        data = bytes((MAP,)) + payload
        oid = ObjectId(hash_bytes(data))
        root = bytes((MAP,)) + msgpack.packb([0, 0, {"v": oid}, ["v"]], use_bin_type=True)
        root_id = ObjectId(hash_bytes(root))
        repo.store.put_many([(oid, data), (root_id, root)])
        watcher = _ImportWatcher()
        sys.meta_path.insert(0, watcher)
        try:
            with pytest.raises(snapvc.UnknownTypeError):
                repo.loader.materialize(root_id)
        finally:
            sys.meta_path.remove(watcher)
        assert watcher.asked == [] and "snapvc_evil_module" not in sys.modules


# The one import by name, and why it is safe: the names are written in the package's own
# source, in its tables of names loaded when first read, never read from stored data.
IMPORTS_BY_NAME = {("lazy.py", "import_module("): "the modules of snapvc/__init__.py's and "
                                                  "snapvc/maintenance/__init__.py's lazy names"}


def test_no_module_of_snapvc_unpickles_evaluates_or_imports_by_name() -> None:
    root = Path(snapvc.__file__).parent
    for source in root.rglob("*.py"):
        text = source.read_text()
        for word in ("pickle.load", "eval(", "exec(", "__import__(", "import_module(", "marshal.load"):
            if (source.relative_to(root).as_posix(), word) in IMPORTS_BY_NAME:
                continue
            assert word not in text.replace("literal_eval(", ""), f"{source.relative_to(root)} uses {word}"


def test_fuzz_budget_was_spent() -> None:
    """Runs last in this module: the fuzz targets above tried what they were given."""
    print(f"fuzz inputs tried: {TRIED} (total {sum(TRIED.values())})")
    assert sum(TRIED.values()) >= 4 * min(EXAMPLES, 100)
