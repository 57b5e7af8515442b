"""The commit graph a page at a time, laid out in lanes as ``git log --graph`` draws it.

Commits come newest first in the order ``repo.log`` gives (a commit before its parents,
then by generation and time: the key ``(-generation, -time, id)`` only grows from one
commit to the next), every commit reachable from the tips once. Each row has the lane
(column) of its commit and the edges from this row down to the next: ``[i, i]`` for a
line passing through column ``i``, ``[lane, j]`` for a line from the commit to the
column ``j`` where its parent will be drawn. A lane holds the id of the commit awaited in
it, and no id is awaited in two lanes: a parent already awaited is joined where it is,
unless it is a first parent awaited right of its child's lane: then it moves left into
that lane (the line that awaited it bends over), so a branch's first-parent line stays
straight as in ``git log --graph``.

A page costs what it shows, however long the history: the cursor carries the lanes
(the ids awaited, one per column) and the key of the last commit shown. The commits
still to come are exactly those awaited in the lanes and the tips whose key comes after
that last key (a tip reached already is in a lane, or shown), so the next page starts
from them without walking anything shown before. Refs that moved between two pages do
not disturb a walk under way: a commit made since has a lower key than any shown.
"""

from __future__ import annotations

import base64
import binascii
import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from snapvc.errors import InvalidArgumentError, InvalidObjectIdError
from snapvc.ids import ObjectId
from snapvc.objects import Commit
from snapvc.repository.roles import Storage

__all__ = ["GraphPage", "GraphRow", "decode_cursor", "encode_cursor", "graph_page", "row_json"]

_CURSOR_VERSION = 1
Key = tuple[int, int, bytes]


@dataclass(frozen=True, slots=True)
class GraphRow:
    """One commit of the graph: its ``lane``, the ``width`` of the row (the columns it and
    its edges use) and the ``edges`` ``(from column here, to column in the next row)``:
    first the lines passing through, by column, then one from the commit's lane per
    parent, in the order of its parents."""

    commit: Commit
    lane: int
    width: int
    edges: list[tuple[int, int]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class GraphPage:
    rows: list[GraphRow]
    cursor: str | None  # None: nothing more


def _key(commit: Commit) -> Key:
    return (-commit.generation, -commit.timestamp_us, bytes(commit.id))


def encode_cursor(lanes: list[ObjectId | None], after: Key) -> str:
    """The text a next page starts from (URL-safe base64 of JSON, no padding)."""
    data = {"v": _CURSOR_VERSION, "after": [after[0], after[1], after[2].hex()],
            "lanes": [None if oid is None else oid.hex for oid in lanes]}
    return base64.urlsafe_b64encode(orjson.dumps(data)).decode("ascii").rstrip("=")


def decode_cursor(text: str) -> tuple[list[ObjectId | None], Key]:
    """``encode_cursor``'s lanes and key back; ``InvalidArgumentError`` naming the cursor
    for anything it did not make."""
    def refused(why: object) -> InvalidArgumentError:
        shown = text if len(text) <= 40 else text[:40] + "..."
        return InvalidArgumentError("cursor", f"cursor {shown!r} is not one this server gave: {why}")

    try:
        data = orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, binascii.Error) as exc:
        raise refused(exc) from None
    if not isinstance(data, dict) or data.get("v") != _CURSOR_VERSION:
        raise refused("not a cursor of this version")
    after, lanes = data.get("after"), data.get("lanes")
    if (not isinstance(after, list) or len(after) != 3 or type(after[0]) is not int or type(after[1]) is not int
            or not isinstance(after[2], str) or not isinstance(lanes, list)):
        raise refused("a malformed position or lanes")
    try:
        return ([None if h is None else ObjectId.from_hex(h) for h in lanes],
                (after[0], after[1], bytes(ObjectId.from_hex(after[2]))))
    except (InvalidObjectIdError, TypeError) as exc:
        raise refused(exc) from None


def graph_page(repo: Storage, tips: Iterable[ObjectId], limit: int, cursor: str | None = None) -> GraphPage:
    """Up to ``limit`` rows of the graph of every commit reachable from ``tips``, from the
    start or from where ``cursor`` (a previous page's) left off."""
    lanes, after = decode_cursor(cursor) if cursor else ([], None)
    heap: list[tuple[Key, Commit]] = []
    queued: set[ObjectId] = set()

    def push(commit: Commit) -> None:
        if commit.id not in queued:
            queued.add(commit.id)
            heapq.heappush(heap, (_key(commit), commit))

    for oid in lanes:
        if oid is not None:
            push(repo.get_commit(oid, walking=True))
    for oid in dict.fromkeys(tips):
        if oid not in queued:
            tip = repo.get_commit(oid, walking=True)
            if after is None or _key(tip) > after:
                push(tip)

    rows: list[GraphRow] = []
    last: Key | None = None
    while heap and len(rows) < limit:
        last, commit = heapq.heappop(heap)
        queued.discard(commit.id)
        lane = _place(lanes, commit.id)
        lanes[lane] = None
        edges = [(i, i) for i, awaited in enumerate(lanes) if awaited is not None]
        for n, parent in enumerate(commit.parents):
            if n == 0 and parent in lanes and lanes.index(parent) > lane:
                # Awaited further right (by a branch drawn before): it moves into this
                # lane, and the line awaiting it bends left to meet it, as git draws a
                # fork point under the branch that goes on left of it.
                was = lanes.index(parent)
                lanes[was] = None
                lanes[lane] = parent
                edges[edges.index((was, was))] = (was, lane)
                to = lane
            elif parent in lanes:  # awaited already (another child drawn before): join it
                to = lanes.index(parent)
            else:
                # The first parent goes on in the commit's own lane, as git draws it.
                to = lane if n == 0 or lanes[lane] is None else _free(lanes)
                lanes[to] = parent
                push(repo.get_commit(parent, walking=True))
            edges.append((lane, to))
        while lanes and lanes[-1] is None:
            lanes.pop()
        width = 1 + max([lane, *(max(a, b) for a, b in edges)])
        rows.append(GraphRow(commit, lane, width, edges))
    more = bool(heap) and last is not None
    return GraphPage(rows, encode_cursor(lanes, last) if more and last is not None else None)


def _place(lanes: list[ObjectId | None], oid: ObjectId) -> int:
    """The lane of commit ``oid``: where it is awaited, else (a tip) the first free one."""
    if oid in lanes:
        return lanes.index(oid)
    return _free(lanes)


def _free(lanes: list[ObjectId | None]) -> int:
    """The first free lane, added at the right when every lane is taken."""
    for i, awaited in enumerate(lanes):
        if awaited is None:
            return i
    lanes.append(None)
    return len(lanes) - 1


def row_json(row: GraphRow) -> dict[str, Any]:
    """The layout fields of a row (the API adds the commit's own)."""
    return {"lane": row.lane, "width": row.width, "edges": [list(e) for e in row.edges]}
