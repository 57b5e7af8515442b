"""snapvc installed as a user installs it: a wheel built from this tree, put into a fresh
virtual environment outside it (its dependencies from the package index), used from an
empty folder. What the editable install of the development environment hides shows here:
a file the wheel leaves out, a dependency an extra forgets, a module found only because
the source tree is on the path.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTION = "snapvc-state"  # "snapvc" on the package index is another project


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), re.S)


def _env() -> dict[str, str]:
    """This process's environment without what would point a fresh interpreter back at the
    development environment or the source tree."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def _run(args: list[str | Path], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, args))} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of the tree (a build writes build/ and *.egg-info where it
    runs: not in a tree others work in)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "snapvc", source / "snapvc", ignore=shutil.ignore_patterns("__pycache__"))
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
          "-w", work / "dist", source], cwd=work)
    (built,) = (work / "dist").glob("*.whl")
    return built


def _fresh_venv(where: Path) -> Path:
    """A virtual environment with nothing installed, not even pip; returns its python."""
    _run([sys.executable, "-m", "venv", "--without-pip", where], cwd=where.parent)
    return where / "bin" / "python"


def _install(python: Path, requirement: str) -> None:
    # This environment's pip installs into the fresh one (--python): no pip to set up there
    # first. Compiling every module of LangGraph's dependencies to bytecode would take
    # longer than installing them; Python compiles what runs.
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--disable-pip-version-check",
          "--no-compile", requirement], cwd=python.parent)


def test_the_wheel_is_named_for_its_distribution_and_holds_the_package_data(wheel: Path) -> None:
    assert wheel.name.startswith(DISTRIBUTION.replace("-", "_") + "-"), wheel.name
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "snapvc/py.typed" in names
    static = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "snapvc" / "ui" / "static").rglob("*") if p.is_file())
    assert static, "the web view's page (snapvc/ui/static) is missing from the tree"
    assert not [name for name in static if name not in names], f"files the wheel leaves out: {set(static) - names}"
    assert not [name for name in names if name.startswith("tests/") or name.startswith("benchmarks/")]


def test_installed_wheel_runs_the_demo_and_the_readme(wheel: Path, tmp_path: Path) -> None:
    python = _fresh_venv(tmp_path / "venv")
    _install(python, str(wheel))
    empty = tmp_path / "empty"
    empty.mkdir()

    # The package comes from the environment, not from the source tree, under its own name;
    # the other project named "snapvc" is not what got installed.
    where = _run([python, "-c", "import importlib.metadata as m, snapvc; print(snapvc.__file__); "
                  f"print(m.version('{DISTRIBUTION}')); print(m.packages_distributions()['snapvc'])"], cwd=empty)
    module, version, owners = where.stdout.splitlines()
    assert Path(module).is_relative_to(tmp_path / "venv"), module
    assert version == _run([sys.executable, "-c", "import snapvc; print(snapvc.__version__)"], cwd=empty).stdout.strip()
    assert owners == f"['{DISTRIBUTION}']"
    package = Path(module).parent
    assert (package / "py.typed").is_file()
    static = [p.relative_to(ROOT / "snapvc") for p in (ROOT / "snapvc" / "ui" / "static").rglob("*") if p.is_file()]
    assert static and all((package / p).is_file() for p in static), "the web view's files are not installed"

    command = python.parent / "snapvc"
    assert _run([command, "--version"], cwd=empty).stdout.split()[-1] == version
    assert "snapvc" in _run([command, "demo"], cwd=empty, timeout=120).stdout

    blocks = _python_blocks(ROOT / "README.md")
    assert blocks
    for i, code in enumerate(blocks):
        folder = tmp_path / f"readme-{i}"  # each block starts from an empty folder, as tests/test_docs.py runs them
        folder.mkdir()
        _run([python, "-c", code], cwd=folder, timeout=120)


def test_the_langgraph_extra_runs_the_langgraph_guide(wheel: Path, tmp_path: Path) -> None:
    """docs/langgraph.md's graph imports LangGraph itself (``StateGraph``): the extra must
    bring it, not only the checkpoint interface."""
    python = _fresh_venv(tmp_path / "venv")
    _install(python, f"{wheel}[langgraph]")
    blocks = _python_blocks(ROOT / "docs" / "langgraph.md")
    assert any("StateGraph" in code for code in blocks)
    for i, code in enumerate(blocks):
        folder = tmp_path / f"guide-{i}"
        folder.mkdir()
        _run([python, "-c", code], cwd=folder, timeout=120)
