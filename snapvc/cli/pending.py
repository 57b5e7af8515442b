"""A merge stopped on conflicts, resolved path by path from the command line, as in git:
``snapvc merge X`` records the merge as pending in the repository itself (a setting, so
it survives the process and is seen by the next command, on any machine sharing the
repository), ``snapvc resolve PATH --ours|--theirs|--value JSON`` decides one path,
``snapvc merge --continue`` makes the merge commit with those decisions, and
``snapvc merge --abort`` forgets it. Nothing is written to a branch before
``--continue``; a branch that moved meanwhile makes ``--continue`` refuse."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import click
import orjson
from rich.markup import escape

import snapvc
from snapvc.cli.common import Output, open_repo, pass_output, plural, repo_command, state_path
from snapvc.cli.render import value_text
from snapvc.diff.changes import format_path

__all__ = ["PendingMerge", "load_pending", "resolve", "save_pending"]

# The repository setting that holds the pending merge (JSON; empty: none).
SETTING = "merge.pending"


@dataclass
class PendingMerge:
    """A merge of ``source`` (commit ``theirs``) into branch ``into`` at ``ours``,
    stopped on ``conflicts`` (each ``{"path": [...], "base"/"ours"/"theirs": text shown}``);
    ``decisions`` maps a conflict's path (as JSON) to ``{"side": "ours"|"theirs"}`` or
    ``{"value": jsonable}``."""

    into: str
    source: str
    ours: str
    theirs: str
    message: str | None
    no_ff: bool
    conflicts: list[dict[str, Any]]
    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)

    @staticmethod
    def key(path: tuple[str | int, ...] | list[str | int]) -> str:
        return orjson.dumps(list(path)).decode()

    def undecided(self) -> list[dict[str, Any]]:
        return [c for c in self.conflicts if self.key(c["path"]) not in self.decisions]


def load_pending(repo: snapvc.Repository) -> PendingMerge | None:
    raw = repo.backend.get_setting(SETTING)
    if not raw:
        return None
    try:
        return PendingMerge(**orjson.loads(raw))
    except (orjson.JSONDecodeError, TypeError) as exc:  # written by another tool, or damaged
        raise click.ClickException(f"the pending merge recorded in {repo.location} is damaged ({exc}); "
                                   "'snapvc merge --abort' forgets it") from None


def save_pending(repo: snapvc.Repository, pending: PendingMerge | None) -> None:
    repo.backend.set_setting(SETTING, "" if pending is None else orjson.dumps(pending.__dict__).decode())


def conflict_record(conflict: snapvc.Conflict) -> dict[str, Any]:
    """What the pending merge keeps of a conflict: its path and each side as shown."""
    return {"path": list(conflict.path),
            **{side: "(absent)" if v is snapvc.ABSENT else value_text(v, 60)
               for side, v in (("base", conflict.base), ("ours", conflict.ours), ("theirs", conflict.theirs))}}


def decider(pending: PendingMerge) -> Any:
    """The resolver ``repo.merge`` takes: each conflict decided as recorded."""

    def decide(conflict: snapvc.Conflict) -> Any:
        decision = pending.decisions.get(PendingMerge.key(conflict.path))
        if decision is None:  # the same commits merge to the same conflicts: this is another merge
            raise click.ClickException(f"the merge found a conflict at {format_path(conflict.path)} that was not "
                                       "recorded; 'snapvc merge --abort', then merge again")
        if "side" in decision:
            return conflict.ours if decision["side"] == "ours" else conflict.theirs
        return snapvc.from_jsonable(decision["value"], format_path(conflict.path))

    return decide


def print_pending(out: Output, pending: PendingMerge) -> None:
    for c in pending.conflicts:
        decision = pending.decisions.get(PendingMerge.key(c["path"]))
        where = escape(format_path(tuple(c["path"])))
        if decision is None:
            out.print(f"  [red]CONFLICT[/] [bold]{where}[/]: base {escape(c['base'])}, ours [green]"
                      f"{escape(c['ours'])}[/], theirs [cyan]{escape(c['theirs'])}[/]")
        elif "side" in decision:
            out.print(f"  [green]resolved[/] [bold]{where}[/]: {decision['side']}")
        else:
            out.print(f"  [green]resolved[/] [bold]{where}[/]: {escape(value_text(snapvc.from_jsonable(decision['value'])))}")


NEXT_STEPS = ("Resolve each path with 'snapvc resolve PATH --ours|--theirs|--value JSON', then 'snapvc merge "
              "--continue'; 'snapvc merge --abort' gives the merge up (then --strategy ours or theirs decides every "
              "conflict at once).")


@click.command()
@repo_command
@click.argument("path", required=False)
@click.option("--ours", "side", flag_value="ours", help="keep our branch's value at PATH")
@click.option("--theirs", "side", flag_value="theirs", help="take the merged branch's value at PATH")
@click.option("--value", "value", metavar="JSON", default=None,
              help="put this value at PATH (JSON, in the form 'snapvc checkout' prints)")
@pass_output
def resolve(out: Output, repo_path: str | None, as_json: bool, path: str | None, side: str | None,
            value: str | None) -> None:
    """Decide a conflict of the merge in progress at PATH: --ours, --theirs or --value
    JSON. Without PATH, list the conflicts and what was decided. 'snapvc merge
    --continue' then makes the merge commit."""
    with open_repo(repo_path) as repo:
        pending = load_pending(repo)
        if pending is None:
            raise click.UsageError("no merge in progress: 'snapvc merge SOURCE' starts one")
        if path is not None:
            if (side is None) == (value is None):
                raise click.UsageError("say how to resolve PATH: --ours, --theirs or --value JSON (one of them)")
            steps = state_path(path)
            found = [c for c in pending.conflicts if [str(s) for s in c["path"]] == [str(s) for s in steps]]
            if not found:
                raise click.UsageError(f"{path!r} is not a conflict of this merge; they are: "
                                       + ", ".join(format_path(tuple(c["path"])) for c in pending.conflicts))
            if value is not None:
                try:
                    parsed = snapvc.from_jsonable(orjson.loads(value), path)
                except orjson.JSONDecodeError as exc:
                    raise click.BadParameter(f"{value!r} is not JSON: {exc}", param_hint="--value") from None
                decision: dict[str, Any] = {"value": snapvc.to_jsonable(parsed)}
            else:
                decision = {"side": side}
            pending.decisions[PendingMerge.key(found[0]["path"])] = decision
            save_pending(repo, pending)
        left = pending.undecided()
        if as_json:
            out.json({"into": pending.into, "source": pending.source,
                      "conflicts": [{**c, "where": format_path(tuple(c["path"])),
                                     "decision": pending.decisions.get(PendingMerge.key(c["path"]))}
                                    for c in pending.conflicts], "left": len(left)})
            return
        if path is None:
            out.print(f"Merging {escape(pending.source)} into {escape(pending.into)}:")
            print_pending(out, pending)
        else:
            out.print(f"Resolved {escape(path)}" + (f" ({side})" if side else ""))
        if left:
            out.print(f"{len(left)} of {plural(len(pending.conflicts), 'conflict')} left; 'snapvc resolve' lists them")
        else:
            out.print("All conflicts resolved: 'snapvc merge --continue' makes the merge commit")
