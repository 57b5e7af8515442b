"""fsck beside live writers and a gc reports a healthy repository as healthy: it reads
everything it checks (objects, commit index, refs, reflog, settings) from one consistent
read, so a ref that moved, or a commit a gc swept, while it read is never reported as
damage."""

from __future__ import annotations

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
ROOT = Path(__file__).resolve().parents[1]

# Each writer commits to its own branch, and every few commits to a scratch branch it
# deletes again (garbage for the gc beside, and reflog entries the gc expires). On S3 the
# writers and the gc use the loop's shrunk bounds, and the gc its minimum grace.
WRITER = r"""
import os, sys, time
import snapvc
from tests.test_s3_gc_race import LOOP

location, name, commits, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
with snapvc.open(location, **({"gc_timing": LOOP} if location.startswith("s3://") else {})) as repo:
    while not os.path.exists(go):
        time.sleep(0.001)
    state = {"by": name, "log": []}
    for i in range(commits):
        state["log"].append(f"{name} wrote {i} " * 20)
        repo.commit(state, branch=name, message=f"{name} {i}")
        if i % 3 == 2:
            repo.commit({"scratch": f"{name} scratch {i} " * 200}, branch=f"{name}-scratch")
            repo.delete_branch(f"{name}-scratch")
print(commits)
"""

COLLECTOR = r"""
import os, sys
import snapvc
from tests.test_s3_gc_race import LOOP

location, stop = sys.argv[1], sys.argv[2]
s3 = location.startswith("s3://")
runs = 0
with snapvc.open(location, **({"gc_timing": LOOP} if s3 else {})) as repo:
    while not os.path.exists(stop):
        repo.gc(grace=LOOP.min_grace if s3 else 0, reflog_expiry=0)
        runs += 1
print(runs)
"""


def _start(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _printed(proc: subprocess.Popen[str]) -> int:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return int(out)


def _fsck_beside_writers_and_gc(location: str, tmp_path: Path, commits: int, **options: Any) -> None:
    """fsck in a loop while WRITERS writer processes commit ``commits`` times each and a
    gc process sweeps in a loop: every report is clean, and so is one after."""
    go, stop = tmp_path / "go", tmp_path / "stop"
    writers = [_start(WRITER, location, f"w{n}", str(commits), str(go)) for n in range(WRITERS)]
    collector = _start(COLLECTOR, location, str(stop))
    reports = []
    try:
        with snapvc.open(location, **options) as repo:
            go.touch()
            while any(w.poll() is None for w in writers):
                reports.append(repo.fsck())
    finally:
        stop.touch()
        go.touch()
    assert [_printed(w) for w in writers] == [commits] * WRITERS
    assert _printed(collector) > 0, "no gc ran beside the writers: the test shows nothing"
    assert len(reports) >= 3, "fsck ran too few times beside the writers to show anything"
    bad = [str(r) for r in reports if not r.ok]
    assert not bad, f"{len(bad)} of {len(reports)} fsck runs beside live writers reported problems:\n" + "\n".join(bad[:3])
    with snapvc.open(location, **options) as repo:
        final = repo.fsck()
        assert final.ok, str(final)
        assert [c.message for c in repo.log("w0")][0] == f"w0 {commits - 1}"


@pytest.mark.slow
def test_fsck_beside_writers_and_gc_reports_no_problem(tmp_path: Path) -> None:
    path = tmp_path / "live.snapvc"
    with snapvc.open(path) as repo:
        repo.commit({"start": True}, message="start")
    _fsck_beside_writers_and_gc(str(path), tmp_path, commits=60)


@pytest.mark.slow
def test_fsck_beside_writers_and_gc_on_s3_reports_no_problem(s3_url: str, tmp_path: Path) -> None:
    """As on SQLite, on S3 (no snapshot there: fsck's order of reads, refs first, and a
    ref read again before it is reported), with gc at its minimum grace beside."""
    from tests.test_s3_gc_race import LOOP

    snapvc.open(s3_url).close()
    _fsck_beside_writers_and_gc(s3_url, tmp_path, commits=15, gc_timing=LOOP)
