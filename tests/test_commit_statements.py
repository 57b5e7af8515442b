"""What a commit asks of the embedded store: the SQL statements it runs, counted (each one
costs a call into SQLite, whatever it reads), and the answers it may keep instead of asking
again (the gc epoch, read again only once another connection wrote to the file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import snapvc


def statements_of_a_commit(repo: snapvc.Repository, state: dict[str, Any], **kwargs: Any) -> list[str]:
    ran: list[str] = []
    conn = repo.backend.file.conn
    conn.set_trace_callback(ran.append)
    try:
        repo.commit(state, **kwargs)
    finally:
        conn.set_trace_callback(None)
    return ran


def test_a_commit_on_a_branch_runs_thirteen_statements(tmp_path: Path) -> None:
    """Read the tip; then in one write transaction: the data version (the pack directory
    and the gc epoch both go by it), the open stream's last block with the next block
    number, the block, the commit's row (its parent's row number looked up inside),
    the row and the block read back (a ref moves only to a commit verifiably stored),
    the ref moved (compared and set in one statement), the reflog entry (the ref's
    number; its last entry and the commit's row in one read; the entry)."""
    with snapvc.open(tmp_path / "r.snapvc") as repo:
        state: dict[str, Any] = {"messages": [], "notes": {}}
        for i in range(3):
            state = {**state, "messages": [*state["messages"], {"role": "user", "content": f"step {i} " * 40}]}
            repo.commit(state, message=f"step {i}")
        state = {**state, "messages": [*state["messages"], {"role": "user", "content": "one more " * 40}]}
        ran = statements_of_a_commit(repo, state, branch="main", message="one more")
        assert len(ran) == 13, "\n".join(ran)
        assert ran[1] == "BEGIN IMMEDIATE" and ran[-1] == "COMMIT"
        assert not any("FROM meta" in statement for statement in ran), ran
        assert repo.checkout() == state
        assert [e.reason for e in repo.reflog("main", limit=2)] == ["commit: one more", "commit: step 2"]
        assert [e.new for e in repo.reflog("main", limit=1)] == [repo.resolve("main")]


def test_a_sweep_another_connection_records_is_seen_by_the_next_commit(tmp_path: Path) -> None:
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo, snapvc.open(path) as other:
        repo.commit({"a": 1})
        epoch = repo.backend.gc_epoch()
        other.backend.bump_gc_epoch()  # as a gc in another process does after its sweep
        repo.commit({"a": 2})  # finds the sweep, forgets its caches and commits afresh
        assert repo._gc_epoch == repo.backend.gc_epoch() == epoch + 1
        repo.backend.bump_gc_epoch()  # this connection's own write: no other connection wrote
        assert other.backend.gc_epoch() == repo.backend.gc_epoch() == epoch + 2
        repo.commit({"a": 3})
        assert repo._gc_epoch == epoch + 2
        assert repo.checkout() == {"a": 3} and other.checkout() == {"a": 3}


def test_a_ref_moved_by_another_connection_is_not_swapped(tmp_path: Path) -> None:
    """The compare-and-swap made as one statement still refuses a ref that is not where
    the caller expects it, and says where it is."""
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo, snapvc.open(path) as other:
        first = repo.commit({"a": 1})
        second = other.commit({"a": 2})
        third = repo.commit_tree({"a": 3}, parents=[first.id])
        assert not repo.refs.compare_and_swap("refs/heads/main", first.id, third.id, "test")
        assert repo.refs.get("refs/heads/main") == second.id
        assert repo.refs.compare_and_swap("refs/heads/main", second.id, third.id, "test")
        assert [e.new for e in other.reflog("main")] == [third.id, second.id, first.id]


def statements_of_a_checkout(repo: snapvc.Repository, rev: str) -> list[str]:
    ran: list[str] = []
    conn = repo.backend.file.conn
    conn.set_trace_callback(ran.append)
    try:
        repo.checkout(rev)
    finally:
        conn.set_trace_callback(None)
    return ran


def test_a_checkout_of_a_branch_reads_its_ref_once(tmp_path: Path) -> None:
    """The lookup of the name (``refs/<name>`` first, as git looks, then the branch: each
    a symbolic and a direct ref) tells which branch the state is taught to; the ref is
    not read again to find out. The commit, its objects and the nodes are cached."""
    with snapvc.open(tmp_path / "r.snapvc") as repo:
        state = {"messages": [{"role": "user", "content": f"step {i} " * 40} for i in range(50)]}
        repo.commit(state)
        repo.checkout("main")
        ran = statements_of_a_checkout(repo, "main")
        assert len(ran) == 4, "\n".join(ran)
        assert sum("FROM refs WHERE name = 'refs/heads/main'" in s for s in ran) == 1, ran
        ran = statements_of_a_checkout(repo, "HEAD")  # HEAD's branch, through HEAD itself
        assert len(ran) == 3, "\n".join(ran)
