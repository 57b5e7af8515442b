"""``snapvc``: inspect and drive a repository from the terminal, as git users expect.

Every command takes ``--repo`` (default: ``$SNAPVC_REPO``, else the nearest ``*.snapvc``
file, looking in the working directory and then upwards, like git;
``SNAPVC_CEILING_DIRECTORIES`` stops the search as ``GIT_CEILING_DIRECTORIES`` does) and
``--json``. Exit codes: 0 on success, 1 when differences or conflicts were found, 2 on
bad usage or input (with a message that says what was wrong and what to do), 130 when
interrupted. The commands live in ``inspect.py`` (reading) and ``change.py`` (writing);
``common.py`` has what they share.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

import click
from click.shell_completion import get_completion_class

import snapvc
from snapvc.cli import change, git, inspect, maintenance, sync
from snapvc.cli.common import Output
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
    RepositoryNotFoundError,
    SnapvcError,
    UnknownRevisionError,
    UnsupportedValueError,
)

__all__ = ["cli", "main"]

# What to do about an error, shown under its message (the first matching type wins).
HINTS: tuple[tuple[type[BaseException], str], ...] = (
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


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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
                change.branch, change.tag, change.reset, change.merge, change.revert, change.cherry_pick,
                inspect.history, inspect.reflog, inspect.stats, git.export_git, git.import_git, maintenance.gc,
                maintenance.fsck, sync.remote, sync.push, sync.fetch, sync.pull, sync.clone):
    cli.add_command(command)


def _fail(message: str, hint: str | None = None) -> None:
    click.echo(f"snapvc: error: {message}", err=True)
    if hint:
        click.echo(f"hint: {hint}", err=True)
    sys.exit(2)


def main() -> None:
    """The ``snapvc`` entry point: runs the command and turns errors into exit codes."""
    try:
        cli.main(standalone_mode=False, prog_name="snapvc")
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("snapvc: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except SnapvcError as exc:
        _fail(str(exc), next((hint for kind, hint in HINTS if isinstance(exc, kind)), None))
    except ValueError as exc:  # bad input the library refused (a mainline number, a malformed value)
        _fail(str(exc))
    except BrokenPipeError:  # the reader of a pipe quit early (| head): as with git, not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception:
        traceback.print_exc()
        _fail("an unexpected error, shown above: please report it with the command that caused it")
