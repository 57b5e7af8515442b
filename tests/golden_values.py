"""Fixed values whose object ids are part of snapvc's format promise (see test_golden.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, datetime, UTC
from decimal import Decimal
from typing import Any
from uuid import UUID

import snapvc


@dataclass(frozen=True)
class Point:
    x: int
    y: float


snapvc.register_type(Point, name="golden.Point")


def _words(seed: int, n: int) -> str:
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "xe", "zu", "pra", "sto"]
    return " ".join("".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(n))


def golden_states() -> dict[str, dict[str, Any]]:
    return {
        "empty": {},
        "one-int": {"a": 1},
        "scalars": {"n": None, "t": True, "f": False, "i": -7, "big": 2**70, "x": 1.5, "neg0": -0.0,
                    "nan": float("nan"), "inf": float("inf"), "ninf": float("-inf")},
        "text-bytes": {"s": "héllo ✓", "b": b"\x00\x01\xff", "empty": ""},
        "containers": {"l": [1, 2, 3], "t": (1, "a", (2.0,)), "nested": {"k": [{"z": 1}], "e": []}},
        "ext-types": {"dt": datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC), "naive": datetime(2026, 1, 2),
                      "d": date(2026, 1, 2), "u": UUID(int=1), "dec": Decimal("1.10")},
        "typed": {"p": Point(1, 2.5), "ps": [Point(i, i / 2) for i in range(3)]},
        "long-text": {"doc": _words(1, 900)},
        "chunked-text": {"doc": _words(2, 8000), "blob": bytes(range(256)) * 100},
        "long-list": {"list": list(range(2000))},
        "wide-map": {"map": {f"k{i:05d}": i for i in range(3000)}},
        "messages": {"messages": [{"role": "user" if i % 2 else "assistant", "content": _words(i, 60)} for i in range(80)]},
    }
