"""The S3 client of a repository on S3-compatible storage: the few requests snapvc makes,
over one obstore ``S3Store``, counted; where a repository is (``S3Location``); its marker
object and small settings (``meta/<key>``).

obstore is imported when a client is made, not with this module: the ``s3`` extra is
needed only to use S3. Credentials come from the environment, as for any AWS client.
"""

from __future__ import annotations

import builtins
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from snapvc.errors import ExtraMissingError, FormatVersionError, RepositoryError, RepositoryNotFoundError

if TYPE_CHECKING:
    from obstore.store import ClientConfig

__all__ = ["S3Location", "S3Client", "S3Stats", "PreconditionFailed", "parse_s3_url", "read_meta", "write_meta",
           "check_or_create_marker", "REPOSITORY_MARKER", "FORMAT_VERSION", "PARALLEL"]

# Concurrent requests of one client (header reads, ranged reads of many packs).
PARALLEL = 16


def parse_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> ``("bucket", "some/prefix")``; ``RepositoryError`` if malformed."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise RepositoryError(f"{url!r} is not an S3 location: write s3://bucket/prefix")
    return parts.netloc, parts.path.strip("/")

@dataclass
class S3Stats:
    """Requests and bytes one client exchanged with the server, by kind of request."""

    requests: dict[str, int] = field(default_factory=dict)
    bytes_sent: int = 0
    bytes_received: int = 0

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    def copy(self) -> S3Stats:
        return S3Stats(dict(self.requests), self.bytes_sent, self.bytes_received)

    def __sub__(self, other: S3Stats) -> S3Stats:
        kinds = set(self.requests) | set(other.requests)
        return S3Stats({k: self.requests.get(k, 0) - other.requests.get(k, 0) for k in sorted(kinds)},
                       self.bytes_sent - other.bytes_sent, self.bytes_received - other.bytes_received)

    def __str__(self) -> str:
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(self.requests.items()) if n)
        return f"{self.total_requests} requests ({kinds}); {self.bytes_sent:,} bytes sent, {self.bytes_received:,} received"


def _reason(exc: BaseException) -> str:
    """An obstore error's message without its debug dump."""
    return str(exc).split("\n\nDebug source", 1)[0].strip()


class PreconditionFailed(RepositoryError):
    """A conditional PUT lost: the key exists (create) or changed (If-Match). Ref and
    dictionary writes expect it and catch it; elsewhere (a pack's new random key taken)
    it says which object of the bucket was in the way."""

    def __init__(self, where: str, create: bool) -> None:
        self.where = where
        super().__init__(f"writing {where} refused: " + ("it exists already" if create else
                                                           "it changed since it was read"))


@dataclass(frozen=True)
class S3Location:
    """Where a repository lives on S3, and how to reach it. Credentials come from the
    usual environment variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
    ``AWS_SESSION_TOKEN``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``...), as obstore reads them."""

    bucket: str
    prefix: str
    endpoint: str | None = None
    region: str | None = None

    @classmethod
    def parse(cls, url: str, endpoint: str | None = None, region: str | None = None) -> S3Location:
        bucket, prefix = parse_s3_url(url)
        return cls(bucket, prefix, endpoint, region)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")


class S3Client:
    """The few S3 requests snapvc makes, over one obstore ``S3Store``, counted in ``stats``.

    Keys are relative to the location's prefix. Errors name the bucket and key."""

    def __init__(self, location: S3Location) -> None:
        try:
            from obstore.store import S3Store  # the s3 extra: imported only when S3 is used
        except ImportError as exc:
            raise ExtraMissingError(f"the repository at {location.url!r}", "s3", exc.name) from exc

        self.location = location
        config: dict[str, Any] = {}
        if location.endpoint:
            config["endpoint"] = location.endpoint
        if location.region:
            config["region"] = location.region
        endpoint = location.endpoint or os.environ.get("AWS_ENDPOINT_URL", "")
        client_options: ClientConfig = {"allow_http": True} if endpoint.startswith("http://") else {}
        self._store = S3Store(location.bucket, prefix=location.prefix or None, client_options=client_options,
                              **config)
        self.stats = S3Stats()
        self._lock = threading.Lock()
        self.pool = ThreadPoolExecutor(PARALLEL, thread_name_prefix="snapvc-s3")

    def _count(self, kind: str, sent: int = 0, received: int = 0) -> None:
        with self._lock:
            self.stats.requests[kind] = self.stats.requests.get(kind, 0) + 1
            self.stats.bytes_sent += sent
            self.stats.bytes_received += received

    def where(self, key: str) -> str:
        return f"s3://{self.location.bucket}/{self.location.prefix + '/' if self.location.prefix else ''}{key}"

    def get(self, key: str) -> tuple[bytes, str] | None:
        """The bytes and ETag at ``key``, None if there is none."""
        import obstore

        try:
            result = obstore.get(self._store, key)
            data = bytes(result.bytes())
        except FileNotFoundError:
            self._count("GET")
            return None
        except Exception as exc:
            raise RepositoryError(f"reading {self.where(key)} failed: {_reason(exc)}") from None
        self._count("GET", received=len(data))
        return data, result.meta["e_tag"] or ""

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``start`` to ``end`` (exclusive) of ``key``; ``FileNotFoundError`` if it is gone."""
        import obstore

        try:
            data = bytes(obstore.get_range(self._store, key, start=start, end=end))
        except FileNotFoundError:
            self._count("GET")
            raise
        except Exception as exc:
            raise RepositoryError(f"reading bytes {start}-{end} of {self.where(key)} failed: {_reason(exc)}") from None
        self._count("GET", received=len(data))
        return data

    def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Several byte ranges of ``key`` (obstore coalesces near ones into one request)."""
        import obstore

        if len(ranges) == 1:
            return [self.get_range(key, *ranges[0])]
        try:
            found = [bytes(b) for b in obstore.get_ranges(self._store, key, starts=[a for a, _ in ranges],
                                                            ends=[b for _, b in ranges])]
        except FileNotFoundError:
            self._count("GET")
            raise
        except Exception as exc:
            raise RepositoryError(f"reading {len(ranges)} ranges of {self.where(key)} failed: {_reason(exc)}") from None
        self._count("GET", received=sum(map(len, found)))
        return found

    def put(self, key: str, data: bytes, *, create: bool = False, if_match: str | None = None) -> str:
        """Store ``data`` at ``key``; returns the new ETag. ``create``: only if the key does
        not exist (If-None-Match: *); ``if_match``: only if its ETag is still this one.
        ``PreconditionFailed`` when the condition does not hold."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        mode: Any = "create" if create else {"e_tag": if_match} if if_match is not None else "overwrite"
        try:
            result = obstore.put(self._store, key, data, mode=mode)
        except (AlreadyExistsError, PreconditionError):
            self._count("PUT", sent=len(data))
            raise PreconditionFailed(self.where(key), create) from None
        except Exception as exc:
            raise RepositoryError(f"writing {self.where(key)} failed: {_reason(exc)}") from None
        self._count("PUT", sent=len(data))
        return result["e_tag"] or ""

    def list(self, prefix: str) -> list[tuple[str, int]]:
        """Every key under ``prefix`` with its size, sorted by key."""
        import obstore

        out: list[tuple[str, int]] = []
        try:
            for page in obstore.list(self._store, prefix=prefix, chunk_size=1000):
                self._count("LIST")
                out.extend((meta["path"], meta["size"]) for meta in page)
        except Exception as exc:
            raise RepositoryError(f"listing {self.where(prefix)} failed: {_reason(exc)}") from None
        if not out:
            self._count("LIST")
        out.sort()
        return out

    def delete(self, keys: builtins.list[str]) -> None:
        import obstore

        for start in range(0, len(keys), 1000):
            batch = keys[start : start + 1000]
            try:
                obstore.delete(self._store, batch)
            except FileNotFoundError:
                pass
            except Exception as exc:
                raise RepositoryError(f"deleting {self.where(batch[0])} and others failed: {_reason(exc)}") from None
            self._count("DELETE")

    def close(self) -> None:
        self.pool.shutdown(wait=False)


def read_meta(client: S3Client, key: str) -> str | None:
    found = client.get(f"meta/{key}")
    return None if found is None else found[0].decode()


def write_meta(client: S3Client, key: str, value: str) -> None:
    client.put(f"meta/{key}", value.encode())


REPOSITORY_MARKER = "snapvc.json"
FORMAT_VERSION = 1


def check_or_create_marker(client: S3Client, *, create: bool) -> None:
    """The repository marker at the prefix: read it (refusing a newer format), or write it
    when the location is empty and ``create``."""
    found = client.get(REPOSITORY_MARKER)
    if found is None:
        if not create:
            raise RepositoryNotFoundError(f"no snapvc repository at {client.where('')}")
        marker = json.dumps({"snapvc": "repository", "format": FORMAT_VERSION, "layout": "packs"}).encode()
        try:
            client.put(REPOSITORY_MARKER, marker, create=True)
        except PreconditionFailed:
            pass  # another process created it meanwhile
        return
    try:
        info = json.loads(found[0])
        version = int(info["format"])
    except (ValueError, KeyError, TypeError):
        raise RepositoryError(f"{client.where(REPOSITORY_MARKER)} is not a snapvc repository marker") from None
    if version > FORMAT_VERSION:
        raise FormatVersionError(f"{client.where('')} has format version {version}; this snapvc reads up to "
                                 f"{FORMAT_VERSION}: upgrade snapvc")
