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

A dict is checked cheaper still (``dict_versions``): CPython stamps a dict with a new
number from one counter, never reused, each time a key or a value of it is set, replaced
or removed (its ``ma_version_tag``). A dict holding the very keys and values it held has
the number it had, so comparing one number per dict says what comparing its keys and
values said, and reads only the dict's header: a long history's dicts are checked without
reading their tables. Where the interpreter does not stamp dicts so (a check made at the
first use, ``_version_reader``), ``dict_versions`` is None and dicts are compared by what
they hold.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable, Sequence
from functools import partial
from itertools import repeat
from operator import floordiv, is_, itemgetter
from typing import Any

__all__ = ["same_objects", "same_prefix", "compare_by_address", "dict_versions", "recorded_versions", "DictVersions"]


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
    """Use the one-``memcmp`` comparison and dicts' version numbers (where the platform
    allows them) or the element by element comparison (for tests: both must give the same
    answers). Dicts recorded by version number before are still checked by it."""
    global _references, _versions_on
    _references = _address_reader() if enabled else None
    _versions_on = enabled


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


class DictVersions:
    """Reads dicts' version numbers (see the module notes) at C speed: ``where`` gives the
    places of the numbers of some dicts, ``read`` the numbers at those places. A place is
    valid while its dict lives: the caller holds the dicts for as long as it keeps places."""

    __slots__ = ("_words",)

    def __init__(self, words: memoryview) -> None:
        # The process's memory as 64-bit words, from the offset of a dict's version number
        # in the dict: word ``id(d) // 8`` is the number of dict ``d``.
        self._words = words

    def where(self, dicts: list[dict[Any, Any]]) -> list[int]:
        return list(map(floordiv, map(id, dicts), repeat(8)))

    def read(self, places: Sequence[int]) -> array[int]:
        return self.reader(places)()

    def reader(self, places: Sequence[int]) -> Callable[[], array[int]]:
        """A function reading the numbers at ``places`` each time it is called (made once
        for places read again and again: making it costs about a third of a read)."""
        words = self._words
        if len(places) > 1:
            get = itemgetter(*places)
            return lambda: array("Q", get(words))
        return lambda: array("Q", map(words.__getitem__, places))


def _version_reader() -> DictVersions | None:
    """The reader of dicts' version numbers, or None unless this interpreter keeps one
    that changes with every change of a dict's keys or values, by every way of making
    one (tried here, also by code run often enough to be specialized)."""
    if sys.implementation.name != "cpython" or sys.maxsize < 2**63 - 1 or dict.__basicsize__ < 32:
        return None
    try:
        import ctypes
    except ImportError:
        return None
    # PyDictObject starts with ``PyObject_HEAD; Py_ssize_t ma_used; uint64_t ma_version_tag``.
    offset = 3 * 8
    memory = (ctypes.c_char * ((sys.maxsize - offset) // 8 * 8)).from_address(offset)
    reader = DictVersions(memoryview(memory).cast("B").cast("Q"))
    return reader if _stamps_every_change(reader) else None


class _Probe:
    field: Any
    more: Any


def _store(obj: Any, value: Any) -> None:
    obj.field = value


def _store_other(obj: Any, value: Any) -> None:
    obj.field = value


def _set(d: dict[str, Any], value: Any) -> None:
    d["k"] = value


# Calls after which the interpreter has specialized a function's stores (8 on 3.11).
_WARM_UP = 64


def _stamps_every_change(reader: DictVersions) -> bool:
    """Whether ``reader`` reads a number that every way of changing a dict changes, and
    nothing else does (about half a millisecond, once a process)."""
    d: dict[Any, Any] = {}
    probe = _Probe()
    probe.field = 0
    fields = probe.__dict__
    big = {str(i): i for i in range(100)}
    other = {"x": 1}
    changes: list[tuple[dict[Any, Any], Callable[[], Any]]] = [
        (d, lambda: d.__setitem__("a", 1)), (d, lambda: d.__setitem__("a", 2)), (d, lambda: d.__setitem__("b", 3)),
        (d, lambda: d.pop("a")), (d, lambda: d.update(c=4)), (d, lambda: d.setdefault("e", 5)),
        (d, lambda: d.popitem()), (d, lambda: d.__delitem__("b")), (d, lambda: d.__ior__(other)),
        (d, lambda: d.update(big)), (d, lambda: d.clear()), (d, lambda: d.update(big)),
        (fields, lambda: setattr(probe, "field", 1)), (fields, lambda: setattr(probe, "more", 1)),
        (fields, lambda: delattr(probe, "more")),
    ]
    # ... also by code run often enough for the interpreter to specialize its stores: to
    # an object whose dict was made before, or after (stores to its values until then)
    hot, cold = _Probe(), _Probe()
    hot.__dict__ = {"field": 0}  # (a dict of its own: stores to it are specialized on 3.11)
    hot_fields = hot.__dict__
    for i in range(_WARM_UP):
        _store(hot, i)
        _store_other(cold, i)
        _set(d, i)
    cold_fields = cold.__dict__
    changes += [(hot_fields, partial(_store, hot, -i)) for i in range(1, 17)]
    changes += [(cold_fields, partial(_store_other, cold, -i)) for i in range(1, 17)]
    changes += [(d, partial(_set, d, -i)) for i in range(1, 17)]
    for target, change in changes:
        before = reader.read(reader.where([target]))
        change()
        if reader.read(reader.where([target])) == before:
            return False
    # ... and only a change does: what reads a dict, refers to it or sets a value to the
    # very object it holds leaves the number as it was (it is no reference count).
    value = d["k"]
    held: list[Any] = []
    same: list[tuple[dict[Any, Any], Callable[[], Any]]] = [
        (d, lambda: d.__setitem__("k", value)), (d, lambda: held.append(d)), (d, lambda: list(d.items())),
        (d, lambda: d.get("k")), (d, lambda: d.copy()), (d, lambda: held.clear()),
        (fields, lambda: probe.field), (fields, lambda: held.append(probe)),
    ]
    same += [(d, partial(_set, d, value)) for _ in range(16)]
    for target, look in same:
        before = reader.read(reader.where([target]))
        look()
        if reader.read(reader.where([target])) != before:
            return False
    return True


_versions: Any = _UNSET  # made at the first use
_versions_on = True


def dict_versions() -> DictVersions | None:
    """The reader of dicts' version numbers, or None where dicts are compared by what
    they hold (see the module notes)."""
    return recorded_versions() if _versions_on else None


def recorded_versions() -> DictVersions | None:
    """The reader of dicts' version numbers where the interpreter keeps them, whether or
    not new records use it (``compare_by_address``): what dicts recorded so are read by."""
    global _versions
    if _versions is _UNSET:
        _versions = _version_reader()
    return _versions  # type: ignore[no-any-return]
