"""The MCP server: the tools of ``snapvc.mcp.tools`` registered on the SDK's ``MCPServer``.

Read-only unless built ``writable``: the write tools (``commit``, ``branch``, ``reset``)
are then registered; without it they are not registered at all, so they are neither
listed nor callable. Every tool is annotated for the client (read-only, destructive,
idempotent), and returns structured JSON (``structuredContent``, and the same as text).

A ``SnapvcError`` (a rev that names no commit, a path the state does not hold, a ref
name git would refuse) becomes a tool error result (``isError``) whose text is the
error's type and message: the model reads what was wrong and tries again, and the
server goes on. Anything else is a bug: the SDK logs it on stderr with its traceback
and answers a generic tool error.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

import snapvc
from snapvc.api import Repository
from snapvc.errors import SnapvcError
from snapvc.mcp.tools import MAX_PAGE, Tools

__all__ = ["READ_TOOLS", "WRITE_TOOLS", "build_server", "serve"]

READ_TOOLS = ("refs", "log", "show", "diff", "checkout", "history", "reflog")
WRITE_TOOLS = ("commit", "branch", "reset")

INSTRUCTIONS = """\
A snapvc repository: a git-like history of an AI agent's state (a JSON-like document).
Each commit is a whole state with a message and metadata (step, agent, status, token
usage...). Branches (one per thread or experiment) and tags name commits.

Revs name commits as in git: a branch (main), a tag, HEAD, main~2 (two commits back),
main^2 (a merge's second parent), main@{1} (where main was one move ago, from the
reflog), or a hex id prefix of 4+ digits. Paths into a state are dotted
(research.findings.0: a key, then an index where it meets a list) or JSON Pointers
(/research/findings/0, for keys holding dots). Values that JSON cannot hold (bytes,
datetimes, tuples...) appear as objects tagged "$snapvc", and may be written so.

Start with refs (what branches exist), then log, show, diff, checkout and history.
Large answers come in pages: pass next_offset back as offset."""

F = TypeVar("F", bound=Callable[..., Any])

Rev = Annotated[str, Field(description="a commit: branch, tag, HEAD, main~2, main@{1} or a hex id prefix")]
Limit = Annotated[int, Field(ge=1, le=MAX_PAGE, description="the most items in this answer (a page)")]
Offset = Annotated[int, Field(ge=0, description="items to skip: the next_offset of the previous page")]
PathText = Annotated[str, Field(description="a path into the state: dotted (messages.3.content) or a JSON Pointer "
                                            "(/messages/3/content)")]


def _reporting_errors(fn: F) -> F:
    """``fn``, raising a ``SnapvcError`` (or a ``ValueError`` the library raised on bad
    input) as a ``ToolError``: the SDK answers it as an error result with this text."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SnapvcError as exc:
            raise ToolError(f"{type(exc).__name__}: {exc}") from exc
        except ValueError as exc:
            raise ToolError(f"invalid input: {exc}") from exc

    return call  # type: ignore[return-value]


def build_server(repo: Repository, *, writable: bool = False) -> MCPServer:
    """The MCP server of ``repo``: the read tools, and the write tools when ``writable``."""
    tools = Tools(repo)
    server: MCPServer = MCPServer("snapvc", version=snapvc.__version__, instructions=INSTRUCTIONS,
                                  log_level="WARNING")
    reading = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    def tool(title: str, annotations: ToolAnnotations) -> Callable[[F], F]:
        def register(fn: F) -> F:
            server.add_tool(_reporting_errors(fn), title=title, annotations=annotations, structured_output=True)
            return fn
        return register

    @tool("Branches and tags", reading)
    def refs() -> dict[str, Any]:
        """List the branches and tags, each with the commit it points at (id, time, first line
        of its message), and the branch HEAD is on. Start here to learn what exists."""
        return tools.refs()

    @tool("Commit log", reading)
    def log(rev: Annotated[str | None, Field(description="start from this rev (default: HEAD, or every branch "
                                                            "when HEAD's branch has no commit)")] = None,
            where: Annotated[dict[str, Any] | None, Field(description='only commits whose metadata holds all these '
                                                                       'values, e.g. {"agent": "researcher", '
                                                                       '"usage.tokens": 10} (dotted keys reach nested '
                                                                       'metadata; types must match)')] = None,
            path: Annotated[str | None, Field(description="only commits that changed the value at this path")] = None,
            since: Annotated[str | None, Field(description="only commits made at or after this ISO 8601 time")] = None,
            until: Annotated[str | None, Field(description="only commits made at or before this ISO 8601 time")] = None,
            limit: Limit = 20, offset: Offset = 0) -> dict[str, Any]:
        """List commits newest first (id, parents, author, time, message, metadata, the refs at
        each), optionally filtered by metadata, by a path they changed, or by time. Paged:
        pass next_offset back as offset for older commits."""
        return tools.log(rev, where, path, since, until, limit, offset)

    @tool("Show a commit", reading)
    def show(rev: Rev = "HEAD", limit: Limit = 100) -> dict[str, Any]:
        """Show one commit: its id, parents, author, time, message and metadata, and which paths
        of the state it added, removed or modified against its first parent (values are left
        out: use diff for them)."""
        return tools.show(rev, limit)

    @tool("Diff two commits", reading)
    def diff(a: Rev,
             b: Annotated[str | None, Field(description="the newer commit; omitted: what commit a itself changed "
                                                         "against its first parent")] = None,
             path: Annotated[str | None, Field(description="only changes at or below this path")] = None,
             limit: Limit = 100, offset: Offset = 0) -> dict[str, Any]:
        """What changed in the state from commit a to commit b: each change's path, kind (added,
        removed, modified) and old and new values. A value whose JSON is longer than 20,000
        characters is cut to a preview with its size (read it whole with checkout). A numpy
        array is given by its dtype, shape and bytes, with a summary of what changed."""
        return tools.diff(a, b, path, limit, offset)

    @tool("Read the state", reading)
    def checkout(rev: Rev = "HEAD",
                 path: Annotated[str, Field(description="the value to read (default: the whole state); dotted or a "
                                                        "JSON Pointer")] = "",
                 limit: Limit = 100, offset: Offset = 0) -> dict[str, Any]:
        """Read the state at a commit, or the value at a path in it, as JSON. A small value comes
        whole; a large map or list comes a page of children at a time (each whole when small,
        else its kind, size and a preview: read it with a longer path), and a long text a slice
        at a time. Changes nothing: HEAD and branches stay where they are."""
        return tools.checkout(rev, path, limit, offset)

    @tool("History of a path", reading)
    def history(path: PathText, rev: Rev = "HEAD", limit: Limit = 20, offset: Offset = 0,
                oldest_first: Annotated[bool, Field(description="oldest change first")] = False) -> dict[str, Any]:
        """The commits that changed the value at a path, newest first, each with the kind of change
        and the value it gave (and had before): how a field evolved across the history."""
        return tools.history(path, rev, limit, offset, oldest_first)

    @tool("Reflog of a ref", reading)
    def reflog(ref: Annotated[str, Field(description="a branch or tag name, or HEAD for HEAD's branch")] = "HEAD",
               limit: Limit = 20) -> dict[str, Any]:
        """Every move of a branch or tag, newest first (old and new commit, time, reason): what
        commit, branch and reset did, and where a ref was before (ref@{1} names it)."""
        return tools.reflog(ref, limit)

    if writable:
        @tool("Commit a state", ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                                open_world_hint=False))
        def commit(message: Annotated[str, Field(description="why: the commit message")],
                   set: Annotated[dict[str, Any] | None,
                                  Field(description='values to set, by path: {"plan.next": "search", '
                                                    '"messages.3.content": "hi"}; missing maps on the way are '
                                                    "created")] = None,
                   delete: Annotated[list[str] | None, Field(description="paths to remove")] = None,
                   state: Annotated[dict[str, Any] | None,
                                    Field(description="a whole new state instead of set/delete: keys it lacks are "
                                                      "removed")] = None,
                   branch: Annotated[str | None, Field(description="the branch to commit on (default: HEAD's); "
                                                                   "created if it has no commit yet")] = None,
                   metadata: Annotated[dict[str, Any] | None,
                                       Field(description='metadata to record, e.g. {"step": 4, "agent": "planner"}')]
                   = None,
                   expected_tip: Annotated[str | None,
                                           Field(description="refuse unless the branch is still at this commit (the "
                                                             "id read before): no other writer's commit is "
                                                             "overwritten unseen")] = None) -> dict[str, Any]:
            """Record a new commit on a branch: the branch's current state with some values set or
            deleted, or a whole new state; with a message and metadata. The branch moves to the new
            commit, and the move is in the reflog."""
            return tools.commit(branch, message, metadata, set, delete, state, expected_tip)

        @tool("Create a branch", ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                                 open_world_hint=False))
        def branch(name: Annotated[str, Field(description="the new branch's name (git's rules: no spaces, '..', "
                                                          "'~', '^', ':')")],
                   at: Annotated[str, Field(description="the commit to fork from (a rev)")] = "HEAD",
                   force: Annotated[bool, Field(description="move the branch if it exists already")] = False
                   ) -> dict[str, Any]:
            """Create a branch at a commit (fork): to try another path from a decision point without
            touching the original line. Recorded in the reflog."""
            return tools.branch(name, at, force)

        @tool("Reset a branch", ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                                open_world_hint=False))
        def reset(branch: Annotated[str, Field(description="the branch to move")],
                  to: Annotated[str, Field(description="the commit to move it to (a rev, e.g. main~1)")]
                  ) -> dict[str, Any]:
            """Move a branch to another commit (roll back or forward). Commits left behind stay
            reachable through the reflog: reset to branch@{1} undoes it."""
            return tools.reset(branch, to)

    return server


def serve(repo: Repository, *, writable: bool = False, port: int | None = None) -> None:
    """Serve ``repo`` until the client goes away: over stdin and stdout, or with ``port``
    over Streamable HTTP on 127.0.0.1 (this machine only) at ``/mcp``."""
    server = build_server(repo, writable=writable)
    if port is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=port)
