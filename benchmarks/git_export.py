"""Git export: the agent run's history written as a git repository, then 10 more steps.

The agent run (``benchmarks.workload.AgentRun``, ``Scale.agent_steps`` steps) is
committed to snapvc, then exported with ``repo.export_git`` into a new bare git
repository: the time, the commits and objects written, and the repository's size on
disk. Then 10 more steps are committed and exported again (incremental: only the new
commits), and the whole git history is imported back into a new snapvc repository.
Checks: the import rebuilds every commit to its id; ``git fsck --strict`` is clean and
``git log`` counts every commit (when the ``git`` command is installed).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import snapvc
from benchmarks.measure import (
    PartResult,
    Scale,
    Section,
    StoreFigures,
    check,
    duration,
    key_value_table,
    measure_store,
    size,
    summary_row,
)
from benchmarks.workload import AgentRun

__all__ = ["NAME", "TITLE", "RESULTS", "ExportFigures", "parts", "run", "section"]

NAME = "git-export"
TITLE = "Git export"
BRANCH = "main"
MORE_STEPS = 10


@dataclass
class ExportFigures:
    """Times are seconds, sizes bytes."""

    commits: int
    export_s: float
    objects: int
    git_bytes: int
    more_export_s: float
    more_commits: int
    more_objects: int
    more_git_bytes: int
    import_s: float
    figures: StoreFigures  # the snapvc repository exported, after the exports
    checks: list[str] = field(default_factory=list)


RESULTS = {"snapvc": ExportFigures}


def parts(scale: Scale, peers: bool) -> list[str]:
    return ["snapvc"]


def _folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run(part: str, scale: Scale, seed: int, say: Callable[[str], None]) -> ExportFigures:
    workload = AgentRun(seed=seed, documents=scale.documents, doc_size=scale.doc_size)
    checks: list[str] = []
    with tempfile.TemporaryDirectory(prefix="snapvc-git-") as tmp:
        folder = Path(tmp)
        state = workload.initial_state()
        commit_times: list[float] = []
        repo = snapvc.open(folder / "run.snapvc")

        def commit(i: int) -> None:
            t0 = time.perf_counter()
            repo.commit(state, branch=BRANCH, message=f"step {i}", metadata={"step": i})
            commit_times.append(time.perf_counter() - t0)

        for i in range(scale.agent_steps + 1):
            if i:
                state = workload.step(state, i)
            commit(i)
        say(f"committed {scale.agent_steps + 1} steps; exporting")
        t0 = time.perf_counter()
        first = repo.export_git(folder / "run.git")
        export_s = time.perf_counter() - t0
        git_bytes = _folder_size(folder / "run.git")
        for i in range(scale.agent_steps + 1, scale.agent_steps + 1 + MORE_STEPS):
            state = workload.step(state, i)
            commit(i)
        t0 = time.perf_counter()
        more = repo.export_git(folder / "run.git")
        more_export_s = time.perf_counter() - t0
        more_git_bytes = _folder_size(folder / "run.git") - git_bytes
        check(first.commits == scale.agent_steps + 1 and more.commits == MORE_STEPS, checks,
              f"the first export writes {scale.agent_steps + 1} commits, the second {MORE_STEPS}")
        tips = repo.branches()
        figures = measure_store(repo, folder / "run.snapvc", BRANCH, state, ("scratchpad",), commit_times, checks,
                                scale.repeats, commits=len(commit_times))  # closes the repository
        with snapvc.open(folder / "back.snapvc") as back:
            t0 = time.perf_counter()
            imported = back.import_git(folder / "run.git")
            import_s = time.perf_counter() - t0
            check(back.branches() == tips and not imported.inexact, checks,
                  "the import rebuilds every commit to its id")
            check(back.checkout(BRANCH) == state, checks, "the imported tip: checkout equals the state in memory")
        if shutil.which("git"):
            fsck = subprocess.run(["git", "fsck", "--strict", "--no-dangling"], cwd=folder / "run.git",
                                  capture_output=True, text=True)
            check(fsck.returncode == 0 and not fsck.stdout, checks, "git fsck --strict is clean")
            log = subprocess.run(["git", "log", "--oneline", BRANCH], cwd=folder / "run.git", capture_output=True,
                                 text=True)
            check(len(log.stdout.splitlines()) == scale.agent_steps + 1 + MORE_STEPS, checks,
                  "git log counts every commit")
    return ExportFigures(first.commits, export_s, first.objects, git_bytes, more_export_s, more.commits, more.objects,
                         more_git_bytes, import_s, figures, checks)


def section(results: dict[str, PartResult], scale: Scale, seed: int) -> Section:
    f: ExportFigures = results["snapvc"].value
    rows = [
        ("history", f"the agent run: {f.commits:,} commits on one branch"),
        ("snapvc repository (after close)", size(f.figures.closed_bytes)),
        ("first export: time", duration(f.export_s)),
        ("first export: per commit", duration(f.export_s / f.commits)),
        ("first export: git objects written (one pack)", f"{f.objects:,}"),
        ("git repository on disk", size(f.git_bytes)),
        (f"{f.more_commits} more commits: incremental export time", duration(f.more_export_s)),
        (f"{f.more_commits} more commits: objects written (a second pack)", f"{f.more_objects:,}"),
        (f"{f.more_commits} more commits: git repository growth", size(f.more_git_bytes)),
        ("import of the whole git history into a new snapvc repository", duration(f.import_s)),
        ("peak RSS (process)", size(results["snapvc"].maxrss_bytes)),
    ]
    return Section(
        NAME,
        f"{TITLE}: the agent run, {f.commits:,} commits",
        f"The agent run's {f.commits:,} commits exported with `repo.export_git` into a new bare git "
        f"repository (states as files, metadata as trailers, one pack written by dulwich, no `git` "
        f"process), then {MORE_STEPS} more steps exported again, and the git history imported back.",
        [key_value_table(rows, "snapvc")],
        checks=f.checks,
        summary=[summary_row(f"git export, {f.figures.commits:,} commits", f.figures, results["snapvc"])],
    )
