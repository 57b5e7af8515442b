"""The workloads, each part of one run in a process of its own, and the page they make.

A workload is a module with ``NAME``, ``TITLE``, ``parts(scale, peers)`` (the parts to
run: ``"snapvc"``, then peers or limits), ``RESULTS`` (the type of each part's figures),
``run(part, scale, seed, say)`` (runs one part and returns its figures) and
``section(results, scale, seed)`` (turns every part's figures into a ``Section``).

``run_workload`` runs each part in a child process (``python -m benchmarks --part ...``)
that writes its figures as JSON to a temporary file (``measure.to_json``; the parent
rebuilds them with ``measure.from_json`` and the part's type in ``RESULTS``), and takes
the child's peak resident set size as the child measured it at its end
(``measure.process_memory("VmHWM")``, written beside the figures): a workload's memory
is not inflated by the ones before it, nor snapvc's by a peer's, nor by this process (a
child's ``ru_maxrss`` on Linux starts at the peak of the process that started it). Run in this process, a part's figures make the same round trip through JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType

from benchmarks import (
    adk_sessions,
    agent_run,
    branching,
    deep_history,
    embeddings,
    git_export,
    growth,
    langgraph_graph,
    langgraph_react,
    large_state,
    lifetime,
    long_list,
    per_step,
    s3_sync,
    wide_map,
)
from benchmarks.measure import (
    FULL,
    QUICK,
    BenchmarkFailure,
    PartResult,
    Scale,
    Section,
    StoreFigures,
    Table,
    duration,
    from_json,
    process_memory,
    size,
    to_json,
)

__all__ = ["WORKLOADS", "SCALES", "DOCS_PATH", "run_workload", "run_part", "summary_table", "page"]

ROOT = Path(__file__).resolve().parent.parent
DOCS_PATH = ROOT / "docs" / "benchmarks.md"
WORKLOADS: dict[str, ModuleType] = {
    module.NAME: module
    for module in (agent_run, per_step, growth, large_state, wide_map, long_list, deep_history, branching, langgraph_graph,
                   langgraph_react, git_export, s3_sync, adk_sessions, embeddings, lifetime)
}
SCALES = {scale.name: scale for scale in (FULL, QUICK)}


def run_part(workload: str, part: str, scale: Scale, seed: int, say: Callable[[str], None]) -> object:
    """Run one part of a workload in this process."""
    return WORKLOADS[workload].run(part, scale, seed, say)


def part_json(value: object) -> str:
    """A part's figures as JSON text."""
    return json.dumps(to_json(value), allow_nan=False)


def part_from_json(workload: str, part: str, text: str) -> object:
    """A part's figures rebuilt from ``part_json``'s text, as the type the workload declares."""
    return from_json(json.loads(text), WORKLOADS[workload].RESULTS[part])


def run_workload(
    name: str,
    scale: Scale,
    *,
    seed: int = 0,
    peers: bool = True,
    in_process: bool = False,
    say: Callable[[str], None] = lambda message: None,
) -> Section:
    """Run every part of workload ``name``, each in a child process unless ``in_process``
    (then no peak memory is measured), and return its section."""
    module = WORKLOADS[name]
    results = {}
    for part in module.parts(scale, peers):
        say(f"{name}: {part}")
        t0 = time.perf_counter()
        if in_process:
            value = part_from_json(name, part, part_json(run_part(name, part, scale, seed, say)))
            results[part] = PartResult(value, 0, time.perf_counter() - t0)
        else:
            value, maxrss = _in_child(name, part, scale, seed)
            results[part] = PartResult(value, maxrss, time.perf_counter() - t0)
        say(f"{name}: {part} took {duration(results[part].wall_s)}")
    return module.section(results, scale, seed)


def _in_child(workload: str, part: str, scale: Scale, seed: int) -> tuple[object, int]:
    with tempfile.TemporaryDirectory(prefix="snapvc-part-") as tmp:
        result = Path(tmp) / "result.json"
        command = [sys.executable, "-m", "benchmarks", "--part", workload, part, "--scale", scale.name,
                   "--seed", str(seed), "--result", str(result)]  # fmt: skip
        child = subprocess.Popen(command, cwd=ROOT)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0 or not result.exists():
            raise BenchmarkFailure(f"{workload}: part {part!r} failed (exit code {child.returncode})")
        value = part_from_json(workload, part, result.read_text(encoding="utf-8"))
        peak = int(_peak_file(result).read_text(encoding="ascii"))
    if not peak:  # no /proc (not Linux): the child's ru_maxrss, in KiB but on macOS
        peak = usage.ru_maxrss if sys.platform == "darwin" else usage.ru_maxrss * 1024
    return value, peak


def _peak_file(result: Path) -> Path:
    """Where a part's child writes its peak RSS in bytes (0 where it cannot tell)."""
    return result.with_name(result.name + ".peak")


def child_main(workload: str, part: str, scale: str, seed: int, result: Path) -> int:
    """``python -m benchmarks --part``: run one part and write its figures to ``result`` as JSON."""

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    try:
        value = run_part(workload, part, SCALES[scale], seed, say)
    except BenchmarkFailure as exc:
        print(f"{workload}/{part}: {exc}", file=sys.stderr, flush=True)
        return 3
    _peak_file(result).write_text(str(process_memory("VmHWM")), encoding="ascii")
    result.write_text(part_json(value), encoding="utf-8")
    return 0


# --- the page --------------------------------------------------------------------------


def summary_table(sections: Sequence[Section]) -> Table:
    """snapvc's common figures for every workload, one row each."""
    header = ["workload", "stored (open)", "stored (closed)", "commit median", "commit p99",
              "State commit median", "State commit p99", "rebuilt commit median",
              "after a load: commit / State", "checkout", "one-key read", "log", "peak RSS"]  # fmt: skip
    rows = []

    def maybe(seconds: float | None) -> str:
        return "-" if seconds is None else duration(seconds)

    def after_load(f: StoreFigures) -> str:
        if f.after_load_commit_s is None and f.after_load_snapshot_s is None:
            return "-"
        return f"{maybe(f.after_load_commit_s)} / {maybe(f.after_load_snapshot_s)}"

    for section in sections:
        for label, f, maxrss in section.summary:
            rows.append([label, size(f.open_bytes), size(f.closed_bytes), duration(f.commit_median_s),
                         duration(f.commit_p99_s), maybe(f.state_commit_median_s), maybe(f.state_commit_p99_s),
                         maybe(f.rebuilt_commit_median_s), after_load(f), duration(f.checkout_s), duration(f.read_s),
                         duration(f.log_s), size(maxrss) if maxrss else "-"])  # fmt: skip
    return Table(header, rows, "snapvc, every workload")


def page(sections: Sequence[Section], env: Mapping[str, str], command: str, scale: Scale) -> str:
    """``docs/benchmarks.md``: the summary, each workload's section, the machine, the command."""
    out = [
        "# Benchmarks",
        "",
        textwrap.fill(
            "`python -m benchmarks` runs every workload below (`--workload NAME` picks some, "
            "`--quick` runs them small, `--write-docs` rewrites this page). Each part of a "
            "workload (snapvc, each peer, the machine's limits) runs in a process of its own, "
            "on data generated from the same seed, so peak RSS is that process's alone. Every "
            "workload checks that what it reads back equals what it committed, or reports "
            "nothing. Times are wall-clock medians unless a row says otherwise; \"freshly "
            "opened\" is a new `snapvc.open` (snapvc's caches cold, the operating system's "
            f"file cache warm). Scale: {scale.name}.",
            width=88,
        ),
        "",
        "## Summary",
        "",
        textwrap.fill(
            "Commit figures leave out a workload's first commit of all-new data where it has one. "
            "\"Commit\" is `repo.commit(state)` of a plain dict changed in place; \"State commit\" "
            "is `state.snapshot()` after the same changes made through the `State` working copy "
            "(`repo.state(branch)`, `state.set`, `state.extend`), where a workload measures it. "
            "\"Rebuilt commit\" is `repo.commit(state)` of the same changes made in new containers "
            "holding the same elements (`{**state, \"messages\": messages + [new], ...}`, as "
            "LangGraph's reducers and immutable-update loops make them). \"After a load\" is the "
            "first commit after loading the latest state in a new process: `repo.checkout` then "
            "`repo.commit`, and `repo.state` then `state.snapshot()` (the large state: a freshly "
            "opened repository, the State working copy only). Checkout is a full `repo.checkout` of the latest state on the open repository; the "
            "one-key read goes through `repo.snapshot(...)` on a freshly opened repository; log is "
            "`list(repo.log(branch))` again after a first walk.",
            width=88,
        ),
        "",
        *summary_table(sections).markdown(),
        "",
    ]
    for section in sections:
        out += section.markdown()
    out += ["## Machine", "", "| | |", "|---|---|"]
    out.extend(f"| {name} | {value} |" for name, value in env.items())
    out += ["", "## Command", "", "```sh", command, "```", ""]
    return "\n".join(out)
