"""Refs, symbolic refs and the reflog on S3, moved by conditional writes.

Each ref name is one key, ``refs/<name, percent-escaped>``, whose JSON body holds the
ref's target (or its symbolic target), a *generation* counter and the newest reflog
entries. A move reads the body and its ETag, and writes the next body with
``If-Match: <ETag>`` (``If-None-Match: *`` for a name never written): if another writer
moved the ref in between, the write fails with 412 and the compare is made again
against what is there now (a 412 to a write that landed and was sent again finds its
own body there: the move stands). The ETag is the MD5 of the body, so two bodies naming the
same target would share one (A -> B -> A: ABA); the generation, one more at every
write, makes every body unique.

The reflog entry of a move is in the body the move writes: the move and its entry are
one atomic write (invariant 3). A body keeps at most ``REFLOG_TAIL`` entries; a writer
that would exceed it first stores the oldest half as an immutable segment
``reflog/<name>/<first generation>-<last generation>`` (its content is fixed by the
body every writer read, so racing writers write the same segment) and then moves the
ref without them. Readers merge segments and the body by generation.

Inside a transaction (``Repository.deferred``) moves are compared with the ref as the
transaction sees it and written when it ends, each conditionally on the body first
read, after the transaction's pack: many commits cost one pack and one write per ref.
A ref another writer moved meanwhile is reported then (``RefConflictError``); the
transaction's commits stay stored, unreferenced.

A deleted ref keeps its key as a body without a target (its reflog stays), so a name
is created again by If-Match on that body, and its generation keeps counting.
"""

from __future__ import annotations

import builtins
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from snapvc.errors import RefConflictError, RefError
from snapvc.ids import ObjectId
from snapvc.refs.base import ReflogEntry, check_symbolic_ref, ref_target
from snapvc.refs.names import check_full_ref_name
from snapvc.backends.s3.client import PreconditionFailed, S3Client

__all__ = ["S3RefStore", "REFLOG_TAIL"]

REFLOG_TAIL = 32
_PREFIX = "refs/"
_REFLOG = "reflog/"
# A ref that keeps losing races to changes that are not moves (symbolic, reflog expiry)
# gives up after this many rounds.
_MAX_ROUNDS = 100


def _key(name: str) -> str:
    return _PREFIX + quote(name, safe="")


@dataclass
class _Body:
    generation: int = 0
    target: ObjectId | None = None
    symbolic: str | None = None
    reflog: list[list[Any]] = field(default_factory=list)  # [generation, old hex, new hex, time, reason], oldest first
    etag: str | None = None  # None: the key does not exist

    def encode(self) -> bytes:
        return json.dumps({"generation": self.generation, "target": self.target.hex if self.target else None,
                           "symbolic": self.symbolic, "reflog": self.reflog}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, name: str, data: bytes, etag: str, where: str) -> _Body:
        try:
            raw = json.loads(data)
            target = ObjectId.from_hex(raw["target"]) if raw.get("target") else None
            return cls(int(raw["generation"]), target, raw.get("symbolic"), list(raw.get("reflog") or []), etag)
        except (ValueError, KeyError, TypeError) as exc:
            raise RefError(name, f"ref {name!r}: damaged body at {where} ({exc})") from None


def _entry(name: str, row: list[Any]) -> ReflogEntry:
    _, old, new, when, reason = row
    return ReflogEntry(name, ObjectId.from_hex(old) if old else None, ObjectId.from_hex(new) if new else None,
                       float(when), reason)


class S3RefStore:
    """The ``RefStore`` of a repository on S3 (see the module docstring).

    ``before_write`` runs before every ref write: the object store's pending pack goes
    up first, so no ref ever points at objects not yet stored (invariant 1)."""

    def __init__(self, client: S3Client, clock: Callable[[], float] = time.time,
                 before_write: Callable[[], None] | None = None, buffering: Callable[[], bool] | None = None) -> None:
        self.client = client
        self._clock = clock
        self._before_write = before_write or (lambda: None)
        self._buffering = buffering or (lambda: False)
        # Moves made inside a transaction, written when it ends: name -> (body read, body to write).
        self._pending: dict[str, tuple[_Body, _Body]] = {}
        self._seen: dict[str, _Body] = {}  # the body of each ref this client last read or wrote

    # -- one body ----------------------------------------------------------------------------

    def _read(self, name: str) -> _Body:
        found = self.client.get(_key(name))
        body = _Body() if found is None else _Body.decode(name, *found, self.client.where(_key(name)))
        self._seen[name] = body
        return body

    def _write(self, name: str, old: _Body, new: _Body) -> bool:
        """Write ``new`` over ``old`` if ``old`` is still there; False if it changed."""
        self._before_write()
        new.generation = max(new.generation, old.generation + 1)  # moves counted by _log, else one more
        self._spill_reflog(name, new)
        try:
            if old.etag is None:
                new.etag = self.client.put(_key(name), new.encode(), create=True)
            else:
                new.etag = self.client.put(_key(name), new.encode(), if_match=old.etag)
        except PreconditionFailed:
            self._seen.pop(name, None)
            return False
        self._seen[name] = new
        return True

    def _lost_too_often(self, name: str) -> RefError:
        return RefError(name, f"ref {name!r}: {_MAX_ROUNDS} conditional writes in a row lost on "
                              f"{self.client.where(_key(name))}")

    def _spill_reflog(self, name: str, body: _Body) -> None:
        if len(body.reflog) <= REFLOG_TAIL:
            return
        spill = body.reflog[: len(body.reflog) // 2]
        key = f"{_REFLOG}{quote(name, safe='')}/{spill[0][0]:012d}-{spill[-1][0]:012d}"
        self.client.put(key, json.dumps(spill, separators=(",", ":")).encode())
        body.reflog = body.reflog[len(spill) :]

    def _log(self, body: _Body, old: ObjectId | None, new: ObjectId | None, reason: str) -> None:
        body.generation += 1
        body.reflog = body.reflog + [[body.generation, old.hex if old else None, new.hex if new else None,
                                      float(self._clock()), reason]]

    # -- the protocol ----------------------------------------------------------------------

    def get(self, name: str) -> ObjectId | None:
        check_full_ref_name(name)
        pending = self._pending.get(name) if self._buffering() else None
        return pending[1].target if pending is not None else self._read(name).target

    def list(self, prefix: str = "refs/", *, after: str | None = None,
             limit: int | None = None) -> dict[str, ObjectId]:
        # S3 listings go by folders ("/"), and ref names are escaped into one folder: the
        # names with the prefix (and after ``after``) are picked here; then the bodies are
        # read a page at a time, until ``limit`` refs that exist are found.
        def wanted(name: str) -> bool:
            return name.startswith(prefix) and (after is None or name > after)

        pending = ({name: new.target for name, (_, new) in self._pending.items() if wanted(name)}
                   if self._buffering() else {})
        names = sorted({name for key, _ in self.client.list(_PREFIX) if wanted(name := unquote(key[len(_PREFIX) :]))}
                       | set(pending))
        found: dict[str, ObjectId] = {}
        if limit is not None and limit <= 0:
            return found
        step = max(len(names) if limit is None else limit, 1)
        for start in range(0, len(names), step):
            batch = [name for name in names[start : start + step] if name not in pending]
            targets = dict(zip(batch, (body.target for body in self.client.pool.map(self._read, batch)), strict=True))
            for name in names[start : start + step]:
                target = pending[name] if name in pending else targets[name]
                if target is not None:
                    found[name] = target
                    if limit is not None and len(found) >= limit:
                        return found
        return found

    def compare_and_swap(self, name: str, expected: ObjectId | None, new: ObjectId | None, reason: str) -> bool:
        check_full_ref_name(name)
        expected = ref_target(expected, "expected")
        new = ref_target(new, "new")
        if self._buffering():
            return self._buffered_swap(name, expected, new, reason)
        tried: _Body | None = None
        for round_ in range(_MAX_ROUNDS):
            # First try the body this client last read or wrote (a commit has just read the
            # tip): a stale one only fails the conditional write, and the next round reads.
            body = self._seen.get(name) if round_ == 0 else None
            if body is None or body.target != expected:
                body = self._read(name)
            if tried is not None and body.encode() == tried.encode():
                # The write that "lost" is the one there: a request that landed and was sent
                # again (its answer lost), failing its own condition the second time.
                return True
            if body.target != expected:
                return False
            if expected == new:
                return True
            moved = _Body(body.generation, new, None if new is not None else body.symbolic, list(body.reflog))
            self._log(moved, expected, new, reason)
            if self._write(name, body, moved):
                return True
            tried = moved  # someone wrote the body meanwhile: compare again with what is there now
        raise self._lost_too_often(name)

    def _buffered_swap(self, name: str, expected: ObjectId | None, new: ObjectId | None, reason: str) -> bool:
        """A move inside a transaction: compared with the ref as this transaction sees it,
        written (conditionally on the body first read) when the transaction ends."""
        found = self._pending.get(name)
        if found is None:
            read = self._seen.get(name)  # a commit has just read the tip
            if read is None or read.target != expected:
                read = self._read(name)
            found = (read, _Body(read.generation, read.target, read.symbolic, list(read.reflog)))
        body = found[1]
        if body.target != expected:
            return False
        if expected == new:
            return True
        body.target = new
        if new is not None:
            body.symbolic = None
        self._log(body, expected, new, reason)
        self._pending[name] = found
        return True

    def write_pending(self) -> None:
        """Write the moves of the transaction that ended (after its pack went up).
        ``RefConflictError`` names the first ref another writer moved meanwhile; the
        others are written."""
        pending, self._pending = self._pending, {}
        lost = [(name, read) for name, (read, body) in pending.items() if not self._write_moves(name, read, body)]
        if lost:
            name, read = lost[0]
            raise RefConflictError(name, read.target, self._read(name).target)

    def _write_moves(self, name: str, read: _Body, body: _Body) -> bool:
        """Write ``body`` (``read`` plus this transaction's moves) over ``read``. If the
        body changed but the ref still points where the transaction found it (a change
        that was no move, or a move away and back), the moves are applied to the body now
        there; False if the ref moved."""
        for _ in range(_MAX_ROUNDS):
            if self._write(name, read, body):
                return True
            fresh = self._read(name)
            if fresh.target != read.target:
                return False
            moves = [row for row in body.reflog if row[0] > read.generation]
            rebased = _Body(fresh.generation, body.target, body.symbolic if body.target is None else None,
                            list(fresh.reflog))
            for row in moves:
                rebased.generation += 1
                rebased.reflog.append([rebased.generation, *row[1:]])
            read, body = fresh, rebased
        return False

    def discard_pending(self) -> None:
        """Forget the moves of a transaction that failed."""
        self._pending = {}

    def reflog(self, name: str, limit: int | None = None) -> builtins.list[ReflogEntry]:
        check_full_ref_name(name)
        if limit is not None and limit <= 0:
            return []
        rows = {row[0]: row for row in self._read(name).reflog}
        if limit is None or len(rows) < limit:
            for found in self.client.pool.map(lambda key: self._read_segment(name, key), self._segments(name)):
                rows.update((row[0], row) for row in found or ())
        entries = [_entry(name, rows[g]) for g in sorted(rows, reverse=True)]
        return entries if limit is None else entries[:limit]

    def _read_segment(self, name: str, key: str) -> builtins.list[builtins.list[Any]] | None:
        """The entries of reflog segment ``key``; None if it is gone (expired meanwhile)."""
        found = self.client.get(key)
        if found is None:
            return None
        try:
            rows = json.loads(found[0])
        except ValueError as exc:
            raise RefError(name, f"ref {name!r}: damaged reflog segment {self.client.where(key)} ({exc})") from None
        if not (isinstance(rows, list) and all(isinstance(row, list) and len(row) == 5 for row in rows)):
            raise RefError(name, f"ref {name!r}: damaged reflog segment {self.client.where(key)} (an entry is not "
                                 f"[generation, old, new, time, reason])")
        return rows

    def _segments(self, name: str) -> builtins.list[str]:
        return [key for key, _ in self.client.list(f"{_REFLOG}{quote(name, safe='')}/")]

    def reflog_names(self) -> builtins.list[str]:
        names = [unquote(key[len(_PREFIX) :]) for key, _ in self.client.list(_PREFIX)]
        bodies = self.client.pool.map(self._read, names)
        found = {name for name, body in zip(names, bodies, strict=True) if body.reflog}
        found.update(unquote(key[len(_REFLOG) :].split("/", 1)[0]) for key, _ in self.client.list(_REFLOG))
        return sorted(found)

    def expire_reflog(self, before: float, name: str | None = None) -> int:
        if name is not None:
            check_full_ref_name(name)
        removed = 0
        for ref in [name] if name is not None else self.reflog_names():
            for _ in range(_MAX_ROUNDS):
                body = self._read(ref)
                kept = [row for row in body.reflog if row[3] >= before]
                if len(kept) == len(body.reflog):
                    break
                trimmed = _Body(body.generation, body.target, body.symbolic, kept)
                if self._write(ref, body, trimmed):
                    removed += len(body.reflog) - len(kept)
                    break
            for segment in self._segments(ref):
                rows = self._read_segment(ref, segment)
                if rows is None:
                    continue
                kept = [row for row in rows if row[3] >= before]
                if len(kept) == len(rows):
                    continue
                if kept:
                    self.client.put(f"{_REFLOG}{quote(ref, safe='')}/{kept[0][0]:012d}-{kept[-1][0]:012d}",
                                    json.dumps(kept, separators=(",", ":")).encode())
                self.client.delete([segment])
                removed += len(rows) - len(kept)
        return removed

    def get_symbolic(self, name: str) -> str | None:
        check_full_ref_name(name)
        return self._read(name).symbolic

    def set_symbolic(self, name: str, target: str) -> None:
        check_symbolic_ref(name, target)
        for _ in range(_MAX_ROUNDS):
            body = self._read(name)
            if body.symbolic == target and body.target is None:
                return
            changed = _Body(body.generation, None, target, list(body.reflog))
            if body.target is not None:
                self._log(changed, body.target, None, f"symbolic ref to {target}")
            if self._write(name, body, changed):
                return
        raise self._lost_too_often(name)

    def delete_symbolic(self, name: str) -> bool:
        check_full_ref_name(name)
        for _ in range(_MAX_ROUNDS):
            body = self._read(name)
            if body.symbolic is None:
                return False
            if self._write(name, body, _Body(body.generation, body.target, None, list(body.reflog))):
                return True
        raise self._lost_too_often(name)

    def close(self) -> None:
        pass
