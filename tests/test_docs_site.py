"""The documentation site builds: ``mkdocs build --strict`` (mkdocs.yml), with every page,
the CLI reference generated from the command and the API reference from the docstrings."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

import snapvc
from snapvc.cli.main import cli

# Builds the whole documentation site with mkdocs: seconds.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's notice about MkDocs 2, printed on every build
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return out


def _text(page: Path) -> str:
    """The page's article as plain text."""
    source = page.read_text(encoding="utf-8")
    article = source[source.find("<article"):source.find("</article>")]
    return html.unescape(re.sub(r"<[^>]+>", "", article))


def _page(site: Path, doc: str) -> Path:
    return site / doc.removesuffix(".md").removesuffix("index") / "index.html"


def test_every_page_is_built(site: Path) -> None:
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    for needed in ("index.md", "getting-started.md", "concepts.md", "large-states.md", "agents.md",
                   "diff-merge-history.md", "design.md", "benchmarks.md", "reference/cli.md", "reference/api.md"):
        assert needed in pages
    for doc in pages:
        assert _page(site, doc).is_file(), f"{doc} was not built"


def test_every_page_is_in_the_nav(site: Path) -> None:
    """The hook puts a new page at the top of docs/ under Guides."""
    home = (site / "index.html").read_text(encoding="utf-8")
    nav = home[home.find('<nav class="md-nav md-nav--primary"'):]
    for doc in sorted(DOCS.rglob("*.md")):
        link = doc.relative_to(DOCS).as_posix().removesuffix(".md").removesuffix("index")
        assert f'href="{link}/"' in nav or (link == "" and 'href="."' in nav), f"{link} is not in the nav"


def _commands(group: click.Group, prefix: str) -> list[str]:
    names = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        names.append(f"{prefix} {name}")
        if isinstance(command, click.Group):
            names += _commands(command, f"{prefix} {name}")
    return names


def test_cli_reference_lists_every_command(site: Path) -> None:
    text = _text(_page(site, "reference/cli.md"))
    commands = _commands(cli, "snapvc")
    assert "snapvc diff" in commands and "snapvc log" in commands
    for command in commands:
        assert f"Usage: {command} [OPTIONS]" in " ".join(text.split()), f"{command} is not in the CLI reference"
    assert "--graph" in text  # options come with them


def test_api_reference_documents_the_public_api(site: Path) -> None:
    page = _page(site, "reference/api.md").read_text(encoding="utf-8")
    for anchor in ("snapvc.Repository.commit", "snapvc.Repository.diff", "snapvc.State.snapshot",
                   "snapvc.Checkpoint", "snapvc.Thread", "snapvc.Session", "snapvc.Runner", "snapvc.Step",
                   "snapvc.aio.AsyncRepository", "snapvc.errors.RefConflictError", "snapvc.Change",
                   "snapvc.MergeResult", "snapvc.DiffStat", "snapvc.HistoryEntry"):
        assert f'id="{anchor}"' in page, f"{anchor} is not in the API reference"
    for name in snapvc.__all__:
        if name.startswith("__"):
            continue
        assert re.search(rf'id="snapvc\.(?:errors\.|aio\.)?{re.escape(name)}"', page), f"snapvc.{name} is not documented"
    text = _text(_page(site, "reference/api.md"))
    assert "Store state as a new commit on branch" in text  # the docstring itself


def test_design_page_states_the_invariants(site: Path) -> None:
    text = _text(_page(site, "design.md"))
    assert "Design and format" in text
    assert "Write order and invariants" in text and "compare-and-swap" in text


def test_benchmarks_page_shows_the_figures(site: Path) -> None:
    text = _text(_page(site, "benchmarks.md"))
    assert "Agent run: 500 steps" in text and "read ['documents']['doc-0357'] via snapshot" in text


def test_escaping_brackets_leaves_code_alone() -> None:
    sys.path.insert(0, str(DOCS))
    try:
        import hooks
    finally:
        sys.path.remove(str(DOCS))
    page = "a ['x']['y'] b `c['x']['y']`\n```python\nd['x']['y']\n```\n"
    assert hooks.escape_reference_brackets(page) == "a ['x']\\['y'] b `c['x']['y']`\n```python\nd['x']['y']\n```\n"
