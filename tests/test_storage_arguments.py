"""Arguments of the storage layer that are refused, or kept, as given: a grace period of
NaN (every comparison with it is false, so it would have passed as no grace at all), a
memory repository's durability mode, a frame decoded without what it needs, and an S3
conditional write that lost, which is a ``RepositoryError`` naming the object."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import snapvc
from snapvc.ids import ObjectId
from snapvc.store.codec import decode_frame, encode_delta_frame, encode_frame


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_grace_of_nan_is_refused_and_keeps_what_is_young(tmp_path: Path, dry_run: bool) -> None:
    clock = Clock()
    with snapvc.open(tmp_path / "nan.snapvc", clock=clock) as repo:
        repo.commit({"a": 1})
        # Another writer's work in progress: stored, no ref yet.
        draft = repo.commit_tree({"draft": "x" * 5000}, parents=[repo.resolve("main")])
        clock.now += 10
        with pytest.raises(snapvc.InvalidArgumentError, match="grace is a number of seconds, not nan") as raised:
            repo.gc(grace=math.nan, reflog_expiry=0, dry_run=dry_run)
        assert raised.value.argument == "grace"
        assert repo.checkout(draft.id) == {"draft": "x" * 5000}
        assert repo.gc(grace=60, reflog_expiry=0).removed_commits == ()  # young: kept by a grace that is one


def test_a_memory_repository_keeps_the_durability_it_is_opened_with() -> None:
    repo = snapvc.open("memory://", durability="sync")
    assert repo.durability == "sync"
    repo.durability = "batch"
    assert repo.durability == "batch"


# SQLite's ``PRAGMA synchronous`` values: what each durability mode promises rests on them
# (FULL: every commit fsynced; NORMAL: the log fsynced at checkpoints; OFF: never).
_SYNCHRONOUS = {"sync": 2, "normal": 1, "batch": 0}


@pytest.mark.parametrize("mode", ["sync", "normal", "batch"])
@pytest.mark.parametrize("format", [2, 3])
def test_each_durability_mode_sets_sqlite_synchronous_on_the_connection_that_commits(tmp_path: Path, mode: str,
                                                                                     format: int) -> None:
    """Opened in a mode, or switched to it: the setting SQLite applies to the commits of
    the connection that writes them is the mode's (``sync``: FULL, each commit fsynced)."""
    path = tmp_path / "modes.snapvc"

    def applied(repo: snapvc.Repository) -> int:
        value: int = repo.backend.file.conn.execute("PRAGMA synchronous").fetchone()[0]
        return value

    with snapvc.open(path, durability=mode, format=format) as repo:
        repo.commit({"step": 0})
        assert repo.durability == mode and applied(repo) == _SYNCHRONOUS[mode]
    with snapvc.open(path, create=False, durability=mode) as repo:
        assert applied(repo) == _SYNCHRONOUS[mode]
        repo.commit({"step": 1})
        assert applied(repo) == _SYNCHRONOUS[mode]
        for other in _SYNCHRONOUS:
            repo.durability = other
            repo.commit({"step": other})
            assert repo.durability == other and applied(repo) == _SYNCHRONOUS[other]


def test_a_frame_decoded_without_its_base_or_dictionary_is_refused_naming_the_object() -> None:
    data = b"the same words, again and again; " * 40
    base_id = ObjectId(b"\x02" * 32)
    oid = ObjectId(b"\x03" * 32)
    delta = encode_delta_frame(data + b"!", base_id, data, 1)
    assert delta is not None
    with pytest.raises(snapvc.InvalidArgumentError, match=f"object {oid}: a delta frame is decoded with its base") \
            as raised:
        decode_frame(oid, delta)
    assert raised.value.argument == "base"
    assert decode_frame(oid, delta, base=data) == data + b"!"
    dict_frame = bytes((2,)) + encode_frame(data)[1:]  # a dictionary frame's codec byte
    with pytest.raises(snapvc.InvalidArgumentError, match="a dictionary frame is decoded with its dictionary"):
        decode_frame(oid, dict_frame)


def test_a_conditional_s3_write_that_lost_is_a_repository_error_naming_the_object(s3_url: str) -> None:
    from snapvc.backends.s3.client import PreconditionFailed, S3Client, S3Location

    client = S3Client(S3Location.parse(s3_url))
    try:
        etag = client.put("probe", b"first", create=True)
        with pytest.raises(PreconditionFailed) as raised:
            client.put("probe", b"second", create=True)
        assert isinstance(raised.value, snapvc.RepositoryError)
        assert str(raised.value) == f"writing {client.where('probe')} refused: it exists already"
        client.put("probe", b"third", if_match=etag)
        with pytest.raises(PreconditionFailed, match="it changed since it was read"):
            client.put("probe", b"fourth", if_match=etag)
        assert client.get("probe")[0] == b"third"  # type: ignore[index]
    finally:
        client.close()
