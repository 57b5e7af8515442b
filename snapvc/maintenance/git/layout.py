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
git tree: a directory is a list if all its entries are ``#N`` (a file's name less its
extension), each index once and none missing, else a dict; ``.json`` files are JSON,
``.txt`` UTF-8 text, ``.bin`` bytes, and any other file the key of its full name,
holding its text (or its bytes, if they are not UTF-8); a file's executable bit is not
part of its value. A name ``escape_key`` would not make is its own key (``%61`` is
``%61``, not ``a``).

Reading never drops a file: a tree that does not map one-to-one onto a state is a
``GitError`` naming the paths — names that read as one key (``a``, ``a.json``,
``a.txt``, ``a.bin``), a repeated or missing list index, a symbolic link or a
submodule, a name that is not UTF-8, a file that does not decode, a JSON object with a
key twice, or directories nested deeper than a state may be (``MAX_DEPTH``).

Names are case-sensitive in git; checking out on a case-insensitive file system keys
that differ only in case would collide there (git itself is not affected).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, NamedTuple, cast

import orjson
from dulwich.objects import Blob, ShaFile, Tree
from dulwich.objects import Commit as GitCommit

from snapvc.encoding.jsonable import from_jsonable, to_jsonable
from snapvc.encoding.reader import Loader, MapView, Part, SeqView, is_tuple, tree_root
from snapvc.encoding.writer import MAX_DEPTH
from snapvc.errors import GitError, SnapvcError

if TYPE_CHECKING:
    from dulwich.objects import ObjectID

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
    """The key ``escape_key`` made ``name`` from. A name it did not make (``50%off``,
    ``%61``, ``a%2eb``) is a key as it is: so no two names ``escape_key`` makes read as
    one key, and each name reads as exactly one."""
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
        key = out.decode()
    except UnicodeDecodeError:
        return name
    return key if escape_key(key) == name else name


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
            tree.add(name.encode(), mode, cast("ObjectID", sha))
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


def state_of(tree_sha: bytes, get: Callable[[bytes], ShaFile], memo: dict[Any, Any] | None = None, *,
             where: str = "the tree") -> dict[str, Any]:
    """The state a git tree holds (see the module notes), reading objects with ``get``.
    ``memo`` remembers values by tree and blob sha across calls: unchanged subtrees of
    successive commits are read once (and shared: the values are not to be changed).

    A tree that does not map one-to-one onto a state raises ``GitError`` naming
    ``where`` (the commit) and the paths at fault, rather than lose a file: names that
    read as the same key, list entries with a gap or a repeated index, links and
    submodules, names that are not UTF-8, files that do not decode, directories nested
    deeper than a state may be."""
    reader = _TreeReader(get, {} if memo is None else memo, where)
    value = reader.tree(tree_sha, "", 0)
    if not isinstance(value, dict):
        raise reader.fail("the root tree holds only list entries (#0, #1, …); the root of a state is a dict")
    return value


_LIST_INDEX = re.compile(r"#([0-9]+)")
_FILE_KINDS = ("json", "txt", "bin")
_TYPE_BITS: Final = 0o170000  # the kind of a tree entry, in the high bits of its mode
_REGULAR: Final = 0o100000  # a file (git keeps 644 or 755 in the low bits)
_SYMLINK: Final = 0o120000
_SUBMODULE: Final = 0o160000
# A .json file nests at most this deep. A state nests at most MAX_DEPTH containers, and
# a tagged value takes two JSON levels for one of the value's ({"$snapvc": "tuple",
# "items": [...]}); deeper JSON is no state, and would overflow the recursive reader.
_JSON_DEPTH_MAX: Final = 2 * MAX_DEPTH + 2


class _Named(NamedTuple):
    """A tree entry read: the name its key comes from (a file's without its known
    extension), its path in the commit, and its value."""

    stem: str
    path: str
    value: Any


class _TreeReader:
    """Reads the trees of one commit into values, naming ``where`` in every error."""

    def __init__(self, get: Callable[[bytes], ShaFile], memo: dict[Any, Any], where: str) -> None:
        self._get = get
        self._memo = memo
        self._where = where

    def fail(self, message: str) -> GitError:
        return GitError(f"{self._where}: {message}")

    def _object(self, sha: bytes, path: str, kind: type[ShaFile]) -> Any:
        try:
            obj = self._get(sha)
        except KeyError:
            raise self.fail(f"the object {sha.decode()} of {path} is missing from the repository") from None
        if not isinstance(obj, kind):
            raise self.fail(f"{path} names object {sha.decode()}, a {type(obj).__name__}, not a {kind.__name__}")
        return obj

    def tree(self, sha: bytes, path: str, depth: int) -> Any:
        """The value of the tree at ``path`` (``""``: the root), ``depth`` directories down."""
        if sha in self._memo:
            return self._memo[sha]
        if depth >= MAX_DEPTH:  # deeper than any state: refused before reading further down
            raise self.fail(f"{_shorten(path)} is {depth} directories deep; a state nests at most {MAX_DEPTH} "
                            "containers")
        tree = self._object(sha, path or "the root tree", Tree)
        entries: list[_Named] = []
        for entry in tree.iteritems():
            try:
                name = entry.path.decode("utf-8")
            except UnicodeDecodeError:
                folder = f"{path}/" if path else ""
                raise self.fail(f"the name {folder}{entry.path!r} is not UTF-8; keys of a state are text") from None
            at = f"{path}/{name}" if path else name
            kind = entry.mode & _TYPE_BITS
            if entry.mode == DIRECTORY:
                entries.append(_Named(name, at, self.tree(entry.sha, at, depth + 1)))
            elif kind == _REGULAR:  # its content is the value; an executable bit is not state
                entries.append(self._file(name, at, entry.sha))
            elif kind == _SYMLINK:
                target = self._object(entry.sha, at, Blob).as_raw_string().decode("utf-8", "backslashreplace")
                raise self.fail(f"{at} is a symbolic link (to {target!r}); a state holds files and directories: "
                                "put the file itself there, or remove the link")
            elif kind == _SUBMODULE:
                raise self.fail(f"{at} is a submodule (commit {entry.sha.decode()}), whose files are not in this "
                                "repository; import that repository on its own")
            else:
                raise self.fail(f"{at} has the mode {entry.mode:o}, which is no file or directory")
        value = self._list(entries, path) if entries and all(_LIST_INDEX.fullmatch(e.stem) for e in entries) else (
            self._dict(entries, path))
        self._memo[sha] = value
        return value

    def _list(self, entries: list[_Named], path: str) -> list[Any]:
        """The list of a directory of numbered entries: each index once, none missing."""
        by_index: dict[int, list[_Named]] = {}
        for entry in entries:
            by_index.setdefault(int(entry.stem[1:]), []).append(entry)
        repeated = [_listing(e.path for e in same) for same in by_index.values() if len(same) > 1]
        if repeated:
            raise self.fail("; ".join(f"{names} are the same entry of the list {path or 'at the root'}"
                                      for names in repeated))
        missing = [i for i in range(len(entries)) if i not in by_index]
        if missing:
            shown = ", ".join(f"#{i}" for i in missing[:5]) + (", …" if len(missing) > 5 else "")
            raise self.fail(f"the list {path or 'at the root'} has {len(entries)} entries numbered up to "
                            f"#{max(by_index)}: {shown} missing; a list has no gaps")
        return [by_index[i][0].value for i in range(len(entries))]

    def _dict(self, entries: list[_Named], path: str) -> dict[str, Any]:
        """The dict of a directory: one key per entry, or an error naming the entries
        whose names read as one key (a directory ``a``, ``a.json``, ``a.txt`` …)."""
        by_key: dict[str, list[_Named]] = {}
        for entry in entries:
            by_key.setdefault(unescape_key(entry.stem), []).append(entry)
        clashes = [(key, same) for key, same in by_key.items() if len(same) > 1]
        if clashes:
            raise self.fail("; ".join(f"{_listing(e.path for e in same)} read as one key, {key!r}"
                                      for key, same in clashes)
                            + " (a state holds one value per key: rename or remove all but one in git)")
        return {key: same[0].value for key, same in by_key.items()}

    def _file(self, name: str, path: str, sha: bytes) -> _Named:
        stem, dot, ext = name.rpartition(".")
        kind = ext if dot and stem and ext in _FILE_KINDS else ""  # ".json" alone is a name, not an extension
        key = (sha, kind)
        if key not in self._memo:
            self._memo[key] = self._decode(self._object(sha, path, Blob).as_raw_string(), kind, path)
        return _Named(stem if kind else name, path, self._memo[key])

    def _decode(self, data: bytes, kind: str, path: str) -> Any:
        if kind == "bin":
            return data
        if kind == "txt":
            try:
                return data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise self.fail(f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason}); a .txt file holds "
                                "text, a .bin file bytes") from None
        if kind == "json":
            return self._json(data, path)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return data

    def _json(self, data: bytes, path: str) -> Any:
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise self.fail(f"{path} is not JSON: {exc}") from None
        depth, has_objects = _json_shape(parsed)
        if depth > _JSON_DEPTH_MAX:
            raise self.fail(f"{path} nests {depth} levels deep, deeper than any value of a state "
                            f"(at most {MAX_DEPTH} containers)")
        if has_objects:  # orjson keeps the last of repeated keys: look for them, or one would be lost
            repeated = _repeated_keys(data)
            if repeated:
                raise self.fail(f"{path} holds the key {repeated[0]!r} twice in one object")
        try:
            return from_jsonable(parsed, "value")
        except (ValueError, SnapvcError) as exc:
            raise self.fail(f"{path} does not hold a value snapvc can read back: {exc}") from exc


def _repeated_keys(data: bytes) -> list[str]:
    """The keys that JSON ``data`` (valid, and nested no deeper than _JSON_DEPTH_MAX)
    holds twice in one object."""
    repeated: list[str] = []

    def pairs_to_dict(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for key, value in pairs:
            if key in found:
                repeated.append(key)
            found[key] = value
        return found

    json.loads(data, object_pairs_hook=pairs_to_dict)
    return repeated


def _json_shape(value: Any) -> tuple[int, bool]:
    """How deep parsed JSON nests, and whether it holds an object (without recursion:
    the value may be as deep as orjson allows)."""
    depth, has_objects = 0, False
    waiting = [(value, 1)]
    while waiting:
        item, level = waiting.pop()
        if type(item) is dict:
            has_objects = True
            children: Iterable[Any] = item.values()
        elif type(item) is list:
            children = item
        else:
            continue
        depth = max(depth, level)
        waiting.extend((child, level + 1) for child in children)
    return depth, has_objects


def _listing(paths: Iterable[str]) -> str:
    """``a, a.json and a.txt``."""
    names = sorted(paths)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _shorten(path: str) -> str:
    """A path of many directories, its middle left out."""
    parts = path.split("/")
    return path if len(parts) <= 8 else "/".join(parts[:3] + ["…"] + parts[-3:])
