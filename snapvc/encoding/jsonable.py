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

``from_jsonable(to_jsonable(v)) == v`` with types, -0.0 and NaN included.
"""

from __future__ import annotations

import base64
import datetime as _dt
import math
import uuid
from decimal import Decimal
from typing import Any, Final

import msgpack

from snapvc.encoding.adapters import adapter_for_name, adapter_for_value
from snapvc.encoding.reader import MapView, SeqView
from snapvc.encoding.values import INT_LIMIT, INT_MIN, decode_inline, ext_payload_for, new_packer
from snapvc.errors import SnapvcError, UnsupportedValueError

__all__ = ["SCALAR_TYPES", "TAG", "from_jsonable", "to_jsonable"]

TAG: Final = "$snapvc"

# The stored types whose values cannot change in place.
SCALAR_TYPES: Final = frozenset({str, bytes, int, float, bool, type(None), _dt.datetime, _dt.date, _dt.time,
                                 _dt.timedelta, uuid.UUID, Decimal})


def to_jsonable(v: Any, where: str = "state") -> Any:
    """``v`` as JSON-safe values (see the module notes); ``UnsupportedValueError``
    naming the path below ``where`` for a value snapvc cannot store."""
    t = type(v)
    if t is str or t is bool or v is None:
        return v
    if t is int:
        return v if INT_MIN <= v < INT_LIMIT else _ext(v)
    if t is float:
        if not math.isfinite(v):
            return {TAG: "float", "value": repr(v)}
        return v
    if t is dict:
        out = {}
        for k, x in v.items():
            if type(k) is not str:
                raise UnsupportedValueError(where, f"dict key {k!r} is a {type(k).__name__}; keys must be str")
            out[k] = to_jsonable(x, f"{where}[{k!r}]")
        return {TAG: "dict", "items": out} if TAG in v else out
    if t is list:
        return [to_jsonable(x, f"{where}[{i}]") for i, x in enumerate(v)]
    if t is tuple:
        return {TAG: "tuple", "items": [to_jsonable(x, f"{where}[{i}]") for i, x in enumerate(v)]}
    if t is bytes:
        return {TAG: "bytes", "base64": base64.b64encode(v).decode("ascii")}
    if t in SCALAR_TYPES:
        return _ext(v)
    if isinstance(v, (MapView, SeqView)):
        return to_jsonable(v.to_dict() if isinstance(v, MapView) else v.to_list(), where)
    adapter = adapter_for_value(v)
    if adapter is not None:
        return {TAG: "typed", "type": adapter.name, "fields": to_jsonable(adapter.to_fields(v), where)}
    raise UnsupportedValueError(where, f"values of type {t.__qualname__} cannot be stored")


def _ext(v: Any) -> dict[str, str]:
    """A scalar in snapvc's own inline encoding (a msgpack extension type), as base64."""
    pack = new_packer().pack
    code, data = ext_payload_for(v, pack)  # type: ignore[misc]
    return {TAG: "value", "msgpack": base64.b64encode(pack(msgpack.ExtType(code, data))).decode("ascii")}


def from_jsonable(j: Any, where: str = "state") -> Any:
    """The value ``to_jsonable`` made ``j`` from. A malformed tagged object raises
    ``ValueError`` naming its path below ``where``."""
    t = type(j)
    if t is list:
        return [from_jsonable(x, f"{where}[{i}]") for i, x in enumerate(j)]
    if t is not dict:
        return j
    kind = j.get(TAG)
    if kind is None:
        return {k: from_jsonable(x, f"{where}[{k!r}]") for k, x in j.items()}
    try:
        if kind == "dict":
            return {k: from_jsonable(x, f"{where}[{k!r}]") for k, x in j["items"].items()}
        if kind == "tuple":
            return tuple(from_jsonable(x, f"{where}[{i}]") for i, x in enumerate(j["items"]))
        if kind == "bytes":
            return base64.b64decode(j["base64"], validate=True)
        if kind == "float":
            return float(j["value"])
        if kind == "value":
            return decode_inline(base64.b64decode(j["msgpack"], validate=True))
        if kind == "typed":
            return adapter_for_name(j["type"]).from_fields(from_jsonable(j["fields"], where))
    except SnapvcError:
        raise  # an unknown type name, a value snapvc cannot store: already named
    except (KeyError, TypeError, ValueError, AttributeError, msgpack.UnpackException) as exc:
        raise ValueError(f"{where}: a malformed {TAG!r} object of kind {kind!r}: {exc!r}") from exc
    raise ValueError(f"{where}: unknown {TAG!r} kind {kind!r} (one of dict, tuple, bytes, float, value, typed)")
