"""The workloads, each part of one run in a process of its own, and the page they make.

A workload is a module with ``NAME``, ``TITLE``, ``parts(scale, peers)`` (the parts to
run: ``"snapvc"``, then peers or limits), ``run(part, scale, seed, say)`` (runs one part
and returns its figures) and ``section(results, scale, seed)`` (turns every part's
figures into a ``Section``).

``run_workload`` runs each part in a child process (``python -m benchmarks --part ...``)
that pickles its figures to a temporary file, and takes the child's peak resident set
size from ``os.wait4`` (the ``ru_maxrss`` of that child alone): a workload's memory is
not inflated by the ones before it, nor snapvc's by a peer's.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType

from benchmarks import (
    agent_run,
    branching,
    deep_history,
    growth,
    large_state,
    long_list,
    wide_map,
)
from benchmarks.measure import (
    FULL,
    QUICK,
    BenchmarkFailure,
    PartResult,
    Scale,
    Section,
    Table,
    duration,
    size,
)

__all__ = ["WORKLOADS", "SCALES", "DOCS_PATH", "run_workload", "run_part", "summary_table", "page"]

ROOT = Path(__file__).resolve().parent.parent
DOCS_PATH = ROOT / "docs" / "benchmarks.md"
WORKLOADS: dict[str, ModuleType] = {
    module.NAME: module
    for module in (agent_run, growth, large_state, wide_map, long_list, deep_history, branching)
}
SCALES = {scale.name: scale for scale in (FULL, QUICK)}


def run_part(workload: str, part: str, scale: Scale, seed: int, say: Callable[[str], None]) -> object:
    """Run one part of a workload in this process."""
    return WORKLOADS[workload].run(part, scale, seed, say)


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
            results[part] = PartResult(run_part(name, part, scale, seed, say), 0, time.perf_counter() - t0)
        else:
            value, maxrss = _in_child(name, part, scale, seed)
            results[part] = PartResult(value, maxrss, time.perf_counter() - t0)
        say(f"{name}: {part} took {duration(results[part].wall_s)}")
    return module.section(results, scale, seed)


def _in_child(workload: str, part: str, scale: Scale, seed: int) -> tuple[object, int]:
    with tempfile.TemporaryDirectory(prefix="snapvc-part-") as tmp:
        result = Path(tmp) / "result.pickle"
        command = [sys.executable, "-m", "benchmarks", "--part", workload, part, "--scale", scale.name,
                   "--seed", str(seed), "--result", str(result)]  # fmt: skip
        child = subprocess.Popen(command, cwd=ROOT)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0 or not result.exists():
            raise BenchmarkFailure(f"{workload}: part {part!r} failed (exit code {child.returncode})")
        with result.open("rb") as f:
            value = pickle.load(f)  # written by the child just started, from this same code
    maxrss = usage.ru_maxrss if sys.platform == "darwin" else usage.ru_maxrss * 1024
    return value, maxrss


def child_main(workload: str, part: str, scale: str, seed: int, result: Path) -> int:
    """``python -m benchmarks --part``: run one part and pickle its figures to ``result``."""

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    try:
        value = run_part(workload, part, SCALES[scale], seed, say)
    except BenchmarkFailure as exc:
        print(f"{workload}/{part}: {exc}", file=sys.stderr, flush=True)
        return 3
    with result.open("wb") as f:
        pickle.dump(value, f)
    return 0


# --- the page --------------------------------------------------------------------------


def summary_table(sections: Sequence[Section]) -> Table:
    """snapvc's common figures for every workload, one row each."""
    header = ["workload", "stored (open)", "stored (closed)", "commit median", "commit p99",
              "checkout", "one-key read", "log", "peak RSS"]  # fmt: skip
    rows = []
    for section in sections:
        for label, f, maxrss in section.summary:
            rows.append([label, size(f.open_bytes), size(f.closed_bytes), duration(f.commit_median_s),
                         duration(f.commit_p99_s), duration(f.checkout_s), duration(f.read_s),
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
            "Commit figures leave out a workload's first commit of all-new data where it has one; "
            "checkout is a full `repo.checkout` of the latest state on the open repository; the "
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
