"""LangGraph's own test suite, run on SnapvcSaver.

The ``langgraph`` source distribution on PyPI ships its ``tests/``; its checkpointer
tests take the checkpointer as a fixture. This module downloads that sdist (the version
pinned below, checked against its PyPI hash) once into pytest's cache folder, keeps its
``tests/`` and runs pytest on them in two subprocesses (half of the files each, one a core) with the plugin
``tests/langgraph_suite/snapvc_langgraph_suite.py``, which adds SnapvcSaver (on a SQLite
file and on ``memory://``) beside LangGraph's InMemorySaver and keeps only the tests that
take a checkpointer. Every one of them must pass on every checkpointer: a failure or a
skip on SnapvcSaver is a failure here, reported with whether InMemorySaver passed it.

LangGraph's test files are fetched, never copied into this repository. The subprocess
runs in the sdist's folder, whose ``tests`` package is LangGraph's (ours has the same
name), with only what the installed ``langgraph`` is: the pinned version must be the one
installed (``pip install -e '.[test]'``).
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from tests.framework_sdist import framework_tests, run_in_two_halves

# LangGraph's own checkpointer suite: minutes.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_DIR = ROOT / "tests" / "langgraph_suite"
LANGGRAPH = "1.2.22"  # the same as pyproject.toml's test extra pins
SDIST_SHA256 = "32700dc34b5cf9ebb397258c2e56392f017d4dbc51c9591339225c3c1b7b5126"  # PyPI's
TESTS_PER_CHECKPOINTER = 648  # the tests of langgraph 1.2.22 that take a checkpointer
CHECKPOINTERS = ("memory", "snapvc_file", "snapvc_memory")


@pytest.fixture(scope="session")
def langgraph_tests(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder holding langgraph's own ``tests/`` package (see ``tests.framework_sdist``)."""
    return framework_tests("langgraph", LANGGRAPH, SDIST_SHA256, pytestconfig, tmp_path_factory)


def test_langgraph_checkpointer_tests_pass_on_snapvc_saver(langgraph_tests: Path, tmp_path: Path) -> None:
    test_files = sorted(str(p.relative_to(langgraph_tests)) for p in (langgraph_tests / "tests").glob("test_*.py")
                        if any(f in p.read_text(encoding="utf-8") for f in ("sync_checkpointer", "async_checkpointer")))
    # The subprocess's first import path is its folder (``python -m``): ``tests`` is LangGraph's there.
    path = os.pathsep.join(part for part in (str(PLUGIN_DIR), os.environ.get("PYTHONPATH")) if part)
    environment = {**os.environ, "NO_DOCKER": "true", "PYTHONPATH": path}  # NO_DOCKER: no Postgres nor Redis
    environment.pop("PYTEST_ADDOPTS", None)
    outcomes, stdout, statuses = run_in_two_halves(
        langgraph_tests, test_files,
        ["--rootdir", str(langgraph_tests), "-c", str(PLUGIN_DIR / "pytest.ini"), "--noconftest", "-p", "anyio",
         "-p", "snapvc_langgraph_suite", "-p", "no:cacheprovider", "-q", "--tb=short"], environment, tmp_path)

    tests: dict[str, set[str]] = defaultdict(set)
    by_test: dict[str, dict[str, str]] = defaultdict(dict)
    for entry in outcomes.values():
        tests[entry["checkpointer"]].add(entry["test"])
        by_test[entry["test"]][entry["checkpointer"]] = entry["outcome"]
    assert {name: len(found) for name, found in tests.items()} == dict.fromkeys(CHECKPOINTERS,
                                                                                TESTS_PER_CHECKPOINTER)
    assert tests["snapvc_file"] == tests["memory"] == tests["snapvc_memory"]

    not_passed = {test: results for test, results in sorted(by_test.items())
                  if any(outcome != "passed" for outcome in results.values())}
    summary = Counter(f"{name}: {outcome}" for results in by_test.values() for name, outcome in results.items())
    listed = "\n".join(f"  {test}: {results}" for test, results in list(not_passed.items())[:50])
    assert not_passed == {}, (f"{len(not_passed)} of LangGraph's tests did not pass on every checkpointer "
                              f"({dict(summary)}):\n{listed}\nthe pytest output ends:\n{stdout[-20000:]}")
    assert statuses == [0, 0], stdout[-5000:]
