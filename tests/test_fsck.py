"""fsck names what is damaged (by id, and by the refs and state paths that reach it);
salvage saves what is whole; the commands exit 1 on a problem."""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

import snapvc
from snapvc.encoding.nodes import decode_node
from snapvc.maintenance.fsck import salvage
from snapvc.objects import MAP
from tests.test_cli import run

DOC = "".join(f"Paragraph {i}: what the agent found about source {i % 7}.\n" for i in range(400))


def _make(path: Path, format: int = 3) -> dict:
    state = {"doc": DOC, "notes": {"plan": "compare", "long": "n" * 4000}, "messages": []}
    with snapvc.open(path, format=format) as repo:
        for i in range(4):
            state["messages"].append({"role": "user", "content": f"question {i} " * 60})
            repo.commit(state, message=f"step {i}")
        repo.branch("side", at="main~2")
    return state


def _object_at(repo: snapvc.Repository, *path: str) -> bytes:
    """The id of the object holding the value at ``path`` (a long str: its TEXT node)."""
    oid = repo.get_commit(repo.resolve("main")).tree
    for key in path:
        kind, node = decode_node(oid, repo.loader.fetch(oid))
        assert kind == MAP and node[1] == 0, "test states keep small root maps"
        oid = node[2][key]
    return oid


def _sql(path: Path, statement: str, *args: object) -> None:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(statement, args)
    conn.close()


def test_a_sound_repository_is_ok(tmp_path: Path) -> None:
    _make(tmp_path / "ok.snapvc")
    with snapvc.open(tmp_path / "ok.snapvc") as repo:
        report = repo.fsck()
    assert report.ok and report.problems == () and report.commits == 4 and report.refs == 2
    assert report.objects > 4 and report.reflog_entries >= 5
    assert "no problems" in str(report)


def test_a_flipped_byte_is_named_with_its_refs_and_path(tmp_path: Path) -> None:
    path = tmp_path / "flip.snapvc"
    _make(path, format=2)  # format 2: one frame a row in table 'objects' (format 3: test_fsck_packs.py)
    with snapvc.open(path) as repo:
        doc = _object_at(repo, "doc")
    conn = sqlite3.connect(path)
    with conn:
        frame = bytearray(conn.execute("SELECT data FROM objects WHERE id = ?", (doc,)).fetchone()[0])
        frame[len(frame) // 2] ^= 0x10
        conn.execute("UPDATE objects SET data = ? WHERE id = ?", (bytes(frame), doc))
    conn.close()
    with snapvc.open(path) as repo:
        report = repo.fsck()
    assert not report.ok
    [problem] = [p for p in report.problems if p.object_id == doc]
    assert problem.kind == "corrupt" and doc.hex() in str(report)
    assert "refs/heads/main" in problem.refs and "refs/heads/side" in problem.refs
    assert any(p.endswith(": state['doc']") for p in problem.paths)


def test_a_row_whose_data_became_text_is_corrupt_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "text.snapvc"
    _make(path, format=2)  # format 2: one frame a row in table 'objects' (format 3: test_fsck_packs.py)
    with snapvc.open(path) as repo:
        doc = _object_at(repo, "doc")
    _sql(path, "UPDATE objects SET data = CAST(X'C3FF00' AS TEXT) WHERE id = ?", doc)
    with snapvc.open(path) as repo:
        with pytest.raises(snapvc.CorruptObjectError, match=doc.hex()):
            repo.checkout("main")
        assert [p.kind for p in repo.fsck().problems if p.object_id == doc] == ["corrupt"]


def test_a_missing_object_is_named_with_the_commits_reaching_it(tmp_path: Path) -> None:
    path = tmp_path / "missing.snapvc"
    _make(path, format=2)  # format 2: one frame a row in table 'objects' (format 3: test_fsck_packs.py)
    with snapvc.open(path) as repo:
        long_note = _object_at(repo, "notes")
        kind, node = decode_node(long_note, repo.loader.fetch(long_note))
    target = node[2]["long"] if kind == MAP and "long" in node[3] else long_note
    _sql(path, "DELETE FROM objects WHERE id = ?", target)
    with snapvc.open(path) as repo:
        report = repo.fsck()
        assert [p.kind for p in report.problems if p.object_id == target] == ["missing"]
        problem = next(p for p in report.problems if p.object_id == target)
        assert any("state['notes']" in p for p in problem.paths)
        with pytest.raises(snapvc.ObjectNotFoundError):
            repo.checkout("main")


def test_a_damaged_commit_row_and_a_ref_to_nothing(tmp_path: Path) -> None:
    path = tmp_path / "commits.snapvc"
    _make(path)
    with snapvc.open(path) as repo:
        tip = repo.resolve("main")
    _sql(path, "UPDATE commits SET message = 'rewritten' WHERE id = ?", tip)
    _sql(path, "INSERT INTO refs (name, target) VALUES ('refs/heads/ghost', ?)", b"\x07" * 32)
    with snapvc.open(path) as repo:
        report = repo.fsck()
    kinds = {(p.kind, p.object_id) for p in report.problems}
    assert ("corrupt", tip) in kinds and ("bad-ref", b"\x07" * 32) in kinds
    assert next(p for p in report.problems if p.kind == "bad-ref").refs == ("refs/heads/ghost",)


def test_salvage_writes_every_whole_commit_and_leaves_out_the_damaged(tmp_path: Path) -> None:
    path = tmp_path / "salvage.snapvc"
    state = _make(path, format=2)  # format 2: one frame a row in table 'objects' (format 3: test_fsck_packs.py)
    with snapvc.open(path) as repo:
        last_message = next(iter(repo.log("main")))
        newest = _object_at(repo, "messages")
    # The newest message list is only in the last commit: losing it damages that one.
    _sql(path, "DELETE FROM objects WHERE id = ?", newest)
    with snapvc.open(path) as repo:
        result = salvage(repo, tmp_path / "out")
    assert result.damaged == (last_message.id,) and len(result.saved) == 3
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    assert [e["saved"] for e in index] == [True, True, True, False]
    saved = json.loads((tmp_path / "out" / f"{index[2]['id']}.json").read_text())
    assert snapvc.from_jsonable(saved) == {**state, "messages": state["messages"][:3]}


@pytest.mark.slow
def test_fsck_and_gc_commands(tmp_path: Path) -> None:
    path = tmp_path / "agent.snapvc"
    _make(path, format=2)  # format 2: one frame a row in table 'objects' (format 3: test_fsck_packs.py)
    done = run("fsck", cwd=tmp_path)
    assert done.returncode == 0 and "no problems" in done.stdout
    done = run("gc", "--dry-run", "--json", cwd=tmp_path)
    assert done.returncode == 0 and json.loads(done.stdout)["dry_run"] is True
    done = run("gc", "--keep-last", "2", "--expire-reflog", "0", "--grace", "0", cwd=tmp_path)
    assert done.returncode == 0 and "main: kept 2 of 4 commits" in done.stdout, done.stdout + done.stderr
    with snapvc.open(path) as repo:
        doc = _object_at(repo, "doc")
    _sql(path, "UPDATE objects SET data = X'01ff' WHERE id = ?", doc)
    done = run("fsck", "--json", "--salvage", str(tmp_path / "saved"), cwd=tmp_path)
    assert done.returncode == 1
    data = json.loads(done.stdout)
    assert not data["ok"] and data["problems"][0]["object"] == doc.hex() and data["salvage"]["saved"] == []
    done = run("fsck", cwd=tmp_path)
    assert done.returncode == 1 and f"corrupt {doc.hex()}" in done.stdout
    done = run("gc", "--grace", "0", cwd=tmp_path)
    assert done.returncode == 2 and "gc stopped before deleting anything" in done.stderr


def test_fsck_of_a_larger_repository_takes_little(tmp_path: Path) -> None:
    """Not a timing assertion: the figure docs/reliability.md quotes, printed (-s)."""
    path = tmp_path / "big.snapvc"
    with snapvc.open(path) as repo:
        state: dict = {"messages": [], "doc": DOC}
        for i in range(200):
            state["messages"].append({"role": "assistant", "content": f"reply {i} " * 50})
            repo.commit(state, message=f"step {i}")
    with snapvc.open(path) as repo:
        started = time.perf_counter()
        report = repo.fsck()
        seconds = time.perf_counter() - started
    assert report.ok and report.commits == 200
    print(f"fsck: {report.objects} objects, {report.commits} commits in {seconds:.2f} s")


@pytest.mark.slow
def test_bad_blocks_are_found_never_a_crash_and_never_silent(tmp_path: Path) -> None:
    """64 random bytes written over a random page of the file, 30 times on fresh copies:
    fsck never raises; it names the damage (SQLite's integrity check, a corrupt object,
    an unreadable row), or, when it finds none, every branch still reads back exactly."""
    original = tmp_path / "original.snapvc"
    with snapvc.open(original) as repo:
        state: dict = {"messages": [], "doc": DOC}
        for i in range(150):
            state["messages"].append({"i": i, "text": f"reply {i} " * 40})
            state["doc"] = state["doc"].replace(f"source {i % 7}", f"source {i % 7}*", 1)
            repo.commit(state, message=f"step {i}")
            if i % 50 == 49:
                repo.branch(f"at-{i}")
        states = {name: repo.checkout(tip) for name, tip in repo.branches().items()}
    pages = original.stat().st_size // 8192
    rng = random.Random(20261123)
    found = clean = 0
    for trial in range(30):
        copy = tmp_path / f"damaged-{trial}.snapvc"
        shutil.copy(original, copy)
        with open(copy, "r+b") as f:
            f.seek(rng.randrange(1, pages) * 8192 + rng.randrange(8192 - 64))
            f.write(rng.randbytes(64))
        try:
            repo = snapvc.open(copy)
        except snapvc.SnapvcError:
            found += 1
            continue
        with repo:
            report = repo.fsck()
            if report.ok:
                clean += 1
                assert {name: repo.checkout(tip) for name, tip in repo.branches().items()} == states
            else:
                found += 1
                assert all(p.kind in ("storage", "corrupt", "missing", "bad-ref") for p in report.problems)
                assert str(report.problems[0]) in str(report)  # the summary names it
                for name, tip in repo.branches().items():  # reads: the right state, or snapvc's error
                    try:
                        assert repo.checkout(tip) == states[name]
                    except snapvc.SnapvcError:
                        pass
    print(f"bad blocks: {found} found and named, {clean} harmless (free space), of 30")
    assert found >= 10


def test_a_missing_parent_commit_is_named_with_the_commit_that_names_it(tmp_path: Path) -> None:
    path = tmp_path / "parent.snapvc"
    _make(path)
    with snapvc.open(path) as repo:
        child, parent = repo.resolve("main~1"), repo.resolve("main~2")
        # Lost as gc deletes it: the child's link to its row is written out as its id.
        assert repo.commits.delete_many([parent]) == 1
    with snapvc.open(path) as repo:
        report = repo.fsck()
    [problem] = [p for p in report.problems if p.object_id == parent]
    assert problem.kind == "missing" and problem.message == f"a parent commit, named by {child}, is not stored"
    assert "refs/heads/main" in problem.refs and "refs/heads/side" in problem.refs
    assert any(p.startswith("main: commit ") for p in problem.paths)


def test_a_reflog_entry_naming_a_missing_commit_is_a_bad_ref(tmp_path: Path) -> None:
    """A commit only the reflog reaches (the branch was reset away from it), then lost."""
    path = tmp_path / "reflog.snapvc"
    _make(path)
    with snapvc.open(path) as repo:
        dropped = repo.resolve("main")
        repo.reset("main", to="main~1")
        assert repo.fsck().ok
        assert repo.commits.delete_many([dropped]) == 1
    with snapvc.open(path) as repo:
        report = repo.fsck()
    labels = sorted(p.refs[0] for p in report.problems if p.kind == "bad-ref" and p.object_id == dropped)
    assert labels == ["refs/heads/main@{0}", "refs/heads/main@{1}"]  # the reset's old, the commit's new
    assert all("which is not stored" in p.message for p in report.problems if p.object_id == dropped)
    assert "2 bad-ref" in str(report)
