"""The maintenance commands: ``gc`` (remove what nothing reaches, thin old history),
``fsck`` (verify everything, name what is damaged, salvage what is whole) and
``upgrade`` (move a repository file to the newest storage format)."""

from __future__ import annotations

import re
import sys
from datetime import timedelta

import click
from rich.markup import escape

from snapvc.cli.common import Output, open_repo, pass_output, progress, repo_command
from snapvc.maintenance.fsck import salvage
from snapvc.maintenance.gc import DEFAULT_GRACE, DEFAULT_REFLOG_EXPIRY, Keep

__all__ = ["gc", "fsck", "upgrade", "parse_duration"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_duration(text: str, option: str) -> timedelta:
    """``90``, ``90s``, ``30m``, ``1h``, ``2d``, ``1w``: seconds when no unit is given."""
    found = _DURATION.match(text)
    if not found:
        raise click.BadParameter(f"{text!r} is not a duration: give e.g. 0, 90s, 30m, 1h, 2d or 1w", param_hint=option)
    try:
        return timedelta(seconds=float(found.group(1)) * _UNITS[found.group(2) or "s"])
    except OverflowError:
        raise click.BadParameter(f"{text!r} is longer than a duration can be ({timedelta.max.days:,} days)",
                                 param_hint=option) from None


def _hours(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 3600:g}h"


@click.command()
@repo_command
@click.option("-n", "--dry-run", is_flag=True, help="change nothing: report what would be removed")
@click.option("--grace", default=_hours(DEFAULT_GRACE), show_default=True, metavar="DURATION",
              help="keep objects and commits stored more recently than this (other writers' work in progress)")
@click.option("--expire-reflog", "reflog_expiry", default=f"{DEFAULT_REFLOG_EXPIRY.days}d", show_default=True,
              metavar="DURATION", help="reflog entries older than this are dropped and no longer keep their commits")
@click.option("--keep-last", type=click.IntRange(min=0), default=0, help="thin each branch: keep its last N commits")
@click.option("--keep-hourly", type=click.IntRange(min=0), default=0, help="... and the newest of each of the last N hours")
@click.option("--keep-daily", type=click.IntRange(min=0), default=0, help="... and of each of the last N days")
@click.option("--keep-weekly", type=click.IntRange(min=0), default=0, help="... and of each of the last N weeks")
@click.option("--branch", "branches", multiple=True, metavar="NAME", help="thin only these branches (repeatable)")
@click.option("--force", is_flag=True,
              help="allow a grace below the safe minimum beside writers (on S3): only when no other client writes")
@pass_output
def gc(out: Output, repo_path: str | None, as_json: bool, dry_run: bool, grace: str, reflog_expiry: str,
       keep_last: int, keep_hourly: int, keep_daily: int, keep_weekly: int, branches: tuple[str, ...],
       force: bool) -> None:
    """Remove what no ref, recent reflog entry or recent write reaches, and report the
    bytes freed. With --keep-*, first thin each branch's history as 'restic forget'
    does: kept commits newer than the first dropped one get new ids (same states)."""
    keep = None
    if keep_last or keep_hourly or keep_daily or keep_weekly:
        keep = Keep(keep_last, keep_hourly, keep_daily, keep_weekly, branches or None)
    elif branches:
        raise click.UsageError("--branch chooses the branches --keep-* thins: give a --keep-* option too")
    with open_repo(repo_path) as repo:
        report = repo.gc(dry_run=dry_run, grace=parse_duration(grace, "--grace"),
                         reflog_expiry=parse_duration(reflog_expiry, "--expire-reflog"), keep=keep, progress=progress,
                         force=force)
    if as_json:
        out.json(report.to_dict())
    else:
        out.print(escape(str(report)))


@click.command()
@repo_command
@click.option("--salvage", "salvage_to", metavar="DIR", type=click.Path(file_okay=False),
              help="also write every commit that is still whole to DIR as exact JSON (and DIR/index.json)")
@click.option("--dangling", is_flag=True, help="list the dangling objects and commits by id")
@pass_output
def fsck(out: Output, repo_path: str | None, as_json: bool, salvage_to: str | None, dangling: bool) -> None:
    """Read and verify every object, commit, ref and reflog entry; name each missing or
    corrupt object with the refs and state paths that reach it. Exits 1 when it finds
    a problem."""
    with open_repo(repo_path) as repo:
        report = repo.fsck(progress=progress)
        saved = salvage(repo, salvage_to, progress) if salvage_to is not None else None
    if as_json:
        data = report.to_dict()
        if saved is not None:
            data["salvage"] = {"folder": str(saved.folder), "saved": [c.hex for c in saved.saved],
                               "damaged": [c.hex for c in saved.damaged]}
        out.json(data)
    else:
        out.print(escape(str(report)))
        if dangling:
            for oid in report.dangling_commits:
                out.print(f"dangling commit {oid}")
            for oid in report.dangling_objects:
                out.print(f"dangling object {oid}")
        if saved is not None:
            out.print(escape(str(saved)))
    if not report.ok:
        sys.exit(1)


@click.command()
@repo_command
@pass_output
def upgrade(out: Output, repo_path: str | None, as_json: bool) -> None:
    """Move the repository file to the newest storage format (format 1 or 2 to 3: objects
    in packs compressed across commits, a smaller file), in one atomic step; a crash
    leaves it wholly at its old format or wholly at the new one. Other processes that
    have it open must open it again. A file at the newest format already is left as
    it is."""
    with open_repo(repo_path) as repo:
        result = repo.upgrade()
    if as_json:
        out.json(result.to_dict())
    else:
        out.print(escape(str(result)))
