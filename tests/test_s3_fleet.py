"""A fleet of agents on one S3 repository at once (a real SeaweedFS, tests/conftest.py):
four processes commit straight to it, four commit to local repositories and push, all
at the same time. Every commit must arrive, and the repository must check whole.

Slow (about a minute on two cores): kept in a module of its own."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import snapvc

# Eight processes on one S3 repository: seconds.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
STEPS = 100
DIRECT = 4
PUSHING = 4
PUSH_EVERY = 20

_WORKER = textwrap.dedent(
    """
    import random, sys
    import snapvc

    mode, url, agent, steps, push_every, local = sys.argv[1:7]
    steps, push_every = int(steps), int(push_every)
    rnd = random.Random(agent)
    remote = snapvc.open(url)
    repo = remote if mode == "direct" else snapvc.open(local)
    branch = f"agents/{agent}"
    state = {"messages": [], "scratchpad": {"agent": agent}, "notes": ""}
    print("ready", flush=True)
    sys.stdin.readline()  # every worker starts at once
    for step in range(steps):
        state["messages"].append({"role": "assistant", "content": f"{agent} step {step}: "
                                  + " ".join(rnd.choice(["plan", "tool", "result", "claim"]) for _ in range(60))})
        state["scratchpad"]["step"] = step
        state["notes"] += f"note {step} " * 20
        repo.commit(state, branch=branch, message=f"{agent} step {step}", metadata={"agent": agent, "step": step})
        if mode == "push" and (step + 1) % push_every == 0:
            repo.push(remote, branch)
    print("done", flush=True)
    """
)


def test_a_fleet_commits_and_pushes_to_one_s3_repository_at_once(s3_url: str, tmp_path: Path) -> None:
    snapvc.open(s3_url).close()  # created once, before the fleet starts
    agents = [("direct", f"direct-{i}") for i in range(DIRECT)] + [("push", f"pushing-{i}") for i in range(PUSHING)]
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, mode, s3_url, agent, str(STEPS), str(PUSH_EVERY),
             str(tmp_path / f"{agent}.snapvc")],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for mode, agent in agents
    ]
    try:
        for w in workers:
            assert w.stdout is not None
            line = w.stdout.readline()
            assert line == "ready\n", line + (w.stderr.read() if w.stderr else "")
        for w in workers:
            assert w.stdin is not None
            w.stdin.write("go\n")
            w.stdin.flush()
        for w in workers:
            out, err = w.communicate(timeout=300)
            assert w.returncode == 0, err
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()

    with snapvc.open(s3_url, create=False) as repo:
        branches = repo.branches()
        assert sorted(branches) == sorted(f"agents/{agent}" for _, agent in agents)
        for _, agent in agents:
            history = list(repo.log(f"agents/{agent}"))
            assert [c.metadata["step"] for c in history] == list(range(STEPS - 1, -1, -1)), agent
            assert {c.metadata["agent"] for c in history} == {agent}
        assert repo.commits.count() == len(agents) * STEPS
        report = repo.fsck()
        assert report.ok, report
        last = repo.checkout("agents/direct-0")
        assert len(last["messages"]) == STEPS and last["scratchpad"] == {"agent": "direct-0", "step": STEPS - 1}
