"""MkDocs hooks for the site (``mkdocs.yml`` lists this file; it is not a page).

- A page at the top of ``docs/`` that the nav does not list goes under "Guides", titled
  by its first heading, so a new guide is on the site as soon as it is written.
- The API reference (``reference/api.md``) documents every name of ``snapvc.__all__``:
  a name the page does not show yet is appended under "More of the public API", so
  the reference follows the public API as it grows.
- Outside code, ``][`` in a page's text is escaped: ``read ['documents']['doc-0357']`` in
  the generated benchmarks page is text, not a Markdown reference link (which
  mkdocstrings' cross-references would try, and fail, to resolve).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

GUIDES = "Guides"
API_PAGE = "reference/api.md"
_DIRECTIVE = re.compile(r"^::: ([\w.]+)", re.M)
_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:.|\n)*?(?<!`)\1(?!`)")


def _listed(nav: Any) -> set[str]:
    """Every page path named anywhere in the nav."""
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, dict):
        return set().union(*(_listed(v) for v in nav.values()))
    if isinstance(nav, list):
        return set().union(*(_listed(v) for v in nav)) if nav else set()
    return set()


def _title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return path.stem.replace("-", " ").capitalize()


def on_config(config: Any) -> Any:
    nav = config.get("nav")
    if not nav:
        return config
    docs = Path(config["docs_dir"])
    listed = _listed(nav)
    missing = sorted(p for p in docs.glob("*.md") if p.name not in listed)
    if not missing:
        return config
    for section in nav:
        if isinstance(section, dict) and GUIDES in section:
            section[GUIDES].extend({_title(p): p.name} for p in missing)
            break
    else:
        nav.append({GUIDES: [{_title(p): p.name} for p in missing]})
    return config


def escape_reference_brackets(markdown: str) -> str:
    """``][`` outside fenced blocks and code spans becomes ``]\\[``."""
    out: list[str] = []
    fenced = False
    for line in markdown.splitlines(keepends=True):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and "][" in line:
            pieces, at = [], 0
            for span in _CODE_SPAN.finditer(line):
                pieces.append(line[at : span.start()].replace("][", "]\\["))
                pieces.append(span.group(0))
                at = span.end()
            pieces.append(line[at:].replace("][", "]\\["))
            line = "".join(pieces)
        out.append(line)
    return "".join(out)


def undocumented_names(markdown: str) -> list[str]:
    """The names of ``snapvc.__all__`` that no ``::: snapvc.NAME`` (or module) directive
    of ``markdown`` documents."""
    import importlib

    import snapvc

    documented: set[str] = set()
    for target in _DIRECTIVE.findall(markdown):
        parts = target.split(".")
        if parts[0] != "snapvc":
            continue
        if len(parts) == 2:
            documented.add(parts[1])
        if len(parts) >= 2:  # a module: everything it exports
            try:
                module = importlib.import_module(target)
            except ImportError:
                continue
            documented.update(getattr(module, "__all__", ()))
    return [name for name in snapvc.__all__ if not name.startswith("__") and name not in documented]


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if page.file.src_uri == API_PAGE:
        missing = undocumented_names(markdown)
        if missing:
            markdown += "\n## More of the public API\n\n" + "".join(f"::: snapvc.{name}\n\n" for name in missing)
    return escape_reference_brackets(markdown)
