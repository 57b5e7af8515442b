"""What every ``snapvc`` command shares: finding and opening the repository, the
``--repo`` and ``--json`` options, terminal output (colour, the pager, progress bars),
and reading the values people type (``key=value``, times, paths).

Output goes through ``Output``: on a terminal, in colour and, when it is longer than
the screen, through a pager (``SNAPVC_PAGER``, else ``PAGER``, else ``less``, with
``LESS=FRX`` unless set, as git does); to a pipe or a file, plain text, never paged.
``--json`` prints one JSON document instead, with values in the exact form of
``snapvc.to_jsonable``.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import click
import orjson
from click.shell_completion import CompletionItem
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import snapvc
from snapvc.maintenance.stats import plural
from snapvc.objects import Commit, metadata_filter, shown_metadata

__all__ = ["STDOUT", "Output", "commit_json", "describe", "find_repo", "open_repo", "parse_assignments", "parse_time", "where_filter",
           "pass_output", "plural", "progress", "progress_bar", "repo_command", "rev_completion", "state_path",
           "value_at"]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

# The name errors give standard output (as the ``filename`` of an ``OSError``).
STDOUT = "standard output"


# -- the repository ---------------------------------------------------------------------------


def find_repo(start: Path) -> Path | None:
    """The ``*.snapvc`` file in ``start`` or the nearest folder above it that has one,
    stopping below any folder listed in ``SNAPVC_CEILING_DIRECTORIES`` (``:``-separated,
    like git's). Two or more in that folder: a usage error listing them, since choosing
    one (the first by name) would act on a repository the person may not have meant.

    The one found must be safe to use unnamed (``_check_trusted``): another user could
    otherwise plant one in a shared parent folder (``/tmp``) and receive what is
    committed below it. One that is not stops the search with a usage error saying how
    to trust it."""
    ceilings = {Path(p).resolve() for p in os.environ.get("SNAPVC_CEILING_DIRECTORIES", "").split(os.pathsep) if p}
    for folder in (start, *start.parents):
        if folder in ceilings:
            return None
        found = sorted(folder.glob("*.snapvc"))
        if len(found) > 1:
            names = ", ".join(str(p) for p in found)
            raise click.UsageError(f"{len(found)} repositories in {folder}: {names}; choose one with --repo PATH "
                                   "(or $SNAPVC_REPO)")
        if found:
            _check_trusted(found[0])
            return found[0]
    return None


def _check_trusted(path: Path) -> None:
    """Refuse a repository found by searching (not named) that another user owns (the
    file, or a symbolic link to it), or that lies in a folder every user may write to
    (there another user could replace it, or plant the ``-wal`` file SQLite reads
    beside it), unless ``SNAPVC_SAFE_DIRECTORIES`` trusts it. As git's
    ``safe.directory``: the owner must be the effective user (root included), or the
    user ``sudo`` ran as (``SUDO_UID``)."""
    if _trusted(path) or not hasattr(os, "geteuid"):  # Windows: no owner to compare (git asks the ACL)
        return
    me = os.geteuid()
    mine = {me}
    if me == 0 and os.environ.get("SUDO_UID", "").isdigit():
        mine.add(int(os.environ["SUDO_UID"]))
    how = (f"snapvc uses it only when named: pass --repo {shlex.quote(str(path))}, or trust it with "
           f"SNAPVC_SAFE_DIRECTORIES={shlex.quote(str(path))} (':'-separated repository files or folders; '*' trusts all)")
    try:
        owners = {os.lstat(path).st_uid, os.stat(path).st_uid}
        folder = os.stat(path.parent)
    except OSError as exc:
        raise click.UsageError(f"repository {path} found by searching cannot be checked ({exc.strerror}); {how}") from None
    others = sorted(owners - mine)
    if others:
        raise click.UsageError(f"repository {path} found by searching is owned by another user (uid {others[0]}), not "
                               f"by you (uid {me}); {how}")
    if folder.st_mode & stat.S_IWOTH:
        raise click.UsageError(f"repository {path} found by searching is in {path.parent}, a folder every user may "
                               f"write to; {how}")


def _trusted(path: Path) -> bool:
    """Whether ``SNAPVC_SAFE_DIRECTORIES`` lists ``path``, its folder, or ``*``."""
    listed = [p for p in os.environ.get("SNAPVC_SAFE_DIRECTORIES", "").split(os.pathsep) if p]
    if "*" in listed:
        return True
    here = {os.path.abspath(path), os.path.abspath(path.parent), str(path.resolve()), str(path.resolve().parent)}
    return any(os.path.abspath(p) in here or str(Path(p).resolve()) in here for p in listed)


def open_repo(path: str | None) -> snapvc.Repository:
    """The repository at ``path`` (a file, ``memory://`` or ``s3://bucket/prefix``),
    else the nearest one found from the working directory; a usage error when there is
    none."""
    if path is None:
        found = find_repo(Path.cwd())
        if found is None:
            raise click.UsageError("no *.snapvc repository here or in any parent folder; "
                                   "create one with 'snapvc init PATH' or pass --repo PATH")
        path = str(found)
    return snapvc.open(path, create=False)


def repo_command(fn: F) -> F:
    """Give a command the options every command has: ``--repo`` and ``--json``."""
    fn = click.option("--json", "as_json", is_flag=True, help="print one JSON document (machine-readable)")(fn)
    fn = click.option("--repo", "repo_path", metavar="PATH", envvar="SNAPVC_REPO",
                      help="the repository: a file or s3://bucket/prefix (default: $SNAPVC_REPO, else the "
                           "nearest *.snapvc in this folder or above, if you own it)")(fn)
    return fn


# -- output -----------------------------------------------------------------------------------


class _Console(Console):
    """A rich console that leaves a closed pipe to ``snapvc.cli.main``, which decides
    for every command what it means (rich's own answer is to exit with status 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True  # nothing more to print to a pipe nobody reads
        raise  # the BrokenPipeError being handled, as it was raised


class Output:
    """Where a command's output goes: ``console`` (stdout), ``err`` (stderr), ``json()``
    for ``--json``, and ``paged()`` around long output."""

    def __init__(self, color: str = "auto", pager: bool = True) -> None:
        style: dict[str, Any] = {"force_terminal": True} if color == "always" else \
            {"color_system": None} if color == "never" else {}
        if not sys.stdout.isatty():
            style["width"] = 1 << 20  # to a pipe or a file, lines are never cut to fit a screen
        self.console = _Console(highlight=False, soft_wrap=True, emoji=False, **style)
        self.err = _Console(stderr=True, highlight=False, soft_wrap=True, emoji=False, **style)
        self.pager = pager

    @staticmethod
    def json(data: Any) -> None:
        sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE).decode())

    def print(self, *things: Any, **kwargs: Any) -> None:
        self.console.print(*things, **kwargs)

    @contextmanager
    def paged(self) -> Iterator[None]:
        """Output printed inside goes through the pager when stdout is a terminal and
        it is longer than the screen."""
        if not (self.pager and sys.stdout.isatty()):
            yield
            return
        with self.console.capture() as captured:
            yield
        text = captured.get()
        if text.count("\n") < self.console.size.height or not _run_pager(text):
            sys.stdout.write(text)
            sys.stdout.flush()


def _run_pager(text: str) -> bool:
    """Show ``text`` through the pager; False when there is none to run."""
    command = os.environ.get("SNAPVC_PAGER", os.environ.get("PAGER", "less")).strip()
    if not command or command == "cat":
        return False
    try:
        program = shlex.split(command)[0]
    except ValueError:
        return False
    if shutil.which(program) is None:
        return False
    env = {**os.environ}
    env.setdefault("LESS", "FRX")
    env.setdefault("LV", "-c")
    with subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, env=env) as pager:
        assert pager.stdin is not None
        try:
            pager.stdin.write(text.encode())
            pager.stdin.close()
        except BrokenPipeError:  # the reader quit before the end: as with git, fine
            pass
        pager.wait()
    return True


@contextmanager
def progress_bar(description: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr while stdout is a terminal (silent in scripts and
    pipes); yields ``update(done, total)`` for the work to report through."""
    if not (sys.stdout.isatty() and sys.stderr.isatty()):
        yield lambda done, total: None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def progress(items: Iterable[T], total: int, description: str) -> Iterator[T]:
    """``items``, counted on a ``progress_bar``."""
    with progress_bar(description) as update:
        update(0, total)
        for done, item in enumerate(items, 1):
            yield item
            update(done, total)


def commit_json(c: snapvc.Commit, labels: Iterable[str] = ()) -> dict[str, Any]:
    """A commit as ``--json`` prints it."""
    out = {"id": c.id.hex, "tree": c.tree.hex, "parents": [p.hex for p in c.parents], "author": c.author,
           "time": c.time.isoformat(), "message": c.message, "metadata": shown_metadata(c),
           "generation": c.generation}
    labels = list(labels)
    if labels:
        out["refs"] = labels
    return out


# -- what people type -------------------------------------------------------------------------


def parse_assignments(items: Iterable[str], option: str) -> dict[str, Any]:
    """``key=value`` pairs: the value is JSON when it reads as JSON (``step=3``,
    ``ok=true``, ``tags=["a"]``), else the text itself (``agent=researcher``)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not key=value (e.g. {option} step=3)", param_hint=option)
        try:
            out[key] = orjson.loads(text)
        except orjson.JSONDecodeError:
            out[key] = text
    return out


def where_filter(items: Iterable[str], option: str = "--where") -> Callable[[Commit], bool] | None:
    """``log --where`` pairs as a test of a commit's metadata: each KEY (dotted for
    nested keys) must hold VALUE read as JSON (``step=3`` is the number 3) or as the text
    itself. Both are tried, so a text that happens to read as JSON (a trace id of digits
    only, ``0042``, ``1e5``) still finds the commits that stored it as text."""
    tests = []
    for item in items:
        ((key, value),) = parse_assignments([item], option).items()
        text = item.partition("=")[2]
        alternatives = [value] if type(value) is str else [value, text]
        tests.append([test for v in alternatives if (test := metadata_filter({key: v})) is not None])
    if not tests:
        return None

    def match(commit: Commit) -> bool:
        return all(any(test(commit) for test in alternatives) for alternatives in tests)

    return match


_AGO = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(second|minute|hour|day|week)s?\s+ago\s*$", re.I)


def parse_time(text: str, option: str, now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> datetime:
    """A time as ``log --since/--until`` take it: ISO 8601 (``2026-11-23``,
    ``2026-11-23T10:00``, with or without a zone; without one it is local time, as in
    git), Unix seconds, or ``N seconds|minutes|hours|days|weeks ago``."""
    ago = _AGO.match(text)
    try:
        if ago:
            return now() - timedelta(**{ago.group(2).lower() + "s": float(ago.group(1))})
        if re.fullmatch(r"\d+(\.\d+)?", text.strip()):
            return datetime.fromtimestamp(float(text), UTC)
        when = datetime.fromisoformat(text.strip())
        return when if when.tzinfo is not None else when.astimezone()
    except (ValueError, OverflowError, OSError):  # not a time, or one before or after any date Python can name
        raise click.BadParameter(f"{text!r} is not a time between the years 1 and 9999: give e.g. 2026-11-23, "
                                 "2026-11-23T10:00:00, 1763892000 or '2 hours ago'", param_hint=option) from None


def state_path(text: str) -> tuple[str | int, ...]:
    """A path into a state as typed: dotted (``research.findings.0``; integer steps
    index lists) or a JSON Pointer (``/research/findings/0``, for keys holding dots)."""
    if text.startswith("/"):
        steps = [t.replace("~1", "/").replace("~0", "~") for t in text[1:].split("/")]
    else:
        steps = text.split(".")
    if any(s == "" for s in steps) and text not in ("", "/"):
        raise click.BadParameter(f"{text!r} has an empty step; write a.b.0 or /a/b/0")
    return tuple(int(s) if re.fullmatch(r"-?\d+", s) else s for s in steps if text not in ("", "/"))


def value_at(root: Any, path: tuple[str | int, ...], shown: str, where: str) -> Any:
    """The value at ``path`` below a state (read lazily from a snapshot); a usage error
    naming the first step that leads nowhere."""
    value = root
    for depth, step in enumerate(path):
        here = ".".join(map(str, path[:depth])) or "the top"
        if isinstance(value, (dict, snapvc.MapView)) and isinstance(step, str) and step in value:
            value = value[step]
        elif isinstance(value, (dict, snapvc.MapView)) and isinstance(step, int) and str(step) in value:
            value = value[str(step)]
        elif isinstance(value, (list, tuple, snapvc.SeqView)) and isinstance(step, int) and -len(value) <= step < len(value):
            value = value[step]
        else:
            raise click.UsageError(f"path {shown!r}: no {step!r} at {here} of the state at {where} "
                                   f"({describe(value)})")
    return value


def describe(value: Any) -> str:
    """What a value is, in the words of a state's JSON (``a map of 6 keys``, ``a list
    of 15 items``, ``a number``), never the name of the class that holds it (a lazy
    ``MapView`` is a map like any other to the person reading)."""
    if isinstance(value, (dict, snapvc.MapView)):
        return f"a map of {plural(len(value), 'key')}"
    if isinstance(value, (list, tuple, snapvc.SeqView)):
        return f"a list of {plural(len(value), 'item')}"
    if isinstance(value, str):
        return f"a string of {plural(len(value), 'character')}"
    if isinstance(value, bool):
        return f"the boolean {'true' if value else 'false'}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if value is None:
        return "null"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"{plural(len(value), 'byte')} of binary data"
    return f"a {type(value).__name__} value"  # a typed value (datetime, Decimal, UUID): its type is its name


# -- shell completion -------------------------------------------------------------------------


def rev_completion(kinds: tuple[str, ...] = ("branches", "tags")) -> Callable[..., list[CompletionItem]]:
    """Complete a rev argument with the repository's branch (and tag) names."""

    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
        try:
            with open_repo(ctx.params.get("repo_path")) as repo:
                names = [*(repo.branches() if "branches" in kinds else ()), *(repo.tags() if "tags" in kinds else ())]
        except Exception:  # completion must never fail loudly
            return []
        return [CompletionItem(n) for n in names if n.startswith(incomplete)]

    return complete


def pass_output(fn: F) -> F:
    """Hand the command the ``Output`` set up by the top-level options."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        out = ctx.find_object(Output) or Output()
        return fn(out, *args, **kwargs)

    return wrapper  # type: ignore[return-value]
