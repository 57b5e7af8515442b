"""The commands between snapvc and git: ``export-git`` (and ``--push``) and
``import-git``."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

import snapvc
from snapvc.cli.common import Output, open_repo, pass_output, plural, progress_bar, repo_command, rev_completion

__all__ = ["export_git", "import_git"]


@click.command("export-git")
@repo_command
@click.argument("path", type=click.Path(file_okay=False))
@click.option("-b", "--branch", "branches", multiple=True, metavar="NAME", shell_complete=rev_completion(("branches",)),
              help="export this branch (repeatable; default: every branch and tag)")
@click.option("--worktree", is_flag=True, help="a repository with a work tree (HEAD's files checked out) rather than bare")
@click.option("--push", "push", metavar="URL", default=None,
              help="then push the exported refs to this git remote (a path, file://, git://, ssh:// or https://)")
@click.option("-f", "--force", is_flag=True, help="with --push: allow a non-fast-forward")
@pass_output
def export_git(out: Output, repo_path: str | None, as_json: bool, path: str, branches: tuple[str, ...], worktree: bool,
               push: str | None, force: bool) -> None:
    """Write the history as a git repository at PATH (created if missing; later
    exports add only new commits). Each state is a tree of readable files; each
    commit keeps its author, time, parents, message and metadata."""
    with open_repo(repo_path) as repo, progress_bar("export") as update:
        result = repo.export_git(path, branches or None, bare=not worktree, push=push, force=force, progress=update)
    if as_json:
        out.json({"path": str(Path(path).resolve()), "commits": result.commits, "objects": result.objects,
                  "refs": result.refs, "pushed": result.pushed})
        return
    out.print(f"Exported {plural(result.commits, 'new commit')} ({plural(result.objects, 'object')}) "
              f"to {escape(path)}")
    for ref, sha in result.refs.items():
        out.print(f"  [yellow]{sha[:8]}[/] {escape(ref)}")
    if result.pushed:
        out.print(f"Pushed {plural(len(result.pushed), 'ref')} to {escape(push or '')}")


@click.command("import-git")
@click.option("--repo", "repo_path", metavar="PATH", envvar="SNAPVC_REPO",
              help="the repository to import into (created if missing; default: $SNAPVC_REPO, else the nearest *.snapvc)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON document (machine-readable)")
@click.argument("path", type=click.Path(exists=True, file_okay=False))
@click.option("-b", "--branch", "branches", multiple=True, metavar="NAME",
              help="import this branch (repeatable; default: every branch and tag)")
@pass_output
def import_git(out: Output, repo_path: str | None, as_json: bool, path: str, branches: tuple[str, ...]) -> None:
    """Read the history of the git repository at PATH (one that export-git wrote, or
    any whose commits hold JSON files) and point branches and tags at it."""
    repo = snapvc.open(repo_path) if repo_path is not None else open_repo(None)
    with repo:
        result = repo.import_git(path, branches or None)
    if as_json:
        out.json({"commits": result.commits, "new": result.new, "branches": {n: c.hex for n, c in result.branches.items()},
                  "tags": {n: c.hex for n, c in result.tags.items()}, "inexact": result.inexact})
        return
    out.print(f"Imported {plural(result.commits, 'commit')} ({result.new:,} new) from {escape(path)}")
    for name, oid in result.branches.items():
        out.print(f"  [yellow]{oid.short[:8]}[/] {escape(name)}")
    for name, oid in result.tags.items():
        out.print(f"  [yellow]{oid.short[:8]}[/] tag: {escape(name)}")
    if result.inexact:
        out.err.print(f"[yellow]warning:[/] {plural(len(result.inexact), 'commit')} changed in git after export, "
                      "so given new ids: " + ", ".join(sha[:8] for sha in result.inexact))
