"""Values as JSON and back, exactly: the form of ``Checkpoint.to_dict()`` and of the
``snapvc`` command's ``checkout`` output and ``commit`` input.

JSON's own values (str, bool, None, finite floats, ints of up to 64 bits, lists, dicts)
are themselves. Every other value snapvc stores becomes an object tagged ``"$snapvc"``:

====================================================  ===========================================
value                                                  JSON
====================================================  ===========================================
tuple                                                  ``{"$snapvc": "tuple", "items": [...]}``
bytes                                                  ``{"$snapvc": "bytes", "base64": "..."}``
NaN, ±inf                                              ``{"$snapvc": "float", "value": "nan"}``
a larger int, datetime, date, time, timedelta, UUID,   ``{"$snapvc": "value", "msgpack": "..."}``
Decimal                                                (snapvc's inline encoding, base64)
a dataclass, pydantic model or registered type         ``{"$snapvc": "typed", "type": name,
                                                       "fields": {...}}``
a dict that has a ``"$snapvc"`` key of its own         ``{"$snapvc": "dict", "items": {...}}``
====================================================  ===========================================

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
from decimal import Decimal
from typing import Any, Final


from snapvc.encoding.adapters import adapter_for_name, adapter_for_value
from snapvc.encoding.reader import MapView, SeqView
from snapvc.encoding.values import INT_LIMIT, INT_MIN, decode_inline, ext_encoding, new_packer
from snapvc.encoding.values import MAX_DEPTH
from snapvc.errors import MalformedJsonError, SnapvcError, UnsupportedValueError

__all__ = ["SCALAR_TYPES", "TAG", "from_jsonable", "to_jsonable"]

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
        return v if INT_MIN <= v < INT_LIMIT else _ext(v)
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
        return _ext(v)
    if isinstance(v, (MapView, SeqView)):
        return _to_jsonable(v.to_dict() if isinstance(v, MapView) else v.to_list(), where, depth)
    adapter = adapter_for_value(v)
    if adapter is not None:  # its fields' dict is the container it counts as
        return {TAG: "typed", "type": adapter.name, "fields": _to_jsonable(adapter.to_fields(v), where, depth)}
    raise UnsupportedValueError(where, f"values of type {t.__qualname__} cannot be stored")


def _ext(v: Any) -> dict[str, str]:
    """A scalar in snapvc's own inline encoding (a msgpack extension type), as base64."""
    return {TAG: "value", "msgpack": base64.b64encode(ext_encoding(v, new_packer().pack)).decode("ascii")}


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
        if kind == "value":
            return _inline_value(j, where)
        if kind == "typed":  # its fields' dict is the container it counts as
            return adapter_for_name(j["type"]).from_fields(_from_jsonable(j["fields"], where, depth))
    except SnapvcError:
        raise  # an unknown type name, a value snapvc cannot store, a malformed value below: already named
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise MalformedJsonError(where, f"a malformed {TAG!r} object of kind {kind!r}: {exc!r}") from exc
    raise MalformedJsonError(where, f"unknown {TAG!r} kind {kind!r} (one of dict, tuple, bytes, float, value, typed)")


def _inline_value(j: dict[str, Any], where: str) -> Any:
    """A ``"value"`` object's scalar. Any failure to decode it (bad base64, bytes that are
    not msgpack, an extension type this snapvc does not know) means the JSON is malformed."""
    try:
        return decode_inline(base64.b64decode(j["msgpack"], validate=True))
    except Exception as exc:
        raise MalformedJsonError(where, f"a malformed {TAG!r} object of kind 'value': {exc!r}") from exc
