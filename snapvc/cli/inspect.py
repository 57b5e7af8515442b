"""The commands that read a repository: ``log``, ``show``, ``checkout``, ``diff``,
``history``, ``reflog``, ``stats``. None of them writes: ``snapvc switch`` moves HEAD."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import click
import orjson
from rich.markup import escape
from rich.table import Table

import snapvc
from snapvc.cli.common import (
    Output,
    commit_json,
    open_repo,
    parse_time,
    pass_output,
    progress,
    repo_command,
    rev_completion,
    state_path,
    value_at,
    where_filter,
)
from snapvc.cli.graph import graph_rows
from snapvc.cli.render import (
    FORMAT_HELP,
    change_json,
    commit_line,
    decoration,
    graph_markup,
    labels_by_commit,
    format_commit,
    render_changes,
    value_text,
)
from snapvc.diff.changes import format_path, plain_value
from snapvc.files import write_atomically
from snapvc.maintenance.stats import format_bytes
from snapvc.objects import shown_metadata

__all__ = ["checkout", "diff", "history", "log", "reflog", "show", "stats"]

_REVS = rev_completion()


def _dumps(value: Any) -> str:
    return orjson.dumps(snapvc.to_jsonable(value), option=orjson.OPT_INDENT_2).decode()


def _commit_header(out: Output, commit: snapvc.Commit, labels: list[str]) -> None:
    out.print(f"[yellow]commit {commit.id.hex}[/]{decoration(labels)}")
    if len(commit.parents) > 1:
        out.print("Merge: " + " ".join(p.short[:8] for p in commit.parents))  # one space, as git
    out.print(f"Author: {escape(commit.author)}")
    out.print(f"Date:   {commit.time.astimezone().strftime('%a %b %d %H:%M:%S %Y %z')}")
    for key, value in shown_metadata(commit).items():  # a value too deep or too large to show: cut
        out.print(f"[dim]Meta:   {escape(key)} = {escape(orjson.dumps(snapvc.to_jsonable(value)).decode())}[/]")
    out.print()
    for line in (commit.message or "(no message)").splitlines():
        out.print(f"    {escape(line)}")
    out.print()


@click.command()
@repo_command
@click.argument("revs", nargs=-1, shell_complete=_REVS)
@click.option("--oneline", is_flag=True, help="one line per commit: short id, labels, first line of the message")
@click.option("--graph", is_flag=True, help="draw the commit graph (one line per commit; every branch when no REVS)")
@click.option("--all", "all_refs", is_flag=True, help="start from every branch and tag")
@click.option("-n", "--max-count", type=click.IntRange(min=0), default=None, help="show at most N commits")
@click.option("--where", "where", multiple=True, metavar="KEY=VALUE",
              help="only commits whose metadata has KEY (dotted for nested keys) equal to VALUE (JSON, else text); repeatable")
@click.option("--since", metavar="TIME", help="only commits made at or after TIME (2026-11-23, '2 hours ago', Unix seconds)")
@click.option("--until", metavar="TIME", help="only commits made at or before TIME")
@click.option("--path", "paths", multiple=True, metavar="PATH", help="only commits that changed PATH (dotted); repeatable")
@click.option("-p", "--patch", is_flag=True, help="show what each commit changed against its first parent, as diff does")
@click.option("--stat", is_flag=True, help="show each commit's changes as a summary per top-level key, as diff --stat")
@click.option("--format", "fmt", metavar="FMT", default=None, help=FORMAT_HELP)
@pass_output
def log(out: Output, repo_path: str | None, as_json: bool, revs: tuple[str, ...], oneline: bool, graph: bool,
        all_refs: bool, max_count: int | None, where: tuple[str, ...], since: str | None, until: str | None,
        paths: tuple[str, ...], patch: bool, stat: bool, fmt: str | None) -> None:
    """Show the commits reachable from REVS (default: HEAD, or every branch while HEAD's
    branch has no commit), newest first.

    e.g. snapvc log --format '%h %ad %(meta:agent) %s'; snapvc log -p -n 3."""
    if graph and (patch or stat or fmt is not None):
        raise click.UsageError("--graph draws one line per commit: use it without -p, --stat and --format")
    if sum((oneline, fmt is not None)) > 1:
        raise click.UsageError("--oneline and --format are different outputs: choose one")
    filters = where_filter(where)
    lo = parse_time(since, "--since") if since else None
    hi = parse_time(until, "--until") if until else None
    with open_repo(repo_path) as repo:
        starts = list(revs)
        # No rev: HEAD, or every branch when HEAD's branch has no commit yet (a repository
        # whose history is all on other branches, as LangGraph threads are).
        everything = all_refs or (not revs and (graph or repo.head not in repo.branches()))
        if everything:
            starts += [*repo.branches(), *(f"tags/{t}" for t in repo.tags())]
        if not starts:
            starts = ["HEAD"]
        labels = labels_by_commit(repo)
        commits = repo.log(starts, limit=max_count, where=filters, since=lo, until=hi,
                           paths=[state_path(p) for p in paths] or None)
        if as_json:
            out.json([{**commit_json(c, labels.get(c.id, ())),
                       **({"changes": [change_json(x) for x in _changes_of(repo, c)]} if patch or stat else {})}
                      for c in commits])
            return
        with out.paged():
            if patch or stat or fmt is not None:
                for commit in commits:
                    here = labels.get(commit.id, [])
                    if fmt is not None:
                        out.print(escape(format_commit(fmt, commit, here)))
                    elif oneline:
                        out.print(commit_line(commit, here))
                    else:
                        _commit_header(out, commit, here)
                    if patch or stat:
                        title = (f"{commit.parents[0].short[:8]} → {commit.id.short[:8]}" if commit.parents
                                 else f"(empty) → {commit.id.short[:8]}")
                        _print_changes(out, _changes_of(repo, commit), title, stat and not patch, False, context=3)
                        if stat and patch:
                            _print_changes(out, _changes_of(repo, commit), title, True, False, context=3)
                        out.print()
            elif graph:
                for row in graph_rows(commits):
                    graph_part = graph_markup(row.graph)
                    if row.commit is None:
                        out.print(graph_part)
                    else:
                        out.print(f"{graph_part} " + commit_line(row.commit, labels.get(row.commit.id, ())))
            elif oneline:
                for commit in commits:
                    out.print(commit_line(commit, labels.get(commit.id, ())))
            else:
                for commit in commits:
                    _commit_header(out, commit, labels.get(commit.id, []))


def _changes_of(repo: snapvc.Repository, commit: snapvc.Commit) -> list[snapvc.Change]:
    """What ``commit`` changed against its first parent (a root commit: everything added)."""
    return repo.diff(commit.parents[0], commit.id) if commit.parents else repo.diff({}, commit.id)


@click.command()
@repo_command
@click.argument("target", default="HEAD", metavar="[REV | REV:PATH]", shell_complete=_REVS)
@click.option("--stat", is_flag=True, help="a summary of the changes per top-level key instead of the tree")
@click.option("--name-only", is_flag=True, help="only the changed paths")
@pass_output
def show(out: Output, repo_path: str | None, as_json: bool, target: str, stat: bool, name_only: bool) -> None:
    """Show a commit (its metadata, parents and what it changed), or with REV:PATH the
    value at PATH in REV's state (e.g. main~2:research.findings)."""
    rev, sep, dotted = target.partition(":")
    with open_repo(repo_path) as repo:
        commit = repo.get_commit(repo.resolve(rev or "HEAD"), rev=rev or "HEAD")
        if sep:
            value = value_at(repo.snapshot(commit.id), state_path(dotted), dotted, rev or "HEAD")
            value = plain_value(value)
            if as_json or not isinstance(value, str):
                click.echo(_dumps(value))
            else:
                click.echo(value)
            return
        changes = _changes_of(repo, commit)
        labels = labels_by_commit(repo).get(commit.id, [])
        if as_json:
            out.json({**commit_json(commit, labels), "changes": [change_json(c) for c in changes]})
            return
        with out.paged():
            _commit_header(out, commit, labels)
            _print_changes(out, changes, f"{commit.parents[0].short[:8]} → {commit.id.short[:8]}" if commit.parents
                           else f"(empty) → {commit.id.short[:8]}", stat, name_only, context=3)


def _print_changes(out: Output, changes: list[snapvc.Change], title: str, stat: bool, name_only: bool,
                   context: int) -> None:
    if name_only:
        for change in changes:
            out.print(escape(format_path(change.path)))
    elif stat:
        for line in str(snapvc.diff_stat(changes)).splitlines():
            out.print(escape(line))
    elif changes:
        # Wrapped, not cut, at the screen's edge (the console's default): the new value must stay in view.
        out.print(render_changes(changes, title, context), soft_wrap=False)
    else:
        out.print("[dim]no changes[/]")


@click.command()
@repo_command
@click.argument("rev", default="HEAD", shell_complete=_REVS)
@click.option("--path", "dotted", default=None, metavar="PATH",
              help="only the value at PATH: dotted (research.findings.0) or a JSON Pointer (/research/findings/0)")
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False, writable=True), default=None,
              help="write the JSON to this file instead of stdout")
@pass_output
def checkout(out: Output, repo_path: str | None, as_json: bool, rev: str, dotted: str | None,
             output: str | None) -> None:
    """Print the state at REV as JSON (exact: values JSON cannot hold are tagged objects
    that 'snapvc commit' reads back). A read: HEAD stays where it is ('snapvc switch' moves it)."""
    with open_repo(repo_path) as repo:
        if dotted is None:
            value: Any = repo.checkout(rev)
        else:
            commit = repo.resolve(rev)
            value = value_at(repo.snapshot(commit), state_path(dotted), dotted, rev)
            value = plain_value(value)
        text = _dumps(value)
        if output is None:
            click.echo(text)
        else:  # all or nothing: a failed write (a full disk) leaves the old file as it was
            write_atomically(output, (text + "\n").encode())


@click.command()
@repo_command
@click.argument("a", shell_complete=_REVS)
@click.argument("b", required=False, shell_complete=_REVS)
@click.argument("paths", nargs=-1, metavar="[PATH]...")
@click.option("--stat", is_flag=True, help="a summary per top-level key: counts and bytes, as git diff --stat")
@click.option("--name-only", is_flag=True, help="only the changed paths, one per line")
@click.option("--json-patch", is_flag=True, help="the changes as an RFC 6902 JSON Patch")
@click.option("-U", "--unified", "context", type=click.IntRange(min=0), default=3, show_default=True,
              help="lines of context around a changed text's lines")
@click.option("--exit-code/--no-exit-code", default=False,
              help="exit 1 when there are differences, 0 when there are none (as git diff --exit-code)")
@pass_output
def diff(out: Output, repo_path: str | None, as_json: bool, a: str, b: str | None, paths: tuple[str, ...],
         stat: bool, name_only: bool, json_patch: bool, context: int, exit_code: bool) -> None:
    """Show what changed from A to B, as a tree of paths (only below PATHs, if given).
    With A alone: what commit A changed against its first parent. Exits 0 whether or
    not anything differs, as git diff does; with --exit-code, 1 when anything differs."""
    if sum((stat, name_only, json_patch, as_json)) > 1:
        raise click.UsageError("--stat, --name-only, --json-patch and --json are different outputs: choose one")
    with open_repo(repo_path) as repo:
        if b is None:
            commit = repo.get_commit(repo.resolve(a), rev=a)
            old: Any = commit.parents[0] if commit.parents else {}
            new: Any = commit.id
            title = f"{a}^ → {a}" if commit.parents else f"(empty) → {a}"
        else:
            old, new, title = a, b, f"{a} → {b}"
        changes = repo.diff(old, new, paths=[state_path(p) for p in paths] or None)
        if as_json:
            out.json([change_json(c) for c in changes])
        elif json_patch:
            out.json(snapvc.to_jsonable(snapvc.to_json_patch(changes)))
        else:
            with out.paged():
                _print_changes(out, changes, title, stat, name_only, context)
    sys.exit(1 if changes and exit_code else 0)


@click.command()
@repo_command
@click.argument("path")
@click.argument("rev", default="HEAD", shell_complete=_REVS)
@click.option("-n", "--max-count", type=click.IntRange(min=0), default=None, help="at most N changes")
@click.option("--reverse", is_flag=True, help="oldest first")
@pass_output
def history(out: Output, repo_path: str | None, as_json: bool, path: str, rev: str, max_count: int | None,
            reverse: bool) -> None:
    """Show the commits reachable from REV that changed the value at PATH, with the
    value each gave it, newest first."""
    with open_repo(repo_path) as repo:
        entries = repo.history(rev, state_path(path), limit=max_count, oldest_first=reverse)
        if as_json:
            out.json([{"commit": commit_json(e.commit), "kind": e.kind, "value": snapvc.to_jsonable(e.value),
                       "old": snapvc.to_jsonable(e.old)} for e in entries])
            return
        with out.paged():
            for entry in entries:
                when = entry.commit.time.astimezone().strftime("%Y-%m-%d %H:%M:%S")
                first = entry.commit.message.splitlines()[0] if entry.commit.message else ""
                if entry.kind == "removed":
                    change = f"[red]- removed[/] (was {escape(value_text(entry.old))})"
                elif entry.kind == "added":
                    change = f"[green]+ {escape(value_text(entry.value))}[/]"
                else:
                    change = f"[yellow]~ {escape(value_text(entry.value))}[/] [dim](was {escape(value_text(entry.old))})[/]"
                out.print(f"[yellow]{entry.commit.id.short[:8]}[/] [dim]{when}[/] {change}  [dim]{escape(first)}[/]")


@click.command()
@repo_command
@click.argument("ref", default="HEAD", shell_complete=_REVS)
@click.option("-n", "--max-count", type=click.IntRange(min=0), default=None, help="at most N entries")
@pass_output
def reflog(out: Output, repo_path: str | None, as_json: bool, ref: str, max_count: int | None) -> None:
    """Show the moves of REF (a branch, a tag or HEAD's branch), newest first:
    REF@{N} is where it was N moves ago."""
    with open_repo(repo_path) as repo:
        entries = repo.reflog(ref, limit=max_count)
        name = repo.head if ref == "HEAD" else ref
        if as_json:
            out.json([{"ref": e.ref, "old": e.old.hex if e.old else None, "new": e.new.hex if e.new else None,
                       "time": datetime.fromtimestamp(e.time, UTC).isoformat(), "reason": e.reason} for e in entries])
            return
        with out.paged():
            for n, entry in enumerate(entries):
                short = entry.new.short[:8] if entry.new else "(deleted)"
                out.print(f"[yellow]{short}[/] {escape(name)}@{{{n}}}: {escape(entry.reason)}")


@click.command()
@repo_command
@click.option("--branches/--no-branches", "per_branch", default=True, show_default=True,
              help="also a line per branch (reads every object once per branch)")
@pass_output
def stats(out: Output, repo_path: str | None, as_json: bool, per_branch: bool) -> None:
    """Objects, stored bytes against the bytes the states would take stored whole,
    and the dedup ratio, in all and per branch."""
    with open_repo(repo_path) as repo:
        total = repo.stats()
        names = list(repo.branches()) if per_branch else []
        logical: dict[bytes, int] = {}
        rows = [repo.branch_stats(name, _logical=logical) for name in progress(names, len(names), "branches")]
        if as_json:
            out.json({"commits": total.commits, "branches": total.branches, "tags": total.tags,
                      "objects": total.objects, "objects_by_kind": total.objects_by_kind,
                      "stored_bytes": total.stored_bytes, "logical_bytes": total.logical_bytes,
                      "ratio": total.dedup_ratio,
                      "by_branch": {r.branch: {"commits": r.commits, "objects": r.objects,
                                               "distinct_bytes": r.distinct_bytes, "logical_bytes": r.logical_bytes,
                                               "dedup_ratio": r.dedup_ratio} for r in rows}})
            return
        out.print(escape(str(total)))
        if rows:
            table = Table("branch", "commits", "objects", "distinct", "states whole", "dedup",
                          box=None, header_style="bold", pad_edge=False)
            for row in rows:
                table.add_row(escape(row.branch), f"{row.commits:,}", f"{row.objects:,}", format_bytes(row.distinct_bytes),
                              format_bytes(row.logical_bytes), f"{row.dedup_ratio:.1f}x")
            out.print(table)

