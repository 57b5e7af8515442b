"""The benchmarks run end to end and their workload is what it claims to be.

No timing is asserted here: benchmarks measure, tests check behaviour.
"""

from __future__ import annotations

import copy
import json
import os
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

from benchmarks.agent_run import (  # noqa: E402
    environment,
    format_markdown,
    format_table,
    run_agent_benchmark,
)
from benchmarks.workload import TOOLS, AgentRun  # noqa: E402

SMALL = {"documents": 5, "doc_size": 4_000}


# --- the benchmark, end to end ---------------------------------------------------------


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("bench")
    return run_agent_benchmark(20, documents=5, folder=folder)


NUMERIC_FIELDS = [
    "commits",
    "store_bytes",
    "store_bytes_closed",
    "full_copy_bytes",
    "final_state_bytes",
    "commit_first_s",
    "commit_last_s",
    "commit_total_s",
    "checkout_s",
    "checkout_fresh_s",
    "open_s",
    "read_message_s",
    "read_message_index",
    "log_s",
    "tracemalloc_peak_bytes",
    "maxrss_bytes",
]


@pytest.mark.parametrize("name", NUMERIC_FIELDS)
def test_report_has_every_figure_positive(report, name: str) -> None:
    assert getattr(report, name) > 0


def test_report_reads_back_what_it_committed(report) -> None:
    assert report.correct
    assert report.commits == 21
    assert any("freshly opened" in check for check in report.checks)
    assert any("snapshot" in check for check in report.checks)


def test_report_includes_repository_stats(report) -> None:
    for name in ("objects", "stored_bytes", "logical_bytes", "dedup_ratio"):
        assert getattr(report.stats, name) > 0
    assert report.stats_text


def test_report_renders_as_text_markdown_and_json(report) -> None:
    rows = report.rows()
    assert all(name and value for name, value in rows)
    assert "repo.stats():" in format_table(report)
    env = environment()
    assert {"platform", "cpus", "python", "snapvc", "blake3", "zstandard", "msgpack"} <= env.keys()
    page = format_markdown(report, env, "python -m benchmarks --steps 20")
    assert page.startswith("# Benchmarks")
    assert "python -m benchmarks --steps 20" in page
    assert f"| {rows[0][0]} | {rows[0][1]} |" in page
    json.dumps(report.as_dict())


def test_benchmark_leaves_no_repository_behind_in_its_own_temporary_folder(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    run_agent_benchmark(2, documents=1, doc_size=2_000, measure_memory=False)
    assert list(tmp_path.iterdir()) == []


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
