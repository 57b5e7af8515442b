"""snapvc history as a git repository and back, checked with the real ``git``: the
export is a sound repository (``git fsck --strict``), its files read as the states,
``git diff`` names exactly the changed paths, exports are deterministic and
incremental, an import rebuilds every commit to its id, and a push reaches a bare
repository and a ``git daemon`` on 127.0.0.1."""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snapvc
from snapvc.maintenance.git.layout import TreeWriter, escape_key, state_of, unescape_key
from tests.test_cli import run

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="the git command checks what is exported")


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd)})
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


def ticking_clock(start: float = 1_763_900_000.25) -> object:
    """A clock that moves 1.5 s per call (fractions of seconds included)."""
    counter = itertools.count()
    return lambda: start + 1.5 * next(counter)


def agent_history(repo: snapvc.Repository) -> None:
    """main: three steps; try-b forks after the first and merges back; tag v1."""
    state = {"messages": [{"role": "user", "content": "compare the sources"}],
             "scratchpad": {"plan": "search", "notes": "line one\nline two\n"},
             "findings": [], "blob": b"\x00\x01", "pair": (1, 2.5), "odd keys": {"a.b": 1, "": 2, "#x": 3, "c/d": 4}}
    repo.commit(state, message="step 1", metadata={"step": 1, "agent": "researcher"})
    repo.branch("try-b")
    state["messages"].append({"role": "assistant", "content": "searching " * 20})
    state["scratchpad"]["plan"] = "read"
    repo.commit(state, message="step 2", metadata={"step": 2, "usage": {"tokens": 120}})
    repo.tag("v1")
    state["findings"].append("the sources agree")
    state["scratchpad"]["notes"] += "line three\n"
    repo.commit(state, message="step 3\n", metadata={"step": 3})
    b = repo.checkout("try-b")
    b["scratchpad"]["source"] = "web"
    repo.commit(b, branch="try-b", message="", metadata={"step": 2, "branch": "b"})
    repo.merge("try-b", into="main", message="Merge try-b")
    repo.switch("main")


@pytest.fixture
def repo(tmp_path: Path) -> snapvc.Repository:
    with snapvc.open(tmp_path / "agent.snapvc", clock=ticking_clock(), author="Ada <ada@example.org>") as repo:
        agent_history(repo)
        yield repo


def test_the_export_is_a_sound_git_repository_holding_the_states(repo: snapvc.Repository, tmp_path: Path) -> None:
    result = repo.export_git(tmp_path / "out.git")
    out = tmp_path / "out.git"
    assert result.commits == 5 and set(result.refs) == {"refs/heads/main", "refs/heads/try-b", "refs/tags/v1"}
    assert git("fsck", "--strict", "--no-dangling", cwd=out) == ""
    assert len(git("log", "--oneline", "--all", cwd=out).splitlines()) == len(list(repo.log(["main", "try-b"])))
    assert git("show", "main:scratchpad/plan.json", cwd=out) == '"read"\n'
    assert git("show", "main:scratchpad/notes.txt", cwd=out) == "line one\nline two\nline three\n"
    assert git("show", "main:messages/#000001/content.txt", cwd=out) == "searching " * 20
    assert git("show", "main:blob.bin", cwd=out) == "\x00\x01"
    assert set(git("ls-tree", "--name-only", "main:odd keys", cwd=out).split("\n")) == {
        "a%2Eb.json", "%.json", "%23x.json", "c%2Fd.json", ""}
    assert git("symbolic-ref", "HEAD", cwd=out).strip() == "refs/heads/main"
    merge = git("cat-file", "-p", "main", cwd=out)
    assert merge.count("\nparent ") == 2 and "author Ada <ada@example.org> " in merge
    trailers = git("log", "-1", "--format=%(trailers:only)", "main~1", cwd=out)  # step 3
    assert 'Snapvc-Metadata: {"step":3}' in trailers
    assert f"Snapvc-Commit: {repo.resolve('main~1').hex}" in trailers


def test_git_diff_names_exactly_the_changed_paths(repo: snapvc.Repository, tmp_path: Path) -> None:
    repo.export_git(tmp_path / "out.git")
    names = git("diff", "--name-only", "v1", "main~1", cwd=tmp_path / "out.git").split()
    assert names == ["findings.json", "scratchpad/notes.txt"]
    assert repo.diff("v1", "main~1", paths="findings") and len(repo.diff("v1", "main~1")) == 2
    names = git("diff", "--name-only", "main~3", "v1", cwd=tmp_path / "out.git").split()
    assert names == ["messages/#000001/content.txt", "messages/#000001/role.json", "scratchpad/plan.json"]


def test_exports_are_deterministic_and_incremental(repo: snapvc.Repository, tmp_path: Path) -> None:
    first = repo.export_git(tmp_path / "one.git")
    assert repo.export_git(tmp_path / "two.git").refs == first.refs  # another target, the same ids
    with snapvc.open("memory://", clock=ticking_clock(), author="Ada <ada@example.org>") as again:
        agent_history(again)  # the same history built again elsewhere
        assert again.export_git(tmp_path / "three.git").refs == first.refs
    nothing = repo.export_git(tmp_path / "one.git")
    assert (nothing.commits, nothing.objects) == (0, 0) and nothing.refs == first.refs
    state = repo.checkout("main")
    for i in range(3):
        state["findings"].append(f"finding {i}")
        repo.commit(state, message=f"step {4 + i}")
    more = repo.export_git(tmp_path / "one.git")
    assert more.commits == 3
    # each new commit: the commit, its root, findings.json (3 objects); nothing else
    assert more.objects == 9
    assert len(git("log", "--oneline", "main", cwd=tmp_path / "one.git").splitlines()) == 8
    assert git("fsck", "--strict", "--no-dangling", cwd=tmp_path / "one.git") == ""


def test_an_import_rebuilds_every_commit_to_its_id(repo: snapvc.Repository, tmp_path: Path) -> None:
    repo.export_git(tmp_path / "out.git")
    with snapvc.open(tmp_path / "back.snapvc") as back:
        result = back.import_git(tmp_path / "out.git")
        assert (result.commits, result.new, result.inexact) == (5, 5, [])
        assert back.branches() == repo.branches() and back.tags() == repo.tags()
        for commit in repo.log(["main", "try-b"]):
            twin = back.get_commit(commit.id)
            assert twin == commit and dict(twin.metadata) == dict(commit.metadata)
        assert back.checkout("main")["pair"] == (1, 2.5)
        again = back.import_git(tmp_path / "out.git")  # known commits are not rebuilt
        assert (again.commits, again.new) == (5, 0)


def test_import_of_a_repository_of_json_files_made_by_git(tmp_path: Path) -> None:
    work = tmp_path / "plain"
    work.mkdir()
    git("init", "-q", "-b", "trunk", cwd=work)
    (work / "config").mkdir()
    (work / "config" / "model.json").write_text('{"name": "m", "temperature": 0.2}')
    (work / "notes.txt").write_text("first\n")
    (work / "README.md").write_text("# a run\n")
    git("add", ".", cwd=work)
    git("-c", "user.name=Grace", "-c", "user.email=grace@example.org", "commit", "-q", "-m", "start", cwd=work)
    (work / "config" / "model.json").write_text('{"name": "m", "temperature": 0.7}')
    git("-c", "user.name=Grace", "-c", "user.email=grace@example.org", "commit", "-qam", "warmer\n\nbody", cwd=work)
    with snapvc.open("memory://") as repo:
        result = snapvc.import_git(work, into=repo)
        assert result.branches == {"trunk": repo.resolve("trunk")} and result.new == 2
        assert repo.checkout("trunk") == {"config": {"model": {"name": "m", "temperature": 0.7}},
                                          "notes": "first\n", "README.md": "# a run\n"}
        assert [c.message for c in repo.log("trunk")] == ["warmer\n\nbody", "start"]
        assert {c.author for c in repo.log("trunk")} == {"Grace <grace@example.org>"}
        assert [str(c) for c in repo.diff("trunk~1", "trunk")] == ["~ config.model.temperature: 0.2 -> 0.7"]


def test_a_work_tree_export_checks_out_head(repo: snapvc.Repository, tmp_path: Path) -> None:
    repo.export_git(tmp_path / "work", bare=False)
    assert (tmp_path / "work" / "scratchpad" / "plan.json").read_text() == '"read"\n'
    assert (tmp_path / "work" / "messages" / "#000000" / "role.json").read_text() == '"user"\n'
    assert git("status", "--porcelain", cwd=tmp_path / "work") == ""


def test_bad_targets_and_names_are_clear_errors(repo: snapvc.Repository, tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x.txt").write_text("x")
    with pytest.raises(snapvc.GitError, match="is not a git repository"):
        repo.export_git(tmp_path / "full")
    with pytest.raises(snapvc.GitError, match="no branch 'nope'"):
        repo.export_git(tmp_path / "out.git", ["nope"])
    with pytest.raises(snapvc.GitError, match="is not a git repository"):
        repo.import_git(tmp_path / "full")


# -- the layout, for any state ------------------------------------------------------------------

keys = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=True) | st.text(max_size=150) | st.binary(max_size=20))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=20) | st.dictionaries(keys, inner, max_size=5)
                      | st.tuples(inner, inner), max_leaves=40)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(keys, values, max_size=6))
def test_every_state_comes_back_from_its_files(state: dict[str, object]) -> None:
    with snapvc.open("memory://") as repo:
        commit = repo.commit(state)
        writer = TreeWriter()
        for side in (repo.snapshot(commit.id), state):  # stored, and in memory
            back = state_of(writer.state_tree(side), writer.objects.__getitem__)
            assert repo.commit(back, branch="back").tree == commit.tree  # the same value, NaN and -0.0 included


def test_key_escaping_round_trips_and_leaves_plain_names() -> None:
    assert [escape_key(k) for k in ("plan", "ünïcode", "a.b", "", "50%", "#1", ".git")] == [
        "plan", "ünïcode", "a%2Eb", "%", "50%25", "%231", "%2Egit"]
    assert unescape_key("a%2Eb") == "a.b" and unescape_key("50%off") == "50%off"


# -- pushing --------------------------------------------------------------------------------------


def test_push_to_a_bare_repository_and_refuse_a_rewrite(repo: snapvc.Repository, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(remote), cwd=tmp_path)
    result = repo.export_git(tmp_path / "out.git", push=str(remote))
    assert sorted(result.pushed) == ["refs/heads/main", "refs/heads/try-b", "refs/tags/v1"]
    assert git("rev-parse", "main", cwd=remote).strip() == result.refs["refs/heads/main"]
    repo.reset("main", to="main~2")
    with pytest.raises(snapvc.GitError, match="refs/heads/main"):
        repo.export_git(tmp_path / "out.git", push=str(remote))
    forced = repo.export_git(tmp_path / "out.git", push=str(remote), force=True)
    assert git("rev-parse", "main", cwd=remote).strip() == forced.refs["refs/heads/main"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def git_daemon(tmp_path: Path) -> tuple[str, Path]:
    """A ``git daemon`` serving a new bare repository on 127.0.0.1, pushes allowed;
    stopped by its process id."""
    base = tmp_path / "served"
    base.mkdir()
    git("init", "-q", "--bare", "agent.git", cwd=base)
    port = _free_port()
    daemon = subprocess.Popen(["git", "daemon", "--reuseaddr", "--export-all", "--enable=receive-pack",
                               f"--base-path={base}", "--listen=127.0.0.1", f"--port={port}", str(base)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert daemon.poll() is None, "git daemon exited at start"
                assert time.monotonic() < deadline, "git daemon did not listen within 15 s"
                time.sleep(0.05)
        yield f"git://127.0.0.1:{port}/agent.git", base / "agent.git"
    finally:
        os.kill(daemon.pid, signal.SIGTERM)
        daemon.wait(timeout=15)


def test_push_to_a_git_daemon(repo: snapvc.Repository, tmp_path: Path, git_daemon: tuple[str, Path]) -> None:
    url, served = git_daemon
    result = repo.export_git(tmp_path / "out.git", ["main"], push=url)
    assert result.pushed == ["refs/heads/main"]
    assert git("ls-remote", url, cwd=tmp_path).split() == [result.refs["refs/heads/main"], "refs/heads/main"]
    assert git("fsck", "--strict", "--no-dangling", cwd=served) == ""


# -- the command ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_export_and_import_commands(repo: snapvc.Repository, tmp_path: Path) -> None:
    repo.close()
    done = run("export-git", "out.git", cwd=tmp_path)
    assert done.returncode == 0 and "Exported 5 new commits" in done.stdout and "refs/heads/try-b" in done.stdout
    again = run("export-git", "out.git", "--json", cwd=tmp_path)
    assert '"commits": 0' in again.stdout
    back = run("import-git", "out.git", "--repo", str(tmp_path / "sub" / "back.snapvc"), cwd=tmp_path)
    assert back.returncode == 2 and "does not exist" in back.stderr  # the folder must exist
    (tmp_path / "sub").mkdir()
    back = run("import-git", "out.git", "--repo", str(tmp_path / "sub" / "back.snapvc"), cwd=tmp_path)
    assert back.returncode == 0 and "Imported 5 commits (5 new)" in back.stdout
    with snapvc.open(tmp_path / "agent.snapvc") as original, snapvc.open(tmp_path / "sub" / "back.snapvc") as copy:
        assert copy.branches() == original.branches()
    bad = run("export-git", "agent.snapvc", cwd=tmp_path)
    assert bad.returncode == 2


def test_commit_dates_come_back_to_the_microsecond(tmp_path: Path) -> None:
    with snapvc.open("memory://") as repo:
        when = datetime(2026, 11, 23, 10, 0, 0, 123456, tzinfo=UTC)
        made = repo.commit({"a": 1}, message="dated", date=when)
        assert made.time == when
        repo.export_git(tmp_path / "out.git")
    with snapvc.open("memory://") as back:
        back.import_git(tmp_path / "out.git")
        assert back.get_commit(made.id).time == when


def test_a_commit_edited_in_git_is_imported_as_edited(repo: snapvc.Repository, tmp_path: Path) -> None:
    """A commit amended in git keeps the Snapvc-Commit trailer of the snapvc commit it was
    exported from. Its import back is a new commit holding the edit (reported inexact):
    the trailer names a commit known here, but not as this git commit."""
    work = tmp_path / "work"
    repo.export_git(work, bare=False)
    exported = git("rev-parse", "main", cwd=work).strip()
    (work / "scratchpad" / "plan.json").write_text('"edited in git"\n')
    git("-c", "user.name=Ada", "-c", "user.email=ada@example.org", "commit", "-q", "--amend", "--no-edit", "-a",
        cwd=work)
    amended = git("rev-parse", "main", cwd=work).strip()
    assert amended != exported and f"Snapvc-Commit: {repo.resolve('main').hex}" in git("log", "-1", cwd=work)
    before = repo.resolve("main")
    result = repo.import_git(work)
    assert (result.commits, result.new, result.inexact) == (5, 1, [amended])
    assert repo.resolve("main") != before
    assert repo.get_commit(repo.resolve("main")).parents == repo.get_commit(before).parents
    assert repo.checkout("main")["scratchpad"]["plan"] == "edited in git"
    assert repo.checkout(before)["scratchpad"]["plan"] == "read"  # the exported commit is as it was
