"""The OpenAI Agents SDK's own session tests, run on SnapvcSession.

The ``openai-agents`` source distribution on PyPI ships its ``tests/``. Its session tests
make ``SQLiteSession(session_id, db_path, session_settings=...)`` and hand it to
``Runner.run`` (``run_sync``, ``run_streamed``) or call the ``Session`` protocol's
methods. This module downloads that sdist (the version pinned below, checked against its
PyPI hash) once into pytest's cache folder, keeps its ``tests/`` and runs pytest on the
files below in a subprocess with the plugin
``tests/openai_agents_suite/snapvc_openai_agents_suite.py``, which runs every test that
makes a ``SQLiteSession`` twice: as it is, and with ``SnapvcSession`` in its place.
Every one must pass with SnapvcSession, but for the tests listed in ``NOT_APPLICABLE``:
they reach into SQLiteSession's own machinery (its connections, its tables, its locks),
which a snapvc repository does not have; the behaviour they guard is tested on
SnapvcSession in ``tests/test_openai_agents.py`` where it applies. A listed test must
still be collected (a renamed one would otherwise hide a new test) and fail on snapvc.

The SDK's test files are fetched, never copied into this repository. The pinned version
must be the one installed (``pip install -e '.[test]'``).
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from tests.framework_sdist import framework_tests, run_in_two_halves

# The SDK's session tests: about a minute.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_DIR = ROOT / "tests" / "openai_agents_suite"
OPENAI_AGENTS = "0.24.0"  # the same as pyproject.toml's test extra pins
SDIST_SHA256 = "4b4b285f4fed81fdf1b4ac426a9101658d9cd29b4fb1aaeee18f639b77e704e3"  # PyPI's
SESSIONS = ("sqlite", "snapvc")
TESTS_PER_SESSION = 293  # the tests of TEST_FILES in openai-agents 0.24.0 that make a SQLiteSession
TEST_FILES = (
    "tests/memory/test_session.py",
    "tests/memory/test_session_limit.py",
    "tests/memory/test_compaction_suffix.py",
    "tests/memory/test_compaction_model_visibility.py",
    "tests/memory/test_openai_responses_compaction_session.py",
    "tests/test_agent_runner.py",
    "tests/test_agent_runner_streamed.py",
    "tests/test_max_turns.py",
    "tests/test_native_tool_failure_history.py",
    "tests/test_programmatic_tool_calling.py",
    "tests/test_run_impl_resume_paths.py",
    "tests/test_soft_cancel.py",
    "tests/test_tool_batch_failure_history.py",
    "tests/test_tool_failure_boundaries.py",
)
_SQLITE_CONNECTIONS = "SQLiteSession's per-thread sqlite3 connections"
_SQLITE_ROWS = "corrupt JSON rows written into SQLiteSession's tables"
_SQLITE_FAULTS = "faults injected into SQLiteSession's sqlite3 connection (commit, rollback)"
NOT_APPLICABLE = {
    "tests/memory/test_session.py::test_sqlite_session_close_closes_worker_thread_connections": _SQLITE_CONNECTIONS,
    "tests/memory/test_session.py::test_sqlite_session_reaps_connections_from_exited_worker_threads":
        _SQLITE_CONNECTIONS,
    "tests/memory/test_session.py::test_sqlite_session_closes_retired_connections_before_the_next_allocation":
        _SQLITE_CONNECTIONS,
    "tests/memory/test_session.py::test_sqlite_session_keeps_connections_of_live_worker_threads": _SQLITE_CONNECTIONS,
    "tests/memory/test_session.py::test_sqlite_session_closed_rejects_empty_add_items":
        "expects SQLiteSession's own RuntimeError text ('SQLiteSession is closed')",
    "tests/memory/test_session.py::test_sqlite_session_pop_item_skips_corrupt_most_recent": _SQLITE_ROWS,
    "tests/memory/test_session.py::test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows":
        _SQLITE_ROWS,
    "tests/memory/test_session.py::test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": _SQLITE_ROWS,
    "tests/memory/test_session.py::test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows":
        _SQLITE_ROWS,
    "tests/memory/test_session.py::test_sqlite_session_file_lock_is_shared_across_instances":
        "SQLiteSession's class-level table of per-file locks",
    "tests/memory/test_session.py::test_sqlite_session_failed_add_items_releases_write_lock": _SQLITE_FAULTS,
    "tests/memory/test_session.py::test_sqlite_session_failed_clear_session_rolls_back": _SQLITE_FAULTS,
    "tests/memory/test_session.py::test_sqlite_session_failed_pop_item_releases_write_lock": _SQLITE_FAULTS,
    "tests/memory/test_session.py::test_sqlite_session_rollback_failure_evicts_connection": _SQLITE_FAULTS,
    "tests/memory/test_session.py::test_sqlite_session_close_retries_quarantined_connection": _SQLITE_FAULTS,
    "tests/memory/test_session.py::test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome":
        _SQLITE_FAULTS,
    "tests/memory/test_openai_responses_compaction_session.py::TestOpenAIResponsesCompactionSession::"
    "test_settled_pop_failure_invalidates_response_chain": _SQLITE_FAULTS,
    "tests/memory/test_openai_responses_compaction_session.py::TestOpenAIResponsesCompactionSession::"
    "test_settled_clear_failure_invalidates_response_chain": _SQLITE_FAULTS,
    "tests/test_run_impl_resume_paths.py::test_handoff_resume_after_cancelled_compaction_commits":
        "SQLiteSession's private _insert_items, patched to pause a write",
}


@pytest.fixture(scope="session")
def openai_agents_tests(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder holding openai-agents's own ``tests/`` package (see ``tests.framework_sdist``)."""
    return framework_tests("openai-agents", OPENAI_AGENTS, SDIST_SHA256, pytestconfig, tmp_path_factory)


def _not_applicable(test: str) -> str | None:
    return NOT_APPLICABLE.get(test.partition("[")[0])


def test_openai_agents_session_tests_pass_on_snapvc_session(openai_agents_tests: Path, tmp_path: Path) -> None:
    # The subprocess's first import path is its folder (``python -m``): ``tests`` is the SDK's there.
    path = os.pathsep.join(part for part in (str(PLUGIN_DIR), os.environ.get("PYTHONPATH")) if part)
    environment = {**os.environ, "PYTHONPATH": path}
    environment.pop("PYTEST_ADDOPTS", None)
    environment.pop("OPENAI_API_KEY", None)  # the SDK's conftest sets a fake one: no test reaches OpenAI
    # Tests listed in NOT_APPLICABLE fail on snapvc by design: the exit statuses say nothing.
    outcomes, stdout, _ = run_in_two_halves(
        openai_agents_tests, list(TEST_FILES),
        ["--rootdir", str(openai_agents_tests), "-c", str(PLUGIN_DIR / "pytest.ini"), "-p", "snapvc_openai_agents_suite",
         "-p", "no:cacheprovider", "-q", "--tb=short"], environment, tmp_path)

    tests: dict[str, set[str]] = defaultdict(set)
    by_test: dict[str, dict[str, str]] = defaultdict(dict)
    for entry in outcomes.values():
        tests[entry["session"]].add(entry["test"])
        by_test[entry["test"]][entry["session"]] = entry["outcome"]
    assert set(tests) == set(SESSIONS) and tests["sqlite"] == tests["snapvc"]
    assert len(tests["snapvc"]) == TESTS_PER_SESSION, f"{len(tests['snapvc'])} of the SDK's tests take a session"
    collected = {test.partition("[")[0] for test in tests["snapvc"]}
    assert set(NOT_APPLICABLE) <= collected, f"listed but not collected: {sorted(set(NOT_APPLICABLE) - collected)}"

    unexpected = {}
    for test, results in sorted(by_test.items()):
        expected = {"sqlite": "passed", "snapvc": "failed" if _not_applicable(test) else "passed"}
        if results != expected:
            unexpected[test] = results
    summary = Counter(f"{name}: {outcome}" for results in by_test.values() for name, outcome in results.items())
    listed = "\n".join(f"  {test}: {results}{' (listed: ' + str(_not_applicable(test)) + ')' if _not_applicable(test) else ''}"
                       for test, results in list(unexpected.items())[:50])
    assert unexpected == {}, (f"{len(unexpected)} of the SDK's session tests did not end as expected "
                              f"({dict(summary)}):\n{listed}\nthe pytest output ends:\n{stdout[-20000:]}")
