"""What opening an existing repository costs, counted: no write (a store's tables are
made only when the file lacks them, so an open takes no write lock and waits for no
writer), and no lookup of the user (the author is looked up by the first commit that
needs one)."""

from __future__ import annotations

import getpass
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import snapvc


def _traced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The statements every connection made from now on runs, in order."""
    statements: list[str] = []
    connect = sqlite3.connect

    def traced_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced_connect)
    return statements


def test_opening_an_existing_repository_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.snapvc"
    with snapvc.open(path) as repo:
        repo.commit({"n": 1}, message="one")
    statements = _traced(monkeypatch)
    with snapvc.open(path) as repo:
        opened = list(statements)
        assert repo.checkout("main") == {"n": 1}
    assert opened and not [s for s in opened if s.startswith(("BEGIN IMMEDIATE", "CREATE", "INSERT", "UPDATE"))], opened
    # A new file still gets its tables, and a file that lacks one (made by an older
    # snapvc, or an id map asked for) gets it on open.
    statements.clear()
    with snapvc.open(tmp_path / "new.snapvc") as repo:
        repo.commit({"n": 2})
    assert any(s.startswith("CREATE TABLE IF NOT EXISTS packs") for s in statements)
    with snapvc.open(path) as repo:
        repo.backend.id_map("example_map").put_many({b"a" * 32: b"b" * 20})
        assert repo.backend.id_map("example_map").get_many([b"a" * 32]) == {b"a" * 32: b"b" * 20}


def test_the_author_is_looked_up_by_the_first_commit_not_by_open(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.snapvc"
    lookups: list[str] = []
    monkeypatch.delenv("SNAPVC_AUTHOR", raising=False)
    monkeypatch.setattr(getpass, "getuser", lambda: lookups.append("getuser") or "someone")
    with snapvc.open(path) as repo:
        assert lookups == []
        first = repo.commit({"n": 1})
        second = repo.commit({"n": 2})
        assert lookups == ["getuser"]
        assert first.author == second.author == "someone"
    with snapvc.open(path) as repo:
        assert repo.checkout("main") == {"n": 2} and repo.snapshot("main")["n"] == 2
        assert lookups == ["getuser"]
    with snapvc.open(path, author="ada") as repo:
        assert repo.commit({"n": 3}).author == "ada"
    assert lookups == ["getuser"]
