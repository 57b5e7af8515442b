"""The documentation runs: every ```python block of README.md and docs/**/*.md is executed.

A page holding the comment ``<!-- doc-session ... -->`` runs as one session instead: its
```python blocks in order, in one folder and one namespace, and its ```console blocks'
``$ snapvc ...`` commands for real in a subprocess, between them, each checked against
the output the page shows (commit ids aside: they cover the commit's time).

What a ``print(...)`` in a python block prints is shown in comments starting ``# -> ``:
beside the print, or on the lines right under it, one comment per printed line. The
test captures what each print call prints (every time it runs, in a loop too) and
compares it with them. Where the output varies, the comment says so with a
placeholder: ``...`` (or ``…``) for any text, ``<id>`` for a full id (64 hex digits),
``<short id>`` for a short one (12); everything else must match exactly. A comment
right under a print is its output: prose about it goes above the print, or after a
blank line.
"""

from __future__ import annotations

import ast
import builtins
import io
import os
import re
import shlex
import subprocess
import sys
import tokenize
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SESSION_MARK = "<!-- doc-session"
_ID = re.compile(r"\b[0-9a-f]{8,64}\b")


def _blocks(path: Path, lang: str = "python") -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", path.read_text(), re.S)


def _is_session(path: Path) -> bool:
    return SESSION_MARK in path.read_text()


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


CASES = [(path, i, code) for path in DOCS if not _is_session(path) for i, code in enumerate(_blocks(path))]
SESSIONS = [path for path in DOCS if _is_session(path)]


def test_readme_has_examples() -> None:
    assert _blocks(ROOT / "README.md"), "README.md should show how to use snapvc"


# -- what prints show ----------------------------------------------------------------------

OUTPUT = "# ->"
_PLACEHOLDERS = {"...": ".*?", "…": ".*?", "<id>": "[0-9a-f]{64}", "<short id>": "[0-9a-f]{12}"}


def _print_calls(code: str) -> list[tuple[int, int]]:
    """The ``(first line, last line)`` of each ``print(...)`` call in a block, innermost first."""
    calls = [(node.lineno, node.end_lineno or node.lineno) for node in ast.walk(ast.parse(code))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"]
    return sorted(calls, key=lambda call: call[1] - call[0])


def _shown_output(code: str, where: str) -> dict[int, list[str]]:
    """The output the ``# ->`` comments of a block show, by the last line of the print call
    they belong to (the line they are on, or the line of code right above them)."""
    prints = {last for _, last in _print_calls(code)}
    comments = {tok.start[0]: tok for tok in tokenize.generate_tokens(io.StringIO(code).readline)
                if tok.type == tokenize.COMMENT}
    shown: dict[int, list[str]] = {}
    anchor = None  # the line of code the comment lines under it belong to
    for n, line in enumerate(code.splitlines(), 1):
        comment = comments.get(n)
        text = comment.string.rstrip() if comment is not None else ""
        is_output = text == OUTPUT or text.startswith(OUTPUT + " ")
        if not line.strip():
            anchor = None
        elif comment is not None and not line[: comment.start[1]].strip():  # a comment line
            if is_output:
                assert anchor in prints, f"{where}, line {n}: {text!r} shows output, but no print(...) is right above it"
                shown.setdefault(anchor, []).append(text[len(OUTPUT) + 1:])
            else:
                assert anchor not in prints, (f"{where}, line {n}: a comment right under a print is its output: write "
                                              f"it '{OUTPUT} ...', or put a blank line before prose ({text!r})")
                anchor = None
        else:  # a line of code, perhaps with a comment beside it
            anchor = n
            if is_output:
                assert n in prints, f"{where}, line {n}: {text!r} shows output beside a line that ends no print(...)"
                shown.setdefault(n, []).append(text[len(OUTPUT) + 1:])
    return shown


def _matches(shown: str, printed: str) -> bool:
    """Whether a printed line is what a ``# ->`` comment shows, placeholders aside."""
    parts = re.split("(" + "|".join(map(re.escape, _PLACEHOLDERS)) + ")", shown)
    return re.fullmatch("".join(_PLACEHOLDERS.get(part, re.escape(part)) for part in parts), printed) is not None


def _run_python(code: str, where: str, namespace: dict[str, Any]) -> None:
    """Run a python block in ``namespace``, each print call's output captured and
    compared with what the block's ``# ->`` comments show for it."""
    shown = _shown_output(code, where)
    calls = _print_calls(code)
    printed: dict[int, str] = {}

    def recording_print(*args: Any, **kwargs: Any) -> None:
        if kwargs.get("file") is not None:
            builtins.print(*args, **kwargs)
            return
        out = io.StringIO()
        builtins.print(*args, **kwargs, file=out)
        sys.stdout.write(out.getvalue())
        caller = sys._getframe(1)
        if caller.f_code.co_filename == where:
            last = next((last for first, last in calls if first <= caller.f_lineno <= last), None)
            if last is not None:
                printed[last] = printed.get(last, "") + out.getvalue()

    namespace["print"] = recording_print
    exec(compile(code, where, "exec", dont_inherit=True), namespace)
    for last, lines in shown.items():
        got = printed.get(last, "").rstrip("\n").split("\n")
        assert len(got) == len(lines) and all(map(_matches, lines, got)), (
            f"{where}: the print(...) ending on line {last} printed\n" + "\n".join(got)
            + "\nwhere the page shows\n" + "\n".join(lines))


def test_output_comments_sit_under_prints() -> None:
    """Every page's ``# ->`` comments belong to a print (checked without running them);
    some pages show output."""
    shown = {f"{_name(path)} block {i}": _shown_output(code, f"{_name(path)} block {i}")
             for path in DOCS for i, code in enumerate(_blocks(path))}
    assert sum(len(lines) for by_line in shown.values() for lines in by_line.values()) > 0


def test_output_comments_compare_placeholders_strictly() -> None:
    assert _matches("sent 1 commits, … bytes", "sent 1 commits, 82 bytes")
    assert _matches("(new) -> <short id>; ...", "(new) -> 40886e20e615; sent 1 commits")
    assert not _matches("(new) -> <short id>", "(new) -> 40886e20e6")
    assert not _matches("<id>", "40886e20e615")
    assert not _matches("Added: ['result']", "Added: ['result', 'x']")
    assert _shown_output('print(1)  # -> 1\nfor i in (2, 3):\n    print(i)\n# -> 2\n# -> 3\n\n# prose\n', "t") == {
        1: ["1"], 3: ["2", "3"]}
    with pytest.raises(AssertionError, match="a comment right under a print is its output"):
        _shown_output("print(1)\n# 1\n", "t")
    with pytest.raises(AssertionError, match="no print"):
        _shown_output("x = 1\n# -> 1\n", "t")
    with pytest.raises(AssertionError, match=r"printed\n\s*2\n\s*where the page shows\n\s*1"):
        _run_python("print(2)  # -> 1\n", "t", {})


@pytest.mark.parametrize("path,index,code", CASES, ids=[f"{_name(p)}-{i}" for p, i, _ in CASES])
def test_doc_example_runs(path: Path, index: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples create their repositories in the working directory
    _run_python(code, f"{path.name} block {index}", {"__name__": f"doc_{index}"})


def _console_commands(block: str) -> list[tuple[str, str]]:
    """``(command, the output shown under it)`` for each ``$ `` line of a console block."""
    commands: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        elif commands:
            commands[-1][1].append(line)
        else:
            raise AssertionError(f"a console block starts with a command line ('$ ...'), not {line!r}")
    return [(command, "\n".join(output)) for command, output in commands]


def _without_ids(text: str) -> str:
    return _ID.sub("<id>", text).rstrip()


def _run_console(block: str, cwd: Path, where: str) -> None:
    env = {**os.environ, "SNAPVC_CEILING_DIRECTORIES": str(cwd.parent)}  # no repository elsewhere answers
    for command, shown in _console_commands(block):
        args = shlex.split(command)
        assert args[0] == "snapvc", f"{where}: only snapvc commands run in a console block, not {command!r}"
        done = subprocess.run([sys.executable, "-m", "snapvc", *args[1:]], capture_output=True, text=True, cwd=cwd,
                              timeout=120, env=env)
        assert done.returncode in (0, 1), f"{where}: $ {command} failed ({done.returncode}): {done.stderr}"
        assert _without_ids(done.stdout) == _without_ids(shown), (
            f"{where}: $ {command} printed\n{done.stdout}\nwhere the page shows\n{shown}"
        )


@pytest.mark.parametrize("path", SESSIONS, ids=[_name(p) for p in SESSIONS])
def test_doc_session_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "doc_session"}
    steps = re.findall(r"```(python|console)\n(.*?)```", path.read_text(), re.S)
    assert steps, f"{_name(path)} is marked as a session but has no python or console blocks"
    for index, (lang, code) in enumerate(steps):
        where = f"{_name(path)} block {index}"
        if lang == "python":
            _run_python(code, where, namespace)
        else:
            _run_console(code, tmp_path, where)


def test_console_blocks_run_in_sessions() -> None:
    """A ```console block shows commands and their output: only a session page runs them."""
    unchecked = [_name(p) for p in DOCS if _blocks(p, "console") and not _is_session(p)]
    assert not unchecked, f"console blocks outside a doc-session page are not run: {unchecked}"


def test_readme_commands_exist() -> None:
    text = (ROOT / "README.md").read_text()
    assert "make demo" in text and "make test" in text
    makefile = (ROOT / "Makefile").read_text()
    assert "snapvc demo" in makefile and "pytest" in makefile
    assert "make test" in (ROOT / ".ci" / "run").read_text()
