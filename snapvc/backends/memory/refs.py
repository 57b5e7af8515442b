"""An in-process ref store, for tests and throwaway runs; safe to share between threads."""

from __future__ import annotations

import builtins
import threading
import time
from collections.abc import Callable

from snapvc.ids import ObjectId
from snapvc.refs.base import ReflogEntry, check_symbolic_ref, ref_target
from snapvc.refs.names import check_full_ref_name

__all__ = ["MemoryRefStore"]


class MemoryRefStore:
    """Refs, symbolic refs and reflog in dicts, behind one lock."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._refs: dict[str, ObjectId] = {}
        self._symrefs: dict[str, str] = {}
        self._reflog: dict[str, builtins.list[ReflogEntry]] = {}  # oldest first

    def get(self, name: str) -> ObjectId | None:
        check_full_ref_name(name)
        return self._refs.get(name)

    def list(self, prefix: str = "refs/", *, after: str | None = None,
             limit: int | None = None) -> dict[str, ObjectId]:
        with self._lock:
            items = [(n, oid) for n, oid in self._refs.items()
                     if n.startswith(prefix) and (after is None or n > after)]
        return dict(sorted(items)[:limit])

    def compare_and_swap(self, name: str, expected: ObjectId | None, new: ObjectId | None, reason: str) -> bool:
        check_full_ref_name(name)
        expected = ref_target(expected, "expected")
        new = ref_target(new, "new")
        with self._lock:
            if self._refs.get(name) != expected:
                return False
            if expected == new:
                return True
            if new is None:
                del self._refs[name]
            else:
                self._symrefs.pop(name, None)
                self._refs[name] = new
            self._log(name, expected, new, reason)
        return True

    def _log(self, name: str, old: ObjectId | None, new: ObjectId | None, reason: str) -> None:
        self._reflog.setdefault(name, []).append(ReflogEntry(name, old, new, float(self._clock()), reason))

    def reflog(self, name: str, limit: int | None = None) -> builtins.list[ReflogEntry]:
        check_full_ref_name(name)
        with self._lock:
            entries = self._reflog.get(name, [])[::-1]
        return entries if limit is None else entries[: max(limit, 0)]

    def reflog_names(self) -> builtins.list[str]:
        with self._lock:
            return sorted(n for n, entries in self._reflog.items() if entries)

    def expire_reflog(self, before: float, name: str | None = None) -> int:
        if name is not None:
            check_full_ref_name(name)
        removed = 0
        with self._lock:
            for ref in [name] if name is not None else builtins.list(self._reflog):
                entries = self._reflog.get(ref, [])
                kept = [e for e in entries if e.time >= before]
                removed += len(entries) - len(kept)
                if kept:
                    self._reflog[ref] = kept
                else:
                    self._reflog.pop(ref, None)
        return removed

    def get_symbolic(self, name: str) -> str | None:
        check_full_ref_name(name)
        return self._symrefs.get(name)

    def set_symbolic(self, name: str, target: str) -> None:
        check_symbolic_ref(name, target)
        with self._lock:
            old = self._refs.pop(name, None)
            if old is not None:
                self._log(name, old, None, f"symbolic ref to {target}")
            self._symrefs[name] = target

    def delete_symbolic(self, name: str) -> bool:
        check_full_ref_name(name)
        with self._lock:
            return self._symrefs.pop(name, None) is not None

    def close(self) -> None:
        pass
