"""Embeddings: a numpy matrix of 100,000 × 768 float32 (307 MB) that grows by 100 rows per commit.

The state is ``{"embeddings": ndarray, "step": int}``. The matrix's data is cut into
content-defined chunks like any long bytes value, and rechunked from where it differs
from the last commit's (``snapvc.encoding.chunker.rechunk``), so an append should store
about the new rows, and cost a copy and a ``memcmp`` of the matrix rather than hashing
and compressing all of it.

- ``snapvc``: the first commit (every byte new), then ``COMMITS`` commits that each
  append ``APPEND`` rows, then one that changes one row in the middle: the bytes each
  commit added to the store (``repo.store.sizes().stored_bytes``) and its time. Then, on the
  same array data as the store cuts it, blake3 and zstd (level 3, and the store's level)
  throughput, and the time hashing and compressing the whole matrix would take, against
  the commit time.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3
import numpy as np
import zstandard

import snapvc
from benchmarks.limits import ZSTD_LEVEL
from benchmarks.measure import (
    PartResult,
    Scale,
    Section,
    StoreFigures,
    Table,
    check,
    duration,
    key_value_table,
    measure_store,
    median_time,
    rate,
    size,
    summary_row,
)
from snapvc.encoding.chunker import chunk_spans
from snapvc.store.codec import ZSTD_LEVEL as STORE_ZSTD_LEVEL

__all__ = ["NAME", "TITLE", "RESULTS", "EmbeddingsFigures", "parts", "run", "section"]

NAME = "embeddings"
TITLE = "Embeddings"
BRANCH = "main"
DIM = 768
APPEND = 100
# (rows, commits) at each scale: the quick one runs every code path in a second.
SIZES = {"full": (100_000, 20), "quick": (2_000, 5)}
REPEATS = 3


@dataclass
class EmbeddingsFigures:
    """Sizes are bytes, times seconds; ``append_*`` are per commit of ``APPEND`` rows."""

    rows: int
    matrix_bytes: int
    first_commit_s: float
    first_stored: int
    append_times: list[float]
    append_stored: list[int]
    row_change_s: float
    row_change_stored: int
    blake3_bps: float
    zstd3_bps: float
    zstd_store_bps: float
    figures: StoreFigures
    checks: list[str] = field(default_factory=list)

    @property
    def whole_s(self) -> float:
        """Hashing and compressing (at the store's level) the whole matrix once."""
        return self.matrix_bytes / self.blake3_bps + self.matrix_bytes / self.zstd_store_bps


RESULTS = {"snapvc": EmbeddingsFigures}


class _ArrayState(dict[str, Any]):
    """The state in memory, compared with a checkout array by array (``==`` on arrays is
    elementwise; a subclass's ``__eq__`` is asked first, from either side)."""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping) or set(other) != set(self):
            return False
        return all(np.array_equal(v, other[k]) and v.dtype == other[k].dtype if isinstance(v, np.ndarray)
                   else v == other[k] for k, v in self.items())

    __hash__ = None  # its contents may change, as a dict's may


def parts(scale: Scale, peers: bool) -> list[str]:
    return ["snapvc"]


def _stored(repo: snapvc.Repository) -> int:
    return repo.store.sizes().stored_bytes  # (repo.stats() also reads every state: far slower)


def run(part: str, scale: Scale, seed: int, say: Callable[[str], None]) -> EmbeddingsFigures:
    rows, commits = SIZES.get(scale.name, SIZES["quick"])
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((rows, DIM), dtype=np.float32)
    say(f"{NAME}: {rows:,} x {DIM} float32 ({size(emb.nbytes)})")
    checks: list[str] = []
    with tempfile.TemporaryDirectory(prefix="snapvc-embeddings-") as tmp:
        path = Path(tmp) / "embeddings.snapvc"
        repo = snapvc.open(str(path))
        t0 = time.perf_counter()
        repo.commit({"embeddings": emb, "step": 0}, branch=BRANCH, message="first")
        first_s = time.perf_counter() - t0
        first_stored = _stored(repo)
        say(f"{NAME}: first commit {duration(first_s)}, {size(first_stored)} stored")
        times, stored = [], []
        for step in range(1, commits + 1):
            emb = np.concatenate([emb, rng.standard_normal((APPEND, DIM), dtype=np.float32)])
            before = _stored(repo)
            t0 = time.perf_counter()
            repo.commit({"embeddings": emb, "step": step}, branch=BRANCH, message=f"append {APPEND} rows")
            times.append(time.perf_counter() - t0)
            stored.append(_stored(repo) - before)
        say(f"{NAME}: {commits} appends, median {duration(statistics.median(times))}, "
            f"{size(statistics.median(stored))} stored each")
        emb[len(emb) // 2] += 1.0  # one row changed in place
        before = _stored(repo)
        t0 = time.perf_counter()
        repo.commit({"embeddings": emb, "step": commits + 1}, branch=BRANCH, message="one row changed")
        row_s = time.perf_counter() - t0
        row_stored = _stored(repo) - before
        check(max(stored) < 4 * APPEND * DIM * 4 + (1 << 16), checks,
              f"each append of {APPEND} rows stores about the rows, not the matrix")
        check(row_stored < 1 << 16, checks, "one changed row stores about one chunk")
        expected = _ArrayState({"embeddings": emb, "step": commits + 1})
        figures = measure_store(repo, path, BRANCH, expected, ("step",), times, checks, REPEATS,
                                commits=commits + 2)
    say(f"{NAME}: blake3 and zstd on the same data")
    data = emb.tobytes()
    view = memoryview(data)
    pieces = [bytes(view[o:o + n]) for o, n in chunk_spans(data)]  # as the store sees them: one chunk a call

    def each(fn: Callable[[bytes], object]) -> Callable[[], None]:
        def go() -> None:
            for piece in pieces:
                fn(piece)
        return go

    total = len(data)
    blake3_bps = total / median_time(REPEATS, each(lambda b: blake3.blake3(b).digest()))
    zstd3 = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    zstd_store = zstandard.ZstdCompressor(level=STORE_ZSTD_LEVEL, write_content_size=False, write_checksum=False)
    zstd3_bps = total / median_time(REPEATS, each(zstd3.compress))
    zstd_store_bps = total / median_time(REPEATS, each(zstd_store.compress))
    return EmbeddingsFigures(rows, emb.nbytes, first_s, first_stored, times, stored, row_s, row_stored,
                             blake3_bps, zstd3_bps, zstd_store_bps, figures, checks)


def section(results: dict[str, PartResult], scale: Scale, seed: int) -> Section:
    value: EmbeddingsFigures = results["snapvc"].value
    n = len(value.append_times)
    median_s = statistics.median(value.append_times)
    appended = APPEND * DIM * 4
    commits = Table(["commit", "time", "stored", "time / (blake3 + zstd of the whole matrix)"], [
        ["first (every byte new)", duration(value.first_commit_s), size(value.first_stored),
         f"{value.first_commit_s / value.whole_s:.2f}x"],
        [f"append {APPEND} rows ({size(appended)}), median of {n}", duration(median_s),
         size(statistics.median(value.append_stored)), f"{median_s / value.whole_s:.2f}x"],
        [f"append {APPEND} rows, largest of {n}", duration(max(value.append_times)), size(max(value.append_stored)),
         f"{max(value.append_times) / value.whole_s:.2f}x"],
        ["one row changed in place", duration(value.row_change_s), size(value.row_change_stored),
         f"{value.row_change_s / value.whole_s:.2f}x"],
    ], "Commits of the matrix")
    limits = key_value_table([
        ("matrix", f"{value.rows:,} x {DIM} float32 at the first commit, {size(value.matrix_bytes)} at the last"),
        ("blake3, chunk by chunk", rate(value.blake3_bps)),
        (f"zstd level {ZSTD_LEVEL}, chunk by chunk", rate(value.zstd3_bps)),
        (f"zstd at the store's level ({STORE_ZSTD_LEVEL})", rate(value.zstd_store_bps)),
        ("blake3 + zstd of the whole matrix", duration(value.whole_s)),
        ("append commit, as a throughput over the whole matrix", rate(value.matrix_bytes / median_s)),
        ("append commit, as a throughput over the rows appended", rate(appended / median_s)),
        ("peak RSS (process)", size(results["snapvc"].maxrss_bytes)),
    ], "This machine's hashing and compression on the same data")
    return Section(
        NAME,
        f"{TITLE}: {value.rows:,} x {DIM} float32, {APPEND} rows appended per commit",
        f"A numpy matrix of {value.rows:,} embeddings of {DIM} float32 ({size(value.rows * DIM * 4)}) in the "
        f"state; each of {n} commits appends {APPEND} rows ({size(appended)}), then one commit changes one row "
        "in place. Stored is what the commit added to the store. An append costs a copy of the matrix "
        "(its bytes are taken at each commit: it may have changed in place) and a comparison with the last "
        "commit's, then cutting, hashing and compressing only the chunks past the old end; the ratio column "
        "compares the commit with hashing and compressing the whole matrix on this machine.",
        [commits, limits, key_value_table(value.figures.rows(), "snapvc")],
        checks=value.checks,
        summary=[summary_row(f"embeddings, {value.rows:,} x {DIM}", value.figures, results["snapvc"])],
    )
