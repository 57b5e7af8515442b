"""A pytest plugin that runs the OpenAI Agents SDK's own session tests with
``SnapvcSession`` as one more session (``tests/test_openai_agents_suite.py`` runs it; see
there how).

The SDK's tests make their sessions as ``SQLiteSession(session_id, db_path,
session_settings=...)`` and hand them to ``Runner.run`` or call the protocol's methods.
Every test whose code names ``SQLiteSession`` runs twice: with it (``sqlite``, to
compare with) and with it replaced, in the test's module, by ``SnapvcSession`` made the
same way (``snapvc``: on a repository file beside ``db_path``, or on ``memory://`` for
``":memory:"``). Other tests are deselected: they take no session. The SDK's
``tests/conftest.py`` stays in force. Its async tests are run here, each in an event
loop of its own (the SDK uses pytest-asyncio's auto mode, which this project does not
install). ``--snapvc-report PATH`` writes each test's outcome there as JSON:
``{node id: {"session", "test" (the id without it), "outcome"}}``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
from pathlib import Path
from typing import Any

import pytest

from snapvc.integrations.openai_agents import SnapvcSession

SESSIONS = ("sqlite", "snapvc")


class SnapvcAsSQLiteSession(SnapvcSession):
    """``SnapvcSession`` made with ``SQLiteSession``'s arguments: a repository at
    ``<db_path>.snapvc``, or on ``memory://`` for an in-memory database (each one its
    own, as each ``SQLiteSession(":memory:")`` is)."""

    def __init__(self, session_id: str, db_path: str | os.PathLike[str] = ":memory:",
                 sessions_table: str = "agent_sessions", messages_table: str = "agent_messages",
                 session_settings: Any = None) -> None:
        location = "memory://" if str(db_path) == ":memory:" else f"{db_path}.snapvc"
        super().__init__(session_id, location, session_settings=session_settings)


@pytest.fixture(autouse=True, params=SESSIONS)
def _session_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "snapvc" and hasattr(request.module, "SQLiteSession"):
        monkeypatch.setattr(request.module, "SQLiteSession", SnapvcAsSQLiteSession)
    kind: str = request.param
    return kind


def pytest_configure(config: pytest.Config) -> None:
    for marker in ("asyncio", "allow_call_model_methods", "serial", "requires_native_macos_sandbox"):
        config.addinivalue_line("markers", f"{marker}: the OpenAI Agents SDK's marker")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run a coroutine test in a fresh event loop."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(pyfuncitem.obj(**arguments))
    return True


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--snapvc-report", metavar="PATH", help="write each test's outcome there, as JSON")


def _kind_of(item: pytest.Item) -> str | None:
    params = getattr(item, "callspec", None)
    return None if params is None else params.params.get("_session_kind")


def _without(nodeid: str, kind: str) -> str:
    """The node id without the session's part of its parameters."""
    name, _, params = nodeid.partition("[")
    parts = params.removesuffix("]").split("-")
    parts.remove(kind)
    return f"{name}[{'-'.join(parts)}]" if parts else name


def _takes_a_session(item: pytest.Item) -> bool:
    function = getattr(item, "function", None)
    try:
        return function is not None and "SQLiteSession(" in inspect.getsource(function)
    except (OSError, TypeError):
        return False


_outcomes: dict[str, dict[str, Any]] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep, drop = [], []
    for item in items:
        kind = _kind_of(item)
        if kind is None or not _takes_a_session(item):
            drop.append(item)
            continue
        keep.append(item)
        _outcomes[item.nodeid] = {"session": kind, "test": _without(item.nodeid, kind), "outcome": "not run"}
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _outcomes.get(report.nodeid)
    if entry is None:
        return
    if report.failed:
        entry["outcome"] = "failed" if report.when == "call" else f"error in {report.when}"
    elif report.skipped:
        entry["outcome"] = "skipped"
    elif report.when == "call" and entry["outcome"] == "not run":
        entry["outcome"] = "passed"


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--snapvc-report")
    if path:
        Path(path).write_text(json.dumps(_outcomes, indent=1))
