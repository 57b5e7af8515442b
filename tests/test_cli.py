"""The ``snapvc`` command, run for real in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import snapvc


def run(*args: str, cwd: Path, ceiling: Path | None = None) -> subprocess.CompletedProcess[str]:
    # The search for a repository stops at ``ceiling`` (default: the folder above ``cwd``),
    # so files elsewhere on the machine never answer for a test.
    env = {**os.environ, "SNAPVC_CEILING_DIRECTORIES": str(ceiling or cwd.parent)}
    return subprocess.run([sys.executable, "-m", "snapvc", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60, env=env)


def make_repo(path: Path) -> None:
    with snapvc.open(path) as repo:
        state = {"messages": [{"role": "user", "content": "hi"}], "step": 0}
        repo.commit(state, message="start", metadata={"step": 0})
        state["messages"].append({"role": "assistant", "content": "hello"})
        state["step"] = 1
        repo.commit(state, message="reply", metadata={"step": 1})


def test_init_then_commands_find_the_repository_upwards(tmp_path: Path) -> None:
    done = run("init", "agent.snapvc", cwd=tmp_path)
    assert done.returncode == 0 and "Initialized" in done.stdout
    assert run("init", "agent.snapvc", cwd=tmp_path).returncode == 2  # exists already
    make_repo(tmp_path / "agent.snapvc")
    sub = tmp_path / "deeper" / "still"
    sub.mkdir(parents=True)
    log = run("log", "--oneline", cwd=sub, ceiling=tmp_path.parent)
    assert log.returncode == 0, log.stderr
    assert [line.split(" ", 1)[1] for line in log.stdout.splitlines()] == ["(main) reply", "start"]


def test_checkout_prints_json_and_one_path(tmp_path: Path) -> None:
    make_repo(tmp_path / "a.snapvc")
    whole = run("checkout", "main~1", cwd=tmp_path)
    assert json.loads(whole.stdout) == {"messages": [{"role": "user", "content": "hi"}], "step": 0}
    one = run("checkout", "main", "--path", "messages.1.content", cwd=tmp_path)
    assert json.loads(one.stdout) == "hello"
    missing = run("checkout", "main", "--path", "nope", cwd=tmp_path)
    assert missing.returncode == 2 and "nope" in missing.stderr


def test_diff_exit_codes(tmp_path: Path) -> None:
    make_repo(tmp_path / "a.snapvc")
    changed = run("diff", "main~1", "main", cwd=tmp_path)
    assert changed.returncode == 1
    assert "+ messages[1]" in changed.stdout and "~ step: 0 -> 1" in changed.stdout
    same = run("diff", "main", "main", cwd=tmp_path)
    assert same.returncode == 0 and same.stdout == ""


def test_branch_log_json_and_stats(tmp_path: Path) -> None:
    make_repo(tmp_path / "a.snapvc")
    assert run("branch", "try-b", "main~1", cwd=tmp_path).returncode == 0
    listing = run("branch", cwd=tmp_path).stdout
    assert "* main" in listing and "try-b" in listing
    commits = json.loads(run("log", "--json", "try-b", cwd=tmp_path).stdout)
    assert [c["message"] for c in commits] == ["start"] and commits[0]["metadata"] == {"step": 0}
    assert run("branch", "-d", "try-b", cwd=tmp_path).returncode == 0
    assert "try-b" not in run("branch", cwd=tmp_path).stdout
    assert "2 commits on 1 branches" in run("stats", cwd=tmp_path).stdout


def test_errors_are_one_line_and_exit_2(tmp_path: Path) -> None:
    make_repo(tmp_path / "a.snapvc")
    unknown = run("checkout", "nosuchbranch", cwd=tmp_path)
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("snapvc: error:") and "nosuchbranch" in unknown.stderr
    bad = run("branch", "a..b", cwd=tmp_path)
    assert bad.returncode == 2 and "invalid ref name" in bad.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    nowhere = run("log", cwd=empty, ceiling=tmp_path)
    assert nowhere.returncode == 2 and "no *.snapvc repository" in nowhere.stderr
