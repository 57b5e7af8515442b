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

from snapvc.errors import InvalidRefNameError
from snapvc.ids import ID_SIZE, ObjectId
from snapvc.refs.base import ReflogEntry, check_symbolic_ref, ref_target
from snapvc.refs.names import check_full_ref_name
from snapvc.backends.sqlite.file import SqliteFile, is_number, wrong

__all__ = ["SqliteRefStore"]

_SQLITE_MAX_INT = (1 << 63) - 1

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS refs (name TEXT PRIMARY KEY, target BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS symrefs (name TEXT PRIMARY KEY, target TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS reflog (seq INTEGER PRIMARY KEY AUTOINCREMENT, ref TEXT NOT NULL, "
    "old BLOB, new BLOB, time REAL NOT NULL, reason TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS reflog_ref_seq ON reflog (ref, seq)",
)


def _is_id(raw: object) -> bool:
    return type(raw) is bytes and len(raw) == ID_SIZE


def _name_problem(name: object) -> str | None:
    """What is wrong with a ref name read from the file (None: nothing)."""
    if type(name) is not str:
        return f"its name {wrong(name)}, not text"
    try:
        check_full_ref_name(name)
    except InvalidRefNameError as exc:
        return str(exc)
    return None


def _entry_problem(old: object, new: object, when: object, reason: object) -> str | None:
    """What is wrong with a reflog row's columns (None: nothing)."""
    for column, value in (("old", old), ("new", new)):
        if value is not None and not _is_id(value):
            return f"its {column} commit {wrong(value)}, not a 32-byte id"
    if not is_number(when):
        return f"its time {wrong(when)}, not a number"
    if type(reason) is not str:
        return f"its reason {wrong(reason)}, not text"
    return None


class SqliteRefStore:
    """Tables ``refs``, ``symrefs`` and ``reflog`` of a ``SqliteFile``.

    Every value read is checked to be what this store writes (a 32-byte target, a
    numeric time...): a row another tool damaged raises ``DamagedRowsError`` naming the
    ref or reflog entry, and SQLite's own errors on a damaged file a ``RepositoryError``."""

    def __init__(self, file: SqliteFile, clock: Callable[[], float] = time.time) -> None:
        self.file = file
        self._clock = clock
        with file.transaction() as c:
            for statement in _SCHEMA:
                c.execute(statement)

    def get(self, name: str) -> ObjectId | None:
        check_full_ref_name(name)
        with self.file.reading(f"ref {name!r}"):
            row = self.file.conn.execute("SELECT target FROM refs WHERE name = ?", (name,)).fetchone()
        return None if row is None else self._target(name, row[0])

    def _target(self, name: str, raw: object) -> ObjectId:
        if not (type(raw) is bytes and len(raw) == ID_SIZE):
            raise self.file.damaged({f"ref {name!r}": f"its target {wrong(raw)}, not a 32-byte id"})
        return ObjectId(raw)

    def list(self, prefix: str = "refs/") -> dict[str, ObjectId]:
        out: dict[str, ObjectId] = {}
        damaged: dict[str, str] = {}
        # Names sort by code point in SQLite (UTF-8, binary) as in Python, so the names
        # with the prefix are one run starting at the prefix. A row whose name is not
        # text has no name to match: only the listing of every ref (fsck, gc) sees it.
        query: tuple[str, tuple[str, ...]] = "SELECT rowid, name, target FROM refs WHERE name >= ? ORDER BY name", (prefix,)
        if not prefix:
            query = "SELECT rowid, name, target FROM refs ORDER BY name", ()
        with self.file.reading("table 'refs'"):
            for rowid, name, target in self.file.conn.execute(*query):
                if type(name) is str and not name.startswith(prefix):
                    break
                if type(name) is not str and prefix:
                    continue
                problem = _name_problem(name)
                if problem is not None:
                    damaged[f"table 'refs' row {rowid}"] = problem
                elif not _is_id(target):
                    damaged[f"ref {name!r}"] = f"its target {wrong(target)}, not a 32-byte id"
                else:
                    out[name] = ObjectId(target)
        if damaged:
            raise self.file.damaged(damaged, out)
        return out

    def compare_and_swap(self, name: str, expected: ObjectId | None, new: ObjectId | None, reason: str) -> bool:
        check_full_ref_name(name)
        expected = ref_target(expected, "expected")
        new = ref_target(new, "new")
        with self.file.transaction() as c:
            row = c.execute("SELECT target FROM refs WHERE name = ?", (name,)).fetchone()
            if (None if row is None else self._target(name, row[0])) != expected:
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
        with self.file.reading(f"the reflog of {name!r}"):
            rows = self.file.conn.execute(
                "SELECT old, new, time, reason FROM reflog WHERE ref = ? ORDER BY seq DESC LIMIT ?",
                # SQLite's LIMIT is a signed 64-bit integer; no reflog holds more entries,
                # so a larger limit (main@{99999999999999999999}) asks for all of them.
                (name, -1 if limit is None or limit > _SQLITE_MAX_INT else limit),
            ).fetchall()
        entries: builtins.list[ReflogEntry] = []
        damaged: dict[str, str] = {}
        for n, (old, new, when, reason) in enumerate(rows):
            problem = _entry_problem(old, new, when, reason)
            if problem is not None:
                damaged[f"{name}@{{{n}}}"] = problem
            else:
                entries.append(ReflogEntry(name, None if old is None else ObjectId(old),
                                           None if new is None else ObjectId(new), float(when), reason))
        if damaged:
            raise self.file.damaged(damaged, entries)
        return entries

    def reflog_names(self) -> builtins.list[str]:
        with self.file.reading("table 'reflog'"):
            rows = self.file.conn.execute("SELECT DISTINCT ref FROM reflog ORDER BY ref").fetchall()
        names = [name for name, in rows if _name_problem(name) is None]
        damaged = {f"reflog of {name!r}": problem for name, in rows if (problem := _name_problem(name)) is not None}
        if damaged:
            raise self.file.damaged(damaged, names)
        return names

    def expire_reflog(self, before: float, name: str | None = None) -> int:
        if name is not None:
            check_full_ref_name(name)
        with self.file.transaction() as c:
            if name is None:
                return c.execute("DELETE FROM reflog WHERE time < ?", (before,)).rowcount
            return c.execute("DELETE FROM reflog WHERE ref = ? AND time < ?", (name, before)).rowcount

    def get_symbolic(self, name: str) -> str | None:
        check_full_ref_name(name)
        with self.file.reading(f"symbolic ref {name!r}"):
            row = self.file.conn.execute("SELECT target FROM symrefs WHERE name = ?", (name,)).fetchone()
        if row is None:
            return None
        target = row[0]
        problem = _name_problem(target)
        if problem is not None or type(target) is not str:
            raise self.file.damaged({f"symbolic ref {name!r}": f"its target: {problem or 'not text'}"})
        return target

    def set_symbolic(self, name: str, target: str) -> None:
        check_symbolic_ref(name, target)
        with self.file.transaction() as c:
            row = c.execute("SELECT target FROM refs WHERE name = ?", (name,)).fetchone()
            if row is not None:
                c.execute("DELETE FROM refs WHERE name = ?", (name,))
                self._log(name, self._target(name, row[0]), None, f"symbolic ref to {target}")
            c.execute("INSERT INTO symrefs (name, target) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET target = excluded.target",
                      (name, target))

    def delete_symbolic(self, name: str) -> bool:
        check_full_ref_name(name)
        with self.file.transaction() as c:
            return c.execute("DELETE FROM symrefs WHERE name = ?", (name,)).rowcount > 0

    def close(self) -> None:
        pass
