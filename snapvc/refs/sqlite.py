"""Refs, symbolic refs and the reflog in tables of a ``SqliteFile``.

Every write runs in one ``BEGIN IMMEDIATE`` transaction, which takes SQLite's write
lock before reading: the compare and the swap of ``compare_and_swap`` see and change
the same state even when several processes share the file, and the reflog entry
commits with the move or not at all.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable

from snapvc.ids import ObjectId
from snapvc.refs.base import ReflogEntry, _as_id, _check_symbolic
from snapvc.refs.names import check_full_ref_name
from snapvc.store.sqlite import SqliteFile

__all__ = ["SqliteRefStore"]

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS refs (name TEXT PRIMARY KEY, target BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS symrefs (name TEXT PRIMARY KEY, target TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS reflog (seq INTEGER PRIMARY KEY AUTOINCREMENT, ref TEXT NOT NULL, "
    "old BLOB, new BLOB, time REAL NOT NULL, reason TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS reflog_ref_seq ON reflog (ref, seq)",
)


def _id(raw: bytes | None) -> ObjectId | None:
    return None if raw is None else ObjectId(raw)


class SqliteRefStore:
    """Tables ``refs``, ``symrefs`` and ``reflog`` of a ``SqliteFile``."""

    def __init__(self, file: SqliteFile, clock: Callable[[], float] = time.time) -> None:
        self.file = file
        self._clock = clock
        with file.transaction() as c:
            for statement in _SCHEMA:
                c.execute(statement)

    def get(self, name: str) -> ObjectId | None:
        check_full_ref_name(name)
        with self.file.lock:
            row = self.file.conn.execute("SELECT target FROM refs WHERE name = ?", (name,)).fetchone()
        return None if row is None else ObjectId(row[0])

    def list(self, prefix: str = "refs/") -> dict[str, ObjectId]:
        out: dict[str, ObjectId] = {}
        with self.file.lock:
            # Names sort by code point in SQLite (UTF-8, binary) as in Python, so the
            # names with the prefix are one run starting at the prefix.
            for name, target in self.file.conn.execute(
                "SELECT name, target FROM refs WHERE name >= ? ORDER BY name", (prefix,)
            ):
                if not name.startswith(prefix):
                    break
                out[name] = ObjectId(target)
        return out

    def compare_and_swap(self, name: str, expected: ObjectId | None, new: ObjectId | None, reason: str) -> bool:
        check_full_ref_name(name)
        expected = _as_id(expected, "expected")
        new = _as_id(new, "new")
        with self.file.transaction() as c:
            row = c.execute("SELECT target FROM refs WHERE name = ?", (name,)).fetchone()
            if (None if row is None else ObjectId(row[0])) != expected:
                return False
            if expected == new:
                return True
            if new is None:
                c.execute("DELETE FROM refs WHERE name = ? AND target = ?", (name, expected))
            elif expected is None:
                c.execute("DELETE FROM symrefs WHERE name = ?", (name,))
                c.execute("INSERT INTO refs (name, target) VALUES (?, ?)", (name, new))
            else:
                c.execute("UPDATE refs SET target = ? WHERE name = ? AND target = ?", (new, name, expected))
            self._log(name, expected, new, reason)
        return True

    def _log(self, name: str, old: ObjectId | None, new: ObjectId | None, reason: str) -> None:
        self.file.conn.execute(
            "INSERT INTO reflog (ref, old, new, time, reason) VALUES (?, ?, ?, ?, ?)",
            (name, old, new, float(self._clock()), reason),
        )

    def reflog(self, name: str, limit: int | None = None) -> builtins.list[ReflogEntry]:
        check_full_ref_name(name)
        if limit is not None and limit <= 0:
            return []
        with self.file.lock:
            rows = self.file.conn.execute(
                "SELECT old, new, time, reason FROM reflog WHERE ref = ? ORDER BY seq DESC LIMIT ?",
                (name, -1 if limit is None else limit),
            ).fetchall()
        return [ReflogEntry(name, _id(old), _id(new), when, reason) for old, new, when, reason in rows]

    def reflog_names(self) -> builtins.list[str]:
        with self.file.lock:
            rows = self.file.conn.execute("SELECT DISTINCT ref FROM reflog ORDER BY ref").fetchall()
        return [r[0] for r in rows]

    def expire_reflog(self, before: float, name: str | None = None) -> int:
        if name is not None:
            check_full_ref_name(name)
        with self.file.transaction() as c:
            if name is None:
                return c.execute("DELETE FROM reflog WHERE time < ?", (before,)).rowcount
            return c.execute("DELETE FROM reflog WHERE ref = ? AND time < ?", (name, before)).rowcount

    def get_symbolic(self, name: str) -> str | None:
        check_full_ref_name(name)
        with self.file.lock:
            row = self.file.conn.execute("SELECT target FROM symrefs WHERE name = ?", (name,)).fetchone()
        return None if row is None else row[0]

    def set_symbolic(self, name: str, target: str) -> None:
        _check_symbolic(name, target)
        with self.file.transaction() as c:
            row = c.execute("SELECT target FROM refs WHERE name = ?", (name,)).fetchone()
            if row is not None:
                c.execute("DELETE FROM refs WHERE name = ?", (name,))
                self._log(name, ObjectId(row[0]), None, f"symbolic ref to {target}")
            c.execute("INSERT OR REPLACE INTO symrefs (name, target) VALUES (?, ?)", (name, target))

    def delete_symbolic(self, name: str) -> bool:
        check_full_ref_name(name)
        with self.file.transaction() as c:
            return c.execute("DELETE FROM symrefs WHERE name = ?", (name,)).rowcount > 0

    def close(self) -> None:
        pass
