"""``snapvc ui``: a local web view of a repository's history (the ``ui`` extra: Starlette
and uvicorn).

``app(repo)`` is the ASGI application: ``/`` the page (``static/index.html``), ``/static/``
its files, ``/api/...`` the JSON API the page reads (``api.py``; the commit graph a page
at a time in ``graph.py``); ``serve.py`` runs it with uvicorn on 127.0.0.1. The view
reads, and writes (tag, branch, reset, undo) only when made with ``writable=True``.

This layer sits beside the integrations: it uses the public face (``snapvc``,
``snapvc.api``) and the layers below it, never the command line.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

import snapvc
from snapvc.errors import RequestRefusedError, SnapvcError
from snapvc.ui.api import Api, error_response, read_json_body

__all__ = ["app", "STATIC"]

STATIC = Path(__file__).parent / "static"
LOOPBACK = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})
WILDCARDS = frozenset({"0.0.0.0", "::", "[::]", ""})


def _host_name(host: str) -> str:
    """``host`` of a ``Host`` header ``host[:port]`` (an IPv6 address keeps its brackets)."""
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0] if ":" in host else host


def app(repo: str | os.PathLike[str] | snapvc.Repository, *, writable: bool = False, host: str = "127.0.0.1") -> Starlette:
    """The web view of ``repo`` (a location, opened without creating anything, or an open
    ``Repository``) as an ASGI application. ``writable`` allows the writes; ``host`` is
    the address it is served on: a request naming another host is refused (403), unless
    it is served on every address (``0.0.0.0``), which its user chose."""
    opened = repo if isinstance(repo, snapvc.Repository) else snapvc.open(repo, create=False)
    api = Api(opened, writable)
    served = None if host in WILDCARDS else LOOPBACK | {host.lower()}

    def check_host(request: Request) -> None:
        # A page of another site can make its own name resolve to 127.0.0.1 and read
        # through the browser what this server answers: only our own names are served.
        name = _host_name(request.headers.get("host", "")).lower()
        if served is not None and name not in served:
            raise RequestRefusedError(f"host {name!r} is not served here: open the view at its own address "
                                      f"({host}), as 'snapvc ui' printed it")

    def read(handler: Callable[[Request], Any]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                check_host(request)
            except SnapvcError as exc:
                return error_response(exc)
            return await run_in_threadpool(api.answer, handler, request)

        return endpoint

    def write(handler: Callable[[Any], Any]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                check_host(request)
                if not api.writable:
                    raise RequestRefusedError(f"{request.url.path}: this view is read-only; start it with "
                                              "'snapvc ui --write' to tag, branch, reset and undo")
                origin = request.headers.get("origin")
                own = f"{request.url.scheme}://{request.headers.get('host', '')}"
                if origin is not None and origin != own:
                    raise RequestRefusedError(f"{request.url.path}: a write from {origin!r}, another site than "
                                              f"this view ({own}), is refused")
                content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
                if content_type != "application/json":
                    raise RequestRefusedError(f"{request.url.path}: a write must be sent as application/json, "
                                              f"not {content_type or 'without a Content-Type'}")
                body = read_json_body(await request.body())
            except SnapvcError as exc:
                return error_response(exc)
            return await run_in_threadpool(api.answer, handler, request, body)

        return endpoint

    async def index(request: Request) -> Response:
        try:
            check_host(request)
        except SnapvcError as exc:
            return error_response(exc)
        return FileResponse(STATIC / "index.html")

    routes = [
        Route("/", index),
        Route("/api/repo", read(api.repo_info)),
        Route("/api/graph", read(api.graph)),
        Route("/api/commit/{rev:path}", read(api.commit)),
        Route("/api/diff", read(api.diff)),
        Route("/api/state/{rev:path}", read(api.state)),
        Route("/api/history", read(api.history)),
        Route("/api/threads", read(api.threads)),
        Route("/api/reflog", read(api.reflog)),
        Route("/api/tag", write(api.tag), methods=["POST"]),
        Route("/api/branch", write(api.branch), methods=["POST"]),
        Route("/api/reset", write(api.reset), methods=["POST"]),
        Route("/api/undo", write(api.undo), methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if opened is not repo:  # opened here: closed here (folds SQLite's log into the file)
                opened.close()

    made = Starlette(routes=routes, lifespan=lifespan)
    made.state.repo = opened
    return made
