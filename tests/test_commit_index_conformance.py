"""The behaviour every ``CommitIndex`` backend shares when reading commits by id: ``get``
and ``get_many`` give the same commits, on memory, SQLite (both table layouts) and S3."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from snapvc.backends.base import Backend
from snapvc.backends.open import open_backend
from snapvc.backends.sqlite.file import BATCH
from snapvc.ids import ObjectId
from snapvc.objects import Commit
from snapvc.store.commit_index import CommitIndex

KINDS = ["memory", "sqlite", "sqlite-format-2", "s3"]


def _location(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "memory":
        return "memory://"
    if kind == "s3":  # a real S3 server: SeaweedFS on 127.0.0.1 (tests/conftest.py)
        return str(request.getfixturevalue("s3_url"))
    return str(tmp_path / "commits.snapvc")


def _open(kind: str, location: str) -> Backend:
    # A format 2 file keeps the first layout of table ``commits`` (ids of parents), format 3
    # the lean one (row numbers): both are read here.
    return open_backend(location, **({"format": 2} if kind == "sqlite-format-2" else {}))


@pytest.fixture(params=KINDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    opened = _open(request.param, _location(request.param, tmp_path, request))
    yield opened
    opened.close()


def _history(n: int, *, tag: str = "", merge_every: int = 0) -> list[Commit]:
    """``n`` commits, each the child of the one before (a merge of the one before and the
    root every ``merge_every``), with metadata to read back."""
    out: list[Commit] = []
    for i in range(n):
        parents: tuple[ObjectId, ...] = (out[-1].id,) if out else ()
        if merge_every and i > 1 and i % merge_every == 0:
            parents += (out[0].id,)
        commit, _ = Commit.create(tree=ObjectId.of(f"tree {tag}{i}".encode()), parents=parents, author="a",
                                  timestamp_us=i, message=f"commit {tag}{i}", metadata={"step": i, "tag": tag},
                                  generation=i + 1)
        out.append(commit)
    return out


def _add(backend: Backend, commits: list[Commit]) -> None:
    with backend.transaction():
        for commit in commits:
            backend.commits.add(commit)


def test_is_a_commit_index(backend: Backend) -> None:
    assert isinstance(backend.commits, CommitIndex)


def test_get_many_gives_the_commits_it_holds_by_id(backend: Backend) -> None:
    commits = _history(7, merge_every=3)
    _add(backend, commits)
    unknown = ObjectId.of(b"no such commit")
    wanted = [commits[5].id, unknown, commits[0].id, commits[5].id, commits[3].id]  # a repeat, a stranger
    got = backend.commits.get_many(wanted)
    assert got == {c.id: c for c in (commits[5], commits[0], commits[3])}  # the unknown id is left out
    for oid, commit in got.items():
        assert commit == backend.commits.get(oid)
        assert commit.encode() == next(c for c in commits if c.id == oid).encode()  # every field as written
        assert type(oid) is ObjectId and type(commit.tree) is ObjectId
    assert got[commits[3].id].parents == (commits[2].id, commits[0].id)  # a merge keeps both parents
    assert got[commits[3].id].metadata == {"step": 3, "tag": ""}


def test_get_many_of_nothing_and_of_strangers(backend: Backend) -> None:
    assert backend.commits.get_many([]) == {}
    assert backend.commits.get_many(iter([ObjectId.of(b"one"), ObjectId.of(b"two")])) == {}
    _add(backend, _history(2))
    assert backend.commits.get_many([ObjectId.of(b"one")]) == {}


def test_get_many_reads_more_ids_than_one_statement_binds(backend: Backend) -> None:
    commits = _history(BATCH * 2 + 7)
    _add(backend, commits)
    got = backend.commits.get_many(c.id for c in reversed(commits))  # any iterable, any order
    assert got == {c.id: c for c in commits}


def test_get_many_finds_a_commit_another_client_added(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """A second client (another process) adds commits after this one has read: ``get_many``
    finds them, as ``get`` does (S3 looks for packs written since)."""
    for kind in ("sqlite", "s3"):
        location = _location(kind, tmp_path, request)
        first, second = _open(kind, location), _open(kind, location)
        try:
            old = _history(3, tag=f"{kind} old ")
            _add(first, old)
            assert first.commits.get_many([c.id for c in old]) == {c.id: c for c in old}
            new = _history(2, tag=f"{kind} new ")
            _add(second, new)
            wanted = [old[0].id, new[1].id, new[0].id]
            assert first.commits.get_many(wanted) == {c.id: c for c in (old[0], new[1], new[0])}
        finally:
            second.close()
            first.close()
