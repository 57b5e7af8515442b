"""A wide map: 100,000 keys, 10 of them changed per commit; commit and diff times.

The state is ``{"entries": {"key-000000": note, ...}}`` with ``Scale.wide_keys`` short
notes (20-60 characters). Each of ``Scale.wide_commits`` commits gives
``Scale.wide_changes`` keys new notes. Then ``repo.diff(previous, commit)`` is timed
for consecutive commits until all are done or ``Scale.diff_budget_s`` is spent, and
each diff must name exactly the keys that changed. The same changes are then made
through the ``State`` working copy (``state.set(("entries", key), note)``, then
``state.snapshot(...)``) on a repository of its own, which must end at the same tree.
"""

from __future__ import annotations

import random
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
    commit_table,
    duration,
    key_value_table,
    measure_store,
    percentile,
    size,
    summary_row,
    timed_commits,
    timed_snapshots,
)
from benchmarks.workload import TextGenerator

__all__ = ["NAME", "TITLE", "RESULTS", "WideMapFigures", "parts", "run", "section"]

NAME = "wide-map"
TITLE = "Wide map"
BRANCH = "main"


@dataclass
class WideMapFigures:
    """Times are seconds: ``commit_times`` of the commits after the first, ``state_times``
    of the same commits through the ``State`` working copy."""

    first_commit_s: float
    commit_times: list[float]
    state_times: list[float]
    diff_times: list[float]
    figures: StoreFigures
    checks: list[str] = field(default_factory=list)


RESULTS = {"snapvc": WideMapFigures}


def parts(scale: Scale, peers: bool) -> list[str]:
    return ["snapvc"]


def run(part: str, scale: Scale, seed: int, say: Callable[[str], None]) -> WideMapFigures:
    text = TextGenerator(seed)
    rng = random.Random(seed * 7919 + 23)
    keys = [f"key-{i:06d}" for i in range(scale.wide_keys)]
    entries = {key: text.phrase(rng, 20, 60) for key in keys}
    state = {"entries": entries}
    initial = {"entries": dict(entries)}
    changed: list[dict[str, str]] = [{}]  # per commit, the keys changed and their new notes

    def change(j: int) -> None:
        picked = {key: text.phrase(rng, 20, 60) for key in rng.sample(keys, scale.wide_changes)}
        entries.update(picked)
        changed.append(picked)

    def change_state(working: snapvc.State, j: int) -> None:
        for key, note in changed[j].items():
            working.set(("entries", key), note)

    checks: list[str] = []
    with tempfile.TemporaryDirectory(prefix="snapvc-wide-") as tmp:
        path = Path(tmp) / "wide.snapvc"
        repo = snapvc.open(str(path))
        times, commits = timed_commits(repo, BRANCH, state, change, scale.wide_commits, say)
        diff_times: list[float] = []
        start = time.perf_counter()
        for j in range(1, len(commits)):
            if diff_times and time.perf_counter() - start > scale.diff_budget_s:
                break
            t0 = time.perf_counter()
            changes = repo.diff(commits[j - 1].id, commits[j].id)
            diff_times.append(time.perf_counter() - t0)
            found = {c.path for c in changes if c.kind == "modified"}
            check(len(changes) == len(found) and found == {("entries", key) for key in changed[j]}, [],
                  f"diff of commits {j - 1} and {j} names the {len(changed[j])} keys changed")  # fmt: skip
            say(f"  diff {j}: {duration(diff_times[-1])}")
        checks.append(f"each of {len(diff_times)} diffs names exactly the keys changed")
        figures = measure_store(
            repo, path, BRANCH, state, ("entries", keys[len(keys) // 2]), times[1:], checks, scale.repeats,
            commits=len(commits),
        )  # fmt: skip
        say("  the same commits through the State working copy")
        state_times = timed_snapshots(Path(tmp) / "wide-state.snapvc", BRANCH, initial, change_state,
                                      scale.wide_commits, commits[-1].tree, checks, say)  # fmt: skip
    figures.state_commit_median_s = percentile(state_times, 50)
    figures.state_commit_p99_s = percentile(state_times, 99)
    return WideMapFigures(times[0], times[1:], state_times, diff_times, figures, checks)


def section(results: dict[str, PartResult], scale: Scale, seed: int) -> Section:
    value: WideMapFigures = results["snapvc"].value
    figures = value.figures
    diffs = value.diff_times
    measured = f"{len(diffs)} of {scale.wide_commits}"
    if len(diffs) < scale.wide_commits:
        measured += f": the {duration(scale.diff_budget_s)} budget ran out"
    rows = [
        ("state", f"{scale.wide_keys:,} keys, {scale.wide_changes} changed per commit"),
        ("first commit (all keys new)", duration(value.first_commit_s)),
        *figures.rows(),
        (f"repo.diff of consecutive commits, median ({measured})", duration(percentile(diffs, 50))),
        ("repo.diff, slowest", duration(max(diffs))),
        ("peak RSS (process)", size(results["snapvc"].maxrss_bytes)),
    ]
    return Section(
        NAME,
        f"{TITLE}: {scale.wide_keys:,} keys, {scale.wide_changes} changed per commit",
        f"One map of {scale.wide_keys:,} keys holding short notes (20-60 characters). Each of "
        f"{scale.wide_commits} commits gives {scale.wide_changes} random keys new notes. Then "
        "`repo.diff(previous, commit)` is timed on consecutive commits (until all are done or "
        f"{duration(scale.diff_budget_s)} are spent); each diff must name exactly the keys that "
        "changed. Commit figures leave out the first commit, which stores every key. The same "
        "changes are then committed through the `State` working copy on a repository of its own "
        "(`repo.state(\"main\")`, `state.set((\"entries\", key), note)` for each changed key, "
        "`state.snapshot(...)`), which must end at the same tree.",
        [
            commit_table(f"{scale.wide_changes} keys changed per commit", [
                ("plain dict, repo.commit(state)", value.commit_times),
                ("State working copy, state.snapshot()", value.state_times),
            ], "Commit time"),
            key_value_table(rows, "snapvc"),
        ],
        checks=value.checks,
        summary=[summary_row(f"wide map, {scale.wide_keys:,} keys", figures, results["snapvc"])],
    )
