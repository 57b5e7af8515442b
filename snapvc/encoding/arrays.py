"""numpy arrays and scalars in a state (the optional ``numpy`` extra).

An ``ndarray`` is stored as a typed value named ``"numpy:ndarray"`` whose fields are

==========  ===============================================================
field       value
==========  ===============================================================
``dtype``   ``numpy.lib.format.dtype_to_descr`` of its dtype: a str such as
            ``"<f4"`` (byte order included), or a list of tuples for a
            structured dtype
``shape``   a list of ints (``[]`` for a 0-d array)
``order``   ``"C"`` or ``"F"``: the order of the bytes in ``data``
``data``    the raw bytes of the elements, in that order
==========  ===============================================================

``data`` is a plain ``bytes`` field, so a large array is cut into content-defined
chunks exactly like a long bytes value (``snapvc.encoding.chunker``): appending rows to
a C-order matrix stores about the new rows, and a changed row about one chunk.

An array is stored in Fortran order only when it is Fortran-contiguous and not
C-contiguous (a 1-d array is both: ``"C"``). Any other layout (a strided view
``a[::2]``, a transpose that is neither) is stored as the values it shows, in C order,
and comes back as a C-contiguous array. A read array owns its memory and is writeable.

A numpy scalar (``np.float32(1.5)``, ``np.int64(3)``, ``np.str_``...) is a typed value
named ``"numpy:generic"`` with the fields ``dtype`` and ``data``, read back as a scalar
of the same type and value.

Refused, with ``UnsupportedValueError`` naming the path: arrays of Python objects
(``dtype.hasobject``: their bytes are pointers), subclasses of ``ndarray``
(``np.matrix``, masked arrays: what they add is not in the bytes), and dtypes whose
description does not give back the same dtype (metadata, titles).

numpy is imported only when an array or a numpy scalar is met, or a stored one is read:
``import snapvc`` never imports it. Reading a stored array where numpy is not installed
raises ``NumpyMissingError`` (unless unknown types are kept as stored,
``keep_unknown_types()``, as the ``snapvc`` command does). The dtype is rebuilt from its
description by ``descr_to_dtype``: nothing stored is ever evaluated or unpickled.
"""

from __future__ import annotations

import base64
import sys
from typing import Any, Final

from snapvc.errors import MalformedJsonError, NumpyMissingError, UnsupportedValueError

__all__ = ["ARRAY_TYPE", "SCALAR_TYPE", "JSON_KIND", "array_summary", "arrays_equal", "is_array", "is_numpy_value",
           "numpy_reason", "numpy_for", "adapter_functions", "to_json", "from_json", "header_json"]

ARRAY_TYPE: Final = "numpy:ndarray"
SCALAR_TYPE: Final = "numpy:generic"
NAMES: Final = frozenset({ARRAY_TYPE, SCALAR_TYPE})
# The tag of an array's JSON form (``{"$snapvc": "ndarray", ...}``).
JSON_KIND: Final = "ndarray"
# An array of at most this many numbers is shown in JSON as its values (readable);
# a larger one, or one of other kinds, as base64 of its bytes (exact, compact).
JSON_VALUES_MAX: Final = 1000
# Rows compared at a time when a diff counts changed rows (bounds the temporary memory).
_ROWS_AT_ONCE: Final = 4096


class _Malformed(ValueError):
    """Fields that are not an array's (or a scalar's): from JSON, a ``MalformedJsonError``
    naming the path; read from a store, the adapter's failure (``TypeAdapterError``)."""


def is_numpy_value(v: Any) -> bool:
    """Whether ``v`` is of a numpy type (by its class's module, without importing numpy)."""
    module = type(v).__module__
    return module == "numpy" or module.startswith("numpy.")


def is_array(v: Any) -> bool:
    """Whether ``v`` is exactly a numpy ndarray, or one read as stored (numpy missing)."""
    t = type(v)
    if t.__name__ == "ndarray" and t.__module__ == "numpy":
        return True
    return t.__name__ == "StoredTypedValue" and getattr(v, "type_name", None) == ARRAY_TYPE


def numpy_reason(v: Any) -> str | None:
    """Why a value of a numpy type cannot be stored, or None if it can."""
    np = sys.modules.get("numpy")
    if np is None:
        return None
    t = type(v)
    if isinstance(v, np.ndarray) and t is not np.ndarray:
        return (f"{t.__module__}.{t.__qualname__} (an ndarray subclass) is not supported: what it adds is not "
                "in its bytes; store numpy.asarray(value), or its parts")
    if not isinstance(v, (np.ndarray, np.generic)):
        return None
    dtype = v.dtype
    if dtype.hasobject:
        return f"a numpy array of dtype {dtype} holds Python objects, which are not stored as bytes; use plain lists"
    if _descr(dtype) is None:
        return f"numpy dtype {dtype!r} does not survive its description (metadata or titles); use a plainer dtype"
    return None


def _descr(dtype: Any) -> Any:
    """The stored description of ``dtype``, or None if it does not give back ``dtype``."""
    from numpy.lib.format import descr_to_dtype, dtype_to_descr

    if dtype.metadata:
        return None  # (dtype_to_descr would drop it, with a warning)
    descr = dtype_to_descr(dtype)
    try:
        back = descr_to_dtype(descr)
    except (TypeError, ValueError):
        return None
    if back != dtype or back.itemsize != dtype.itemsize or back.metadata != dtype.metadata:
        return None
    return descr


def _dtype(descr: Any) -> Any:
    from numpy.lib.format import descr_to_dtype

    return descr_to_dtype(_tuples(descr))


def _tuples(descr: Any) -> Any:
    """A description read from JSON (lists) as ``descr_to_dtype`` takes it (tuples)."""
    if isinstance(descr, list):
        return [tuple(_tuples(x) for x in field) if isinstance(field, (list, tuple)) else field for field in descr]
    return descr


def _array_fields(a: Any) -> dict[str, Any]:
    import numpy as np

    reason = numpy_reason(a)
    if reason is not None:
        raise UnsupportedValueError("value", reason)  # the encoder checks first and names the path
    # Fortran order only for an array that is F- and not C-contiguous: its bytes are then
    # taken as they lie, and it comes back with the same layout.
    order = "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C"
    return {"dtype": _descr(a.dtype), "shape": list(a.shape), "order": order,
            "data": np.ascontiguousarray(a).tobytes() if order == "C" else a.tobytes(order="F")}


def _array_from(fields: dict[str, Any]) -> Any:
    import numpy as np

    dtype = _dtype(fields["dtype"])
    shape = tuple(fields["shape"])
    order = fields["order"]
    data = fields["data"]
    if order not in ("C", "F") or type(data) is not bytes:
        raise _Malformed(f"a stored array has order {order!r} and data of type {type(data).__name__}")
    count = 1
    for n in shape:
        count *= n
    if len(data) != count * dtype.itemsize:
        raise _Malformed(f"a stored array of shape {shape} and dtype {dtype} holds {len(data)} bytes")
    if count == 0 or dtype.itemsize == 0:
        return np.empty(shape, dtype=dtype, order=order)
    # A bytearray is a copy the array owns and may write to.
    return np.frombuffer(bytearray(data), dtype=dtype, count=count).reshape(shape, order=order)


def _scalar_fields(v: Any) -> dict[str, Any]:
    reason = numpy_reason(v)
    if reason is not None:
        raise UnsupportedValueError("value", reason)
    return {"dtype": _descr(v.dtype), "data": v.tobytes()}


def _scalar_from(fields: dict[str, Any]) -> Any:
    import numpy as np

    dtype = _dtype(fields["dtype"])
    data = fields["data"]
    if type(data) is not bytes or len(data) != dtype.itemsize:
        raise _Malformed(f"a stored numpy scalar of dtype {dtype} holds {len(data)} bytes")
    return np.frombuffer(data, dtype=dtype, count=1).reshape(())[()]


def numpy_for(name_or_value: Any, keep_unknown: bool) -> Any:
    """The numpy module, when ``name_or_value`` is a stored numpy value's type name or a
    numpy value; None otherwise. A stored name where numpy cannot be imported raises
    ``NumpyMissingError``, or gives None when unknown types are kept as stored
    (``keep_unknown``: the caller then reads it as a ``StoredTypedValue``)."""
    if type(name_or_value) is str:  # (a np.str_ is a str too: a value, not a name)
        if name_or_value not in NAMES:
            return None
        try:
            import numpy
        except ImportError:
            if keep_unknown:
                return None
            raise NumpyMissingError(name_or_value) from None
        return numpy
    np = sys.modules.get("numpy")
    if np is None or not isinstance(name_or_value, (np.ndarray, np.generic)):
        return None
    return np


def adapter_functions(np: Any) -> list[tuple[type, str, Any, Any]]:
    """(class, stored name, to_fields, from_fields) of each numpy adapter: an ndarray
    exactly, and every numpy scalar type (``np.generic``)."""
    return [(np.ndarray, ARRAY_TYPE, _array_fields, _array_from), (np.generic, SCALAR_TYPE, _scalar_fields, _scalar_from)]


# -- equality and diff summaries ---------------------------------------------------------


def _header(v: Any) -> tuple[Any, tuple[int, ...], str, bytes | None]:
    """(dtype description, shape, order, bytes or None) of an array, read or as stored."""
    if type(v).__name__ == "StoredTypedValue":
        f = v.fields
        return f.get("dtype"), tuple(f.get("shape", ())), f.get("order", "C"), f.get("data")
    order = "F" if v.flags.f_contiguous and not v.flags.c_contiguous else "C"
    return _descr(v.dtype), tuple(v.shape), order, None


def _raw(v: Any) -> bytes:
    if type(v).__name__ == "StoredTypedValue":
        data: bytes = v.fields.get("data", b"")
        return data
    return bytes(_array_fields(v)["data"])


def arrays_equal(a: Any, b: Any) -> bool:
    """Whether two values are the same stored array: dtype (byte order included), shape,
    order and bytes (so NaNs with the same bits are equal, and -0.0 differs from 0.0)."""
    if not (is_array(a) and is_array(b)):
        return False
    if _header(a)[:3] != _header(b)[:3]:
        return False
    return _raw(a) == _raw(b)


def _dtype_text(descr: Any) -> str:
    return descr if isinstance(descr, str) else "structured"


def _shape_text(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def array_summary(v: Any) -> str:
    """One line naming an array without its values: ``array <f4 (3, 768), 9216 bytes``."""
    descr, shape, order, data = _header(v)
    size = len(data) if data is not None else v.nbytes
    return f"array {_dtype_text(descr)} {_shape_text(shape)}{' F-order' if order == 'F' else ''}, {size} bytes"


def change_summary(old: Any, new: Any) -> str:
    """What changed between two arrays, in one line: dtype and shape before and after,
    and for a C-order array with the same row shape, rows appended, removed or changed."""
    d0, s0, o0, _ = _header(old)
    d1, s1, o1, _ = _header(new)
    head = f"array {_dtype_text(d0)}" + ("" if d0 == d1 else f" -> {_dtype_text(d1)}")
    head += f" {_shape_text(s0)}" + ("" if s0 == s1 else f" -> {_shape_text(s1)}")
    if o0 != o1:
        head += f", order {o0} -> {o1}"
    if d0 != d1 or o0 != o1 or o0 != "C" or not s0 or not s1 or s0[1:] != s1[1:]:
        return head
    a, b = _raw(old), _raw(new)
    row = len(a) // s0[0] if s0[0] else (len(b) // s1[0] if s1[0] else 0)
    common = min(s0[0], s1[0])
    changed = 0
    if row:
        for start in range(0, common, _ROWS_AT_ONCE):
            stop = min(common, start + _ROWS_AT_ONCE)
            if a[start * row:stop * row] != b[start * row:stop * row]:
                changed += sum(a[i * row:(i + 1) * row] != b[i * row:(i + 1) * row] for i in range(start, stop))
    parts = []
    if s1[0] > s0[0]:
        parts.append(f"{s1[0] - s0[0]} row{_s(s1[0] - s0[0])} appended")
    elif s1[0] < s0[0]:
        parts.append(f"{s0[0] - s1[0]} row{_s(s0[0] - s1[0])} removed from the end")
    if changed:
        parts.append(f"{changed} row{_s(changed)} changed")
    return head + (": " + ", ".join(parts) if parts else "")


def header_json(v: Any) -> dict[str, Any]:
    """An array's JSON form without its values (what a diff shows of each side)."""
    descr, shape, order, data = _header(v)
    return {"$snapvc": JSON_KIND, "dtype": _json_descr(descr), "shape": list(shape), "order": order,
            "bytes": len(data) if data is not None else int(v.nbytes)}


def _json_descr(descr: Any) -> Any:
    if isinstance(descr, (list, tuple)):
        return [_json_descr(x) for x in descr]
    return descr


# -- JSON ----------------------------------------------------------------------------------


def to_json(v: Any) -> dict[str, Any]:
    """An ndarray's JSON form: ``{"$snapvc": "ndarray", "dtype": "<f4", "shape": [2, 3],
    "order": "C"}`` with ``"values"`` (nested lists, as ``tolist()`` gives) for an array
    of at most ``JSON_VALUES_MAX`` finite booleans, ints or floats, else ``"base64"`` of
    its bytes in that order. Both read back to the same array. A numpy scalar is the
    form of its 0-d array, with ``"scalar": true``."""
    import numpy as np

    if isinstance(v, np.generic):
        return {**to_json(np.asarray(v)), "scalar": True}
    fields = _array_fields(v)
    out: dict[str, Any] = {"$snapvc": JSON_KIND, "dtype": _json_descr(fields["dtype"]), "shape": fields["shape"],
                           "order": fields["order"]}
    if (v.dtype.kind in "biuf" and v.dtype.fields is None and v.size <= JSON_VALUES_MAX
            and (v.dtype.kind != "f" or bool(np.isfinite(v).all()))):
        out["values"] = v.tolist()  # the array's own nesting; a 0-d array gives its one number
    else:
        out["base64"] = base64.b64encode(fields["data"]).decode("ascii")
    return out


def from_json(j: dict[str, Any], where: str) -> Any:
    """The array ``to_json`` made ``j`` from (``MalformedJsonError`` naming ``where``)."""
    np = numpy_for(ARRAY_TYPE, False)

    try:
        dtype = _dtype(j["dtype"])
        shape = [int(n) for n in j["shape"]]
        order = j["order"]
        if "values" in j:
            a = np.array(j["values"], dtype=dtype).reshape(shape)
            data = a.tobytes(order=order)
        else:
            data = base64.b64decode(j["base64"], validate=True)
        array = _array_from({"dtype": _descr(dtype), "shape": shape, "order": order, "data": data})
        if j.get("scalar") is True:
            if shape:
                raise _Malformed(f"a numpy scalar of shape {shape}")
            return array[()]
        return array
    except (KeyError, TypeError, ValueError, _Malformed) as exc:
        raise MalformedJsonError(where, f"a malformed '$snapvc' object of kind 'ndarray': {exc!r}") from exc


def _s(n: int) -> str:
    return "" if n == 1 else "s"
