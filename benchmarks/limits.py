"""This machine's limits: how fast the building blocks of a commit and a checkout run here.

Measured on the same data the workload stores, in the same run: blake3 hashing, zstd
level-3 compression and decompression (python ``zstandard``, one value per call, as a
store compresses one object per call), and orjson ``dumps``/``loads``. Each figure is
the median of ``REPEATS`` passes over all the data, on one core. A store that hashes and
compresses every byte cannot commit faster than ``hash + compress``: 1 / (1/hash + 1/compress).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import blake3
import orjson
import zstandard

from benchmarks.measure import median_time

__all__ = ["Limits", "measure_limits"]

REPEATS = 3
ZSTD_LEVEL = 3


@dataclass
class Limits:
    """Bytes per second of each building block; ``*_bytes`` are the sizes they ran on."""

    data_bytes: int  # every value's bytes (strings as UTF-8)
    values: int
    compressed_bytes: int
    json_bytes: int  # what orjson.dumps wrote (the strings only: orjson has no bytes type)
    blake3_bps: float
    zstd_compress_bps: float
    zstd_decompress_bps: float
    orjson_dumps_bps: float
    orjson_loads_bps: float

    @property
    def hash_and_compress_bps(self) -> float:
        """Hashing then compressing every byte on one core."""
        return 1 / (1 / self.blake3_bps + 1 / self.zstd_compress_bps)


def measure_limits(values: Sequence[bytes], strings: Mapping[str, Any]) -> Limits:
    """Time the building blocks on ``values`` (each hashed and compressed on its own) and
    orjson on ``strings`` (a JSON-able mapping of the same text)."""
    total = sum(len(v) for v in values)
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    decompressor = zstandard.ZstdDecompressor()
    compressed = [compressor.compress(v) for v in values]
    encoded = orjson.dumps(strings)

    def each(fn: Callable[[bytes], object], items: Sequence[bytes]) -> Callable[[], None]:
        def run() -> None:
            for item in items:
                fn(item)

        return run

    return Limits(
        data_bytes=total,
        values=len(values),
        compressed_bytes=sum(map(len, compressed)),
        json_bytes=len(encoded),
        blake3_bps=total / median_time(REPEATS, each(lambda v: blake3.blake3(v).digest(), values)),
        zstd_compress_bps=total / median_time(REPEATS, each(compressor.compress, values)),
        zstd_decompress_bps=total / median_time(REPEATS, each(decompressor.decompress, compressed)),
        orjson_dumps_bps=len(encoded) / median_time(REPEATS, lambda: orjson.dumps(strings)),
        orjson_loads_bps=len(encoded) / median_time(REPEATS, lambda: orjson.loads(encoded)),
    )
