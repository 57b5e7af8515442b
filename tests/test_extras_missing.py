"""A feature whose optional extra is not installed says which extra to install, as a
``SnapvcError`` (and an ``ImportError``, as callers may catch): run in a process where
the extra's package cannot be imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# A finder placed first that refuses the named top-level packages, as if not installed.
_BLOCK = textwrap.dedent("""
    import sys
    class _Missing:
        def __init__(self, names): self.names = names
        def find_spec(self, name, path=None, target=None):
            if name.split('.')[0] in self.names:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None
    sys.meta_path.insert(0, _Missing(BLOCKED))
""")


def _run(blocked: set[str], code: str) -> str:
    script = _BLOCK.replace("BLOCKED", repr(blocked)) + textwrap.dedent(code)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize(("blocked", "code", "extra"), [
    ({"obstore"}, "snapvc.open('s3://bucket/prefix', endpoint='http://127.0.0.1:9')", "s3"),
    ({"agents"}, "from snapvc.integrations.openai_agents import SnapvcSession\nSnapvcSession('s', 'memory://')",
     "openai-agents"),
])
def test_a_missing_extra_is_named(blocked: set[str], code: str, extra: str) -> None:
    out = _run(blocked, f"""
        import snapvc
        from snapvc.errors import ExtraMissingError
        try:
{textwrap.indent(code, ' ' * 12)}
        except ExtraMissingError as exc:
            assert isinstance(exc, ImportError) and exc.extra == {extra!r}
            print(exc)
    """)
    assert f"'{extra}' extra" in out and f"pip install '.[{extra}]'" in out, out
