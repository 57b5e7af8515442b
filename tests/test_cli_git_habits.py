"""The ``snapvc`` command where a git user's habits lead: ``diff``'s exit status, a
closed pipe, ``checkout -o`` as a pure read, typed values shown as JSON, two
repositories in one folder, a narrow terminal, ``log -p/--stat/--format``, and a merge
whose conflicts are resolved path by path from the command line."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import uuid
from decimal import Decimal
from pathlib import Path

import pytest

import snapvc
from tests.test_cli import make_repo, run
from tests.test_cli_terminal import ANSI, run_in_terminal

# Each test runs the command in subprocesses: a second or more.
pytestmark = pytest.mark.slow


@pytest.fixture
def repo_dir(tmp_path: Path) -> Path:
    make_repo(tmp_path / "agent.snapvc")
    return tmp_path


def test_diff_exits_0_unless_asked_for_exit_code(repo_dir: Path) -> None:
    for args in (["main~1", "main"], ["main~1", "main", "--stat"], ["main~1", "main", "--json"], ["main~1"]):
        done = run("diff", *args, cwd=repo_dir)
        assert done.returncode == 0 and done.stdout, args
        assert run("diff", *args, "--exit-code", cwd=repo_dir).returncode == 1, args
    assert run("diff", "main", "main", "--exit-code", cwd=repo_dir).returncode == 0


def test_output_into_a_closed_pipe_is_quiet_with_gits_status(repo_dir: Path) -> None:
    with snapvc.open(repo_dir / "agent.snapvc") as repo:
        for i in range(400):
            repo.commit({"step": i, "note": "x" * 200}, branch="long", message=f"step {i}")
    # As 'git log | head -1' under 'set -o pipefail': 141 (killed by SIGPIPE), nothing on stderr.
    script = f"set -o pipefail; {sys.executable} -m snapvc log long | head -1"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=repo_dir, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "SNAPVC_CEILING_DIRECTORIES": str(repo_dir.parent)})
    assert done.returncode == 141 and done.stderr == "" and done.stdout.startswith("commit ")


def test_checkout_to_a_file_is_a_read_and_merge_still_merges(repo_dir: Path) -> None:
    with snapvc.open(repo_dir / "agent.snapvc") as repo:
        repo.commit({**repo.checkout("try-b"), "plan": "b2"}, branch="try-b", message="b again")
        before = (repo.head, dict(repo.branches()))
    exported = run("checkout", "try-b", "-o", "state.json", cwd=repo_dir)
    assert exported.returncode == 0 and json.loads((repo_dir / "state.json").read_text())["plan"] == "b2"
    with snapvc.open(repo_dir / "agent.snapvc") as repo:
        assert (repo.head, dict(repo.branches())) == before  # nothing moved
    merged = run("merge", "try-b", "-s", "theirs", cwd=repo_dir)
    assert merged.returncode == 0 and "Merge made" in merged.stdout, merged.stdout + merged.stderr
    with snapvc.open(repo_dir / "agent.snapvc") as repo:
        state = repo.checkout("main")
        assert state["plan"] == "b2" and len(repo.get_commit(repo.resolve("main")).parents) == 2


TYPED = {"when": dt.datetime(2025, 1, 2, 3, 4, 5, 6, tzinfo=dt.timezone(dt.timedelta(hours=1))),
         "price": Decimal("1.10"), "id": uuid.UUID(int=7), "ok": True, "none": None, "big": 2**70}


def test_typed_values_are_shown_as_json_in_diff_show_log_and_checkout(tmp_path: Path) -> None:
    with snapvc.open(tmp_path / "agent.snapvc") as repo:
        repo.commit({"a": 0}, message="start")
        repo.commit(TYPED, message="typed")
    outputs = {args[0] + " " + args[-1]: run(*args, cwd=tmp_path).stdout
               for args in (["diff", "main~1", "main"], ["show", "main"], ["log", "-p"], ["history", "price"])}
    for name, text in outputs.items():
        for python_repr in ("True", "None", "datetime.datetime(", "Decimal(", "UUID("):
            assert python_repr not in text, (name, text)
    assert '+ when: {"$snapvc": "datetime", "value": "2025-01-02T03:04:05.000006+01:00"}' in outputs["diff main"]
    assert '+ price: {"$snapvc": "decimal", "value": "1.10"}' in outputs["show main"]
    assert '+ ok: true' in outputs["log -p"] and "+ none: null" in outputs["log -p"]
    checked_out = run("checkout", cwd=tmp_path)
    assert json.loads(checked_out.stdout)["price"] == {"$snapvc": "decimal", "value": "1.10"}
    assert "msgpack" not in checked_out.stdout
    # ... and what checkout prints commits back exactly.
    assert run("commit", "-", "-m", "back", cwd=tmp_path, stdin=checked_out.stdout).returncode == 0
    with snapvc.open(tmp_path / "agent.snapvc", create=False) as repo:
        assert repo.resolve("main~1") != repo.resolve("main")
        assert repo.diff("main~1", "main") == [] and repo.checkout("main") == TYPED


def test_two_repositories_in_one_folder_is_an_error_naming_them(tmp_path: Path) -> None:
    for name in ("a.snapvc", "b.snapvc"):
        with snapvc.open(tmp_path / name) as repo:
            repo.commit({"name": name})
    below = tmp_path / "work"
    below.mkdir()
    for cwd in (tmp_path, below):  # found in the folder itself, or on the way up
        done = run("log", "--oneline", cwd=cwd, ceiling=tmp_path.parent)
        assert done.returncode == 2 and done.stdout == ""
        assert str(tmp_path / "a.snapvc") in done.stderr and str(tmp_path / "b.snapvc") in done.stderr
        assert "--repo" in done.stderr and "SNAPVC_REPO" in done.stderr
    chosen = run("checkout", "--repo", str(tmp_path / "a.snapvc"), cwd=tmp_path)
    assert json.loads(chosen.stdout) == {"name": "a.snapvc"}
    by_env = run("checkout", cwd=tmp_path, env={"SNAPVC_REPO": str(tmp_path / "b.snapvc")})
    assert json.loads(by_env.stdout) == {"name": "b.snapvc"}


@pytest.mark.parametrize("columns", [40, 60])
def test_a_narrow_terminal_shows_old_and_new_whole(tmp_path: Path, columns: int) -> None:
    old = "the quick brown fox jumps over the lazy dog, once again"  # short enough to be shown whole
    new = "a slow red fox walks under the lazy dog, once more"
    with snapvc.open(tmp_path / "agent.snapvc") as repo:
        repo.commit({"notes": {"summary": old, "score": Decimal("1.10")}})
        repo.commit({"notes": {"summary": new, "score": Decimal("2.25")}})
    shown = run_in_terminal("--no-pager", "diff", "main~1", "main", cwd=tmp_path, env={"COLUMNS": str(columns)})
    lines = ANSI.sub("", shown).splitlines()
    assert all(len(line.rstrip()) <= columns for line in lines), lines
    # Every word of both sides is on the screen, the new after the arrow: wrapped, never cut.
    flat = " ".join(line.strip(" │├└─") for line in lines)
    assert f'"{old}" → "{new}"' in " ".join(flat.split()), lines
    assert '"1.10"} → {"$snapvc": "decimal", "value": "2.25"}' in " ".join(flat.split()), lines


def test_log_patch_stat_and_format(repo_dir: Path) -> None:
    patch = run("log", "-p", "-n", "2", cwd=repo_dir).stdout
    headers = [line for line in patch.splitlines() if line.startswith("commit ")]
    assert len(headers) == 2 and "└── ~ step: 1 → 2" in patch and "-Paragraph 5: the findings so far." in patch
    stat = run("log", "--stat", "--oneline", "-n", "1", cwd=repo_dir).stdout.splitlines()
    assert stat[0].endswith("(HEAD -> main) edit") and "2 paths changed, 2 modified" in stat[-2]
    with snapvc.open(repo_dir / "agent.snapvc") as repo:
        tip = repo.get_commit(repo.resolve("main"))
        parent = repo.resolve("main~1")
    fmt = run("log", "--format", "%H %h %s|%d|%D|%P|%p|%(meta:agent)|%(meta:step)|%(meta)|%at|%an|100%%", "-n", "1",
              cwd=repo_dir)
    assert fmt.returncode == 0
    assert fmt.stdout == (f"{tip.id.hex} {tip.id.short[:8]} edit| (HEAD -> main)|HEAD -> main|{parent.hex}|"
                          f"{parent.short[:8]}|writer|2|{{\"agent\": \"writer\", \"step\": 2}}|"
                          f"{int(tip.time.timestamp())}|{tip.author}|100%\n")
    tagged = run("log", "--format", "%h%d%n%ai", "v1", "-n", "1", cwd=repo_dir).stdout.splitlines()
    assert tagged[0].endswith("(tag: v1)") and tagged[1][:4].isdigit()
    as_json = json.loads(run("log", "-p", "--json", "-n", "1", cwd=repo_dir).stdout)
    assert [c["where"] for c in as_json[0]["changes"]] == ["doc", "step"]
    assert "--format" in run("log", "--help", cwd=repo_dir).stdout and "%(meta:KEY)" in run(
        "log", "--help", cwd=repo_dir).stdout.replace("\n", " ").replace("  ", " ")
    assert run("log", "--graph", "-p", cwd=repo_dir).returncode == 2


def test_a_merge_with_conflicts_is_resolved_path_by_path_then_continued(repo_dir: Path) -> None:
    with snapvc.open(repo_dir / "agent.snapvc") as repo:
        repo.commit({**repo.checkout("main"), "plan": "a"}, message="plan a")
        tip = repo.resolve("main")
    stopped = run("merge", "try-b", cwd=repo_dir)
    assert stopped.returncode == 1 and "CONFLICT step" in stopped.stdout and "CONFLICT plan" in stopped.stdout
    assert "snapvc resolve PATH" in stopped.stdout and "merge --continue" in stopped.stdout
    # The merge in progress is kept in the repository: each command below is a new process.
    assert run("merge", "try-b", cwd=repo_dir).returncode == 2  # one merge at a time, as git
    listed = run("resolve", cwd=repo_dir)
    assert listed.returncode == 0 and "2 of 2 conflicts left" in listed.stdout
    assert run("resolve", "nope", "--ours", cwd=repo_dir).returncode == 2
    assert run("resolve", "step", cwd=repo_dir).returncode == 2  # neither --ours, --theirs nor --value
    assert run("resolve", "plan", "--theirs", cwd=repo_dir).returncode == 0
    early = run("merge", "--continue", cwd=repo_dir)
    assert early.returncode == 1 and "CONFLICT step" in early.stdout
    with snapvc.open(repo_dir / "agent.snapvc") as repo:
        assert repo.resolve("main") == tip  # nothing committed before --continue
    assert run("resolve", "step", "--value", '{"$snapvc": "decimal", "value": "2.50"}', cwd=repo_dir).returncode == 0
    done = run("merge", "--continue", cwd=repo_dir)
    assert done.returncode == 0 and "Merge made" in done.stdout, done.stdout + done.stderr
    with snapvc.open(repo_dir / "agent.snapvc") as repo:
        merged = repo.get_commit(repo.resolve("main"))
        assert list(merged.parents) == [tip, repo.resolve("try-b")]
        state = repo.checkout("main")
        assert state["plan"] == "b" and state["step"] == Decimal("2.50") and str(state["step"]) == "2.50"
    assert run("merge", "--continue", cwd=repo_dir).returncode == 2  # nothing in progress any more


def test_a_merge_in_progress_is_aborted_or_refused_when_the_branch_moved(repo_dir: Path) -> None:
    with snapvc.open(repo_dir / "agent.snapvc") as repo:
        tip = repo.resolve("main")
    assert run("merge", "try-b", cwd=repo_dir).returncode == 1
    aborted = run("merge", "--abort", cwd=repo_dir)
    assert aborted.returncode == 0 and "aborted" in aborted.stdout
    with snapvc.open(repo_dir / "agent.snapvc") as repo:
        assert repo.resolve("main") == tip
    assert run("merge", "try-b", cwd=repo_dir).returncode == 1
    assert run("resolve", "step", "--ours", cwd=repo_dir).returncode == 0
    with snapvc.open(repo_dir / "agent.snapvc") as repo:  # another writer moves main meanwhile
        repo.commit({**repo.checkout("main"), "extra": 1}, message="meanwhile")
        moved = repo.resolve("main")
    refused = run("merge", "--continue", cwd=repo_dir)
    assert refused.returncode == 2 and "moved since the merge began" in refused.stderr
    with snapvc.open(repo_dir / "agent.snapvc") as repo:
        assert repo.resolve("main") == moved
    assert run("merge", "--abort", cwd=repo_dir).returncode == 0
    assert run("merge", "try-b", "-s", "theirs", cwd=repo_dir).returncode == 0
