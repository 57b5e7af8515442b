"""Which repository ``snapvc`` uses without ``--repo``: the nearest ``*.snapvc`` above the
working folder, but only one the user owns, in a folder other users cannot write to.
Another user's repository planted in a shared parent (a sticky ``/tmp``, a shared project
folder) is refused with a message saying how to trust it, and receives nothing; named
with ``--repo`` or listed in ``SNAPVC_SAFE_DIRECTORIES``, it is used (as git's
``safe.directory``).

The tests run as root (as in CI) and as an unprivileged user: root's planted repository
is chowned to ``nobody``; the unprivileged user is ``nobody`` run through util-linux's
``setpriv``, keeping only CAP_DAC_READ_SEARCH (read and search, never write) so that it
can reach the Python interpreter and the test's folders below root's home."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import snapvc

pytestmark = pytest.mark.slow  # every test runs the command line in subprocesses

NOBODY = 65534


def snapvc_cli(*args: str, cwd: Path, env: dict[str, str] | None = None,
               as_nobody: bool = False) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k not in ("SNAPVC_REPO", "SNAPVC_SAFE_DIRECTORIES", "SUDO_UID")}
    full_env.update(env or {})
    command = [sys.executable, "-m", "snapvc", *args]
    if as_nobody:
        command = [_setpriv(), f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                   "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", *command]
    return subprocess.run(command, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=60)


def _setpriv() -> str:
    found = shutil.which("setpriv")
    if found is None:
        pytest.skip("util-linux's setpriv (to run as another user) is not installed")
    return found


def _commits(path: Path) -> int:
    with snapvc.open(path, create=False) as repo:
        return sum(1 for _ in repo.log("main")) if "main" in repo.branches() else 0


def _refused(done: subprocess.CompletedProcess[str], planted: Path, *expected: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    for text in (str(planted), "--repo", "SNAPVC_SAFE_DIRECTORIES", *expected):
        assert text in done.stderr, (text, done.stderr)


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A folder every user may write to, sticky, as /tmp is."""
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o1777)
    return folder


def _plant(folder: Path, owner: int) -> Path:
    """A repository with one commit, owned by ``owner`` and writable by everyone (so that
    a commit through it would land, were it used)."""
    planted = folder / "planted.snapvc"
    with snapvc.open(planted) as repo:
        repo.commit({"planted": True}, message="planted")
    planted.chmod(0o666)
    os.chown(planted, owner, owner)
    return planted


@pytest.mark.skipif(os.geteuid() != 0, reason="planting a repository owned by another user takes root")
def test_a_repository_another_user_planted_above_is_refused_and_receives_nothing(shared: Path, tmp_path: Path) -> None:
    planted = _plant(shared, NOBODY)
    work = shared / "mine" / "deep"
    work.mkdir(parents=True)
    (work / "state.json").write_text(json.dumps({"secret": "api-key"}))
    ceiling = {"SNAPVC_CEILING_DIRECTORIES": str(tmp_path)}

    done = snapvc_cli("commit", "state.json", "-m", "mine", cwd=work, env=ceiling)
    _refused(done, planted, "owned by another user", f"uid {NOBODY}")
    for reading in (["log"], ["show"], ["fsck"], ["checkout"]):
        _refused(snapvc_cli(*reading, cwd=work, env=ceiling), planted)
    assert _commits(planted) == 1

    # Named, or trusted (the file, or its folder), it is used.
    assert snapvc_cli("log", "--repo", str(planted), cwd=work, env=ceiling).returncode == 0
    for trusted in (str(planted), str(shared), f"/nowhere{os.pathsep}*"):
        done = snapvc_cli("log", "--oneline", cwd=work, env={**ceiling, "SNAPVC_SAFE_DIRECTORIES": trusted})
        assert done.returncode == 0 and "planted" in done.stdout, (trusted, done.stderr)
    # Another folder trusted is no trust of this one.
    _refused(snapvc_cli("log", cwd=work, env={**ceiling, "SNAPVC_SAFE_DIRECTORIES": str(work)}), planted)


@pytest.mark.skipif(os.geteuid() != 0, reason="planting a repository owned by another user takes root")
def test_a_link_another_user_planted_to_ones_own_repository_is_refused(shared: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine.snapvc"
    snapvc.open(mine).close()
    link = shared / "link.snapvc"
    link.symlink_to(mine)
    os.chown(link, NOBODY, NOBODY, follow_symlinks=False)
    work = shared / "work"
    work.mkdir()
    done = snapvc_cli("log", cwd=work, env={"SNAPVC_CEILING_DIRECTORIES": str(tmp_path)})
    _refused(done, link, "owned by another user")


def test_ones_own_repository_in_a_folder_everyone_may_write_is_refused_unless_trusted(shared: Path,
                                                                                      tmp_path: Path) -> None:
    # There another user could replace the file, or plant the -wal file SQLite reads beside it.
    own = shared / "own.snapvc"
    with snapvc.open(own) as repo:
        repo.commit({"n": 1}, message="own")
    work = shared / "work"
    work.mkdir()
    ceiling = {"SNAPVC_CEILING_DIRECTORIES": str(tmp_path)}
    _refused(snapvc_cli("log", cwd=work, env=ceiling), own, "every user may write")
    assert snapvc_cli("log", cwd=work, env={**ceiling, "SNAPVC_SAFE_DIRECTORIES": str(own)}).returncode == 0
    # In a folder only its owner writes, found by searching, it is used as ever.
    private = tmp_path / "private"
    (private / "work").mkdir(parents=True)
    with snapvc.open(private / "p.snapvc") as repo:
        repo.commit({"n": 1}, message="private")
    done = snapvc_cli("log", "--oneline", cwd=private / "work", env=ceiling)
    assert done.returncode == 0 and "private" in done.stdout, done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="running as another user takes root")
def test_an_unprivileged_user_is_not_given_roots_planted_repository(shared: Path, tmp_path: Path) -> None:
    planted = _plant(shared, 0)
    work = shared / "nobody"
    work.mkdir()
    (work / "state.json").write_text(json.dumps({"mine": 1}))
    os.chown(work, NOBODY, NOBODY)
    os.chown(work / "state.json", NOBODY, NOBODY)
    ceiling = {"SNAPVC_CEILING_DIRECTORIES": str(tmp_path)}

    done = snapvc_cli("commit", "state.json", "-m", "mine", cwd=work, env=ceiling, as_nobody=True)
    _refused(done, planted, "owned by another user", "uid 0", f"uid {NOBODY}")
    assert _commits(planted) == 1
    # The user's own repository below is found and used.
    done = snapvc_cli("init", "own.snapvc", cwd=work, env=ceiling, as_nobody=True)
    assert done.returncode == 0, done.stderr
    done = snapvc_cli("commit", "state.json", "-m", "mine", cwd=work, env=ceiling, as_nobody=True)
    assert done.returncode == 0, done.stderr
    assert _commits(work / "own.snapvc") == 1 and _commits(planted) == 1
