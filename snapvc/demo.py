"""``snapvc demo``: a small simulated agent run that shows what snapvc does.

A research agent checkpoints its state after every step on the embedded default
store; at a decision point it forks to try a second approach; both branches go on;
then the demo draws the history as a graph, diffs the two branches, travels back to an
earlier checkpoint, undoes a reset through the reflog, merges the branches back
(resolving conflicts), and prints the storage stats.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

import snapvc
from snapvc.cli.graph import graph_rows
from snapvc.cli.render import commit_line, graph_markup, labels_by_commit, render_changes
from snapvc.diff.changes import format_path

__all__ = ["run_demo"]

SOURCES = {
    "papers": ["Attention Is All You Need", "Scaling Laws for Neural Language Models", "Chinchilla"],
    "web": ["a blog post on KV caches", "a forum thread on quantization", "vendor benchmark notes"],
}


def _say(console: Console, title: str, text: str) -> None:
    console.print()
    console.print(Panel(text, title=f"[bold]{title}", title_align="left", border_style="cyan"))


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
    if path is None:
        path = Path(tempfile.mkdtemp(prefix="snapvc-demo-")) / "agent.snapvc"
    path = Path(path)
    if path.exists():
        raise snapvc.InvalidArgumentError("path", f"{path} exists; the demo needs a new repository path")
    repo = snapvc.open(path)
    out: dict[str, Any] = {"path": str(path)}

    _say(console, "1. An agent run, checkpointed every step",
         f"A research agent works on a task. After every step it commits its whole state "
         f"(messages, scratchpad, findings, token usage) to [bold]{path}[/], one SQLite file. "
         f"Each commit stores only what changed since the last one.")
    state: dict[str, Any] = {
        "task": {"id": "task-42", "goal": "Summarize what makes transformer inference fast"},
        "messages": [{"role": "user", "content": "Summarize what makes transformer inference fast."}],
        "scratchpad": {"plan": "search, read, outline, write", "last_action": None, "step": 0},
        "findings": [],
        "usage": {"tokens": 0},
        "document": "Draft\n=====\n" + "".join(f"Paragraph {i}: " + "text " * 200 + "\n" for i in range(10)),
    }
    table = Table("step", "commit", "message", "new objects", "new bytes")
    plan = [
        ("plan the research", None, 120),
        ("search for sources", "found 6 candidate sources", 340),
        ("read the survey", "KV caching avoids recomputing attention", 910),
    ]
    before = repo.store.sizes()
    c = repo.commit(state, message="start task", metadata={"step": 0, "agent": "researcher"})
    after = repo.store.sizes()
    table.add_row("0", c.id.short, "start task", str(after.objects - before.objects), f"{after.stored_bytes - before.stored_bytes:,}")
    for i, (action, finding, tokens) in enumerate(plan, start=1):
        _step(state, i, action, finding, tokens)
        before = after
        c = repo.commit(state, message=action, metadata={"step": i, "agent": "researcher", "tokens": tokens})
        after = repo.store.sizes()
        table.add_row(str(i), c.id.short, action, str(after.objects - before.objects), f"{after.stored_bytes - before.stored_bytes:,}")
    console.print(table)
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
        repo.commit(state, message=f"read paper: {title}", metadata={"step": i, "agent": "researcher", "source": "papers"})
    for i, title in enumerate(SOURCES["web"][:2], start=4):
        _step(web_state, i, f"read {title}", f"{title}: claims need checking", 500)
        repo.commit(web_state, branch="try-web", message=f"read {title}", metadata={"step": i, "agent": "researcher", "source": "web"})
    state["document"] = state["document"].replace("Paragraph 5: text", "Paragraph 5: KV caching and batching", 1)
    c = repo.commit(state, message="revise paragraph 5", metadata={"step": 6, "agent": "researcher", "source": "papers"})
    console.print(f"main is at {repo.branches()['main'].short}, try-web at {repo.branches()['try-web'].short}")

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
    console.print(f"main~2 has {len(earlier['messages'])} messages and findings {earlier['findings']}")
    tip = repo.resolve("main")
    repo.reset("main", to="main~2")
    console.print(f"after reset, main is at {repo.resolve('main').short}; main@{{1}} (before the reset) is {repo.resolve('main@{1}').short}")
    repo.reset("main", to="main@{1}")
    console.print(f"undone: main is back at {repo.resolve('main').short}")
    assert repo.resolve("main") == tip
    out["restored_messages"] = len(earlier["messages"])
    snap = repo.snapshot("main")
    console.print(f"A lazy snapshot reads one path without loading the rest: findings[-1] = {snap['findings'][-1]!r}")

    _say(console, "6. Bring the good parts back: a three-way merge",
         "Both branches appended messages and findings: a merge keeps both (main's first). Both "
         "also changed the scratchpad and the token count: those are conflicts, values the "
         "caller resolves. Here main's scratchpad wins and the tokens both branches spent add up.")

    def resolve(conflict: Any) -> Any:
        if conflict.path == ("usage", "tokens"):
            return conflict.ours + conflict.theirs - conflict.base
        return conflict.ours

    first = repo.merge("try-web", into="main")
    console.print(f"without a resolver: {first}")
    merged = repo.merge("try-web", into="main", resolve=resolve)
    console.print(f"with one: {merged}")
    findings = repo.snapshot("main")["findings"]
    console.print(f"main now holds {len(findings)} findings; the last: {findings[-1]!r}")
    out["conflicts"] = [format_path(c.path) for c in first.conflicts]
    out["merged_findings"] = len(findings)
    changes_of_tokens = list(repo.history("main", "usage.tokens"))
    console.print(f"usage.tokens changed in {len(changes_of_tokens)} commits of main's history (newest first): "
                  + ", ".join(f"{e.value}" for e in changes_of_tokens))
    out["token_history"] = [e.value for e in changes_of_tokens]

    _say(console, "7. What it cost", "Every checkpoint is a full state you can check out, yet the store holds each piece once.")
    stats = repo.stats()
    console.print(str(stats))
    out["stats"] = stats
    console.print(f"\nExplore it yourself: [bold]snapvc log --graph --repo {path}[/]")
    repo.close()
    return out
