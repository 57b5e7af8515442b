"""Ref names: git's ``check-ref-format`` rules, and the branch/tag namespaces.

A ref name is refused when (git's rules, in git's order):

- it is empty, or it is the single character ``@``;
- it contains an ASCII control character (below 0x20, or DEL), a space, or one of
  ``~ ^ : ? * [ \\``;
- it contains ``..`` or ``@{``;
- it starts or ends with ``/``, or contains ``//`` (an empty component);
- a ``/``-separated component starts with ``.`` or ends with ``.lock``;
- it ends with ``.``.

One-level names (``HEAD``, ``main``) pass ``check_ref_name``, as with git's
``--allow-onelevel``. A ref store takes only full names (``check_full_ref_name``):
``refs/...``, or a root ref of capitals such as ``HEAD`` and ``ORIG_HEAD``.
"""

from __future__ import annotations

import re
from typing import Final

from snapvc.errors import InvalidArgumentError, InvalidRefNameError

__all__ = [
    "check_ref_name",
    "check_full_ref_name",
    "is_root_ref",
    "branch_ref",
    "tag_ref",
    "short_name",
    "ref_name_problem",
    "HEADS",
    "TAGS",
    "REMOTES",
]

HEADS: Final = "refs/heads/"
TAGS: Final = "refs/tags/"
REMOTES: Final = "refs/remotes/"
_SHORTENED: Final = (HEADS, TAGS, REMOTES)
_LOCK: Final = ".lock"
_ROOT_REF = re.compile(r"[A-Z_-]+")
_FORBIDDEN: Final = {" ": "a space", "~": "'~'", "^": "'^'", ":": "':'", "?": "'?'", "*": "'*'", "[": "'['", "\\": "'\\'"}


def _describe(ch: str) -> str | None:
    """Why ``ch`` may not appear in a ref name, or None if it may."""
    if ch in _FORBIDDEN:
        return _FORBIDDEN[ch]
    if ord(ch) < 0x20 or ch == "\x7f":
        return f"the control character {ch!r}"
    return None


def ref_name_problem(name: str) -> tuple[int, str] | None:
    """The first rule ``name`` breaks, as (position in ``name``, reason); None if it is valid."""
    if name == "":
        return 0, "it is empty"
    if name == "@":
        return 0, "'@' alone is not a ref name"
    start = 0
    while True:
        end = name.find("/", start)
        if end < 0:
            end = len(name)
        last = ""
        for i in range(start, end):
            ch = name[i]
            bad = _describe(ch)
            if bad is not None:
                return i, f"{bad} is not allowed"
            if ch == "." and last == ".":
                return i - 1, "'..' is not allowed"
            if ch == "{" and last == "@":
                return i - 1, "'@{' is not allowed"
            last = ch
        if end == start:
            if start == 0:
                return 0, "it starts with '/'"
            if end == len(name):
                return end - 1, "it ends with '/'"
            return start - 1, "'//' is not allowed"
        if name[start] == ".":
            return start, "a component starts with '.'"
        if name.endswith(_LOCK, start, end):
            return end - len(_LOCK), "a component ends with '.lock'"
        if end == len(name):
            break
        start = end + 1
    if name.endswith("."):
        return len(name) - 1, "it ends with '.'"
    return None


def check_ref_name(name: str) -> str:
    """Return ``name`` if git's ``check-ref-format --allow-onelevel`` accepts it, else raise
    ``InvalidRefNameError`` saying which rule it breaks."""
    if not isinstance(name, str):
        raise InvalidArgumentError("name", f"a ref name is a str, got {type(name).__name__}: {name!r}")
    if name in _VALID or (_PLAIN.fullmatch(name) is not None and _LOCK not in name):
        return name
    problem = ref_name_problem(name)
    if problem is not None:
        pos, reason = problem
        raise InvalidRefNameError(name, f"{reason} (at position {pos})")
    if len(_VALID) < 4096:  # names are checked on every ref move: remember the good ones
        _VALID.add(name)
    return name


_VALID: set[str] = set()
# Names made of letters, digits, '_', '+', '%' and '-', with single dots inside components
# and no '.lock': valid under every rule of ``ref_name_problem``, and matched in C, so a
# listing of many thousands of refs (more than ``_VALID`` remembers) is not a Python loop
# over each name's characters.
_PLAIN = re.compile(r"[A-Za-z0-9_+%-]+(?:\.[A-Za-z0-9_+%-]+)*(?:/[A-Za-z0-9_+%-]+(?:\.[A-Za-z0-9_+%-]+)*)*")


def is_root_ref(name: str) -> bool:
    """True for names like ``HEAD`` and ``ORIG_HEAD``: capitals, ``_`` and ``-`` only."""
    return _ROOT_REF.fullmatch(name) is not None


def check_full_ref_name(name: str) -> str:
    """Return ``name`` if a ref store may hold it: a valid name that starts with ``refs/``
    or is a root ref such as ``HEAD``; else raise ``InvalidRefNameError``."""
    check_ref_name(name)
    if not (name.startswith("refs/") or is_root_ref(name)):
        raise InvalidRefNameError(
            name, "a full ref name starts with 'refs/' (e.g. 'refs/heads/main') or is a root ref such as 'HEAD'"
        )
    return name


def _namespaced(prefix: str, kind: str, name: str) -> str:
    if not isinstance(name, str):
        raise InvalidArgumentError("name", f"a {kind} name is a str, got {type(name).__name__}: {name!r}")
    ref = prefix + name
    check_ref_name(ref)
    # git refuses these as branch and tag names: '-x' reads as an option, 'HEAD' as the
    # HEAD ref, '@' as a shorthand for HEAD.
    if name.startswith("-"):
        raise InvalidRefNameError(ref, f"a {kind} name may not start with '-'")
    if name in ("HEAD", "@"):
        raise InvalidRefNameError(ref, f"{name!r} is not a valid {kind} name")
    return ref


def branch_ref(name: str) -> str:
    """``refs/heads/<name>``, validated."""
    return _namespaced(HEADS, "branch", name)


def tag_ref(name: str) -> str:
    """``refs/tags/<name>``, validated."""
    return _namespaced(TAGS, "tag", name)


def short_name(ref: str) -> str:
    """``ref`` without its ``refs/heads/``, ``refs/tags/`` or ``refs/remotes/`` prefix."""
    for prefix in _SHORTENED:
        if ref.startswith(prefix):
            return ref[len(prefix) :]
    return ref
