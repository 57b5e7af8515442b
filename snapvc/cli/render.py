"""How the ``snapvc`` command shows changes, values and commits to people.

A diff is drawn as a tree of the changed paths (``render_changes``): a key's changes
under it, ``+`` added in green, ``-`` removed in red, ``~`` modified in yellow with
``old → new`` (of a long one-line string, the part that changed), and a string of
several lines as a unified diff of its lines; a numpy array as its dtype and shape, and
what changed in it (rows appended, rows changed), never its values. Values are shown as JSON, typed ones in
``snapvc.to_jsonable``'s tagged form (``{"$snapvc": "decimal", "value": "1.10"}``),
never as Python reprs. On a narrow screen a line wraps, at words where it can: both
sides of ``old → new`` stay whole on the screen and in the pager.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import orjson

from rich.markup import escape
from rich.text import Text
from rich.tree import Tree

import snapvc
from snapvc.diff.changes import changed_region, format_path, plain_value
from snapvc.encoding.arrays import array_summary, header_json, is_array
from snapvc.encoding.arrays import change_summary as array_change_summary
from snapvc.encoding.jsonable import TAG
from snapvc.encoding.reader import is_tuple
from snapvc.objects import shown_metadata

__all__ = ["FORMAT_HELP", "LONG_TEXT", "change_json", "commit_line", "decoration", "format_commit", "graph_markup",
           "labels_by_commit", "render_changes", "value_text"]

LONG_TEXT = 60  # a one-line string longer than this shows only the part that changed
_STYLE = {"added": ("+", "green"), "removed": ("-", "red"), "modified": ("~", "yellow")}


def _step(step: str | int) -> str:
    return format_path((step,)) if isinstance(step, int) or not step.isidentifier() else step


def _is_text(change: snapvc.Change) -> bool:
    return change.kind == "modified" and isinstance(change.old, str) and isinstance(change.new, str)


def _unified(change: snapvc.Change, context: int) -> Text:
    lines = change.unified(context).splitlines()[2:]  # the ---/+++ header repeats the path
    text = Text(overflow="fold")  # a long line wraps: cut at the screen's edge, its end would be lost
    for i, line in enumerate(lines):
        style = "green" if line.startswith("+") else "red" if line.startswith("-") else \
            "cyan" if line.startswith("@@") else "dim" if line.startswith("\\") else ""
        text.append(line + ("\n" if i < len(lines) - 1 else ""), style=style)
    return text


class _Node:
    """The changes below one path, in the diff's order: a change here, or a step down."""

    def __init__(self) -> None:
        self.children: dict[str | int, _Node] = {}
        self.items: list[snapvc.Change | str | int] = []

    def child(self, step: str | int) -> _Node:
        if step not in self.children:
            self.children[step] = _Node()
            self.items.append(step)
        return self.children[step]


def render_changes(changes: Sequence[snapvc.Change], title: str, context: int = 3) -> Tree:
    """``changes`` as a tree of paths under ``title``: each change at its last step,
    below the keys and indices that lead to it (a chain of single steps is one label:
    ``tool_calls[0].arguments``)."""
    root = _Node()
    for change in changes:
        node = root
        for step in change.path[:-1]:
            node = node.child(step)
        node.items.append(change)
    tree = Tree(Text(title, style="bold"), guide_style="dim")
    _draw(tree, root, context)
    return tree


def _draw(tree: Tree, node: _Node, context: int) -> None:
    for item in node.items:
        if isinstance(item, snapvc.Change):
            _leaf(tree, item, context)
            continue
        steps, below = [item], node.children[item]
        while len(below.items) == 1 and not isinstance(below.items[0], snapvc.Change):
            steps.append(below.items[0])
            below = below.children[below.items[0]]
        _draw(tree.add(Text(format_path(tuple(steps)), style="bold")), below, context)


def _leaf(parent: Tree, change: snapvc.Change, context: int) -> None:
    sign, colour = _STYLE[change.kind]
    name = escape(_step(change.path[-1])) if change.path else "(the whole state)"
    if _is_text(change) and "\n" in change.old + change.new:
        node = parent.add(f"[{colour}]{sign} {name}[/] [dim](text, {len(change.old)} → {len(change.new)} characters)[/]")
        node.add(_unified(change, context))
    elif _is_text(change) and max(len(change.old), len(change.new)) > LONG_TEXT:
        # changed_region quotes as Python does: shown as JSON strings, as every value is.
        before, after = (orjson.dumps(ast.literal_eval(side)).decode() for side in changed_region(change.old, change.new))
        parent.add(f"[{colour}]{sign} {name}:[/] [red]{escape(before)}[/] → [green]{escape(after)}[/]")
    elif change.kind == "modified" and is_array(change.old) and is_array(change.new):
        parent.add(f"[{colour}]{sign} {name}:[/] {escape(array_change_summary(change.old, change.new))}")
    elif change.kind == "modified":
        parent.add(f"[{colour}]{sign} {name}:[/] [red]{escape(value_text(change.old))}[/] → "
                   f"[green]{escape(value_text(change.new))}[/]")
    else:
        value = change.new if change.kind == "added" else change.old
        parent.add(f"[{colour}]{sign} {name}: {escape(value_text(value))}[/]")


def value_text(value: Any, limit: int = 200) -> str:
    """``value`` as one line of JSON (``snapvc.to_jsonable``'s form), cut with ``…`` to
    about ``limit`` characters. A stored map or list is read only as far as the text
    shown needs, however large it is. A string cut keeps its closing quote
    (``"read paper: Scaling…"``): cut mid-quote it reads as broken JSON. A numpy array
    is named by its dtype, shape and size (its JSON form could be hundreds of megabytes)."""
    if is_array(value):
        return array_summary(value)
    if isinstance(value, str):
        text = orjson.dumps(value[: limit + 1]).decode()
        keep = min(len(value), limit - 3)  # room for the quotes and the ellipsis
        while len(text) > limit and keep > 0:  # an escape takes more than its character: shorten until it fits
            text = orjson.dumps(value[:keep] + "…").decode()
            keep -= max(1, (len(text) - limit) // 2)
        return text
    parts: list[str] = []
    size = 0
    for piece in _json_pieces(value, snapvc.to_jsonable):
        parts.append(piece)
        size += len(piece)
        if size > limit:
            return "".join(parts)[: limit - 1] + "…"
    return "".join(parts)


def _json_pieces(value: Any, to_jsonable: Any) -> Iterator[str]:
    """The JSON text of ``value`` a piece at a time, lazy views read as the text goes."""
    # A tuple, and a map with a "$snapvc" key of its own, are tagged objects: written whole.
    if isinstance(value, (snapvc.MapView, dict)) and TAG not in value:
        yield "{"
        for i, (key, item) in enumerate(value.items()):
            yield (", " if i else "") + orjson.dumps(key).decode() + ": "
            yield from _json_pieces(item, to_jsonable)
        yield "}"
    elif isinstance(value, list) or (isinstance(value, snapvc.SeqView) and not is_tuple(value)):
        yield "["
        for i, item in enumerate(value):
            yield ", " if i else ""
            yield from _json_pieces(item, to_jsonable)
        yield "]"
    else:
        yield _loose_json(to_jsonable(plain_value(value)))


def _loose_json(jsonable: Any) -> str:
    """JSON with a space after ``:`` and ``,``, as people write it."""
    if isinstance(jsonable, dict):
        return "{" + ", ".join(orjson.dumps(k).decode() + ": " + _loose_json(v) for k, v in jsonable.items()) + "}"
    if isinstance(jsonable, list):
        return "[" + ", ".join(_loose_json(v) for v in jsonable) + "]"
    return orjson.dumps(jsonable).decode()


def change_json(change: snapvc.Change) -> dict[str, Any]:
    """A change as ``--json`` prints it: the path as a list of steps, and as text. An
    array's sides are its JSON form without the values (``header_json``), with a
    ``summary`` of what changed."""
    out: dict[str, Any] = {"path": list(change.path), "where": format_path(change.path), "kind": change.kind}
    if is_array(change.old) or is_array(change.new):
        for side, value in (("old", change.old), ("new", change.new)):
            if value is not None:
                out[side] = header_json(value) if is_array(value) else snapvc.to_jsonable(plain_value(value))
        both = is_array(change.old) and is_array(change.new)
        out["summary"] = array_change_summary(change.old, change.new) if both else value_text(
            change.new if change.kind == "added" else change.old)
        return out
    if change.kind != "added":
        out["old"] = snapvc.to_jsonable(plain_value(change.old))
    if change.kind != "removed":
        out["new"] = snapvc.to_jsonable(plain_value(change.new))
    return out


def labels_by_commit(repo: snapvc.Repository) -> dict[bytes, list[str]]:
    """Each commit's labels as ``git log`` decorates: ``HEAD -> main``, other branches,
    ``tag: v1``."""
    labels: dict[bytes, list[str]] = {}
    head = repo.head
    for name, oid in repo.branches().items():
        if name == head:
            labels.setdefault(oid, []).insert(0, f"HEAD -> {name}")
        else:
            labels.setdefault(oid, []).append(name)
    for name, oid in repo.tags().items():
        labels.setdefault(oid, []).append(f"tag: {name}")
    return labels


_LINE_COLOURS = ("red", "green", "yellow", "blue", "magenta", "cyan")


def graph_markup(graph: str) -> str:
    """A ``graph_rows`` prefix in rich markup, each line of history in a colour of its
    own, as ``git log --graph`` colours them (a connector takes its line's colour)."""
    out = []
    for i, char in enumerate(graph):
        if char == " ":
            out.append(char)
        else:
            column = (i + 1) // 2 if char in "/\\_" else i // 2
            out.append(f"[{_LINE_COLOURS[column % len(_LINE_COLOURS)]}]{escape(char)}[/]")
    return "".join(out)


def decoration(labels: Iterable[str]) -> str:
    """`` (HEAD -> main, tag: v1)`` in rich markup; empty without labels."""
    parts = [f"[bold cyan]{escape(x)}[/]" if x.startswith("HEAD") else
             f"[bold yellow]{escape(x)}[/]" if x.startswith("tag: ") else f"[bold green]{escape(x)}[/]"
             for x in labels]
    return " [yellow]([/]" + "[yellow], [/]".join(parts) + "[yellow])[/]" if parts else ""


def commit_line(commit: snapvc.Commit, labels: Iterable[str]) -> str:
    """``1a2b3c4d (HEAD -> main, tag: v1) step 3: write`` in rich markup."""
    first = commit.message.splitlines()[0] if commit.message else ""
    return f"[yellow]{commit.id.short[:8]}[/]{decoration(labels)} {escape(first)}"


FORMAT_HELP = ("print each commit as FMT, whose placeholders are git's: %H id, %h short id, %s subject (the "
               "message's first line), %b body, %B whole message, %an author, %ad date, %ai ISO-like date, "
               "%aI strict ISO 8601 date, %at Unix seconds, %d ' (HEAD -> main, tag: v1)', %D the same without "
               "the brackets, %P parent ids, %p short parent ids, %(meta:KEY) metadata KEY (text as is, other "
               "values as JSON), %(meta) all metadata as JSON, %n newline, %% a %")

_PLACEHOLDER = re.compile(r"%(\(meta(?::[^)]*)?\)|a[dItin]|[HhsbBdDPpn%])")


def format_commit(fmt: str, commit: snapvc.Commit, labels: Sequence[str]) -> str:
    """``commit`` as ``fmt`` says (``log --format``; see ``FORMAT_HELP``), plain text. A
    ``%`` followed by anything else is kept as it is, as git keeps it."""
    first, _, rest = (commit.message or "").partition("\n")

    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if code.startswith("(meta"):
            key = code[6:-1] if code.startswith("(meta:") else None
            metadata = shown_metadata(commit)  # a value too deep or too large to show: cut
            if key is None:
                return _loose_json(snapvc.to_jsonable(metadata))
            if key not in metadata:
                return ""
            value = metadata[key]
            return value if isinstance(value, str) else _loose_json(snapvc.to_jsonable(value))
        local = commit.time.astimezone()
        fields: dict[str, Callable[[], str]] = {
            "H": lambda: commit.id.hex, "h": lambda: commit.id.short[:8], "s": lambda: first,
            "b": lambda: rest.lstrip("\n"), "B": lambda: commit.message or "", "an": lambda: commit.author,
            "ad": lambda: local.strftime("%a %b %d %H:%M:%S %Y %z"), "ai": lambda: local.strftime("%Y-%m-%d %H:%M:%S %z"),
            "aI": lambda: local.isoformat(timespec="seconds"), "at": lambda: str(int(commit.time.timestamp())),
            "d": lambda: f" ({', '.join(labels)})" if labels else "", "D": lambda: ", ".join(labels),
            "P": lambda: " ".join(p.hex for p in commit.parents), "p": lambda: " ".join(p.short[:8] for p in commit.parents),
            "n": lambda: "\n", "%": lambda: "%",
        }
        return fields[code]()

    return _PLACEHOLDER.sub(one, fmt)
