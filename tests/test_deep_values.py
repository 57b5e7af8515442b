"""Values nested deeper than a state may be (``MAX_DEPTH`` containers) are refused with
an error naming the path where the limit is crossed, by every way in — the encoder,
the JSON forms (``to_jsonable``/``from_jsonable``, ``Checkpoint.from_dict``, the
``snapvc commit`` command), the working copy's copies, JSON Patch — and never reach
Python's recursion limit as a raw ``RecursionError``."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import snapvc
from snapvc.encoding.writer import MAX_DEPTH

FAR = 5000  # well past Python's recursion limit


STEP = {"dict": "['a']", "list": "[0]", "tuple": "[0]"}


def chain(containers: int, kind: str = "dict") -> Any:
    """``containers`` nested containers of ``kind``, 1 in the innermost."""
    value: Any = 1
    for _ in range(containers):
        value = {"a": value} if kind == "dict" else [value] if kind == "list" else (value,)
    return value


def json_chain(containers: int, kind: str) -> Any:
    """What ``to_jsonable`` makes of ``chain(containers, kind)``, built directly."""
    value: Any = 1
    for _ in range(containers):
        value = {"a": value} if kind == "dict" else [value] if kind == "list" else {"$snapvc": "tuple",
                                                                                    "items": [value]}
    return value


@pytest.mark.parametrize("kind", ["dict", "list", "tuple"])
def test_the_json_forms_and_the_encoder_agree_on_the_deepest_state(kind: str) -> None:
    """A state of MAX_DEPTH containers, its own dict counted, goes through all three ways;
    one container more is refused by each, at the same path."""
    deepest = {"a": chain(MAX_DEPTH - 1, kind)}
    assert snapvc.from_jsonable(snapvc.to_jsonable(deepest)) == deepest
    assert snapvc.from_jsonable({"a": json_chain(MAX_DEPTH - 1, kind)}) == deepest
    repo = snapvc.open("memory://")
    repo.commit(deepest)
    assert repo.checkout("main") == deepest

    path = "state['a']" + STEP[kind] * (MAX_DEPTH - 1)  # the first container refused
    for containers in (MAX_DEPTH + 1, FAR):
        state, form = {"a": chain(containers - 1, kind)}, {"a": json_chain(containers - 1, kind)}
        for way in (functools.partial(snapvc.to_jsonable, state), functools.partial(snapvc.from_jsonable, form),
                    functools.partial(repo.commit, state)):
            with pytest.raises(snapvc.UnsupportedValueError) as raised:
                way()
            assert raised.value.path == path
            assert raised.value.reason == f"nested deeper than {MAX_DEPTH} containers, the most a state may hold"


def test_a_checkpoint_record_of_deep_values_is_refused_naming_the_path() -> None:
    state = snapvc.open("memory://").state("main")
    state.set("a", 1)
    record = state.snapshot().to_dict()
    record["values"] = {"deep": json_chain(FAR, "list")}
    with pytest.raises(snapvc.UnsupportedValueError, match=r"^values\['deep'\]\[0\]\[0\]"):
        snapvc.Checkpoint.from_dict(record)


def test_the_commit_command_refuses_deep_json_naming_the_path(tmp_path: Path) -> None:
    """600 levels: JSON the parser takes, deeper than a state may be."""
    (tmp_path / "deep.json").write_text('{"x": ' + '{"a": ' * 600 + "1" + "}" * 600 + "}")
    env = {**os.environ, "SNAPVC_CEILING_DIRECTORIES": str(tmp_path.parent)}
    env.pop("SNAPVC_REPO", None)
    run = [sys.executable, "-m", "snapvc"]
    subprocess.run([*run, "init", "agent.snapvc"], cwd=tmp_path, env=env, check=True, capture_output=True)
    done = subprocess.run([*run, "commit", "deep.json"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "unexpected" not in done.stderr
    assert "deep.json['x']['a']['a']" in done.stderr
    assert f"nested deeper than {MAX_DEPTH} containers" in done.stderr


def test_appending_a_value_too_deep_leaves_the_list_as_it_was() -> None:
    state = snapvc.open("memory://").state("main")
    state.append("log", {"n": 1})
    with pytest.raises(snapvc.UnsupportedValueError) as raised:
        state.extend("log", [{"n": 2}, chain(FAR)])
    assert raised.value.path == "state['log'][2]" + "['a']" * (MAX_DEPTH - 2)
    assert state.get("log") == [{"n": 1}]
    state.snapshot()  # what is there still commits


def test_a_rollback_block_over_a_value_too_deep_refuses_it_naming_the_path() -> None:
    state = snapvc.open("memory://").state("main")
    state.set("deep", chain(FAR, "list"))
    with pytest.raises(snapvc.UnsupportedValueError) as raised:
        with state.rollback_on_error():
            pass
    assert raised.value.path == "state['deep']" + "[0]" * (MAX_DEPTH - 1)
    state.delete("deep")
    with state.rollback_on_error():  # the block works again once the value is gone
        state.set("a", 1)
    assert dict(state) == {"a": 1}


@pytest.mark.parametrize("operation", [
    {"op": "add", "path": "/y", "value": "DEEP"},
    {"op": "replace", "path": "/x", "value": "DEEP"},
    {"op": "test", "path": "/x", "value": "DEEP"},
    {"op": "copy", "from": "/x", "path": "/y"},
])
def test_a_patch_with_a_value_too_deep_names_its_operation(operation: dict[str, Any]) -> None:
    value = chain(FAR)
    document = {"x": value}
    operation = {k: value if v == "DEEP" else v for k, v in operation.items()}
    with pytest.raises(snapvc.PatchError) as raised:
        snapvc.apply_patch(document, [{"op": "add", "path": "/z", "value": 1}, operation])
    assert raised.value.index == 1 and raised.value.op == operation["op"]
    assert f"nests deeper than {MAX_DEPTH} objects and arrays" in raised.value.reason
    assert document == {"x": value}


def test_a_patch_text_nested_past_the_json_parser_is_refused_naming_its_operation() -> None:
    """Deep enough for Python's json module (which looks for repeated members) to meet
    the recursion limit, not so deep that orjson refuses the text."""
    text = '[{"op": "add", "path": "/y", "value": ' + '{"a": ' * 1000 + "1" + "}" * 1000 + "}]"
    with pytest.raises(snapvc.PatchError, match=r"^patch operation 0 \(add /y\): the value nests deeper"):
        snapvc.apply_patch({}, text)
