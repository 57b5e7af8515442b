"""Refs, symbolic refs and the reflog in tables of a ``SqliteFile``.

Every write runs in one ``BEGIN IMMEDIATE`` transaction, which takes SQLite's write
lock before reading: the compare and the swap of ``compare_and_swap`` see and change
the same state even when several processes share the file, and the reflog entry
commits with the move or not at all.

The reflog has two layouts, by the file's format version. Formats 1 and 2: ``reflog
(seq, ref, old, new, time, reason)`` with the ref's name and both ids in every row.
Format 3 (``_LEAN_SCHEMA``), where most entries are commits made on a branch:

- ``ref``: a number, named in table ``ref_names``;
- ``old``: NULL when it is the ``new`` of the ref's entry before (or, for its first
  entry, absent); 0 when absent; else the 32-byte id;
- ``new``: NULL when absent; the commit's row number in table ``commits``
  (``snapvc.backends.sqlite.commit_index``) when the commit index holds it; else the id;
- ``reason``: NULL when it is exactly ``commit_reason`` of that commit's message.

Reads put every value back; expiring entries first writes out in full an ``old`` left
out whose entry before goes, and the commit index writes out ``new`` and ``reason`` of the
entries linking to a commit it deletes. ``upgrade_to_lean`` moves a file's reflog from
the first layout to the second.
"""

from __future__ import annotations

import builtins
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from snapvc.errors import InvalidRefNameError
from snapvc.ids import ID_SIZE, ObjectId
from snapvc.refs.base import ReflogEntry, check_symbolic_ref, ref_target
from snapvc.refs.names import check_full_ref_name
from snapvc.backends.sqlite.commit_index import LEAN_SCHEMA as LEAN_COMMITS_SCHEMA
from snapvc.backends.sqlite.commit_index import commit_reason
from snapvc.backends.sqlite.commit_index import upgrade_to_lean as upgrade_commits_to_lean
from snapvc.backends.sqlite.file import PACKS_FORMAT, SqliteFile, is_number, wrong

__all__ = ["SqliteRefStore", "upgrade_to_lean"]

_SQLITE_MAX_INT = (1 << 63) - 1

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS refs (name TEXT PRIMARY KEY, target BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS symrefs (name TEXT PRIMARY KEY, target TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS reflog (seq INTEGER PRIMARY KEY AUTOINCREMENT, ref TEXT NOT NULL, "
    "old BLOB, new BLOB, time REAL NOT NULL, reason TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS reflog_ref_seq ON reflog (ref, seq)",
)
# Keyed by (ref, seq), a ref's entries are one run of the table: no index beside it.
# ``seq`` counts up per ref. ``ref_names`` is read by name (a few rows: no index by number).
_LEAN_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS refs (name TEXT PRIMARY KEY, target BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS symrefs (name TEXT PRIMARY KEY, target TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS ref_names (name TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS reflog (ref INTEGER NOT NULL, seq INTEGER NOT NULL, old BLOB, new, time REAL NOT NULL, "
    "reason TEXT, PRIMARY KEY (ref, seq)) WITHOUT ROWID",
)
# ``old`` of an entry whose ref did not exist before it (and which is not left out).
_ABSENT = 0


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
        self._lean = file.format >= PACKS_FORMAT
        # The lean reflog links to rows of the commit index: its table is there too.
        file.make_tables((*_LEAN_SCHEMA, *LEAN_COMMITS_SCHEMA) if self._lean else _SCHEMA)

    def get(self, name: str) -> ObjectId | None:
        check_full_ref_name(name)
        with self.file.reading(f"ref {name!r}"):
            row = self.file.conn.execute("SELECT target FROM refs WHERE name = ?", (name,)).fetchone()
        return None if row is None else self._target(name, row[0])

    def _target(self, name: str, raw: object) -> ObjectId:
        if not (type(raw) is bytes and len(raw) == ID_SIZE):
            raise self.file.damaged({f"ref {name!r}": f"its target {wrong(raw)}, not a 32-byte id"})
        return ObjectId(raw)

    def list(self, prefix: str = "refs/", *, after: str | None = None,
             limit: int | None = None) -> dict[str, ObjectId]:
        out: dict[str, ObjectId] = {}
        damaged: dict[str, str] = {}
        # Names sort by code point in SQLite (UTF-8, binary) as in Python, so the names
        # with the prefix are one run starting at the prefix (or after ``after``, when
        # that sorts later). A row whose name is not text has no name to match: only the
        # listing of every ref (fsck, gc) sees it.
        query: tuple[str, tuple[Any, ...]] = "SELECT rowid, name, target FROM refs WHERE name >= ? ORDER BY name", (prefix,)
        if after is not None and after >= prefix:
            query = "SELECT rowid, name, target FROM refs WHERE name > ? ORDER BY name", (after,)
        elif not prefix:
            query = "SELECT rowid, name, target FROM refs ORDER BY name", ()
        if limit is not None:
            # Rows beyond the page are never read; a damaged row in the page still counts.
            query = query[0] + " LIMIT ?", (*query[1], limit)
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
            if expected is not None and new is not None and expected != new:
                # The usual move, compared and made in one statement; when it changed no
                # row, the read below says why (another target, none, or a damaged one).
                if c.execute("UPDATE refs SET target = ? WHERE name = ? AND target = ?",
                             (new, name, expected)).rowcount == 1:
                    self._log(name, expected, new, reason)
                    return True
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
        if self._lean:
            _add_lean_entry(self.file.conn, _ref_number(self.file.conn, name), None, old, new, float(self._clock()),
                            reason)
            return
        self.file.conn.execute(
            "INSERT INTO reflog (ref, old, new, time, reason) VALUES (?, ?, ?, ?, ?)",
            (name, old, new, float(self._clock()), reason),
        )

    def reflog(self, name: str, limit: int | None = None) -> builtins.list[ReflogEntry]:
        check_full_ref_name(name)
        if limit is not None and limit <= 0:
            return []
        # SQLite's LIMIT is a signed 64-bit integer; no reflog holds more entries, so a
        # larger limit (main@{99999999999999999999}) asks for all of them.
        wanted = -1 if limit is None or limit >= _SQLITE_MAX_INT else limit
        with self.file.reading(f"the reflog of {name!r}"):
            if self._lean:
                rows = self._lean_rows(name, wanted)
            else:
                rows = self.file.conn.execute(
                    "SELECT old, new, time, reason FROM reflog WHERE ref = ? ORDER BY seq DESC LIMIT ?", (name, wanted),
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

    def _lean_rows(self, name: str, limit: int) -> builtins.list[tuple[Any, Any, Any, Any]]:
        """The newest ``limit`` (-1: all) entries of ``name`` in the lean layout as
        ``(old, new, time, reason)``, every value put back as it was logged (a value
        that cannot be is left as found, for ``_entry_problem`` to name)."""
        conn = self.file.conn
        found = conn.execute("SELECT n FROM ref_names WHERE name = ?", (name,)).fetchone()
        if found is None:
            return []
        # One entry more than asked: its ``new`` is the ``old`` of the oldest one asked.
        rows = conn.execute(
            "SELECT r.old, r.new, c.id, c.message, r.time, r.reason FROM reflog r "
            "LEFT JOIN commits c ON typeof(r.new) = 'integer' AND c.n = r.new "
            "WHERE r.ref = ? ORDER BY r.seq DESC LIMIT ?", (found[0], limit + 1 if limit >= 0 else -1),
        ).fetchall()
        news = [_resolved_new(new, oid) for _, new, oid, _, _, _ in rows]
        out: builtins.list[tuple[Any, Any, Any, Any]] = []
        for i, (old, new, _, message, when, reason) in enumerate(rows[:limit] if limit >= 0 else rows):
            if old is None:  # the new of the entry before, if any
                old = news[i + 1] if i + 1 < len(rows) else None
            elif old == _ABSENT and type(old) is int:
                old = None
            if reason is None and type(new) is int and type(message) is str:
                reason = commit_reason(message)
            out.append((old, news[i], when, reason))
        return out

    def reflog_names(self) -> builtins.list[str]:
        with self.file.reading("table 'reflog'"):
            if self._lean:
                rows = self.file.conn.execute(
                    "SELECT name FROM ref_names WHERE n IN (SELECT DISTINCT ref FROM reflog) ORDER BY name").fetchall()
                unnamed = self.file.conn.execute(
                    "SELECT DISTINCT ref FROM reflog WHERE ref NOT IN (SELECT n FROM ref_names)").fetchall()
            else:
                rows = self.file.conn.execute("SELECT DISTINCT ref FROM reflog ORDER BY ref").fetchall()
                unnamed = []
        names = [name for name, in rows if _name_problem(name) is None]
        damaged = {f"reflog of {name!r}": problem for name, in rows if (problem := _name_problem(name)) is not None}
        for ref, in unnamed:
            damaged[f"table 'reflog' ref {ref!r}"] = "its entries name a ref that table 'ref_names' does not hold"
        if damaged:
            raise self.file.damaged(damaged, names)
        return names

    def expire_reflog(self, before: float, name: str | None = None) -> int:
        if name is not None:
            check_full_ref_name(name)
        if self._lean:
            with self.file.transaction() as c:
                return _expire_lean(c, before, name)
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


# -- the lean layout (format 3) ---------------------------------------------------------------


def _ref_number(c: sqlite3.Connection, name: object) -> int:
    """The number of ref ``name`` in table ``ref_names``, given one if it has none yet."""
    row = c.execute("SELECT n FROM ref_names WHERE name = ?", (name,)).fetchone()
    if row is not None:
        number: int = row[0]
        return number
    number = c.execute("SELECT coalesce(max(n), 0) + 1 FROM ref_names").fetchone()[0]
    c.execute("INSERT INTO ref_names (name, n) VALUES (?, ?)", (name, number))
    return number


def _resolved_new(new: object, linked_id: object) -> object:
    """An entry's ``new`` as logged: the id of the commit row it links to (None if that row
    is gone: the row number is kept, and named as damage), absent, or as stored."""
    if type(new) is int:
        return linked_id if linked_id is not None else new
    return new


def _add_lean_entry(c: sqlite3.Connection, ref: int, seq: int | None, old: object, new: object, when: object,
                    reason: object) -> None:
    """Log one entry of ref number ``ref`` in the lean layout (``seq``: the next of the
    ref, unless given). The values may be damaged ones being copied (``upgrade_to_lean``):
    they are stored as they are."""
    # The ref's last entry, and the commit row of ``new`` (if it is an id the index holds), in one read.
    new_id = new if isinstance(new, bytes) and len(new) == ID_SIZE else None
    found = c.execute(
        "SELECT l.seq, l.new, l.id, k.n, k.message FROM (SELECT 1) "
        "LEFT JOIN (SELECT r.seq, r.new, c.id FROM reflog r LEFT JOIN commits c ON typeof(r.new) = 'integer' "
        "AND c.n = r.new WHERE r.ref = ? ORDER BY r.seq DESC LIMIT 1) l "
        "LEFT JOIN (SELECT n, message FROM commits WHERE id = ?) k", (ref, new_id)).fetchone()
    last = None if found[0] is None else found[:3]
    before = None if last is None else _resolved_new(last[1], last[2])
    if seq is None:
        seq = 1 if last is None else int(last[0]) + 1
    stored_old: object
    if (old is None and before is None) or (isinstance(old, bytes) and type(before) is bytes and old == before):
        stored_old = None
    else:
        stored_old = _ABSENT if old is None else old
    stored_new, stored_reason = new, reason
    if new_id is not None and found[3] is not None:
        stored_new = found[3]
        if type(found[4]) is str and reason == commit_reason(found[4]):
            stored_reason = None
    c.execute("INSERT INTO reflog (ref, seq, old, new, time, reason) VALUES (?, ?, ?, ?, ?, ?)",
              (ref, seq, stored_old, stored_new, when, stored_reason))


def _expire_lean(c: sqlite3.Connection, before: float, name: str | None) -> int:
    """Delete the entries older than ``before`` (of ref ``name``, or of all), first writing
    out in full the ``old`` left out of each entry kept whose entry before goes."""
    if name is None:
        rows = c.execute("SELECT r.ref, r.seq, r.old, r.new, c.id, r.time < ? FROM reflog r LEFT JOIN commits c "
                         "ON typeof(r.new) = 'integer' AND c.n = r.new ORDER BY r.ref, r.seq", (before,)).fetchall()
    else:
        found = c.execute("SELECT n FROM ref_names WHERE name = ?", (name,)).fetchone()
        if found is None:
            return 0
        rows = c.execute("SELECT r.ref, r.seq, r.old, r.new, c.id, r.time < ? FROM reflog r LEFT JOIN commits c "
                         "ON typeof(r.new) = 'integer' AND c.n = r.new WHERE r.ref = ? ORDER BY r.seq",
                         (before, found[0])).fetchall()
    updates = []
    gone = 0
    for i, (ref, seq, old, _, _, doomed) in enumerate(rows):
        if doomed:
            gone += 1
        elif old is None and i > 0 and rows[i - 1][0] == ref and rows[i - 1][5]:
            previous = _resolved_new(rows[i - 1][3], rows[i - 1][4])
            updates.append((_ABSENT if previous is None else previous, ref, seq))
    c.executemany("UPDATE reflog SET old = ? WHERE ref = ? AND seq = ?", updates)
    if name is None:
        c.execute("DELETE FROM reflog WHERE time < ?", (before,))
    else:
        c.execute("DELETE FROM reflog WHERE ref = ? AND time < ?", (rows[0][0] if rows else -1, before))
    return gone


def upgrade_to_lean(file: SqliteFile) -> None:
    """Move the reflog of ``file`` (a format 1 or 2 file) to the format 3 layout, inside
    the caller's transaction: the commit index first (``commit_index.upgrade_to_lean``:
    entries link to its rows), then every entry copied in order (a damaged one as it is,
    to be named when read), then the old table dropped. Tables ``refs`` and ``symrefs``
    stay as they are."""
    with file.transaction() as c:
        upgrade_commits_to_lean(file)
        has_table = c.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'reflog'").fetchone()
        if has_table and c.execute("SELECT 1 FROM sqlite_master WHERE name = 'ref_names'").fetchone():
            return  # lean already
        if has_table:
            c.execute("DROP INDEX IF EXISTS reflog_ref_seq")
            c.execute("ALTER TABLE reflog RENAME TO reflog_before_lean")
        for statement in _LEAN_SCHEMA:
            c.execute(statement)
        if not has_table:
            return
        numbers: dict[object, int] = {}
        for seq, ref, old, new, when, reason in c.execute(
                "SELECT seq, ref, old, new, time, reason FROM reflog_before_lean ORDER BY seq").fetchall():
            key = (type(ref), ref)  # a damaged name that is not text stays apart from text
            if key not in numbers:
                numbers[key] = _ref_number(c, ref)
            _add_lean_entry(c, numbers[key], seq, old, new, when, reason)
        c.execute("DROP TABLE reflog_before_lean")
