"""Moving a format 1 or 2 file to format 3 (``snapvc upgrade``, ``Repository.upgrade``).

The fixtures of each old format (copied first) upgrade and read back the same history;
a second upgrade changes nothing; a process that had the file open at the old format is
told to open it again and cannot write into the old tables; and a SIGKILL at any instant
of an upgrade leaves the file wholly at its old format or wholly at 3, whole either way.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import snapvc
from snapvc.errors import RepositoryError, UnsupportedOperationError
from tests.fixtures.make_fixtures import fixture_states

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ROOT = Path(__file__).resolve().parent.parent


def stored_format(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        (value,) = conn.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
        return int(value)
    finally:
        conn.close()


def tables(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()


def picture(repo: snapvc.Repository) -> dict[str, Any]:
    """Everything a reader sees: every branch's log with each commit's state, the refs
    and the reflog of main."""
    out: dict[str, Any] = {"branches": repo.branches(), "tags": repo.tags(), "logs": {}}
    for name in repo.branches():
        out["logs"][name] = [(c.id, c.message, c.metadata, c.parents, repo.checkout(c.id)) for c in repo.log(name)]
    out["reflog"] = [(e.old, e.new, e.reason) for e in repo.reflog("refs/heads/main")]
    return out


@pytest.fixture(params=[1, 2])
def old_copy(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Path, int]:
    target = tmp_path / f"v{request.param}.snapvc"
    shutil.copy(FIXTURES / f"v{request.param}.snapvc", target)
    return target, request.param


def test_old_fixtures_upgrade_and_read_back_the_same(old_copy: tuple[Path, int]) -> None:
    path, version = old_copy
    with snapvc.open(path, create=False) as repo:
        before = picture(repo)
    size_before = path.stat().st_size
    with snapvc.open(path, create=False) as repo:
        result = repo.upgrade()
        assert (result.old_format, result.new_format) == (version, 3)
        assert result.objects > 100
        # This repository object goes on in the new format, without reopening.
        assert picture(repo) == before
        repo.commit({"after": "upgrade"}, branch="main", message="after")
    size_after = path.stat().st_size
    print(f"v{version}: {size_before:,} bytes before the upgrade, {size_after:,} after")
    assert stored_format(path) == 3
    assert "objects" not in tables(path) and "dictionaries" not in tables(path) and "packs" in tables(path)
    assert size_after < size_before
    with snapvc.open(path, create=False) as repo:
        assert repo.fsck().ok
        assert repo.checkout("main") == {"after": "upgrade"}
        assert repo.checkout("main~1") == fixture_states()[-1]
        after = picture(repo)
        assert after["logs"]["side"] == before["logs"]["side"]
        assert after["logs"]["main"][1:] == before["logs"]["main"]
        conn = repo.backend.file.conn  # type: ignore[attr-defined]
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # INCREMENTAL
        assert conn.execute("PRAGMA page_size").fetchone()[0] == 4096


def test_a_file_at_format_3_is_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "new.snapvc"
    with snapvc.open(path) as repo:
        repo.commit({"a": 1}, message="one")
    data = path.read_bytes()
    with snapvc.open(path, create=False) as repo:
        result = repo.upgrade()
        assert (result.old_format, result.new_format, result.objects, result.changed) == (3, 3, 0, False)
        assert "already" in str(result)
    assert path.read_bytes() == data


def test_memory_has_nothing_to_upgrade() -> None:
    with snapvc.open("memory://") as repo, pytest.raises(UnsupportedOperationError, match="nothing to upgrade"):
        repo.upgrade()


def test_a_process_still_at_the_old_format_is_told_to_reopen(old_copy: tuple[Path, int]) -> None:
    path, version = old_copy
    stale = snapvc.open(path, create=False)
    expected = stale.checkout("main")
    tip = stale.resolve("main")
    with snapvc.open(path, create=False) as repo:
        repo.upgrade()
    # Its next read or write of objects names the upgrade; nothing it tries lands.
    with pytest.raises(RepositoryError, match="upgraded to format 3 by another process.*open it again"):
        stale.commit({"new": list(range(100))}, branch="main", message="stale")
    with pytest.raises(RepositoryError, match="upgraded to format 3 by another process"):
        stale.store.has_many([tip])
    with pytest.raises(RepositoryError):  # a ref move alone: the old reflog's rows no longer fit
        stale.branch("from-stale", at=tip)
    stale.close()
    assert stored_format(path) == 3
    with snapvc.open(path, create=False) as repo:
        assert repo.resolve("main") == tip
        assert "from-stale" not in repo.branches()
        assert repo.checkout("main") == expected
        assert repo.fsck().ok


def test_cli_upgrade_text_and_json(old_copy: tuple[Path, int]) -> None:
    path, version = old_copy
    run = [sys.executable, "-m", "snapvc", "upgrade", "--repo", str(path)]
    first = subprocess.run([*run, "--json"], capture_output=True, text=True, cwd=ROOT)
    assert first.returncode == 0, first.stderr
    data = json.loads(first.stdout)
    assert (data["old_format"], data["new_format"], data["upgraded"]) == (version, 3, True)
    assert data["bytes_after"] < data["bytes_before"]
    again = subprocess.run(run, capture_output=True, text=True, cwd=ROOT)
    assert again.returncode == 0, again.stderr
    assert "at format 3 already; nothing to upgrade" in again.stdout
    memory = subprocess.run([sys.executable, "-m", "snapvc", "upgrade", "--repo", "memory://"], capture_output=True,
                            text=True, cwd=ROOT)
    assert memory.returncode == 2 and "nothing to upgrade" in memory.stderr


# -- a SIGKILL at any instant --------------------------------------------------------------

_UPGRADE = """
import sys, snapvc
with snapvc.open(sys.argv[1], create=False) as repo:
    repo.upgrade()
"""


@pytest.fixture(scope="module")
def larger_v2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A format 2 file of a few MB: long enough an upgrade to be killed in all its steps."""
    path = tmp_path_factory.mktemp("larger") / "v2.snapvc"
    rng = random.Random(7)
    with snapvc.open(path, format=2) as repo:  # type: ignore[call-arg]
        messages: list[str] = []
        for step in range(120):
            messages.append(" ".join(rng.choice(["plan", "read", "tool", "result", "answer", "why"])
                                     for _ in range(60)) + f" {step}")
            repo.commit({"messages": list(messages), "blob": rng.randbytes(4096), "step": step},
                        message=f"step {step}", metadata={"step": step})
            if step == 60:
                repo.branch("side", at="main")
        repo.tag("t", at="main~10")
    assert stored_format(path) == 2
    return path


@pytest.mark.slow
def test_sigkill_at_random_instants_of_an_upgrade(larger_v2: Path, tmp_path: Path) -> None:
    with snapvc.open(larger_v2, create=False) as repo:
        before = picture(repo)
    # How long a whole upgrade takes here: the kills land anywhere in it.
    timing = tmp_path / "timing.snapvc"
    shutil.copy(larger_v2, timing)
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", _UPGRADE, str(timing)], check=True, cwd=ROOT)
    whole = time.monotonic() - started
    rng = random.Random(2024)
    seen = set()
    for i in range(14):
        path = tmp_path / f"kill{i}.snapvc"
        shutil.copy(larger_v2, path)
        child = subprocess.Popen([sys.executable, "-c", _UPGRADE, str(path)], cwd=ROOT)
        time.sleep(rng.uniform(0.0, whole))
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        with snapvc.open(path, create=False) as repo:
            fmt = repo.backend.file.format  # type: ignore[attr-defined]
            assert fmt in (2, 3)
            seen.add(fmt)
            assert repo.fsck().ok, f"kill {i} at format {fmt}"
            assert picture(repo) == before, f"kill {i} at format {fmt}"
            # An upgrade after the kill finishes the job.
            repo.upgrade()
            assert picture(repo) == before
    print(f"a whole upgrade took {whole:.2f}s; formats after the kills: {sorted(seen)}")
