"""Adapters: how values that are not plain data (dataclasses, pydantic models, your own
classes) are stored and rebuilt.

A typed value is stored as its type's *name* plus a dict of fields, each field encoded
like any other value (so a large field is chunked and deduplicated as usual).

- **dataclasses** and **pydantic models** need no registration: they are stored under
  ``"module:QualName"``. To rebuild one, its class must be registered or its module must
  already be imported (snapvc never imports modules while reading: reading is not code
  execution). The fields are set directly, without running ``__init__`` or validation,
  so the value comes back exactly as it was stored; for a pydantic model that includes
  which fields were set, its extra fields and its private attributes.
- **any other class**: ``register_type(cls, to_fields, from_fields, name=...)``.
- **numpy arrays and scalars** (the ``numpy`` extra) have built-in adapters
  (``snapvc.encoding.arrays``), registered when the first one is met or read: numpy is
  never imported for a state that holds none.

A value whose class is not known here raises ``UnknownTypeError`` when read, unless the
process reads such values as they are stored (``keep_unknown_types()``, which the
``snapvc`` command does: it shows, diffs and merges an agent's state without the agent's
code): each is then a ``StoredTypedValue`` holding the type's name and the fields, which
is written back exactly as it was read, so a merge or a commit of it changes nothing.

Nothing is ever pickled.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from snapvc.encoding import arrays  # (numpy itself is imported only when a numpy value is met or read)
from snapvc.errors import InvalidArgumentError, SnapvcError, TypeAdapterError, UnknownTypeError

__all__ = ["StoredTypedValue", "TypeAdapter", "adapter_for_name", "adapter_for_value", "keep_unknown_types",
           "keeps_unknown_types", "register_builtin", "register_type"]


@dataclass(frozen=True, slots=True)
class TypeAdapter:
    name: str
    cls: type
    to_fields: Callable[[Any], dict[str, Any]]
    from_fields: Callable[[dict[str, Any]], Any]
    # The fields are the object's own attributes, read as they are (the adapters made for
    # dataclasses and pydantic models): what the object holds, compared by identity, tells
    # whether its fields changed, so the encoder confirms a value unchanged without
    # calling ``to_fields``. False for your own ``to_fields``, which may compute anything.
    own_fields: bool = False


# Stored beside a pydantic model's fields: which were set (when not all of them), its
# extra fields and its private attributes. Field names cannot start with an underscore,
# so these never collide with a field.
_PYDANTIC_FIELDS_SET = "__fields_set__"
_PYDANTIC_EXTRA = "__extra__"
_PYDANTIC_PRIVATE = "__private__"

_by_type: dict[type, TypeAdapter] = {}
_by_name: dict[str, TypeAdapter] = {}
# The registry is shared by every thread: its changes are made under this lock, so that an
# adapter made automatically in one thread never replaces one registered in another.
_lock = threading.Lock()
# Whether values of unknown types are read as StoredTypedValue: set once by a program that
# reads other programs' states (the command line), before any read.
_keep_unknown = False


class StoredTypedValue:
    """A typed value read where its class is not known: the name it is stored under and
    its fields. Stored again, it is the same value (same bytes, same id) as was read."""

    __slots__ = ("type_name", "fields")

    def __init__(self, type_name: str, fields: dict[str, Any]) -> None:
        self.type_name = type_name
        self.fields = fields

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StoredTypedValue):
            return NotImplemented
        return self.type_name == other.type_name and self.fields == other.fields

    __hash__ = None  # type: ignore[assignment]  # its fields may change, as a dataclass's may

    def __repr__(self) -> str:
        return f"{self.type_name}({', '.join(f'{k}={v!r}' for k, v in self.fields.items())})"


def keep_unknown_types(enabled: bool = True) -> None:
    """Read values whose class is not known here as ``StoredTypedValue`` (instead of
    raising ``UnknownTypeError``), for this whole process."""
    global _keep_unknown
    _keep_unknown = enabled


def keeps_unknown_types() -> bool:
    """Whether this process reads values of unknown types as ``StoredTypedValue``."""
    return _keep_unknown


def register_builtin(cls: type, name: str, to_fields: Callable[[Any], dict[str, Any]],
                     from_fields: Callable[[dict[str, Any]], Any]) -> None:
    """Register one of snapvc's own adapters (numpy's), once: values of ``cls`` and of its
    subclasses that ``adapter_for_value`` is told to map (``_builtin_bases``) use it."""
    with _lock:
        if name in _by_name and _by_name[name].cls is cls:
            return
        adapter = _adapter(name, cls, to_fields, from_fields)
        _by_type[cls] = adapter
        _by_name[name] = adapter


def _load_numpy(name_or_value: Any) -> bool:
    """Register the numpy adapters (``snapvc.encoding.arrays``) if ``name_or_value`` is a
    numpy value or a stored one's name; True if they are registered."""
    np = arrays.numpy_for(name_or_value, _keep_unknown)
    if np is None:
        return False
    for cls, name, to_fields, from_fields in arrays.adapter_functions(np):
        register_builtin(cls, name, to_fields, from_fields)
    return True


def _numpy_adapter(value: Any) -> TypeAdapter | None:
    """The built-in adapter of a numpy value (an ndarray exactly, or any numpy scalar);
    None for anything else, ndarray subclasses included (the encoder says why)."""
    if not _load_numpy(value):
        return None
    cls = type(value)
    adapter = _by_type.get(cls)
    if adapter is None and arrays.SCALAR_TYPE in _by_name and isinstance(value, _by_name[arrays.SCALAR_TYPE].cls):
        adapter = _by_name[arrays.SCALAR_TYPE]  # np.float32, np.int64...: one adapter for all scalars
        with _lock:
            _by_type.setdefault(cls, adapter)
    return adapter


def _stored_adapter(name: str) -> TypeAdapter:
    return TypeAdapter(name, StoredTypedValue, lambda value: value.fields, lambda fields: StoredTypedValue(name, fields))


def _adapter(name: str, cls: type, to_fields: Callable[[Any], dict[str, Any]],
             from_fields: Callable[[dict[str, Any]], Any], own_fields: bool = False) -> TypeAdapter:
    """An adapter whose ``from_fields`` names itself when it fails: the stored value was
    read and decoded, so the error is the class's code's, not the data's (which a
    decoder would otherwise report as a corrupt object)."""

    def rebuild(fields: dict[str, Any]) -> Any:
        try:
            return from_fields(fields)
        except SnapvcError:
            raise  # already says what and where (a nested value snapvc cannot rebuild)
        except Exception as exc:
            raise TypeAdapterError(name, cls, exc) from exc

    return TypeAdapter(name, cls, to_fields, rebuild, own_fields)


def _type_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def register_type(
    cls: type,
    to_fields: Callable[[Any], dict[str, Any]] | None = None,
    from_fields: Callable[[dict[str, Any]], Any] | None = None,
    *,
    name: str | None = None,
) -> TypeAdapter:
    """Teach snapvc to store instances of ``cls``.

    ``to_fields(obj)`` returns a dict of str keys to storable values; ``from_fields(d)``
    rebuilds the object. For dataclasses and pydantic models both may be omitted. ``name``
    is what is stored (default ``"module:QualName"``): keep it stable once data exists.
    """
    auto = _automatic_adapter(cls)
    own_fields = False
    if to_fields is None or from_fields is None:
        if auto is None:
            raise InvalidArgumentError("cls", f"{cls!r} is not a dataclass or pydantic model: give to_fields and from_fields")
        own_fields = to_fields is None and auto.own_fields
        to_fields = to_fields or auto.to_fields
        from_fields = from_fields or auto.from_fields
    adapter = _adapter(name or _type_name(cls), cls, to_fields, from_fields, own_fields)
    with _lock:
        _by_type[cls] = adapter
        _by_name[adapter.name] = adapter
    return adapter


def _is_pydantic_model(cls: type) -> bool:
    return any(base.__module__.startswith("pydantic") and base.__name__ == "BaseModel" for base in cls.__mro__[1:])


def _automatic_adapter(cls: type) -> TypeAdapter | None:
    if dataclasses.is_dataclass(cls):
        names = tuple(f.name for f in dataclasses.fields(cls))

        def dc_to(obj: Any) -> dict[str, Any]:
            return {n: getattr(obj, n) for n in names}

        def dc_from(values: dict[str, Any]) -> Any:
            obj = object.__new__(cls)
            for n, v in values.items():
                object.__setattr__(obj, n, v)
            return obj

        return _adapter(_type_name(cls), cls, dc_to, dc_from, _plain_attributes(cls, names))
    if _is_pydantic_model(cls):
        names = tuple(cls.model_fields)  # type: ignore[attr-defined]

        def pd_to(obj: Any) -> dict[str, Any]:
            fields = {n: getattr(obj, n) for n in names}
            if obj.model_fields_set != set(names):  # which fields were set is part of its value
                fields[_PYDANTIC_FIELDS_SET] = sorted(obj.model_fields_set)
            if obj.__pydantic_extra__:
                fields[_PYDANTIC_EXTRA] = dict(obj.__pydantic_extra__)
            if obj.__pydantic_private__:
                fields[_PYDANTIC_PRIVATE] = dict(obj.__pydantic_private__)
            return fields

        every_field = frozenset(names)
        plain = _constructed_plainly(cls)
        no_extra: Any = {} if cls.model_config.get("extra") == "allow" else None  # type: ignore[attr-defined]

        def pd_from(values: dict[str, Any]) -> Any:
            fields_set = values.pop(_PYDANTIC_FIELDS_SET, None)
            extra = values.pop(_PYDANTIC_EXTRA, None)
            private = values.pop(_PYDANTIC_PRIVATE, None)
            if plain and values.keys() == every_field:
                # What model_construct makes of every field given by name, without its
                # per-field search for aliases and defaults.
                obj: Any = object.__new__(cls)
                object.__setattr__(obj, "__dict__", {n: values[n] for n in names})
                object.__setattr__(obj, "__pydantic_extra__", dict(no_extra) if no_extra is not None else None)
                object.__setattr__(obj, "__pydantic_private__", None)
            else:
                obj = cls.model_construct(**values)  # type: ignore[attr-defined]
            object.__setattr__(obj, "__pydantic_fields_set__", set(names) if fields_set is None else set(fields_set))
            if extra:
                object.__setattr__(obj, "__pydantic_extra__", extra)
            if private:
                object.__setattr__(obj, "__pydantic_private__", {**(obj.__pydantic_private__ or {}), **private})
            return obj

        return _adapter(_type_name(cls), cls, pd_to, pd_from, _plain_attributes(cls, names))
    return None


def _constructed_plainly(cls: type) -> bool:
    """Whether pydantic's ``model_construct`` of ``cls``, given every field by name, only
    sets them: no field has an alias, no post-init hook (private attributes with defaults
    add one) runs, it is not a root model, and it makes its instances as ``object`` does."""
    fields = cls.model_fields.values()  # type: ignore[attr-defined]
    return (getattr(cls, "__new__", None) is object.__new__ and getattr(cls, "__pydantic_post_init__", None) is None
            and not getattr(cls, "__pydantic_root_model__", False)
            and all(f.alias is None and f.validation_alias is None for f in fields))


def _plain_attributes(cls: type, names: tuple[str, ...]) -> bool:
    """Whether reading each field of ``cls``'s instances gives what the instance itself
    holds: no class attribute along the MRO is a descriptor that computes it (a
    property, say), other than the slot descriptors of a class with slots."""
    for name in names:
        for klass in cls.__mro__:
            found = klass.__dict__.get(name)
            if found is not None and (hasattr(type(found), "__get__") and not _is_slot(found)):
                return False
    return True


def _is_slot(attribute: Any) -> bool:
    return type(attribute).__name__ == "member_descriptor"


def adapter_for_value(value: Any) -> TypeAdapter | None:
    """The adapter that stores ``value``, or None if its type has none."""
    cls = type(value)
    if cls is StoredTypedValue:  # written back under the name it was read with
        return _stored_adapter(value.type_name)
    adapter = _by_type.get(cls)
    if adapter is None and (cls.__module__ == "numpy" or cls.__module__.startswith("numpy.")):
        return _numpy_adapter(value)
    if adapter is None:
        made = _automatic_adapter(cls)
        if made is not None:
            with _lock:
                adapter = _by_type.setdefault(cls, made)  # another thread's, if it was first
                if adapter is made:
                    # The class met last under a name is the one its values come back as: a class
                    # defined again (a module reloaded, a notebook cell run again) replaces the old.
                    _by_name[adapter.name] = adapter
    return adapter


def adapter_for_name(name: str) -> TypeAdapter:
    """The adapter that rebuilds values stored under ``name``; ``UnknownTypeError`` if none.

    A class named ``"module:QualName"`` is looked up in its module when that module is
    imported: if the module now holds another class of that name (it was reloaded, or a
    notebook cell defined the class again), values come back as instances of the class
    it holds now, not of the one registered or met before."""
    adapter = _by_name.get(name)
    if adapter is None and name.startswith("numpy:"):
        if _load_numpy(name):  # imports numpy; without it, raises or keeps the value as stored
            return _by_name[name]
    live = _live_class(name)
    if live is not None and (adapter is None or (adapter.cls is not live and _type_name(adapter.cls) == name)):
        found = _by_type.get(live) or _automatic_adapter(live)
        if found is not None and found.name == name:
            with _lock:
                found = _by_type.setdefault(live, found)  # another thread's, if it was first
                if found.name == name:
                    _by_name[name] = found
                    return found
    if adapter is not None:
        return adapter
    if _keep_unknown:
        return _stored_adapter(name)
    raise UnknownTypeError(name)


def _live_class(name: str) -> type | None:
    """The class ``"module:QualName"`` names in its module as it is now, or None (the
    module is not imported, or holds no class there). Reading never imports code."""
    module_name, _, qualname = name.partition(":")
    obj: Any = sys.modules.get(module_name)
    if obj is None or not qualname:
        return None
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj if isinstance(obj, type) else None
