"""``snapvc mcp``: the repository as a Model Context Protocol server (the ``mcp`` extra, see ``snapvc.mcp``)."""

from __future__ import annotations

import click

from snapvc.cli.common import open_repo

__all__ = ["mcp"]


@click.command()
@click.option("--repo", "repo_path", metavar="PATH", envvar="SNAPVC_REPO",
              help="the repository: a file or s3://bucket/prefix (default: $SNAPVC_REPO, else the "
                   "nearest *.snapvc in this folder or above)")
@click.option("--write", "writable", is_flag=True,
              help="also offer the commit, branch and reset tools (each lands in the reflog)")
@click.option("--http", "http", is_flag=True,
              help="serve Streamable HTTP on 127.0.0.1 (this machine only) at /mcp instead of stdin and stdout")
@click.option("--port", type=click.IntRange(1, 65535), default=8766, show_default=True,
              help="the port to serve HTTP on (with --http)")
def mcp(repo_path: str | None, writable: bool, http: bool, port: int) -> None:
    """Serve the repository to AI assistants and agents over the Model Context Protocol:
    tools to list refs, read the log (with metadata filters), show a commit, diff two
    commits, read the state or a path in it, and follow a path's history. Read-only
    unless --write. Speaks the protocol on stdin and stdout (nothing else is printed
    there) until the client closes it; register the command in the client's MCP
    configuration (see docs/mcp.md)."""
    try:
        from snapvc.mcp.server import serve  # the MCP SDK loads here, not with the command line
    except ImportError as exc:
        raise click.ClickException(f"'snapvc mcp' needs the mcp extra, which is not installed ({(exc.name or 'mcp').split('.')[0]} is missing): "
                                   "pip install '.[mcp]' in a clone of snapvc (not on PyPI yet)") from None
    if not http and click.get_current_context().get_parameter_source("port") != click.core.ParameterSource.DEFAULT:
        raise click.UsageError("--port is the HTTP server's: give it with --http")
    repo = open_repo(repo_path)
    try:
        if http:
            click.echo(f"http://127.0.0.1:{port}/mcp", err=True)  # stderr: as on stdio, stdout carries nothing else
        serve(repo, writable=writable, port=port if http else None)
    finally:
        repo.close()
