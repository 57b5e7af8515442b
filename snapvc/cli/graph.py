"""A commit graph drawn as ``git log --graph`` draws it: one column per line of history.

``graph_rows(commits)`` takes commits newest first (a topological order, as
``Repository.log`` yields them) and returns, for each commit, the graph prefix to print
before it, with connector rows between where lines fork, join or shift.

How to read a drawing (the tests parse drawings back into edges by these rules). Even
character positions ``2*i`` are the columns, odd positions lie between two columns:

==========================  =============================================================
``*`` at column i           the commit; the line that came down column i ends in it, and
                            its first parent's line leaves it down column i
``|`` at column i           a line going straight down column i
``/`` at ``2*i - 1``        the line of column i moves one column left; each ``_`` run
                            on its left carries it one column further
``\\`` at ``2*i + 1``        the line of column i moves one column right; each ``_`` on
                            its right carries it one column further
==========================  =============================================================

A line may both go straight and move (``|\\``): that is a merge commit's line to a
further parent. Lines waiting for the same commit join its column just before its row;
when other lines stand between them the joining line crosses them (``|_|/``), one join a
row, so no two crossings share a character. A new parent's column is opened right next
to the merge, pushing the lines on its right one column over (``|\\ \\``), and a column
left empty is closed by moving the lines on its right one column back (``| |/``), so the
drawing stays as narrow as the history is wide, as git keeps it.
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


Columns = list[ObjectId | None]  # the commit each column's line is waiting for; None: empty


def graph_rows(commits: Iterable[Commit]) -> Iterator[GraphRow]:
    columns: Columns = []
    for commit in commits:
        waiting = [i for i, c in enumerate(columns) if c == commit.id]
        if waiting:
            col = waiting[0]
            for j in waiting[1:]:  # (lines join as soon as they meet, so seldom more than one)
                yield GraphRow(_draw(columns, {j: col}), None)
                columns[j] = None
        else:  # a tip: no line leads here yet
            col = len(columns)
            columns.append(commit.id)
        yield GraphRow(_draw(columns, {}, star=col), commit)
        if not commit.parents:  # a root: its line ends here
            columns[col] = None
            yield from _close_gaps(columns)
            continue
        first, *further = commit.parents
        # A parent another line already waits for is joined to that line at once, as git
        # does, so a commit with many children is not drawn with a column for each.
        for parent in reversed(further):
            if parent in columns:
                yield GraphRow(_draw(columns, {}, fork=(col, columns.index(parent))), None)
            else:  # a column of its own next to the merge; the lines on its right move over
                moves = {i: i + 1 for i in range(col + 1, len(columns)) if columns[i] is not None}
                yield GraphRow(_draw(columns, moves, fork=(col, col + 1)), None)
                columns.insert(col + 1, parent)
        other = columns.index(first) if first in columns else None
        columns[col] = first
        if other is not None:  # the line on the right joins the one on the left
            left, right = sorted((col, other))
            yield GraphRow(_draw(columns, {right: left}), None)
            columns[right] = None
        yield from _close_gaps(columns)


def _close_gaps(columns: Columns) -> Iterator[GraphRow]:
    """Rows that close the empty columns between lines, one column a row; ``columns`` is
    updated to match."""
    while columns and columns[-1] is None:
        columns.pop()
    while None in columns:
        gap = columns.index(None)
        moves = {i: i - 1 for i in range(gap + 1, len(columns)) if columns[i] is not None}
        yield GraphRow(_draw(columns, moves), None)
        del columns[gap]
        while columns and columns[-1] is None:
            columns.pop()


def _draw(columns: Columns, moves: dict[int, int], star: int | None = None,
          fork: tuple[int, int] | None = None) -> str:
    """One row: ``|`` for each line going straight down, a run of ``/`` or ``\\`` and
    ``_`` for each line in ``moves`` (its column above: its column below), ``*`` at
    ``star``, and at ``fork`` (a column above, a column below) a line that leaves a
    column whose own line goes on."""
    width = max([len(columns), *(b + 1 for b in moves.values()), fork[1] + 1 if fork else 0])
    chars = [" "] * (2 * width - 1)
    for i, waiting in enumerate(columns):
        if waiting is not None and i not in moves:
            chars[2 * i] = "|"
    if star is not None:
        chars[2 * star] = "*"
    runs = list(moves.items()) + ([fork] if fork else [])
    for a, b in runs:
        if b < a:
            chars[2 * a - 1] = "/"
            for k in range(2 * b + 1, 2 * a - 1, 2):
                chars[k] = "_"
        elif b > a:
            chars[2 * a + 1] = "\\"
            for k in range(2 * a + 3, 2 * b, 2):
                chars[k] = "_"
    return "".join(chars).rstrip()
