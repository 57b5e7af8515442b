"""DESIGN.md's layer table as a test: the import graph of ``snapvc`` must follow it.

Data flows one way (values -> encoding -> objects -> store; refs point at commits; the
repository ties them together; everything user-facing sits on the repository), so a module
may import its own layer and any layer of lower rank, never a higher rank and never another
layer of the same rank. On top of that: no import cycle between modules, and no module
imports another module's ``_private`` names.

Every import counts, wherever it is written: at module level, inside a function, or under
``if TYPE_CHECKING:`` (a type-only import still says that one layer knows about another).
``import snapvc.x`` of a package counts as importing ``snapvc/x/__init__.py``. The parent
packages Python runs on the way to a module (``snapvc/__init__.py`` above everything) are
not counted: they run whatever the module's layer, so they say nothing about it.

The checker reads the source with ``ast`` and imports nothing, so the tests below also run
it on small fake trees to show that it catches each kind of violation.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parent.parent / "snapvc"


class Layer(NamedTuple):
    rank: int
    name: str
    modules: tuple[str, ...]  # "snapvc.x.*" is the package x and everything under it; a name alone is that module
    must_not_know: str


# The one copy of the table (docs/design.md and DESIGN.md describe it in words). A new module
# or folder fails the tests until it is placed here.
LAYERS = (
    Layer(0, "base", ("snapvc.errors", "snapvc.ids", "snapvc.objects", "snapvc.files", "snapvc.tracing", "snapvc.lazy"),
          "storage, refs, values"),
    Layer(1, "encoding", ("snapvc.encoding.*",), "where objects live"),
    Layer(2, "diff", ("snapvc.diff.*",), "storage details"),
    Layer(2, "store", ("snapvc.store.*",), "values, refs"),
    Layer(2, "refs", ("snapvc.refs.*",), "values"),
    Layer(3, "backends", ("snapvc.backends.*",), "the repository, values"),
    Layer(4, "repository", ("snapvc.repository.*",), "the CLI, frameworks, maintenance, the agent layer"),
    Layer(5, "maintenance", ("snapvc.maintenance.*",), "frameworks, the agent layer"),
    Layer(5, "agent", ("snapvc.agent.*",), "storage details, maintenance"),
    Layer(6, "public face", ("snapvc", "snapvc.api", "snapvc.aio"), "frameworks, the CLI"),
    Layer(7, "integrations", ("snapvc.integrations.*",), "the CLI"),
    Layer(7, "ui", ("snapvc.ui.*",), "the CLI"),
    Layer(7, "mcp", ("snapvc.mcp.*",), "the CLI"),
    Layer(8, "cli", ("snapvc.cli.*", "snapvc.demo", "snapvc.__main__"), "internals beyond the public API"),
)


def layer_of(module: str) -> Layer | None:
    """The layer a module belongs to, or None when the table does not place it."""
    for layer in LAYERS:
        for pattern in layer.modules:
            if module == pattern or (pattern.endswith(".*") and (module == pattern[:-2] or module.startswith(pattern[:-1]))):
                return layer
    return None


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


# -- reading the tree --------------------------------------------------------------------


class Import(NamedTuple):
    importer: str
    line: int
    target: str  # a module of the package (a package means its __init__)


@dataclass
class Findings:
    unplaced: list[str] = field(default_factory=list)
    layering: list[str] = field(default_factory=list)
    cycles: list[list[str]] = field(default_factory=list)
    private: list[str] = field(default_factory=list)


def modules_of(root: Path) -> dict[str, Path]:
    """Module name -> source file for every module of the package at ``root``."""
    package = root.name
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join((package, *parts))] = path
    return found


def _resolve_from(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module name of ``from <module> import ...``, relative forms included."""
    if not node.level:
        return node.module or ""
    # A package's own name is the base of its relative imports; a module's base is its package.
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of attribute reads on a name, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def _private_module_outside(target: str, importer: str) -> str | None:
    """The private part of ``target`` (a ``_name`` module or package) when ``importer`` is not
    inside the package that holds it: a private module is its package's own business."""
    parts = target.split(".")
    for i, part in enumerate(parts):
        owner = ".".join(parts[:i])
        if _is_private(part) and not (importer == owner or importer.startswith(owner + ".")):
            return ".".join(parts[: i + 1])
    return None


def read_imports(module: str, path: Path, known: set[str], findings: Findings) -> list[Import]:
    """The package-internal imports of one module; ``_private`` names it takes from other
    modules go into ``findings.private`` on the way."""
    package = module.split(".")[0]
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    imports: list[Import] = []
    # Local names bound to package modules, so ``writer._encode`` is seen as well as
    # ``from writer import _encode``: both take a private name from another module.
    aliases: dict[str, str] = {}

    def add(line: int, target: str) -> None:
        found = Import(module, line, target)
        if target != module and (target == package or target.startswith(package + ".")) and found not in imports:
            imports.append(found)
            hidden = _private_module_outside(target, module)
            if hidden:
                findings.private.append(f"{module}:{line} imports the private module {hidden}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(node.lineno, alias.name)
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom):
            source = _resolve_from(module, is_package, node)
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in known:
                    # ``from package import module``: the module is what is imported.
                    add(node.lineno, submodule)
                    aliases[alias.asname or alias.name] = submodule
                else:
                    add(node.lineno, source)
                    if _is_private(alias.name) and source != module and source.startswith(package):
                        findings.private.append(f"{module}:{node.lineno} imports {alias.name} from {source}")
        elif isinstance(node, ast.Call) and _dotted(node.func) in ("importlib.import_module", "import_module", "__import__"):
            # A module named in a string is imported all the same.
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                add(node.lineno, node.args[0].value)

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            dotted = _dotted(node.value)
            if dotted is None:
                continue
            head, _, rest = dotted.partition(".")
            if head in aliases:
                owner = aliases[head] + ("." + rest if rest else "")
                if owner in known and owner != module:
                    findings.private.append(f"{module}:{node.lineno} reads {node.attr} of {owner}")
    return imports


# -- the checks ---------------------------------------------------------------------------


def _cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle per strongly connected group of modules (Tarjan), each as the list of its
    modules with the line of each import, starting and ending at the same module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)

    found = []
    for group in sorted(groups):
        # The shortest way round from the group's first module back to itself, inside the group.
        start, members = group[0], set(group)
        came_from: dict[str, str] = {}
        frontier = [start]
        while start not in came_from:
            following = []
            for node in frontier:
                for nxt in sorted(edges.get(node, {})):
                    if nxt in members and nxt not in came_from:
                        came_from[nxt] = node
                        following.append(nxt)
            frontier = following
        path = [start]
        while len(path) == 1 or path[-1] != start:
            path.append(came_from[path[-1]])
        path.reverse()
        cycle = [f"{a} (line {edges[a][b]})" for a, b in zip(path, path[1:])] + [start]
        if len(group) > len(path) - 1:
            cycle.append(f"[{len(group)} modules in this tangle: {', '.join(group)}]")
        found.append(cycle)
    return found


def check(root: Path) -> Findings:
    """Every violation of the layer table in the package at ``root``."""
    findings = Findings()
    modules = modules_of(root)
    known = set(modules)
    edges: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        edges[module] = {}
        mine = layer_of(module)
        if mine is None:
            findings.unplaced.append(f"{module} ({path.relative_to(root.parent)}) is in no layer of the table")
        for imp in read_imports(module, path, known, findings):
            edges[module].setdefault(imp.target, imp.line)
            theirs = layer_of(imp.target)
            if mine is None:
                continue
            where = f"{module}:{imp.line} imports {imp.target}"
            if theirs is None:
                findings.layering.append(f"{where}, which is in no layer of the table")
            elif theirs.rank > mine.rank or (theirs.rank == mine.rank and theirs.name != mine.name):
                findings.layering.append(
                    f"{where}: {mine.name} (rank {mine.rank}) must not know {theirs.name} (rank {theirs.rank}); "
                    f"{mine.name} must not know {mine.must_not_know}"
                )
    findings.cycles = _cycles({m: {t: line for t, line in targets.items() if t in known} for m, targets in edges.items()})
    return findings


def _report(title: str, lines: list[str]) -> str:
    return f"{len(lines)} {title}:\n" + "\n".join(f"  {line}" for line in lines)


# -- snapvc itself ------------------------------------------------------------------------


def test_every_module_of_snapvc_is_in_the_table() -> None:
    findings = check(PACKAGE_ROOT)
    if findings.unplaced:
        pytest.fail(_report("modules the layer table does not place (add them to LAYERS)", findings.unplaced), pytrace=False)


def test_no_module_of_snapvc_imports_a_higher_or_sibling_layer() -> None:
    findings = check(PACKAGE_ROOT)
    if findings.layering:
        pytest.fail(_report("imports against the layer table", findings.layering), pytrace=False)


def test_snapvc_has_no_import_cycle() -> None:
    findings = check(PACKAGE_ROOT)
    if findings.cycles:
        pytest.fail(_report("import cycles", [" -> ".join(cycle) for cycle in findings.cycles]), pytrace=False)


def test_no_module_of_snapvc_takes_another_modules_private_names() -> None:
    findings = check(PACKAGE_ROOT)
    if findings.private:
        pytest.fail(_report("private names taken from other modules", findings.private), pytrace=False)


# -- the checker on small fake trees -------------------------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    """A fake ``snapvc`` package under tmp_path: {"encoding/writer.py": source, ...}."""
    root = tmp_path / "snapvc"
    for name, source in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(root).parents:
            (root / parent / "__init__.py").touch()
        path.write_text(source, encoding="utf-8")
    return root


def _fine_tree(tmp_path: Path, **extra: str) -> Path:
    """A small package that follows the table, in every way of importing the checker reads;
    ``extra`` adds or replaces modules (``store__base`` is ``store/base.py``)."""
    files = {
        "ids.py": "import hashlib\n",
        "errors.py": "class SnapvcError(Exception):\n    pass\n",
        "encoding/__init__.py": "from snapvc.encoding.writer import encode\n",
        "encoding/writer.py": "from snapvc import ids\nfrom snapvc.errors import SnapvcError\nfrom . import chunker\n\ndef encode(): ...\n",
        "encoding/chunker.py": "from ..ids import __name__ as ids_name\nimport snapvc.errors as errors\n",
        "store/__init__.py": "",
        "store/base.py": "import snapvc.ids\n\ndef put():\n    from snapvc.errors import SnapvcError\n",
        "repository/__init__.py": "",
        "repository/core.py": (
            "from typing import TYPE_CHECKING\nfrom snapvc.encoding import encode\nfrom snapvc.store import base\n"
            "if TYPE_CHECKING:\n    from snapvc.encoding.chunker import ids_name\n"
        ),
        "api.py": "from snapvc.repository.core import *\n",
        "cli/__init__.py": "import snapvc\nfrom snapvc import api\n",
    }
    files.update({name.replace("__", "/") + ".py": source for name, source in extra.items()})
    return _tree(tmp_path, files)


def test_the_checker_passes_a_tree_that_follows_the_table(tmp_path: Path) -> None:
    assert check(_fine_tree(tmp_path)) == Findings()


def test_the_checker_names_an_import_of_a_higher_layer(tmp_path: Path) -> None:
    # Inside a function, where it would not even run at import time: it still counts.
    root = _fine_tree(tmp_path, store__base="def put():\n    import snapvc.repository.core\n")
    findings = check(root)
    assert findings.layering == [
        "snapvc.store.base:2 imports snapvc.repository.core: store (rank 2) must not know repository (rank 4); store must not know values, refs"
    ]


def test_the_checker_names_an_import_of_a_sibling_layer(tmp_path: Path) -> None:
    root = _fine_tree(tmp_path, refs__names="from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from snapvc.store.base import put\n")
    findings = check(root)
    assert findings.layering == [
        "snapvc.refs.names:3 imports snapvc.store.base: refs (rank 2) must not know store (rank 2); refs must not know values"
    ]


def test_the_checker_names_a_package_import_as_its_init(tmp_path: Path) -> None:
    root = _fine_tree(tmp_path, ids="from snapvc import encoding\n")
    assert [line.split(":")[0:2] for line in check(root).layering] == [["snapvc.ids", "1 imports snapvc.encoding"]]


def test_the_checker_names_a_cycle_with_its_modules(tmp_path: Path) -> None:
    # Held open by a TYPE_CHECKING import, as a cycle usually is.
    root = _fine_tree(
        tmp_path,
        encoding__chunker="from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from snapvc.encoding.writer import encode\n",
    )
    findings = check(root)
    assert findings.cycles == [["snapvc.encoding.chunker (line 3)", "snapvc.encoding.writer (line 3)", "snapvc.encoding.chunker"]]
    assert not findings.layering


def test_the_checker_names_a_private_name_taken_from_another_module(tmp_path: Path) -> None:
    root = _fine_tree(
        tmp_path,
        encoding__splice="from snapvc.encoding.writer import encode, _Frame\nfrom snapvc.encoding import chunker\n\nchunker._cut(1)\n",
    )
    assert check(root).private == [
        "snapvc.encoding.splice:1 imports _Frame from snapvc.encoding.writer",
        "snapvc.encoding.splice:4 reads _cut of snapvc.encoding.chunker",
    ]


def test_the_checker_names_a_private_module_used_outside_its_package(tmp_path: Path) -> None:
    root = _fine_tree(tmp_path, store___pack="X = 1\n", store__base="from snapvc.store._pack import X\n", ids="import snapvc.store._pack\n")
    findings = check(root)
    # Inside its own package a private module is fine; from anywhere else it is not.
    assert findings.private == ["snapvc.ids:1 imports the private module snapvc.store._pack"]


def test_the_checker_names_a_module_the_table_does_not_place(tmp_path: Path) -> None:
    root = _fine_tree(tmp_path, plugins__loader="import snapvc.ids\n", ids="import importlib\nimportlib.import_module('snapvc.plugins')\n")
    findings = check(root)
    assert findings.unplaced == [
        "snapvc.plugins (snapvc/plugins/__init__.py) is in no layer of the table",
        "snapvc.plugins.loader (snapvc/plugins/loader.py) is in no layer of the table",
    ]
    assert findings.layering == ["snapvc.ids:2 imports snapvc.plugins, which is in no layer of the table"]


def test_every_layer_of_the_table_holds_a_module_of_snapvc() -> None:
    # A layer no module belongs to is a table that has drifted from the tree.
    placed = {layer_of(module) for module in modules_of(PACKAGE_ROOT)}
    assert [layer.name for layer in LAYERS if layer not in placed] == []


def _all(findings: Findings) -> Iterator[str]:
    yield from findings.unplaced
    yield from findings.layering
    yield from (" -> ".join(cycle) for cycle in findings.cycles)
    yield from findings.private


if __name__ == "__main__":
    # `python tests/test_layers.py` prints what the tests would list.
    for finding in _all(check(PACKAGE_ROOT)):
        print(finding)
