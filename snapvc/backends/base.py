"""``Backend``: what a repository needs of the location it lives in.

A backend ties together the three stores of one location, the raw object store
(``snapvc.store.base.RawObjectStore``: frames in, frames out), the ref store
(``snapvc.refs.base.RefStore``) and the commit index
(``snapvc.store.commit_index.CommitIndex``), and adds what spans them: a transaction,
the gc epoch, settings, the durability mode and a few maintenance hooks. Each backend
subclasses it in its own folder (``memory/``, ``sqlite/``, ``s3/``);
``snapvc.backends.open.open_backend`` picks one from a location.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from snapvc.errors import InvalidArgumentError, UnsupportedOperationError
from snapvc.ids import ObjectId
from snapvc.refs.base import RefStore
from snapvc.store.base import RawObjectStore
from snapvc.store.commit_index import CommitIndex

__all__ = ["Backend", "IdMap", "MemoryIdMap", "UpgradeResult", "DURABILITY_MODES", "check_durability"]

# What a returned commit survives, weakest last (``snapvc.backends.sqlite.file`` has the table).
DURABILITY_MODES = ("sync", "normal", "batch")


def check_durability(durability: object) -> None:
    """Refuse a durability mode that is none of ``DURABILITY_MODES`` with an
    ``InvalidArgumentError`` (a ``ValueError`` too) naming the modes there are. A value
    that is not a str is refused alike, not with the ``TypeError`` of an unhashable key."""
    if not isinstance(durability, str) or durability not in DURABILITY_MODES:
        raise InvalidArgumentError("durability", f"durability must be one of {sorted(DURABILITY_MODES)}, "
                                                 f"got {durability!r}")


class IdMap(Protocol):
    """A named map from object ids to short byte strings kept beside a repository
    (``Backend.id_map``): git export's record of which git commit each commit became."""

    def get_many(self, ids: Sequence[bytes]) -> dict[bytes, bytes]:
        """The value of each id that has one; the others are left out."""
        ...

    def put_many(self, pairs: Mapping[bytes, bytes]) -> None:
        """Set the value of each id (replacing one it had)."""
        ...


class MemoryIdMap:
    """An ``IdMap`` in a dict, for as long as its backend lives."""

    def __init__(self) -> None:
        self._values: dict[bytes, bytes] = {}

    def get_many(self, ids: Sequence[bytes]) -> dict[bytes, bytes]:
        return {i: self._values[i] for i in ids if i in self._values}

    def put_many(self, pairs: Mapping[bytes, bytes]) -> None:
        self._values.update(pairs)


@dataclass(frozen=True, slots=True)
class UpgradeResult:
    """What ``Backend.upgrade`` did: the storage format before and after, how many objects
    it moved, and the size on disk before and after (bytes). ``finished``: the file was
    at the new format already, and an earlier upgrade's last steps (stopped by a crash)
    were done now."""

    location: str
    old_format: int
    new_format: int
    objects: int
    bytes_before: int
    bytes_after: int
    finished: bool = False

    @property
    def changed(self) -> bool:
        return self.old_format != self.new_format or self.finished

    def to_dict(self) -> dict[str, Any]:
        return {"location": self.location, "old_format": self.old_format, "new_format": self.new_format,
                "upgraded": self.old_format != self.new_format, "finished": self.finished, "objects": self.objects,
                "bytes_before": self.bytes_before, "bytes_after": self.bytes_after}

    def __str__(self) -> str:
        if self.old_format != self.new_format:
            return (f"{self.location}: upgraded from format {self.old_format} to {self.new_format}: {self.objects:,} "
                    f"objects moved into packs; {self.bytes_before:,} bytes before, {self.bytes_after:,} after")
        if self.finished:
            return (f"{self.location}: at format {self.new_format} already; an earlier upgrade's compaction was "
                    f"finished ({self.bytes_before:,} bytes before, {self.bytes_after:,} after)")
        return f"{self.location}: at format {self.new_format} already; nothing to upgrade"


class Backend(ABC):
    """The stores of one location and what spans them. ``objects``, ``refs`` and
    ``commits`` may be replaced after opening (a ``FaultyStore`` around ``objects``)."""

    #: Whether a gc sweep may run while a write is under way (S3: nothing excludes
    #: writers). Then a write may rely on what it did not upload only as the rules of
    #: ``snapvc.backends.s3.packs`` ("gc beside writers") allow; where a sweep excludes
    #: every writer (one transaction), the gc epoch checked inside the write suffices.
    sweeps_beside_writers: ClassVar[bool] = False

    def __init__(self, location: str, objects: RawObjectStore, refs: RefStore, commits: CommitIndex, *,
                 durability: str = "normal") -> None:
        check_durability(durability)  # refused on every backend as a file's would be
        self._durability = durability
        self.location = location
        self.objects = objects  # the raw store: frames in, frames out
        self.refs = refs
        self.commits = commits
        self._id_maps: dict[str, MemoryIdMap] = {}

    @abstractmethod
    def transaction(self) -> AbstractContextManager[None]:
        """One atomic write (SQLite), one locked section (memory), one pack and its ref
        writes (S3): what is written inside lands together, objects before refs."""

    def consistent_read(self) -> AbstractContextManager[None]:
        """A section whose reads see the repository in one state, as no write was made
        meanwhile (fsck: a ref that moved while it read is no damage). An SQLite file
        gives one read transaction; the memory backend, its lock. Here (S3) there is no
        such read: the reader orders its reads instead (``snapvc.maintenance.fsck``)."""
        return nullcontext()

    @abstractmethod
    def gc_epoch(self) -> int:
        """How many gc sweeps have deleted objects here, ever. A writer that cached what
        it saw stored (encodings, delta bases, objects found present) compares this with
        the epoch it cached under, inside its write transaction: a change means a sweep
        ran meanwhile and the caches may name deleted objects (``snapvc.maintenance.gc``)."""

    @abstractmethod
    def bump_gc_epoch(self) -> None:
        """Record a sweep; call inside the sweep's transaction, so writers see the new
        epoch exactly when they can see the deletions."""

    @abstractmethod
    def get_setting(self, key: str) -> str | None:
        """A setting kept in the repository (e.g. its remotes), None if unset."""

    @abstractmethod
    def set_setting(self, key: str, value: str) -> None:
        """Keep a setting in the repository."""

    @property
    def durability(self) -> str:
        """The durability mode (``snapvc.backends.sqlite.file``). A backend without modes
        to choose from (memory; S3, where a PUT that returned is durable) keeps the name
        it was given."""
        return self._durability

    def set_durability(self, durability: str) -> None:
        """Change the durability mode from the next write on (refusing an unknown one)."""
        check_durability(durability)
        self._durability = durability

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

    def release_space(self) -> None:
        """Compact the storage and give the space a sweep freed back to the system, after
        the sweep's transaction (an SQLite file's packs sealed, its free pages released);
        here there is none to give."""
        return None

    def id_map(self, name: str) -> IdMap:
        """The ``IdMap`` called ``name`` (a lowercase identifier that names what it maps
        and its version, e.g. ``git_commits_v1``). Here it lives as long as this backend;
        SQLite keeps it in its file, in a table of that name."""
        return self._id_maps.setdefault(name, MemoryIdMap())

    def upgrade(self) -> UpgradeResult:
        """Move the stored data to the newest storage format, in one atomic step (the
        embedded SQLite file: ``snapvc.backends.sqlite.upgrade``); afterwards this
        backend's stores speak the new format. A backend with one format only has nothing
        to upgrade: ``UnsupportedOperationError``."""
        raise UnsupportedOperationError(f"{self.location!r}: {type(self).__name__} has one storage format only; "
                                        f"there is nothing to upgrade")

    def integrity_problems(self) -> list[str]:
        """What the storage's own consistency check finds wrong below snapvc's objects
        (SQLite's ``PRAGMA integrity_check`` of its b-trees and pages), for fsck; here
        there is no such check, so nothing."""
        return []

    def close(self) -> None:
        self.refs.close()
        self.objects.close()
