"""``snapvc demo``, the main job, runs end to end and shows what it promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
