"""The ``snapvc`` command, run for real in a subprocess: every command, its ``--json``
output, its exit codes (0 done, 1 differences or conflicts, 2 bad usage or input) and
its error messages."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

import snapvc
from snapvc.cli.main import cli

DOC = "\n".join(f"Paragraph {i}: the findings so far." for i in range(12)) + "\n"


def run(*args: str, cwd: Path, ceiling: Path | None = None, stdin: str | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # The search for a repository stops at ``ceiling`` (default: the folder above ``cwd``),
    # so files elsewhere on the machine never answer for a test.
    full_env = {k: v for k, v in os.environ.items() if k != "SNAPVC_REPO"}
    full_env.update({"SNAPVC_CEILING_DIRECTORIES": str(ceiling or cwd.parent), **(env or {})})
    return subprocess.run([sys.executable, "-m", "snapvc", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60, env=full_env, input=stdin)


def make_repo(path: Path) -> None:
    """main: start -> reply -> edit (tagged v1 at reply); try-b forks at reply."""
    with snapvc.open(path) as repo:
        state = {"messages": [{"role": "user", "content": "hi"}], "step": 0, "doc": DOC}
        repo.commit(state, message="start", metadata={"step": 0, "agent": "planner"})
        state["messages"].append({"role": "assistant", "content": "hello"})
        state["step"] = 1
        repo.commit(state, message="reply", metadata={"step": 1, "agent": "writer"})
        repo.tag("v1")
        repo.branch("try-b")
        state["step"] = 2
        state["doc"] = DOC.replace("Paragraph 5: the findings so far.", "Paragraph 5: revised.")
        repo.commit(state, message="edit", metadata={"step": 2, "agent": "writer"})
        repo.commit({**state, "step": 20, "plan": "b"}, branch="try-b", message="on b", metadata={"step": 2})


@pytest.fixture
def repo_dir(tmp_path: Path) -> Path:
    make_repo(tmp_path / "agent.snapvc")
    return tmp_path


# -- finding the repository ---------------------------------------------------------------


@pytest.mark.slow
def test_init_then_commands_find_the_repository_upwards(tmp_path: Path) -> None:
    done = run("init", "agent.snapvc", cwd=tmp_path)
    assert done.returncode == 0 and "Initialized empty snapvc repository" in done.stdout
    again = run("init", "agent.snapvc", cwd=tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr
    make_repo(tmp_path / "agent.snapvc")
    sub = tmp_path / "deeper" / "still"
    sub.mkdir(parents=True)
    log = run("log", "--oneline", cwd=sub, ceiling=tmp_path.parent)
    assert log.returncode == 0, log.stderr
    assert [line.split(" ", 1)[1] for line in log.stdout.splitlines()] == ["(HEAD -> main) edit", "(tag: v1) reply",
                                                                          "start"]


@pytest.mark.slow
def test_repo_option_and_environment_variable(repo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    by_option = run("log", "--oneline", "--repo", str(repo_dir / "agent.snapvc"), cwd=elsewhere)
    by_env = run("log", "--oneline", cwd=elsewhere, env={"SNAPVC_REPO": str(repo_dir / "agent.snapvc")})
    assert by_option.returncode == by_env.returncode == 0
    assert by_option.stdout == by_env.stdout and len(by_option.stdout.splitlines()) == 3
    missing = run("log", "--repo", str(elsewhere / "nope.snapvc"), cwd=elsewhere)
    assert missing.returncode == 2 and "nope.snapvc" in missing.stderr and "snapvc init" in missing.stderr
    nowhere = run("log", cwd=elsewhere)
    assert nowhere.returncode == 2 and "no *.snapvc repository" in nowhere.stderr


def test_every_command_takes_repo_and_json() -> None:
    for name, command in cli.commands.items():
        options = {opt for param in command.params if isinstance(param, click.Option) for opt in param.opts}
        if name in ("demo", "completion"):
            continue  # the demo makes its own repository; completion prints a shell script
        if name in ("ui", "mcp"):  # servers (a page; the MCP protocol on stdio): nothing to give as JSON
            assert "--repo" in options and "--json" not in options
            continue
        if name not in ("init", "clone"):  # they take the new repository's path as an argument
            assert "--repo" in options, name
        assert "--json" in options, name


# -- commit and checkout ------------------------------------------------------------------


@pytest.mark.slow
def test_commit_from_a_file_and_from_stdin(tmp_path: Path) -> None:
    assert run("init", "a.snapvc", cwd=tmp_path).returncode == 0
    (tmp_path / "s.json").write_text(json.dumps({"messages": ["hi"], "plan": {"next": "search"}}))
    first = run("commit", "s.json", "-m", "step 1", "--meta", "step=1", "--meta", "agent=researcher", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("[main (root-commit) ") and "] step 1" in first.stdout
    assert "2 paths changed" in first.stdout
    second = run("commit", "-m", "step 2", "--meta", 'tags=["a", "b"]', "--json", cwd=tmp_path,
                 stdin=json.dumps({"messages": ["hi", "hello"], "plan": {"next": "search"}}))
    made = json.loads(second.stdout)
    assert made["branch"] == "main" and made["changes"] == 1 and made["metadata"] == {"tags": ["a", "b"]}
    on_b = run("commit", "-", "-b", "other", "-m", "elsewhere", cwd=tmp_path, stdin='{"x": 1}')
    assert on_b.returncode == 0 and on_b.stdout.startswith("[other (root-commit)")
    with snapvc.open(tmp_path / "a.snapvc") as repo:
        assert repo.checkout("main") == {"messages": ["hi", "hello"], "plan": {"next": "search"}}
        assert [c.metadata for c in repo.log("main")] == [{"tags": ["a", "b"]}, {"step": 1, "agent": "researcher"}]
        assert repo.checkout("other") == {"x": 1}


@pytest.mark.slow
def test_commit_refuses_bad_input_and_stores_nothing(tmp_path: Path) -> None:
    make_repo(tmp_path / "a.snapvc")
    (tmp_path / "bad.json").write_text('{"messages": [1, 2,,]}')
    bad = run("commit", "bad.json", cwd=tmp_path)
    assert bad.returncode == 2 and "bad.json is not JSON" in bad.stderr
    (tmp_path / "list.json").write_text("[1, 2]")
    listed = run("commit", "list.json", cwd=tmp_path)
    assert listed.returncode == 2 and "a state is a JSON object" in listed.stderr
    (tmp_path / "tagged.json").write_text('{"blob": {"$snapvc": "bytes", "base64": "%%%"}}')
    tagged = run("commit", "tagged.json", cwd=tmp_path)
    assert tagged.returncode == 2 and "stdin" not in tagged.stderr and "tagged.json['blob']" in tagged.stderr
    meta = run("commit", "-", "--meta", "novalue", cwd=tmp_path, stdin="{}")
    assert meta.returncode == 2 and "'novalue' is not key=value" in meta.stderr
    absent = run("commit", "nothere.json", cwd=tmp_path)
    assert absent.returncode == 2 and "cannot read nothere.json" in absent.stderr
    with snapvc.open(tmp_path / "a.snapvc") as repo:
        assert len(list(repo.log("main"))) == 3


def test_checkout_output_commits_back_exactly(repo_dir: Path) -> None:
    with snapvc.open(repo_dir / "agent.snapvc") as repo:
        exotic = {"blob": b"\x00\xff", "pair": (1, 2.5), "nan": float("nan"), "big": 2**80, "$snapvc": "mine"}
        original = repo.commit(exotic, branch="exotic", message="types")
    whole = run("checkout", "exotic", "-o", "state.json", cwd=repo_dir)
    assert whole.returncode == 0 and whole.stderr == ""  # a read: HEAD stays on main
    switched = run("switch", "exotic", cwd=repo_dir)
    assert switched.returncode == 0 and "Switched to branch 'exotic'" in switched.stdout
    nowhere = run("switch", "no-such-branch", cwd=repo_dir)
    assert nowhere.returncode != 0 and "no-such-branch" in nowhere.stderr
    again_there = run("switch", "exotic", cwd=repo_dir)
    assert again_there.returncode == 0 and "Already on 'exotic'" in again_there.stdout
    back = run("switch", "main", "--json", cwd=repo_dir)
    assert back.returncode == 0 and json.loads(back.stdout) == {"head": "main", "was": "exotic"}
    run("switch", "exotic", cwd=repo_dir)
    again = run("commit", "state.json", "-m", "same state", cwd=repo_dir)  # HEAD is on exotic now
    assert again.returncode == 0, again.stderr
    with snapvc.open(repo_dir / "agent.snapvc") as repo:
        tip = repo.get_commit(repo.resolve("exotic"))
        assert tip.parents == (original.id,) and tip.tree == original.tree  # the same state, to the bit


@pytest.mark.slow
def test_checkout_prints_json_and_one_path(repo_dir: Path) -> None:
    whole = run("checkout", "main~2", cwd=repo_dir)
    assert json.loads(whole.stdout) == {"messages": [{"role": "user", "content": "hi"}], "step": 0, "doc": DOC}
    assert json.loads(run("checkout", "main", "--path", "messages.1.content", cwd=repo_dir).stdout) == "hello"
    assert json.loads(run("checkout", "main", "--path", "/messages/0", cwd=repo_dir).stdout) == {"role": "user",
                                                                                                 "content": "hi"}
    missing = run("checkout", "main", "--path", "messages.7", cwd=repo_dir)
    assert missing.returncode == 2 and "no 7 at messages" in missing.stderr and "2 items" in missing.stderr


# -- show, log, diff, history, reflog -------------------------------------------------------


@pytest.mark.slow
def test_show_a_commit_and_a_value(repo_dir: Path) -> None:
    shown = run("show", "main", cwd=repo_dir)
    assert shown.returncode == 0
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("commit ") and lines[0].endswith("(HEAD -> main)")
    assert "Meta:   step = 2" in shown.stdout and "Meta:   agent = \"writer\"" in shown.stdout
    assert "    edit" in shown.stdout
    assert "~ doc (text, " in shown.stdout and "-Paragraph 5: the findings so far." in shown.stdout
    assert "+Paragraph 5: revised." in shown.stdout and "~ step: 1 → 2" in shown.stdout
    assert run("show", "v1:messages.1.content", cwd=repo_dir).stdout == "hello\n"
    assert json.loads(run("show", "main:step", cwd=repo_dir).stdout) == 2
    names = run("show", "main", "--name-only", cwd=repo_dir).stdout.splitlines()
    assert names[0].startswith("commit ") and names[-3:] == ["", "doc", "step"]  # the header, then the paths
    as_json = json.loads(run("show", "main~1", "--json", cwd=repo_dir).stdout)
    assert as_json["message"] == "reply" and as_json["refs"] == ["tag: v1"]
    assert [(c["where"], c["kind"]) for c in as_json["changes"]] == [("messages[1]", "added"), ("step", "modified")]
    root = json.loads(run("show", "main~2", "--json", cwd=repo_dir).stdout)
    assert {c["where"] for c in root["changes"]} == {"messages", "step", "doc"}


@pytest.mark.slow
def test_log_filters_and_json(repo_dir: Path) -> None:
    def messages(*args: str) -> list[str]:
        done = run("log", "--json", *args, cwd=repo_dir)
        assert done.returncode == 0, done.stderr
        return [c["message"] for c in json.loads(done.stdout)]

    assert messages() == ["edit", "reply", "start"]
    assert messages("-n", "1") == ["edit"]
    assert messages("--where", "agent=writer") == ["edit", "reply"]
    assert messages("--where", "step=1", "--where", "agent=writer") == ["reply"]
    assert messages("--path", "messages") == ["reply", "start"]
    assert messages("try-b") == ["on b", "reply", "start"]
    assert messages("--all") == ["on b", "edit", "reply", "start"]
    assert messages("--since", "1 hour ago") == ["edit", "reply", "start"]
    assert messages("--until", "2000-01-01") == []
    (repo_dir / "other").mkdir()  # beside agent.snapvc, it would make the repository to use ambiguous
    with snapvc.open(repo_dir / "other" / "threads.snapvc") as repo:  # history on other branches only, HEAD's empty
        repo.commit({"x": 1}, branch="thread-1", message="t1")
        repo.commit({"x": 2}, branch="thread-2", message="t2")
    assert messages("--repo", str(repo_dir / "other" / "threads.snapvc")) == ["t2", "t1"]
    full = run("log", "-n", "1", cwd=repo_dir).stdout
    assert full.startswith("commit ") and "Author: " in full and "Date:   " in full and "    edit" in full
    bad = run("log", "--since", "last tuesday", cwd=repo_dir)
    assert bad.returncode == 2 and "'last tuesday' is not a time" in bad.stderr


def test_log_graph_draws_forks_and_merges(repo_dir: Path) -> None:
    assert run("merge", "try-b", "-s", "theirs", cwd=repo_dir).returncode == 0
    graph = run("log", "--graph", cwd=repo_dir).stdout.splitlines()
    shape = [line.split(" ")[0] if not line.startswith(("| ", "* |")) else line[:3] for line in graph]
    # "on b" was committed after "edit": newer first, on the merge's second line
    assert shape == ["*", "|\\", "| *", "* |", "|/", "*", "*"]
    assert graph[0].endswith("(HEAD -> main) Merge try-b into main") and graph[3].endswith(" edit")
    assert graph[2].endswith("(try-b) on b") and graph[5].endswith("(tag: v1) reply")


@pytest.mark.slow
def test_diff_as_a_tree_and_the_other_formats(repo_dir: Path) -> None:
    changed = run("diff", "main~1", "main", cwd=repo_dir)
    assert changed.returncode == 0  # as git diff: differences are output, not a failure
    lines = changed.stdout.splitlines()
    assert lines[0] == "main~1 → main"
    revised = DOC.replace("Paragraph 5: the findings so far.", "Paragraph 5: revised.")
    assert lines[1] == f"├── ~ doc (text, {len(DOC)} → {len(revised)} characters)"
    assert "-Paragraph 5: the findings so far." in changed.stdout and lines[-1] == "└── ~ step: 1 → 2"
    nested = run("diff", "main~2", "main~1", cwd=repo_dir).stdout.splitlines()
    assert nested[1:] == ["├── messages", "│   └── + [1]: {\"content\": \"hello\", \"role\": \"assistant\"}",
                          "└── ~ step: 0 → 1"]
    with snapvc.open(repo_dir / "agent.snapvc") as repo:
        line = "the agent read " + "many sources " * 10
        repo.commit({"a": {"b": [{"c": 1, "note": line + "and agreed."}]}}, branch="nest")
        repo.commit({"a": {"b": [{"c": 2, "note": line + "and disagreed."}]}}, branch="nest")
    chain = run("diff", "nest~1", "nest", cwd=repo_dir).stdout.splitlines()
    assert chain == ["nest~1 → nest", "└── a.b[0]", "    ├── ~ c: 1 → 2",  # single steps make one label
                     "    └── ~ note: \"…sources and agreed.\" → \"…sources and disagreed.\""]
    assert run("diff", "main", "try-b", "--name-only", cwd=repo_dir).stdout.split() == ["plan", "step"]
    assert run("diff", "main", "try-b", "plan", "--name-only", cwd=repo_dir).stdout.split() == ["plan"]
    stat = run("diff", "main~1", "main", "--stat", cwd=repo_dir).stdout
    assert "2 paths changed, 2 modified" in stat
    patch = json.loads(run("diff", "main~2", "try-b", "--json-patch", cwd=repo_dir).stdout)
    with snapvc.open(repo_dir / "agent.snapvc") as repo:
        assert snapvc.apply_patch(repo.checkout("main~2"), patch) == repo.checkout("try-b")
    as_json = json.loads(run("diff", "main", "try-b", "--json", cwd=repo_dir).stdout)
    assert as_json == [{"path": ["plan"], "where": "plan", "kind": "added", "new": "b"},
                       {"path": ["step"], "where": "step", "kind": "modified", "old": 2, "new": 20}]
    one = run("diff", "main~1", "--name-only", cwd=repo_dir)  # what main~1 changed
    assert one.stdout.split() == ["messages[1]", "step"]
    same = run("diff", "main", "main", cwd=repo_dir)
    assert same.returncode == 0 and same.stdout == "no changes\n"
    assert run("diff", "main~1", "main", "--exit-code", cwd=repo_dir).returncode == 1
    assert run("diff", "main", "main", "--exit-code", cwd=repo_dir).returncode == 0
    both = run("diff", "main~1", "main", "--stat", "--json", cwd=repo_dir)
    assert both.returncode == 2 and "choose one" in both.stderr


@pytest.mark.slow
def test_history_of_a_path(repo_dir: Path) -> None:
    lines = run("history", "step", cwd=repo_dir).stdout.splitlines()
    assert [line.split()[3:5] for line in lines] == [["~", "2"], ["~", "1"], ["+", "0"]]
    assert "(was 1)" in lines[0] and lines[0].endswith("edit")
    oldest = json.loads(run("history", "step", "--reverse", "--json", cwd=repo_dir).stdout)
    assert [(e["kind"], e["value"], e["commit"]["message"]) for e in oldest] == [
        ("added", 0, "start"), ("modified", 1, "reply"), ("modified", 2, "edit")]
    assert len(json.loads(run("history", "messages.1", "try-b", "--json", cwd=repo_dir).stdout)) == 1


@pytest.mark.slow
def test_reset_reflog_and_undo(repo_dir: Path) -> None:
    moved = run("reset", "main~2", cwd=repo_dir)
    assert moved.returncode == 0 and "main is now at" in moved.stdout and "snapvc reset main@{1}" in moved.stdout
    assert json.loads(run("checkout", "main", "--path", "step", cwd=repo_dir).stdout) == 0
    reflog = run("reflog", "main", cwd=repo_dir).stdout.splitlines()
    assert reflog[0].endswith("main@{0}: reset: moving to main~2") and reflog[1].endswith("main@{1}: commit: edit")
    assert run("reset", "main@{1}", cwd=repo_dir).returncode == 0
    assert json.loads(run("checkout", "main", "--path", "step", cwd=repo_dir).stdout) == 2
    entries = json.loads(run("reflog", "--json", "-n", "2", cwd=repo_dir).stdout)
    assert [e["reason"] for e in entries] == ["reset: moving to main@{1}", "reset: moving to main~2"]
    other = run("reset", "main", "-b", "try-b", "--json", cwd=repo_dir)
    assert json.loads(other.stdout)["branch"] == "try-b"


# -- branches, tags, merges ------------------------------------------------------------------


@pytest.mark.slow
def test_branch_and_tag(repo_dir: Path) -> None:
    listing = run("branch", cwd=repo_dir).stdout.splitlines()
    assert listing[0].startswith("* main ") and listing[0].endswith(" edit")
    assert listing[1].startswith("  try-b ") and listing[1].endswith(" on b")
    assert "Created branch fork at" in run("branch", "fork", "main~2", cwd=repo_dir).stdout
    exists = run("branch", "fork", cwd=repo_dir)
    assert exists.returncode == 2 and "-f" in exists.stderr
    assert run("branch", "fork", "main", "-f", cwd=repo_dir).returncode == 0
    branches = json.loads(run("branch", "--json", cwd=repo_dir).stdout)
    assert [(b["name"], b["head"]) for b in branches] == [("fork", False), ("main", True), ("try-b", False)]
    deleted = run("branch", "-d", "fork", cwd=repo_dir)
    assert deleted.returncode == 0 and "Deleted branch fork" in deleted.stdout
    bad = run("branch", "a..b", cwd=repo_dir)
    assert bad.returncode == 2 and "invalid ref name" in bad.stderr and "hint:" in bad.stderr
    assert run("tag", "v2", "main", cwd=repo_dir).returncode == 0
    assert [t["name"] for t in json.loads(run("tag", "--json", cwd=repo_dir).stdout)] == ["v1", "v2"]
    assert "Deleted tag v2" in run("tag", "-d", "v2", cwd=repo_dir).stdout
    assert run("tag", cwd=repo_dir).stdout.startswith("v1 ")


@pytest.mark.slow
def test_merge_conflicts_are_listed_by_path_and_nothing_is_written(repo_dir: Path) -> None:
    with snapvc.open(repo_dir / "agent.snapvc") as repo:
        tip = repo.resolve("main")
    clash = run("merge", "try-b", cwd=repo_dir)
    assert clash.returncode == 1
    assert "1 conflict, nothing was written" in clash.stdout
    assert "CONFLICT step: base 1, ours 2, theirs 20" in clash.stdout and "--strategy" in clash.stdout
    assert run("merge", "--abort", cwd=repo_dir).returncode == 0  # the merge was left in progress, as git leaves it
    as_json = json.loads(run("merge", "try-b", "--json", cwd=repo_dir).stdout)
    assert as_json["ok"] is False and as_json["conflicts"] == [
        {"path": ["step"], "where": "step", "base": 1, "ours": 2, "theirs": 20}]
    with snapvc.open(repo_dir / "agent.snapvc") as repo:
        assert repo.resolve("main") == tip
    assert run("merge", "--abort", cwd=repo_dir).returncode == 0
    merged = run("merge", "try-b", "--strategy", "ours", "-m", "keep ours", cwd=repo_dir)
    assert merged.returncode == 0 and "Merge made" in merged.stdout and "resolved step" in merged.stdout
    with snapvc.open(repo_dir / "agent.snapvc") as repo:
        state = repo.checkout("main")
        assert state["step"] == 2 and state["plan"] == "b"
    assert run("merge", "try-b", cwd=repo_dir).stdout == "Already up to date.\n"
    assert "Fast-forward to" in run("merge", "main", "--into", "try-b", cwd=repo_dir).stdout


@pytest.mark.slow
def test_revert_and_cherry_pick(repo_dir: Path) -> None:
    reverted = run("revert", "main", cwd=repo_dir)
    assert reverted.returncode == 0 and "Revert made" in reverted.stdout
    with snapvc.open(repo_dir / "agent.snapvc") as repo:
        assert repo.checkout("main") == repo.checkout("main~2")
    picked = run("cherry-pick", "try-b", "--onto", "main", "--json", cwd=repo_dir)
    assert json.loads(picked.stdout)["ok"] is True
    with snapvc.open(repo_dir / "agent.snapvc") as repo:
        assert repo.checkout("main")["plan"] == "b"
    bad = run("revert", "main", "--mainline", "3", cwd=repo_dir)
    assert bad.returncode == 2 and "mainline 3" in bad.stderr


def test_stats(repo_dir: Path) -> None:
    text = run("stats", cwd=repo_dir).stdout
    assert text.startswith("4 commits on 2 branches, 1 tag; 4 objects (4 map); stored ")
    assert "branch" in text and "dedup" in text and "try-b" in text
    figures = json.loads(run("stats", "--json", cwd=repo_dir).stdout)
    assert figures["commits"] == 4 and set(figures["by_branch"]) == {"main", "try-b"}
    assert figures["by_branch"]["main"]["commits"] == 3 and figures["by_branch"]["try-b"]["commits"] == 3
    assert figures["stored_bytes"] > 0 and figures["logical_bytes"] > figures["stored_bytes"]


# -- errors and completion ----------------------------------------------------------------------


def test_errors_are_one_line_with_a_hint_and_exit_2(repo_dir: Path) -> None:
    unknown = run("checkout", "nosuchbranch", cwd=repo_dir)
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("snapvc: error:") and "nosuchbranch" in unknown.stderr
    assert "hint: 'snapvc branch' lists the branches" in unknown.stderr
    bad_rev = run("log", "main~~x", cwd=repo_dir)
    assert bad_rev.returncode == 2 and "main~~x" in bad_rev.stderr
    usage = run("diff", cwd=repo_dir)
    assert usage.returncode == 2 and "snapvc: error: missing argument" in usage.stderr


@pytest.mark.slow
def test_shell_completion(repo_dir: Path) -> None:
    script = run("completion", "bash", cwd=repo_dir)
    assert script.returncode == 0 and "_SNAPVC_COMPLETE" in script.stdout and "complete " in script.stdout
    env = {"_SNAPVC_COMPLETE": "bash_complete", "COMP_WORDS": "snapvc diff ma", "COMP_CWORD": "2"}
    done = run(cwd=repo_dir, env=env)
    assert done.returncode == 0 and "plain,main" in done.stdout.splitlines()
    env = {"_SNAPVC_COMPLETE": "bash_complete", "COMP_WORDS": "snapvc lo", "COMP_CWORD": "1"}
    assert "plain,log" in run(cwd=repo_dir, env=env).stdout.splitlines()


@pytest.mark.slow
def test_the_readme_commands_run_on_the_demo_repository(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme[readme.index("## The command"):]
    block = section[section.index("```bash\n") + len("```bash\n"):section.index("```\n", section.index("```bash"))]
    commands = [shlex.split(line.split("  #")[0]) for line in block.splitlines() if line.strip()]
    assert len(commands) >= 10 and all(c[0] == "snapvc" for c in commands)
    assert run("demo", "--repo", "agent.snapvc", cwd=tmp_path).returncode == 0
    for command in commands:
        done = run(*command[1:], cwd=tmp_path)
        assert done.returncode in (0, 1) and not done.stderr.startswith("snapvc: error"), (command, done.stderr)
        if "-o" in command:
            assert (tmp_path / command[command.index("-o") + 1]).stat().st_size > 0
        else:
            assert done.stdout.strip(), f"{' '.join(command)} printed nothing"


def test_a_pull_stopped_by_conflicts_exits_1_and_moves_nothing(tmp_path: Path) -> None:
    """``snapvc pull`` with conflicts left writes nothing, lists them and exits 1 (a script
    must not go on as if the branch held the remote's work); decided with --strategy, 0."""
    with snapvc.open(tmp_path / "hub.snapvc") as hub:
        hub.commit({"plan": "a", "notes": "shared"})
    with snapvc.clone(str(tmp_path / "hub.snapvc"), str(tmp_path / "here.snapvc")) as here:
        here.commit({"plan": "mine", "notes": "shared"}, message="local plan")
        tip = here.resolve("main")
    with snapvc.open(tmp_path / "hub.snapvc", create=False) as hub:
        hub.commit({"plan": "theirs", "notes": "shared"}, message="hub plan")
    done = run("pull", "--repo", "here.snapvc", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "plan" in done.stdout and "Traceback" not in done.stderr
    as_json = run("pull", "--repo", "here.snapvc", "--json", cwd=tmp_path)
    assert as_json.returncode == 1, as_json.stdout + as_json.stderr
    found = json.loads(as_json.stdout)
    assert found["ok"] is False and found["commit"] is None and len(found["conflicts"]) == 1
    with snapvc.open(tmp_path / "here.snapvc", create=False) as here:
        assert here.resolve("main") == tip
    decided = run("pull", "--repo", "here.snapvc", "--strategy", "theirs", cwd=tmp_path)
    assert decided.returncode == 0, decided.stdout + decided.stderr
    with snapvc.open(tmp_path / "here.snapvc", create=False) as here:
        assert here.checkout("main") == {"plan": "theirs", "notes": "shared"}
