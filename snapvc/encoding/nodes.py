"""The layouts of MAP, SEQ and TEXT node payloads: the one place that writes and reads them.

Node payloads are msgpack arrays whose entries arrive already encoded (inline msgpack,
or a reference: ``REF_PREFIX`` + the 32-byte id). In a stored node a reference is the
bare id (msgpack bin 32), and each leaf lists which of its entries are references, so a
reader decodes a node in one C-speed ``msgpack.unpackb`` and finds its children without
walking inline values.

========  =====  ===================================================================
kind      level  payload
========  =====  ===================================================================
MAP       0      ``[tag, 0, {key: value, ...}, [keys whose values are references]]``
MAP       n > 0  ``[tag, n, [first key of each child], [child ids], [entries below]]``
SEQ       0      ``[tag, 0, [values], [positions that are references]]``
SEQ       n > 0  ``[tag, n, [child ids], [entries below]]``
TEXT      0      ``[tag, 0, [pieces], [piece lengths], [positions that are references]]``
TEXT      n > 0  ``[tag, n, [child ids], [bytes below]]``
========  =====  ===================================================================

``tag`` says what the container is: MAP 0 = dict, or the type name of a typed value
(dataclass, pydantic model, registered type); SEQ 0 = list, 1 = tuple; TEXT 0 = str
(UTF-8), 1 = bytes (the ``TAG_*`` constants). Keys of a map leaf are in code point order.

Code above the encoding layer (an integration reading stored values its own way) reads
a node with ``read_node``: a ``StoredNode`` names what the node holds, so no caller
indexes the payload arrays of the table or compares tag numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import msgpack
import ormsgpack

from snapvc.encoding.values import EXT_TYPED, REF_PREFIX, array_header, ext_hook, map_header
from snapvc.errors import CorruptObjectError, FormatVersionError, InvalidObjectIdError, SnapvcError
from snapvc.ids import ObjectId
from snapvc.objects import BLOB, KIND_NAMES, MAP, SEQ, TEXT, split_object

__all__ = ["leaf_payload", "inner_payload", "decode_node", "children_of", "seq_leaf_encodings", "seq_leaf_packed",
           "map_leaf_encodings",
           "read_node", "StoredNode", "TAG_DICT", "TAG_LIST", "TAG_TUPLE", "TAG_STR", "TAG_BYTES"]

# The container type tags of node payloads (see the table above). A MAP's tag is
# ``TAG_DICT`` or the type name of a typed value.
TAG_DICT: Final = 0
TAG_LIST: Final = 0
TAG_TUPLE: Final = 1
TAG_STR: Final = 0
TAG_BYTES: Final = 1

_BIN32: Final = b"\xc4\x20"  # msgpack bin 8 header for 32 bytes: a stored reference
_ZERO: Final = b"\x00"
_EMPTY_ARRAY: Final = b"\x90"

Pack = Callable[[Any], bytes]


def _values(encs: list[bytes], pack: Pack) -> tuple[bytes, bytes]:
    """The array of entry encodings (references as bare ids) and the packed array of the
    positions that are references."""
    joined = b"".join(encs)
    if REF_PREFIX not in joined:
        return array_header(len(encs)) + joined, _EMPTY_ARRAY
    parts = []
    positions = []
    for i, v in enumerate(encs):
        if v.startswith(REF_PREFIX):
            parts.append(_BIN32 + v[3:])
            positions.append(i)
        else:
            parts.append(v)
    return array_header(len(encs)) + b"".join(parts), pack(positions)


def leaf_payload(kind: int, tag: Any, entries: list[Any], pack: Pack) -> bytes:
    """A leaf of ``kind`` from its entries: (key, value) encodings for MAP, value
    encodings for SEQ, (piece encoding, length) for TEXT."""
    n = len(entries)
    if kind == MAP:
        body = b"".join([k + v for k, v in entries])
        if REF_PREFIX not in body:
            return array_header(4) + pack(tag) + _ZERO + map_header(n) + body + _EMPTY_ARRAY
        parts = []
        ref_keys = []
        for k, v in entries:
            if v.startswith(REF_PREFIX):
                parts.append(k + _BIN32 + v[3:])
                ref_keys.append(k)
            else:
                parts.append(k + v)
        return (array_header(4) + pack(tag) + _ZERO + map_header(n) + b"".join(parts)
                + array_header(len(ref_keys)) + b"".join(ref_keys))
    if kind == SEQ:
        values, positions = _values(entries, pack)
        return array_header(4) + pack(tag) + _ZERO + values + positions
    pieces, positions = _values([p for p, _ in entries], pack)
    return (array_header(5) + pack(tag) + _ZERO + pieces + array_header(n)
            + b"".join([pack(c) for _, c in entries]) + positions)


def inner_payload(kind: int, tag: Any, level: int, entries: list[Any], pack: Pack) -> bytes:
    """An inner node from its entries: (first key, child reference, entries below) for
    MAP, (child reference, entries or bytes below) for SEQ and TEXT."""
    n = len(entries)
    if kind == MAP:
        return (array_header(5) + pack(tag) + pack(level) + array_header(n) + b"".join([f for f, _, _ in entries])
                + array_header(n) + b"".join([_BIN32 + r[3:] for _, r, _ in entries])
                + array_header(n) + b"".join([pack(c) for _, _, c in entries]))
    return (array_header(4) + pack(tag) + pack(level) + array_header(n) + b"".join([_BIN32 + r[3:] for r, _ in entries])
            + array_header(n) + b"".join([pack(c) for _, c in entries]))


def unpack_msgpack(data: Any, hook: Callable[[int, bytes], Any]) -> Any:
    """A node payload decoded by msgpack: the decoder every other is checked against."""
    return msgpack.unpackb(data, ext_hook=hook, raw=False)


def unpack_ormsgpack(data: Any, hook: Callable[[int, bytes], Any]) -> Any:
    """A node payload decoded by ormsgpack (Rust; about 1.5x msgpack's speed on a
    state's nodes), to the same values. It reports an error raised by ``hook`` as a
    ValueError of its own: the error itself is raised instead, as msgpack does."""
    failed: list[BaseException] = []

    def guarded(code: int, payload: bytes) -> Any:
        try:
            return hook(code, payload)
        except BaseException as exc:
            failed.append(exc)
            raise

    try:
        return ormsgpack.unpackb(data, ext_hook=guarded)
    except ValueError:
        if failed:
            raise failed[0] from None
        raise


# How node payloads are decoded where values are rebuilt (a checkout): ormsgpack, which
# gives the same values as msgpack for every payload the encoder writes
# (tests/test_checkout_record.py reads every shape of state each way).
_unpack: Callable[[Any, Callable[[int, bytes], Any]], Any] = unpack_ormsgpack


def _walk_hook(code: int, data: bytes) -> Any:
    """``ext_hook`` for walks of the object graph: an inline typed value is checked to
    decode and stays its ``(name, fields)`` pair. Rebuilding it would need the classes of
    the process that stored it, which fsck, gc or a push from the command line lack."""
    if code == EXT_TYPED:
        return tuple(msgpack.unpackb(data, ext_hook=_walk_hook, raw=False))
    return ext_hook(code, data)


def decode_node(oid: bytes, data: bytes, *, rebuild_types: bool = True,
                hook: Callable[[int, bytes], Any] = ext_hook) -> tuple[int, Any]:
    """``(kind, decoded payload)`` of an object's canonical bytes: the payload list of a
    node (see the table above), or the raw bytes of a BLOB. ``rebuild_types=False``: for
    walks that need a node's children, not its values; inline typed values are not rebuilt.
    ``hook``: the decoder's ``ext_hook`` when types are rebuilt (``values.ext_hook`` or
    one that also notes what it met)."""
    kind = data[0] if data else -1
    if kind == BLOB:
        return kind, data[1:]
    if kind not in (MAP, SEQ, TEXT):
        split_object(ObjectId(oid), data)  # raises the right error for unknown kinds
        raise CorruptObjectError(ObjectId(oid), f"a {KIND_NAMES[kind]} object cannot be a value")
    try:
        payload = memoryview(data)[1:]
        node = _unpack(payload, hook) if rebuild_types else unpack_msgpack(payload, _walk_hook)
    except FormatVersionError as exc:  # a value type of a newer snapvc: name the object holding it
        raise FormatVersionError(f"object {ObjectId(oid)}: {exc}") from None
    except InvalidObjectIdError as exc:  # a reference that is not 32 bytes: the layout is wrong
        raise CorruptObjectError(ObjectId(oid), f"cannot decode {KIND_NAMES[kind]} payload: {exc}") from None
    except SnapvcError:
        raise  # a typed value's own (its type unknown here, its from_fields failed): names the type
    except Exception as exc:
        raise CorruptObjectError(ObjectId(oid), f"cannot decode {KIND_NAMES[kind]} payload: {exc}") from None
    if type(node) is not list or len(node) < 4:
        raise CorruptObjectError(ObjectId(oid), "node payload is not a [type, level, ...] array")
    return kind, node


def decode_level(found: dict[bytes, bytes], ids: list[bytes], hook: Callable[[int, bytes], Any],
                 into: dict[bytes, tuple[int, Any]]) -> list[bytes]:
    """``decode_node`` of each of ``ids`` (their bytes in ``found``) but BLOBs, into
    ``into``, in one loop that calls the decoder once a node (a level of a state's trees,
    thousands of nodes, costs the decoding); returns the ids they refer to
    (``children_of``). A node that does not decode as a state's node (or whose ``hook``
    failed) is decoded again by ``decode_node``, which raises the error naming it."""
    unpackb = ormsgpack.unpackb
    refs: list[bytes] = []
    for oid in ids:
        data = found[oid]
        kind = data[0] if data else -1
        if kind == BLOB:
            continue
        node: Any = None
        if kind == MAP or kind == SEQ or kind == TEXT:
            try:
                node = unpackb(memoryview(data)[1:], ext_hook=hook)
            except Exception:  # (decoded again below, to be named)
                node = None
        if type(node) is not list or len(node) < 4:
            _, node = decode_node(oid, data, hook=hook)  # raises what is wrong with it
        into[oid] = kind, node
        if node[1]:
            refs += node[3] if kind == MAP else node[2]
        else:
            at = node[4] if kind == TEXT else node[3]
            if at:
                values = node[2]
                refs += [values[i] for i in at]
    return refs


def children_of(kind: int, node: list[Any]) -> list[bytes]:
    """The ids a decoded node refers to."""
    if node[1]:
        children: list[bytes] = node[3] if kind == MAP else node[2]
        return children
    values = node[2]
    return [values[i] for i in (node[4] if kind == TEXT else node[3])]


def _leaf_entries(oid: bytes, data: bytes) -> msgpack.Unpacker:
    """An unpacker over a leaf's canonical bytes, past its tag and level: at its entries."""
    unpacker = msgpack.Unpacker(max_buffer_size=len(data), raw=False)
    unpacker.feed(memoryview(data)[1:])
    unpacker.read_array_header()
    unpacker.skip()  # tag
    level = unpacker.unpack()
    if level != 0:
        raise CorruptObjectError(ObjectId(oid), f"read as a leaf, but its level is {level!r}")
    return unpacker


def seq_leaf_encodings(oid: bytes, data: bytes) -> list[bytes]:
    """The encodings of a SEQ leaf's values as the encoder wrote them (a reference as
    ``REF_PREFIX`` + id), cut from the object's canonical bytes without decoding them:
    two elements are stored alike exactly when these are equal."""
    try:
        unpacker = _leaf_entries(oid, data)
        n = unpacker.read_array_header()
        out = []
        start = unpacker.tell()
        for _ in range(n):
            unpacker.skip()
            end = unpacker.tell()
            out.append(data[1 + start : 1 + end])
            start = end
        for i in unpacker.unpack():
            out[i] = REF_PREFIX + out[i][len(_BIN32):]
    except CorruptObjectError:
        raise
    except Exception as exc:
        raise CorruptObjectError(ObjectId(oid), f"cannot read the values of a SEQ leaf: {exc}") from None
    return out


def seq_leaf_packed(oid: bytes, data: bytes, values: Any, at: int, pack: Pack) -> list[bytes] | None:
    """The encodings of a SEQ leaf's values as ``seq_leaf_encodings`` gives them, made by
    packing ``values[at:at + n]`` (``n``: the leaf's count) with ``pack``, when they make
    exactly the leaf's stored bytes: a leaf holding no reference, whose values still encode
    as stored (msgpack is a prefix code: equal joined bytes are equal encodings one by
    one). None otherwise, or if a value does not pack."""
    # The leaf's header, read here (an unpacker per leaf costs more than the rest): the
    # kind, an array of 4, a one-byte tag, level 0, then the values' array header.
    if data[1:2] != b"\x94" or data[2:3] not in (b"\x00", b"\x01") or data[3:4] != _ZERO:
        return None
    first = data[4] if len(data) > 4 else -1
    if 0x90 <= first <= 0x9F:
        n, start = first & 0x0F, 5
    elif first == 0xDC:
        n, start = int.from_bytes(data[5:7], "big"), 7
    elif first == 0xDD:
        n, start = int.from_bytes(data[5:9], "big"), 9
    else:
        return None
    if at + n > len(values):
        return None
    try:
        encs = list(map(pack, values[at:at + n]))
    except (TypeError, ValueError, OverflowError):
        return None
    joined = b"".join(encs)
    # What follows the values is the empty list of references, and nothing else.
    if len(data) != start + len(joined) + 1 or data[-1:] != _EMPTY_ARRAY or not data.startswith(joined, start):
        return None
    return encs


def map_leaf_encodings(oid: bytes, data: bytes) -> list[tuple[str, bytes, bytes]]:
    """``(key, key's encoding, value's encoding)`` of each entry of a MAP leaf, in order,
    cut from its canonical bytes as ``seq_leaf_encodings`` does: the entries a tree edit
    (``snapvc.encoding.splice``) rebuilds the leaf from."""
    try:
        unpacker = _leaf_entries(oid, data)
        n = unpacker.read_map_header()
        out = []
        start = unpacker.tell()
        for _ in range(n):
            key = unpacker.unpack()
            middle = unpacker.tell()
            unpacker.skip()
            end = unpacker.tell()
            out.append((key, data[1 + start : 1 + middle], data[1 + middle : 1 + end]))
            start = end
        refs = set(unpacker.unpack())
        if refs:
            out = [(k, kb, REF_PREFIX + v[len(_BIN32):] if k in refs else v) for k, kb, v in out]
    except CorruptObjectError:
        raise
    except Exception as exc:
        raise CorruptObjectError(ObjectId(oid), f"cannot read the entries of a MAP leaf: {exc}") from None
    return out


class StoredNode:
    """What one stored object of a value holds, by name (``read_node`` makes it).

    - ``kind``: ``MAP``, ``SEQ``, ``TEXT`` or ``BLOB`` (``snapvc.objects``); ``level``: 0
      for a leaf (and a BLOB), else the node's height above its leaves.
    - ``value_type``: what the value stored from this node is: ``"dict"``, ``"typed"`` (a
      typed value: ``typed_name`` is its registered type name), ``"list"``, ``"tuple"``,
      ``"str"``, ``"bytes"``, or ``"blob"`` (a chunk of a long str or bytes).
    - a leaf: ``entries`` (a MAP leaf's ``{key: value}``, a SEQ leaf's values, a TEXT leaf's
      pieces, in order) and ``refs``, the keys (MAP) or positions (SEQ, TEXT) whose entry
      is not the value itself but the id of the object it is stored as.
    - an inner node: ``children`` (child ids in order), ``counts`` (the entries, or for
      TEXT the bytes, below each child) and, for a MAP, ``first_keys`` (each child's
      first key: a key is looked up in the last child whose first key is at most it).
    - a BLOB: ``data``, its bytes.
    """

    __slots__ = ("id", "kind", "level", "value_type", "typed_name", "entries", "refs", "children", "counts",
                 "first_keys", "data")

    def __init__(self, oid: bytes, kind: int, payload: Any) -> None:
        self.id = oid
        self.kind = kind
        self.typed_name: str | None = None
        self.entries: Any = None
        self.refs: frozenset[Any] = frozenset()
        self.children: list[bytes] = []
        self.counts: list[int] = []
        self.first_keys: list[str] = []
        self.data = b""
        if kind == BLOB:
            self.level = 0
            self.value_type = "blob"
            self.data = payload
            return
        tag, self.level = payload[0], payload[1]
        if kind == MAP:
            if tag == TAG_DICT:
                self.value_type = "dict"
            elif type(tag) is str:
                self.value_type = "typed"
                self.typed_name = tag
            else:
                raise CorruptObjectError(ObjectId(oid), f"a MAP node's type tag is {tag!r}, neither 0 nor a type name")
        elif kind == SEQ:
            self.value_type = "tuple" if tag == TAG_TUPLE else "list"
        else:
            self.value_type = "bytes" if tag == TAG_BYTES else "str"
        fields = 5 if (kind == TEXT and not self.level) or (kind == MAP and self.level) else 4
        if len(payload) != fields:
            raise CorruptObjectError(ObjectId(oid), f"a {KIND_NAMES[kind]} node of level {self.level!r} has "
                                                    f"{len(payload)} fields, not {fields}")
        try:
            if not self.level:
                self.entries = payload[2]
                self.refs = frozenset(payload[4] if kind == TEXT else payload[3])
            elif kind == MAP:
                self.first_keys, self.children, self.counts = payload[2], payload[3], payload[4]
            else:
                self.children, self.counts = payload[2], payload[3]
        except TypeError as exc:  # not a list of keys or positions where the layout has one
            raise CorruptObjectError(ObjectId(oid), f"cannot read {KIND_NAMES[kind]} node: {exc}") from None

    @property
    def is_leaf(self) -> bool:
        return self.level == 0

    def __repr__(self) -> str:
        return f"<StoredNode {ObjectId(self.id).short} {self.value_type} level {self.level}>"


def read_node(oid: bytes, data: bytes) -> StoredNode:
    """What the object ``oid`` (``data``, its canonical bytes, as a ``Loader`` fetches them)
    holds: the public way to read a stored node. Inline typed values in a leaf's entries
    are rebuilt as their classes; ``CorruptObjectError`` if the bytes are not a node."""
    kind, payload = decode_node(oid, data)
    return StoredNode(oid, kind, payload)
