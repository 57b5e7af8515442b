"""The ``RefStore`` protocol: named, movable pointers to commits, with a reflog.

Invariants every implementation keeps (tested by ``tests/test_ref_store_conformance.py``):

- **Compare-and-swap.** A ref moves only through ``compare_and_swap(name, expected,
  new, reason)``, which sets ``new`` if and only if the current value is ``expected``
  (``None``: the ref must not exist; ``new=None`` deletes it) and says whether it
  won. A lost race changes nothing and returns ``False``; the caller re-reads and
  retries or reports ``RefConflictError``. Nothing is ever silently overwritten, also
  between processes sharing one repository file.
- **Reflog on every move.** The move and its ``ReflogEntry(name, old, new, time,
  reason)`` are written in one atomic step; a swap to the value the ref already has is
  not a move and logs nothing. Entries outlive the ref, so a deleted branch can be
  recovered from its reflog (``main@{1}``). ``time`` comes from the store's injected
  clock.
- **Names are validated.** Every name passes ``check_full_ref_name``: git's
  check-ref-format rules, and either ``refs/...`` or a root ref such as ``HEAD``.
  A bad name raises ``InvalidRefNameError`` before anything is read or written.
- **A name is direct or symbolic, never both.** ``set_symbolic`` replaces a direct
  ref of that name (logging its removal); a swap that creates a direct ref replaces a
  symbolic one. ``get`` and ``list`` see direct refs only; symbolic refs are not
  followed by the store (``resolve_rev`` follows them). An attached ``HEAD`` is the
  symbolic ref ``HEAD -> refs/heads/<branch>``; a detached ``HEAD`` is a direct ref.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from snapvc.errors import InvalidArgumentError, InvalidRefNameError
from snapvc.ids import ObjectId
from snapvc.refs.names import check_full_ref_name

__all__ = ["ReflogEntry", "RefStore", "ref_target", "check_symbolic_ref"]


@dataclass(frozen=True, slots=True)
class ReflogEntry:
    """One move of a ref: from ``old`` to ``new`` (``None``: absent) at ``time``, for ``reason``."""

    ref: str
    old: ObjectId | None
    new: ObjectId | None
    time: float  # seconds since the epoch, UTC
    reason: str


@runtime_checkable
class RefStore(Protocol):
    def get(self, name: str) -> ObjectId | None:
        """The id a direct ref points at; ``None`` if it does not exist (or is symbolic)."""
        ...

    def list(self, prefix: str = "refs/", *, after: str | None = None,
             limit: int | None = None) -> dict[str, ObjectId]:
        """Every direct ref whose name starts with ``prefix``, sorted by name.

        ``prefix=""`` includes root refs such as a detached ``HEAD``. ``after`` keeps
        only the names that sort after it, ``limit`` the first ``limit`` of those: a page
        of a long listing, read at the cost of the page (the next page starts after the
        last name of this one).
        """
        ...

    def compare_and_swap(self, name: str, expected: ObjectId | None, new: ObjectId | None, reason: str) -> bool:
        """Atomically set ``name`` to ``new`` if it now points at ``expected`` and log the move.

        ``expected=None``: the ref must not exist; ``new=None``: delete it. Returns whether
        it won; on ``False`` nothing changed.
        """
        ...

    def reflog(self, name: str, limit: int | None = None) -> builtins.list[ReflogEntry]:
        """The moves of ``name``, newest first, also after the ref was deleted; ``[]`` if none."""
        ...

    def reflog_names(self) -> builtins.list[str]:
        """Every name that has reflog entries, sorted (deleted refs included)."""
        ...

    def expire_reflog(self, before: float, name: str | None = None) -> int:
        """Drop reflog entries older than ``before`` (of ``name``, or of every ref); returns how many."""
        ...

    def get_symbolic(self, name: str) -> str | None:
        """The ref a symbolic ref points at (``"HEAD"`` -> ``"refs/heads/main"``), or ``None``."""
        ...

    def set_symbolic(self, name: str, target: str) -> None:
        """Make ``name`` a symbolic ref to ``target`` (a ``refs/...`` name, which need not exist)."""
        ...

    def delete_symbolic(self, name: str) -> bool:
        """Remove the symbolic ref ``name``; returns whether it existed."""
        ...

    def close(self) -> None:
        ...


def ref_target(value: object, what: str) -> ObjectId | None:
    """The ``expected`` or ``new`` value (named by ``what``) of a ``compare_and_swap`` as
    an ``ObjectId`` (``None`` passes); ``InvalidArgumentError`` (a ``TypeError``) for
    anything but 32 bytes. Every ref store checks its arguments with it, so that all
    refuse the same values alike."""
    if value is None or type(value) is ObjectId:
        return value
    if isinstance(value, bytes) and len(value) == 32:
        return ObjectId(value)
    raise InvalidArgumentError(what, f"{what} must be an ObjectId or None, got {value!r}")


def check_symbolic_ref(name: str, target: str) -> None:
    """Validate a symbolic ref before ``set_symbolic`` writes it (every ref store does):
    both names full, the target under ``refs/``, no self-loop (``InvalidRefNameError``)."""
    check_full_ref_name(name)
    check_full_ref_name(target)
    if not target.startswith("refs/"):
        raise InvalidRefNameError(target, f"a symbolic ref must point inside 'refs/', not at {target!r}")
    if target == name:
        raise InvalidRefNameError(name, "a symbolic ref cannot point at itself")
