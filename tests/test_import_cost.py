"""``import snapvc`` loads what opening, committing and checking out need, and no more:
diffs, merges, maintenance (sync, gc, fsck, stats, git), the runner and asyncio load
when a name or method of theirs is first used. Every public name still works."""

from __future__ import annotations

import json
import subprocess
import sys

import snapvc

# Modules a process that only commits and checks out never needs.
LATER = ("asyncio", "dulwich", "difflib", "tempfile", "snapvc.aio", "snapvc.agent.runner", "snapvc.diff",
         "snapvc.maintenance", "snapvc.integrations", "snapvc.cli")


def _loaded_after(script: str) -> list[str]:
    """The modules a fresh interpreter has loaded after running ``script``."""
    code = f"{script}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return list(json.loads(done.stdout.splitlines()[-1]))


def _later(loaded: list[str]) -> list[str]:
    return [m for m in loaded if any(m == name or m.startswith(name + ".") for name in LATER)]


def test_import_commit_and_checkout_load_none_of_the_other_layers(tmp_path: object) -> None:
    script = (f"import snapvc\nrepo = snapvc.open({str(tmp_path)!r} + '/r.snapvc')\n"
              "repo.commit({'a': [1, 2]}, message='m')\nrepo.checkout()\nrepo.snapshot()['a']\nrepo.close()")
    assert _later(_loaded_after(script)) == []


def test_a_name_of_a_later_layer_loads_its_module_when_first_read() -> None:
    loaded = _loaded_after("import snapvc\nsnapvc.Keep\nfrom snapvc import Runner, aio")
    assert {"snapvc.maintenance", "snapvc.agent.runner", "snapvc.aio", "asyncio"} <= set(loaded)
    assert "snapvc.diff.patch" not in loaded


def test_every_public_name_is_there_and_listed() -> None:
    from snapvc.agent.runner import Runner
    from snapvc.maintenance.sync import Remote

    for name in snapvc.__all__:
        assert name in dir(snapvc), name
        assert getattr(snapvc, name) is not None, name
    assert snapvc.Runner is Runner and snapvc.Remote is Remote
    assert not hasattr(snapvc, "NoSuchName")
