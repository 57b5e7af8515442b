"""The S3 tests do not depend on the caller's ``AWS_*`` variables: a CI runner's
credentials, session token or region in the environment neither turn on the test
server's authentication (``weed mini`` does when it finds credentials) nor reach the
tests' S3 clients. Starts a server of its own, with such variables set."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import snapvc
from tests.seaweed import SKIP_REASON, SeaweedServer, weed_binary

# Starts a SeaweedFS server of its own: seconds.
pytestmark = pytest.mark.slow

CALLERS = {"AWS_ACCESS_KEY_ID": "caller-key", "AWS_SECRET_ACCESS_KEY": "caller-secret",
           "AWS_SESSION_TOKEN": "caller-token", "AWS_REGION": "eu-west-3", "AWS_DEFAULT_REGION": "eu-west-3"}


def test_the_callers_aws_variables_reach_neither_the_server_nor_the_clients(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if weed_binary() is None:
        pytest.skip(SKIP_REASON)
    pytest.importorskip("obstore", reason="the S3 backend needs obstore (the s3 extra)")
    for key, value in CALLERS.items():
        monkeypatch.setenv(key, value)
    with SeaweedServer.running(tmp_path / "seaweedfs") as server:
        bucket = server.create_bucket()  # unsigned: refused if the server had turned authentication on
        assert {key: value for key, value in os.environ.items() if key.startswith("AWS_")} == server.environment()
        with snapvc.open(f"s3://{bucket}/repo") as repo:
            repo.commit({"step": 1})
        with snapvc.open(f"s3://{bucket}/repo", create=False) as repo:
            assert repo.checkout("main") == {"step": 1}
    for key, value in CALLERS.items():  # the caller's environment, as it was
        assert os.environ[key] == value
