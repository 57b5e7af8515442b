"""Exact equality of states, as snapvc round-trips them: the oracle several tests compare by."""

from __future__ import annotations

from typing import Any


def same(x: Any, y: Any) -> bool:
    """Equal and of the same types all the way down: ``==`` alone takes ``1`` for ``True``
    and ``1.0``, ``-0.0`` for ``0.0``, and never NaN for NaN; snapvc keeps each apart (it
    compares encodings) and NaN is one value to it."""
    if type(x) is not type(y):
        return False
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)):
        return len(x) == len(y) and all(same(a, b) for a, b in zip(x, y))
    if isinstance(x, float):
        return repr(x) == repr(y)
    return bool(x == y)
