"""Running the web view: uvicorn on a socket bound here, so that the address (a free port
for ``port=0``) is known, and announced, before the first request can come."""

from __future__ import annotations

import socket
import threading
import webbrowser
from collections.abc import Callable

import uvicorn

import snapvc
from snapvc.ui import app

__all__ = ["serve"]


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        # Listening now: a client that read the address connects even before uvicorn accepts.
        sock.listen(128)
    except OSError as exc:  # the port taken, say: the error names the address ('--port 0' picks a free one)
        sock.close()
        exc.filename = f"{host}:{port}"
        raise
    return sock


def serve(repo: snapvc.Repository, *, host: str = "127.0.0.1", port: int = 8765, writable: bool = False,
          open_browser: bool = True, announce: Callable[[str], None] = print) -> None:
    """Serve the view of ``repo`` on ``host:port`` (``port=0``: a free one) until
    interrupted; ``announce(url)`` hears the address first, and a browser opens it
    unless ``open_browser`` is false."""
    sock = _bind(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    url = f"http://{shown}:{bound}/"
    config = uvicorn.Config(app(repo, writable=writable, host=host), log_level="warning", access_log=False,
                            lifespan="on")
    server = uvicorn.Server(config)
    announce(url)
    if open_browser:
        threading.Timer(0.5, webbrowser.open, (url,)).start()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
