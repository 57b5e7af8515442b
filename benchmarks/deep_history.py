"""Deep history: 10,000 commits of a small state; log, rev resolution and open times.

The state is a step counter and 25 scratchpad notes, 3 of them rewritten per commit.
After ``Scale.history_commits`` commits: ``list(repo.log("main"))`` of every commit,
``repo.resolve("main~9000")`` (``Scale.history_back``) and ``snapvc.open``, each on a
freshly opened repository and again on a warm one. The commit ``main~9000`` resolves to
must be the one committed that many commits earlier, and check out to that state.
"""

from __future__ import annotations

import copy
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    median_time,
    size,
    summary_row,
    timed_commits,
)
from benchmarks.workload import TextGenerator

__all__ = ["NAME", "TITLE", "RESULTS", "HistoryFigures", "parts", "run", "section"]

NAME = "deep-history"
TITLE = "Deep history"
BRANCH = "main"
NOTES = 25


@dataclass
class HistoryFigures:
    """The common figures, and how long ``repo.resolve(rev)`` takes. Times are seconds."""

    rev: str
    resolve_s: float
    resolve_fresh_s: float
    figures: StoreFigures
    checks: list[str] = field(default_factory=list)


RESULTS = {"snapvc": HistoryFigures}


def parts(scale: Scale, peers: bool) -> list[str]:
    return ["snapvc"]


def run(part: str, scale: Scale, seed: int, say: Callable[[str], None]) -> HistoryFigures:
    text = TextGenerator(seed)
    rng = random.Random(seed * 7919 + 31)
    notes = {f"note-{k:02d}": text.phrase(rng, 20, 60) for k in range(NOTES)}
    state: dict[str, Any] = {"step": 0, "notes": notes}
    count = scale.history_commits - 1  # commits after the first
    target = count - scale.history_back  # the commit main~history_back names
    kept: dict[str, Any] = copy.deepcopy(state) if target == 0 else {}

    def change(j: int) -> None:
        state["step"] = j
        for key in rng.sample(sorted(notes), 3):
            notes[key] = text.phrase(rng, 20, 60)
        if j == target:
            kept.update(copy.deepcopy(state))

    checks: list[str] = []
    rev = f"{BRANCH}~{scale.history_back}"
    with tempfile.TemporaryDirectory(prefix="snapvc-history-") as tmp:
        path = Path(tmp) / "history.snapvc"
        repo = snapvc.open(str(path))
        times, commits = timed_commits(repo, BRANCH, state, change, count, say)
        resolve_s = median_time(scale.repeats, lambda: repo.resolve(rev))
        check(repo.resolve(rev) == commits[target].id, checks, f"{rev} resolves to commit {target}")
        check(repo.checkout(rev) == kept, checks, f"{rev} checks out to the state committed then")
        figures = measure_store(
            repo, path, BRANCH, state, ("notes", "note-00"), times, checks, scale.repeats,
            commits=scale.history_commits,
        )  # fmt: skip
        fresh_resolve = []
        for _ in range(scale.repeats):
            fresh = snapvc.open(str(path))
            try:
                t0 = time.perf_counter()
                fresh.resolve(rev)
                fresh_resolve.append(time.perf_counter() - t0)
            finally:
                fresh.close()
    return HistoryFigures(rev, resolve_s, statistics.median(fresh_resolve), figures, checks)


def section(results: dict[str, PartResult], scale: Scale, seed: int) -> Section:
    value: HistoryFigures = results["snapvc"].value
    figures = value.figures
    rev = value.rev
    rows = [
        ("state", f"a step counter and {NOTES} notes, 3 rewritten per commit"),
        *figures.rows(),
        (f"repo.resolve({rev!r}), freshly opened (median of {scale.repeats})", duration(value.resolve_fresh_s)),
        (f"repo.resolve({rev!r}), again (median of {scale.repeats})", duration(value.resolve_s)),
        ("peak RSS (process)", size(results["snapvc"].maxrss_bytes)),
    ]
    return Section(
        NAME,
        f"{TITLE}: {scale.history_commits:,} commits",
        f"{scale.history_commits:,} commits on one branch of a small state (a step counter and "
        f"{NOTES} notes of 20-60 characters, 3 rewritten per commit). Then `list(repo.log(\"main\"))`, "
        f"`repo.resolve(\"{rev}\")` and `snapvc.open`, freshly opened and again; `{rev}` must "
        "resolve to the commit made that many commits earlier and check out to its state.",
        [key_value_table(rows, "snapvc")],
        checks=value.checks,
        summary=[summary_row(f"deep history, {scale.history_commits:,} commits", figures, results["snapvc"])],
    )
