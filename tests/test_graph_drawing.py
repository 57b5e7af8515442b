"""`snapvc log --graph` draws every parent edge where it is: the drawing, parsed back into
edges by the reading rules of ``snapvc/cli/graph.py``, gives exactly the commits' parents.

The parser below is written from those rules alone; it refuses any character it cannot
account for, a line that ends nowhere and a line that starts from nothing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from snapvc.cli.graph import GraphRow, graph_rows
from snapvc.ids import ObjectId, hash_bytes

# Many generated histories, and the command run on a reported one: seconds each.
pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class FakeCommit:
    """What ``graph_rows`` reads of a commit: its id and its parents."""

    id: ObjectId
    parents: tuple[ObjectId, ...]
    name: str


def edges_drawn(rows: list[GraphRow]) -> tuple[set[tuple[ObjectId, ObjectId]], Counter[ObjectId]]:
    """(child, parent) edges the drawing shows, and the children of the lines still open
    at its bottom (edges to parents that were not drawn)."""
    lines: dict[int, set[ObjectId]] = {}  # column: the children whose edges run down it
    edges: set[tuple[ObjectId, ObjectId]] = set()
    for number, row in enumerate(rows):
        g = row.graph
        where = f"row {number} {g!r}"

        def at(k: int, g: str = g) -> str:
            return g[k] if 0 <= k < len(g) else " "

        if row.commit is not None:
            assert g.count("*") == 1 and g.index("*") % 2 == 0, where
            col = g.index("*") // 2
            for child in lines.pop(col, set()):
                edges.add((child, row.commit.id))
            straight = {k // 2 for k, ch in enumerate(g) if ch == "|"}
            assert set(g) <= {" ", "|", "*"} and all(k % 2 == 0 for k, ch in enumerate(g) if ch == "|"), where
            assert straight == set(lines), f"{where}: lines {sorted(lines)} above, {sorted(straight)} drawn"
            if row.commit.parents:
                lines[col] = {row.commit.id}
            continue
        below: dict[int, set[ObjectId]] = {}
        used: set[int] = set()

        def take(k: int, used: set[int] = used, where: str = where) -> None:
            assert k not in used, f"{where}: position {k} read for two lines"
            used.add(k)

        for i, children in lines.items():
            targets = []
            if at(2 * i) == "|":
                take(2 * i)
                targets.append(i)
            if at(2 * i - 1) == "/":
                k = 2 * i - 1
                take(k)
                while at(k - 2) == "_":
                    k -= 2
                    take(k)
                targets.append((k - 1) // 2)
            if at(2 * i + 1) == "\\":
                k = 2 * i + 1
                take(k)
                while at(k + 2) == "_":
                    k += 2
                    take(k)
                targets.append((k + 1) // 2)
            assert targets, f"{where}: the line of column {i} ends nowhere"
            for t in targets:
                below.setdefault(t, set()).update(children)
        stray = [k for k, ch in enumerate(g) if ch != " " and k not in used]
        assert not stray, f"{where}: characters at {stray} belong to no line"
        lines = below
    return edges, Counter(child for children in lines.values() for child in children)


def check_drawing(commits: list[FakeCommit]) -> list[GraphRow]:
    rows = list(graph_rows(commits))
    assert [r.commit for r in rows if r.commit is not None] == commits
    listed = {c.id for c in commits}
    edges, open_at_bottom = edges_drawn(rows)
    assert edges == {(c.id, p) for c in commits for p in c.parents if p in listed}
    assert open_at_bottom == Counter(c.id for c in commits for p in c.parents if p not in listed)
    return rows


def dag(parent_lists: list[list[int]]) -> list[FakeCommit]:
    """Commits numbered in creation order (parents have smaller numbers), newest first."""
    ids = [ObjectId(hash_bytes(b"commit %d" % n)) for n in range(len(parent_lists))]
    made = [FakeCommit(ids[n], tuple(ids[p] for p in ps), f"c{n}") for n, ps in enumerate(parent_lists)]
    return made[::-1]


@st.composite
def dags(draw: st.DrawFn) -> list[list[int]]:
    size = draw(st.integers(1, 40))
    out: list[list[int]] = [[]]
    for n in range(1, size):
        count = draw(st.sampled_from([0, 1, 1, 1, 1, 2, 2, 3]) if n > 1 else st.integers(0, 1))
        out.append(sorted(draw(st.sets(st.integers(0, n - 1), min_size=min(count, n), max_size=min(count, n)))))
    return out


@settings(max_examples=400, derandomize=True, deadline=None)
@given(dags(), st.data())
def test_every_parent_edge_is_drawn_where_it_is(parent_lists: list[list[int]], data: st.DataObject) -> None:
    commits = dag(parent_lists)
    check_drawing(commits)
    # A log cut short (-n, or a filter) leaves lines open at the bottom, to commits not shown.
    check_drawing(commits[: data.draw(st.integers(1, len(commits)))])


def test_the_crossing_edge_of_the_report_joins_its_real_parent() -> None:
    # base <- m1 <- m2 <- m3 on main; m1 <- f1 on f; base <- w1 <- w2 <- w2b <- w3 on w:
    # f1's line crosses w's, and must reach m1.
    names = ["base", "w1", "m1", "f1", "w2", "w2b", "m2", "w3", "m3"]
    parents = {"base": [], "w1": ["base"], "m1": ["base"], "f1": ["m1"], "w2": ["w1"], "w2b": ["w2"],
               "m2": ["m1"], "w3": ["w2b"], "m3": ["m2"]}
    check_drawing(dag([[names.index(p) for p in parents[n]] for n in names]))


def test_three_branches_off_one_base_all_reach_it() -> None:
    check_drawing(dag([[], [0], [0], [0], [1], [2], [3]]))


def test_a_merge_of_a_parent_another_line_already_waits_for() -> None:
    # c3 merges c1, which c2's line is waiting for too; an octopus merge of three.
    check_drawing(dag([[], [0], [1], [2, 1], [], [3, 4, 0]]))


def test_log_graph_of_the_reported_repository(tmp_path: Path) -> None:
    repo = tmp_path / "g.snapvc"

    def snapvc(*args: str, stdin: str | None = None) -> str:
        done = subprocess.run([sys.executable, "-m", "snapvc", "--no-pager", "--color", "never", *args],
                              input=stdin, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                              env={**os.environ, "SNAPVC_REPO": str(repo)})
        assert done.returncode == 0, done.stderr
        return done.stdout

    def commit(branch: str, message: str) -> None:
        snapvc("commit", "-b", branch, "-m", message, stdin=f'{{"v": "{message}"}}')

    snapvc("init", str(repo))
    for branch, message in [("main", "base"), ("w", "w1"), ("main", "m1")]:
        commit(branch, message)
    snapvc("branch", "f", "main")
    for branch, message in [("f", "f1"), ("w", "w2"), ("w", "w2b"), ("main", "m2"), ("w", "w3"), ("main", "m3")]:
        commit(branch, message)
    drawn = snapvc("log", "--graph", "--all").splitlines()
    # Back into rows: a commit row is its graph, the short id, labels, the message.
    commit_row = re.compile(r"^([ |*]*\*[ |]*) [0-9a-f]{8}(?: \(.*\))? (\S+)$")
    rows = []
    for line in drawn:
        match = commit_row.match(line)
        rows.append((match[1].rstrip(), match[2]) if match else (line.rstrip(), None))
    assert sum(1 for _, m in rows if m) == 9, drawn
    # (`commit -b w` on a branch that does not exist yet starts it as a new root.)
    parents = {"base": [], "w1": [], "m1": ["base"], "f1": ["m1"], "w2": ["w1"], "w2b": ["w2"],
               "m2": ["m1"], "w3": ["w2b"], "m3": ["m2"]}
    ids = {m: ObjectId(hash_bytes(m.encode())) for m in parents}
    fakes = {m: FakeCommit(ids[m], tuple(ids[p] for p in parents[m]), m) for m in parents}
    graph_rows_parsed = [GraphRow(g, fakes[m] if m else None) for g, m in rows]
    edges, open_at_bottom = edges_drawn(graph_rows_parsed)
    assert edges == {(ids[c], ids[p]) for c in parents for p in parents[c]} and not open_at_bottom
