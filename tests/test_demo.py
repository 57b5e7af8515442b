"""``snapvc demo``, the main job, runs end to end and shows what it promises."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

import snapvc
from snapvc.demo import run_demo


def test_demo_does_what_it_says(tmp_path: Path) -> None:
    path = tmp_path / "demo.snapvc"
    with open(tmp_path / "out.txt", "w") as screen:
        out = run_demo(path, console=Console(file=screen, width=100))
    graph = "\n".join(out["graph"])
    assert "|/" in graph, "the fork should be drawn where the branches meet"
    assert "(HEAD -> main)" in graph and "(try-web)" in graph and "tag: decision-point" in graph
    kinds = dict(out["diff"])
    assert kinds["findings[2]"] == "modified" and kinds["usage.tokens"] == "modified"
    assert out["restored_messages"] == 9
    stats = out["stats"]
    assert out["conflicts"] == ["scratchpad.last_action", "usage.tokens"]
    assert out["merged_findings"] == 6  # both branches' findings
    assert out["token_history"][0] == 3970  # what both branches spent since the fork, added up
    assert stats.commits == 10 and stats.branches == 2 and stats.logical_bytes > stats.stored_bytes
    with snapvc.open(path, create=False) as repo:  # the demo left a real repository behind
        assert set(repo.branches()) == {"main", "try-web"}
        assert repo.resolve("decision-point") == out["decision"]
        assert len(list(repo.log("main"))) == 10  # main's 7, try-web's 2, the merge
        assert len(repo.get_commit(repo.resolve("main")).parents) == 2
        assert repo.checkout("try-web")["scratchpad"]["last_action"] == "read a forum thread on quantization"


def test_demo_command(tmp_path: Path) -> None:
    path = tmp_path / "agent.snapvc"
    done = subprocess.run([sys.executable, "-m", "snapvc", "demo", "--repo", str(path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for heading in ("checkpointed every step", "Fork at a decision point", "log --graph", "structural diff",
                    "Time travel", "three-way merge", "What it cost"):
        assert heading in done.stdout
    log = subprocess.run([sys.executable, "-m", "snapvc", "log", "--graph", "--repo", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert log.returncode == 0, log.stderr
    assert "revise paragraph 5" in log.stdout and "|/" in log.stdout


def test_demo_refuses_existing_path(tmp_path: Path) -> None:
    path = tmp_path / "x.snapvc"
    path.write_bytes(b"")
    done = subprocess.run([sys.executable, "-m", "snapvc", "demo", "--repo", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode != 0 and "exists" in done.stderr


@pytest.mark.parametrize("columns", [80, 120])
def test_demo_reads_well_at_any_width(tmp_path: Path, columns: int) -> None:
    """No line past the screen's edge (commands aside: they stay whole on one line, to
    be copied), values whole, every commit listed, and the temporary folder it leaves
    named with the command that removes it."""
    done = subprocess.run([sys.executable, "-m", "snapvc", "demo"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": str(columns), "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    [folder] = list(tmp_path.glob("snapvc-demo-*"))  # kept, and said so below
    repo_path = folder / "agent.snapvc"
    commands = [line for line in lines if line.startswith(("  snapvc ", "  rm -r "))]
    assert f"  snapvc log --graph --repo {repo_path}" in commands
    assert f"  rm -r {folder}" in commands
    assert "The repository is kept, in a temporary folder of its own; to remove it:" in lines
    for line in lines:
        assert line in commands or len(line) <= columns, f"{len(line)} > {columns}: {line}"
    # the merge section shows the conflicting values whole, as JSON
    merge = done.stdout[done.stdout.index("Without a resolver"):done.stdout.index("With the resolver")]
    assert '    main     "read paper: Scaling Laws for Neural Language Models"' in merge.splitlines()
    assert "..." not in merge and "…" not in merge
    # every commit, not only the first four
    with snapvc.open(repo_path, create=False) as repo:
        ids = {c.id.short[:8] for c in repo.log(["main", "try-web"])}
    assert len(ids) == 10
    listed = done.stdout[done.stdout.index("All 10 commits"):]
    assert all(i in listed for i in ids)


def test_demo_with_repo_keeps_it_where_asked(tmp_path: Path) -> None:
    path = tmp_path / "mine.snapvc"
    done = subprocess.run([sys.executable, "-m", "snapvc", "demo", "--repo", str(path)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "The repository stays where --repo put it." in done.stdout and "rm -r" not in done.stdout
    assert path.exists() and not list(tmp_path.glob("snapvc-demo-*"))
