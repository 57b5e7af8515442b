"""The command reads states holding typed values without their classes.

An agent stores its dataclasses and pydantic models; `snapvc` on the command line has
none of the agent's code. It shows, diffs, merges and commits those values back as they
are stored (``snapvc.encoding.adapters.StoredTypedValue``), and the agent, with its
classes, reads the result as its own values again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

AGENT = '''
import dataclasses, json, sys
import snapvc

@dataclasses.dataclass
class Note:
    text: str
    n: int

repo = snapvc.open(sys.argv[2])
if sys.argv[1] == "write":
    base = {"notes": [Note(f"note {i} " + "x" * 50, i) for i in range(200)],
            "by_key": {f"k{i}": Note("v" * 40, i) for i in range(100)}}
    repo.commit(base, message="base")
    repo.branch("b", at="main")
    state = repo.checkout("main")
    state["notes"].append(Note("on main", 1))
    state["by_key"]["k1"] = Note("on main", 2)
    repo.commit(state, branch="main", message="main edit")
    state = repo.checkout("b")
    state["notes"].insert(0, Note("on b", 1))
    state["by_key"]["k5"] = Note("on b", 3)
    repo.commit(state, branch="b", message="b edit")
else:
    state = repo.checkout("main")
    print(json.dumps({"types": sorted({type(v).__name__ for v in [*state["notes"], *state["by_key"].values()]}),
                      "first": dataclasses.asdict(state["notes"][0]), "last": dataclasses.asdict(state["notes"][-1]),
                      "k1": dataclasses.asdict(state["by_key"]["k1"]), "k5": dataclasses.asdict(state["by_key"]["k5"]),
                      "count": len(state["notes"])}))
'''


def _run(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_the_command_shows_diffs_merges_and_commits_values_whose_classes_it_lacks(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(AGENT)
    repo = str(tmp_path / "t.snapvc")
    assert _run("agent.py", "write", repo, cwd=tmp_path).returncode == 0

    def snapvc(*args: str, stdin: str | None = None, status: int = 0) -> str:
        done = _run("-m", "snapvc", *args, "--repo", repo, cwd=tmp_path, stdin=stdin)
        assert done.returncode == status, done.stderr
        return done.stdout

    shown = json.loads(snapvc("checkout", "b", "--path", "notes.0"))
    assert shown == {"$snapvc": "typed", "type": "__main__:Note", "fields": {"n": 1, "text": "on b"}}
    assert "Merge made" in snapvc("merge", "b", "--into", "main")
    changed = snapvc("diff", "main~1", "main", "--exit-code", status=1)  # 1: there are differences
    assert '+ [0]: {"$snapvc": "typed", "type": "__main__:Note", "fields": {"n": 1, "text": "on b"}}' in changed
    assert "k5" in changed
    # The whole state out and back in: the same values, the same ids, nothing changed.
    whole = snapvc("checkout", "main")
    assert "No change to the state" in snapvc("commit", "-b", "main", stdin=whole)
    assert snapvc("diff", "main~1", "main").strip() == "no changes"

    read = _run("agent.py", "read", repo, cwd=tmp_path)
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout) == {"types": ["Note"], "first": {"text": "on b", "n": 1},
                                       "last": {"text": "on main", "n": 1}, "k1": {"text": "on main", "n": 2},
                                       "k5": {"text": "on b", "n": 3}, "count": 202}
    assert "no problems" in snapvc("fsck")


def test_a_library_reader_without_the_class_is_told_to_register_it(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(AGENT)
    repo = str(tmp_path / "t.snapvc")
    assert _run("agent.py", "write", repo, cwd=tmp_path).returncode == 0
    reader = _run("-c", f"import snapvc; snapvc.open({repo!r}).checkout('main')", cwd=tmp_path)
    assert reader.returncode == 1 and "snapvc.errors.UnknownTypeError" in reader.stderr
    assert "'__main__:Note' cannot be rebuilt" in reader.stderr
