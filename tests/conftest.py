"""Fixtures shared by several test modules: a real S3 server (SeaweedFS) for the S3 backend,
and counts of what the encoder does (chunks hashed, map entries checked one by one)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import pytest

from snapvc.encoding import reuse, writer
from snapvc.objects import BLOB
from tests.seaweed import SKIP_REASON, SeaweedServer, weed_binary


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    """One ``weed mini`` on 127.0.0.1 for the whole run, its client variables in the
    environment (subprocesses inherit them); stopped by its process id at the end."""
    if weed_binary() is None:
        pytest.skip(SKIP_REASON)
    pytest.importorskip("obstore", reason="the S3 backend needs obstore (the s3 extra)")
    with SeaweedServer.running(tmp_path_factory.mktemp("seaweedfs")) as server:
        yield server


@pytest.fixture(scope="session")
def s3_bucket(seaweed: SeaweedServer) -> str:
    """The bucket the tests share. (SeaweedFS gives each bucket volumes of its own, and a
    small server runs out of them after a few dozen buckets: tests get a prefix each.)"""
    return seaweed.create_bucket()


_prefixes = itertools.count(1)


@pytest.fixture
def s3_url(s3_bucket: str) -> str:
    """A repository location of its own: a fresh prefix in the shared bucket."""
    return f"s3://{s3_bucket}/test-{os.getpid()}-{next(_prefixes)}"


@pytest.fixture
def chunks_hashed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the chunks (BLOB objects) the encoder hashed since the list was last
    emptied."""
    hashed: list[int] = []
    real = writer.object_bytes

    def counting(kind: int, payload: bytes) -> Any:
        if kind == BLOB:
            hashed.append(len(payload))
        return real(kind, payload)

    monkeypatch.setattr(writer, "object_bytes", counting)
    return hashed


@pytest.fixture
def entries_checked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many map entries the encoder checked one by one since the list was last
    emptied (each old entry a dict walks is one ``reuse.element_unchanged``)."""
    checked: list[int] = []
    real = reuse.element_unchanged

    def counting(before: Any, value: Any, below_trusted: bool) -> bool:
        checked.append(1)
        return real(before, value, below_trusted)

    monkeypatch.setattr(reuse, "element_unchanged", counting)
    return checked
