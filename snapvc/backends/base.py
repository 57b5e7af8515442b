"""Where a repository lives: the object store, ref store and commit index of one location.

``open_backend("memory://")`` keeps everything in this process; ``s3://bucket/prefix``
is a repository on S3-compatible storage (``snapvc.backends.s3.backend``); any other location is
a path to the embedded default, one SQLite file holding all three.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from snapvc.errors import InvalidArgumentError, RepositoryError
from snapvc.ids import ObjectId
from snapvc.refs.base import RefStore
from snapvc.backends.memory.refs import MemoryRefStore
from snapvc.backends.sqlite.refs import SqliteRefStore
from snapvc.store.base import ObjectStore
from snapvc.backends.sqlite.commit_index import CommitIndex, MemoryCommitIndex, SqliteCommitIndex
from snapvc.backends.memory.objects import MemoryObjectStore
from snapvc.backends.sqlite.objects import SqliteFile, SqliteObjectStore, check_durability, wrong

__all__ = ["Backend", "open_backend", "MEMORY_URL"]

MEMORY_URL = "memory://"


@dataclass
class Backend:
    location: str
    objects: ObjectStore  # the raw backend: frames in, frames out
    refs: RefStore
    commits: CommitIndex
    file: SqliteFile | None = None
    _lock: Any = None
    _durability: str = "normal"
    _gc_epoch: int = 0  # memory backends: the count of gc sweeps (SQLite keeps it in ``meta``)
    _settings: dict[str, str] | None = None  # memory backends' settings (SQLite keeps them in ``meta``)

    def __post_init__(self) -> None:
        self._lock = threading.RLock()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One atomic write (SQLite) or one locked section (memory)."""
        if self.file is not None:
            with self.file.transaction():
                yield
        else:
            with self._lock:
                yield

    def gc_epoch(self) -> int:
        """How many gc sweeps have deleted objects here, ever. A writer that cached what
        it saw stored (encodings, delta bases, objects found present) compares this with
        the epoch it cached under, inside its write transaction: a change means a sweep
        ran meanwhile and the caches may name deleted objects (``snapvc.maintenance.gc``)."""
        if self.file is not None:
            stored = self.file.get_meta("gc_epoch")
            if stored is not None and not (type(stored) is str and stored.isascii() and stored.isdigit()):
                # Guessing would let a writer keep caches that may name deleted objects.
                raise self.file.damaged({"table 'meta' key 'gc_epoch'": f"it {wrong(stored)}, not a count of sweeps"})
            return int(stored or 0)
        return self._gc_epoch

    def bump_gc_epoch(self) -> None:
        """Record a sweep; call inside the sweep's transaction, so writers see the new
        epoch exactly when they can see the deletions."""
        if self.file is not None:
            self.file.set_meta("gc_epoch", str(self.gc_epoch() + 1))
        else:
            self._gc_epoch += 1

    def reusable(self, ids: Iterable[ObjectId]) -> set[ObjectId]:
        """The subset of ``ids`` a write may skip as stored instead of putting them again:
        here every stored one, as a sweep excludes every writer. (On S3 only those whose
        bytes were stored recently: ``snapvc.backends.s3.backend``.)"""
        return self.objects.has_many(ids)

    def min_gc_grace(self) -> float:
        """The shortest grace period (seconds) a gc may use while other writers are
        active. None needed here: a sweep is one transaction, which excludes every writer
        (S3 has its own, ``snapvc.backends.s3.backend``)."""
        return 0.0

    def delete_garbage(self, ids: list[ObjectId], *, commits: bool, older_than: float) -> int:
        """Remove gc's doomed objects (or commits, with ``commits``) from the sweep's
        transaction; returns how many were present. ``older_than`` is the sweep's cutoff,
        which the sweep has checked already: its transaction excludes every writer."""
        return self.commits.delete_many(ids) if commits else self.objects.delete_many(ids)

    def get_setting(self, key: str) -> str | None:
        """A setting kept in the repository (e.g. its remotes), None if unset."""
        if self.file is not None:
            return self.file.get_meta(f"setting:{key}")
        return (self._settings or {}).get(key)

    def set_setting(self, key: str, value: str) -> None:
        if self.file is not None:
            self.file.set_meta(f"setting:{key}", value)
        else:
            self._settings = {**(self._settings or {}), key: value}

    @property
    def durability(self) -> str:
        """The durability mode (``snapvc.backends.sqlite.objects``); a memory backend has none to
        choose, and keeps the name it was given."""
        return self.file.durability if self.file is not None else self._durability

    def set_durability(self, durability: str) -> None:
        if self.file is not None:
            self.file.set_durability(durability)
        else:
            check_durability(durability)
            self._durability = durability

    def close(self) -> None:
        self.refs.close()
        self.objects.close()
        if self.file is not None:
            self.file.close()


def open_backend(location: str | os.PathLike[str], *, create: bool = True, durability: str = "normal",
                 clock: Callable[[], float] | None = None, **options: Any) -> Backend:
    """The backend at ``location``. ``options`` are for S3 locations (``endpoint``,
    ``region``: see ``snapvc.backends.s3.backend.open_s3_backend``)."""
    kw = {"clock": clock} if clock is not None else {}
    text = os.fspath(location)
    if text.startswith("s3://"):
        from snapvc.backends.s3.backend import open_s3_backend  # obstore loads here, not with snapvc

        return open_s3_backend(text, create=create, durability=durability, clock=clock, **options)
    if options:
        names = ", ".join(sorted(options))
        raise InvalidArgumentError(names, f"{names}: options of s3:// locations, not of {text!r}")
    if text == MEMORY_URL or text.startswith(MEMORY_URL):
        check_durability(durability)  # refused as a file's would be, and kept as set_durability keeps it
        return Backend(MEMORY_URL, MemoryObjectStore(**kw), MemoryRefStore(**kw), MemoryCommitIndex(**kw),
                       _durability=durability)
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise RepositoryError(f"unsupported repository location {text!r}: scheme {scheme!r} is not known (use a file path, memory:// or s3://bucket/prefix)")
    file = SqliteFile(Path(text), create=create, durability=durability)
    try:
        return Backend(text, SqliteObjectStore(file, **kw), SqliteRefStore(file, **kw), SqliteCommitIndex(file, **kw), file)
    except BaseException:
        file.close()
        raise
