"""A long list: 1,000,000 small elements, 10 appended per commit.

The state is ``{"events": [...]}``: ``Scale.list_length`` short strings (a word and a
number, about 12 characters), then each of ``Scale.list_commits`` commits appends
``Scale.list_append`` more. The same appends are then made through the ``State`` working
copy (``state.extend("events", new)``, then ``state.snapshot(...)``) on a repository of
its own, which must end at the same tree.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import snapvc
from benchmarks.measure import (
    PartResult,
    Scale,
    Section,
    StoreFigures,
    commit_table,
    duration,
    key_value_table,
    measure_store,
    size,
    percentile,
    summary_row,
    timed_commits,
    timed_snapshots,
)
from benchmarks.workload import TextGenerator

__all__ = ["NAME", "TITLE", "RESULTS", "LongListFigures", "parts", "run", "section"]

NAME = "long-list"
TITLE = "Long list"
BRANCH = "main"


@dataclass
class LongListFigures:
    """Times are seconds: ``commit_times`` of the commits after the first, ``state_times``
    of the same commits through the ``State`` working copy."""

    first_commit_s: float
    commit_times: list[float]
    state_times: list[float]
    figures: StoreFigures
    checks: list[str] = field(default_factory=list)


RESULTS = {"snapvc": LongListFigures}


def parts(scale: Scale, peers: bool) -> list[str]:
    return ["snapvc"]


def run(part: str, scale: Scale, seed: int, say: Callable[[str], None]) -> LongListFigures:
    rng = random.Random(seed * 7919 + 29)
    words = TextGenerator(seed).words(rng, scale.list_length + scale.list_commits * scale.list_append)
    events = [f"{word} {i}" for i, word in enumerate(words[: scale.list_length])]
    state = {"events": events}
    initial = {"events": list(events)}
    appended: list[list[str]] = [[]]  # per commit, the elements it appends

    def change(j: int) -> None:
        start = len(events)
        new = [f"{word} {i}" for i, word in enumerate(words[start : start + scale.list_append], start)]
        events.extend(new)
        appended.append(new)

    def change_state(working: snapvc.State, j: int) -> None:
        working.extend("events", appended[j])

    checks: list[str] = []
    with tempfile.TemporaryDirectory(prefix="snapvc-list-") as tmp:
        path = Path(tmp) / "list.snapvc"
        repo = snapvc.open(str(path))
        times, commits = timed_commits(repo, BRANCH, state, change, scale.list_commits, say)
        figures = measure_store(
            repo, path, BRANCH, state, ("events", scale.list_length // 2), times[1:], checks, scale.repeats,
            commits=len(commits),
        )  # fmt: skip
        say("  the same commits through the State working copy")
        state_times = timed_snapshots(Path(tmp) / "list-state.snapvc", BRANCH, initial, change_state,
                                      scale.list_commits, commits[-1].tree, checks, say)  # fmt: skip
    figures.state_commit_median_s = percentile(state_times, 50)
    figures.state_commit_p99_s = percentile(state_times, 99)
    return LongListFigures(times[0], times[1:], state_times, figures, checks)


def section(results: dict[str, PartResult], scale: Scale, seed: int) -> Section:
    value: LongListFigures = results["snapvc"].value
    figures = value.figures
    rows = [
        ("state", f"{scale.list_length:,} short strings, {scale.list_append} appended per commit"),
        ("first commit (every element new)", duration(value.first_commit_s)),
        *figures.rows(),
        ("peak RSS (process)", size(results["snapvc"].maxrss_bytes)),
    ]
    return Section(
        NAME,
        f"{TITLE}: {scale.list_length:,} elements, {scale.list_append} appended per commit",
        f"One list of {scale.list_length:,} short strings (a word and a number, about 12 "
        f"characters each); each of {scale.list_commits} commits appends {scale.list_append} "
        "more. Commit figures leave out the first commit, which stores every element. The same "
        "appends are then committed through the `State` working copy on a repository of its own "
        "(`repo.state(\"main\")`, `state.extend(\"events\", new)`, `state.snapshot(...)`), which "
        "must end at the same tree.",
        [
            commit_table(f"{scale.list_append} elements appended per commit", [
                ("plain dict, repo.commit(state)", value.commit_times),
                ("State working copy, state.snapshot()", value.state_times),
            ], "Commit time"),
            key_value_table(rows, "snapvc"),
        ],
        checks=value.checks,
        summary=[summary_row(f"long list, {scale.list_length:,} elements", figures, results["snapvc"])],
    )
