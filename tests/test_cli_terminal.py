"""The ``snapvc`` command on a terminal: run in a pseudo-terminal (as a person runs it),
its graph and diff are coloured, long output goes through the pager and short output
does not; in a pipe the same commands print plain text."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from tests.test_cli import make_repo, run

# The command in a pseudo-terminal, a process per run: seconds each.
pytestmark = pytest.mark.slow

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def run_in_terminal(*args: str, cwd: Path, rows: int = 40, env: dict[str, str] | None = None) -> str:
    """Run ``snapvc ARGS`` with stdin, stdout and stderr on a pseudo-terminal of
    ``rows`` x 100; what it printed there (ANSI codes included)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, 100, 0, 0))
    full_env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "SNAPVC_REPO", "FORCE_COLOR")}
    full_env.update({"SNAPVC_CEILING_DIRECTORIES": str(cwd.parent), "TERM": "xterm-256color", **(env or {})})
    proc = subprocess.Popen([sys.executable, "-m", "snapvc", *args], cwd=cwd, env=full_env, stdin=follower,
                            stdout=follower, stderr=follower, close_fds=True)
    os.close(follower)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], 30)
            if not ready:
                raise TimeoutError(f"snapvc {' '.join(args)} printed nothing for 30 s")
            try:
                data = os.read(leader, 65536)
            except OSError:  # the other side closed: the command ended
                break
            if not data:
                break
            chunks.append(data)
    finally:
        proc.wait(timeout=30)
        os.close(leader)
    assert proc.returncode in (0, 1), b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.fixture
def repo_dir(tmp_path: Path) -> Path:
    make_repo(tmp_path / "agent.snapvc")
    assert run("merge", "try-b", "-s", "theirs", cwd=tmp_path).returncode == 0
    return tmp_path


def test_graph_and_diff_are_coloured_on_a_terminal(repo_dir: Path) -> None:
    shown = run_in_terminal("log", "--graph", cwd=repo_dir)
    plain = ANSI.sub("", shown).splitlines()
    assert plain[0].startswith("* ") and plain[0].endswith("(HEAD -> main) Merge try-b into main")
    assert plain[1] == "|\\" and plain[4] == "|/"
    assert "\x1b[31m*\x1b[0m" in shown  # the graph in red, as git draws it
    assert "\x1b[1;36mHEAD -> main\x1b[0m" in shown and "\x1b[1;33mtag: v1\x1b[0m" in shown
    diff = run_in_terminal("diff", "main~2", "main~1", cwd=repo_dir)
    assert "\x1b[32m+Paragraph 5: revised.\x1b[0m" in diff and "\x1b[31m-Paragraph 5: the findings so far.\x1b[0m" in diff
    piped = run("log", "--graph", cwd=repo_dir)
    assert "\x1b[" not in piped.stdout and piped.stdout.splitlines() == plain


def test_long_output_goes_through_the_pager(repo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.mktemp("pager")
    pager = folder / "pager.sh"
    pager.write_text(f"#!/bin/sh\ncat > {folder / 'paged.txt'}\n")
    pager.chmod(0o755)
    env = {"SNAPVC_PAGER": str(pager)}
    shown = run_in_terminal("log", cwd=repo_dir, rows=10, env=env)  # 4 commits of 6+ lines: more than 10 rows
    paged = (folder / "paged.txt").read_text()
    assert ANSI.sub("", shown).strip() == ""  # all of it went to the pager, with its colours
    assert paged.count("commit ") == 5 and "\x1b[" in paged
    (folder / "paged.txt").unlink()
    short = run_in_terminal("log", "--oneline", "-n", "2", cwd=repo_dir, rows=10, env=env)
    assert not (folder / "paged.txt").exists() and len(ANSI.sub("", short).splitlines()) == 2
    unpaged = run_in_terminal("--no-pager", "log", cwd=repo_dir, rows=10, env=env)
    assert not (folder / "paged.txt").exists() and ANSI.sub("", unpaged).count("commit ") == 5


def test_colour_can_be_forced_or_refused(repo_dir: Path) -> None:
    assert "\x1b[" in run("--color", "always", "log", "--oneline", cwd=repo_dir).stdout
    assert "\x1b[" not in run_in_terminal("--color", "never", "log", "--oneline", cwd=repo_dir)
    no_color = run_in_terminal("log", "--oneline", cwd=repo_dir, env={"NO_COLOR": "1"})
    assert "\x1b[1m" in no_color and not re.search(r"\x1b\[[0-9;]*3[0-7]m", no_color)  # bold, but no colour
