"""The commands between repositories: ``remote``, ``push``, ``fetch``, ``pull`` and ``clone``.

A remote is a name for another repository's location (a file, or ``s3://bucket/prefix``;
S3 credentials and endpoint come from the environment: ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``, or ``--endpoint``).
"""

from __future__ import annotations

from typing import Literal

import click
from rich.markup import escape

import snapvc
from snapvc.cli.common import Output, open_repo, pass_output, progress_bar, repo_command, rev_completion
from snapvc.maintenance.stats import plural
from snapvc.maintenance.sync import FetchResult, TransferStats

__all__ = ["remote", "push", "fetch", "pull", "clone"]

_DEFAULT_REMOTE = "origin"


def _transfer_json(t: TransferStats) -> dict[str, int]:
    return {"commits": t.commits, "objects": t.objects, "bytes": t.bytes, "reframed": t.reframed,
            "dictionaries": t.dictionaries}


def _s3_options(endpoint: str | None, region: str | None) -> dict[str, str]:
    return {k: v for k, v in (("endpoint", endpoint), ("region", region)) if v}


_endpoint = click.option("--endpoint", metavar="URL", default=None,
                         help="the S3 endpoint of an s3:// location (default: $AWS_ENDPOINT_URL, else AWS)")
_region = click.option("--region", metavar="NAME", default=None, help="the S3 region (default: $AWS_REGION)")


@click.command("remote")
@repo_command
@click.argument("action", type=click.Choice(["list", "add", "remove"]), default="list")
@click.argument("name", required=False)
@click.argument("location", required=False)
@_endpoint
@_region
@pass_output
def remote(out: Output, repo_path: str | None, as_json: bool, action: str, name: str | None, location: str | None,
           endpoint: str | None, region: str | None) -> None:
    """List the remotes, or 'add NAME LOCATION' (a file path or s3://bucket/prefix), or
    'remove NAME' (and its remote-tracking refs)."""
    with open_repo(repo_path) as repo:
        if action == "add":
            if not name or not location:
                raise click.UsageError("snapvc remote add NAME LOCATION")
            repo.add_remote(name, location, **_s3_options(endpoint, region))
        elif action == "remove":
            if not name:
                raise click.UsageError("snapvc remote remove NAME")
            from snapvc.maintenance import sync

            sync.remove_remote(repo, name)
        remotes = repo.remotes()
    if as_json:
        out.json({n: {"location": r.location, "options": dict(r.options)} for n, r in remotes.items()})
        return
    for n, r in remotes.items():
        options = "".join(f" --{k} {v}" for k, v in r.options.items())
        out.print(f"{escape(n)}\t{escape(r.location)}{escape(options)}")


@click.command("push")
@repo_command
@click.argument("remote_name", metavar="REMOTE", default=_DEFAULT_REMOTE)
@click.argument("branch", required=False, shell_complete=rev_completion(("branches",)))
@click.option("-f", "--force", is_flag=True, help="move the remote branch even when it is not a fast-forward")
@click.option("--as", "remote_branch", metavar="NAME", default=None, help="the branch's name on the remote")
@_endpoint
@_region
@pass_output
def push(out: Output, repo_path: str | None, as_json: bool, remote_name: str, branch: str | None, force: bool,
         remote_branch: str | None, endpoint: str | None, region: str | None) -> None:
    """Send BRANCH (default: HEAD's) to REMOTE (a remote's name or a location; default
    origin): only what it lacks travels. Refused when the remote branch has commits
    this one does not contain, unless --force."""
    with open_repo(repo_path) as repo, progress_bar("push") as update:
        result = repo.push(remote_name, branch, remote_branch=remote_branch, force=force, progress=update,
                           **_s3_options(endpoint, region))
    if as_json:
        out.json({"remote": result.remote, "ref": result.ref, "old": result.old.hex if result.old else None,
                  "new": result.new.hex, "up_to_date": result.up_to_date, "forced": result.forced,
                  "sent": _transfer_json(result.transfer)})
        return
    out.print(escape(str(result)))


def _print_fetch(out: Output, result: FetchResult) -> None:
    out.print(f"From {escape(result.remote)}: received {escape(str(result.transfer))}")
    for ref, oid in result.updated.items():
        out.print(f"  [yellow]{oid.short[:8]}[/] {escape(ref)}")


@click.command("fetch")
@repo_command
@click.argument("remote_name", metavar="REMOTE", default=_DEFAULT_REMOTE)
@click.argument("branches", nargs=-1)
@_endpoint
@_region
@pass_output
def fetch(out: Output, repo_path: str | None, as_json: bool, remote_name: str, branches: tuple[str, ...],
          endpoint: str | None, region: str | None) -> None:
    """Copy REMOTE's BRANCHES (default: all) here and move its remote-tracking refs
    (refs/remotes/REMOTE/BRANCH). No local branch moves."""
    with open_repo(repo_path) as repo, progress_bar("fetch") as update:
        result = repo.fetch(remote_name, branches or None, progress=update, **_s3_options(endpoint, region))
    if as_json:
        out.json({"remote": result.remote, "tips": {b: t.hex for b, t in result.tips.items()},
                  "updated": {r: t.hex for r, t in result.updated.items()}, "received": _transfer_json(result.transfer)})
        return
    _print_fetch(out, result)


@click.command("pull")
@repo_command
@click.argument("remote_name", metavar="REMOTE", default=_DEFAULT_REMOTE)
@click.argument("branch", required=False, shell_complete=rev_completion(("branches",)))
@click.option("--strategy", type=click.Choice(["ours", "theirs"]), default=None,
              help="decide conflicts for one side (default: report them, write nothing)")
@_endpoint
@_region
@pass_output
def pull(out: Output, repo_path: str | None, as_json: bool, remote_name: str, branch: str | None,
         strategy: Literal["ours", "theirs"] | None, endpoint: str | None, region: str | None) -> None:
    """Fetch BRANCH (default: HEAD's) from REMOTE and merge it into the local branch
    (a fast-forward, or a three-way merge). With conflicts left nothing is written
    and they are listed (exit 1)."""
    with open_repo(repo_path) as repo, progress_bar("pull") as update:
        result = repo.pull(remote_name, branch, resolve=strategy, progress=update, **_s3_options(endpoint, region))
    merge = result.merge
    if as_json:
        out.json({"branch": result.branch, "created": result.created, "ok": result.ok,
                  "commit": merge.commit.id.hex if merge is not None and merge.commit is not None else None,
                  "fast_forward": bool(merge and merge.fast_forward), "up_to_date": bool(merge and merge.up_to_date),
                  "conflicts": [str(c) for c in merge.conflicts] if merge is not None else [],
                  "received": _transfer_json(result.fetch.transfer)})
    else:
        _print_fetch(out, result.fetch)
        out.print(escape(str(result)))
    if not result.ok:
        raise click.exceptions.Exit(1)


@click.command("clone")
@click.option("--json", "as_json", is_flag=True, help="print one JSON document (machine-readable)")
@click.argument("source")
@click.argument("destination")
@_endpoint
@_region
@pass_output
def clone(out: Output, as_json: bool, source: str, destination: str, endpoint: str | None, region: str | None) -> None:
    """A new repository at DESTINATION (a file path or s3://bucket/prefix) with every
    branch and tag of SOURCE, which becomes its remote 'origin'. --endpoint and
    --region apply to whichever side is on S3."""
    options = _s3_options(endpoint, region)
    src_options = options if source.startswith("s3://") else {}
    dst_options = options if destination.startswith("s3://") else {}
    with progress_bar("clone") as update:
        repo = snapvc.clone(source, destination, progress=update, src_options=src_options, **dst_options)
    with repo:
        branches = repo.branches()
        stats = repo.commits.count()
    if as_json:
        out.json({"destination": destination, "branches": {b: t.hex for b, t in branches.items()}, "commits": stats})
        return
    out.print(f"Cloned {escape(source)} into {escape(destination)}: "
              f"{plural(stats, 'commit')}, {plural(len(branches), 'branch', 'branches')}")
