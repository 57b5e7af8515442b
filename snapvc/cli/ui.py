"""``snapvc ui``: the local web view of a repository (the ``ui`` extra, see ``snapvc.ui``)."""

from __future__ import annotations

import click

from snapvc.cli.common import open_repo

__all__ = ["ui"]


@click.command()
@click.option("--repo", "repo_path", metavar="PATH", envvar="SNAPVC_REPO",
              help="the repository: a file or s3://bucket/prefix (default: $SNAPVC_REPO, else the "
                   "nearest *.snapvc in this folder or above)")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="the address to serve on; another than this machine's own lets other machines read it")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="the port to serve on; 0 picks a free one")
@click.option("--write", "writable", is_flag=True, help="allow tag, branch, reset and undo from the page")
@click.option("--no-browser", is_flag=True, help="do not open a browser: only print the address")
def ui(repo_path: str | None, host: str, port: int, writable: bool, no_browser: bool) -> None:
    """Browse the history in a web browser: the commit graph, each commit's changes, the
    state at any commit, a path's history, threads and the reflog. Read-only unless
    --write. Prints the address first, then serves until interrupted (Ctrl-C)."""
    try:
        from snapvc.ui.serve import serve  # Starlette and uvicorn load here, not with the command line
    except ImportError as exc:
        raise click.ClickException(f"'snapvc ui' needs the ui extra, which is not installed ({(exc.name or 'starlette').split('.')[0]} is missing): "
                                   "pip install '.[ui]' in a clone of snapvc (not on PyPI yet)") from None
    repo = open_repo(repo_path)
    try:
        serve(repo, host=host, port=port, writable=writable, open_browser=not no_browser,
              announce=lambda url: click.echo(url))
    finally:
        repo.close()
