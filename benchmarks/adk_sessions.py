"""Google ADK sessions: 10,000 sessions listed, and one session's appends.

Both parts create ``SESSIONS`` sessions of one app (a hundred users, each session with a
small state and a user-scoped key) and list them: snapvc's ``SnapvcSessionService``
(a session is a branch) and ADK's own ``SqliteSessionService`` on an SQLite file, in
the same run. snapvc lists a first page (``list_sessions_page``, 100 sessions), every
page one after the other, and ADK's ``list_sessions`` (every session, ordered by last
update); ADK's services have ``list_sessions`` only. Then each part appends
``EVENTS`` events (a user message and a state change each) to one new session: the time
of each append, and for snapvc the bytes the object store grew by per append over the
last half (an append must cost the event, not the session).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

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
    ratio,
    size,
    summary_row,
)

__all__ = ["NAME", "TITLE", "RESULTS", "AdkFigures", "parts", "run", "section"]

NAME = "adk-sessions"
TITLE = "Google ADK sessions"
APP = "bench"
USERS = 100
PAGE = 100


def _sessions(scale: Scale) -> int:
    return 10_000 if scale.name == "full" else 200


def _events(scale: Scale) -> int:
    return 1_000 if scale.name == "full" else 50


@dataclass
class AdkFigures:
    """Times in seconds (best of ``repeats``); ``first_page_s`` and ``all_pages_s`` are
    None for ADK's service, which does not page."""

    sessions: int
    create_s: float
    list_all_s: float
    first_page_s: float | None
    all_pages_s: float | None
    append_times: list[float]
    bytes_per_append: float | None
    file_bytes: int
    figures: StoreFigures | None = None  # snapvc's: the long session's branch, measured as every workload's
    checks: list[str] = field(default_factory=list)
    list_opened_s: float | None = None  # the first list_sessions of a service on the store opened anew


RESULTS = {"snapvc": AdkFigures, "adk-sqlite": AdkFigures}


def parts(scale: Scale, peers: bool) -> list[str]:
    return ["snapvc", "adk-sqlite"] if peers else ["snapvc"]


def _best(repeats: int, fn: Callable[[], object]) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def run(part: str, scale: Scale, seed: int, say: Callable[[str], None]) -> AdkFigures:
    from google.adk.events import Event, EventActions
    from google.genai import types

    n, events = _sessions(scale), _events(scale)
    checks: list[str] = []
    with tempfile.TemporaryDirectory(prefix="snapvc-adk-") as tmp:
        if part == "snapvc":
            import snapvc
            from snapvc.integrations.adk import SnapvcSessionService, session_branch

            path = Path(tmp) / "adk.snapvc"
            repo = snapvc.open(str(path))
            service = SnapvcSessionService(repo)
        else:
            from google.adk.sessions.sqlite_session_service import SqliteSessionService

            path = Path(tmp) / "adk.db"
            service = SqliteSessionService(str(path))  # type: ignore[assignment]
        loop = asyncio.new_event_loop()
        call = loop.run_until_complete

        say(f"  {part}: creating {n:,} sessions")
        t0 = time.perf_counter()
        for i in range(n):
            call(service.create_session(app_name=APP, user_id=f"user{i % USERS:03d}", session_id=f"s{i:06d}",
                                        state={"topic": f"topic {i}", "user:plan": "free"}))
        create_s = time.perf_counter() - t0

        list_all_s, listed = _best(scale.repeats, lambda: call(service.list_sessions(app_name=APP)))
        check(len(listed.sessions) == n, checks, f"{part}: list_sessions gives all {n:,} sessions")  # type: ignore[attr-defined]
        # The runs above are served partly from what the service and the store read the
        # first time: a service on the store opened anew (a new process) reads it all.
        if part == "snapvc":
            opened = SnapvcSessionService(snapvc.open(str(path)))
        else:
            opened = SqliteSessionService(str(path))  # type: ignore[assignment]
        t0 = time.perf_counter()
        relisted = call(opened.list_sessions(app_name=APP))
        list_opened_s = time.perf_counter() - t0
        check(relisted == listed, checks, f"{part}: a service opened anew lists the same sessions")
        if part == "snapvc":
            opened.repo.close()
        else:
            call(opened.close())  # type: ignore[attr-defined]
        first_page_s = all_pages_s = None
        if part == "snapvc":
            first_page_s, page = _best(scale.repeats, lambda: call(service.list_sessions_page(app_name=APP,
                                                                                              page_size=PAGE)))
            check(len(page.sessions) == PAGE and page.sessions[0].state["user:plan"] == "free", checks,  # type: ignore[attr-defined]
                  f"the first page holds {PAGE} sessions with their merged state")

            def every_page() -> int:
                count, token = 0, None
                while True:
                    got = call(service.list_sessions_page(app_name=APP, page_size=PAGE, page_token=token))
                    count += len(got.sessions)
                    token = got.next_page_token
                    if token is None:
                        return count

            all_pages_s, count = _best(scale.repeats, every_page)
            check(count == n, checks, f"the pages hold all {n:,} sessions once")

        say(f"  {part}: appending {events:,} events to one session")
        session = call(service.create_session(app_name=APP, user_id="writer", session_id="long"))
        append_times: list[float] = []
        half_bytes = 0
        expected: dict[str, Any] = {"state": {}, "events": []}  # the long session as it must be stored
        for i in range(events):
            if part == "snapvc" and i == events // 2:
                half_bytes = repo.store.sizes().stored_bytes
            event = Event(invocation_id=f"inv{i}", author="user" if i % 2 == 0 else "agent",
                          content=types.Content(role="user", parts=[types.Part(text=f"message {i} " * 20)]),
                          actions=EventActions(state_delta={"turn": i, "last": f"message {i}"}))
            expected["events"].append(orjson.loads(event.model_dump_json(exclude_none=True)))
            expected["state"].update(event.actions.state_delta)
            t0 = time.perf_counter()
            call(service.append_event(session, event))
            append_times.append(time.perf_counter() - t0)
        bytes_per_append = None
        if part == "snapvc":
            bytes_per_append = (repo.store.sizes().stored_bytes - half_bytes) / (events - events // 2)
        got = call(service.get_session(app_name=APP, user_id="writer", session_id="long"))
        check(got is not None and len(got.events) == events and got.state["turn"] == events - 1, checks,
              f"{part}: the long session reads back {events:,} events")
        figures = None
        if part == "snapvc":
            figures = measure_store(repo, path, session_branch(APP, "writer", "long"), expected,
                                    ("events", events // 2), append_times, checks, scale.repeats,
                                    commits=events + 1)  # closes the repository
        else:
            call(service.close())  # type: ignore[attr-defined]
        loop.close()
        file_bytes = sum(p.stat().st_size for p in Path(tmp).iterdir() if p.name.startswith(path.name))
    return AdkFigures(n, create_s, list_all_s, first_page_s, all_pages_s, append_times, bytes_per_append,
                      file_bytes, figures, checks, list_opened_s)


def section(results: dict[str, PartResult], scale: Scale, seed: int) -> Section:
    ours: AdkFigures = results["snapvc"].value
    theirs: AdkFigures | None = results["adk-sqlite"].value if "adk-sqlite" in results else None
    n = ours.sessions
    events = len(ours.append_times)
    head = len(ours.append_times) // 10 or 1

    def row(label: str, mine: float | None, adk: float | None, fmt: Callable[[float], str] = duration) -> list[str]:
        return [label, fmt(mine) if mine is not None else "-", fmt(adk) if adk is not None else "-",
                ratio(mine, adk)]

    rows = [
        row(f"create {n:,} sessions", ours.create_s, (theirs.create_s if theirs else None)),
        row(f"list_sessions: all {n:,}", ours.list_all_s, (theirs.list_all_s if theirs else None)),
        row(f"list_sessions: all {n:,}, first call on the store opened anew", ours.list_opened_s,
            (theirs.list_opened_s if theirs else None)),
        row(f"first page of {PAGE} (list_sessions_page)", ours.first_page_s, (theirs.list_all_s if theirs else None)),
        row(f"every page of {PAGE}, one after the other", ours.all_pages_s, (theirs.list_all_s if theirs else None)),
        row(f"append, median of the first {head}", percentile(ours.append_times[:head], 50),
            (percentile(theirs.append_times[:head], 50) if theirs else None)),
        row(f"append, median of the last {head} (session of ~{events:,} events)",
            percentile(ours.append_times[-head:], 50), (percentile(theirs.append_times[-head:], 50) if theirs else None)),
        row("file size at the end", ours.file_bytes, (theirs.file_bytes if theirs else None), lambda b: size(b)),
    ]
    from benchmarks.measure import Table

    table = Table(["", "snapvc", "ADK SqliteSessionService", "snapvc / ADK"], rows,
                  "Times are the best of several runs; ADK's service has no pages: its row is its whole listing.")
    extra = key_value_table([
        ("object bytes stored per append (last half)", size(ours.bytes_per_append or 0)),
        ("peak RSS, snapvc part", size(results["snapvc"].maxrss_bytes)),
    ], "snapvc")
    return Section(
        NAME, f"{TITLE}: {n:,} sessions listed, {events:,} events appended",
        f"{n:,} sessions of one app ({USERS} users) made through `SnapvcSessionService` and through ADK's "
        f"own `SqliteSessionService` on an SQLite file, then listed: ADK's `list_sessions` (every session, "
        f"with its merged state) on both, and snapvc's `list_sessions_page` ({PAGE} a page, in branch-name "
        f"order). Then {events:,} events (a message of about 200 characters and two state keys each) are "
        f"appended to one session.",
        [table, extra],
        checks=ours.checks + (theirs.checks if theirs else []),
        summary=[summary_row(f"ADK session, {events:,} events", ours.figures, results["snapvc"])]
        if ours.figures is not None else [],
    )
