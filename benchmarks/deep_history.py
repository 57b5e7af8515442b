"""Deep history: 10,000 commits of a small state; log, rev resolution and open times.

The state is a step counter and 25 scratchpad notes, 3 of them rewritten per commit.
After ``Scale.history_commits`` commits: ``list(repo.log("main"))`` of every commit,
``repo.resolve("main~9000")`` (``Scale.history_back``) and ``snapvc.open``, each on a
freshly opened repository and again on a warm one. The commit ``main~9000`` resolves to
must be the one committed that many commits earlier, and check out to that state.
The web view (``snapvc ui``, when the ui extra is installed) is asked, through its ASGI
application, for the first page of the graph (100 commits) and for one commit's page:
on a freshly opened repository and again, each page costing what it shows, not the
history behind it.
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
    # The web view's pages (None without the ui extra): the first page of the graph,
    # freshly opened and again, and the page of the branch's tip commit.
    ui_graph_fresh_s: float | None = None
    ui_graph_s: float | None = None
    ui_commit_s: float | None = None


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
        ui = _ui_pages(path, scale.repeats, commits[-1].id.hex, checks)
    return HistoryFigures(rev, resolve_s, statistics.median(fresh_resolve), figures, checks, *ui)


def _ui_pages(path: Path, repeats: int, tip: str, checks: list[str]) -> tuple[float | None, float | None, float | None]:
    """Seconds of the web view's first graph page (fresh, again) and of a commit's page."""
    try:
        from starlette.testclient import TestClient

        from snapvc.ui import app
    except ImportError:  # the ui extra is not installed: no figures, said as such in the table
        return None, None, None
    fresh_times, graph_times, commit_times = [], [], []
    for _ in range(repeats):
        with snapvc.open(str(path), create=False) as fresh:
            client = TestClient(app(fresh), base_url="http://127.0.0.1")
            t0 = time.perf_counter()
            first = client.get("/api/graph", params={"limit": 100})
            fresh_times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            again = client.get("/api/graph", params={"limit": 100})
            graph_times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            shown = client.get(f"/api/commit/{tip}")
            commit_times.append(time.perf_counter() - t0)
    rows = first.json()["rows"]
    check(first.status_code == again.status_code == 200 and len(rows) == 100 and rows[0]["id"] == tip
          and again.json()["cursor"] is not None, checks, "the web view's first graph page holds the newest 100 commits")
    check(shown.status_code == 200 and len(shown.json()["changes"]) >= 1, checks,
          "the web view's commit page lists the tip commit's changes")
    return statistics.median(fresh_times), statistics.median(graph_times), statistics.median(commit_times)


def _ui_rows(value: HistoryFigures, repeats: int) -> list[tuple[str, str]]:
    if value.ui_graph_s is None or value.ui_graph_fresh_s is None or value.ui_commit_s is None:
        return [("web view (snapvc ui)", "not measured: the ui extra is not installed")]
    return [
        (f"web view: first graph page (100 commits), freshly opened (median of {repeats})", duration(value.ui_graph_fresh_s)),
        (f"web view: first graph page, again (median of {repeats})", duration(value.ui_graph_s)),
        (f"web view: a commit's page, the first state read since opening (median of {repeats})",
         duration(value.ui_commit_s)),
    ]


def section(results: dict[str, PartResult], scale: Scale, seed: int) -> Section:
    value: HistoryFigures = results["snapvc"].value
    figures = value.figures
    rev = value.rev
    rows = [
        ("state", f"a step counter and {NOTES} notes, 3 rewritten per commit"),
        *figures.rows(),
        (f"repo.resolve({rev!r}), freshly opened (median of {scale.repeats})", duration(value.resolve_fresh_s)),
        (f"repo.resolve({rev!r}), again (median of {scale.repeats})", duration(value.resolve_s)),
        *_ui_rows(value, scale.repeats),
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
