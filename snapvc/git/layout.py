"""How a state becomes a tree of files a person can read in git, and back.

==================================  ================================================
value                               in the git tree
==================================  ================================================
the state (the top-level dict)       the root directory
a dict with keys                    a directory, one entry per key
a list with more than 16 elements,  a directory of numbered entries ``#000000``,
or holding a dict with keys, a      ``#000001`` … (as wide as the last index needs,
long string, bytes or such a list   at least 6 digits), each named as below
a str longer than 120 characters,   ``KEY.txt``: the text itself, UTF-8
or with a line break
bytes                               ``KEY.bin``: the bytes themselves
any other value                     ``KEY.json``: pretty JSON with sorted keys (an
                                    empty dict or list, a short list, a number, …);
                                    values JSON cannot hold are tagged objects
                                    (``snapvc.to_jsonable``)
==================================  ================================================

A key becomes a file name by percent-escaping (``%XX``, of its UTF-8 bytes) ``%``,
``.``, ``#``, ``/``, ``\\``, ``:``, ``*``, ``?``, ``"``, ``<``, ``>``, ``|`` and control
characters; the empty key is ``%``. So a name has at most one dot, before its
extension; directories have none; nothing is named ``.git``; and a ``#`` starts only a
list's entries. Reading back (``state_of``) reverses each rule exactly, and reads any
git tree: a directory is a dict unless all its entries start with ``#``, ``.json``
files are JSON, ``.txt`` text, ``.bin`` bytes, and any other file the key of its full
name, holding its text (or its bytes, if they are not UTF-8).

Names are case-sensitive in git; checking out on a case-insensitive file system keys
that differ only in case would collide there (git itself is not affected).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, NamedTuple

import orjson
from dulwich.objects import Blob, ShaFile, Tree
from dulwich.objects import Commit as GitCommit

from snapvc.encoding.jsonable import from_jsonable, to_jsonable
from snapvc.encoding.reader import Loader, MapView, Part, SeqView, is_tuple, tree_root

__all__ = ["LIST_MAX", "TEXT_MIN", "TreeWriter", "escape_key", "state_of", "unescape_key"]

LIST_MAX: Final = 16  # a longer list is a directory
TEXT_MIN: Final = 120  # a longer string (or one with a line break) is a .txt file
FILE: Final = 0o100644
DIRECTORY: Final = 0o040000

_UNSAFE = re.compile(r'[%.#/\\:*?"<>|\x00-\x1f\x7f]')
_ESCAPE = re.compile(r"%([0-9A-F]{2})")


def escape_key(key: str) -> str:
    """``key`` as a file name (without extension): see the module notes."""
    if key == "":
        return "%"
    return _UNSAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), key)


def unescape_key(name: str) -> str:
    """The key ``escape_key`` made ``name`` from (a name it did not make stays as it is)."""
    if name == "%":
        return ""
    raw = _ESCAPE.sub(lambda m: f"\x00{m.group(1)}", name)
    if "\x00" not in raw:
        return name
    out = bytearray()
    for i, piece in enumerate(raw.split("\x00")):
        if i:
            out.append(int(piece[:2], 16))
            piece = piece[2:]
        out += piece.encode()
    try:
        return out.decode()
    except UnicodeDecodeError:
        return name


def _is_text(value: Any) -> bool:
    return type(value) is str and (len(value) > TEXT_MIN or "\n" in value)


def _pretty_json(value: Any, where: str) -> bytes:
    return orjson.dumps(to_jsonable(value, where), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
                        | orjson.OPT_APPEND_NEWLINE)


class _Entry(NamedTuple):
    """One value in a git tree: its name's extension (``""`` for a directory), mode,
    sha, and whether it makes a list that holds it a directory."""

    ext: str
    mode: int
    sha: bytes
    makes_dir: bool


class TreeWriter:
    """Builds the git objects of states, remembering what it built by stored object
    id, so that a state's unchanged subtrees cost nothing the next time: a history of
    states is written at the cost of what changed between them. ``objects`` holds
    every git object built, by sha."""

    def __init__(self) -> None:
        self.objects: dict[bytes, ShaFile] = {}
        self._maps: dict[bytes, list[tuple[str, int, bytes]]] = {}  # a stored map's subtree: its entries
        self._seqs: dict[bytes, list[_Entry]] = {}  # a stored list's subtree: its elements' entries
        self._values: dict[bytes, _Entry] = {}  # a stored value: its entry

    def _add(self, obj: ShaFile) -> bytes:
        self.objects.setdefault(obj.id, obj)
        return obj.id

    def _blob(self, data: bytes) -> bytes:
        return self._add(Blob.from_string(data))

    def _tree(self, entries: Iterable[tuple[str, int, bytes]]) -> bytes:
        tree = Tree()
        for name, mode, sha in entries:
            tree.add(name.encode(), mode, sha)
        return self._add(tree)

    def reachable(self, shas: Iterable[bytes], skip: Callable[[bytes], bool]) -> list[ShaFile]:
        """The objects built here that ``shas`` (commits or trees) reach, less those
        ``skip`` says are there already (with everything they reach). Building a list
        builds its elements' objects before it knows whether it is a directory: those of
        a list that became one JSON file are left out here."""
        found: dict[bytes, ShaFile] = {}
        waiting = list(shas)
        while waiting:
            sha = waiting.pop()
            if sha in found or skip(sha):
                continue
            obj = found[sha] = self.objects[sha]
            if isinstance(obj, Tree):
                waiting.extend(entry.sha for entry in obj.iteritems())
            elif isinstance(obj, GitCommit):
                waiting.append(obj.tree)
        return list(found.values())

    def state_tree(self, state: MapView | Mapping[str, Any]) -> bytes:
        """The sha of the git tree of a state (its root directory)."""
        return self._tree(self._map_entries(state, "state"))

    # -- values --------------------------------------------------------------------------

    def _entry(self, value: Any, where: str) -> _Entry:
        if isinstance(value, (MapView, SeqView)):
            known = self._values.get(value.id)
            if known is None:
                known = self._values[value.id] = self._stored_entry(value, where)
            return known
        if type(value) is dict:
            if not value:
                return _Entry(".json", FILE, self._blob(b"{}\n"), False)
            return _Entry("", DIRECTORY, self._tree(self._map_entries(value, where)), True)
        if type(value) is list:
            elements = [self._entry(v, f"{where}[{i}]") for i, v in enumerate(value)]
            return self._list_entry(elements, lambda: value, where)
        if _is_text(value):
            return _Entry(".txt", FILE, self._blob(value.encode()), True)
        if type(value) is bytes:
            return _Entry(".bin", FILE, self._blob(value), True)
        return _Entry(".json", FILE, self._blob(_pretty_json(value, where)), False)

    def _stored_entry(self, view: MapView | SeqView, where: str) -> _Entry:
        if isinstance(view, MapView):
            return _Entry("", DIRECTORY, self._tree(self._map_entries(view, where)), True)
        if is_tuple(view):
            return _Entry(".json", FILE, self._blob(_pretty_json(view.to_list(), where)), False)
        loader, parts = tree_root(view)
        elements = [e for part in parts for e in self._seq_part(loader, part, where)]
        return self._list_entry(elements, view.to_list, where)

    def _list_entry(self, elements: list[_Entry], plain: Callable[[], Any], where: str) -> _Entry:
        if len(elements) > LIST_MAX or any(e.makes_dir for e in elements):
            width = max(6, len(str(len(elements) - 1)))
            entries = [(f"#{i:0{width}d}{e.ext}", e.mode, e.sha) for i, e in enumerate(elements)]
            return _Entry("", DIRECTORY, self._tree(entries), True)
        return _Entry(".json", FILE, self._blob(_pretty_json(plain(), where)), False)

    # -- the nodes of stored maps and lists, remembered by id ---------------------------------

    def _map_entries(self, mapping: MapView | Mapping[str, Any], where: str) -> list[tuple[str, int, bytes]]:
        if not isinstance(mapping, MapView):
            return [self._named(key, self._entry(value, f"{where}[{key!r}]")) for key, value in mapping.items()]
        loader, parts = tree_root(mapping)
        return [entry for part in parts for entry in self._map_part(loader, part, where)]

    def _map_part(self, loader: Loader, part: Part, where: str) -> list[tuple[str, int, bytes]]:
        if part.level == -1:
            value = loader.view(part.value) if part.is_ref else part.value
            return [self._named(part.at, self._entry(value, f"{where}[{part.at!r}]"))]
        known = self._maps.get(part.value)
        if known is None:
            known = self._maps[part.value] = [e for child in loader.parts(part.value)
                                              for e in self._map_part(loader, child, where)]
        return known

    def _seq_part(self, loader: Loader, part: Part, where: str) -> list[_Entry]:
        if part.level == -1:
            value = loader.view(part.value) if part.is_ref else part.value
            return [self._entry(value, f"{where}[{part.at}]")]
        known = self._seqs.get(part.value)
        if known is None:
            known = self._seqs[part.value] = [e for child in loader.parts(part.value, part.at)
                                              for e in self._seq_part(loader, child, where)]
        return known

    @staticmethod
    def _named(key: str, entry: _Entry) -> tuple[str, int, bytes]:
        return escape_key(key) + entry.ext, entry.mode, entry.sha


# -- reading back -----------------------------------------------------------------------------


def state_of(tree_sha: bytes, get: Callable[[bytes], ShaFile], memo: dict[bytes, Any] | None = None) -> dict[str, Any]:
    """The state a git tree holds (see the module notes), reading objects with ``get``.
    ``memo`` remembers values by tree and blob sha across calls: unchanged subtrees of
    successive commits are read once (and shared: the values are not to be changed)."""
    memo = {} if memo is None else memo
    value = _tree_value(tree_sha, get, memo)
    if not isinstance(value, dict):
        raise ValueError(f"the root tree {tree_sha.decode()} holds a list (all its entries start with '#'), not a state")
    return value


_LIST_ENTRY = re.compile(r"#([0-9]+)(\.[a-z]+)?")
_FILE_KINDS = ("json", "txt", "bin")


def _tree_value(sha: bytes, get: Callable[[bytes], ShaFile], memo: dict[Any, Any]) -> Any:
    if sha in memo:
        return memo[sha]
    tree = get(sha)
    if not isinstance(tree, Tree):
        raise ValueError(f"object {sha.decode()} is a {type(tree).__name__}, not a tree")
    values: list[tuple[str, Any]] = []
    for entry in tree.iteritems():
        name = entry.path.decode("utf-8", "surrogateescape")
        if entry.mode == DIRECTORY:
            values.append((name, _tree_value(entry.sha, get, memo)))
        elif entry.mode & 0o170000 == 0o100000:  # a regular file (executable or not)
            values.append(_file_value(name, entry.sha, get, memo))
        # links and submodules hold no state: passed over
    numbers = [_LIST_ENTRY.fullmatch(name) for name, _ in values]
    if values and all(numbers):
        order = sorted(range(len(values)), key=lambda i: int(numbers[i].group(1)))  # type: ignore[union-attr]
        result: Any = [values[i][1] for i in order]
    else:
        result = {unescape_key(name): value for name, value in values}
    memo[sha] = result
    return result


def _file_value(name: str, sha: bytes, get: Callable[[bytes], ShaFile], memo: dict[Any, Any]) -> tuple[str, Any]:
    """A file's key (its name without a known extension) and value."""
    stem, dot, ext = name.rpartition(".")
    kind = ext if dot and ext in _FILE_KINDS else ""
    key = (sha, kind)
    if key not in memo:
        data = get(sha).as_raw_string()
        if kind == "json":
            try:
                memo[key] = from_jsonable(orjson.loads(data), name)
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"{name} (blob {sha.decode()}) is not JSON: {exc}") from None
        elif kind == "txt":
            memo[key] = data.decode("utf-8")
        elif kind == "bin":
            memo[key] = data
        else:
            try:
                memo[key] = data.decode("utf-8")
            except UnicodeDecodeError:
                memo[key] = data
    return (stem if kind else name), memo[key]
