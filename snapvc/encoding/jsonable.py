"""Values as JSON and back, exactly: the form of ``Checkpoint.to_dict()`` and of the
``snapvc`` command's ``checkout`` output and ``commit`` input.

JSON's own values (str, bool, None, finite floats, ints of up to 64 bits, lists, dicts)
are themselves. Every other value snapvc stores becomes an object tagged ``"$snapvc"``:

================================  ==================================================================
value                             JSON
================================  ==================================================================
tuple                             ``{"$snapvc": "tuple", "items": [...]}``
bytes                             ``{"$snapvc": "bytes", "base64": "..."}``
NaN, ±inf                         ``{"$snapvc": "float", "value": "nan"}``
an int beyond 64 bits             ``{"$snapvc": "int", "value": "123456789012345678901234567890"}``
                                  (hex, ``"0x..."``, past the digits Python converts in decimal)
datetime                          ``{"$snapvc": "datetime", "value": "2025-01-02T03:04:05.000006+01:00"}``
                                  (ISO 8601, no offset when naive), with ``"zone": "Europe/Paris"``
                                  for a zoneinfo zone and ``"fold": 1`` for the second of two
                                  same wall times
time                              ``{"$snapvc": "time", "value": "03:04:05"}`` (``zone``, ``fold``
                                  as for a datetime)
date                              ``{"$snapvc": "date", "value": "2025-01-02"}``
timedelta                         ``{"$snapvc": "timedelta", "days": 1, "seconds": 30,
                                  "microseconds": 0}`` (Python's own normalised fields)
UUID                              ``{"$snapvc": "uuid", "value": "12345678-1234-5678-1234-567812345678"}``
Decimal                           ``{"$snapvc": "decimal", "value": "1.10"}`` (exact: ``-0``,
                                  ``NaN``, ``sNaN``, ``1E+3``)
a dataclass, pydantic model       ``{"$snapvc": "typed", "type": name, "fields": {...}}``
or registered type
a dict with its own ``$snapvc``    ``{"$snapvc": "dict", "items": {...}}``
key
a numpy array                     ``{"$snapvc": "ndarray", "dtype": "<f4", "shape": [2, 3], "order": "C",
                                  "values": [[...], [...]]}`` for at most 1,000 finite numbers, else
                                  ``"base64"`` of its bytes in that order (``snapvc.encoding.arrays``);
                                  a numpy scalar as its 0-d array with ``"scalar": true``
================================  ==================================================================

The form ``{"$snapvc": "value", "msgpack": "..."}`` (snapvc's inline encoding, in base64),
which earlier versions wrote for every typed scalar, is still read.

``from_jsonable(to_jsonable(v)) == v`` with types, -0.0 and NaN included. Both refuse a
value nested deeper than a state may be (``MAX_DEPTH`` containers, the root counted, as
the encoder counts them) with an ``UnsupportedValueError`` naming its path: such a value
could not be stored, and walking it would meet Python's recursion limit.
"""

from __future__ import annotations

import base64
import datetime as _dt
import math
import uuid
import itertools
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any, Final
from zoneinfo import ZoneInfo

import orjson


from snapvc.encoding.adapters import adapter_for_name, adapter_for_value
from snapvc.encoding.arrays import JSON_KIND, header_json, is_array, is_numpy_value, numpy_reason
from snapvc.encoding.arrays import from_json as arrays_from_json
from snapvc.encoding.arrays import to_json as arrays_to_json
from snapvc.encoding.reader import MapView, SeqView, is_tuple
from snapvc.encoding.values import INT_LIMIT, INT_MIN, decode_inline
from snapvc.encoding.values import MAX_DEPTH
from snapvc.errors import MalformedJsonError, SnapvcError, UnsupportedValueError

__all__ = ["SCALAR_TYPES", "TAG", "child_keys", "from_jsonable", "json_head", "json_size", "kind_and_size", "to_jsonable"]

TAG: Final = "$snapvc"

# The stored types whose values cannot change in place.
SCALAR_TYPES: Final = frozenset({str, bytes, int, float, bool, type(None), _dt.datetime, _dt.date, _dt.time,
                                 _dt.timedelta, uuid.UUID, Decimal})


def to_jsonable(v: Any, where: str = "state") -> Any:
    """``v`` as JSON-safe values (see the module notes); ``UnsupportedValueError``
    naming the path below ``where`` for a value snapvc cannot store."""
    return _to_jsonable(v, where, 0)


def _too_deep(where: str) -> UnsupportedValueError:
    return UnsupportedValueError(where, f"nested deeper than {MAX_DEPTH} containers, the most a state may hold")


def _to_jsonable(v: Any, where: str, depth: int) -> Any:
    """``to_jsonable`` of ``v``, a value below ``depth`` containers."""
    t = type(v)
    if t is str or t is bool or v is None:
        return v
    if t is int:
        return v if INT_MIN <= v < INT_LIMIT else _big_int(v)
    if t is float:
        if not math.isfinite(v):
            return {TAG: "float", "value": repr(v)}
        return v
    if t is dict or t is list or t is tuple:
        if depth >= MAX_DEPTH:
            raise _too_deep(where)
        depth += 1
    if t is dict:
        out = {}
        for k, x in v.items():
            if type(k) is not str:
                raise UnsupportedValueError(where, f"dict key {k!r} is a {type(k).__name__}; keys must be str")
            out[k] = _to_jsonable(x, f"{where}[{k!r}]", depth)
        return {TAG: "dict", "items": out} if TAG in v else out
    if t is list:
        return [_to_jsonable(x, f"{where}[{i}]", depth) for i, x in enumerate(v)]
    if t is tuple:
        return {TAG: "tuple", "items": [_to_jsonable(x, f"{where}[{i}]", depth) for i, x in enumerate(v)]}
    if t is bytes:
        return {TAG: "bytes", "base64": base64.b64encode(v).decode("ascii")}
    if t in SCALAR_TYPES:
        return _typed_scalar(v)
    if isinstance(v, (MapView, SeqView)):
        return _to_jsonable(v.to_dict() if isinstance(v, MapView) else v.to_list(), where, depth)
    if is_numpy_value(v) and adapter_for_value(v) is not None:  # an ndarray exactly, or a numpy scalar
        reason = numpy_reason(v)
        if reason is not None:
            raise UnsupportedValueError(where, reason)
        return arrays_to_json(v)
    adapter = adapter_for_value(v)
    if adapter is not None:  # its fields' dict is the container it counts as
        return {TAG: "typed", "type": adapter.name, "fields": _to_jsonable(adapter.to_fields(v), where, depth)}
    raise UnsupportedValueError(where, f"values of type {t.__qualname__} cannot be stored")


def _big_int(v: int) -> dict[str, str]:
    """An int JSON readers cannot hold exactly (beyond 64 bits), as its digits."""
    try:
        return {TAG: "int", "value": str(v)}
    except ValueError:  # more decimal digits than Python converts (sys.get_int_max_str_digits); hex has no limit
        return {TAG: "int", "value": ("-" if v < 0 else "") + hex(abs(v))}


def _read_int(text: str, where: str) -> int:
    if type(text) is not str:
        raise MalformedJsonError(where, f"the digits of a {TAG!r} int are a {type(text).__name__}, not a string")
    digits = text.removeprefix("-")
    value = int(digits, 16) if digits[:2].lower() == "0x" and digits[2:].isalnum() else int(digits)
    return -value if text.startswith("-") else value


def _typed_scalar(v: Any) -> dict[str, Any]:
    """A datetime, date, time, timedelta, UUID or Decimal as readable tagged JSON (see
    the module notes): text a person reads, that reads back to the same value and type."""
    t = type(v)
    if t is _dt.datetime or t is _dt.time:
        key = v.tzinfo.key if isinstance(v.tzinfo, ZoneInfo) else None
        out: dict[str, Any] = {TAG: "datetime" if t is _dt.datetime else "time", "value": v.isoformat()}
        if key is not None:
            out["zone"] = key
        if v.fold:
            out["fold"] = v.fold
        return out
    if t is _dt.date:
        return {TAG: "date", "value": v.isoformat()}
    if t is _dt.timedelta:
        return {TAG: "timedelta", "days": v.days, "seconds": v.seconds, "microseconds": v.microseconds}
    if t is uuid.UUID:
        return {TAG: "uuid", "value": str(v)}
    if t is Decimal:
        return {TAG: "decimal", "value": str(v)}  # str keeps every digit, the exponent, -0, NaN and sNaN
    raise UnsupportedValueError("value", f"{t.__qualname__} has no tagged JSON form")  # SCALAR_TYPES grew


def _text(j: dict[str, Any], where: str) -> str:
    value = j["value"]
    if type(value) is not str:
        raise MalformedJsonError(where, f"the 'value' of a {TAG!r} {j[TAG]} is a {type(value).__name__}, not a string")
    return value


def _zoned(value: Any, j: dict[str, Any], where: str) -> Any:
    """A datetime or time read from ISO text, given its ``zone`` and ``fold`` back."""
    key, fold = j.get("zone"), j.get("fold", 0)
    if fold not in (0, 1) or type(fold) is not int:
        raise MalformedJsonError(where, f"the 'fold' of a {TAG!r} {j[TAG]} is {fold!r}, not 0 or 1")
    if key is not None:
        if type(key) is not str:
            raise MalformedJsonError(where, f"the 'zone' of a {TAG!r} {j[TAG]} is a {type(key).__name__}, "
                                     "not a string")
        value = value.replace(tzinfo=ZoneInfo(key))  # the wall time, in the named zone
    return value.replace(fold=fold)


def _int_field(j: dict[str, Any], name: str, where: str) -> int:
    value = j[name]
    if type(value) is not int:
        raise MalformedJsonError(where, f"the {name!r} of a {TAG!r} {j[TAG]} is a {type(value).__name__}, not an int")
    return value


def from_jsonable(j: Any, where: str = "state") -> Any:
    """The value ``to_jsonable`` made ``j`` from. A malformed tagged object raises
    ``MalformedJsonError`` naming its path below ``where``."""
    return _from_jsonable(j, where, 0)


def _from_jsonable(j: Any, where: str, depth: int) -> Any:
    """``from_jsonable`` of ``j``, which stands for a value below ``depth`` containers
    (a tagged ``dict`` or ``tuple`` is one container, as the value it stands for is)."""
    t = type(j)
    if t is not list and t is not dict:
        return j
    kind = j.get(TAG) if t is dict else None
    if t is list or kind is None or kind == "dict" or kind == "tuple":
        if depth >= MAX_DEPTH:
            raise _too_deep(where)
        depth += 1
    if t is list:
        return [_from_jsonable(x, f"{where}[{i}]", depth) for i, x in enumerate(j)]
    if kind is None:
        return {k: _from_jsonable(x, f"{where}[{k!r}]", depth) for k, x in j.items()}
    try:
        if kind == "dict":
            return {k: _from_jsonable(x, f"{where}[{k!r}]", depth) for k, x in j["items"].items()}
        if kind == "tuple":
            return tuple(_from_jsonable(x, f"{where}[{i}]", depth) for i, x in enumerate(j["items"]))
        if kind == "bytes":
            return base64.b64decode(j["base64"], validate=True)
        if kind == "float":
            return float(j["value"])
        if kind == "int":
            return _read_int(j["value"], where)
        if kind == "datetime":
            return _zoned(_dt.datetime.fromisoformat(_text(j, where)), j, where)
        if kind == "time":
            return _zoned(_dt.time.fromisoformat(_text(j, where)), j, where)
        if kind == "date":
            return _dt.date.fromisoformat(_text(j, where))
        if kind == "timedelta":
            return _dt.timedelta(days=_int_field(j, "days", where), seconds=_int_field(j, "seconds", where),
                                 microseconds=_int_field(j, "microseconds", where))
        if kind == "uuid":
            return uuid.UUID(_text(j, where))
        if kind == "decimal":
            return Decimal(_text(j, where))
        if kind == "value":  # the form earlier versions wrote for every typed scalar
            return _inline_value(j, where)
        if kind == JSON_KIND:
            return arrays_from_json(j, where)
        if kind == "typed":  # its fields' dict is the container it counts as
            return adapter_for_name(j["type"]).from_fields(_from_jsonable(j["fields"], where, depth))
    except SnapvcError:
        raise  # an unknown type name, a value snapvc cannot store, a malformed value below: already named
    except (KeyError, TypeError, ValueError, AttributeError, ArithmeticError) as exc:
        raise MalformedJsonError(where, f"a malformed {TAG!r} object of kind {kind!r}: {exc!r}") from exc
    raise MalformedJsonError(where, f"unknown {TAG!r} kind {kind!r} (one of dict, tuple, bytes, float, int, "
                             "datetime, date, time, timedelta, uuid, decimal, typed, value, ndarray)")


def _inline_value(j: dict[str, Any], where: str) -> Any:
    """A ``"value"`` object's scalar. Any failure to decode it (bad base64, bytes that are
    not msgpack, an extension type this snapvc does not know) means the JSON is malformed."""
    try:
        return decode_inline(base64.b64decode(j["msgpack"], validate=True))
    except Exception as exc:
        raise MalformedJsonError(where, f"a malformed {TAG!r} object of kind 'value': {exc!r}") from exc


# -- what a viewer shows before the value --------------------------------------------------


def kind_and_size(value: Any) -> tuple[str, int]:
    """What a viewer of states (the web view, the MCP server) says of a value before it
    shows it: ``("map", keys)``, ``("list", elements)``, or ``("value", length)``: the
    characters of a str, the bytes of bytes or of an array's data (an array is never
    turned into JSON for this), else the characters of its JSON form."""
    if isinstance(value, (MapView, Mapping)):
        return "map", len(value)
    if isinstance(value, (SeqView, list, tuple)):
        return "list", len(value)
    if isinstance(value, (str, bytes)):
        return "value", len(value)
    if is_array(value):
        return "value", int(header_json(value)["bytes"])
    return "value", len(orjson.dumps(to_jsonable(value)))


def child_keys(node: Any, kind: str, size: int, offset: int, limit: int) -> list[str | int]:
    """The keys (of a map) or indexes (of a list) of ``limit`` children from ``offset``:
    a page of a large container. A stored map gives its keys in order, leaf by leaf, so a
    page reads the leaves up to it."""
    if kind == "map":
        return list(itertools.islice(iter(node), offset, offset + limit))
    return list(range(offset, min(offset + limit, size)))


# The characters JSON writes as more than themselves: ``"``, the backslash and the controls
# with a short escape take two; the other controls take six (``\\u001f``).
_ESCAPED_SHORT = b'"\\\b\f\n\r\t'
_ESCAPED_LONG = bytes(c for c in range(32) if c not in _ESCAPED_SHORT)


def _str_json_size(text: str) -> int:
    """The length of ``text``'s JSON form, counted without writing it (all the characters
    escaped are ASCII: counted in its UTF-8 bytes, two passes in C)."""
    data = text.encode("utf-8", "surrogatepass")
    short = len(data) - len(data.translate(None, _ESCAPED_SHORT))
    long = len(data) - len(data.translate(None, _ESCAPED_LONG))
    return len(text) + 2 + short + 5 * long


def _leaf_json_size(value: Any, where: str) -> int:
    """The characters of a leaf's JSON form; a long str, bytes or array measured without
    writing it (a large array about: its base64 and its header)."""
    if isinstance(value, str):
        return _str_json_size(value)
    if isinstance(value, bytes):
        return _EMPTY_BYTES_SIZE + (len(value) + 2) // 3 * 4
    if is_array(value):
        header = header_json(value)
        if int(header["bytes"]) > _SMALL_ARRAY_BYTES:  # written as base64 (a small one may be its numbers)
            return len(orjson.dumps(header)) + (int(header["bytes"]) + 2) // 3 * 4
    return len(orjson.dumps(to_jsonable(value, where)))


_EMPTY_BYTES_SIZE: Final = len(orjson.dumps({TAG: "bytes", "base64": ""}))
_SMALL_ARRAY_BYTES: Final = 64 * 1024  # an array this small is measured by writing it
# What a tuple, and a map holding a "$snapvc" key of its own, are wrapped in: {"$snapvc":"tuple","items":...}
_TUPLE_WRAPPER: Final = len(orjson.dumps({TAG: "tuple", "items": None})) - len("null")
_DICT_WRAPPER: Final = len(orjson.dumps({TAG: "dict", "items": None})) - len("null")


def json_size(value: Any, where: str) -> int:
    """The characters of ``value``'s JSON form (``to_jsonable``'s), counted without writing
    it, a stored map or list read lazily: exact but for a large array (its base64 and
    header, about). What a viewer states as the size of a value it cuts."""
    if isinstance(value, (Mapping, MapView)):
        inner = 2 + sum(_str_json_size(k) + 1 + json_size(v, where) for k, v in value.items()) + max(0, len(value) - 1)
        return inner + (_DICT_WRAPPER if TAG in value else 0)
    if isinstance(value, (list, tuple, SeqView)):
        inner = 2 + sum(json_size(v, where) for v in value) + max(0, len(value) - 1)
        tagged = isinstance(value, tuple) or (isinstance(value, SeqView) and is_tuple(value))
        return inner + (_TUPLE_WRAPPER if tagged else 0)
    return _leaf_json_size(value, where)


def json_head(value: Any, where: str, chars: int) -> Iterator[str]:
    """The JSON text of ``value`` piece by piece, until about ``chars`` characters are
    written: a long leaf gives only its beginning (an array, its form without values).
    The preview a viewer shows of a value it cuts, written without writing the whole."""
    if isinstance(value, (Mapping, MapView, list, tuple, SeqView)):
        is_map = isinstance(value, (Mapping, MapView))
        entries: Iterator[tuple[str | None, Any]] = (
            iter(value.items()) if isinstance(value, (Mapping, MapView)) else ((None, item) for item in value))
        yield "{" if is_map else "["
        for i, (key, item) in enumerate(entries):
            if chars <= 0:
                return
            piece = ("," if i else "") + (orjson.dumps(key).decode() + ":" if is_map else "")
            yield piece
            chars -= len(piece)
            for piece in json_head(item, where, chars):
                yield piece
                chars -= len(piece)
        yield "}" if is_map else "]"
    elif isinstance(value, str | bytes):
        yield orjson.dumps(to_jsonable(value[:max(chars, 0) + 1], where)).decode()
    elif is_array(value):
        yield orjson.dumps(header_json(value)).decode()
    else:
        yield orjson.dumps(to_jsonable(value, where)).decode()
