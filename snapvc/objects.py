"""The object kinds and their one canonical encoding.

Every object is ``kind tag (1 byte) + payload``; its ``ObjectId`` is the blake3 of those
bytes (the *canonical bytes*). How the bytes are compressed for storage is the store's
business (``snapvc.store.codec``), so it never changes an id.

Kinds (format version 1; a later format adds kinds, it never changes these):

=======  ====  =====================================================================
kind     tag   payload
=======  ====  =====================================================================
BLOB     0x01  raw bytes: one content-defined chunk of a long str or bytes value
MAP      0x02  a dict node, leaf or inner (layouts: ``snapvc.encoding.nodes``)
SEQ      0x03  a list or tuple node, leaf or inner
TEXT     0x04  a long str or bytes: its pieces and chunk references
COMMIT   0x05  msgpack ``[tree, parents, author, time_us, message, metadata, generation]``
=======  ====  =====================================================================

Inside MAP/SEQ/TEXT leaves a value is either inline (msgpack, with the extension types
of ``snapvc.encoding.values``) or a reference to a child object: its bare 32-byte id,
listed in the leaf's ``ref_keys`` / ``ref_positions``. References only ever appear as
direct entries of a node, never nested inside an inline value, so readers find every
child without walking inline values, and decode a node in one C-speed msgpack call.

``level`` is 0 for leaves; a large dict, list or long string is a prolly tree whose inner
nodes list their children with the number of entries (or bytes, for TEXT) below each.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, UTC
from types import MappingProxyType
from typing import Any, Final

import msgpack
import orjson

from snapvc.errors import CorruptObjectError, FormatVersionError, InvalidCommitError
from snapvc.ids import ObjectId

__all__ = ["MAX_DEPTH", "MAX_METADATA_BYTES", "frozen_metadata", "metadata_filter", "shown_metadata",
           "BLOB", "MAP", "SEQ", "TEXT", "COMMIT", "KIND_NAMES", "Commit", "object_bytes", "split_object"]

BLOB: Final = 0x01
MAP: Final = 0x02
SEQ: Final = 0x03
TEXT: Final = 0x04
COMMIT: Final = 0x05
KIND_NAMES: Final = {BLOB: "blob", MAP: "map", SEQ: "seq", TEXT: "text", COMMIT: "commit"}
_KIND_BYTE = {k: bytes((k,)) for k in KIND_NAMES}

# What may be stored is what can be shown. A state and a commit's metadata nest at most
# MAX_DEPTH containers, the root (the state's dict, the metadata object) counted: deeper
# values are refused where they enter, naming their path, so that no reader (checkout,
# diff, merge, the JSON forms, log and show, the web view, the MCP server), recursive as
# each is, ever meets Python's recursion limit or orjson's (255 levels). Metadata is also
# at most MAX_METADATA_BYTES of JSON: every log walk reads it, commit after commit, so
# a large value belongs in the state. ``shown_metadata`` is how every reader shows
# metadata stored before these bounds (or by a damaged or crafted row): cut, never failing.
MAX_DEPTH: Final = 100
MAX_METADATA_BYTES: Final = 1 << 20


def object_bytes(kind: int, payload: bytes) -> tuple[ObjectId, bytes]:
    """The id and canonical bytes of an object of ``kind`` with ``payload``."""
    data = _KIND_BYTE[kind] + payload
    return ObjectId.of(data), data


def split_object(oid: ObjectId, data: bytes) -> tuple[int, bytes]:
    """``(kind, payload)`` of canonical bytes; unknown kinds are a format error."""
    if not data:
        raise CorruptObjectError(oid, "empty object")
    kind = data[0]
    if kind not in KIND_NAMES:
        raise FormatVersionError(f"object {oid} has kind tag {kind:#04x}, unknown to this snapvc version")
    return kind, data[1:]


def frozen_metadata(meta_json: bytes) -> Mapping[str, Any]:
    """Metadata as a read-only mapping: commits are shared, immutable values."""
    return MappingProxyType(orjson.loads(meta_json))


def _utc_from_us(us: int) -> datetime:
    return datetime.fromtimestamp(us // 1_000_000, tz=UTC).replace(microsecond=us % 1_000_000)


# A commit's time is one that ``datetime`` can show (years 1 to 9999): well inside the
# 64-bit integers that msgpack and the SQLite commit index hold, as generations must be.
_MIN_TIME_US: Final = -62_135_596_800 * 1_000_000
_MAX_TIME_US: Final = 253_402_300_800 * 1_000_000 - 1
_MAX_INT64: Final = (1 << 63) - 1


def _type_name(value: object) -> str:
    return "None" if value is None else type(value).__name__


def _text_problem(value: object) -> str | None:
    """What is wrong with ``value`` as a commit's text (author, message), None if nothing:
    a str that UTF-8 can encode (msgpack and SQLite store it so)."""
    if not isinstance(value, str):
        return f"must be a str, got {_type_name(value)}"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"is not valid Unicode text: a lone surrogate {value[exc.start]!r} at index {exc.start}"
    return None


def _check_fields(commit: ObjectId | None, tree: object, parents: object, author: object, timestamp_us: object,
                  message: object, generation: object) -> None:
    """Raise ``InvalidCommitError`` naming the first field of the wrong type or value.

    Every field is checked where a commit is made (``Commit.create``) or received built
    (``Commit.check``), so that every store can keep it as it is: a field SQLite's
    commit index cannot hold (a message that is None) is refused here, never skipped
    there."""
    if not isinstance(tree, ObjectId):
        raise InvalidCommitError("tree", f"must be an ObjectId, got {_type_name(tree)}", commit)
    if not isinstance(parents, tuple | list):
        raise InvalidCommitError("parents", f"must be a tuple of ObjectIds, got {_type_name(parents)}", commit)
    for i, parent in enumerate(parents):
        if not isinstance(parent, ObjectId):
            raise InvalidCommitError("parents", f"[{i}] must be an ObjectId, got {_type_name(parent)}", commit)
    if len(set(parents)) != len(parents):
        raise InvalidCommitError("parents", "name the same commit twice", commit)
    problem = _text_problem(author)
    if problem is not None:
        raise InvalidCommitError("author", problem, commit)
    if type(timestamp_us) is not int:
        raise InvalidCommitError("timestamp_us", f"must be an int (microseconds since 1970, UTC), got "
                                                 f"{_type_name(timestamp_us)}", commit)
    if not _MIN_TIME_US <= timestamp_us <= _MAX_TIME_US:
        raise InvalidCommitError("timestamp_us", f"{timestamp_us} is outside the years 1 to 9999", commit)
    problem = _text_problem(message)
    if problem is not None:
        hint = ' (message="" makes a commit without one)' if message is None and commit is None else ""
        raise InvalidCommitError("message", problem + hint, commit)
    if type(generation) is not int:
        raise InvalidCommitError("generation", f"must be an int, got {_type_name(generation)}", commit)
    if not (2 <= generation <= _MAX_INT64 if parents else generation == 1):
        expected = "1 for a root commit" if not parents else "1 + the largest generation of its parents, at least 2"
        raise InvalidCommitError("generation", f"is {generation}, must be {expected}", commit)


@dataclass(frozen=True, slots=True)
class Commit:
    """One checkpoint: a root tree, its parents, who, when, why, and free-form metadata.

    ``generation`` is 1 + the largest parent generation (1 for a root commit): the
    commit's version number along its history, and what merge-base search orders by.
    ``metadata`` is a JSON object (step, agent id, status, token usage, run/session ids…).
    Build one with ``Commit.create``; its ``id`` is derived from its content.
    """

    id: ObjectId
    tree: ObjectId
    parents: tuple[ObjectId, ...]
    author: str
    timestamp_us: int
    message: str
    generation: int
    metadata_json: bytes = field(repr=False)
    # ``metadata`` parsed on first use: a log walk builds many commits and reads few.
    _metadata: Mapping[str, Any] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def metadata(self) -> Mapping[str, Any]:
        """The metadata, as a read-only mapping."""
        parsed = self._metadata
        if parsed is None:
            try:
                parsed = frozen_metadata(self.metadata_json)
            except (ValueError, TypeError) as exc:  # a damaged commit index row: a log walk trusts it
                raise CorruptObjectError(self.id, f"its metadata is not a JSON object: {exc}") from None
            object.__setattr__(self, "_metadata", parsed)
        return parsed

    @property
    def time(self) -> datetime:
        """When the commit was made, in UTC."""
        try:
            return _utc_from_us(self.timestamp_us)
        except (OverflowError, ValueError, OSError) as exc:  # as for ``metadata``
            raise CorruptObjectError(self.id, f"its time ({self.timestamp_us} us) is out of range: {exc}") from None

    @property
    def parent(self) -> ObjectId | None:
        """The first parent, or None for a root commit."""
        return self.parents[0] if self.parents else None

    @staticmethod
    def canonical_metadata(metadata: dict[str, Any] | None) -> bytes:
        """Metadata as canonical JSON (sorted keys); it must be a JSON object that round-trips
        (``InvalidCommitError`` otherwise)."""
        if metadata is None:
            return b"{}"
        if not isinstance(metadata, dict):
            raise InvalidCommitError("metadata", f"must be a dict, got {_type_name(metadata)}")
        too_deep = _too_deep(metadata, 1)
        if too_deep is not None:
            raise InvalidCommitError("metadata", f"at {too_deep}: nested deeper than {MAX_DEPTH} containers (the "
                                                 f"metadata object counted), the most metadata may hold")
        try:
            text = orjson.dumps(metadata, option=orjson.OPT_SORT_KEYS)
        except TypeError as exc:
            raise InvalidCommitError("metadata", f"must be JSON (str keys; str, number, bool, None, list, dict "
                                                 f"values): {exc}") from None
        if len(text) > MAX_METADATA_BYTES:
            raise InvalidCommitError("metadata", f"is {len(text):,} bytes of JSON, more than the {MAX_METADATA_BYTES:,} "
                                                 f"it may hold (every log walk reads it): keep large values in the state")
        if orjson.loads(text) != metadata:
            raise InvalidCommitError(
                "metadata", "must be plain JSON: a value did not survive the round trip "
                "(NaN or infinity, a tuple, a datetime or another non-JSON type)"
            )
        return text

    @classmethod
    def create(
        cls,
        *,
        tree: ObjectId,
        parents: tuple[ObjectId, ...],
        author: str,
        timestamp_us: int,
        message: str,
        metadata: dict[str, Any] | None,
        generation: int,
    ) -> tuple[Commit, bytes]:
        """A new commit and its canonical bytes. Every field is checked here, the one place
        commits are made: ``InvalidCommitError`` names the first of the wrong type or value
        (a ``message`` that is None: pass ``""`` for a commit without one)."""
        _check_fields(None, tree, parents, author, timestamp_us, message, generation)
        meta_json = cls.canonical_metadata(metadata)
        payload = msgpack.packb(
            [bytes(tree), [bytes(p) for p in parents], author, timestamp_us, message, meta_json, generation],
            use_bin_type=True,
        )
        oid, data = object_bytes(COMMIT, payload)
        commit = cls(oid, tree, tuple(parents), author, timestamp_us, message, generation, meta_json)
        return commit, data

    def moved(self, parents: tuple[ObjectId, ...], generation: int) -> tuple[Commit, bytes]:
        """This commit on other ``parents`` (a history rewritten), and its canonical bytes:
        its metadata is kept as it is stored, so that a commit made before the metadata
        rules (``MAX_DEPTH``, ``MAX_METADATA_BYTES``) can still be moved."""
        _check_fields(None, self.tree, parents, self.author, self.timestamp_us, self.message, generation)
        payload = msgpack.packb(
            [bytes(self.tree), [bytes(p) for p in parents], self.author, self.timestamp_us, self.message,
             self.metadata_json, generation],
            use_bin_type=True,
        )
        oid, data = object_bytes(COMMIT, payload)
        return Commit(oid, self.tree, tuple(parents), self.author, self.timestamp_us, self.message, generation,
                      self.metadata_json), data

    @classmethod
    def decode(cls, oid: ObjectId, payload: bytes) -> Commit:
        """The commit whose payload (canonical bytes without the kind tag) is ``payload``."""
        try:
            tree, parents, author, ts, message, meta_json, generation = msgpack.unpackb(payload, raw=False)
            return cls(
                oid,
                ObjectId(tree),
                tuple(ObjectId(p) for p in parents),
                author,
                ts,
                message,
                generation,
                meta_json,
            )
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise CorruptObjectError(oid, f"not a valid commit: {exc}") from None

    def check(self) -> None:
        """Check the fields of a commit that came built (decoded, or from another
        repository) as ``create`` checks a new one's, and its metadata (the JSON text of
        an object): ``InvalidCommitError`` names this commit and the field. It says
        nothing of whether the fields hash to the id (``ObjectId.of(commit.encode())``)."""
        _check_fields(self.id, self.tree, self.parents, self.author, self.timestamp_us, self.message, self.generation)
        meta = self.metadata_json
        if not isinstance(meta, bytes):
            raise InvalidCommitError("metadata", f"must be JSON text as bytes, got {_type_name(meta)}", self.id)
        try:
            parsed = orjson.loads(meta)
        except orjson.JSONDecodeError as exc:
            raise InvalidCommitError("metadata", f"is not JSON: {exc}", self.id) from None
        if not isinstance(parsed, dict):
            raise InvalidCommitError("metadata", f"must be a JSON object, got {_type_name(parsed)}", self.id)

    def encode(self) -> bytes:
        """The canonical bytes of this commit (kind tag + payload)."""
        payload: bytes = msgpack.packb(
            [bytes(self.tree), [bytes(p) for p in self.parents], self.author, self.timestamp_us, self.message,
             self.metadata_json, self.generation],
            use_bin_type=True,
        )
        return _KIND_BYTE[COMMIT] + payload


def _too_deep(value: object, level: int) -> str | None:
    """The path (``['a'][0]``) of the first container in ``value`` nested deeper than
    ``MAX_DEPTH``, ``value`` itself being a container at ``level``; None if there is none.
    It descends at most ``MAX_DEPTH`` levels, whatever the value (a cycle included)."""
    if isinstance(value, dict | list | tuple):
        if level > MAX_DEPTH:
            return ""
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            below = _too_deep(item, level + 1)
            if below is not None:
                return f"[{key!r}]{below}"
    return None


def shown_metadata(commit: Commit, max_chars: int | None = None, *, show_damage: bool = False) -> dict[str, Any]:
    """``commit``'s metadata as every reader shows it (log, show, ``--json``, the web view,
    the MCP server): whole when it keeps the rules ``commit`` enforces, else cut. A
    container nested deeper than ``MAX_DEPTH`` (metadata stored before the rule, or a
    crafted row) becomes ``{"$truncated": true, "reason": ..., "size": ..., "preview": ...}``
    (``size``: the characters of its JSON text; ``preview``: their beginning). With
    ``max_chars``, a value that does not fit in what is left of ``max_chars`` characters of
    JSON is cut the same way, and once they are spent the keys left are not listed:
    ``"$truncated": {"omitted_keys": n, "size": ...}`` says how many, and the size of the
    whole metadata. Metadata that does not read as a JSON object (a damaged or crafted
    row: not JSON, or nested past the 1,024 levels JSON is read to) is the
    ``CorruptObjectError`` that ``Commit.metadata`` raises, naming the commit (``fsck``
    reports it), as the command line's every read of damage is; with ``show_damage``
    (the web view and the MCP server, which show a history to browse) it is shown as
    such a cut value under ``TRUNCATED``, its reason that error, so one commit does not
    hide the history around it."""
    meta_json = commit.metadata_json
    try:
        parsed = commit.metadata
    except CorruptObjectError as exc:
        if not show_damage:
            raise
        head = bytes(meta_json[:PREVIEW_CHARS]).decode("utf-8", "replace")
        return {TRUNCATED: _cut(len(meta_json), head, str(exc))}
    fits = max_chars is None or len(meta_json) <= max_chars
    if fits and meta_json.count(b"[") + meta_json.count(b"{") <= MAX_DEPTH:  # cannot nest too deep: shown whole
        return dict(parsed)
    shown: dict[str, Any] = {}
    left = max_chars
    for i, (key, value) in enumerate(parsed.items()):
        value = _within_depth(value, 2)
        if left is not None:
            text = orjson.dumps(value).decode()  # within MAX_DEPTH now: orjson writes it
            size = len(text)
            if size > left:
                if value is not parsed[key]:  # cut for its depth: the size of what is stored
                    size, text = _json_size_and_head(parsed[key], PREVIEW_CHARS)
                head = text[:PREVIEW_CHARS]
                value = _cut(size, head[:max(0, left)], "too large to show whole")
                size = len(orjson.dumps(value))
            left -= len(key) + 4 + size
            if left < 0 and i + 1 < len(parsed):
                shown[key] = value
                shown.setdefault(TRUNCATED, {"omitted_keys": len(parsed) - i - 1, "size": len(meta_json)})
                return shown
        shown[key] = value
    return shown


TRUNCATED: Final = "$truncated"  # the key of a value cut for showing (``shown_metadata``)
PREVIEW_CHARS: Final = 500  # the characters of JSON a value cut for showing keeps


def _cut(size: int, preview: str, reason: str) -> dict[str, Any]:
    return {TRUNCATED: True, "reason": reason, "size": size, "preview": preview}


def _within_depth(value: Any, level: int) -> Any:
    """``value`` (plain JSON, a container at ``level`` if it is one) with every container
    at ``MAX_DEPTH`` that holds another container cut (its cut form, a map of scalars,
    takes its place and level); ``value`` itself when there is none."""
    if not isinstance(value, dict | list):
        return value
    if level >= MAX_DEPTH and any(isinstance(v, dict | list) for v in (value.values() if isinstance(value, dict)
                                                                       else value)):
        size, head = _json_size_and_head(value, PREVIEW_CHARS)
        return _cut(size, head, f"nested deeper than {MAX_DEPTH} containers, the most metadata may hold")
    if isinstance(value, dict):
        out_map = {k: _within_depth(v, level + 1) for k, v in value.items()}
        return value if all(out_map[k] is v for k, v in value.items()) else out_map
    out_list = [_within_depth(v, level + 1) for v in value]
    return value if all(a is b for a, b in zip(out_list, value)) else out_list


def _json_size_and_head(value: Any, head_chars: int) -> tuple[int, str]:
    """The length of the compact JSON text of ``value`` (plain JSON, nested however deep)
    and its first ``head_chars`` characters, written piece by piece without recursion."""
    size = 0
    head: list[str] = []
    kept = 0
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Text):
            piece = item.text
        elif isinstance(item, dict):
            piece = "{"
            stack.append(_Text("}"))
            for n, (k, v) in enumerate(reversed(item.items())):
                stack.append(v)
                stack.append(_Text(orjson.dumps(k).decode() + ":" if n == len(item) - 1 else
                                   "," + orjson.dumps(k).decode() + ":"))
        elif isinstance(item, list):
            piece = "["
            stack.append(_Text("]"))
            for n, v in enumerate(reversed(item)):
                stack.append(v)
                if n != len(item) - 1:
                    stack.append(_Text(","))
        else:
            piece = orjson.dumps(item).decode()
        size += len(piece)
        if kept < head_chars:
            head.append(piece[:head_chars - kept])
            kept += len(head[-1])
    return size, "".join(head)


@dataclass(frozen=True, slots=True)
class _Text:
    """A piece of JSON text on ``_json_size_and_head``'s stack (not a value to write)."""

    text: str


def metadata_filter(where: Mapping[str, Any] | Callable[[Commit], bool] | None) -> Callable[[Commit], bool] | None:
    """A test of a commit's metadata: ``where``'s keys (dotted paths into nested
    metadata: ``{"usage.tokens": 10}``) all hold values equal to, and of the type of,
    the given ones; a callable is the test itself; None tests nothing."""
    if where is None:
        return None
    if callable(where):
        return where
    wanted = [(key.split("."), value) for key, value in where.items()]

    def match(commit: Commit) -> bool:
        for parts, value in wanted:
            current: Any = commit.metadata
            for part in parts:
                current = current.get(part, _NO_VALUE) if isinstance(current, Mapping) else _NO_VALUE
            if current is _NO_VALUE or current != value or type(current) is not type(value):
                return False
        return True

    return match


_NO_VALUE: Final = object()
