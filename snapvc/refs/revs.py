"""Revision expressions, as in git: ``main``, ``main~2``, ``HEAD^2``, ``main@{1}``, ``3fa9c0``.

Grammar::

    rev     = base [ "@{" N "}" ] { "~" [N] | "^" [N] }
    base    = "HEAD" | "@" | ref name | id prefix (4..64 hex digits)

- ``~N`` follows first parents N times (``~`` is ``~1``, ``~0`` is the commit itself);
- ``^N`` takes the N-th parent (``^`` is ``^1``, ``^0`` is the commit itself);
- ``@{N}`` is the N-th previous value of the ref, read from its reflog: ``@{0}`` is its
  current value, ``@{1}`` the value before its last move. It works on deleted refs too,
  and ``@{N}`` with no base means ``HEAD@{N}``; ``@`` alone means ``HEAD``.

A base names, first match wins: ``HEAD`` (following its symbolic ref, or detached); a
full ``refs/...`` name; a root ref such as ``ORIG_HEAD``; ``refs/<base>``;
``refs/heads/<base>``; ``refs/tags/<base>``; ``refs/remotes/<base>``;
``refs/remotes/<base>/HEAD``; then an object whose id starts with ``base``. Branches
win over tags of the same name (write ``tags/v1`` for the tag).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from snapvc.errors import (
    AmbiguousRevisionError,
    InvalidArgumentError,
    InvalidRevisionError,
    UnknownRevisionError,
)
from snapvc.ids import MIN_PREFIX, SHORT_LENGTH, ObjectId, is_hex_prefix
from snapvc.refs.base import RefStore
from snapvc.refs.names import (
    HEADS,
    REMOTES,
    TAGS,
    is_root_ref,
    ref_name_problem,
    short_name,
)

__all__ = ["Rev", "parse_rev", "resolve_rev", "resolve_rev_ref", "FIRST_PARENTS", "NTH_PARENT", "REFLOG"]

FIRST_PARENTS = "~"
NTH_PARENT = "^"
REFLOG = "@"
_HEAD = "HEAD"
_SYMREF_DEPTH = 5


@dataclass(frozen=True, slots=True)
class Rev:
    """A parsed revision: a ``base`` name or id prefix and the ``steps`` from it.

    Each step is ``("~", N)``, ``("^", N)`` or, first only, ``("@", N)`` for ``@{N}``.
    ``str(rev)`` writes it back in canonical form (``main~1``, never ``main~``).
    """

    base: str
    steps: tuple[tuple[str, int], ...] = ()

    def __str__(self) -> str:
        return self.base + "".join(_step_text(op, n) for op, n in self.steps)


def _step_text(op: str, n: int) -> str:
    return f"@{{{n}}}" if op == REFLOG else f"{op}{n}"


def _invalid(text: str, pos: int, what: str) -> InvalidRevisionError:
    return InvalidRevisionError(f"invalid revision {text!r} at position {pos}: {what}")


def parse_rev(text: str) -> Rev:
    """Parse ``text``; ``InvalidRevisionError`` names the text and the position of the problem."""
    if not isinstance(text, str):
        raise InvalidArgumentError("rev", f"a revision is a str, got {type(text).__name__}: {text!r}")
    if text == "":
        raise _invalid(text, 0, "the revision is empty")
    end = len(text)
    for i, ch in enumerate(text):
        if ch in "~^" or text.startswith("@{", i):
            end = i
            break
    base = text[:end]
    if base == "@" or (base == "" and text.startswith("@{")):
        base = _HEAD
    elif base == "":
        raise _invalid(text, 0, f"expected a ref name or id before {text[0]!r}")
    else:
        problem = ref_name_problem(base)
        if problem is not None:
            pos, reason = problem
            raise _invalid(text, pos, f"{base!r} is not a ref name or id: {reason}")
    steps: list[tuple[str, int]] = []
    pos = end
    while pos < len(text):
        ch = text[pos]
        if text.startswith("@{", pos):
            if steps:
                raise _invalid(text, pos, "'@{N}' must directly follow the ref name")
            close = text.find("}", pos + 2)
            if close < 0:
                raise _invalid(text, pos, "'@{' is not closed by '}'")
            inner = text[pos + 2 : close]
            if not (inner.isascii() and inner.isdigit()):
                if inner.startswith("-"):
                    raise _invalid(text, pos, "'@{-N}' (the N-th previous checkout) is not supported")
                raise _invalid(text, pos, f"'@{{{inner}}}' is not supported: write '@{{N}}' with a number N")
            steps.append((REFLOG, int(inner)))
            pos = close + 1
        elif ch in "~^":
            if text.startswith("^{", pos):
                raise _invalid(text, pos, "'^{...}' is not supported")
            digits_end = pos + 1
            while digits_end < len(text) and text[digits_end] in "0123456789":
                digits_end += 1
            n = int(text[pos + 1 : digits_end]) if digits_end > pos + 1 else 1
            steps.append((FIRST_PARENTS if ch == "~" else NTH_PARENT, n))
            pos = digits_end
        else:
            raise _invalid(text, pos, f"unexpected {ch!r}: expected '~', '^' or the end")
    return Rev(base, tuple(steps))


def _candidates(base: str) -> list[str]:
    """The full ref names ``base`` may mean, in lookup order."""
    if base == _HEAD:
        return [_HEAD]
    if base.startswith("refs/"):
        return [base]
    names = [base] if is_root_ref(base) else []
    names += [f"refs/{base}", HEADS + base, TAGS + base, REMOTES + base, f"{REMOTES}{base}/HEAD"]
    return names


def _deref(refs: RefStore, name: str, text: str) -> tuple[str, ObjectId | None]:
    """Follow symbolic refs from ``name``: (the direct ref's name, its value or None)."""
    seen = [name]
    for _ in range(_SYMREF_DEPTH):
        target = refs.get_symbolic(name)
        if target is None:
            return name, refs.get(name)
        name = target
        seen.append(name)
    raise UnknownRevisionError(f"{text}: symbolic refs nest too deeply: {' -> '.join(seen)}")


def _find_ref(refs: RefStore, rev: Rev, text: str) -> tuple[str, ObjectId | None] | None:
    """The ref ``rev.base`` names, as (full direct name, value), or None if it names no ref.

    With a reflog step, a ref that no longer exists but has a reflog counts.
    """
    candidates = _candidates(rev.base)
    unborn: tuple[str, ObjectId | None] | None = None
    for name in candidates:
        full, value = _deref(refs, name, text)
        if value is not None:
            return full, value
        if full != name and unborn is None:
            unborn = (full, None)  # a symbolic ref to a ref with no commits yet
    uses_reflog = bool(rev.steps) and rev.steps[0][0] == REFLOG
    if uses_reflog:
        for name in candidates:
            full, _ = _deref(refs, name, text)
            if refs.reflog(full, limit=1):
                return full, None
    return unborn


def _short_forms(ids: list[ObjectId], prefix: str) -> str:
    """The ids, each shown long enough to tell it apart from the prefix alone."""
    width = max(SHORT_LENGTH, len(prefix) + 4)
    return " and ".join(oid.hex[:width] for oid in ids)


def resolve_rev(
    text: str,
    *,
    refs: RefStore,
    find_prefix: Callable[[str], list[ObjectId]],
    parents: Callable[[ObjectId], tuple[ObjectId, ...]],
) -> ObjectId:
    """The commit id ``text`` names.

    ``find_prefix(hex)`` returns up to two ids starting with ``hex`` (lowercase);
    ``parents(id)`` returns a commit's parents, first parent first. Raises
    ``InvalidRevisionError`` for bad syntax, ``UnknownRevisionError`` when it names
    nothing (or walks past a root commit), ``AmbiguousRevisionError`` for an id prefix
    matching several objects.
    """
    return resolve_rev_ref(text, refs=refs, find_prefix=find_prefix, parents=parents)[0]


def resolve_rev_ref(
    text: str,
    *,
    refs: RefStore,
    find_prefix: Callable[[str], list[ObjectId]],
    parents: Callable[[ObjectId], tuple[ObjectId, ...]],
) -> tuple[ObjectId, str]:
    """``resolve_rev``, with the full name of the direct ref whose value it is (symbolic
    refs followed), as read in the same lookup: ``""`` when ``text`` is not a ref's name
    alone (an id, or a name with ``~``, ``^`` or ``@{N}`` steps)."""
    rev = parse_rev(text)
    steps = rev.steps
    found = _find_ref(refs, rev, text)
    if found is not None:
        full, current = found
    else:
        full, current = "", None
        if is_hex_prefix(rev.base):
            matches = find_prefix(rev.base.lower())
            if len(matches) > 1:
                raise AmbiguousRevisionError(
                    f"{text}: id prefix {rev.base!r} is ambiguous: it matches at least "
                    f"{_short_forms(matches[:2], rev.base)}; give more digits"
                )
            if matches:
                current = matches[0]
        if current is None:
            hint = ""
            if len(rev.base) < MIN_PREFIX and all(c in "0123456789abcdefABCDEF" for c in rev.base):
                hint = f" (an id prefix needs at least {MIN_PREFIX} hex digits)"
            raise UnknownRevisionError(f"{text}: no branch, tag or object matches {rev.base!r}{hint}")
        if steps and steps[0][0] == REFLOG:
            raise InvalidRevisionError(f"{text}: '@{{N}}' needs a ref, and {rev.base!r} is an object id")

    if steps and steps[0][0] == REFLOG:
        current = _from_reflog(refs, full, steps[0][1], text)
        done = 1
    else:
        done = 0
        if current is None:
            raise UnknownRevisionError(f"{text}: {rev.base} points to {full}, which has no commits yet")

    for index in range(done, len(steps)):
        op, n = steps[index]
        where = str(Rev(rev.base, steps[:index]))
        if op == FIRST_PARENTS:
            for taken in range(n):
                first = parents(current)
                if not first:
                    raise UnknownRevisionError(
                        f"{text}: {where} has only {taken} ancestor{'s' if taken != 1 else ''} along first parents"
                    )
                current = first[0]
        elif n:
            found_parents = parents(current)
            if len(found_parents) < n:
                what = "is a root commit" if not found_parents else f"has only {len(found_parents)} parent" + (
                    "s" if len(found_parents) != 1 else ""
                )
                raise UnknownRevisionError(f"{text}: {where} {what}, so it has no parent {n}")
            current = found_parents[n - 1]
    return current, "" if steps else full


def _from_reflog(refs: RefStore, full: str, n: int, text: str) -> ObjectId:
    """The value ``full`` had ``n`` moves ago."""
    name = short_name(full)
    if n == 0:
        value = refs.get(full)
        if value is None:
            raise UnknownRevisionError(f"{text}: {name} does not exist now; its reflog has its earlier values")
        return value
    entries = refs.reflog(full, limit=n)
    if len(entries) < n:
        raise UnknownRevisionError(
            f"{text}: the reflog of {full} has only {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}"
        )
    value = entries[n - 1].old
    if value is None:
        raise UnknownRevisionError(f"{text}: {name} did not exist before its move {n} back ({entries[n - 1].reason!r})")
    return value
