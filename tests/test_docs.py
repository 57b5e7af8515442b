"""The documentation runs: every ```python block of README.md and docs/*.md is executed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


CASES = [(path, i, code) for path in DOCS for i, code in enumerate(_blocks(path))]


def test_readme_has_examples() -> None:
    assert _blocks(ROOT / "README.md"), "README.md should show how to use snapvc"


@pytest.mark.parametrize("path,index,code", CASES, ids=[f"{p.name}-{i}" for p, i, _ in CASES])
def test_doc_example_runs(path: Path, index: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples create their repositories in the working directory
    exec(compile(code, f"{path.name} block {index}", "exec"), {"__name__": f"doc_{index}"})


def test_readme_commands_exist() -> None:
    text = (ROOT / "README.md").read_text()
    assert "make demo" in text and "make test" in text
    makefile = (ROOT / "Makefile").read_text()
    assert "snapvc demo" in makefile and "pytest" in makefile
    assert "make test" in (ROOT / ".ci" / "run").read_text()
