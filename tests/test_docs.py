"""The documentation runs: every ```python block of README.md and docs/**/*.md is executed.

A page holding the comment ``<!-- doc-session ... -->`` runs as one session instead: its
```python blocks in order, in one folder and one namespace, and its ```console blocks'
``$ snapvc ...`` commands for real in a subprocess, between them, each checked against
the output the page shows (commit ids aside: they cover the commit's time).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SESSION_MARK = "<!-- doc-session"
_ID = re.compile(r"\b[0-9a-f]{8,64}\b")


def _blocks(path: Path, lang: str = "python") -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", path.read_text(), re.S)


def _is_session(path: Path) -> bool:
    return SESSION_MARK in path.read_text()


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


CASES = [(path, i, code) for path in DOCS if not _is_session(path) for i, code in enumerate(_blocks(path))]
SESSIONS = [path for path in DOCS if _is_session(path)]


def test_readme_has_examples() -> None:
    assert _blocks(ROOT / "README.md"), "README.md should show how to use snapvc"


@pytest.mark.parametrize("path,index,code", CASES, ids=[f"{_name(p)}-{i}" for p, i, _ in CASES])
def test_doc_example_runs(path: Path, index: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples create their repositories in the working directory
    exec(compile(code, f"{path.name} block {index}", "exec", dont_inherit=True), {"__name__": f"doc_{index}"})


def _console_commands(block: str) -> list[tuple[str, str]]:
    """``(command, the output shown under it)`` for each ``$ `` line of a console block."""
    commands: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        elif commands:
            commands[-1][1].append(line)
        else:
            raise AssertionError(f"a console block starts with a command line ('$ ...'), not {line!r}")
    return [(command, "\n".join(output)) for command, output in commands]


def _without_ids(text: str) -> str:
    return _ID.sub("<id>", text).rstrip()


def _run_console(block: str, cwd: Path, where: str) -> None:
    env = {**os.environ, "SNAPVC_CEILING_DIRECTORIES": str(cwd.parent)}  # no repository elsewhere answers
    for command, shown in _console_commands(block):
        args = shlex.split(command)
        assert args[0] == "snapvc", f"{where}: only snapvc commands run in a console block, not {command!r}"
        done = subprocess.run([sys.executable, "-m", "snapvc", *args[1:]], capture_output=True, text=True, cwd=cwd,
                              timeout=120, env=env)
        assert done.returncode in (0, 1), f"{where}: $ {command} failed ({done.returncode}): {done.stderr}"
        assert _without_ids(done.stdout) == _without_ids(shown), (
            f"{where}: $ {command} printed\n{done.stdout}\nwhere the page shows\n{shown}"
        )


@pytest.mark.parametrize("path", SESSIONS, ids=[_name(p) for p in SESSIONS])
def test_doc_session_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "doc_session"}
    steps = re.findall(r"```(python|console)\n(.*?)```", path.read_text(), re.S)
    assert steps, f"{_name(path)} is marked as a session but has no python or console blocks"
    for index, (lang, code) in enumerate(steps):
        where = f"{_name(path)} block {index}"
        if lang == "python":
            exec(compile(code, where, "exec", dont_inherit=True), namespace)
        else:
            _run_console(code, tmp_path, where)


def test_console_blocks_run_in_sessions() -> None:
    """A ```console block shows commands and their output: only a session page runs them."""
    unchecked = [_name(p) for p in DOCS if _blocks(p, "console") and not _is_session(p)]
    assert not unchecked, f"console blocks outside a doc-session page are not run: {unchecked}"


def test_readme_commands_exist() -> None:
    text = (ROOT / "README.md").read_text()
    assert "make demo" in text and "make test" in text
    makefile = (ROOT / "Makefile").read_text()
    assert "snapvc demo" in makefile and "pytest" in makefile
    assert "make test" in (ROOT / ".ci" / "run").read_text()
