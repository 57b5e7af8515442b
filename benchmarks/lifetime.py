"""What a process pays to start using snapvc, and what a closed repository leaves behind.

- ``import snapvc`` in a fresh interpreter: its CPU time (``time.process_time``, the
  median of ``IMPORTS`` processes) and the resident set size it adds to a bare one.
- ``CYCLES`` open/checkout/close cycles of the agent run's repository
  (``benchmarks.workload.AgentRun``, ``Scale.agent_steps`` steps, committed first): the
  resident set size (``VmRSS``) kept after them, with and without a full collection of
  reference cycles (a closed repository should be freed by reference counting alone),
  and the CPU time of one cycle.
"""

from __future__ import annotations

import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import snapvc
from benchmarks.measure import PartResult, Scale, Section, check, duration, key_value_table, process_memory, size
from benchmarks.workload import AgentRun

__all__ = ["NAME", "TITLE", "RESULTS", "LifetimeFigures", "parts", "run", "section"]

NAME = "lifetime"
TITLE = "Import and close"
CYCLES = 20
IMPORTS = 9

_IMPORT = """
import time
def rss():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS"))
before = rss()
start = time.process_time()
{statement}
print(time.process_time() - start, rss() - before)
"""


@dataclass
class LifetimeFigures:
    """Seconds and bytes (RSS on Linux; 0 where ``/proc`` is missing)."""

    import_cpu_s: float
    import_rss_bytes: int
    cycle_cpu_s: float
    cycles_rss_bytes: int
    cycles_rss_after_collect_bytes: int
    checks: list[str] = field(default_factory=list)


RESULTS = {"snapvc": LifetimeFigures}


def parts(scale: Scale, peers: bool) -> list[str]:
    return ["snapvc"]


def _fresh(statement: str) -> tuple[float, int]:
    """CPU seconds and RSS bytes ``statement`` costs in a new interpreter (this snapvc first
    on its path)."""
    root = str(Path(snapvc.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", _IMPORT.format(statement=statement)], capture_output=True,
                          text=True, check=True, env=env, cwd=tempfile.gettempdir())
    cpu, rss = done.stdout.split()
    return float(cpu), int(rss)


def run(part: str, scale: Scale, seed: int, say: Callable[[str], None]) -> LifetimeFigures:
    checks: list[str] = []
    say(f"{NAME}: import snapvc in {IMPORTS} fresh processes")
    imports = [_fresh("import snapvc") for _ in range(IMPORTS)]
    bare = [_fresh("pass") for _ in range(IMPORTS)]
    import_cpu = statistics.median(cpu for cpu, _ in imports)
    import_rss = int(statistics.median(rss for _, rss in imports) - statistics.median(rss for _, rss in bare))
    with tempfile.TemporaryDirectory(prefix="snapvc-lifetime-") as tmp:
        path = Path(tmp) / "run.snapvc"
        workload = AgentRun(seed=seed, documents=scale.documents, doc_size=scale.doc_size)
        state = workload.initial_state()
        say(f"{NAME}: committing {scale.agent_steps} steps")
        with snapvc.open(path) as repo:
            for i in range(1, scale.agent_steps + 1):
                state = workload.step(state, i)
                repo.commit(state, message=f"step {i}")

        def cycle() -> Any:
            repo = snapvc.open(path)
            try:
                return repo.checkout("main")
            finally:
                repo.close()

        check(cycle() == state, checks, "a checkout on a freshly opened repository equals the state committed")
        say(f"{NAME}: {CYCLES} open/checkout/close cycles")
        gc.collect()
        before = process_memory("VmRSS")
        start = time.process_time()
        same = all(cycle() == state for _ in range(CYCLES))
        cpu = (time.process_time() - start) / CYCLES
        kept = process_memory("VmRSS") - before
        gc.collect()
        kept_after_collect = process_memory("VmRSS") - before
        check(same, checks, f"each of {CYCLES} open/checkout/close cycles checks out the state committed")
    return LifetimeFigures(import_cpu, import_rss, cpu, kept, kept_after_collect, checks)


def section(results: dict[str, PartResult], scale: Scale, seed: int) -> Section:
    value: LifetimeFigures = results["snapvc"].value
    rows = [
        (f"import snapvc, fresh process (CPU, median of {IMPORTS})", duration(value.import_cpu_s)),
        ("import snapvc, RSS added to a bare interpreter", size(value.import_rss_bytes)),
        (f"open + checkout + close, {scale.agent_steps}-step agent run (CPU per cycle)", duration(value.cycle_cpu_s)),
        (f"RSS kept after {CYCLES} open/checkout/close cycles", size(value.cycles_rss_bytes)),
        ("  the same, after a full collection (gc.collect)", size(value.cycles_rss_after_collect_bytes)),
        ("peak RSS (process)", size(results["snapvc"].maxrss_bytes)),
    ]
    return Section(
        NAME,
        f"{TITLE}: import cost, and {CYCLES} open/checkout/close cycles",
        "What a fresh process pays for `import snapvc` (CPU time and resident memory, each "
        f"import in a new interpreter), and what {CYCLES} cycles of `snapvc.open`, `checkout` and "
        f"`close` of the agent run's repository ({scale.agent_steps} steps) leave in the "
        "process's resident set: a closed repository should leave nothing, and be freed without "
        "waiting for the cycle collector.",
        [key_value_table(rows, "snapvc")],
        checks=value.checks,
    )
