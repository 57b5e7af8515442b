"""Channel values and pending writes as snapvc values, and reading many checkpoints at once.

Encoding. A channel value is stored as a snapvc value whenever snapvc can store it
exactly (see ``snapvc/encoding/adapters.py``): then a message list that grows by one
message stores one message, and a diff shows the change. LangChain's messages are
pydantic models. A message that is a channel's value, or an element of a list or tuple
that is, is stored as a plain dict ``{"langchain_message": <its class name>, "fields":
{...}}`` (the fields as snapvc's pydantic adapter takes them, so it comes back exactly),
which any snapvc reader (the ``snapvc`` command too) shows without LangChain; it is
deduplicated and compressed like any map. A message found deeper (in a dict, in a field
of another model) is a typed value of snapvc's pydantic adapter: the classes are
registered here, so it is readable wherever this module is imported.
A value snapvc cannot store (a set, a ``Send``, an arbitrary object) is kept as what
LangGraph's serializer (without its pickle fallback) makes of it, in a plain dict
``{"langgraph_serialized": <its type name>, "data": <its bytes>}`` that any snapvc
reader can show. The encoder reports such a value by its path; the value is then
wrapped at the top of its channel (or write) and the commit tried again.

Reading. ``Reader`` builds values from stored trees and remembers what it built by
object id. Objects are immutable, so a subtree met again (the unchanged prefix of a
message history, a document that did not change) is built once for all the checkpoints
one reader returns: listing 500 checkpoints of a growing history costs about one
history, not 500. A value it returns is shared between the checkpoints of that one
answer (as a running graph's checkpoints share their unchanged values), never with
another answer: each ``get_tuple`` and ``list`` uses a reader of its own.
"""

from __future__ import annotations

import ast
from bisect import bisect_right
from collections.abc import Iterable
from typing import Any, Final

from langchain_core import messages as lc_messages
from langgraph.checkpoint.serde.base import SerializerProtocol

from snapvc.encoding.adapters import TypeAdapter, adapter_for_name, adapter_for_value, register_type
from snapvc.encoding.jsonable import SCALAR_TYPES
from snapvc.encoding.cache import IMMUTABLE_TYPES, DeepSnapshot
from snapvc.encoding.nodes import StoredNode, read_node
from snapvc.encoding.reader import Loader
from snapvc.errors import CorruptObjectError, UnsupportedValueError
from snapvc.ids import ObjectId
from snapvc.objects import BLOB, MAP, SEQ, TEXT

__all__ = ["MISSING", "SERIALIZED", "MESSAGE", "Reader", "Watch", "path_steps", "decode", "storable_type", "wrap",
           "is_serialized", "fresh_copies",
           "to_stored", "stored_elements", "from_stored"]

MISSING: Any = object()  # what ``Reader.lookup_path`` returns for an absent key
SERIALIZED: Final = "langgraph_serialized"  # the key that marks a value LangGraph's serializer stored
MESSAGE: Final = "langchain_message"  # the key that marks a LangChain message stored as a plain dict

# Every message class of langchain_core by name; each registered too, so a message stored
# as a typed value is readable whenever this module is imported (snapvc never imports a
# module to read a value).
_MESSAGES: dict[str, TypeAdapter] = {}
for _name in lc_messages.__all__:
    _cls = getattr(lc_messages, _name, None)
    if isinstance(_cls, type) and issubclass(_cls, lc_messages.BaseMessage) and _cls is not lc_messages.BaseMessage:
        _MESSAGES[_cls.__name__] = register_type(_cls)
_MESSAGE_TYPES = frozenset(adapter.cls for adapter in _MESSAGES.values())


def _stored_message(value: Any) -> Any:
    """A message of langchain_core as a marked plain dict; anything else as it is."""
    if type(value) not in _MESSAGE_TYPES:
        return value
    name = type(value).__name__
    return {MESSAGE: name, "fields": _MESSAGES[name].to_fields(value)}


def _is_message(value: Any) -> bool:
    return type(value) is dict and len(value) == 2 and MESSAGE in value and "fields" in value


def _revived(value: Any) -> Any:
    """A marked plain dict as its message again; anything else as it is."""
    adapter = _MESSAGES.get(value[MESSAGE]) if _is_message(value) else None
    return value if adapter is None else adapter.from_fields(dict(value["fields"]))


def to_stored(value: Any) -> Any:
    """A channel value or write as stored: LangChain messages (the value, or elements of
    it when it is a list or tuple) become marked plain dicts; anything else is itself."""
    if type(value) in (list, tuple):
        if any(type(v) in _MESSAGE_TYPES for v in value):
            out = stored_elements(value)
            return out if type(value) is list else tuple(out)
        return value
    return _stored_message(value)


def stored_elements(values: Any) -> list[Any]:
    """Elements to append to a stored list: messages as marked plain dicts."""
    return [_stored_message(v) for v in values]


def from_stored(value: Any) -> Any:
    """The inverse of ``to_stored``."""
    if type(value) in (list, tuple):
        if any(_is_message(v) for v in value):
            out = [_revived(v) for v in value]
            return out if type(value) is list else tuple(out)
        return value
    return _revived(value)


def storable_type(value: Any) -> bool:
    """Whether snapvc stores values of ``value``'s type (a ``Send``, a set or an arbitrary
    object it does not: those go to LangGraph's serializer at once, rather than after an
    encoder that refused them, and a working copy that copied them first)."""
    t = type(value)
    return t in SCALAR_TYPES or t is dict or t is list or t is tuple or adapter_for_value(value) is not None


def wrap(value: Any, serde: SerializerProtocol) -> dict[str, Any]:
    """``value`` as LangGraph's serializer stores it, in a marked dict."""
    type_name, data = serde.dumps_typed(value)
    return {SERIALIZED: type_name, "data": data}


def is_serialized(value: Any) -> bool:
    return type(value) is dict and len(value) == 2 and SERIALIZED in value and "data" in value


def decode(value: Any, serde: SerializerProtocol) -> Any:
    """A stored channel value or write as LangGraph gave it: a serialized one is unwrapped."""
    if is_serialized(value):
        return serde.loads_typed((value[SERIALIZED], value["data"]))
    return value


def path_steps(error: UnsupportedValueError) -> tuple[Any, ...]:
    """The steps of the path an ``UnsupportedValueError`` names (``state['a'][3]`` ->
    ``('a', 3)``); empty if it names the state itself."""
    path = error.path
    if not path.startswith("state"):
        return ()
    node = ast.parse("_" + path[len("state"):], mode="eval").body
    steps: list[Any] = []
    while isinstance(node, ast.Subscript):
        steps.append(ast.literal_eval(node.slice))
        node = node.value
    return tuple(reversed(steps))


_CANNOT: Any = object()  # what ``_copy`` returns for a value it does not copy
_new_object = object.__new__
_set_attribute = object.__setattr__


def fresh_copies(values: Iterable[Any]) -> list[Any] | None:
    """Deep copies of ``values``: every dict, list and tuple below them, and every LangChain
    message, is a new object; what cannot change in place (str, numbers, bytes ...) is
    shared. None if one holds anything else (a typed value other than a message, a
    message with private attributes): only a copy of what is known is made here.

    A copy of values proven to hold what was stored (``Watch``) equals what would be
    built from the stored objects, at the cost of allocating its containers (about 4 µs
    a message, against about 15 µs to build one from its stored fields)."""
    out = [_copy(v) for v in values]
    return None if any(c is _CANNOT for c in out) else out


def _copy(value: Any) -> Any:
    t = type(value)
    if t is dict:
        copied = value.copy()  # in one C call; then what can change in place is replaced by its copy
        for k, v in value.items():
            if type(v) not in IMMUTABLE_TYPES:
                c = _copy(v)
                if c is _CANNOT:
                    return _CANNOT
                copied[k] = c
        return copied
    if t is list or t is tuple:
        items = list(value)
        for i, v in enumerate(value):
            if type(v) not in IMMUTABLE_TYPES:
                c = _copy(v)
                if c is _CANNOT:
                    return _CANNOT
                items[i] = c
        return items if t is list else tuple(items)
    if t in _MESSAGE_TYPES and value.__pydantic_private__ is None:
        fields = _copy(value.__dict__)
        extra = value.__pydantic_extra__
        extra = _copy(extra) if extra is not None else None
        if fields is _CANNOT or extra is _CANNOT:
            return _CANNOT
        message = _new_object(t)
        _set_attribute(message, "__dict__", fields)
        _set_attribute(message, "__pydantic_fields_set__", set(value.__pydantic_fields_set__))
        _set_attribute(message, "__pydantic_extra__", extra)
        _set_attribute(message, "__pydantic_private__", None)
        return message
    return value if t in IMMUTABLE_TYPES else _CANNOT


class Watch:
    """What some values held when they were stored, by identity: tells, in a few C-speed
    passes, whether any of them was changed in place since.

    The saver keeps the stored form of a list channel's elements apart from LangGraph's
    objects (messages are stored as marked dicts, copies), so a message or dict that a
    node changes in place, rather than replacing it, would otherwise go unseen. A
    ``Watch`` is the encoder's own flat snapshot (``snapvc.encoding.cache.DeepSnapshot``) of the
    values: every container below them and every typed value whose fields are its own
    attributes (a LangChain message, a dataclass, a pydantic model), each with the
    objects it holds. A value is unchanged while each of those holds the same objects:
    str, numbers and the other scalars cannot change in place.

    ``add`` refuses (returns False) values holding anything else (an object whose fields
    are computed, a type snapvc cannot store): nothing proves them unchanged."""

    __slots__ = ("_snapshot",)

    def __init__(self) -> None:
        self._snapshot = DeepSnapshot()

    def add(self, values: Iterable[Any]) -> bool:
        """Record each of ``values``; False (the watch then proves nothing) if one holds
        what cannot be watched."""
        found = DeepSnapshot.of(list(values))
        if found is None:
            return False
        self._snapshot.add_all(found)
        return True

    def same(self) -> bool:
        """True if every recorded container and typed value holds what it held when added."""
        return self._snapshot.same()


class Reader:
    """Builds stored values through a ``Loader``, each object once (see the module notes).
    Nodes are read with ``snapvc.encoding.nodes.read_node``."""

    def __init__(self, loader: Loader) -> None:
        self.loader = loader
        self._nodes: dict[bytes, StoredNode] = {}
        self._built: dict[bytes, Any] = {}
        self._flat: dict[bytes, list[Any]] = {}

    def node(self, oid: bytes) -> StoredNode:
        found = self._nodes.get(oid)
        if found is None:
            found = self._nodes[oid] = read_node(oid, self.loader.fetch(oid))
        return found

    def prefetch(self, ids: list[bytes]) -> None:
        """Fetch objects in one batch (the roots of the checkpoints about to be read)."""
        self.loader.fetch_many([oid for oid in ids if oid not in self._nodes])

    # -- values -------------------------------------------------------------------------

    def root(self, oid: bytes, known: dict[str, Any] | None = None) -> dict[str, Any]:
        """A commit's state as a fresh dict (its values built as ``value`` builds them,
        messages stored as plain dicts revived, see ``to_stored``). The channels of
        ``known`` are not read: their values are the ones given there."""
        if not known:
            return dict(self._map_items(self.node(oid), from_stored))
        return dict(self._map_items(self.node(oid), from_stored, known))

    def value(self, oid: bytes) -> Any:
        built = self._built.get(oid, MISSING)
        if built is not MISSING:
            return built
        node = self.node(oid)
        kind = node.kind
        if kind == MAP:
            fields = dict(self._map_items(node))
            built = _revived(fields) if node.typed_name is None else adapter_for_name(node.typed_name).from_fields(fields)
        elif kind == SEQ:
            flat = self._seq_flat(node)
            built = tuple(flat) if node.value_type == "tuple" else list(flat)
        elif kind == TEXT:
            data = b"".join(self._text_pieces(node))
            if node.value_type == "str":
                try:
                    built = data.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise CorruptObjectError(ObjectId(oid), f"text is not valid UTF-8: {exc}") from None
            else:
                built = data
        elif kind == BLOB:
            built = node.data
        else:
            raise CorruptObjectError(ObjectId(oid), f"a value cannot be an object of kind {kind:#04x}")
        self._built[oid] = built
        return built

    def lookup_path(self, oid: bytes, keys: tuple[str, ...]) -> Any:
        """The value at ``keys`` (map keys, one per level) below the stored map ``oid``, or
        ``MISSING``: reads only the nodes on its path."""
        value: Any = None
        for depth, key in enumerate(keys):
            node = self.node(oid)
            while not node.is_leaf:
                i = bisect_right(node.first_keys, key) - 1
                if i < 0:
                    return MISSING
                node = self.node(node.children[i])
            if key not in node.entries:
                return MISSING
            if key not in node.refs:
                value = node.entries[key]
                for inner in keys[depth + 1:]:  # an inline value: the rest of the path is in it
                    if type(value) is not dict or inner not in value:
                        return MISSING
                    value = value[inner]
                return value
            oid = node.entries[key]
        return self.value(oid)

    def _map_items(self, node: StoredNode, inline: Any = None, known: dict[str, Any] | None = None) -> list[tuple[str, Any]]:
        """The entries of a MAP node; ``inline`` (if given) applied to the values stored in
        it; the keys of ``known`` (if given) not read but taken from it."""
        if node.is_leaf:
            refs = node.refs
            if known:
                return [(k, known[k] if k in known else self.value(v) if k in refs else inline(v))
                        for k, v in node.entries.items()]
            if inline is None:
                return [(k, self.value(v) if k in refs else v) for k, v in node.entries.items()]
            return [(k, self.value(v) if k in refs else inline(v)) for k, v in node.entries.items()]
        items: list[tuple[str, Any]] = []
        for child in node.children:
            items += self._map_items(self.node(child), inline, known)
        return items

    def _seq_flat(self, node: StoredNode) -> list[Any]:
        """The elements of a SEQ node, remembered by id (never handed out itself)."""
        flat = self._flat.get(node.id)
        if flat is not None:
            return flat
        if node.is_leaf:
            refs = node.refs
            flat = list(node.entries) if not refs else [self.value(v) if i in refs else v for i, v in enumerate(node.entries)]
            if any(_is_message(v) for v in flat):
                flat = [_revived(v) for v in flat]
        else:
            flat = []
            for child in node.children:
                flat += self._seq_flat(self.node(child))
        self._flat[node.id] = flat
        return flat

    def _text_pieces(self, node: StoredNode) -> list[bytes]:
        if node.is_leaf:
            refs = node.refs
            return [self.node(p).data if i in refs else p for i, p in enumerate(node.entries)]
        pieces: list[bytes] = []
        for child in node.children:
            pieces += self._text_pieces(self.node(child))
        return pieces
