"""fsck beside live writers and a gc reports a healthy repository as healthy: it reads
everything it checks (objects, commit index, refs, reflog, settings) from one consistent
read, so a ref that moved, or a commit a gc swept, while it read is never reported as
damage."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

import snapvc
from snapvc.backends.s3 import GcTiming

T = TypeVar("T")
# Small for a test; the defaults are minutes (``GcTiming``).
MINUTE = GcTiming(reuse_window=60.0, longest_write=30.0, clock_skew=5.0)


def _clock(start: float = 1_800_000_000.0) -> Any:
    now = [start]

    def tick() -> float:
        return now[0]
    tick.now = now  # type: ignore[attr-defined]
    return tick


@pytest.mark.parametrize("stage", ["checking objects", "checking commits"])
@pytest.mark.parametrize("where", ["sqlite", "s3"])
def test_a_commit_and_a_gc_landing_while_fsck_reads_are_no_damage(where: str, stage: str, tmp_path: Path,
                                                                  request: pytest.FixtureRequest) -> None:
    """Another client commits, deletes a branch and runs a gc while fsck is between its
    reads (its progress callback, as it checks the objects or the commits): fsck reports
    the repository it read as sound, neither the moved ref nor the swept branch as damage."""
    location = str(tmp_path / "r.snapvc") if where == "sqlite" else request.getfixturevalue("s3_url")
    clock = _clock()
    options: dict[str, Any] = {"clock": clock} if where == "sqlite" else {"clock": clock, "gc_timing": MINUTE}
    grace = 0.0 if where == "sqlite" else MINUTE.min_grace
    with snapvc.open(location, **options) as writer:
        writer.commit({"step": 0, "text": "first " * 100}, message="first")
        writer.commit({"old": "soon gone " * 100}, branch="old", message="old")
        clock.now[0] += 3600  # everything so far is past any grace period
        moved = 0

        def meanwhile(items: Iterable[T], total: int, description: str) -> Iterator[T]:
            nonlocal moved
            for item in items:
                if description == stage and not moved:
                    writer.commit({"step": 1, "text": "second " * 100}, message="second")
                    writer.delete_branch("old")
                    report = writer.gc(grace=grace, reflog_expiry=0)
                    assert report.removed_objects, "the gc beside removed nothing: the test shows nothing"
                    moved += 1
                yield item

        with snapvc.open(location, **options) as checker:
            report = checker.fsck(progress=meanwhile)
            assert moved == 1
            assert report.ok, str(report)
            again = checker.fsck()
            assert again.ok and again.refs == report.refs - 1, str(again)


# Writer and gc processes beside an fsck loop: seconds.

WRITERS = 2
COMMITS = 60

# Each writer commits to its own branch, and every few commits to a scratch branch it
# deletes again (garbage for the gc beside, and reflog entries the gc expires).
WRITER = r'''
import json, os, sys, time
import snapvc

path, name, commits, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
while not os.path.exists(go):
    time.sleep(0.001)
with snapvc.open(path) as repo:
    state = {"by": name, "log": []}
    for i in range(commits):
        state["log"].append(f"{name} wrote {i} " * 20)
        repo.commit(state, branch=name, message=f"{name} {i}")
        if i % 3 == 2:
            repo.commit({"scratch": f"{name} scratch {i} " * 200}, branch=f"{name}-scratch")
            repo.delete_branch(f"{name}-scratch")
print(json.dumps({"commits": commits}))
'''

COLLECTOR = r'''
import json, os, sys
import snapvc

path, stop = sys.argv[1], sys.argv[2]
runs = 0
with snapvc.open(path) as repo:
    while not os.path.exists(stop):
        repo.gc(grace=0, reflog_expiry=0)
        runs += 1
print(json.dumps({"gc_runs": runs}))
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


@pytest.mark.slow
def test_fsck_beside_writers_and_gc_reports_no_problem(tmp_path: Path) -> None:
    path = tmp_path / "live.snapvc"
    with snapvc.open(path) as repo:
        repo.commit({"start": True}, message="start")
    go, stop = tmp_path / "go", tmp_path / "stop"
    writers = [_start(tmp_path, f"w{n}", WRITER, str(path), f"w{n}", str(COMMITS), str(go)) for n in range(WRITERS)]
    collector = _start(tmp_path, "gc", COLLECTOR, str(path), str(stop))
    reports = []
    try:
        with snapvc.open(path) as repo:
            go.touch()
            while any(w.poll() is None for w in writers):
                reports.append(repo.fsck())
    finally:
        stop.touch()
        go.touch()
    results = [_result(w) for w in writers]
    gc = _result(collector)
    assert [r["commits"] for r in results] == [COMMITS] * WRITERS and gc["gc_runs"] > 0
    assert len(reports) >= 3, "fsck ran too few times beside the writers to show anything"
    bad = [str(r) for r in reports if not r.ok]
    assert not bad, f"{len(bad)} of {len(reports)} fsck runs beside live writers reported problems:\n" + "\n".join(bad[:3])
    with snapvc.open(path) as repo:
        final = repo.fsck()
        assert final.ok, str(final)
        assert [c.message for c in repo.log("w0")][0] == f"w0 {COMMITS - 1}"


S3_WRITER = r'''
import sys
import snapvc
from tests.test_s3_gc_race import LOOP

url, name, commits = sys.argv[1], sys.argv[2], int(sys.argv[3])
with snapvc.open(url, gc_timing=LOOP) as repo:
    print("ready", flush=True)
    sys.stdin.readline()
    state = {"by": name, "log": []}
    for i in range(commits):
        state["log"].append(f"{name} wrote {i} " * 20)
        repo.commit(state, branch=name, message=f"{name} {i}")
        if i % 3 == 2:
            repo.commit({"scratch": f"{name} scratch {i} " * 200}, branch=f"{name}-scratch")
            repo.delete_branch(f"{name}-scratch")
print("done", flush=True)
'''

S3_COLLECTOR = r'''
import os, sys
import snapvc
from tests.test_s3_gc_race import LOOP

url, stop = sys.argv[1], sys.argv[2]
runs = 0
with snapvc.open(url, gc_timing=LOOP) as repo:
    while not os.path.exists(stop):
        repo.gc(grace=LOOP.min_grace, reflog_expiry=0)
        runs += 1
print(runs, flush=True)
'''


@pytest.mark.slow
def test_fsck_beside_writers_and_gc_on_s3_reports_no_problem(s3_url: str, tmp_path: Path) -> None:
    """As on SQLite, on S3 (no snapshot there: fsck's order of reads, refs first, and a
    ref read again before it is reported), with gc at its minimum grace beside."""
    from tests.test_s3_gc_race import LOOP, ROOT

    snapvc.open(s3_url).close()
    stop = tmp_path / "stop"
    writers = [subprocess.Popen([sys.executable, "-c", S3_WRITER, s3_url, f"w{n}", "15"], cwd=ROOT,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for n in range(WRITERS)]
    collector = subprocess.Popen([sys.executable, "-c", S3_COLLECTOR, s3_url, str(stop)], cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reports = []
    try:
        for w in writers:
            assert w.stdout is not None and w.stdout.readline() == "ready\n"
        for w in writers:
            assert w.stdin is not None
            w.stdin.write("go\n")
            w.stdin.flush()
        with snapvc.open(s3_url, gc_timing=LOOP) as repo:
            while any(w.poll() is None for w in writers):
                reports.append(repo.fsck())
    finally:
        stop.touch()
        for proc in (*writers, collector):
            if proc.poll() is None and proc is not collector:
                proc.wait(timeout=120)
    outputs = [w.communicate(timeout=120) for w in writers]
    gc_out, gc_err = collector.communicate(timeout=120)
    for w, (out, err) in zip(writers, outputs, strict=True):
        assert w.returncode == 0 and out.endswith("done\n"), err
    assert collector.returncode == 0 and int(gc_out) > 0, gc_err
    assert len(reports) >= 3, "fsck ran too few times beside the writers to show anything"
    bad = [str(r) for r in reports if not r.ok]
    assert not bad, f"{len(bad)} of {len(reports)} fsck runs beside live writers reported problems:\n" + "\n".join(bad[:3])
