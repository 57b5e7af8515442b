"""A runner killed mid-run (SIGKILL) resumes where it stopped: no completed step runs
again, no step's effect is lost or doubled, and the final state is the one of a run that
was never interrupted."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import snapvc

# Kills a runner process mid-run and resumes it: about a second each.
pytestmark = pytest.mark.slow

STEPS = 50

# The job: each step appends its index to a list in the state, and logs "start i" when it
# starts (flushed and fsynced, so the parent sees it before the step goes on);
# on_checkpoint logs "done i" once the step's checkpoint is committed.
JOB = f"""
import os
import sys
import time

import snapvc
from snapvc.agent.runner import Runner, Step

repo_path, log_path, durability = sys.argv[1:4]
log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)


def write(line):
    os.write(log, (line + "\\n").encode())
    os.fsync(log)


def make(i):
    def step(state):
        write(f"start {{i}}")
        state.append("done", i)
        state.set("total", state.get("total", 0) + i)
        state.set(f"by_step.s{{i}}", {{"square": i * i}})
        time.sleep(0.003)
        return {{"index": i}}
    return Step(step, f"s{{i}}")


with snapvc.open(repo_path) as repo:
    runner = Runner(repo.state("job"), [make(i) for i in range({STEPS})], agent_id="crash-test",
                    durability=durability,
                    on_checkpoint=lambda cp: write(f"done {{cp.metadata['step_name'][1:]}}"))
    runner.run()
    write("finished resumed" if runner.resumed else "finished")
"""


def _run_job(script: Path, repo_path: Path, log: Path, durability: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(script), str(repo_path), str(log), durability],
                            cwd=Path(__file__).resolve().parents[1], stderr=subprocess.PIPE)


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def _finish(proc: subprocess.Popen[bytes]) -> None:
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("job") / "job.py"
    path.write_text(JOB)
    return path


@pytest.fixture(scope="module")
def uninterrupted(script: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("reference")
    _finish(_run_job(script, folder / "ref.snapvc", folder / "log", "normal"))
    with snapvc.open(folder / "ref.snapvc") as repo:
        return repo.checkout("job")


SEED = int(os.environ.get("SNAPVC_CRASH_SEED", random.randrange(2**32)))
KILL_POINTS = random.Random(SEED).sample(range(STEPS), 4)


@pytest.mark.parametrize(("run", "durability"), [(0, "normal"), (1, "sync"), (2, "normal"), (3, "sync")])
def test_a_killed_run_resumes_without_losing_or_repeating_a_step(
        script: Path, uninterrupted: dict[str, object], tmp_path: Path, run: int, durability: str) -> None:
    kill_at = KILL_POINTS[run]
    print(f"crash test seed {SEED} (SNAPVC_CRASH_SEED={SEED} repeats it): kill at step {kill_at}")
    repo_path, log = tmp_path / "job.snapvc", tmp_path / "log"
    proc = _run_job(script, repo_path, log, durability)
    try:
        deadline = time.monotonic() + 30
        while f"start {kill_at}" not in _lines(log):
            assert proc.poll() is None, f"the job ended before step {kill_at} started"
            assert time.monotonic() < deadline, f"step {kill_at} did not start within 30 s"
            time.sleep(0.0005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    before = _lines(log)
    done_before = {int(line.split()[1]) for line in before if line.startswith("done ")}
    assert "finished" not in before and len(done_before) >= kill_at

    with open(log, "a") as f:
        f.write("restart\n")
    restart = _run_job(script, repo_path, log, durability)
    try:
        _finish(restart)
    finally:
        if restart.poll() is None:
            os.kill(restart.pid, signal.SIGKILL)
            restart.wait(timeout=30)
    after = _lines(log)[len(before) + 1:]
    started_after = [int(line.split()[1]) for line in after if line.startswith("start ")]
    assert not done_before & set(started_after), "a step whose checkpoint was written ran again"
    # The restart resumes at one step (the killed one, or the next if its checkpoint was
    # written before the kill landed) and runs each following step once.
    first = started_after[0]
    assert first >= len(done_before) and started_after == list(range(first, STEPS))
    assert after[-1] == ("finished resumed" if first > 0 else "finished")
    with snapvc.open(repo_path) as repo:
        state = repo.checkout("job")
        assert state["done"] == list(range(STEPS))  # each step's effect once, in order
        assert state == uninterrupted
        commits = list(repo.log("job"))[::-1]
        assert [c.metadata["step"] for c in commits] == list(range(1, STEPS + 1))
        assert [c.metadata["step_name"] for c in commits] == [f"s{i}" for i in range(STEPS)]
        assert commits[-1].metadata["next_step"] is None
