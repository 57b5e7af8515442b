"""The words the ``snapvc`` command prints: one error style, counts that agree with
their nouns, one unit system, aligned lists, no internal class names, and a git export
whose commits have a real author. Each through the real command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import snapvc

GIT = ["git", "-c", "safe.directory=*"]


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "snapvc", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "100", **(env or {})})


@pytest.fixture
def repo_dir(tmp_path: Path) -> Path:
    """A repository with two branches, one tag and a merge: one of each thing the
    command counts."""
    with snapvc.open(tmp_path / "agent.snapvc", author="root") as repo:
        repo.commit({"messages": ["hello"], "usage": {"tokens": 1}, "notes": {"a": 1, "b": 2}}, message="start")
        repo.tag("v1")
        repo.branch("side")
        repo.commit({"messages": ["hello", "side"], "usage": {"tokens": 1}, "notes": {"a": 1, "b": 2}},
                    branch="side", message="on the side")
        repo.commit({"messages": ["hello"], "usage": {"tokens": 2}, "notes": {"a": 1, "b": 2}}, message="main moves",
                    metadata={"author": "Ada <ada@example.org>"})
        repo.merge("side", into="main")
    return tmp_path


@pytest.mark.parametrize("args,command", [
    (("branch", "--verbose-nope"), "snapvc branch"),   # an option the command does not have
    (("merge",), "snapvc merge"),                       # a missing argument
    (("completion", "tcsh"), "snapvc completion"),      # a choice not among the choices
    (("nosuch",), "snapvc"),                            # a command that does not exist
])
def test_usage_errors_speak_as_every_other_error(repo_dir: Path, args: tuple[str, ...], command: str) -> None:
    done = run(*args, cwd=repo_dir)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("snapvc: error: "), done.stderr
    assert lines[1] == f"hint: see '{command} --help'"
    assert "Usage:" not in done.stderr and "Error:" not in done.stderr and "Try '" not in done.stderr


def test_click_s_guess_goes_in_the_hint(repo_dir: Path) -> None:
    done = run("log", "--onelin", cwd=repo_dir)
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["snapvc: error: no such option '--onelin'",
                                        "hint: did you mean '--oneline'? see 'snapvc log --help'"]


def test_help_itself_is_unchanged(repo_dir: Path) -> None:
    done = run("log", "--help", cwd=repo_dir)
    assert done.returncode == 0 and done.stdout.startswith("Usage: snapvc log [OPTIONS]") and not done.stderr


def test_a_path_that_leads_nowhere_names_the_value_in_a_states_words(repo_dir: Path) -> None:
    for path, words in (("nothing", "(a map of 3 keys)"), ("messages.7", "(a list of 2 items)"),
                        ("usage.tokens.x", "(the number 2)"), ("notes.a.b", "(the number 1)")):
        done = run("show", f"main:{path}", cwd=repo_dir)
        assert done.returncode == 2 and words in done.stderr, done.stderr
        assert "View" not in done.stderr and " int" not in done.stderr


def test_counts_units_and_objects_in_stats(repo_dir: Path) -> None:
    first = run("stats", "--no-branches", cwd=repo_dir).stdout.splitlines()[0]
    # 4 commits (start, side, main, the merge), 2 branches, 1 tag; objects apart from commits
    assert first.startswith("4 commits on 2 branches, 1 tag; "), first
    objects = int(re.search(r"; (\d+) objects \(", first).group(1))  # type: ignore[union-attr]
    kinds = re.search(r"objects \(([^)]*)\)", first).group(1)  # type: ignore[union-attr]
    assert "commit" not in kinds and sum(int(k.split()[0]) for k in kinds.split(", ")) == objects
    checked = run("fsck", cwd=repo_dir).stdout
    assert checked.startswith(f"checked {objects} objects, 4 commits, ")  # the two commands agree
    assert re.search(r"stored \d+ B for \d+ B of states", first) or "KiB" in first
    assert not re.search(r"\d (KB|MB|GB)\b", first)


def test_one_of_a_thing_is_singular(tmp_path: Path) -> None:
    with snapvc.open(tmp_path / "one.snapvc") as repo:
        repo.commit({"a": 1}, message="only")
        repo.tag("v1")
    stats = run("stats", "--no-branches", cwd=tmp_path).stdout
    assert stats.startswith("1 commit on 1 branch, 1 tag; 1 object (1 map); "), stats
    fsck = run("fsck", cwd=tmp_path).stdout
    assert re.match(r"checked 1 object, 1 commit, 2 refs and 2 reflog entries in ", fsck), fsck
    exported = run("export-git", str(tmp_path / "one.git"), "-b", "main", cwd=tmp_path).stdout
    assert exported.startswith("Exported 1 new commit (")


def test_binary_units_everywhere() -> None:
    from snapvc.maintenance.stats import format_bytes

    assert [format_bytes(n) for n in (0, 1023, 1024, 1536, 1024**2, 5 * 1024**3)] == \
        ["0 B", "1023 B", "1.0 KiB", "1.5 KiB", "1.0 MiB", "5.0 GiB"]


def test_tags_line_up_as_branches_do(repo_dir: Path) -> None:
    with snapvc.open(repo_dir / "agent.snapvc", create=False) as repo:
        repo.tag("a-much-longer-name", at="main~1")
    lines = run("tag", cwd=repo_dir).stdout.splitlines()
    assert len(lines) == 2
    columns = {re.search(r" [0-9a-f]{8} ", line).start() for line in lines}  # type: ignore[union-attr]
    assert len(columns) == 1, lines  # every commit id starts in the same column


def test_a_merge_header_has_one_space_as_git(repo_dir: Path) -> None:
    shown = run("show", "main", cwd=repo_dir).stdout
    assert re.search(r"^Merge: [0-9a-f]{8} [0-9a-f]{8}$", shown, re.M), shown


def test_git_export_gives_every_commit_a_real_author(repo_dir: Path) -> None:
    target = repo_dir / "agent.git"
    assert run("export-git", str(target), cwd=repo_dir).returncode == 0
    authors = subprocess.run([*GIT, "-C", str(target), "log", "--format=%s|%an <%ae>|%cn <%ce>", "main"],
                             capture_output=True, text=True, check=True).stdout.splitlines()
    by_message = {line.split("|")[0]: line.split("|")[1:] for line in authors}
    # the metadata's author when it is one; else the snapvc author at snapvc@localhost
    assert by_message["main moves"] == ["Ada <ada@example.org>"] * 2
    assert by_message["start"] == ["root <snapvc@localhost>"] * 2
    assert not any("<>" in line for line in authors)
    # and back, to the same ids: the snapvc author is kept in a trailer
    with snapvc.open(repo_dir / "copy.snapvc") as copy:
        copy.import_git(target)
        with snapvc.open(repo_dir / "agent.snapvc", create=False) as repo:
            assert copy.resolve("main") == repo.resolve("main")
            assert {c.author for c in copy.log("main")} == {"root"}


def test_git_export_without_any_name_uses_a_fixed_identity(tmp_path: Path) -> None:
    with snapvc.open(tmp_path / "a.snapvc", author="<unknown>") as repo:  # no name git could hold
        repo.commit({"a": 1}, message="nameless")
        repo.export_git(tmp_path / "a.git")
        ident = subprocess.run([*GIT, "-C", str(tmp_path / "a.git"), "log", "-1", "--format=%an <%ae>", "main"],
                               capture_output=True, text=True, check=True).stdout.strip()
        assert ident == "snapvc <snapvc@localhost>"
        with snapvc.open("memory://") as copy:
            copy.import_git(tmp_path / "a.git")
            assert copy.resolve("main") == repo.resolve("main")


def test_a_value_cut_short_keeps_its_closing_quote(tmp_path: Path) -> None:
    with snapvc.open(tmp_path / "c.snapvc") as repo:
        repo.commit({"note": "first"}, message="base")
        repo.branch("other")
        repo.commit({"note": "read paper: Scaling Laws for Neural Language Models, twice"}, message="ours")
        repo.commit({"note": 'a "quoted" word and a line\nbreak ' * 3}, branch="other", message="theirs")
    done = run("merge", "other", cwd=tmp_path)
    assert done.returncode == 1
    [line] = [line for line in done.stdout.splitlines() if "CONFLICT" in line]
    ours = re.search(r'ours ("(?:[^"\\]|\\.)*")(.)', line)
    theirs = re.search(r'theirs ("(?:[^"\\]|\\.)*")$', line)
    assert ours and ours.group(1).endswith('…"') and ours.group(2) == ",", line  # a whole JSON string, then a comma
    assert theirs and theirs.group(1).endswith('…"'), line
