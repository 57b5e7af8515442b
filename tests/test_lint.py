"""ruff and mypy, configured in pyproject.toml, run by the test command like any other test.

Both run from the venv that runs the tests (``sys.executable -m ...``), so the versions are
the ones the test extra pins, and from the project root, so they read its configuration.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing() -> None:
    result = _run("ruff", "check", "snapvc", "tests", "benchmarks")
    if result.returncode != 0:
        pytest.fail(f"ruff check snapvc tests benchmarks (exit {result.returncode}):\n{result.stdout}{result.stderr}", pytrace=False)


def test_mypy_finds_nothing() -> None:
    # The files to check and the strict layers are in pyproject.toml's [tool.mypy].
    result = _run("mypy")
    if result.returncode != 0:
        pytest.fail(f"mypy (exit {result.returncode}):\n{result.stdout}{result.stderr}", pytrace=False)
