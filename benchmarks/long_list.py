"""A long list: 1,000,000 small elements, 10 appended per commit.

The state is ``{"events": [...]}``: ``Scale.list_length`` short strings (a word and a
number, about 12 characters), then each of ``Scale.list_commits`` commits appends
``Scale.list_append`` more.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import snapvc
from benchmarks.measure import (
    PartResult,
    Scale,
    Section,
    StoreFigures,
    duration,
    key_value_table,
    measure_store,
    size,
    summary_row,
    timed_commits,
)
from benchmarks.workload import TextGenerator

__all__ = ["NAME", "TITLE", "parts", "run", "section"]

NAME = "long-list"
TITLE = "Long list"
BRANCH = "main"


def parts(scale: Scale, peers: bool) -> list[str]:
    return ["snapvc"]


def run(part: str, scale: Scale, seed: int, say: Callable[[str], None]) -> Any:
    rng = random.Random(seed * 7919 + 29)
    words = TextGenerator(seed).words(rng, scale.list_length + scale.list_commits * scale.list_append)
    events = [f"{word} {i}" for i, word in enumerate(words[: scale.list_length])]
    state = {"events": events}

    def change(j: int) -> None:
        start = len(events)
        events.extend(f"{word} {i}" for i, word in enumerate(words[start : start + scale.list_append], start))

    checks: list[str] = []
    with tempfile.TemporaryDirectory(prefix="snapvc-list-") as tmp:
        path = Path(tmp) / "list.snapvc"
        repo = snapvc.open(str(path))
        times, commits = timed_commits(repo, BRANCH, state, change, scale.list_commits, say)
        figures = measure_store(
            repo, path, BRANCH, state, ("events", scale.list_length // 2), times[1:], checks, scale.repeats,
            commits=len(commits),
        )  # fmt: skip
    return {"first_commit_s": times[0], "figures": figures, "checks": checks}


def section(results: dict[str, PartResult], scale: Scale, seed: int) -> Section:
    value = results["snapvc"].value
    figures: StoreFigures = value["figures"]
    rows = [
        ("state", f"{scale.list_length:,} short strings, {scale.list_append} appended per commit"),
        ("first commit (every element new)", duration(value["first_commit_s"])),
        *figures.rows(),
        ("peak RSS (process)", size(results["snapvc"].maxrss_bytes)),
    ]
    return Section(
        NAME,
        f"{TITLE}: {scale.list_length:,} elements, {scale.list_append} appended per commit",
        f"One list of {scale.list_length:,} short strings (a word and a number, about 12 "
        f"characters each); each of {scale.list_commits} commits appends {scale.list_append} "
        "more. Commit figures leave out the first commit, which stores every element.",
        [key_value_table(rows, "snapvc")],
        checks=value["checks"],
        summary=[summary_row(f"long list, {scale.list_length:,} elements", figures, results["snapvc"])],
    )
