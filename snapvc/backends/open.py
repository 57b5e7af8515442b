"""``open_backend``: the backend a location names.

``memory://`` keeps everything in this process (``snapvc.backends.memory``);
``s3://bucket/prefix`` is a repository on S3-compatible storage (``snapvc.backends.s3``,
loaded only then, with obstore); any other location is a path to the embedded default,
one SQLite file (``snapvc.backends.sqlite``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from snapvc.backends.base import Backend
from snapvc.backends.memory.backend import MEMORY_URL, open_memory_backend
from snapvc.backends.sqlite.backend import open_sqlite_backend
from snapvc.errors import InvalidArgumentError, RepositoryError

__all__ = ["open_backend", "MEMORY_URL"]


def open_backend(location: str | os.PathLike[str], *, create: bool = True, durability: str = "normal",
                 clock: Callable[[], float] | None = None, **options: Any) -> Backend:
    """The backend at ``location``. ``options`` are for S3 locations (``endpoint``,
    ``region``, ``cache_dir``, ``gc_timing``: see ``snapvc.backends.s3.backend.open_s3_backend``),
    and ``format`` for a new repository file (3, the default, or 2: a file that snapvc
    releases before format 3 read)."""
    text = os.fspath(location)
    if text.startswith("s3://"):
        from snapvc.backends.s3.backend import open_s3_backend  # obstore loads here, not with snapvc

        return open_s3_backend(text, create=create, durability=durability, clock=clock, **options)
    format = options.pop("format", None)
    if format is not None and (text == MEMORY_URL or text.startswith(MEMORY_URL)):
        raise InvalidArgumentError("format", f"format: an option of repository files, not of {text!r}")
    if options:
        names = ", ".join(sorted(options))
        raise InvalidArgumentError(names, f"{names}: options of s3:// locations, not of {text!r}")
    if text == MEMORY_URL or text.startswith(MEMORY_URL):
        return open_memory_backend(durability=durability, clock=clock)
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise RepositoryError(f"unsupported repository location {text!r}: scheme {scheme!r} is not known (use a file path, memory:// or s3://bucket/prefix)")
    if format is None:
        return open_sqlite_backend(text, create=create, durability=durability, clock=clock)
    return open_sqlite_backend(text, create=create, durability=durability, clock=clock, format=format)
