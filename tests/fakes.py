"""Injectable stand-ins shared by the tests."""

from __future__ import annotations


class TickingClock:
    """A clock that moves one second each time it is read, from a fixed start."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now
