"""Paths into a state: how callers name a value inside it.

A path is a dotted str (``"scratchpad.note-07"``, ``"messages.3"``) or, for keys that
hold dots, a tuple of steps (``("a.b", 0)``). ``parse_path`` checks one and gives its
steps. Where a step of digits meets a list it is an index; the path itself does not say,
since only the state it is applied to knows whether a step meets a dict or a list.
"""

from __future__ import annotations

from snapvc.errors import PathError

__all__ = ["StatePath", "parse_path"]

StatePath = str | tuple[str | int, ...]  # "a.b.0", or ("a.b", 0) for keys holding dots


def parse_path(path: StatePath) -> tuple[str | int, ...]:
    """A path's steps: ``"a.b.0"`` -> ``("a", "b", "0")`` (a step of digits is an index
    where it meets a list); a tuple is checked and kept. ``PathError`` if malformed."""
    if isinstance(path, str):
        steps = tuple(path.split("."))
        if "" in steps:
            what = "is empty" if not path else "has an empty step (a leading, trailing or double dot)"
            raise PathError(path, what)
        return steps
    if isinstance(path, tuple):
        if not path:
            raise PathError(path, "is empty")
        for step in path:
            if type(step) is not str and type(step) is not int:
                raise PathError(path, f"step {step!r} is a {type(step).__name__}; steps are str keys or int indexes")
        return path
    raise PathError(path, f"a path is a dotted str or a tuple of steps, not a {type(path).__name__}")
