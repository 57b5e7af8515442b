"""``snapvc demo``: a small simulated agent run that shows what snapvc does.

A research agent checkpoints its state after every step on the embedded default
store; at a decision point it forks to try a second approach; both branches go on;
then the demo draws the history as a graph, diffs the two branches, travels back to an
earlier checkpoint, undoes a reset through the reflog, merges the branches back
(resolving conflicts), and prints the storage stats.

What it prints reads at any width: prose in panels wrapped at word boundaries, values
whole on lines of their own, and commands each on one line (never folded, so they can
be copied). The repository is kept for exploring; the demo ends by saying where it is
and, for a temporary one, how to remove it.
"""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

import snapvc
from snapvc.cli.graph import graph_rows
from snapvc.cli.render import commit_line, graph_markup, labels_by_commit, render_changes
from snapvc.diff.changes import format_path
from snapvc.maintenance.stats import format_bytes, plural

__all__ = ["run_demo"]

SOURCES = {
    "papers": ["Attention Is All You Need", "Scaling Laws for Neural Language Models", "Chinchilla"],
    "web": ["a blog post on KV caches", "a forum thread on quantization", "vendor benchmark notes"],
}


def _say(console: Console, title: str, text: str) -> None:
    console.print()
    console.print(Panel(text, title=f"[bold]{title}", title_align="left", border_style="cyan"))


def _command(console: Console, text: str) -> None:
    """A command to type, indented, on one line however narrow the screen: folded, it
    could not be copied."""
    console.print(f"  [bold]{escape(text)}[/]", soft_wrap=True)


def _value(value: Any) -> str:
    """A value as the command line shows it: JSON, whole."""
    return escape(orjson.dumps(snapvc.to_jsonable(value)).decode())


def _document() -> str:
    """A draft of ten paragraphs in lines of 60-odd characters, as text is written: a
    change to one line shows as that line in a diff."""
    lines = ["Draft", "====="]
    for i in range(10):
        lines.append(f"Paragraph {i}: text text text text text")
        lines += ["text " * 12] * 15
        lines.append("")
    return "\n".join(lines)


def _step(state: dict[str, Any], step: int, action: str, finding: str | None, tokens: int) -> None:
    """One agent step: think, call a tool, record what it found (mutating the state in place)."""
    state["messages"].append({"role": "assistant", "content": f"Step {step}: {action}.",
                              "tool_calls": [{"name": "search", "arguments": {"query": action}}]})
    state["messages"].append({"role": "tool", "content": f"Results for {action!r}: " + "lorem ipsum " * 20})
    state["scratchpad"]["last_action"] = action
    state["scratchpad"]["step"] = step
    if finding:
        state["findings"].append(finding)
    state["usage"]["tokens"] += tokens


def run_demo(path: str | Path | None = None, console: Console | None = None) -> dict[str, Any]:
    """Run the demo on a new repository at ``path`` (a temporary folder if None); returns
    what it did, for tests."""
    console = console or Console()
    folder = None  # the temporary folder the demo made, to say how to remove it
    if path is None:
        folder = Path(tempfile.mkdtemp(prefix="snapvc-demo-"))
        path = folder / "agent.snapvc"
    path = Path(path)
    if path.exists():
        raise snapvc.InvalidArgumentError("path", f"{path} exists; the demo needs a new repository path")
    repo = snapvc.open(path)
    out: dict[str, Any] = {"path": str(path)}

    _say(console, "1. An agent run, checkpointed every step",
         "A research agent works on a task. After every step it commits its whole state "
         "(messages, scratchpad, findings, token usage) to a repository, one SQLite file "
         "(its path is printed at the end). Each commit stores only what changed since the last one.")
    state: dict[str, Any] = {
        "task": {"id": "task-42", "goal": "Summarize what makes transformer inference fast"},
        "messages": [{"role": "user", "content": "Summarize what makes transformer inference fast."}],
        "scratchpad": {"plan": "search, read, outline, write", "last_action": None, "step": 0},
        "findings": [],
        "usage": {"tokens": 0},
        "document": _document(),
    }
    rows: list[tuple[str, ...]] = []  # every commit: step, branch, id, message, what it added to the store

    def commit(state: dict[str, Any], message: str, metadata: dict[str, Any], branch: str = "main") -> snapvc.Commit:
        before = repo.store.sizes()
        made = repo.commit(state, branch=branch, message=message, metadata=metadata)
        after = repo.store.sizes()
        rows.append((str(metadata["step"]), branch, made.id.short[:8], message, f"{after.objects - before.objects:,}",
                     format_bytes(after.stored_bytes - before.stored_bytes)))
        return made

    plan = [
        ("plan the research", None, 120),
        ("search for sources", "found 6 candidate sources", 340),
        ("read the survey", "KV caching avoids recomputing attention", 910),
    ]
    commit(state, "start task", {"step": 0, "agent": "researcher"})
    for i, (action, finding, tokens) in enumerate(plan, start=1):
        _step(state, i, action, finding, tokens)
        commit(state, action, {"step": i, "agent": "researcher", "tokens": tokens})
    console.print(_table(rows, f"The first {len(rows)} commits, up to the decision point (part 7 lists them all)"))
    decision = repo.tag("decision-point", at="main")
    out["decision"] = decision.id

    _say(console, "2. Fork at a decision point",
         "Should the agent trust academic papers or web sources? Instead of choosing blindly "
         "it forks: branch [bold]try-web[/] starts from the same checkpoint as [bold]main[/]. "
         "Both branches share every object stored so far.")
    repo.branch("try-web", at="decision-point")
    web_state = repo.checkout("try-web")
    repo.switch("main")
    for i, title in enumerate(SOURCES["papers"][:2], start=4):
        _step(state, i, f"read paper: {title}", f"{title}: key result noted", 800)
        commit(state, f"read paper: {title}", {"step": i, "agent": "researcher", "source": "papers"})
    for i, title in enumerate(SOURCES["web"][:2], start=4):
        _step(web_state, i, f"read {title}", f"{title}: claims need checking", 500)
        commit(web_state, f"read {title}", {"step": i, "agent": "researcher", "source": "web"}, branch="try-web")
    state["document"] = state["document"].replace("Paragraph 5: text", "Paragraph 5: KV caching and batching", 1)
    commit(state, "revise paragraph 5", {"step": 6, "agent": "researcher", "source": "papers"})
    console.print(f"After their own steps, main is at {repo.branches()['main'].short[:8]} and try-web at "
                  f"{repo.branches()['try-web'].short[:8]}")

    _say(console, "3. The history, as `snapvc log --graph` shows it", "Newest first; both branches fork from the tagged decision point.")
    labels = labels_by_commit(repo)
    lines = []
    for row in graph_rows(repo.log(["main", "try-web"])):
        line = graph_markup(row.graph)
        if row.commit is not None:
            line += " " + commit_line(row.commit, labels.get(row.commit.id, ()))
        console.print(line, highlight=False)
        lines.append(Text.from_markup(line).plain)
    out["graph"] = lines

    _say(console, "4. What differs between the two branches (a structural diff)",
         "Paths inside the state, not lines of text: which messages, findings and fields changed, "
         "as `snapvc diff try-web main` shows them.")
    changes = repo.diff("try-web", "main")
    console.print(render_changes(changes, "try-web → main"), highlight=False)
    out["diff"] = [(format_path(ch.path), ch.kind) for ch in changes]

    _say(console, "5. Time travel: restore an earlier checkpoint",
         "The last step on main went wrong. Check out the state two steps back, then move "
         "the branch there with reset; the reflog remembers where it was, so reset is undoable.")
    earlier = repo.checkout("main~2")
    console.print(f"main~2 has {plural(len(earlier['messages']), 'message')} and "
                  f"{plural(len(earlier['findings']), 'finding')}:")
    for finding in earlier["findings"]:
        console.print(f"  {_value(finding)}", soft_wrap=True)
    tip = repo.resolve("main")
    repo.reset("main", to="main~2")
    console.print(f"reset to main~2: main is at {repo.resolve('main').short[:8]}")
    console.print(f"main@{{1}}, where it was before the reset: {repo.resolve('main@{1}').short[:8]}")
    repo.reset("main", to="main@{1}")
    console.print(f"reset to main@{{1}}, undone: main is back at {repo.resolve('main').short[:8]}")
    assert repo.resolve("main") == tip
    out["restored_messages"] = len(earlier["messages"])
    snap = repo.snapshot("main")
    console.print("A lazy snapshot reads one path without loading the rest; findings[-1]:")
    console.print(f"  {_value(snap['findings'][-1])}", soft_wrap=True)

    _say(console, "6. Bring the good parts back: a three-way merge",
         "Both branches appended messages and findings: a merge keeps both (main's first). Both "
         "also changed the scratchpad and the token count: those are conflicts, values the "
         "caller resolves. Here main's scratchpad wins and the tokens both branches spent add up.")

    def resolve(conflict: Any) -> Any:
        if conflict.path == ("usage", "tokens"):
            return conflict.ours + conflict.theirs - conflict.base
        return conflict.ours

    first = repo.merge("try-web", into="main")
    console.print(f"Without a resolver the merge stops on {plural(len(first.conflicts), 'conflict')} "
                  "and writes nothing:")
    for conflict in first.conflicts:
        console.print(f"  [bold]{escape(format_path(conflict.path))}[/]")
        for side, value in (("base", conflict.base), ("main", conflict.ours), ("try-web", conflict.theirs)):
            console.print(f"    {side:<8} {_value(value)}", soft_wrap=True)
    before = repo.store.sizes()
    merged = repo.merge("try-web", into="main", resolve=resolve, message="Merge try-web into main")
    after = repo.store.sizes()
    assert merged.commit is not None
    console.print(f"With the resolver: merged as {merged.commit.id.short[:8]}, "
                  f"{plural(len(merged.resolved), 'conflict')} resolved.")
    rows.append(("-", "main", merged.commit.id.short[:8], merged.commit.message, f"{after.objects - before.objects:,}",
                 format_bytes(after.stored_bytes - before.stored_bytes)))
    findings = repo.snapshot("main")["findings"]
    console.print(f"main now holds {plural(len(findings), 'finding')}; the last:")
    console.print(f"  {_value(findings[-1])}", soft_wrap=True)
    out["conflicts"] = [format_path(c.path) for c in first.conflicts]
    out["merged_findings"] = len(findings)
    changes_of_tokens = list(repo.history("main", "usage.tokens"))
    console.print(f"usage.tokens changed in {plural(len(changes_of_tokens), 'commit')} of main's history, newest first:")
    console.print("  " + ", ".join(f"{e.value}" for e in changes_of_tokens))
    out["token_history"] = [e.value for e in changes_of_tokens]

    _say(console, "7. What it cost", "Every checkpoint is a full state you can check out, yet the store holds each piece once.")
    stats = repo.stats()
    kinds = ", ".join(f"{n:,} {kind}" for kind, n in sorted(stats.objects_by_kind.items()))
    console.print(f"{plural(stats.commits, 'commit')} on {plural(stats.branches, 'branch', 'branches')}, "
                  f"{plural(stats.tags, 'tag')}")
    console.print(f"{plural(stats.objects, 'object')}: {kinds}")
    console.print(f"stored {format_bytes(stats.stored_bytes)} for {format_bytes(stats.logical_bytes)} of states: "
                  f"{stats.dedup_ratio:.1f}x smaller")
    console.print(_table(rows, f"All {len(rows)} commits, in the order they were made"))
    out["stats"] = stats
    out["commits_listed"] = [row[2] for row in rows]
    repo.close()

    console.print()
    console.print("Explore it yourself:")
    where = shlex.quote(str(path))
    _command(console, f"snapvc log --graph --repo {where}")
    _command(console, f"snapvc diff try-web main --repo {where}")
    if folder is not None:
        console.print("The repository is kept, in a temporary folder of its own; to remove it:")
        _command(console, f"rm -r {shlex.quote(str(folder))}")
    else:
        console.print("The repository stays where --repo put it.")
    out["kept_folder"] = str(folder) if folder is not None else None
    return out


def _table(rows: list[tuple[str, ...]], title: str) -> Table:
    table = Table("step", "branch", "commit", "message", "new objects", "new bytes", title=title,
                  title_justify="left")
    for row in rows:
        table.add_row(*map(escape, row))
    return table
