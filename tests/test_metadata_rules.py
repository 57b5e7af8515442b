"""What may be stored is what can be shown: commit metadata nests at most ``MAX_DEPTH``
containers (the metadata object counted, as a state's root is) and takes at most
``MAX_METADATA_BYTES`` of JSON. ``commit`` refuses more, naming the key path; every
reader (``log``, ``show``, ``--json``, ``--format``, the web view, the MCP server) shows
metadata stored before the rule, or by a crafted row, cut rather than failing, and never
blames the state for it.

The web view cuts every value it sends: the answers are counted in bytes for a 60 MB
array and a 30 MB string.
"""

from __future__ import annotations

import subprocess
import tracemalloc
import sys
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import orjson
import pytest
from starlette.testclient import TestClient

import snapvc
import snapvc.ui
from snapvc.encoding.jsonable import TAG, json_head, json_size
from snapvc.errors import InvalidCommitError
from snapvc.ids import ObjectId
from snapvc.objects import COMMIT, MAX_DEPTH, MAX_METADATA_BYTES, Commit, object_bytes, shown_metadata
from snapvc.mcp.tools import Tools
from snapvc.ui.api import MAX_VALUE_CHARS

MAIN = "refs/heads/main"


def chain(containers: int) -> Any:
    """``containers`` nested lists, "x" in the innermost."""
    value: Any = "x"
    for _ in range(containers):
        value = [value]
    return value


def stored_before_the_rule(repo: snapvc.Repository, metadata: dict[str, Any] | bytes, branch: str = "main",
                           state: dict[str, Any] | None = None) -> ObjectId:
    """A commit on ``branch`` whose metadata is ``metadata`` as an older snapvc stored it
    (it took any metadata orjson could write, about 250 levels deep), or as a crafted row
    holds it (JSON text as bytes): packed as given, below ``Commit.create``."""
    ref = "refs/heads/" + branch
    tree = repo.commit_tree(state or {"a": 1}, message="carries the tree").tree
    tip = repo.refs.get(ref)
    parents = [bytes(tip)] if tip is not None else []
    generation = 1 + (repo.get_commit(tip).generation if tip is not None else 0)
    payload = msgpack.packb([bytes(tree), parents, "old", 1_700_000_000_000_000, "deep metadata",
                             metadata if isinstance(metadata, bytes) else orjson.dumps(metadata, option=orjson.OPT_SORT_KEYS),
                             generation], use_bin_type=True)
    oid, data = object_bytes(COMMIT, payload)
    with repo.backend.transaction():
        repo.commits.add(Commit.decode(oid, data[1:]))
        assert repo.refs.compare_and_swap(ref, tip, oid, "commit: as an older snapvc did")
    return oid


def depth_of(value: Any) -> int:
    """The containers ``value`` nests, itself counted."""
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


# -- commit: the rule where metadata enters ---------------------------------------------------


def test_commit_takes_metadata_as_deep_as_a_state_and_refuses_one_level_more_naming_the_path() -> None:
    repo = snapvc.open("memory://")
    deepest = {"run": {"trace": chain(MAX_DEPTH - 2)}}  # the metadata object counted: MAX_DEPTH containers
    made = repo.commit({"a": 1}, metadata=deepest)
    assert dict(made.metadata) == deepest and shown_metadata(made) == deepest
    tip = repo.refs.get(MAIN)
    for containers in (MAX_DEPTH - 1, 249, 5000):  # one more than a state may hold; what orjson took; far past it
        with pytest.raises(InvalidCommitError) as raised:
            repo.commit({"a": 2}, metadata={"run": {"trace": chain(containers)}})
        assert raised.value.field == "metadata"
        # the first container refused: the 99th list, at level 101
        assert raised.value.reason.startswith("at ['run']['trace']" + "[0]" * (MAX_DEPTH - 2) + ": nested deeper "
                                              f"than {MAX_DEPTH} containers")
        assert "state" not in str(raised.value)
    assert repo.refs.get(MAIN) == tip  # nothing moved


def test_commit_refuses_metadata_larger_than_the_bound_and_takes_it_at_the_bound() -> None:
    repo = snapvc.open("memory://")
    wrapper = len(orjson.dumps({"note": ""}))
    at_bound = repo.commit({"a": 1}, metadata={"note": "n" * (MAX_METADATA_BYTES - wrapper)})
    assert len(at_bound.metadata_json) == MAX_METADATA_BYTES
    with pytest.raises(InvalidCommitError, match=r"metadata is 1,048,577 bytes of JSON, more than the 1,048,576"):
        repo.commit({"a": 2}, metadata={"note": "n" * (MAX_METADATA_BYTES - wrapper + 1)})
    assert repo.refs.get(MAIN) == at_bound.id


def test_gc_rewriting_history_keeps_metadata_stored_before_the_rule() -> None:
    """A commit moved by ``gc(keep=...)`` keeps its metadata as stored: the rule refuses
    new metadata, it does not make old history unmovable."""
    repo = snapvc.open("memory://")
    repo.commit({"a": 0}, message="dropped")
    old = stored_before_the_rule(repo, {"deep": chain(150)})
    repo.commit({"a": 2}, message="after")
    report = repo.gc(keep=snapvc.Keep(last=2))
    assert report.rewrites and report.rewrites[0].kept == 2
    moved = repo.get_commit(repo.get_commit(repo.resolve("main")).parents[0])
    assert moved.metadata_json == repo.get_commit(old).metadata_json and moved.id != old


# -- the command line -------------------------------------------------------------------------


@pytest.mark.slow  # commands in processes
@pytest.mark.parametrize("containers", [MAX_DEPTH, 253])
def test_log_and_show_show_metadata_stored_too_deep_cut_and_blame_no_state(tmp_path: Path, containers: int) -> None:
    """Metadata of ``containers`` nested lists below its key (``MAX_DEPTH + 1`` containers
    in all, and 254: the deepest an older ``commit`` took) on the tip: every view of the
    history works and says it is cut."""
    path = tmp_path / "agent.snapvc"
    with snapvc.open(path) as repo:
        repo.commit({"a": 0}, message="first", metadata={"step": 1})
        stored_before_the_rule(repo, {"step": 2, "deep": chain(containers)})
    cut = "nested deeper than 100 containers"
    for args in (["log"], ["show"], ["log", "--format", "%h %(meta)"], ["log", "--format", "%(meta:deep)"],
                 ["log", "-p"]):
        done = subprocess.run([sys.executable, "-m", "snapvc", *args, "--repo", str(path)], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, (args, done.stderr)
        assert cut in done.stdout and "state" not in done.stderr, args
    for args in (["log", "--json"], ["show", "--json"]):
        done = subprocess.run([sys.executable, "-m", "snapvc", *args, "--repo", str(path)], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (args, done.stderr)
        found = orjson.loads(done.stdout)
        tip = found[0] if isinstance(found, list) else found
        assert tip["metadata"]["step"] == 2 and depth_of(tip["metadata"]) <= MAX_DEPTH
        assert cut in orjson.dumps(tip["metadata"]).decode()


# -- the web view -----------------------------------------------------------------------------


def _client(repo: snapvc.Repository) -> TestClient:
    return TestClient(snapvc.ui.app(repo), base_url="http://127.0.0.1")


def test_the_web_view_shows_metadata_stored_too_deep_cut_on_every_page() -> None:
    """250 levels: what ``commit`` took before the rule; the answers used to fail with 500
    (orjson writes at most 255 levels). On a thread branch, for the threads page too."""
    repo = snapvc.open("memory://")
    repo.commit({"a": 0}, message="first", metadata={"step": 1})
    deep = stored_before_the_rule(repo, {"step": 2, "session_id": "s1", "deep": chain(250)})
    client = _client(repo)
    pages = {"graph": client.get("/api/graph"), "commit": client.get(f"/api/commit/{deep.hex}"),
             "threads": client.get("/api/threads"), "threads of s1": client.get("/api/threads?where=session_id=s1")}
    for name, answer in pages.items():
        assert answer.status_code == 200, (name, answer.text[:300])
    metadata = [pages["graph"].json()["rows"][0]["metadata"], pages["commit"].json()["metadata"],
                pages["threads"].json()["threads"][0]["latest"]["metadata"]]
    assert [t["session"] for t in pages["threads of s1"].json()["threads"]] == ["s1"]
    for shown in metadata:
        assert shown["step"] == 2 and depth_of(shown) <= MAX_DEPTH
        assert "nested deeper than 100 containers" in orjson.dumps(shown).decode()


@pytest.mark.slow  # a command in a process
def test_a_crafted_row_nested_past_what_json_is_read_to_hides_no_other_commit(tmp_path: Path) -> None:
    """2,000 levels: more than orjson reads (1,024). The web view shows the commit's
    metadata as damaged and the history around it; ``log --json`` names the commit as
    damaged (exit 2, as every read of damage on the command line), never a traceback."""
    path = tmp_path / "agent.snapvc"
    with snapvc.open(path) as repo:
        repo.commit({"a": 0}, message="first", metadata={"step": 1})
        crafted = stored_before_the_rule(repo, b'{"deep":' + b"[" * 2000 + b"]" * 2000 + b"}")
        repo.commit({"a": 2}, message="after", metadata={"step": 3})
        rows = _client(repo).get("/api/graph").json()["rows"]
        assert [row["metadata"].get("step") for row in rows] == [3, None, 1]
        assert "is not a JSON object" in rows[1]["metadata"]["$truncated"]["reason"]
        assert crafted.hex in rows[1]["metadata"]["$truncated"]["reason"]
    done = subprocess.run([sys.executable, "-m", "snapvc", "log", "--json", "--repo", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and crafted.hex in done.stderr and "not a JSON object" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_the_web_view_cuts_large_metadata_values_and_states_their_size() -> None:
    repo = snapvc.open("memory://")
    repo.commit({"a": 0}, message="first", metadata={"step": 1, "note": "n" * 900_000})
    answer = _client(repo).get("/api/graph")
    assert answer.status_code == 200 and len(answer.content) < 2 * MAX_VALUE_CHARS
    shown = answer.json()["rows"][0]["metadata"]
    assert shown["step"] == 1
    assert shown["note"]["$truncated"] is True and shown["note"]["size"] == 900_002


@pytest.fixture(scope="module")
def huge_values() -> snapvc.Repository:
    """A repository whose last commit changes a 60 MB array (a row appended) and a 30 MB
    string of many lines, at the top and inside a map and a list."""
    repo = snapvc.open("memory://")
    array = np.arange(60_000_000 // 8, dtype=np.float64)
    text = "a line of text\n" * 2_000_000
    repo.commit({"a": 0}, message="small")
    repo.commit({"array": array, "text": text, "inside": {"text": text}, "list": [text]}, message="huge")
    repo.commit({"array": np.append(array, 1.0), "text": text + "end", "inside": {"text": text + "end"}, "list": [text, text]},
                message="huge again")
    return repo


HUGE_PAGES = [
    ("/api/state/main", ["array"]), ("/api/state/main", ["text"]), ("/api/state/main", ["inside", "text"]),
    ("/api/state/main", ["list", 0]), ("/api/state/main", []), ("/api/state/main", ["list"]),
    ("/api/history", ["array"]), ("/api/history", ["text"]), ("/api/history", ["list", 1]),
    ("/api/commit/main", None), ("/api/commit/main~1", None), ("/api/diff?a=main~2&b=main", None),
]


@pytest.mark.parametrize(("url", "path"), HUGE_PAGES)
def test_the_web_view_sends_no_value_whole_past_its_limit(huge_values: snapvc.Repository, url: str,
                                                           path: list[Any] | None) -> None:
    """Every answer stays within a few previews, however large the values it shows."""
    client = _client(huge_values)
    answer = client.get(url) if path is None else client.get(url, params={"path": orjson.dumps(path).decode()})
    assert answer.status_code == 200, answer.text[:300]
    assert len(answer.content) < 2 * MAX_VALUE_CHARS, (url, path, len(answer.content))


def test_a_cut_value_states_the_size_of_its_whole_json(huge_values: snapvc.Repository) -> None:
    client = _client(huge_values)
    text = client.get("/api/state/main", params={"path": '["text"]'}).json()
    assert text["size"] == 2_000_000 * 15 + 3  # characters
    whole = orjson.dumps(huge_values.checkout("main")["text"])
    assert text["value"]["$truncated"] is True and text["value"]["size"] == len(whole)
    assert whole.decode().startswith(text["value"]["preview"])
    array = client.get("/api/state/main", params={"path": '["array"]'}).json()
    assert array["size"] == 60_000_008 and array["value"]["$truncated"] is True
    assert array["value"]["size"] == 80_000_010 and "<f8 (7500001,)" in array["value"]["preview"]


def test_a_map_holding_a_large_array_is_measured_not_written_whole() -> None:
    """A change adding a map that holds a 60 MB array: the answer cuts it, and writing
    the answer allocates the array as read (and its stored bytes) but never its JSON (80
    MB of base64, and the copies made on the way: over 1 GB before)."""
    repo = snapvc.open("memory://")
    array = np.arange(60_000_000 // 8, dtype=np.float64)
    repo.commit({"a": 0}, message="small")
    repo.commit({"a": 0, "run": {"weights": array, "note": "x"}}, message="added")
    del array
    client = _client(repo)
    client.get("/api/repo")  # the server started before counting
    tracemalloc.start()
    try:
        answer = client.get("/api/commit/main")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert answer.status_code == 200 and len(answer.content) < 2 * MAX_VALUE_CHARS
    (change,) = answer.json()["changes"]
    assert change["path"] == ["run"] and change["new"]["$truncated"] is True
    assert change["new_size"] == change["new"]["size"] > 80_000_000
    assert '{"note":"x","weights":{"$snapvc":"ndarray","dtype":"<f8","shape":[7500000]' in change["new"]["preview"]
    assert peak < 3 * 60_000_000, f"{peak:,} bytes allocated at most"


def test_the_mcp_tools_measure_a_large_array_instead_of_writing_it() -> None:
    """``checkout`` of a 60 MB array, alone and in a map: answers of a few hundred bytes,
    and no JSON of the array written on the way (the array as read, and its stored
    bytes, are all that is allocated)."""
    repo = snapvc.open("memory://")
    array = np.arange(60_000_000 // 8, dtype=np.float64)
    repo.commit({"weights": array, "run": {"weights": array}}, message="added")
    del array
    tools = Tools(repo)
    for path in ("weights", "run", ""):
        tracemalloc.start()
        try:
            answer = tools.checkout("main", path, limit=100, offset=0)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert len(orjson.dumps(answer)) < 2_000, path
        assert peak < 3 * 60_000_000, f"{path}: {peak:,} bytes allocated at most"


@pytest.mark.parametrize("value", [
    "plain", 'quote " backslash \\ newline \n tab \t control \x01 é 😀', b"\x00\x01 bytes", [1, "a", None, True, 2.5],
    {"k": [1, {"é": b"x"}], "$snapvc": "own key"}, (1, 2), np.arange(6, dtype=np.int32).reshape(2, 3),
])
def test_json_size_is_the_length_of_the_json_a_small_value_is_written_as(value: Any) -> None:
    """What a cut value states as its size: exact, but for a large array."""
    written = orjson.dumps(snapvc.to_jsonable(value)).decode()
    assert json_size(value, "state") == len(written)
    head = "".join(json_head(value, "state", 10))
    if isinstance(value, (str, list, bytes)) or (isinstance(value, dict) and TAG not in value):
        assert head[:10] == written[:10]  # a tagged form's preview is its items'


def test_json_size_of_a_large_array_is_its_base64_and_header() -> None:
    array = np.arange(100_000, dtype=np.float64)
    assert abs(json_size(array, "state") - len(orjson.dumps(snapvc.to_jsonable(array)))) < 20
