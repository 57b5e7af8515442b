"""A wide map: 100,000 keys, 10 of them changed per commit; commit and diff times.

The state is ``{"entries": {"key-000000": note, ...}}`` with ``Scale.wide_keys`` short
notes (20-60 characters). Each of ``Scale.wide_commits`` commits gives
``Scale.wide_changes`` keys new notes. Then ``repo.diff(previous, commit)`` is timed
for consecutive commits until all are done or ``Scale.diff_budget_s`` is spent, and
each diff must name exactly the keys that changed.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable
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
    percentile,
    size,
    summary_row,
    timed_commits,
)
from benchmarks.workload import TextGenerator

__all__ = ["NAME", "TITLE", "parts", "run", "section"]

NAME = "wide-map"
TITLE = "Wide map"
BRANCH = "main"


def parts(scale: Scale, peers: bool) -> list[str]:
    return ["snapvc"]


def run(part: str, scale: Scale, seed: int, say: Callable[[str], None]) -> Any:
    text = TextGenerator(seed)
    rng = random.Random(seed * 7919 + 23)
    keys = [f"key-{i:06d}" for i in range(scale.wide_keys)]
    entries = {key: text.phrase(rng, 20, 60) for key in keys}
    state = {"entries": entries}
    changed: list[set[str]] = [set()]

    def change(j: int) -> None:
        picked = rng.sample(keys, scale.wide_changes)
        for key in picked:
            entries[key] = text.phrase(rng, 20, 60)
        changed.append(set(picked))

    checks: list[str] = []
    with tempfile.TemporaryDirectory(prefix="snapvc-wide-") as tmp:
        path = Path(tmp) / "wide.snapvc"
        repo = snapvc.open(str(path))
        times, commits = timed_commits(repo, BRANCH, state, change, scale.wide_commits, say)
        diff_times = []
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
    return {"first_commit_s": times[0], "diff_times": diff_times, "figures": figures, "checks": checks}


def section(results: dict[str, PartResult], scale: Scale, seed: int) -> Section:
    value = results["snapvc"].value
    figures: StoreFigures = value["figures"]
    diffs = value["diff_times"]
    measured = f"{len(diffs)} of {scale.wide_commits}"
    if len(diffs) < scale.wide_commits:
        measured += f": the {duration(scale.diff_budget_s)} budget ran out"
    rows = [
        ("state", f"{scale.wide_keys:,} keys, {scale.wide_changes} changed per commit"),
        ("first commit (all keys new)", duration(value["first_commit_s"])),
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
        "changed. Commit figures leave out the first commit, which stores every key.",
        [key_value_table(rows, "snapvc")],
        checks=value["checks"],
        summary=[summary_row(f"wide map, {scale.wide_keys:,} keys", figures, results["snapvc"])],
    )
