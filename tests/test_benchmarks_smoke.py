"""The benchmarks run end to end and their workload is what it claims to be.

No timing is asserted here: benchmarks measure, tests check behaviour.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import zstandard

# ``benchmarks`` lives beside the package, at the repository's root, and is not installed.
_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from benchmarks import peers as peer_bench  # noqa: E402
from benchmarks import s3_sync  # noqa: E402
from benchmarks import suite  # noqa: E402
from benchmarks.__main__ import main as bench_main  # noqa: E402
from benchmarks.agent_run import Report, report_blocks, run_agent_benchmark  # noqa: E402
from benchmarks.large_state import state_available  # noqa: E402
from benchmarks.measure import (  # noqa: E402
    QUICK,
    Section,
    StoreFigures,
    Table,
    environment,
    from_json,
    percentile,
    process_memory,
    to_json,
)
from benchmarks.workload import TOOLS, AgentRun, compressible_bytes, library  # noqa: E402

SMALL = {"documents": 5, "doc_size": 4_000}


# --- the agent-run benchmark, end to end -----------------------------------------------


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("bench")
    return run_agent_benchmark(20, documents=5, folder=folder, growth_at=(0, 10, 20))


NUMERIC_FIELDS = [
    "commits",
    "store_bytes",
    "store_bytes_closed",
    "full_copy_bytes",
    "final_state_bytes",
    "commit_first_s",
    "commit_last_s",
    "commit_median_s",
    "commit_p99_s",
    "commit_total_s",
    "checkout_s",
    "checkout_fresh_s",
    "open_s",
    "read_message_s",
    "read_message_index",
    "log_s",
    "diff_s",
    "diff_fresh_s",
    "history_s",
    "history_fresh_s",
    "history_entries",
    "log_paths_s",
    "log_paths_fresh_s",
    "tracemalloc_peak_bytes",
    "maxrss_bytes",
    "state_commit_first_s",
    "state_commit_last_s",
    "state_commit_median_s",
    "state_commit_p99_s",
    "state_commit_total_s",
    "state_store_bytes_closed",
    "rebuilt_commit_first_s",
    "rebuilt_commit_last_s",
    "rebuilt_commit_median_s",
    "rebuilt_commit_p99_s",
    "rebuilt_commit_total_s",
    "rebuilt_store_bytes_closed",
]


@pytest.mark.parametrize("name", NUMERIC_FIELDS)
def test_report_has_every_figure_positive(report, name: str) -> None:
    assert getattr(report, name) > 0


def test_report_reads_back_what_it_committed(report) -> None:
    assert report.correct
    assert report.commits == 21
    assert any("freshly opened" in check for check in report.checks)
    assert any("snapshot" in check for check in report.checks)
    assert "the State working copy ends at the same tree as the plain-dict commits" in report.checks
    assert "the state rebuilt each step ends at the same tree as the in-place commits" in report.checks
    assert any(check.startswith("repo.history of scratchpad.") for check in report.checks)
    assert any(check.startswith("repo.log(paths=") for check in report.checks)


def test_report_records_the_size_at_each_growth_point(report) -> None:
    assert list(report.growth) == [0, 10, 20]
    assert 0 < report.growth[0] <= report.growth[10] <= report.growth[20]


def test_report_includes_repository_stats(report) -> None:
    for name in ("objects", "stored_bytes", "logical_bytes", "dedup_ratio"):
        assert getattr(report.stats, name) > 0
    assert report.stats_text


def test_report_shows_the_history_reads(report) -> None:
    names = [name for name, _ in report.rows()]
    for what in ("repo.diff of adjacent commits, open repository", "repo.diff of adjacent commits, freshly opened",
                 "repo.history of scratchpad.", "list(log(paths="):
        assert any(name.startswith(what) for name in names), what
    assert 0 < report.history_entries < report.commits


def test_report_renders_as_a_table_and_markdown(report) -> None:
    rows = report.rows()
    assert all(name and value for name, value in rows)
    table, stats, commits, *_ = report_blocks(report)
    assert isinstance(table, Table) and table.rows == [[name, value] for name, value in rows]
    assert report.stats_text in stats
    assert isinstance(commits, Table)
    assert [row[0] for row in commits.rows] == ["plain dict, repo.commit(state)", "State working copy, state.snapshot()",
                                                "plain dict rebuilt each step, repo.commit(state)"]
    assert all(len(row) == len(commits.header) for row in commits.rows)
    assert f"| {rows[0][0]} | {rows[0][1]} |" in "\n".join(table.markdown())
    assert {"platform", "cpus", "python", "snapvc", "blake3", "zstandard", "msgpack", "orjson"} <= environment().keys()
    json.dumps(report.as_dict())


def test_report_times_the_first_commits_after_a_load_in_a_new_process(report) -> None:
    loaded = report.after_load
    assert loaded is not None and loaded.step == 21
    for name in ("open_s", "checkout_s", "commit_s", "next_commit_s", "state_load_s", "snapshot_s", "next_snapshot_s"):
        assert getattr(loaded, name) > 0, name
    assert "after a load in a new process, the plain dict and the State working copy commit the same trees" in report.checks
    assert "after a load, the commits check out equal to the run's state two steps on" in report.checks
    names = [name for name, _ in report.rows()]
    assert "after a load: first repo.commit (step 21)" in names
    assert "after a load: first state.snapshot (step 21)" in names


def test_report_comes_back_equal_from_json(report) -> None:
    text = json.dumps(to_json(report), allow_nan=False)
    again = from_json(json.loads(text), Report)
    assert again == report
    assert again.growth == report.growth and all(type(k) is int for k in again.growth)
    assert again.stats == report.stats and again.stats_text == report.stats_text


def test_from_json_rebuilds_each_declared_type_and_to_json_refuses_other_objects() -> None:
    figures = StoreFigures(3, 10, {"file": 10}, 8, 0.5, 1.0, 2.0, 0.1, 0.2, 0.3, 0.4, "['k']", 0.5, 0.6, 2)
    assert from_json(json.loads(json.dumps(to_json(figures))), StoreFigures) == figures
    assert from_json([[1, 2.5, "x"]], list[tuple[int, float, str]]) == [(1, 2.5, "x")]
    assert from_json({"7": 1}, dict[int, int]) == {7: 1}
    assert from_json(None, float | None) is None and from_json(2, float | None) == 2.0
    with pytest.raises(TypeError):
        to_json({"value": object()})
    with pytest.raises(TypeError):
        from_json("1", int)


def test_no_benchmark_or_test_imports_pickle() -> None:
    importing = re.compile(r"^\s*(import|from)\s+" + "pick" + r"le\b", re.MULTILINE)
    sources = [*(_ROOT / "benchmarks").glob("*.py"), *(_ROOT / "tests").glob("*.py")]
    assert sources and not [p.name for p in sources if importing.search(p.read_text(encoding="utf-8"))]


def test_benchmark_leaves_no_repository_behind_in_its_own_temporary_folder(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    run_agent_benchmark(2, documents=1, doc_size=2_000, measure_memory=False)
    assert list(tmp_path.iterdir()) == []


# --- every workload at the quick scale -------------------------------------------------

# What each workload must have checked, beyond reading back its latest state.
SAME_TREE = "the State working copy ends at the same tree as the plain-dict commits"
EXPECTED_CHECKS = {
    "agent-run": ["checkout after the run equals the state in memory", SAME_TREE, "repo.history of scratchpad.",
                  "on a freshly opened repository list the same commits"],
    "per-step": ["40 steps: checkout equals the state in memory",
                 "40 steps: each fork's first commit checks out equal to the state committed",
                 "20 steps: each fresh process checks out the state in memory",
                 "20 steps: each fresh process reads through a snapshot the message in memory"],
    "growth": ["SqliteSaver: the latest state equals", "InMemorySaver: the latest state equals"],
    "large-state": ["snapshot['documents']", "the first snapshot after a load (open repository) stores the one",
                    "the first snapshot after a load (freshly opened repository) stores the one"],
    "wide-map": ["diffs names exactly the keys changed", SAME_TREE],
    "long-list": ["snapshot['events'][10000]", SAME_TREE],
    "deep-history": ["main~150 resolves to commit 49", "main~150 checks out to the state committed then"],
    "branching": ["each of the 3 branches checks out equal", "InMemorySaver: each of 3 threads"],
    "langgraph": ["get_state_history lists 22 checkpoints", "the history is newest first, steps 20 to -1",
                  "the thread's branch holds the graph's channels", "SqliteSaver + DeltaChannel: the latest state"],
    "langgraph-react": ["SnapvcSaver: the thread's messages are the script's 6 turns",
                        "SnapvcSaver: get_state_history lists 30 checkpoints",
                        "SnapvcSaver: each checkpoint in the history holds the messages of its place in the run",
                        "SnapvcSaver: the thread's branch checks out to the thread's messages",
                        "InMemorySaver: get_state_history lists 30 checkpoints",
                        "SqliteSaver: get_state_history lists 30 checkpoints",
                        "every saver ends the thread with the same messages"],
    "git-export": ["the import rebuilds every commit to its id", "the first export writes 21 commits, the second 10"],
    "s3-sync": ["on S3: fsck is clean", "the second push sends the 10 new commits only", "the clone: fsck is clean"],
    "adk-sessions": ["the pages hold all 200 sessions once", "snapvc: the long session reads back 50 events",
                     "snapshot['events'][25] equals the value in memory"],
    "embeddings": ["each append of 100 rows stores about the rows", "one changed row stores about one chunk"],
    "lifetime": ["a checkout on a freshly opened repository equals the state committed",
                 "each of 20 open/checkout/close cycles checks out the state committed"],
}


# Workloads whose figures are not one repository's (the summary table's columns): the
# per-step figures are CPU times of snapvc and the peers side by side; the lifetime ones,
# what a process pays for imports and what a closed repository leaves behind.
NO_SUMMARY = {"per-step", "lifetime"}
PEERS = peer_bench.peers_available() and shutil.which("git") is not None
needs_peers = pytest.mark.skipif(not PEERS, reason="the LangGraph checkpointers or git are not installed")


@pytest.fixture(scope="module")
def sections() -> dict[str, Section]:
    """Every workload at the quick scale, in this process; peers where they are cheap."""
    with_peers = {"growth", "branching", "langgraph", "langgraph-react"} if PEERS else set()
    return {
        name: suite.run_workload(name, QUICK, peers=name in with_peers, in_process=True)
        for name in suite.WORKLOADS
        if name != "s3-sync" or s3_sync.available() is None  # needs a SeaweedFS binary
    }


def workload_section(sections: dict[str, Section], name: str) -> Section:
    if name not in sections:
        pytest.skip(f"{name}: {s3_sync.available()}")
    return sections[name]


def test_every_workload_is_in_the_suite() -> None:
    assert list(EXPECTED_CHECKS) == list(suite.WORKLOADS)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EXPECTED_CHECKS))
def test_workload_reads_back_what_it_committed(sections, name: str) -> None:
    section = workload_section(sections, name)
    assert any("checkout" in check and "equals the state" in check for check in section.checks)
    for expected in EXPECTED_CHECKS[name]:
        if not PEERS and "Saver" in expected:
            continue
        assert any(expected in check for check in section.checks), (expected, section.checks)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EXPECTED_CHECKS))
def test_workload_reports_tables_and_summary_figures(sections, name: str) -> None:
    section = workload_section(sections, name)
    assert section.name == name and section.title and section.intro
    tables = section.tables()
    assert tables and all(table.rows for table in tables)
    for table in tables:
        assert all(len(row) == len(table.header) for row in table.rows)
        assert all(cell.strip() for row in table.rows for cell in row[:1])
    assert section.text().startswith(section.title)
    assert section.markdown()[0] == f"## {section.title}"
    if name in NO_SUMMARY:
        assert not section.summary
        return
    (label, figures, _maxrss), *_ = section.summary
    assert label and figures.commits > 0
    for value in (figures.open_bytes, figures.closed_bytes, figures.commit_median_s, figures.commit_p99_s,
                  figures.checkout_s, figures.read_s, figures.log_s):
        assert value > 0
    assert figures.commit_p99_s >= figures.commit_median_s
    assert section.text().startswith(section.title)
    assert section.markdown()[0] == f"## {section.title}"


@pytest.mark.slow
@needs_peers
def test_growth_table_has_every_point_for_snapvc_and_each_peer(sections) -> None:
    curve = sections["growth"].tables()[0]
    assert [row[0] for row in curve.rows[: len(QUICK.growth_steps) + 1]] == ["0", "5", "10", "20"]
    assert curve.header[1::2] == ["snapvc", "LangGraph SqliteSaver", "LangGraph InMemorySaver", "git (.git before gc)"]
    assert "not run" not in " ".join(cell for row in curve.rows for cell in row)


@pytest.mark.slow
def test_large_state_reports_throughput_against_the_limits(sections) -> None:
    throughput, limits, commits, _ = sections["large-state"].tables()
    assert [row[0] for row in limits.rows][:3] == ["blake3", "zstd level 3 compress (one value per call)", "zstd decompress"]
    assert all(row[4].endswith("%") for row in throughput.rows)
    state_row = commits.rows[1]
    if state_available():
        assert state_row[1] != "State working copy not available"
        assert any("same tree" in check for check in sections["large-state"].checks)
        assert [row[0] for row in commits.rows[2:]] == [
            "first state.snapshot after a new repo.state, open repository",
            "first state.snapshot after a new repo.state, freshly opened"]
    else:
        assert state_row[1] == "State working copy not available"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["wide-map", "long-list"])
def test_workload_shows_plain_and_state_commits_side_by_side(sections, name: str) -> None:
    commits = sections[name].tables()[0]
    assert commits.header[1:] == ["median", "p99"]
    assert [row[0].split(" (")[0] for row in commits.rows] == [
        "plain dict, repo.commit(state)", "State working copy, state.snapshot()"]
    (_label, figures, _maxrss), = sections[name].summary
    assert figures.state_commit_median_s is not None and figures.state_commit_p99_s is not None


@pytest.mark.slow
@needs_peers
def test_branching_compares_every_system(sections) -> None:
    forks = sections["branching"].tables()[0]
    assert [row[0] for row in forks.rows] == ["snapvc", "LangGraph SqliteSaver", "LangGraph InMemorySaver", "git"]


@pytest.mark.slow
@needs_peers
def test_langgraph_compares_snapvc_saver_with_sqlite_saver_and_delta_channel(sections) -> None:
    savers = sections["langgraph"].tables()[0]
    assert [row[0] for row in savers.rows] == [
        "SnapvcSaver", "SqliteSaver", "SqliteSaver + DeltaChannel",
        "SnapvcSaver / SqliteSaver", "SnapvcSaver / SqliteSaver + DeltaChannel"]
    assert all("22 checkpoints" in row[5] for row in savers.rows[:3])


@pytest.mark.slow
@needs_peers
def test_langgraph_react_compares_snapvc_saver_with_in_memory_and_sqlite_savers(sections) -> None:
    savers = sections["langgraph-react"].tables()[0]
    assert savers.header[:4] == ["saver", "turn, median of first 3", "turn, median of last 3", "last / first"]
    assert [row[0] for row in savers.rows] == [
        "SnapvcSaver", "InMemorySaver", "SqliteSaver", "SnapvcSaver / InMemorySaver", "SnapvcSaver / SqliteSaver"]
    assert savers.header[6:9] == ["saver.list, first item (median of 2)", "get_state_history, first item",
                                  "get_state_history, all"]
    assert all("30 checkpoints" in row[8] for row in savers.rows[:3])
    assert all(row[3].endswith("x") for row in savers.rows[:3])


def test_react_script_is_deterministic_and_each_turn_its_own() -> None:
    from benchmarks.langgraph_react import Script, messages_digest

    a, b = Script(4, 5), Script(4, 8)
    assert messages_digest(a.messages(5)) == messages_digest(b.messages(5))
    assert messages_digest(a.messages(5)) != messages_digest(Script(5, 5).messages(5))
    kinds = [type(m).__name__ for m in b.messages(2)]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"] * 2
    call = b.tool_call(3)
    assert call.tool_calls[0]["id"] == "call_3" and call.tool_calls[0]["name"] in ("search", "read_file")
    assert b.tool_result("call_3").id == "tool-3" and 100 <= len(call.content) <= 1500


@pytest.mark.slow
def test_summary_and_page_hold_every_section(sections) -> None:
    summary = suite.summary_table(list(sections.values()))
    assert len(summary.rows) == len(set(sections) - NO_SUMMARY)
    state_median = summary.header.index("State commit median")
    with_state = {row[0].split(",")[0] for row in summary.rows if row[state_median] != "-"}
    assert with_state == {"agent run", "wide map", "long list"} | ({"large state"} if state_available() else set())
    rebuilt = summary.header.index("rebuilt commit median")
    assert {row[0] for row in summary.rows if row[rebuilt] != "-"} == {"agent run, 20 steps"}  # both agent runs
    assert sum(row[rebuilt] != "-" for row in summary.rows) == 2
    after_load = summary.header.index("after a load: commit / State")
    loaded = {row[0].split(",")[0]: row[after_load] for row in summary.rows if row[after_load] != "-"}
    assert set(loaded) == {"agent run", "large state"}
    assert "-" not in loaded["agent run"] and loaded["large state"].startswith("- / ")
    text = suite.page(list(sections.values()), environment(), "python -m benchmarks --quick", QUICK)
    assert text.startswith("# Benchmarks")
    for section in sections.values():
        assert f"## {section.title}" in text
    assert "python -m benchmarks --quick" in text and "## Machine" in text


def test_command_runs_a_workload_in_a_child_process_and_writes_json(tmp_path, capsys) -> None:
    out = tmp_path / "figures.json"
    assert bench_main(["--quick", "--workload", "deep-history", "--no-peers", "--out", str(out)]) == 0
    figures = json.loads(out.read_text())
    (section,) = figures["sections"]
    (_label, store, maxrss) = section["summary"][0]
    assert section["name"] == "deep-history" and store["commits"] == QUICK.history_commits
    assert maxrss > 0  # the child's own peak RSS, as it measured it
    assert "Deep history" in capsys.readouterr().out


def test_a_part_s_peak_rss_is_its_child_s_own_not_the_parent_s(tmp_path) -> None:
    # On Linux a child's ru_maxrss starts at the peak of the process that started it: with
    # 400 MiB touched here first, a small workload would report at least that.
    ballast = bytearray(400 << 20)
    ballast[:: 4096] = b"x" * len(range(0, len(ballast), 4096))
    parent_peak = process_memory("VmHWM")
    _value, peak = suite._in_child("deep-history", "snapvc", QUICK, 0)
    del ballast
    assert parent_peak >= 400 << 20
    assert 0 < peak < 300 << 20


def test_write_docs_needs_the_full_run() -> None:
    with pytest.raises(SystemExit):
        bench_main(["--quick", "--write-docs"])


def test_percentile_is_the_nearest_rank() -> None:
    assert percentile(list(range(1, 101)), 99) == 99
    assert percentile([5.0], 99) == 5.0


def test_large_documents_have_the_asked_length_and_compress_like_prose() -> None:
    docs = library(3, 4, 10_000, pool=2_000)
    assert list(docs) == ["doc-0000", "doc-0001", "doc-0002", "doc-0003"]
    assert {len(doc) for doc in docs.values()} == {10_000} and len(set(docs.values())) == 4
    assert docs == library(3, 4, 10_000, pool=2_000)
    compressor = zstandard.ZstdCompressor(level=3)
    assert 2.3 < 10_000 / len(compressor.compress(docs["doc-0001"].encode())) < 4
    blob = compressible_bytes(1, 100_000)
    assert len(blob) == 100_000 and 1.5 < len(blob) / len(compressor.compress(blob)) < 2.5


# --- the workload ----------------------------------------------------------------------


def _run(seed: int, steps: int) -> list[dict]:
    run = AgentRun(seed=seed, **SMALL)
    state = run.initial_state()
    states = [copy.deepcopy(state)]
    for i in range(1, steps + 1):
        state = run.step(state, i)
        states.append(copy.deepcopy(state))
    return states


def test_workload_is_deterministic() -> None:
    assert _run(7, 25) == _run(7, 25)
    assert _run(7, 1)[0] != _run(8, 1)[0]


_DIGEST = """
import hashlib, json
from benchmarks.workload import AgentRun
run = AgentRun(seed=5, documents=3, doc_size=3000)
state = run.initial_state()
for i in range(1, 21):
    run.step(state, i)
print(hashlib.sha256(json.dumps(state).encode()).hexdigest())
"""


def test_workload_is_the_same_in_every_process() -> None:
    digests = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run([sys.executable, "-c", _DIGEST], cwd=_ROOT, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        digests.add(done.stdout)
    assert len(digests) == 1


def test_a_step_does_not_depend_on_the_steps_before_it_in_this_process() -> None:
    a, b = AgentRun(seed=3, **SMALL), AgentRun(seed=3, **SMALL)
    state_a = a.step(a.initial_state(), 5)
    other = b.initial_state()
    for i in range(1, 5):
        b.step(other, i)
    state_b = b.step(b.initial_state(), 5)
    assert state_a == state_b


def test_rebuilt_step_makes_the_same_changes_in_new_containers_holding_the_same_objects() -> None:
    run = AgentRun(seed=2, **SMALL)
    in_place, rebuilt = run.initial_state(), run.initial_state()
    for i in range(1, 31):
        before = copy.deepcopy(rebuilt)
        new = run.step_rebuilt(rebuilt, i)
        in_place = run.step(in_place, i)
        assert new == in_place
        assert rebuilt == before  # the state it was given is left as it was
        # New containers for what changed, holding the very objects the old ones held.
        assert new is not rebuilt and new["messages"] is not rebuilt["messages"]
        assert all(a is b for a, b in zip(new["messages"], rebuilt["messages"], strict=False))
        assert new["scratchpad"] is not rebuilt["scratchpad"] and new["counters"] is not rebuilt["counters"]
        kept = [k for k in rebuilt["scratchpad"] if new["scratchpad"][k] is rebuilt["scratchpad"][k]]
        assert len(kept) == len(rebuilt["scratchpad"]) - 3
        assert new["task"] is rebuilt["task"]
        assert new["documents"] is not rebuilt["documents"]
        changed = [k for k in rebuilt["documents"] if new["documents"][k] is not rebuilt["documents"][k]]
        assert len(changed) == (1 if i % 10 == 0 else 0)
        rebuilt = new


def test_initial_state_has_the_documented_shape() -> None:
    state = AgentRun(seed=0, documents=50, doc_size=20_000).initial_state()
    assert state["messages"] == []
    assert len(state["scratchpad"]) == 25
    assert all(20 <= len(v) <= 60 for v in state["scratchpad"].values())
    assert list(state["documents"]) == [f"doc-{k:02d}" for k in range(50)]
    assert all(len(doc) == 20_000 for doc in state["documents"].values())
    assert state["counters"] == {"step": 0, "tool_calls": 0, "tokens_in": 0, "tokens_out": 0}
    assert set(state["task"]) == {"id", "goal"}


def test_text_compresses_like_prose() -> None:
    state = AgentRun(seed=0, documents=10).initial_state()
    compressor = zstandard.ZstdCompressor(level=3)
    for doc in state["documents"].values():
        data = doc.encode()
        assert 2.3 < len(data) / len(compressor.compress(data)) < 3.7


def _common_prefix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_step_changes_only_the_described_parts_and_keeps_the_rest_as_the_same_objects() -> None:
    run = AgentRun(seed=1, documents=8, doc_size=4_000)
    state = run.initial_state()
    for i in range(1, 31):
        before = dict(state)
        messages = list(state["messages"])
        scratchpad = dict(state["scratchpad"])
        documents = dict(state["documents"])
        counters = dict(state["counters"])
        task_items = dict(state["task"])

        assert run.step(state, i) is state

        # Same containers, same keys, the same objects under every untouched key.
        assert list(state) == list(before)
        assert all(state[key] is before[key] for key in before)
        assert state["task"] == task_items and all(state["task"][k] is v for k, v in task_items.items())

        # Two new messages appended; every earlier message is the same object.
        assert len(state["messages"]) == len(messages) + 2
        assert all(new is old for new, old in zip(state["messages"], messages))
        said, result = state["messages"][-2:]
        assert said["role"] == "assistant" and 100 <= len(said["content"]) <= 1500
        (call,) = said["tool_calls"]
        assert call["id"] == f"call_{i}" and call["name"] in TOOLS and 2 <= len(call["arguments"]) <= 3
        assert result == {"role": "tool", "tool_call_id": f"call_{i}", "content": result["content"]}
        assert 50 <= len(result["content"]) <= 800

        # Exactly 3 scratchpad values replaced; the others are the same objects.
        changed = [k for k in scratchpad if state["scratchpad"][k] is not scratchpad[k]]
        assert len(changed) == 3 and set(state["scratchpad"]) == set(scratchpad)
        assert all(20 <= len(state["scratchpad"][k]) <= 60 for k in changed)

        # Every 10th step one document gets a 300-character splice in its middle half.
        changed = [k for k in documents if state["documents"][k] is not documents[k]]
        if i % 10:
            assert changed == []
        else:
            (key,) = changed
            old, new = documents[key], state["documents"][key]
            assert len(new) == len(old) and new != old
            start = _common_prefix(old, new)
            end = len(old) - _common_prefix(old[::-1], new[::-1])
            assert end - start <= 300
            assert len(old) // 4 <= start and end <= 3 * len(old) // 4

        assert state["counters"]["step"] == i
        assert state["counters"]["tool_calls"] == counters["tool_calls"] + 1
        assert state["counters"]["tokens_in"] > counters["tokens_in"]
        assert state["counters"]["tokens_out"] > counters["tokens_out"]
