"""Repositories this process may not write: on a read-only file system (a backup
snapshot, a read-only mount), or files and folders the user may not write. Everything
reads (log, show, checkout, diff, fsck; the library as the command line); every write is
refused with an error saying the repository is read-only and why, and changes nothing.
Where SQLite cannot make the ``-shm`` file it reads a write-ahead log with, a log holding
commits is refused with that reason, never read past (which would show an older state).

A read-only file system is a read-only bind mount made in a mount namespace of the test's
own (``unshare``: nothing is mounted outside it, even if the test dies); a file the user
may not write is one root reads through util-linux's ``setpriv`` without the capability
that lets it write whatever the mode (CAP_DAC_OVERRIDE), as tests/test_hostile.py does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import snapvc
from tests.privileges import without_root_file_access

pytestmark = pytest.mark.slow  # every test runs the command line in subprocesses

# Run inside the namespace: each command line given (JSON), its exit status and output.
_DRIVER = """
import json, subprocess, sys
out = []
for args in json.loads(sys.argv[1]):
    done = subprocess.run([sys.executable, "-m", "snapvc", *args], capture_output=True, text=True, timeout=60)
    out.append([done.returncode, done.stdout, done.stderr])
print(json.dumps(out))
"""

_MOUNT_READ_ONLY = 'mount --bind "$1" "$2" && mount -o remount,ro,bind "$2" && shift 2 && exec "$@"'


def _read_only_mount(source: Path, where: Path) -> list[str]:
    """The command prefix that runs a command with ``source`` mounted read-only at ``where``."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("util-linux's unshare (a mount namespace for a read-only mount) is not installed")
    probe = subprocess.run([unshare, "-rm", "sh", "-c", _MOUNT_READ_ONLY, "sh", str(source), str(where), "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"this system allows no read-only bind mount in a mount namespace: {probe.stderr.strip()}")
    return [unshare, "-rm", "sh", "-c", _MOUNT_READ_ONLY, "sh", str(source), str(where)]


def _cli(prefix: list[str], *commands: list[str]) -> list[tuple[int, str, str]]:
    done = subprocess.run([*prefix, sys.executable, "-c", _DRIVER, json.dumps(commands)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [tuple(r) for r in json.loads(done.stdout)]  # type: ignore[misc]


def _history(path: Path) -> None:
    with snapvc.open(path) as repo:
        repo.commit({"a": 1, "items": list(range(50))}, message="one")
        repo.commit({"a": 2, "items": list(range(60))}, message="two")


def _read_and_write(prefix: list[str], repo: Path) -> None:
    """Reads through the command line work; a commit is refused, saying why."""
    state = repo.parent / "state.json"
    log, show, checkout, diff, fsck, commit = _cli(
        prefix, ["log", "--oneline", "--repo", str(repo)], ["show", "--repo", str(repo)],
        ["checkout", "main", "--repo", str(repo)], ["diff", "main~1", "main", "--repo", str(repo)],
        ["fsck", "--repo", str(repo)], ["commit", str(state), "--repo", str(repo)])
    for status, _, err in (log, show, checkout, diff, fsck):
        assert status == 0 and "Traceback" not in err, err
    assert "two" in show[1] and "items" in diff[1] and "no problems" in fsck[1], (show, diff, fsck)
    assert [line.rsplit(" ", 1)[1] for line in log[1].splitlines()] == ["two", "one"]
    assert json.loads(checkout[1]) == {"a": 2, "items": list(range(60))}
    status, _, err = commit
    assert status == 2 and "read-only" in err and str(repo) in err and "Traceback" not in err, err


def test_a_repository_on_a_read_only_file_system_is_read_and_refuses_writes(tmp_path: Path) -> None:
    source, where = tmp_path / "disk", tmp_path / "mounted"
    source.mkdir(), where.mkdir()
    _history(source / "r.snapvc")
    (source / "state.json").write_text('{"a": 3}')
    before = {p.name: p.read_bytes() for p in source.iterdir()}
    prefix = _read_only_mount(source, where)
    _read_and_write(prefix, where / "r.snapvc")
    # The library the same way: the reason is named, and closing after a refused write is quiet.
    library = subprocess.run([*prefix, sys.executable, "-c", """
import sys, snapvc
with snapvc.open(sys.argv[1]) as repo:
    assert repo.checkout("main")["a"] == 2 and len(list(repo.log())) == 2
    assert not repo.fsck().problems
    try:
        repo.commit({"a": 3})
    except snapvc.RepositoryError as exc:
        print(exc)
""", str(where / "r.snapvc")], capture_output=True, text=True, timeout=60)
    assert library.returncode == 0 and library.stderr == "", library.stderr
    assert "read-only file system" in library.stdout and "not written" in library.stdout, library.stdout
    assert {p.name: p.read_bytes() for p in source.iterdir()} == before  # nothing made, nothing changed


def _snapshot_while_open(source: Path, *ends: str) -> None:
    """Copy r.snapvc as a backup would while a writer holds it open, its last commits still
    in the write-ahead log: with the files ending in ``ends`` beside it."""
    path = source / "writer" / "r.snapvc"
    path.parent.mkdir()
    repo = snapvc.open(path)
    repo.commit({"a": 1, "items": list(range(50))}, message="one")
    repo.commit({"a": 2, "items": list(range(60))}, message="two")
    assert os.path.getsize(f"{path}-wal") > 0  # the commits are in the log, not yet in the file
    for end in ("", *ends):
        shutil.copyfile(f"{path}{end}", source / f"r.snapvc{end}")
    repo.close()
    (source / "state.json").write_text('{"a": 3}')


def test_a_read_only_snapshot_with_its_log_reads_the_logged_commits(tmp_path: Path) -> None:
    source, where = tmp_path / "disk", tmp_path / "mounted"
    source.mkdir(), where.mkdir()
    _snapshot_while_open(source, "-wal", "-shm")
    _read_and_write(_read_only_mount(source, where), where / "r.snapvc")


def test_a_log_that_cannot_be_read_on_a_read_only_file_system_is_refused_with_the_reason(tmp_path: Path) -> None:
    source, where = tmp_path / "disk", tmp_path / "mounted"
    source.mkdir(), where.mkdir()
    _snapshot_while_open(source, "-wal")  # without -shm, which SQLite cannot make there
    [(status, _, err)] = _cli(_read_only_mount(source, where), ["log", "--repo", str(where / "r.snapvc")])
    assert status == 2 and "Traceback" not in err, err
    assert "write-ahead log" in err and "read-only file system" in err and "not a snapvc repository" not in err, err


def test_a_repository_the_user_may_not_write_is_read_and_refuses_writes(tmp_path: Path) -> None:
    folder = tmp_path / "theirs"
    folder.mkdir()
    _history(folder / "r.snapvc")
    (folder / "state.json").write_text('{"a": 3}')
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    (folder / "r.snapvc").chmod(0o444)
    folder.chmod(0o555)
    try:
        probe = subprocess.run(without_root_file_access(["touch", str(folder / "probe")]), capture_output=True)
        assert probe.returncode != 0, "the folder is still writable: the test would prove nothing"
        _read_and_write(without_root_file_access([]), folder / "r.snapvc")
        # Creating a repository there says why it cannot.
        done = subprocess.run(without_root_file_access([sys.executable, "-m", "snapvc", "init", str(folder / "new.snapvc")]),
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "may not be written" in done.stderr, done.stderr
    finally:
        folder.chmod(0o755)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
