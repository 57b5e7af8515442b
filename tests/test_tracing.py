"""Trace links: a commit made inside an OpenTelemetry span names the span's trace in its
metadata, and the span names the commit (``snapvc.tracing``), with the real
OpenTelemetry SDK recording spans in memory."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra's SDK is in the test extra")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import Tracer

import snapvc
import snapvc.aio
from snapvc import tracing
from snapvc.cli.main import cli
from click.testing import CliRunner


@pytest.fixture
def spans() -> Iterator[tuple[Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("test"), exporter
    provider.shutdown()


@pytest.fixture
def repo(tmp_path):
    with snapvc.open(tmp_path / "agent.snapvc") as r:
        yield r


def _hex_ids(span) -> tuple[str, str]:
    context = span.get_span_context()
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


def test_a_commit_inside_a_span_and_the_span_name_each_other(repo, spans):
    tracer, exporter = spans
    with tracer.start_as_current_span("agent step") as span:
        first = repo.commit({"step": 1}, message="one", metadata={"step": 1})
        second = repo.commit({"step": 2}, message="two", metadata={"step": 2})
        trace_id, span_id = _hex_ids(span)
    assert dict(first.metadata) == {"step": 1, "trace_id": trace_id, "span_id": span_id}
    assert second.metadata["trace_id"] == trace_id
    (finished,) = exporter.get_finished_spans()
    # The attribute holds the last commit; an event per commit keeps them all, in order.
    assert finished.attributes[tracing.CHECKPOINT_ID_ATTRIBUTE] == second.id.hex
    events = [e for e in finished.events if e.name == tracing.COMMIT_EVENT]
    assert [e.attributes[tracing.CHECKPOINT_ID_ATTRIBUTE] for e in events] == [first.id.hex, second.id.hex]
    assert {e.attributes[tracing.REF_ATTRIBUTE] for e in events} == {"refs/heads/main"}


def test_outside_a_span_a_commit_is_what_it_was(repo, spans, tmp_path):
    tracer, exporter = spans  # the SDK is imported and a tracer exists, but no span is active
    commit = repo.commit({"step": 1}, message="one", metadata={"step": 1})
    assert dict(commit.metadata) == {"step": 1}
    with snapvc.open(tmp_path / "other.snapvc") as other:  # the same commit elsewhere: the same id
        twin = other.commit({"step": 1}, message="one", metadata={"step": 1}, date=commit.time)
    assert twin.id == commit.id
    assert exporter.get_finished_spans() == ()


def test_a_callers_own_trace_id_is_kept(repo, spans):
    tracer, _ = spans
    with tracer.start_as_current_span("step"):
        commit = repo.commit({"a": 1}, metadata={"trace_id": "from-elsewhere"})
    assert dict(commit.metadata) == {"trace_id": "from-elsewhere"}


def test_links_can_be_turned_off(repo, spans):
    tracer, exporter = spans
    tracing.set_trace_links(False)
    try:
        with tracer.start_as_current_span("step"):
            commit = repo.commit({"a": 1})
    finally:
        tracing.set_trace_links(True)
    assert dict(commit.metadata) == {}
    (finished,) = exporter.get_finished_spans()
    assert tracing.CHECKPOINT_ID_ATTRIBUTE not in finished.attributes


def test_a_span_sampled_out_still_gives_its_trace_id(repo):
    # The trace id travels with the request whether or not this process records the span.
    tracer = TracerProvider(sampler=ALWAYS_OFF).get_tracer("test")
    with tracer.start_as_current_span("step") as span:
        commit = repo.commit({"a": 1})
        trace_id, _ = _hex_ids(span)
    assert commit.metadata["trace_id"] == trace_id
    assert not span.is_recording()


def test_a_bad_metadata_is_refused_as_before_inside_a_span(repo, spans):
    tracer, _ = spans
    with tracer.start_as_current_span("step"), pytest.raises(snapvc.InvalidCommitError, match="metadata"):
        repo.commit({"a": 1}, metadata=["not", "a", "dict"])  # type: ignore[arg-type]
    assert repo.branches() == {}  # nothing was stored


def test_working_copies_threads_and_async_commits_are_linked(repo, spans, tmp_path):
    tracer, exporter = spans
    with tracer.start_as_current_span("run") as span:
        trace_id, _ = _hex_ids(span)
        work = repo.state("main")
        work.set("notes", ["a"])
        snapshot = work.snapshot(message="working copy")
        thread = repo.thread("run-1")
        saved = thread.save({"step": 1})
    assert snapshot.metadata["trace_id"] == trace_id
    assert saved.metadata["trace_id"] == trace_id

    async def in_a_task() -> str:
        # The async repository commits on its worker thread, in the awaiting task's context.
        async with await snapvc.aio.open(tmp_path / "async.snapvc") as arepo:
            with tracer.start_as_current_span("async step") as aspan:
                commit = await arepo.commit({"step": 1}, message="async")
                assert commit.metadata["trace_id"] == _hex_ids(aspan)[0]
            return commit.id.hex

    commit_id = asyncio.run(in_a_task())
    finished = {s.name: s for s in exporter.get_finished_spans()}
    assert finished["async step"].attributes[tracing.CHECKPOINT_ID_ATTRIBUTE] == commit_id


def test_log_where_trace_id_finds_a_runs_checkpoints(tmp_path, spans):
    tracer, _ = spans
    path = tmp_path / "agent.snapvc"
    with snapvc.open(path) as repo:
        repo.commit({"step": 0}, message="before the run")
        with tracer.start_as_current_span("run") as span:
            for step in (1, 2):
                repo.commit({"step": step}, message=f"step {step}")
            trace_id, _ = _hex_ids(span)
        repo.commit({"step": 3}, message="after the run")
        # A trace id of digits only reads as a JSON number; stored as text, it is found all the same.
        repo.commit({"step": 4}, message="digits", metadata={"trace_id": "12345678901234567890123456789012"})
    runner = CliRunner()
    found = runner.invoke(cli, ["log", "--repo", str(path), "--json", "--where", f"trace_id={trace_id}"])
    assert found.exit_code == 0, found.output
    assert [c["message"] for c in json.loads(found.output)] == ["step 2", "step 1"]
    digits = runner.invoke(cli, ["log", "--repo", str(path), "--oneline", "--where", "trace_id=12345678901234567890123456789012"])
    assert digits.exit_code == 0 and digits.output.count("\n") == 1 and "digits" in digits.output
    step = runner.invoke(cli, ["log", "--repo", str(path), "--oneline", "--where", "step=4"])
    assert step.exit_code == 0 and step.output == ""  # step 4 is in the state, not the metadata


def test_snapvc_never_imports_opentelemetry_itself(tmp_path):
    code = ("import sys, snapvc\n"
            f"r = snapvc.open({str(tmp_path / 'x.snapvc')!r})\n"
            "c = r.commit({'a': 1})\n"
            "r.close()\n"
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')), dict(c.metadata))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[] {}"
