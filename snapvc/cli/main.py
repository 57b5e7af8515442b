"""``snapvc``: inspect and drive a repository from the terminal, as git users expect.

Every command takes ``--repo`` (default: the nearest ``*.snapvc`` file, looking in the
working directory and then upwards, like git; ``SNAPVC_CEILING_DIRECTORIES`` stops the
search as ``GIT_CEILING_DIRECTORIES`` does) and exits 0 on success, 1 when it found
differences, 2 on bad usage or input.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click
import orjson
from rich.console import Console

import snapvc
from snapvc.cli.graph import graph_rows
from snapvc.errors import SnapvcError

__all__ = ["cli", "main"]


def _find_repo(start: Path) -> Path | None:
    """The first ``*.snapvc`` file in ``start`` or a folder above it, stopping below any
    folder listed in ``SNAPVC_CEILING_DIRECTORIES`` (``:``-separated, like git's)."""
    ceilings = {Path(p).resolve() for p in os.environ.get("SNAPVC_CEILING_DIRECTORIES", "").split(os.pathsep) if p}
    for folder in (start, *start.parents):
        if folder in ceilings:
            return None
        found = sorted(folder.glob("*.snapvc"))
        if found:
            return found[0]
    return None


def _open(repo: str | None) -> snapvc.Repository:
    if repo is None:
        found = _find_repo(Path.cwd())
        if found is None:
            raise click.UsageError("no *.snapvc repository here or in any parent folder; pass --repo PATH")
        repo = str(found)
    return snapvc.open(repo, create=False)


repo_option = click.option("--repo", "repo_path", metavar="PATH", help="repository file (default: nearest *.snapvc)")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(snapvc.__version__, prog_name="snapvc")
def cli() -> None:
    """A git-like, content-addressed snapshot repository for AI-agent state."""


@cli.command()
@click.option("--repo", "repo_path", metavar="PATH", help="where to create the demo repository (default: a new temporary folder)")
def demo(repo_path: str | None) -> None:
    """Run a small simulated agent: checkpoint, fork, diff, log, restore."""
    from snapvc.demo import run_demo

    if repo_path is not None and Path(repo_path).exists():
        raise click.UsageError(f"{repo_path} exists; the demo needs a new repository path")
    run_demo(repo_path)


@cli.command()
@click.argument("path", default="agent.snapvc")
def init(path: str) -> None:
    """Create an empty repository file at PATH."""
    if Path(path).exists():
        raise click.UsageError(f"{path} already exists")
    snapvc.open(path).close()
    click.echo(f"Initialized empty snapvc repository in {path}")


@cli.command()
@repo_option
@click.argument("revs", nargs=-1)
@click.option("--graph", is_flag=True, help="draw the commit graph")
@click.option("--oneline", is_flag=True, help="one line per commit")
@click.option("-n", "--max-count", type=int, default=None, help="show at most N commits")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def log(repo_path: str | None, revs: tuple[str, ...], graph: bool, oneline: bool, max_count: int | None, as_json: bool) -> None:
    """Show commits reachable from REVS (default: every branch with --graph, else HEAD)."""
    with _open(repo_path) as repo:
        starts: list[str] = list(revs) or (list(repo.branches()) if graph else ["HEAD"])
        labels: dict[bytes, list[str]] = {}
        for name, oid in repo.branches().items():
            labels.setdefault(oid, []).append(name)
        for name, oid in repo.tags().items():
            labels.setdefault(oid, []).append(f"tag: {name}")
        commits = repo.log(starts, limit=max_count)
        if as_json:
            click.echo(orjson.dumps([_commit_json(c) for c in commits], option=orjson.OPT_INDENT_2).decode())
            return
        console = Console(highlight=False)
        rows = graph_rows(commits) if graph else ((None, c) for c in commits)
        for row in rows:
            prefix, commit = (row.graph, row.commit) if graph else row  # type: ignore[union-attr,misc]
            if commit is None:
                console.print(f"[yellow]{prefix}[/]")
                continue
            label = f" ([green]{', '.join(labels[commit.id])}[/])" if commit.id in labels else ""
            lead = f"[yellow]{prefix}[/] " if graph else ""
            if oneline or graph:
                console.print(f"{lead}[bold yellow]{commit.id.short[:8]}[/]{label} {commit.message}")
            else:
                console.print(f"[bold yellow]commit {commit.id}[/]{label}")
                console.print(f"Author: {commit.author}\nDate:   {commit.time.isoformat()}")
                if commit.metadata:
                    console.print(f"Meta:   {commit.metadata_json.decode()}")
                console.print(f"\n    {commit.message}\n")


def _commit_json(c: snapvc.Commit) -> dict[str, Any]:
    return {"id": c.id.hex, "tree": c.tree.hex, "parents": [p.hex for p in c.parents], "author": c.author,
            "time": c.time.isoformat(), "message": c.message, "metadata": orjson.loads(c.metadata_json), "generation": c.generation}


@cli.command()
@repo_option
@click.argument("rev", default="HEAD")
@click.option("--path", "dotted", default=None, help="only the value at this dotted path, e.g. research.findings")
def checkout(repo_path: str | None, rev: str, dotted: str | None) -> None:
    """Print the state at REV as JSON."""
    with _open(repo_path) as repo:
        value: Any = repo.checkout(rev)
        if dotted:
            for part in dotted.split("."):
                if isinstance(value, list) and part.lstrip("-").isdigit():
                    value = value[int(part)]
                elif isinstance(value, dict) and part in value:
                    value = value[part]
                else:
                    raise click.UsageError(f"path {dotted!r}: no {part!r} in the state at {rev}")
        click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2, default=_json_default).decode())


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, tuple):
        return list(value)
    return str(value)


@cli.command()
@repo_option
@click.argument("a")
@click.argument("b")
def diff(repo_path: str | None, a: str, b: str) -> None:
    """Show the paths that changed from A to B; exits 1 if there are any."""
    with _open(repo_path) as repo:
        changes = repo.diff(a, b)
        console = Console(highlight=False)
        for change in changes:
            colour = {"added": "green", "removed": "red", "modified": "yellow"}[change.kind]
            console.print(f"[{colour}]{change}[/]")
    sys.exit(1 if changes else 0)


@cli.command()
@repo_option
@click.argument("name", required=False)
@click.argument("at", required=False, default="HEAD")
@click.option("-d", "--delete", is_flag=True, help="delete branch NAME")
def branch(repo_path: str | None, name: str | None, at: str, delete: bool) -> None:
    """List branches, create NAME at AT, or delete NAME with -d."""
    with _open(repo_path) as repo:
        if name is None:
            head = repo.head
            for branch_name, oid in repo.branches().items():
                mark = "*" if branch_name == head else " "
                click.echo(f"{mark} {branch_name:<20} {oid.short}")
        elif delete:
            old = repo.delete_branch(name)
            click.echo(f"Deleted branch {name} (was {old.short})")
        else:
            c = repo.branch(name, at=at)
            click.echo(f"Created branch {name} at {c.id.short}")


@cli.command()
@repo_option
def stats(repo_path: str | None) -> None:
    """Objects, stored bytes, the bytes the states would take stored whole, and the ratio."""
    with _open(repo_path) as repo:
        click.echo(str(repo.stats()))


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("aborted", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except SnapvcError as exc:
        click.echo(f"snapvc: error: {exc}", err=True)
        sys.exit(2)
