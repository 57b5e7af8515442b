"""The ``snapvc`` command under bad conditions, run for real in subprocesses: missing
folders, full devices, closed pipes and descriptors, paths that are pipes, devices, empty
or foreign files, numbers past any limit. Every case ends in ``snapvc: error: ...`` (or
click's usage error) with exit status 2 and no traceback, except a closed output pipe,
which ends quietly with 141 as git does; and nothing that was not a repository becomes
one."""

from __future__ import annotations

import os
import resource
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import snapvc
from snapvc.cli.main import EXIT_OUTPUT_CLOSED

HUGE = "99999999999999999999"  # past a signed 64-bit integer


def run(*args: str, cwd: Path, timeout: float = 60, **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SNAPVC_REPO"}
    env["SNAPVC_CEILING_DIRECTORIES"] = str(cwd.parent)
    if "stdout" not in kwargs and "stderr" not in kwargs:
        kwargs["capture_output"] = True
    return subprocess.run([sys.executable, "-m", "snapvc", *args], text=True, cwd=cwd, timeout=timeout, env=env,
                          **kwargs)  # type: ignore[call-overload]


def refused(done: subprocess.CompletedProcess[str], *expected: str) -> None:
    """Exit 2 with a message holding each of ``expected``, and no traceback."""
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and "unexpected error" not in done.stderr, done.stderr
    for text in expected:
        assert text in done.stderr, (text, done.stderr)


@pytest.fixture
def repo_dir(tmp_path: Path) -> Path:
    """agent.snapvc: main with three commits, HEAD on main."""
    with snapvc.open(tmp_path / "agent.snapvc") as repo:
        for step in range(3):
            repo.commit({"step": step, "notes": [f"note {i}" for i in range(step + 1)]}, message=f"step {step}")
    return tmp_path


def long_history(path: Path) -> None:
    """Far more log output than a pipe holds (64 KiB), so the writer meets the closed end."""
    with snapvc.open(path) as repo:
        for step in range(150):
            repo.commit({"step": step}, message=f"step {step}: " + "details of the step " * 60)


# -- system errors become messages ------------------------------------------------------------


def test_checkout_into_a_missing_folder_names_the_file(repo_dir: Path) -> None:
    refused(run("checkout", "-o", "missing-folder/x.json", cwd=repo_dir),
            "snapvc: error: missing-folder/x.json: No such file or directory")
    assert not (repo_dir / "missing-folder").exists()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full, a device every write to fails with ENOSPC")
def test_a_full_device_is_an_error_not_a_traceback(repo_dir: Path) -> None:
    refused(run("checkout", "-o", "/dev/full", cwd=repo_dir), "snapvc: error: /dev/full: No space left on device")
    for command in (["log"], ["log", "--json"], ["log", "--oneline"], ["checkout"], ["show", "HEAD:notes"],
                    ["branch"], ["reflog"], ["diff", "main~2", "main", "--no-exit-code"],
                    ["diff", "main~2", "main", "--json", "--exit-code"]):  # exits 1: the output is still written first
        with open("/dev/full", "w") as full:
            done = run(*command, cwd=repo_dir, stdout=full, stderr=subprocess.PIPE)
        refused(done, "snapvc: error: standard output: No space left on device")
        assert "Exception ignored" not in done.stderr, command


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs sysfs, where even root may not create a file")
def test_no_permission_is_an_error_naming_the_file(repo_dir: Path) -> None:
    refused(run("checkout", "-o", "/sys/snapvc-state.json", cwd=repo_dir),
            "snapvc: error: /sys/snapvc-state.json: Permission denied")


@pytest.mark.slow
def test_bad_paths_for_every_command_that_writes_files(repo_dir: Path) -> None:
    (repo_dir / "a-file").write_text("not a folder\n")
    (repo_dir / "a-folder").mkdir()
    cases = [
        (["export-git", "a-file/sub"], "a-file/sub: Not a directory"),
        (["fsck", "--salvage", "a-file"], "'a-file' is a file"),
        (["fsck", "--salvage", "a-file/sub"], "a-file/sub: Not a directory"),
        (["checkout", "-o", "a-file/x.json"], "a-file/x.json: Not a directory"),
        (["checkout", "-o", "a-folder"], "'a-folder' is a directory"),
        (["clone", "agent.snapvc", "a-folder"], "'a-folder' is a folder"),
        (["clone", "agent.snapvc", "missing/x.snapvc"], "folder 'missing' does not exist",
         "hint: make the folder first"),
        (["init", "a-file/x.snapvc"], "'a-file' is a file, not a folder", "hint: make the folder first"),
        (["commit", "a-folder"], "cannot read a-folder"),
    ]
    for args, *expected in cases:
        refused(run(*args, cwd=repo_dir), *expected)
    assert (repo_dir / "a-file").read_text() == "not a folder\n"
    assert list((repo_dir / "a-folder").iterdir()) == []


@pytest.mark.slow
def test_numbers_past_every_limit(repo_dir: Path) -> None:
    refused(run("log", f"main@{{{HUGE}}}", cwd=repo_dir), f"main@{{{HUGE}}}: the reflog of refs/heads/main has only 3 entries")
    refused(run("checkout", f"main@{{{HUGE}}}", cwd=repo_dir), "has only 3 entries")
    everything = run("reflog", "-n", HUGE, cwd=repo_dir)
    assert everything.returncode == 0 and len(everything.stdout.splitlines()) == 3, everything.stderr
    refused(run("log", "--since", HUGE, cwd=repo_dir), "--since", "is not a time")
    refused(run("log", "--until", f"{HUGE} weeks ago", cwd=repo_dir), "--until", "is not a time")
    refused(run("gc", "--dry-run", "--grace", f"{HUGE}w", cwd=repo_dir), "--grace", "longer than a duration can be")


# -- closed pipes and descriptors -------------------------------------------------------------


@pytest.mark.parametrize("options", [[], ["--oneline"], ["--json"], ["--graph"]])
def test_a_reader_that_quits_early_ends_the_command_quietly(tmp_path: Path, options: list[str]) -> None:
    """``snapvc log | head -1``: no message, and the status a shell reports for git."""
    long_history(tmp_path / "agent.snapvc")
    env = {**os.environ, "SNAPVC_CEILING_DIRECTORIES": str(tmp_path.parent)}
    env.pop("SNAPVC_REPO", None)
    with subprocess.Popen([sys.executable, "-m", "snapvc", "log", *options], cwd=tmp_path, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()  # the reader quits, as head does
        errors = proc.stderr.read().decode()
        status = proc.wait(timeout=60)
    assert first.strip()
    assert errors == ""
    assert status == EXIT_OUTPUT_CLOSED == 141


def test_a_shell_pipeline_into_head(tmp_path: Path) -> None:
    long_history(tmp_path / "agent.snapvc")
    script = f"set -o pipefail; {sys.executable} -m snapvc log --oneline | head -n 2"
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SNAPVC_CEILING_DIRECTORIES": str(tmp_path.parent)})
    assert len(done.stdout.splitlines()) == 2 and done.stderr == ""
    assert done.returncode == 141  # as 'git log | head' under pipefail


@pytest.mark.slow
def test_closed_standard_descriptors(repo_dir: Path) -> None:
    """'>&-', '<&-': the repository file must not take the free number 1 and receive the
    output; a closed stdin is empty, not a crash."""
    for command in (["log"], ["checkout", "main"], ["branch", "fork"]):
        done = run(*command, cwd=repo_dir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                   preexec_fn=lambda: os.close(1))
        assert done.returncode == 0 and done.stderr == "", (command, done.stderr)
    with snapvc.open(repo_dir / "agent.snapvc", create=False) as repo:
        assert repo.fsck().ok and repo.checkout("fork")["step"] == 2
    closed_in = run("commit", "-m", "from nothing", cwd=repo_dir, stdin=subprocess.DEVNULL,
                    preexec_fn=lambda: os.close(0))
    refused(closed_in, "stdin is not JSON")


# -- what is not a repository stays as it is --------------------------------------------------


@pytest.mark.slow
def test_a_named_pipe_as_repository_is_refused_at_once(tmp_path: Path) -> None:
    with snapvc.open(tmp_path / "agent.snapvc") as repo:
        repo.commit({"a": 1})
    fifo = tmp_path / "pipe.snapvc"
    os.mkfifo(fifo)
    (tmp_path / "git-src").mkdir()
    subprocess.run(["git", "init", "-q", str(tmp_path / "git-src")], check=True)
    for args in (["log", "--repo", "pipe.snapvc"], ["import-git", "git-src", "--repo", "pipe.snapvc"],
                 ["clone", "pipe.snapvc", "copy.snapvc"], ["clone", "agent.snapvc", "pipe.snapvc"]):
        refused(run(*args, cwd=tmp_path, timeout=30), "'pipe.snapvc' is a named pipe, not a snapvc repository file")
    remote = run("remote", "add", "piped", "pipe.snapvc", "--repo", "agent.snapvc", cwd=tmp_path)
    assert remote.returncode == 0, remote.stderr
    refused(run("push", "piped", "--repo", "agent.snapvc", cwd=tmp_path, timeout=30), "is a named pipe")
    refused(run("log", "--repo", "/dev/null", cwd=tmp_path, timeout=30), "'/dev/null' is a device")


@pytest.mark.slow
def test_an_empty_file_is_not_made_a_repository(tmp_path: Path) -> None:
    empty = tmp_path / "empty.snapvc"
    empty.write_bytes(b"")
    bare = tmp_path / "bare.db"  # an SQLite database with no tables and no application id
    conn = sqlite3.connect(bare)
    conn.execute("PRAGMA user_version = 7")
    conn.commit()
    conn.close()
    bare_bytes = bare.read_bytes()
    for command in (["log"], ["branch"], ["commit", "-m", "x"], ["gc"], ["fsck"]):
        refused(run(*command, "--repo", "empty.snapvc", cwd=tmp_path, input="{}"),
                "'empty.snapvc' is an empty file, not a snapvc repository")
        refused(run(*command, "--repo", "bare.db", cwd=tmp_path, input="{}"),
                "'bare.db' is an empty SQLite database, not a snapvc repository")
    assert empty.read_bytes() == b"" and bare.read_bytes() == bare_bytes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bare.db", "empty.snapvc"]  # no -wal, no -shm
    with pytest.raises(snapvc.NotARepositoryError, match="empty file"):
        snapvc.open(empty, create=False)
    with snapvc.open(empty) as repo:  # asked to create: an empty file holds nothing to lose
        repo.commit({"a": 1})
    with snapvc.open(empty, create=False) as repo:
        assert repo.checkout("main") == {"a": 1}


# -- files written whole ----------------------------------------------------------------------


def test_checkout_output_replaces_a_file_whole(repo_dir: Path) -> None:
    target = repo_dir / "state.json"
    target.write_text("the old state\n")
    target.chmod(0o640)
    link = repo_dir / "link.json"
    link.symlink_to("state.json")
    done = run("checkout", "main~1", "-o", "link.json", cwd=repo_dir)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and '"step": 1' in target.read_text()
    assert target.stat().st_mode & 0o777 == 0o640  # replacing keeps the permissions
    assert sorted(p.name for p in repo_dir.iterdir() if p.name.startswith(".")) == []  # no temporary left


def _limit_file_size(limit: int) -> None:
    # Writes past ``limit`` bytes fail with EFBIG, as on a full disk; SIGXFSZ ignored so
    # the failure is an error the command sees rather than a signal that kills it.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_failed_checkout_output_leaves_the_old_file_intact(tmp_path: Path) -> None:
    with snapvc.open(tmp_path / "agent.snapvc") as repo:
        repo.commit({"doc": [f"paragraph {i}: " + "words " * 40 for i in range(400)]}, message="big")
    target = tmp_path / "state.json"
    old = "the old state, which must survive\n" * 200
    target.write_text(old)
    done = run("checkout", "-o", "state.json", cwd=tmp_path, preexec_fn=lambda: _limit_file_size(32 << 10))
    assert target.read_text() == old
    refused(done, "snapvc: error: state.json: File too large")
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".tmp") == []


@pytest.mark.slow
def test_a_failed_salvage_leaves_the_older_files_intact(tmp_path: Path) -> None:
    with snapvc.open(tmp_path / "agent.snapvc") as repo:
        for step in range(120):
            repo.commit({"step": step}, message=f"step {step}: " + "what happened " * 60)
    out = tmp_path / "saved"
    out.mkdir()
    older = '{"an older index": true}\n' * 100
    (out / "index.json").write_text(older)
    # Each state is small; the index of 120 commits is not.
    done = run("fsck", "--salvage", "saved", cwd=tmp_path, preexec_fn=lambda: _limit_file_size(64 << 10))
    assert (out / "index.json").read_text() == older
    refused(done, "saved/index.json: File too large")
    assert len(list(out.glob("*.json"))) == 121 and not list(out.glob(".*"))
    whole = run("fsck", "--salvage", "saved", cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    assert (out / "index.json").read_text().count('"saved": true') == 120


# -- errors say what was wrong ----------------------------------------------------------------


def test_deleting_heads_branch_says_why(repo_dir: Path) -> None:
    done = run("branch", "-d", "main", cwd=repo_dir)
    refused(done, "cannot delete branch 'main': HEAD is on it; check out another branch first")
    assert "already exists" not in done.stderr and "-f" not in done.stderr


@pytest.mark.slow
def test_missing_branches_are_named_with_what_needed_them(repo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    other = tmp_path_factory.mktemp("other") / "other.snapvc"
    snapvc.open(other).close()
    assert run("remote", "add", "origin", str(other), cwd=repo_dir).returncode == 0
    refused(run("push", "origin", "nope", cwd=repo_dir), "cannot push 'nope': there is no such branch here")
    refused(run("fetch", "origin", "nope", cwd=repo_dir), "has no branch 'nope'")
    refused(run("merge", "main~1", "--into", "nope", cwd=repo_dir), "cannot merge into 'nope': there is no such branch")
    refused(run("cherry-pick", "main", "--onto", "nope", cwd=repo_dir), "branch 'nope' does not exist, or has no commit yet")
