"""A pytest plugin that runs LangGraph's own checkpointer tests with SnapvcSaver as one
more checkpointer (``tests/test_langgraph_suite.py`` runs it; see there how).

It takes the place of LangGraph's ``tests/conftest.py`` (pytest runs with
``--noconftest``): it imports that conftest's fixtures unchanged and defines again only
the two checkpointer fixtures, whose parameters are LangGraph's ``memory``
(InMemorySaver, to compare with) and SnapvcSaver on a SQLite file (``snapvc_file``) and
on ``memory://`` (``snapvc_memory``). Tests that take no checkpointer are deselected:
they do not touch a saver. ``--snapvc-report PATH`` writes each test's outcome there
as JSON: ``{node id: {"checkpointer", "test" (the id without it), "outcome"}}``.

The plugin must be loaded after anyio's (``-p anyio -p snapvc_langgraph_suite``): of
two plugins defining a fixture, the one loaded last wins, and LangGraph's
``anyio_backend`` (asyncio only) must win over anyio's own.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver

# LangGraph's fixtures, as they are (``tests`` is the test package of LangGraph's sdist).
from tests.conftest import (  # noqa: F401
    anyio_backend,
    async_store,
    cache,
    deterministic_uuids,
    durability,
    sync_store,
)
from tests.conftest_checkpointer import _checkpointer_memory

from snapvc.integrations.langgraph import SnapvcSaver

CHECKPOINTERS = ("memory", "snapvc_file", "snapvc_memory")
_FIXTURES = ("sync_checkpointer", "async_checkpointer")


@contextmanager
def _checkpointer(name: str, tmp_path: Path) -> Iterator[BaseCheckpointSaver]:
    if name == "memory":
        with _checkpointer_memory() as saver:
            yield saver
        return
    location = tmp_path / "checkpoints.snapvc" if name == "snapvc_file" else "memory://"
    with SnapvcSaver(location) as saver:
        yield saver


@pytest.fixture(params=CHECKPOINTERS)
def sync_checkpointer(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseCheckpointSaver]:
    with _checkpointer(request.param, tmp_path) as saver:
        yield saver


@pytest.fixture(params=CHECKPOINTERS)
async def async_checkpointer(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BaseCheckpointSaver]:
    with _checkpointer(request.param, tmp_path) as saver:
        yield saver


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--snapvc-report", metavar="PATH", help="write each test's outcome there, as JSON")


def _checkpointer_of(item: pytest.Item) -> str | None:
    params = getattr(item, "callspec", None)
    if params is None:
        return None
    return next((params.params[f] for f in _FIXTURES if f in params.params), None)


def _without(nodeid: str, checkpointer: str) -> str:
    """The node id without the checkpointer's part of its parameters: the same test's id
    on every checkpointer."""
    name, _, params = nodeid.partition("[")
    parts = params.removesuffix("]").split("-")
    parts.remove(checkpointer)
    return f"{name}[{'-'.join(parts)}]" if parts else name


_outcomes: dict[str, dict[str, Any]] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep only the tests that run on a checkpointer."""
    keep, drop = [], []
    for item in items:
        checkpointer = _checkpointer_of(item)
        if checkpointer is None:
            drop.append(item)
            continue
        keep.append(item)
        _outcomes[item.nodeid] = {"checkpointer": checkpointer, "test": _without(item.nodeid, checkpointer),
                                  "outcome": "not run"}
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
