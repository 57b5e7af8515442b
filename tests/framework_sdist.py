"""A framework's own tests, taken from its source distribution on PyPI at test time.

LangGraph and the OpenAI Agents SDK ship their ``tests/`` in their sdists; the suites
``tests/test_langgraph_suite.py`` and ``tests/test_openai_agents_suite.py`` run them on
snapvc's adapters. Their files are fetched, never copied into this repository:
``framework_tests`` downloads the pinned sdist once into pytest's cache folder, checks it against
PyPI's hash, and keeps its ``tests/`` only (its package must not shadow the installed one).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import pytest

__all__ = ["framework_tests", "run_in_two_halves"]


def framework_tests(distribution: str, version: str, sha256: str, config: pytest.Config,
             tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder holding ``distribution==version``'s ``tests/`` package, downloaded on
    first use. Made in a folder of its own and renamed into place, so two test runs at
    once never see a half-extracted one. The installed version must be the pinned one."""
    installed = importlib.metadata.version(distribution)
    assert installed == version, (f"{distribution}'s own tests are run as of {version}, but {installed} is "
                                  f"installed: pip install -e '.[test]'")
    cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
    cache_folder = (cache.mkdir(f"{distribution}-sdist") if cache is not None
                    else tmp_path_factory.mktemp(f"{distribution}-sdist"))
    top = f"{distribution.replace('-', '_')}-{version}"  # the sdist's file and folder name
    final = cache_folder / top
    if not (final / "tests" / "conftest.py").exists():
        making = Path(tempfile.mkdtemp(dir=cache_folder, prefix="making-"))
        try:
            _download_tests(distribution, version, sha256, top, making)
            try:
                os.rename(making / top, final)
            except OSError:
                if not (final / "tests" / "conftest.py").exists():  # not another run's: a real failure
                    raise
        finally:
            shutil.rmtree(making, ignore_errors=True)
    return final


def _download_tests(distribution: str, version: str, sha256: str, top: str, into: Path) -> None:
    """The sdist, checked against its hash, with ``<top>/tests/`` extracted into ``into``."""
    download = into / "download"
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                           "--disable-pip-version-check", "--quiet", f"{distribution}=={version}",
                           "-d", str(download)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"pip could not download {distribution}=={version}'s sdist:\n{done.stderr}"
    (sdist,) = download.glob(f"{top}.tar.gz")
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    assert digest == sha256, f"{sdist.name} has sha256 {digest}, not PyPI's {sha256}"
    prefix = f"{top}/tests/"
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if m.name.startswith(prefix)]
        assert members, f"{sdist.name} has no {prefix}"
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python 3.11.4 and later
        archive.extractall(into, members=members, **safe)
    shutil.rmtree(download)


def run_in_two_halves(folder: Path, files: list[str], args: list[str], environment: dict[str, str],
                      reports: Path) -> tuple[dict[str, Any], str, list[int]]:
    """pytest on a framework's test ``files`` in ``folder``, in two processes at once (one a
    core), each on about half of the files by size: their tests are independent, each
    making its own checkpointer or session in its own tmp_path. ``args`` are pytest's
    options; each process writes its outcomes (``--snapvc-report``) into ``reports``.
    Returns the outcomes of both, their output, and their exit statuses."""
    halves: list[list[str]] = [[], []]
    sizes = [0, 0]
    for name in sorted(files, key=lambda f: -(folder / f).stat().st_size):
        lighter = sizes.index(min(sizes))
        halves[lighter].append(name)
        sizes[lighter] += (folder / name).stat().st_size
    outcome_files = [reports / f"outcomes-{n}.json" for n in range(len(halves))]
    runs = [subprocess.Popen([sys.executable, "-m", "pytest", *half, *args, "--snapvc-report", str(report)],
                             cwd=folder, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for half, report in zip(halves, outcome_files)]
    outputs = [run.communicate(timeout=3600) for run in runs]
    stdout = "\n".join(out for out, _ in outputs)
    outcomes: dict[str, Any] = {}
    for run, (out, err), report in zip(runs, outputs, outcome_files):
        assert report.exists(), f"the framework's tests did not run (exit {run.returncode}):\n{out[-5000:]}\n{err[-5000:]}"
        outcomes.update(json.loads(report.read_text()))
    return outcomes, stdout, [run.returncode for run in runs]
