"""Whether two lists hold the very same objects, position by position.

This is the inner loop of every check that a container did not change in place
(``snapvc.encoding.cache.DeepSnapshot.same``): tens of thousands of references per
commit for a long history. Compared element by element (``map(operator.is_, ...)``)
it costs a Python-level call per reference. On CPython an object's identity is its
address and a list keeps its references in one array, so two lists hold the same
objects exactly when their arrays hold the same bytes: one ``memcmp``, read through
``ctypes`` (the standard library), of lists the caller holds for the duration. Elsewhere
(another implementation, or ``ctypes`` unavailable) the element-by-element comparison
gives the same answers; both are tested.

Equality is never used: ``1``, ``1.0`` and ``True`` are equal but encode differently,
and a container replaced by an equal one must be seen as replaced.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from operator import is_
from typing import Any

__all__ = ["same_objects", "same_prefix", "compare_by_address"]


def _by_element(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(map(is_, a, b))


def _address_reader() -> Callable[[list[Any]], bytes] | None:
    """A function giving the bytes of a list's array of references, or None where an
    object's id is not its address (or ``ctypes`` is missing)."""
    if sys.implementation.name != "cpython":
        return None
    try:
        import ctypes
    except ImportError:  # a Python built without it
        return None
    width = ctypes.sizeof(ctypes.c_void_p)
    # PyListObject ends with ``PyObject **ob_item; Py_ssize_t allocated;``.
    offset = list.__basicsize__ - 2 * width
    address_of = ctypes.c_void_p.from_address
    string_at = ctypes.string_at

    def references(items: list[Any]) -> bytes:
        if not items:
            return b""
        array = address_of(id(items) + offset).value
        if array is None:  # (a list of no items may have no array)
            return b""
        return string_at(array, len(items) * width)

    probe = [object(), object(), "x"]
    expected = b"".join(id(obj).to_bytes(width, sys.byteorder) for obj in probe)
    return references if references(probe) == expected else None


_UNSET: Any = object()
_references: Any = _UNSET  # set at the first comparison (``ctypes`` is imported then, not with snapvc)


def compare_by_address(enabled: bool) -> None:
    """Use the one-``memcmp`` comparison (where the platform allows it) or the element
    by element one (for tests: both must give the same answers)."""
    global _references
    _references = _address_reader() if enabled else None


def same_objects(a: list[Any], b: list[Any]) -> bool:
    """True if ``a`` and ``b`` (plain lists) hold the very same objects in the same order.
    Both must be lists no other thread changes meanwhile (the caller's own, or fresh)."""
    global _references
    references = _references
    if references is _UNSET:
        references = _references = _address_reader()
    if references is None:
        return _by_element(a, b)
    return len(a) == len(b) and references(a) == references(b)


def same_prefix(a: list[Any] | tuple[Any, ...], b: list[Any] | tuple[Any, ...]) -> bool:
    """True if the shorter of ``a`` and ``b`` (lists or tuples) holds the very objects the
    other starts with (a list grown or cut at its end)."""
    n = min(len(a), len(b))
    return same_objects(_head(a, n), _head(b, n))


def _head(items: list[Any] | tuple[Any, ...], n: int) -> list[Any]:
    """The first ``n`` items as a list of our own (taken in one C call: a list that is
    the caller's is never read through its array while its owner may grow it)."""
    return items[:n] if type(items) is list else list(items[:n])
