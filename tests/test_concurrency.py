"""Concurrent writers on one branch: 8 processes x 50 commits with compare-and-swap and
retry, none lost; threads of one process likewise; readers beside them always see a
whole commit; a gc (grace 0, the harshest) running beside them loses nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import snapvc
from snapvc.errors import RefConflictError

# Many writer processes and threads on one branch: seconds each.
pytestmark = pytest.mark.slow

PROCESSES = 8
COMMITS = 50

# Each writer adds its own keys to main's latest state, built on the tip it read:
# ``parents=(tip,)`` makes a commit on a tip another writer moved raise RefConflictError,
# and the writer reads again and retries. ``count`` is the number of writer keys, so a
# reader can tell a whole state from a torn one. Every tenth commit a writer also commits
# to a scratch branch and deletes it, leaving garbage for the gc running beside.
WRITER = r'''
import json, sys, time
import snapvc
from snapvc.errors import RefConflictError

path, name, commits, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
while not __import__("os").path.exists(go):
    time.sleep(0.001)
retries = 0
with snapvc.open(path) as repo:
    for i in range(commits):
        while True:
            tip = repo.resolve("main")
            state = repo.checkout(tip)
            state[f"{name}-{i}"] = {"by": name, "i": i, "text": f"{name} wrote {i} " * 20}
            state["count"] = sum(1 for k in state if k != "count")
            try:
                repo.commit(state, branch="main", message=f"{name} {i}", parents=(tip,))
                break
            except RefConflictError:
                retries += 1
        if i % 10 == 9:  # garbage for the gc beside: a scratch branch, committed to and deleted
            repo.commit({"scratch": f"{name} scratch {i} " * 400}, branch=f"{name}-scratch")
            repo.delete_branch(f"{name}-scratch")
print(json.dumps({"retries": retries}))
'''

READER = r'''
import json, os, sys
import snapvc

path, stop = sys.argv[1], sys.argv[2]
reads = 0
with snapvc.open(path) as repo:
    while not os.path.exists(stop):
        state = repo.checkout("main")
        assert state["count"] == len(state) - 1, f"a torn state: count {state['count']}, {len(state) - 1} keys"
        reads += 1
print(json.dumps({"reads": reads}))
'''

COLLECTOR = r'''
import json, os, sys
import snapvc

path, stop = sys.argv[1], sys.argv[2]
runs = removed = 0
with snapvc.open(path) as repo:
    while not os.path.exists(stop):
        report = repo.gc(grace=0, reflog_expiry=0)
        runs += 1
        removed += len(report.removed_objects)
print(json.dumps({"gc_runs": runs, "removed": removed}))
'''


def _start(tmp_path: Path, name: str, code: str, *args: str) -> subprocess.Popen[str]:
    script = tmp_path / f"{name}.py"
    script.write_text(code)
    return subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _result(proc: subprocess.Popen[str]) -> dict:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out)


def _assert_all_there(repo: snapvc.Repository, writers: list[str], commits: int) -> None:
    messages = [c.message for c in repo.log("main")]
    wanted = {f"{w} {i}" for w in writers for i in range(commits)}
    assert wanted <= set(messages) and len(messages) == len(wanted) + 1  # and the first commit
    state = repo.checkout("main")
    assert {k for k in state if k != "count"} == {f"{w}-{i}" for w in writers for i in range(commits)}
    assert state["count"] == len(wanted)
    assert repo.fsck().ok


def test_processes_writing_one_branch_lose_no_commit_beside_readers_and_gc(tmp_path: Path) -> None:
    path = tmp_path / "shared.snapvc"
    with snapvc.open(path) as repo:
        repo.commit({"count": 0}, message="start")
    go, stop = tmp_path / "go", tmp_path / "stop"
    names = [f"w{n}" for n in range(PROCESSES)]
    started = time.perf_counter()
    writers = [_start(tmp_path, f"writer-{n}", WRITER, str(path), n, str(COMMITS), str(go)) for n in names]
    reader = _start(tmp_path, "reader", READER, str(path), str(stop))
    collector = _start(tmp_path, "collector", COLLECTOR, str(path), str(stop))
    try:
        go.touch()
        results = [_result(w) for w in writers]
        stop.touch()
        read, collected = _result(reader), _result(collector)
    finally:  # a failed writer must not leave the reader and the collector running on
        stop.touch()
        for proc in [*writers, reader, collector]:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    seconds = time.perf_counter() - started
    with snapvc.open(path) as repo:
        _assert_all_there(repo, names, COMMITS)
    retries = sum(r["retries"] for r in results)
    print(f"{PROCESSES} processes x {COMMITS} commits in {seconds:.1f} s: all {PROCESSES * COMMITS} in the history, "
          f"{retries} lost races retried; {read['reads']} whole reads; {collected['gc_runs']} gc runs beside them "
          f"removed {collected['removed']} objects")
    assert read["reads"] > 0 and collected["gc_runs"] > 0 and collected["removed"] > 0


def test_threads_writing_one_branch_lose_no_commit(tmp_path: Path) -> None:
    path = tmp_path / "threads.snapvc"
    repo = snapvc.open(path)
    repo.commit({"count": 0}, message="start")
    names = [f"t{n}" for n in range(8)]
    retries = [0]
    errors: list[BaseException] = []
    done = threading.Event()
    reads = [0]

    def write(name: str) -> None:
        try:
            for i in range(COMMITS):
                while True:
                    tip = repo.resolve("main")
                    state = repo.checkout(tip)
                    state[f"{name}-{i}"] = {"by": name, "i": i}
                    state["count"] = sum(1 for k in state if k != "count")
                    try:
                        repo.commit(state, branch="main", message=f"{name} {i}", parents=(tip,))
                        break
                    except RefConflictError:
                        retries[0] += 1
        except BaseException as exc:
            errors.append(exc)

    def read_and_collect() -> None:
        try:
            with snapvc.open(path) as other:  # a second Repository on the same file: its own caches
                while not done.is_set():
                    state = other.checkout("main")
                    assert state["count"] == len(state) - 1
                    reads[0] += 1
                    if reads[0] % 20 == 0:
                        other.gc(grace=0, reflog_expiry=0)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(name,)) for name in names]
    watcher = threading.Thread(target=read_and_collect)
    watcher.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    watcher.join()
    assert not errors, errors[0]
    _assert_all_there(repo, names, COMMITS)
    print(f"8 threads x {COMMITS} commits: all in the history, {retries[0]} retries, {reads[0]} whole reads")
    repo.close()
