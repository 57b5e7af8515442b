"""The commit index of the embedded default: table ``commits`` of a ``SqliteFile``, every
commit's fields in columns (``snapvc.store.commit_index`` says what an index is for), and
the ages of commits no ref reaches yet in table ``commit_mtimes`` (``touch``).

Two layouts, by the file's format version:

- formats 1 and 2: ``commits (id BLOB PRIMARY KEY, tree, parents, author, time_us,
  message, metadata, generation)``, parents as their ids one after another, metadata as
  its JSON text;
- format 3 (``LEAN_SCHEMA``): every commit has a row number ``n``; its first parent is
  the parent's row number when the parent is in the index (else its 32-byte id), the
  other parents (a merge) their ids; the metadata is stored as msgpack when that gives
  back exactly the same JSON text (else as the text). The reflog links to these rows
  (``snapvc.backends.sqlite.refs``): an entry's new commit is its row number, and a
  reason that is exactly ``commit_reason(message)`` of that commit is left out. So before
  ``delete_many`` deletes rows, it writes the ids (and reasons) back in full into the
  children and the reflog entries that link to them: no link ever points at a deleted
  row, and row numbers are never reused (``AUTOINCREMENT``).

``upgrade_to_lean`` moves a file's table from the first layout to the second.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable
from typing import Any

import msgpack
import orjson

from snapvc.errors import CorruptObjectError
from snapvc.ids import ID_SIZE, ObjectId
from snapvc.objects import Commit
from snapvc.backends.sqlite.file import PACKS_FORMAT, SqliteFile, batched, is_number, wrong
from snapvc.store.commit_index import CommitIndexCapabilities

__all__ = ["SqliteCommitIndex", "LEAN_SCHEMA", "commit_reason", "is_lean", "upgrade_to_lean"]

_trusted_id = bytes.__new__

_SCHEMA = ("CREATE TABLE IF NOT EXISTS commits (id BLOB PRIMARY KEY, tree BLOB NOT NULL, parents BLOB NOT NULL, "
           "author TEXT NOT NULL, time_us INTEGER NOT NULL, message TEXT NOT NULL, metadata TEXT NOT NULL, "
           "generation INTEGER NOT NULL)",)

# ``parent``: NULL for a root commit, the first parent's row number ``n`` when the index
# held it when this commit was added, else its 32-byte id. ``more_parents``: the ids of a
# merge's other parents, one after another (NULL: none). ``metadata``: msgpack (a BLOB)
# or the JSON text, see ``_lean_metadata``. The id is kept in the row and in ``commits_id``
# (the row's number is how the parent links and the reflog name it: measured, the integer
# links save more than the index costs).
LEAN_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS commits (n INTEGER PRIMARY KEY AUTOINCREMENT, id BLOB NOT NULL, tree BLOB NOT NULL, "
    "parent, more_parents BLOB, author TEXT NOT NULL, time_us INTEGER NOT NULL, message TEXT NOT NULL, "
    "metadata NOT NULL, generation INTEGER NOT NULL)",
    "CREATE UNIQUE INDEX IF NOT EXISTS commits_id ON commits (id)",
)


def commit_reason(message: str) -> str:
    """The reflog reason of a commit made on a ref (``Repository.commit``): the reflog
    leaves out a reason that is exactly this for its new commit, and rebuilds it."""
    return f"commit: {message.splitlines()[0] if message else '(no message)'}"


def is_lean(conn: sqlite3.Connection) -> bool:
    """Whether table ``commits`` of this connection's file has the format 3 layout."""
    return any(row[1] == "n" for row in conn.execute("PRAGMA table_info(commits)"))


def _lean_metadata(text: str) -> str | bytes:
    """The metadata's column value: its msgpack when that decodes back to exactly ``text``
    (``{"step":12}``: 8 bytes instead of 12), else ``text`` as it is."""
    try:
        packed: bytes = msgpack.packb(orjson.loads(text), use_bin_type=True)
    except (orjson.JSONDecodeError, TypeError, ValueError, OverflowError):
        return text
    return packed if _unpacked_metadata(packed) == text.encode() else text


def _unpacked_metadata(packed: bytes) -> bytes | None:
    """The JSON text of metadata stored as msgpack; None if it does not decode."""
    try:
        return orjson.dumps(msgpack.unpackb(packed, raw=False), option=orjson.OPT_SORT_KEYS)
    except (ValueError, TypeError, orjson.JSONEncodeError, msgpack.UnpackException):
        return None


def _column_problem(column: str, value: object) -> str | None:
    """What is wrong with ``value`` in ``column`` of table ``commits`` (None: nothing)."""
    if column in ("id", "tree"):
        ok, expected = type(value) is bytes and len(value) == ID_SIZE, "a 32-byte id"
    elif column in ("parents", "more_parents"):
        ok, expected = ((column == "more_parents" and value is None)
                        or (type(value) is bytes and len(value) % ID_SIZE == 0)), "32-byte ids one after another"
    elif column in ("time_us", "generation"):
        ok, expected = type(value) is int, "an integer"
    else:
        ok, expected = type(value) is str, "text"
    return None if ok else f"{column} {wrong(value)}, not {expected}"


def _commit(oid: bytes, tree: bytes, parents: bytes, author: str, ts: int, message: str, gen: int,
            meta: bytes) -> Commit:
    """The commit of a row whose columns were checked. Ids of rows this index wrote are
    32 bytes: ObjectId's length check is skipped (a log walk builds hundreds of commits)."""
    n = len(parents)
    if n == ID_SIZE:
        parent_ids: tuple[ObjectId, ...] = (_trusted_id(ObjectId, parents),)
    else:
        parent_ids = tuple([_trusted_id(ObjectId, parents[i : i + ID_SIZE]) for i in range(0, n, ID_SIZE)])
    return Commit(_trusted_id(ObjectId, oid), _trusted_id(ObjectId, tree), parent_ids, author, ts, message, gen, meta)


class SqliteCommitIndex:
    """Table ``commits`` of a ``SqliteFile`` (in the layout of the file's format: see the
    module's docstring). Ages are recorded apart (``touch``)."""

    capabilities = CommitIndexCapabilities(touch=True)

    def __init__(self, file: SqliteFile, clock: Callable[[], float] = time.time) -> None:
        self.file = file
        self._clock = clock
        self._lean = file.format >= PACKS_FORMAT
        file.make_tables(LEAN_SCHEMA if self._lean else _SCHEMA)

    # Ages apart from the commits: snapvc versions that know no ages keep writing
    # ``commits`` as before (their commits count as old). Only commits without a ref have
    # one, and gc drops those past the grace period; the table is made on first use, so a
    # repository that never needs it spends no page on it.
    _AGES = "CREATE TABLE IF NOT EXISTS commit_mtimes (id BLOB PRIMARY KEY, mtime INTEGER NOT NULL) WITHOUT ROWID"

    def _has_table(self, name: str) -> bool:
        with self.file.reading("the list of tables"):
            return self.file.conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None

    def _has_ages(self) -> bool:
        return self._has_table("commit_mtimes")

    def add(self, commit: Commit) -> None:
        # Only a row with this id is skipped, never one that breaks a constraint (as
        # ``OR IGNORE`` would: a message of None once vanished so, under a moved branch).
        # The row there holds the same fields, whose hash the id is; a damaged one is
        # found when read (``Repository.get_commit`` checks the hash).
        with self.file.transaction() as c:
            if not self._lean:
                c.execute(
                    "INSERT INTO commits VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                    (commit.id, commit.tree, b"".join(commit.parents), commit.author, commit.timestamp_us,
                     commit.message, commit.metadata_json.decode(), commit.generation),
                )
                return
            _insert_lean(c, commit.id, commit.tree, commit.parents, commit.author, commit.timestamp_us,
                         commit.message, commit.metadata_json.decode(), commit.generation)

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
        reflog = self._lean and self._has_table("reflog")
        with self.file.transaction() as c:
            doomed: dict[int, tuple[bytes, object]] = {}
            for batch in batched(ids):
                marks = ",".join("?" * len(batch))
                if self._lean:
                    rows = c.execute(f"SELECT n, id, message FROM commits WHERE id IN ({marks})", batch).fetchall()
                    doomed.update((n, (oid, message)) for n, oid, message in rows)
                    removed += len(rows)
                else:
                    removed += c.execute(f"DELETE FROM commits WHERE id IN ({marks})", batch).rowcount
                if ages:
                    c.execute(f"DELETE FROM commit_mtimes WHERE id IN ({marks})", batch)
            if doomed:
                self._unlink(c, doomed, reflog)
        return removed

    def _unlink(self, c: sqlite3.Connection, doomed: dict[int, tuple[bytes, object]], reflog: bool) -> None:
        """Delete the rows ``doomed`` (row number -> id, message) of the lean table, after
        writing their ids (and the reasons left out) into what links to them: a child's
        ``parent``, a reflog entry's ``new``. One pass over each table, not one per commit."""
        rows = orjson.dumps(list(doomed)).decode()
        c.execute("UPDATE commits SET parent = (SELECT d.id FROM commits d WHERE d.n = commits.parent) "
                  "WHERE typeof(parent) = 'integer' AND parent IN (SELECT value FROM json_each(?))", (rows,))
        if reflog:
            entries = c.execute("SELECT ref, seq, new, reason FROM reflog WHERE typeof(new) = 'integer' "
                                "AND new IN (SELECT value FROM json_each(?))", (rows,)).fetchall()
            updates = []
            for ref, seq, new, reason in entries:
                oid, message = doomed[new]
                if reason is None and type(message) is str:
                    reason = commit_reason(message)
                updates.append((oid, reason, ref, seq))
            c.executemany("UPDATE reflog SET new = ?, reason = ? WHERE ref = ? AND seq = ?", updates)
        c.execute("DELETE FROM commits WHERE n IN (SELECT value FROM json_each(?))", (rows,))

    _COLUMNS = "id, tree, parents, author, time_us, message, metadata, generation"
    # A lean row as read: its parent's id joined (``p``: the parent's row, if linked).
    _LEAN_COLUMNS = ("c.id, c.tree, c.parent, p.id, c.more_parents, c.author, c.time_us, c.message, c.metadata, "
                     "c.generation")
    _LEAN_FROM = "commits c LEFT JOIN commits p ON p.n = c.parent"

    def _commit(self, row: tuple[Any, ...]) -> Commit:
        oid, tree, parents, author, ts, message, meta, gen = row
        # Every column as this index writes it (a few type checks: a log walk reads
        # hundreds of rows); a row edited by another tool is named, not half-read.
        if not (type(oid) is bytes and len(oid) == ID_SIZE and type(tree) is bytes and len(tree) == ID_SIZE
                and type(parents) is bytes and len(parents) % ID_SIZE == 0 and type(author) is str
                and type(ts) is int and type(message) is str and type(meta) is str and type(gen) is int):
            raise self._damaged(row)
        return _commit(oid, tree, parents, author, ts, message, gen, meta.encode())

    def _lean_commit(self, row: tuple[Any, ...]) -> Commit:
        oid, tree, parent, parent_id, more, author, ts, message, meta, gen = row
        # A link to the parent's row gives its id (joined); a link to no row is damage.
        first = parent_id if type(parent) is int else parent
        parents: bytes | None
        if parent is None:
            parents = b"" if more is None else None  # parents after no first one: damaged
        elif type(first) is bytes and len(first) == ID_SIZE and (more is None or type(more) is bytes):
            parents = first if more is None else first + more
        else:
            parents = None
        if type(meta) is bytes:
            meta = _unpacked_metadata(meta)
        else:
            meta = meta.encode() if type(meta) is str else None
        if not (type(oid) is bytes and len(oid) == ID_SIZE and type(tree) is bytes and len(tree) == ID_SIZE
                and parents is not None and len(parents) % ID_SIZE == 0 and type(author) is str
                and type(ts) is int and type(message) is str and meta is not None and type(gen) is int):
            raise self._lean_damaged(row)
        return _commit(oid, tree, parents, author, ts, message, gen, meta)

    def _damaged(self, row: tuple[Any, ...]) -> CorruptObjectError:
        """The error for a commit's row whose columns are not what this index writes."""
        problems = [p for column, value in zip(self._COLUMNS.split(", "), row, strict=True)
                    if (p := _column_problem(column, value)) is not None]
        return self._corrupt(row[0], problems)

    def _lean_damaged(self, row: tuple[Any, ...]) -> CorruptObjectError:
        oid, tree, parent, parent_id, more, author, ts, message, meta, gen = row
        problems = [p for column, value in (("id", oid), ("tree", tree), ("more_parents", more), ("author", author),
                                            ("time_us", ts), ("message", message), ("generation", gen))
                    if (p := _column_problem(column, value)) is not None]
        if type(parent) is int and parent_id is None:
            problems.append(f"parent is row {parent} of table 'commits', which is not there")
        elif type(parent) is int and not (type(parent_id) is bytes and len(parent_id) == ID_SIZE):
            problems.append(f"parent is row {parent} of table 'commits', whose id {wrong(parent_id)}")
        elif parent is None and more is not None:
            problems.append("more_parents holds parents after no first parent")
        elif parent is not None and type(parent) is not int and not (type(parent) is bytes and len(parent) == ID_SIZE):
            problems.append(f"parent {wrong(parent)}, not a 32-byte id or a row number")
        if type(meta) is bytes and _unpacked_metadata(meta) is None:
            problems.append(f"metadata {wrong(meta)}, which are not msgpack of JSON")
        elif type(meta) not in (bytes, str):
            problems.append(f"metadata {wrong(meta)}, not text or msgpack")
        return self._corrupt(oid, problems)

    def _corrupt(self, oid: object, problems: list[str]) -> CorruptObjectError:
        name = oid.hex() if type(oid) is bytes else repr(oid)
        return CorruptObjectError(name, f"its row in the commit index of {str(self.file.path)!r} is damaged: "
                                        f"{'; '.join(problems)}")

    def get(self, oid: ObjectId) -> Commit | None:
        with self.file.reading(f"commit {oid} in the commit index"):
            if self._lean:
                row = self.file.conn.execute(f"SELECT {self._LEAN_COLUMNS} FROM {self._LEAN_FROM} WHERE c.id = ?",
                                             (oid,)).fetchone()
                return None if row is None else self._lean_commit(row)
            row = self.file.conn.execute(f"SELECT {self._COLUMNS} FROM commits WHERE id = ?", (oid,)).fetchone()
        return None if row is None else self._commit(row)

    def get_many(self, ids: Iterable[ObjectId]) -> dict[ObjectId, Commit]:
        found: dict[ObjectId, Commit] = {}
        with self.file.reading("commits in the commit index"):
            for batch in batched(dict.fromkeys(ids)):
                marks = ", ".join("?" * len(batch))
                if self._lean:
                    rows = self.file.conn.execute(f"SELECT {self._LEAN_COLUMNS} FROM {self._LEAN_FROM} "
                                                  f"WHERE c.id IN ({marks})", batch).fetchall()
                    commits = [self._lean_commit(row) for row in rows]
                else:
                    rows = self.file.conn.execute(f"SELECT {self._COLUMNS} FROM commits WHERE id IN ({marks})",
                                                  batch).fetchall()
                    commits = [self._commit(row) for row in rows]
                found.update((commit.id, commit) for commit in commits)
        return found

    def first_parent_chain(self, oid: ObjectId, limit: int) -> list[Commit]:
        if self._lean:
            # One recursive query follows the first parents: a row number straight to the
            # parent's row, an id (a parent added after its child) through ``commits_id``.
            with self.file.reading(f"the history of commit {oid} in the commit index"):
                rows = self.file.conn.execute(
                    f"WITH RECURSIVE chain(n, depth) AS (SELECT n, 0 FROM commits WHERE id = ? UNION ALL "
                    f"SELECT CASE WHEN typeof(c.parent) = 'integer' THEN c.parent "
                    f"ELSE (SELECT x.n FROM commits x WHERE x.id = c.parent) END, chain.depth + 1 "
                    f"FROM commits c JOIN chain ON c.n = chain.n "
                    f"WHERE c.parent IS NOT NULL AND chain.depth + 1 < ?) "
                    f"SELECT {self._LEAN_COLUMNS} FROM chain JOIN commits c ON c.n = chain.n "
                    f"LEFT JOIN commits p ON p.n = c.parent ORDER BY chain.depth",
                    (oid, limit),
                ).fetchall()
            return [self._lean_commit(row) for row in rows]
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


def _insert_lean(c: sqlite3.Connection, oid: object, tree: object, parents: Iterable[bytes] | object, author: object,
                 time_us: object, message: object, metadata: object, generation: object) -> None:
    """Add one commit's row in the lean layout (nothing if its id is there already).
    ``parents``: the parent ids, or (copying a damaged row) the raw column, kept as it is."""
    first: object
    more: object
    if isinstance(parents, (tuple, list)):
        first = parents[0] if parents else None
        more = b"".join(parents[1:]) or None
    else:  # a damaged ``parents`` column: kept whole, and read as damaged
        first, more = None, parents
    # The first parent: its row number when the index holds it, else its id (or NULL).
    c.execute(
        "INSERT INTO commits (id, tree, parent, more_parents, author, time_us, message, metadata, generation) "
        "VALUES (?1, ?2, coalesce((SELECT n FROM commits WHERE id = ?3), ?3), ?4, ?5, ?6, ?7, ?8, ?9) "
        "ON CONFLICT (id) DO NOTHING",
        (oid, tree, first, more, author, time_us, message,
         _lean_metadata(metadata) if type(metadata) is str else metadata, generation),
    )


def upgrade_to_lean(file: SqliteFile) -> None:
    """Move table ``commits`` of ``file`` (a format 1 or 2 file) to the format 3 layout,
    inside the caller's transaction: every row copied (a damaged one as it is, to be
    named when read), parents before their children so that they link by row number,
    then the old table dropped. Nothing to do when it has the lean layout already."""
    with file.transaction() as c:
        has_table = c.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'commits'").fetchone()
        if has_table and is_lean(c):
            return
        if has_table:
            c.execute("ALTER TABLE commits RENAME TO commits_before_lean")
        for statement in LEAN_SCHEMA:
            c.execute(statement)
        if not has_table:
            return
        # By generation: a parent's is smaller than its children's (a damaged one, not an
        # integer, sorts after every number in SQLite: its row is copied all the same).
        rows = c.execute("SELECT id, tree, parents, author, time_us, message, metadata, generation "
                         "FROM commits_before_lean ORDER BY generation, rowid").fetchall()
        for oid, tree, parents, author, time_us, message, metadata, generation in rows:
            if type(parents) is bytes and len(parents) % ID_SIZE == 0:
                split: object = [parents[i : i + ID_SIZE] for i in range(0, len(parents), ID_SIZE)]
            else:
                split = parents
            _insert_lean(c, oid, tree, split, author, time_us, message, metadata, generation)
        c.execute("DROP TABLE commits_before_lean")
