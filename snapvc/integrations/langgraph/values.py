"""Channel values and pending writes as snapvc values, and reading many checkpoints at once.

Encoding. A channel value is stored as a snapvc value whenever snapvc can store it
exactly (see ``snapvc/encoding/adapters.py``): then a message list that grows by one
message stores one message, and a diff shows the change. LangChain's messages are
pydantic models; they are registered here, so a message is a typed map of its fields
(readable whenever this module is imported), deduplicated and compressed like any map.
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
from typing import Any, Final

from langchain_core import messages as lc_messages
from langgraph.checkpoint.serde.base import SerializerProtocol

from snapvc.encoding.adapters import adapter_for_name, register_type
from snapvc.encoding.nodes import decode_node
from snapvc.encoding.reader import Loader
from snapvc.errors import CorruptObjectError, UnsupportedValueError
from snapvc.ids import ObjectId
from snapvc.objects import BLOB, MAP, SEQ, TEXT

__all__ = ["MISSING", "SERIALIZED", "Reader", "path_steps", "decode", "wrap", "is_serialized"]

_TAG_TUPLE = 1
_TAG_STR = 0


SERIALIZED: Final = "langgraph_serialized"  # the key that marks a value LangGraph's serializer stored


# Every message class of langchain_core, so a stored message is readable whenever this
# module is imported (snapvc never imports a module to read a value).
for _name in lc_messages.__all__:
    _cls = getattr(lc_messages, _name, None)
    if isinstance(_cls, type) and issubclass(_cls, lc_messages.BaseMessage) and _cls is not lc_messages.BaseMessage:
        register_type(_cls)


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


class Reader:
    """Builds stored values through a ``Loader``, each object once (see the module notes)."""

    def __init__(self, loader: Loader) -> None:
        self.loader = loader
        self._nodes: dict[bytes, tuple[int, Any]] = {}
        self._built: dict[bytes, Any] = {}
        self._flat: dict[bytes, list[Any]] = {}

    def node(self, oid: bytes) -> tuple[int, Any]:
        found = self._nodes.get(oid)
        if found is None:
            found = self._nodes[oid] = decode_node(oid, self.loader.fetch(oid))
        return found

    def prefetch(self, ids: list[bytes]) -> None:
        """Fetch objects in one batch (the roots of the checkpoints about to be read)."""
        self.loader.fetch_many([oid for oid in ids if oid not in self._nodes])

    # -- values -------------------------------------------------------------------------

    def root(self, oid: bytes) -> dict[str, Any]:
        """A commit's state as a fresh dict (its values built as ``value`` builds them)."""
        return dict(self._map_items(self.node(oid)[1]))

    def value(self, oid: bytes) -> Any:
        built = self._built.get(oid, MISSING)
        if built is not MISSING:
            return built
        kind, node = self.node(oid)
        if kind == MAP:
            fields = dict(self._map_items(node))
            tag = node[0]
            built = fields if tag == 0 else adapter_for_name(tag).from_fields(fields)
        elif kind == SEQ:
            flat = self._seq_flat(oid, node)
            built = tuple(flat) if node[0] == _TAG_TUPLE else list(flat)
        elif kind == TEXT:
            data = b"".join(self._text_pieces(node))
            if node[0] == _TAG_STR:
                try:
                    built = data.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise CorruptObjectError(ObjectId(oid), f"text is not valid UTF-8: {exc}") from None
            else:
                built = data
        elif kind == BLOB:
            built = node
        else:
            raise CorruptObjectError(ObjectId(oid), f"a value cannot be an object of kind {kind:#04x}")
        self._built[oid] = built
        return built

    def lookup_path(self, oid: bytes, keys: tuple[str, ...]) -> Any:
        """The value at ``keys`` (map keys, one per level) below the stored map ``oid``, or
        ``MISSING``: reads only the nodes on its path."""
        value: Any = None
        for depth, key in enumerate(keys):
            node = self.node(oid)[1]
            while node[1] > 0:
                i = bisect_right(node[2], key) - 1
                if i < 0:
                    return MISSING
                node = self.node(node[3][i])[1]
            if key not in node[2]:
                return MISSING
            if key not in node[3]:
                value = node[2][key]
                for inner in keys[depth + 1:]:  # an inline value: the rest of the path is in it
                    if type(value) is not dict or inner not in value:
                        return MISSING
                    value = value[inner]
                return value
            oid = node[2][key]
        return self.value(oid)

    def _map_items(self, node: list[Any]) -> list[tuple[str, Any]]:
        if node[1] == 0:
            if not node[3]:
                return list(node[2].items())
            refs = set(node[3])
            return [(k, self.value(v) if k in refs else v) for k, v in node[2].items()]
        items: list[tuple[str, Any]] = []
        for child in node[3]:
            items += self._map_items(self.node(child)[1])
        return items

    def _seq_flat(self, oid: bytes, node: list[Any]) -> list[Any]:
        """The elements of a SEQ node, remembered by id (never handed out itself)."""
        flat = self._flat.get(oid)
        if flat is not None:
            return flat
        if node[1] == 0:
            refs = set(node[3])
            flat = list(node[2]) if not refs else [self.value(v) if i in refs else v for i, v in enumerate(node[2])]
        else:
            flat = []
            for child in node[2]:
                flat += self._seq_flat(child, self.node(child)[1])
        self._flat[oid] = flat
        return flat

    def _text_pieces(self, node: list[Any]) -> list[bytes]:
        if node[1] == 0:
            refs = set(node[4])
            return [self.node(p)[1] if i in refs else p for i, p in enumerate(node[2])]
        pieces: list[bytes] = []
        for child in node[2]:
            pieces += self._text_pieces(self.node(child)[1])
        return pieces


MISSING: Any = object()  # what ``lookup`` returns for an absent key
