"""The commit index of the embedded default: table ``commits`` of a ``SqliteFile``, every
commit's fields in columns (``snapvc.store.commit_index`` says what an index is for), and
the ages of commits no ref reaches yet in table ``commit_mtimes`` (``touch``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from snapvc.errors import CorruptObjectError
from snapvc.ids import ID_SIZE, ObjectId
from snapvc.objects import Commit
from snapvc.backends.sqlite.file import SqliteFile, batched, is_number, wrong
from snapvc.store.commit_index import CommitIndexCapabilities

__all__ = ["SqliteCommitIndex"]

_trusted_id = bytes.__new__


def _column_problem(column: str, value: object) -> str | None:
    """What is wrong with ``value`` in ``column`` of table ``commits`` (None: nothing)."""
    if column in ("id", "tree"):
        ok, expected = type(value) is bytes and len(value) == ID_SIZE, "a 32-byte id"
    elif column == "parents":
        ok, expected = type(value) is bytes and len(value) % ID_SIZE == 0, "32-byte ids one after another"
    elif column in ("time_us", "generation"):
        ok, expected = type(value) is int, "an integer"
    else:
        ok, expected = type(value) is str, "text"
    return None if ok else f"{column} {wrong(value)}, not {expected}"


class SqliteCommitIndex:
    """Table ``commits`` of a ``SqliteFile``; parents are stored as concatenated ids.
    Ages are recorded apart (``touch``)."""

    capabilities = CommitIndexCapabilities(touch=True)

    def __init__(self, file: SqliteFile, clock: Callable[[], float] = time.time) -> None:
        self.file = file
        self._clock = clock
        with file.transaction() as c:
            c.execute(
                "CREATE TABLE IF NOT EXISTS commits (id BLOB PRIMARY KEY, tree BLOB NOT NULL, parents BLOB NOT NULL, "
                "author TEXT NOT NULL, time_us INTEGER NOT NULL, message TEXT NOT NULL, metadata TEXT NOT NULL, "
                "generation INTEGER NOT NULL)"
            )

    # Ages apart from the commits: snapvc versions that know no ages keep writing
    # ``commits`` as before (their commits count as old). Only commits without a ref have
    # one, and gc drops those past the grace period; the table is made on first use, so a
    # repository that never needs it spends no page on it.
    _AGES = "CREATE TABLE IF NOT EXISTS commit_mtimes (id BLOB PRIMARY KEY, mtime INTEGER NOT NULL) WITHOUT ROWID"

    def _has_ages(self) -> bool:
        with self.file.reading("the list of tables"):
            return self.file.conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'commit_mtimes'").fetchone() is not None

    def add(self, commit: Commit) -> None:
        # Only a row with this id is skipped, never one that breaks a constraint (as
        # ``OR IGNORE`` would: a message of None once vanished so, under a moved branch).
        # The row there holds the same fields, whose hash the id is; a damaged one is
        # found when read (``Repository.get_commit`` checks the hash).
        with self.file.transaction() as c:
            c.execute(
                "INSERT INTO commits VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                (commit.id, commit.tree, b"".join(commit.parents), commit.author, commit.timestamp_us,
                 commit.message, commit.metadata_json.decode(), commit.generation),
            )

    def touch(self, ids: Iterable[ObjectId]) -> None:
        now = int(self._clock())
        with self.file.transaction() as c:
            c.execute(self._AGES)
            c.executemany("INSERT INTO commit_mtimes (id, mtime) VALUES (?, ?) "
                          "ON CONFLICT (id) DO UPDATE SET mtime = excluded.mtime", [(oid, now) for oid in ids])

    def mtimes(self) -> dict[ObjectId, float]:
        if not self._has_ages():
            return {}
        with self.file.reading("table 'commit_mtimes'"):
            rows = self.file.conn.execute("SELECT id, mtime FROM commit_mtimes").fetchall()
        out: dict[ObjectId, float] = {}
        damaged: dict[str, str] = {}
        for raw, mtime in rows:
            if not (type(raw) is bytes and len(raw) == ID_SIZE):
                damaged[f"table 'commit_mtimes' id {raw!r}"] = f"its id {wrong(raw)}, not 32 bytes"
            elif not is_number(mtime):  # an age gc cannot compare: it must not guess one
                damaged[f"commit {raw.hex()}"] = f"its age (table 'commit_mtimes') {wrong(mtime)}, not a number"
            else:
                out[ObjectId(raw)] = float(mtime)
        if damaged:
            raise self.file.damaged(damaged, out)
        return out

    def forget_mtimes(self, before: float) -> int:
        if not self._has_ages():
            return 0
        with self.file.transaction() as c:
            return c.execute("DELETE FROM commit_mtimes WHERE mtime < ?", (before,)).rowcount

    def delete_many(self, ids: Iterable[ObjectId]) -> int:
        removed = 0
        ages = self._has_ages()
        with self.file.transaction() as c:
            for batch in batched(ids):
                marks = ",".join("?" * len(batch))
                removed += c.execute(f"DELETE FROM commits WHERE id IN ({marks})", batch).rowcount
                if ages:
                    c.execute(f"DELETE FROM commit_mtimes WHERE id IN ({marks})", batch)
        return removed

    _COLUMNS = "id, tree, parents, author, time_us, message, metadata, generation"

    def _commit(self, row: tuple[Any, ...]) -> Commit:
        oid, tree, parents, author, ts, message, meta, gen = row
        # Every column as this index writes it (a few type checks: a log walk reads
        # hundreds of rows); a row edited by another tool is named, not half-read.
        if not (type(oid) is bytes and len(oid) == ID_SIZE and type(tree) is bytes and len(tree) == ID_SIZE
                and type(parents) is bytes and len(parents) % ID_SIZE == 0 and type(author) is str
                and type(ts) is int and type(message) is str and type(meta) is str and type(gen) is int):
            raise self._damaged(row)
        # Ids of rows this index wrote are 32 bytes: skip ObjectId's length check (a log
        # walk builds hundreds of commits).
        n = len(parents)
        if n == ID_SIZE:
            parent_ids: tuple[ObjectId, ...] = (_trusted_id(ObjectId, parents),)
        else:
            parent_ids = tuple([_trusted_id(ObjectId, parents[i : i + ID_SIZE]) for i in range(0, n, ID_SIZE)])
        return Commit(_trusted_id(ObjectId, oid), _trusted_id(ObjectId, tree), parent_ids, author, ts, message, gen,
                      meta.encode())

    def _damaged(self, row: tuple[Any, ...]) -> CorruptObjectError:
        """The error for a commit's row whose columns are not what this index writes."""
        problems = [p for column, value in zip(self._COLUMNS.split(", "), row, strict=True)
                    if (p := _column_problem(column, value)) is not None]
        oid = row[0].hex() if type(row[0]) is bytes else repr(row[0])
        return CorruptObjectError(oid, f"its row in the commit index of {str(self.file.path)!r} is damaged: "
                                       f"{'; '.join(problems)}")

    def get(self, oid: ObjectId) -> Commit | None:
        with self.file.reading(f"commit {oid} in the commit index"):
            row = self.file.conn.execute(f"SELECT {self._COLUMNS} FROM commits WHERE id = ?", (oid,)).fetchone()
        return None if row is None else self._commit(row)

    def first_parent_chain(self, oid: ObjectId, limit: int) -> list[Commit]:
        # One recursive query walks the first parents (the first 32 bytes of ``parents``).
        with self.file.reading(f"the history of commit {oid} in the commit index"):
            rows = self.file.conn.execute(
                f"WITH RECURSIVE chain(id, depth) AS (SELECT ?, 0 UNION ALL "
                f"SELECT substr(c.parents, 1, 32), chain.depth + 1 FROM commits c JOIN chain ON c.id = chain.id "
                f"WHERE length(c.parents) >= 32 AND chain.depth + 1 < ?) "
                f"SELECT {', '.join('c.' + col.strip() for col in self._COLUMNS.split(','))} "
                f"FROM chain JOIN commits c ON c.id = chain.id ORDER BY chain.depth",
                (oid, limit),
            ).fetchall()
        return [self._commit(row) for row in rows]

    def count(self) -> int:
        with self.file.reading("the commit index"):
            count: int = self.file.conn.execute("SELECT count(*) FROM commits").fetchone()[0]
        return count

    def ids(self) -> list[ObjectId]:
        with self.file.reading("the ids of the commit index"):
            rows = self.file.conn.execute("SELECT rowid, id FROM commits").fetchall()
        return self.file.read_ids("commits", rows)

    def ids_with_prefix(self, hex_prefix: str, limit: int = 2) -> list[ObjectId]:
        return self.file.ids_with_prefix("commits", hex_prefix, limit)

