"""The commands that change a repository: ``init``, ``commit``, ``branch``, ``tag``,
``reset``, ``merge``, ``revert``, ``cherry-pick``. Each ref they move is in the reflog,
so ``snapvc reset BRANCH@{1}`` undoes the last move."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Literal

import click
import orjson
from rich.markup import escape

import snapvc
from snapvc.cli.common import (
    Output,
    commit_json,
    open_repo,
    parse_assignments,
    pass_output,
    plural,
    repo_command,
    rev_completion,
)
from snapvc.cli.pending import (
    NEXT_STEPS,
    PendingMerge,
    conflict_record,
    decider,
    load_pending,
    print_pending,
    save_pending,
)
from snapvc.cli.render import commit_line, value_text
from snapvc.diff.changes import format_path, plain_value

__all__ = ["branch", "cherry_pick", "commit", "init", "merge", "reset", "revert", "tag"]

_REVS = rev_completion()
_BRANCHES = rev_completion(("branches",))
_TAGS = rev_completion(("tags",))


@click.command()
@click.argument("path", default="agent.snapvc", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="print one JSON document (machine-readable)")
@pass_output
def init(out: Output, path: str, as_json: bool) -> None:
    """Create an empty repository file at PATH (default: agent.snapvc)."""
    if Path(path).exists():
        raise click.UsageError(f"{path} already exists; open it with --repo {path}, or choose another path")
    snapvc.open(path).close()
    if as_json:
        out.json({"repository": str(Path(path).resolve())})
    else:
        out.print(f"Initialized empty snapvc repository in {escape(str(Path(path).resolve()))}")


def _read_state(source: str) -> dict[str, Any]:
    """The state to commit: JSON from a file or ``-`` (stdin), in ``snapvc.to_jsonable``'s
    form (plain JSON is that form too)."""
    where = "stdin" if source == "-" else source
    try:
        data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        raise click.BadParameter(f"cannot read {where}: {exc.strerror}", param_hint="FILE") from None
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"{where} is not JSON: {exc}", param_hint="FILE") from None
    if not isinstance(parsed, dict):
        kind = "array" if isinstance(parsed, list) else "string" if isinstance(parsed, str) else \
            "null" if parsed is None else "boolean" if isinstance(parsed, bool) else "number"
        raise click.BadParameter(f"{where} holds a JSON {kind}; a state is a JSON object "
                                 '(e.g. {"messages": []})', param_hint="FILE")
    try:
        state: dict[str, Any] = snapvc.from_jsonable(parsed, where)  # a JSON object comes back a dict
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="FILE") from None
    return state


def _summary(repo: snapvc.Repository, branch_name: str | None, state: dict[str, Any]) -> str:
    """The message of a commit made without -m: the top-level keys that differ from the
    branch's tip, at most three named ('Update a, b, c and 2 more keys')."""
    tip = repo.branches().get((branch_name or repo.head).removeprefix("refs/heads/"))
    changes = repo.diff(tip, state) if tip is not None else repo.diff({}, state)
    keys = list(dict.fromkeys(format_path(change.path[:1]) for change in changes))
    if not keys:
        return "No change to the state"
    named = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more keys" if len(keys) > 3 else "")
    return f"Update {named}" if tip is not None else f"Initial state: {named}"


@click.command()
@repo_command
@click.argument("file", default="-", metavar="[FILE]")
@click.option("-m", "--message", default=None,
              help="the commit message (default: the top-level keys that changed, e.g. 'Update messages, plan')")
@click.option("--meta", "meta", multiple=True, metavar="KEY=VALUE",
              help="metadata (VALUE is JSON, else text): --meta step=3 --meta agent=researcher; repeatable")
@click.option("-b", "--branch", "branch_name", default=None, help="the branch to commit on (default: HEAD's)",
              shell_complete=_BRANCHES)
@pass_output
def commit(out: Output, repo_path: str | None, as_json: bool, file: str, message: str | None,
           meta: tuple[str, ...], branch_name: str | None) -> None:
    """Commit the state in FILE (JSON; '-' or none: read from stdin) as the next
    checkpoint of a branch.

    Without -m, the message says which top-level keys changed ('Update messages,
    plan'). git would open an editor, and refuse an empty message; a snapvc commit is
    as often made by a script or an agent, with the state on stdin and no one to type,
    so it is never refused for want of a message, and its line in 'log --oneline' still
    says something."""
    if file == "-" and sys.stdin.isatty():
        raise click.UsageError("give the state as a JSON file, or pipe it in: snapvc checkout > state.json; "
                               "... ; snapvc commit state.json -m 'step 3'")
    metadata = parse_assignments(meta, "--meta")
    state = _read_state(file)
    with open_repo(repo_path) as repo:
        if message is None:
            message = _summary(repo, branch_name, state)
        made = repo.commit(state, branch=branch_name, message=message, metadata=metadata or None)
        changes = repo.diff(made.parents[0], made.id) if made.parents else repo.diff({}, made.id)
        name = branch_name or repo.head
        if as_json:
            out.json({**commit_json(made), "branch": name, "changes": len(changes)})
            return
        root = "" if made.parents else " (root-commit)"
        out.print(f"[{escape(name)}{root} [yellow]{made.id.short[:8]}[/]] {escape(made.message or '')}")
        out.print(f" {len(changes)} path{'' if len(changes) == 1 else 's'} changed")


@click.command()
@repo_command
@click.argument("name", required=False, shell_complete=_BRANCHES)
@click.argument("start", required=False, default="HEAD", metavar="[START]", shell_complete=_REVS)
@click.option("-d", "--delete", is_flag=True, help="delete branch NAME (its commits stay in the reflog)")
@click.option("-f", "--force", is_flag=True, help="move NAME to START if it exists")
@pass_output
def branch(out: Output, repo_path: str | None, as_json: bool, name: str | None, start: str, delete: bool,
           force: bool) -> None:
    """List branches; create NAME at START (a fork; default HEAD); delete NAME with -d."""
    with open_repo(repo_path) as repo:
        if name is None:
            if delete:
                raise click.UsageError("-d needs the NAME of the branch to delete")
            head, rows = repo.head, repo.branches()
            tips = {oid: repo.get_commit(oid) for oid in set(rows.values())}
            if as_json:
                out.json([{"name": n, "commit": oid.hex, "head": n == head, "message": tips[oid].message}
                          for n, oid in rows.items()])
                return
            width = max(map(len, rows), default=0)
            for branch_name, oid in rows.items():
                mark = "[green]*[/] " if branch_name == head else "  "
                label = f"[green]{escape(branch_name):<{width}}[/]" if branch_name == head else f"{escape(branch_name):<{width}}"
                out.print(f"{mark}{label} {commit_line(tips[oid], ())}")
        elif delete:
            old = repo.delete_branch(name)
            if as_json:
                out.json({"deleted": name, "was": old.hex})
            else:
                out.print(f"Deleted branch {escape(name)} (was {old.short[:8]}); "
                          f"'snapvc branch {escape(name)} {old.short[:8]}' brings it back")
        else:
            made = repo.branch(name, at=start, force=force)
            if as_json:
                out.json({"created": name, "commit": made.id.hex})
            else:
                out.print(f"Created branch {escape(name)} at {commit_line(made, ())}")


@click.command()
@repo_command
@click.argument("name", shell_complete=_BRANCHES)
@pass_output
def switch(out: Output, repo_path: str | None, as_json: bool, name: str) -> None:
    """Make branch NAME HEAD's branch: where 'snapvc commit' and 'snapvc merge' go by default."""
    with open_repo(repo_path) as repo:
        before = repo.head
        repo.switch(name)
        if as_json:
            out.json({"head": repo.head, "was": before})
        elif before == repo.head:
            out.print(f"Already on '{escape(repo.head)}'")
        else:
            out.print(f"Switched to branch '{escape(repo.head)}'")


@click.command()
@repo_command
@click.argument("name", required=False, shell_complete=_TAGS)
@click.argument("rev", required=False, default="HEAD", metavar="[REV]", shell_complete=_REVS)
@click.option("-d", "--delete", is_flag=True, help="delete tag NAME")
@click.option("-f", "--force", is_flag=True, help="move NAME to REV if it exists")
@pass_output
def tag(out: Output, repo_path: str | None, as_json: bool, name: str | None, rev: str, delete: bool,
        force: bool) -> None:
    """List tags; create tag NAME at REV (default HEAD); delete NAME with -d."""
    with open_repo(repo_path) as repo:
        if name is None:
            if delete:
                raise click.UsageError("-d needs the NAME of the tag to delete")
            rows = repo.tags()
            if as_json:
                out.json([{"name": n, "commit": oid.hex} for n, oid in rows.items()])
                return
            width = max(map(len, rows), default=0)  # the commits in one column, as 'snapvc branch' lists them
            for tag_name, oid in rows.items():
                out.print(f"{escape(tag_name):<{width}} {commit_line(repo.get_commit(oid), ())}")
        elif delete:
            old = repo.delete_tag(name)
            if as_json:
                out.json({"deleted": name, "was": old.hex})
            else:
                out.print(f"Deleted tag {escape(name)} (was {old.short[:8]})")
        else:
            made = repo.tag(name, at=rev, force=force)
            if as_json:
                out.json({"created": name, "commit": made.id.hex})
            else:
                out.print(f"Tagged {commit_line(made, ())} as {escape(name)}")


@click.command()
@repo_command
@click.argument("rev", shell_complete=_REVS)
@click.option("-b", "--branch", "branch_name", default=None, help="the branch to move (default: HEAD's)",
              shell_complete=_BRANCHES)
@pass_output
def reset(out: Output, repo_path: str | None, as_json: bool, rev: str, branch_name: str | None) -> None:
    """Move a branch to REV: time travel on the same branch. The reflog keeps where it
    was: 'snapvc reset BRANCH@{1}' undoes it."""
    with open_repo(repo_path) as repo:
        name = branch_name or repo.head
        old = repo.resolve(name)
        made = repo.reset(name, to=rev)
        if as_json:
            out.json({"branch": name, "commit": made.id.hex, "was": old.hex})
        else:
            out.print(f"{escape(name)} is now at {commit_line(made, ())} (was {old.short[:8]}); "
                      f"undo with 'snapvc reset {escape(name)}@{{1}}'")


def _report(out: Output, as_json: bool, result: snapvc.MergeResult, what: str,
            next_steps: str = "Decide with --strategy ours or --strategy theirs, or merge from Python with a resolver "
                              "(repo.merge(..., resolve=fn)).") -> None:
    """A merge, revert or cherry-pick's outcome; exit 1 when conflicts were left."""
    if as_json:
        out.json({"ok": result.ok, "commit": result.commit.id.hex if result.commit else None,
                  "fast_forward": result.fast_forward, "up_to_date": result.up_to_date,
                  "base": result.base.hex if result.base else None,
                  "conflicts": [{"path": list(c.path), "where": format_path(c.path),
                                 **{side: None if v is snapvc.ABSENT else snapvc.to_jsonable(plain_value(v))
                                    for side, v in (("base", c.base), ("ours", c.ours), ("theirs", c.theirs))}}
                                for c in result.conflicts],
                  "resolved": [format_path(c.path) for c in result.resolved]})
    elif result.conflicts:
        out.print(f"[red]{what} stopped: {len(result.conflicts)} conflict{'s' if len(result.conflicts) > 1 else ''}, "
                  "nothing was written[/]")
        for c in result.conflicts:
            out.print(f"  [red]CONFLICT[/] [bold]{escape(format_path(c.path))}[/]: base {_shown(c.base)}, "
                      f"ours [green]{_shown(c.ours)}[/], theirs [cyan]{_shown(c.theirs)}[/]")
        out.print(next_steps)
    elif result.up_to_date:
        out.print("Already up to date.")
    else:
        assert result.commit is not None
        how = "Fast-forward to" if result.fast_forward else f"{what} made"
        out.print(f"{how} {commit_line(result.commit, ())}")
        for c in result.resolved:
            out.print(f"  [dim]resolved {escape(format_path(c.path))}[/]")
    if result.conflicts:
        sys.exit(1)


def _shown(value: Any) -> str:
    return "(absent)" if value is snapvc.ABSENT else escape(value_text(value, 40))


_STRATEGY = click.option("-s", "--strategy", type=click.Choice(["ours", "theirs"]), default=None,
                         help="decide every conflict for our side or theirs")


@click.command()
@repo_command
@click.argument("source", required=False, shell_complete=_REVS)
@click.option("--into", default=None, help="the branch to merge into (default: HEAD's)", shell_complete=_BRANCHES)
@click.option("-m", "--message", default=None, help="the merge commit's message")
@_STRATEGY
@click.option("--no-ff", is_flag=True, help="make a merge commit even when a fast-forward would do")
@click.option("--continue", "go_on", is_flag=True,
              help="make the merge commit of the merge in progress, its conflicts resolved ('snapvc resolve')")
@click.option("--abort", is_flag=True, help="give up the merge in progress (no branch moved: nothing to undo)")
@pass_output
def merge(out: Output, repo_path: str | None, as_json: bool, source: str | None, into: str | None,
          message: str | None, strategy: Literal["ours", "theirs"] | None, no_ff: bool, go_on: bool,
          abort: bool) -> None:
    """Merge SOURCE into a branch: three-way, key by key and list by list.

    Conflicts are listed by path, nothing is committed, and the merge is left in
    progress (exit 1), as git leaves it: decide each path with 'snapvc resolve PATH
    --ours|--theirs|--value JSON', then 'snapvc merge --continue'; or 'snapvc merge
    --abort'. --strategy decides every conflict at once instead."""
    with open_repo(repo_path) as repo:
        pending = load_pending(repo)
        if go_on or abort:
            if source is not None or (go_on and abort) or strategy is not None:
                raise click.UsageError("--continue and --abort take no SOURCE, no --strategy and not each other")
            if pending is None:
                raise click.UsageError("no merge in progress: 'snapvc merge SOURCE' starts one")
            if abort:
                save_pending(repo, None)
                out.print(f"Merge of {escape(pending.source)} into {escape(pending.into)} aborted; "
                          f"{escape(pending.into)} is still at {pending.ours[:8]}")
                return
            _continue(out, as_json, repo, pending)
            return
        if source is None:
            raise click.UsageError("give the SOURCE to merge (a branch, tag or commit), or --continue or --abort")
        if pending is not None:
            raise click.UsageError(f"a merge of {pending.source} into {pending.into} is in progress: finish it with "
                                   "'snapvc resolve' and 'snapvc merge --continue', or 'snapvc merge --abort'")
        name = (into or repo.head).removeprefix("refs/heads/")
        ours = repo.branches().get(name)
        result = repo.merge(source, into=into, message=message, resolve=strategy, no_ff=no_ff)
        if result.conflicts and ours is not None:
            save_pending(repo, PendingMerge(into=name, source=source, ours=ours.hex, theirs=repo.resolve(source).hex,
                                            message=message if message is not None else f"Merge {source} into {name}",
                                            no_ff=no_ff, conflicts=[conflict_record(c) for c in result.conflicts]))
        _report(out, as_json, result, "Merge", f"The merge is in progress. {NEXT_STEPS}")


def _continue(out: Output, as_json: bool, repo: snapvc.Repository, pending: PendingMerge) -> None:
    """Make the merge commit of ``pending``, every conflict decided as recorded."""
    left = pending.undecided()
    if left:
        out.print(f"[red]{len(left)} of {plural(len(pending.conflicts), 'conflict')} not resolved yet:[/]")
        print_pending(out, pending)
        out.print(NEXT_STEPS)
        sys.exit(1)
    tip = repo.branches().get(pending.into)
    if tip is None or tip.hex != pending.ours:
        raise click.ClickException(f"{pending.into} moved since the merge began (from {pending.ours[:8]} to "
                                   f"{tip.short[:8] if tip else 'nowhere'}): 'snapvc merge --abort', then merge again")
    result = repo.merge(pending.theirs, into=pending.into, message=pending.message, resolve=decider(pending),
                        no_ff=pending.no_ff)
    save_pending(repo, None)
    _report(out, as_json, result, "Merge")


@click.command()
@repo_command
@click.argument("rev", shell_complete=_REVS)
@click.option("-b", "--branch", "branch_name", default=None, help="the branch to commit on (default: HEAD's)",
              shell_complete=_BRANCHES)
@click.option("--mainline", type=click.IntRange(min=1), default=1, show_default=True,
              help="for a merge commit: the parent number whose side is kept")
@_STRATEGY
@pass_output
def revert(out: Output, repo_path: str | None, as_json: bool, rev: str, branch_name: str | None, mainline: int,
           strategy: Literal["ours", "theirs"] | None) -> None:
    """Commit the undoing of REV's changes on a branch."""
    with open_repo(repo_path) as repo:
        _report(out, as_json, repo.revert(rev, branch=branch_name, resolve=strategy, mainline=mainline), "Revert")


@click.command("cherry-pick")
@repo_command
@click.argument("rev", shell_complete=_REVS)
@click.option("--onto", default=None, help="the branch to commit on (default: HEAD's)", shell_complete=_BRANCHES)
@click.option("--mainline", type=click.IntRange(min=1), default=1, show_default=True,
              help="for a merge commit: the parent number its changes are taken against")
@_STRATEGY
@pass_output
def cherry_pick(out: Output, repo_path: str | None, as_json: bool, rev: str, onto: str | None, mainline: int,
                strategy: Literal["ours", "theirs"] | None) -> None:
    """Apply REV's changes onto a branch as a new commit."""
    with open_repo(repo_path) as repo:
        _report(out, as_json, repo.cherry_pick(rev, onto=onto, resolve=strategy, mainline=mainline), "Cherry-pick")
