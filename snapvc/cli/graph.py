"""A commit graph drawn as ``git log --graph`` draws it: one column per line of history.

``graph_rows(commits, labels)`` takes commits newest first (a topological order, as
``Repository.log`` yields them) and returns, for each commit, the graph prefix to print
before it, with connector rows (``|/``, ``|\\``) between where lines fork or join.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from snapvc.ids import ObjectId
from snapvc.objects import Commit

__all__ = ["GraphRow", "graph_rows"]


@dataclass(frozen=True, slots=True)
class GraphRow:
    """``commit`` is None for a connector row drawn between commits."""

    graph: str
    commit: Commit | None


def graph_rows(commits: Iterable[Commit]) -> Iterator[GraphRow]:
    columns: list[ObjectId | None] = []  # the commit each column is waiting for
    for commit in commits:
        waiting = [i for i, c in enumerate(columns) if c == commit.id]
        if waiting:
            col = waiting[0]
            if len(waiting) > 1:  # lines of several children end here: join them first
                width = len(columns)
                for j in waiting[1:]:
                    columns[j] = None
                yield GraphRow(_connector(columns, waiting[1:], "/", width), None)
                _trim(columns)
        else:
            col = columns.index(None) if None in columns else len(columns)
            if col == len(columns):
                columns.append(commit.id)
            else:
                columns[col] = commit.id
        yield GraphRow(_cells(columns, {col: "*"}, len(columns)), commit)
        parents = list(commit.parents)
        columns[col] = parents[0] if parents else None
        extra = []
        for p in parents[1:]:
            if p in columns:
                continue
            slot = columns.index(None) if None in columns else len(columns)
            if slot == len(columns):
                columns.append(p)
            else:
                columns[slot] = p
            extra.append(slot)
        if extra:
            yield GraphRow(_connector(columns, extra, "\\"), None)
        _trim(columns)


def _trim(columns: list[ObjectId | None]) -> None:
    while columns and columns[-1] is None:
        columns.pop()


def _cells(columns: list[ObjectId | None], marks: dict[int, str], width: int) -> str:
    out = []
    for i in range(width):
        if i in marks:
            out.append(marks[i])
        elif i < len(columns) and columns[i] is not None:
            out.append("|")
        else:
            out.append(" ")
    return " ".join(out).rstrip()


def _connector(columns: list[ObjectId | None], moved: list[int], mark: str, width: int | None = None) -> str:
    """A row where the lines of ``moved`` columns bend towards (``/``) or away from
    (``\\``) the column on their left."""
    width = len(columns) if width is None else width
    chars = [" "] * (2 * width - 1)
    for i in range(width):
        if i < len(columns) and columns[i] is not None and i not in moved:
            chars[2 * i] = "|"
    for j in moved:
        chars[2 * j - 1] = mark
        if mark == "\\":
            chars[2 * j] = " "
    return "".join(chars).rstrip()
