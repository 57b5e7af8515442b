"""``snapvc``: inspect and drive a repository from the terminal, as git users expect.

Every command takes ``--repo`` (default: ``$SNAPVC_REPO``, else the nearest ``*.snapvc``
file, looking in the working directory and then upwards, like git;
``SNAPVC_CEILING_DIRECTORIES`` stops the search as ``GIT_CEILING_DIRECTORIES`` does; one
found that another user owns is used only when named or listed in
``SNAPVC_SAFE_DIRECTORIES``, as git's ``safe.directory``) and
``--json``. Exit codes: 0 on success, 1 when a merge (revert, cherry-pick) stopped on
conflicts, ``fsck`` found damage, or ``diff --exit-code`` found differences (a plain
``diff`` exits 0 either way, as git's does), 2 on bad usage or input and on every error, the system's too (a missing folder, a full disk,
no permission: ``snapvc: error: FILE: reason``), 130 when interrupted, and 141 when the
reader of the output went away (``snapvc log | head``): quietly, with the status a shell
reports for git, killed by SIGPIPE there. The commands live in ``inspect.py`` (reading)
and ``change.py`` (writing); ``common.py`` has what they share.
"""

from __future__ import annotations

import io
import os
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

import click
from click.shell_completion import get_completion_class

import snapvc
from snapvc.cli import change, git, inspect, maintenance, mcp, pending, sync, ui
from snapvc.cli.common import STDOUT, Output
from snapvc.encoding.adapters import keep_unknown_types
from snapvc.errors import (
    AmbiguousRevisionError,
    CheckpointNotFoundError,
    GitError,
    InvalidRefNameError,
    PushRejectedError,
    InvalidRevisionError,
    PathError,
    RefConflictError,
    RefExistsError,
    RefNotFoundError,
    RepositoryFolderError,
    RepositoryNotFoundError,
    SnapvcError,
    UnknownRevisionError,
    UnsupportedValueError,
)

__all__ = ["cli", "main"]

# What to do about an error, shown under its message (the first matching type wins).
HINTS: tuple[tuple[type[BaseException], str], ...] = (
    (RepositoryFolderError, "make the folder first, or give a path in a folder that exists"),
    (RepositoryNotFoundError, "create one with 'snapvc init PATH', or pass --repo PATH"),
    (CheckpointNotFoundError, "'snapvc log --oneline' lists the checkpoints"),
    (UnknownRevisionError, "'snapvc branch' lists the branches, 'snapvc log --oneline --all' the commits"),
    (AmbiguousRevisionError, "give more hex digits of the id"),
    (InvalidRevisionError, "a rev looks like main, main~2, main^2, main@{1}, v1.0 or a hex id prefix"),
    (InvalidRefNameError, "names follow git's rules: no spaces, '..', '~', '^', ':', '?', '*', '[', '\\' "
                          "or leading '-'"),
    (RefExistsError, "pass -f to move it, or choose another name"),
    (RefNotFoundError, "'snapvc branch' and 'snapvc tag' list what exists"),
    (PushRejectedError, "'snapvc pull' merges the remote's commits first; 'snapvc push --force' overwrites them"),
    (RefConflictError, "another writer moved it meanwhile: look with 'snapvc log', then run the command again"),
    (PathError, "paths are dotted (research.findings.0) or JSON Pointers (/research/findings/0)"),
    (UnsupportedValueError, "see 'What a state may hold' in the README"),
    (GitError, "see 'snapvc export-git --help' and docs/git.md"),
)


class _Group(click.Group):
    """The ``snapvc`` group: a system error in any command goes to ``_os_failure``, and
    the exit status a command chose with click's ``Exit`` (``ctx.exit(1)``) is the
    process's.

    Here rather than in ``main`` alone, because click's own handler, around every
    command, turns a closed pipe into a silent exit 1 before ``main`` could see it, and
    (as ``main`` runs it with ``standalone_mode=False``) returns the status of an
    ``Exit`` instead of exiting with it: ``main`` would exit 0."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.exceptions.Exit as exc:
            if exc.exit_code:
                sys.exit(exc.exit_code)
            raise
        except OSError as exc:
            if isinstance(exc, SnapvcError):  # e.g. RepositoryNotFoundError: main gives its hint
                raise
            _os_failure(exc)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(snapvc.__version__, prog_name="snapvc")
@click.option("--color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
              envvar="SNAPVC_COLOR", help="colour the output (auto: on a terminal; NO_COLOR is honoured)")
@click.option("--no-pager", is_flag=True, envvar="SNAPVC_NO_PAGER",
              help="never send long output through a pager ($SNAPVC_PAGER, $PAGER or less)")
@click.pass_context
def cli(ctx: click.Context, color: str, no_pager: bool) -> None:
    """A git-like, content-addressed snapshot repository for AI-agent state.

    Start with 'snapvc demo', or 'snapvc init' and 'snapvc commit state.json'.
    """
    ctx.obj = Output(color=color, pager=not no_pager)


@cli.command()
@click.option("--repo", "repo_path", metavar="PATH",
              help="where to create the demo repository (default: a new temporary folder)")
def demo(repo_path: str | None) -> None:
    """Run a small simulated agent: checkpoint, fork, diff, log, restore, merge."""
    from snapvc.demo import run_demo

    if repo_path is not None and Path(repo_path).exists():
        raise click.UsageError(f"{repo_path} exists; the demo needs a new repository path")
    run_demo(repo_path)


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL; e.g. in ~/.bashrc:
    eval "$(snapvc completion bash)"."""
    completer = get_completion_class(shell)
    assert completer is not None
    click.echo(completer(cli, {}, "snapvc", "_SNAPVC_COMPLETE").source())


for command in (change.init, change.commit, inspect.checkout, inspect.show, inspect.log, inspect.diff,
                change.branch, change.switch, change.tag, change.reset, change.merge, pending.resolve, change.revert, change.cherry_pick,
                inspect.history, inspect.reflog, inspect.stats, git.export_git, git.import_git, maintenance.gc,
                maintenance.fsck, maintenance.upgrade, sync.remote, sync.push, sync.fetch, sync.pull, sync.clone,
                ui.ui, mcp.mcp):
    cli.add_command(command)


# The status of a process killed by SIGPIPE, as a shell reports it (128 + 13): what
# 'git log | head' leaves under 'set -o pipefail'.
EXIT_OUTPUT_CLOSED = 141


def _fail(message: str, hint: str | None = None) -> NoReturn:
    try:
        click.echo(f"snapvc: error: {message}", err=True)
        if hint:
            click.echo(f"hint: {hint}", err=True)
    except OSError:  # stderr itself is gone or full: the exit status is all that is left to say it
        pass
    sys.exit(2)


def _sentence(message: str) -> str:
    """Click's message in the form of snapvc's own: ``No such option '-v'.`` becomes
    ``no such option '-v'``, as ``snapvc: error:`` goes on."""
    message = message.strip().removesuffix(".")
    if message[:1].isupper() and not message[1:2].isupper():  # leave a name (SOURCE, JSON) as it is
        message = message[0].lower() + message[1:]
    return message


def _usage_error(exc: click.UsageError) -> NoReturn:
    """A usage error as every other error: what was wrong, then a hint with click's
    guess when it has one (``did you mean '--oneline'?``) and where to read about the
    command (``see 'snapvc log --help'``)."""
    message, _, guess = _sentence(exc.format_message()).partition(". Did you mean ")
    where = f"see '{exc.ctx.command_path if exc.ctx is not None else 'snapvc'} --help'"
    _fail(message, f"did you mean {guess.removesuffix('?')}? {where}" if guess else where)


class _StandardOutput(io.FileIO):
    """File descriptor 1, whose errors name it: a write that fails (a full disk behind
    '> file', a reader that quit) raises an ``OSError`` whose ``filename`` is ``STDOUT``,
    so ``main`` can tell a closed output from any other broken pipe and say which file
    was full."""

    def write(self, data: bytes) -> int | None:  # type: ignore[override]
        try:
            return super().write(data)
        except OSError as exc:
            exc.filename = STDOUT
            raise


def _open_closed_std_fds() -> None:
    """Give a standard file descriptor closed by the caller (``snapvc log >&-``) the null
    device, as git does: else the next file opened, the repository itself, would get its
    number, and output meant for the terminal would be written into it."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free number: fd itself, in order
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    # Python leaves the streams of closed descriptors as None; commands read and write them.
    if sys.stdin is None:
        sys.stdin = open(0, closefd=False)
    if sys.stderr is None:
        sys.stderr = open(2, "w", closefd=False)


def _name_stdout_errors() -> None:
    """Send ``sys.stdout`` through ``_StandardOutput``, keeping its encoding and buffering."""
    old = sys.stdout
    if old is not None:
        try:
            if old.fileno() != 1:
                return
        except (AttributeError, OSError, ValueError):  # not the real stdout (embedded, captured): nothing to name
            return
        old.flush()
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(_StandardOutput(1, "w", closefd=False)),
                                  encoding=old.encoding if old else "utf-8", errors=old.errors if old else "strict",
                                  line_buffering=bool(old.line_buffering) if old else False)


def _drop_stdout() -> None:
    """After stdout failed, send what is still buffered for it nowhere: else Python's
    flush at exit fails again and prints a traceback of its own."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _os_error(exc: OSError) -> str:
    """An ``OSError`` as a message: the file (or files) it was about, then the reason."""
    reason = exc.strerror or str(exc)
    if exc.filename is not None and exc.filename2 is not None:
        return f"{exc.filename} -> {exc.filename2}: {reason}"
    if exc.filename is not None:
        return f"{exc.filename}: {reason}"
    return reason


def _os_failure(exc: OSError) -> NoReturn:
    """Exit for a system error: 141 without a word when the reader of the output quit,
    else 2 with the file and the reason."""
    if exc.filename == STDOUT:
        _drop_stdout()
        if isinstance(exc, BrokenPipeError):  # the reader quit early (| head): as with git, no message
            sys.exit(EXIT_OUTPUT_CLOSED)
    _fail(_os_error(exc))


def main() -> None:
    """The ``snapvc`` entry point: runs the command and turns errors into exit codes.

    Every error ends here (a system error inside a command, in ``_Group.invoke``), so
    no command handles the system's errors itself: a missing folder, a full disk, a file
    it may not read all become ``snapvc: error: FILE: reason`` with exit status 2."""
    _open_closed_std_fds()
    _name_stdout_errors()
    # The command reads states other programs wrote, without their classes: a typed value
    # is shown, diffed, merged and committed back as stored (see snapvc.encoding.adapters).
    keep_unknown_types()
    try:
        # Output still buffered is written before the exit, while a failure can be
        # reported; Python's own flush at exit would only print a traceback.
        try:
            cli.main(standalone_mode=False, prog_name="snapvc")
        except (SystemExit, click.exceptions.Exit):  # a status the command chose (diff: 1)
            sys.stdout.flush()
            raise
        sys.stdout.flush()
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("snapvc: aborted", err=True)
        sys.exit(130)
    except click.exceptions.NoArgsIsHelpError as exc:  # 'snapvc' alone: the help, as click gives it
        exc.show()
        sys.exit(2)
    except click.UsageError as exc:  # a bad option, a missing argument, a bad choice: in snapvc's own words
        _usage_error(exc)
    except click.ClickException as exc:
        _fail(_sentence(exc.format_message()))
    except SnapvcError as exc:
        _fail(str(exc), next((hint for kind, hint in HINTS if isinstance(exc, kind)), None))
    except ValueError as exc:  # bad input the library refused (a mainline number, a malformed value)
        _fail(str(exc))
    except OSError as exc:  # outside a command: the last flush of the output, reading the options
        _os_failure(exc)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception:
        traceback.print_exc()
        _fail("an unexpected error, shown above: please report it with the command that caused it")
