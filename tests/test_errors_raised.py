"""Every error snapvc raises on purpose derives from ``snapvc.SnapvcError``, so that
``except snapvc.SnapvcError`` catches every failure snapvc means. An AST walk over the
package keeps it so: a ``raise ValueError(...)`` (or any builtin exception made, or an
exception class of snapvc's own outside the tree) fails here, naming the file and line.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

import snapvc
from snapvc import Checkpoint
from snapvc.encoding.nodes import decode_node
from snapvc.maintenance import Keep
from snapvc.ids import ObjectId, hash_bytes
from snapvc.objects import MAP
from snapvc.diff.patch import parse_pointer
from snapvc.backends.memory.refs import MemoryRefStore
from snapvc.refs.names import check_ref_name
from snapvc.refs.revs import parse_rev
from snapvc.agent.runner import Runner, Step
from snapvc.backends.s3 import GcTiming

PACKAGE = Path(snapvc.__file__).parent

# Builtin exceptions that are the point where they are made.
DELIBERATE = {
    ("snapvc/store/faulty.py", "OSError"):
        "the fault-injecting store stands in for a failing disk: its errors are the operating system's own "
        "(EIO, ENOSPC), as the code under test meets them",
    ("snapvc/files.py", "OSError"):
        "a loop of symbolic links is the ELOOP OSError the system call would raise; write_atomically's "
        "callers handle every OSError of a file write alike",
    ("snapvc/lazy.py", "AttributeError"):
        "a package's __getattr__ (names whose module loads when first read) says a name is missing as "
        "Python's attribute protocol requires: hasattr and getattr with a default catch AttributeError",
}


def _modules() -> Iterator[tuple[str, ast.Module, dict[str, Any]]]:
    """(path from the repository root, syntax tree, globals) of every module of snapvc.
    ``__main__`` is read, not imported: importing it runs the command."""
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        name = rel.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
        namespace = {} if name == "snapvc.__main__" else vars(importlib.import_module(name))
        yield rel, ast.parse(path.read_text(), rel), namespace


def _resolve(node: ast.expr, namespace: dict[str, Any]) -> Any:
    """The object a name or dotted name refers to at module level; None when it is not
    one (a local variable, a call's result, ``self._fail``)."""
    if isinstance(node, ast.Name):
        if node.id in namespace:
            return namespace[node.id]
        return getattr(builtins, node.id, None)
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, namespace)
        return getattr(base, node.attr, None) if base is not None else None
    return None


def _is_abstract(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A body of nothing but (a docstring and) ``raise NotImplementedError``."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return len(body) == 1 and isinstance(body[0], ast.Raise)


def _caught_by_name(tree: ast.Module, name: str) -> bool:
    """Whether an ``except`` clause of the module names the class ``name``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.type is not None:
            kinds = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
            if any(isinstance(kind, ast.Name) and kind.id == name for kind in kinds):
                return True
    return False


def _outside_the_tree(rel: str, tree: ast.Module, namespace: dict[str, Any]) -> list[tuple[int, str]]:
    """(line, class name) of each exception raised or made in the module that is not a
    ``SnapvcError``: builtin ones, and snapvc's own classes outside the tree. Allowed:
    an ``AssertionError`` (an invariant, as an ``assert`` states one), a
    ``NotImplementedError`` that is a whole abstract method's body, and a private
    class of the module that an ``except`` of the same module catches (a signal
    between its functions, never seen by a caller)."""
    abstract = {id(part) for node in ast.walk(tree)
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_abstract(node)
                for part in ast.walk(node.body[-1])}
    found: set[tuple[int, str]] = set()  # a raise and the call in it are one
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            made = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        elif isinstance(node, ast.Call):
            made = node.func
        else:
            continue
        cls = _resolve(made, namespace)
        if not (isinstance(cls, type) and issubclass(cls, BaseException)) or issubclass(cls, snapvc.SnapvcError):
            continue
        if not (cls.__module__ == "builtins" or cls.__module__.startswith("snapvc")):
            continue  # another library's (click's usage errors, asyncio's cancellation): its protocol
        if cls is AssertionError or (cls is NotImplementedError and id(node) in abstract):
            continue
        if cls.__name__.startswith("_") and cls.__module__ == namespace.get("__name__") \
                and _caught_by_name(tree, cls.__name__):
            continue
        found.add((node.lineno, cls.__name__))
    return sorted(found)


def _violations() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for rel, tree, namespace in _modules():
        for line, name in _outside_the_tree(rel, tree, namespace):
            if (rel, name) not in DELIBERATE:
                found.setdefault(rel, []).append(f"{rel}:{line}: {name}")
    return found


def test_every_error_raised_on_purpose_is_a_snapvc_error() -> None:
    found = _violations()
    unexpected = [line for lines in found.values() for line in lines]
    assert not unexpected, ("errors raised outside snapvc.errors' tree (derive a class from SnapvcError, "
                            "keeping the builtin as a second base when callers catch it):\n" + "\n".join(unexpected))


def test_the_allow_list_holds_only_what_is_still_there() -> None:
    """An entry no longer raised is removed, so the list only shrinks."""
    made: set[tuple[str, str]] = set()
    for rel, tree, namespace in _modules():
        made.update((rel, name) for _, name in _outside_the_tree(rel, tree, namespace))
    gone = sorted(set(DELIBERATE) - made)
    assert not gone, f"no longer raised: remove them from DELIBERATE: {gone}"


def test_the_scan_finds_what_it_looks_for() -> None:
    """The walk itself, on a module of every case: what it must find, and what it lets be."""
    source = '''
class _Signal(Exception):
    pass

class Public(Exception):
    pass

def f(x):
    if x == 1:
        raise ValueError("bad")
    if x == 2:
        error = KeyError(x)
        raise error
    if x == 3:
        raise Public()
    if x == 4:
        raise _Signal()
    if x == 5:
        raise AssertionError("unreachable")
    if x == 6:
        raise snapvc.PathError(x, "no such key")
    try:
        raise _Signal()
    except _Signal:
        pass

class Protocol:
    def method(self):
        """Abstract."""
        raise NotImplementedError

    def other(self):
        raise NotImplementedError("a subclass says how")

def concrete():
    setup = 1
    raise NotImplementedError("not yet")
'''
    tree = ast.parse(source)
    namespace: dict[str, Any] = {"__name__": "snapvc.example", "snapvc": snapvc}
    exec(compile(tree, "snapvc/example.py", "exec"), namespace)
    namespace["Public"].__module__ = namespace["_Signal"].__module__ = "snapvc.example"
    found = _outside_the_tree("snapvc/example.py", tree, namespace)
    assert found == [(10, "ValueError"), (12, "KeyError"), (15, "Public"), (37, "NotImplementedError")]


# -- each refusal: a SnapvcError, still the builtin its callers caught, naming what was wrong --


def _noop(state: snapvc.State) -> None:
    return None


def _state() -> snapvc.State:
    return snapvc.open("memory://").state("main")


def _snapshot() -> Any:
    repo = snapvc.open("memory://")
    repo.commit({"a": 1})
    return repo.snapshot("main")


def _long_list_view() -> Any:
    """A stored list long enough to be a lazy ``SeqView`` in a snapshot."""
    repo = snapvc.open("memory://")
    repo.commit({"log": [{"n": n, "text": "x" * 40} for n in range(2000)]})
    view = repo.snapshot("main")["log"]
    assert isinstance(view, snapvc.SeqView)
    return view


def _route_nowhere() -> None:
    Runner(_state(), [Step(_noop, next=lambda state: "nowhere")]).run()


def _return_a_list() -> None:
    Runner(_state(), [Step(lambda state: [1], name="lister")]).run()


def _async_under_run() -> None:
    async def fetch(state: snapvc.State) -> None:
        return None

    Runner(_state(), [fetch]).run()


def _resume_at_a_step_gone() -> None:
    state = _state()

    def fail(state: snapvc.State) -> None:
        raise RuntimeError("the tool failed")

    with pytest.raises(RuntimeError):
        Runner(state, [_noop, Step(fail, name="analyze")]).run()
    Runner(state, [_noop, Step(_noop, name="report")]).run()


def _record(**changes: Any) -> dict[str, Any]:
    state = _state()
    state.set("a", 1)
    return {**state.snapshot().to_dict(), **changes}


def _two_commits() -> snapvc.Repository:
    repo = snapvc.open("memory://")
    repo.commit({"a": 1})
    repo.commit({"a": 2})
    return repo


def _revert_merge_by_a_third_parent() -> None:
    repo = snapvc.open("memory://")
    repo.commit({"a": 1, "b": 1})
    repo.branch("side")
    repo.commit({"a": 2, "b": 1})
    repo.commit({"a": 1, "b": 2}, branch="side")
    assert repo.merge("side", into="main").commit is not None
    repo.revert("main", mainline=3)


def _demo_over(path: Path) -> None:
    from snapvc.demo import run_demo

    path.write_bytes(b"")
    run_demo(path)


REFUSALS = {
    "a step's fn that is not callable": (lambda: Step(5), snapvc.InvalidStepError, TypeError, "callable"),  # type: ignore[arg-type]
    "a step without a name": (lambda: Step(functools.partial(_noop)), snapvc.InvalidStepError, ValueError,
                              "has no __name__"),
    "retries below 0": (lambda: Step(_noop, retries=-1), snapvc.InvalidStepError, ValueError, "retries"),
    "two steps of one name": (lambda: Runner(_state(), [_noop, _noop]), snapvc.InvalidStepError, ValueError,
                              "two steps are named '_noop'"),
    "no steps": (lambda: Runner(_state(), []), snapvc.InvalidStepError, ValueError, "at least one step"),
    "a durability mode the runner lacks": (lambda: Runner(_state(), [_noop], durability="batch"),
                                           snapvc.InvalidArgumentError, ValueError, "durability must be one of"),
    "a runner over something else": (lambda: Runner(42, [_noop]), snapvc.InvalidArgumentError, TypeError,  # type: ignore[arg-type]
                                     "State or a Thread, not a int"),
    "a route to no step": (_route_nowhere, snapvc.StepContractError, ValueError, "returned 'nowhere'"),
    "a step returning a list": (_return_a_list, snapvc.StepContractError, TypeError, "step 'lister' returned a list"),
    "an async step under run()": (_async_under_run, snapvc.InvalidStepError, TypeError, "step 'fetch' is async"),
    "a resume at a step gone": (_resume_at_a_step_gone, snapvc.ResumeError, ValueError,
                                "resumes at step 'analyze', which this runner does not have"),
    "Thread.get of nothing": (lambda: snapvc.open("memory://").thread("t").get(), snapvc.InvalidArgumentError,
                              TypeError, "exactly one of version, id, step; got none"),
    "an unknown merge strategy": (lambda: snapvc.merge_values({}, {}, {}, resolve="mine"),  # type: ignore[arg-type]
                                  snapvc.InvalidArgumentError, ValueError, "'mine'"),
    "a ref name of bytes": (lambda: check_ref_name(b"refs/heads/main"), snapvc.InvalidArgumentError,  # type: ignore[arg-type]
                            TypeError, "a ref name is a str, got bytes"),
    "a branch name of an int": (lambda: snapvc.open("memory://").branch(7), snapvc.InvalidArgumentError,  # type: ignore[arg-type]
                                TypeError, "a branch name is a str, got int"),
    "a rev of an int": (lambda: parse_rev(7), snapvc.InvalidArgumentError, TypeError,  # type: ignore[arg-type]
                        "a revision is a str, got int"),
    "a ref moved to bytes that are no id": (
        lambda: MemoryRefStore().compare_and_swap("refs/heads/main", None, b"short", "create"),  # type: ignore[arg-type]
        snapvc.InvalidArgumentError, TypeError, "must be an ObjectId or None, got b'short'"),
    "an id of 5 bytes": (lambda: ObjectId(b"short"), snapvc.InvalidObjectIdError, ValueError, "32 bytes, got 5"),
    "an id that is not hex": (lambda: ObjectId.from_hex("main"), snapvc.InvalidObjectIdError, ValueError,
                              "not a full object id: 'main'"),
    "a pointer without '/'": (lambda: parse_pointer("a/b"), snapvc.PatchError, ValueError,
                              "pointer 'a/b' must be empty or start with '/'"),
    "a pointer with a bad escape": (lambda: parse_pointer("/a~2"), snapvc.PatchError, ValueError,
                                    "bad escape in pointer token 'a~2'"),
    "a key a stored map lacks": (lambda: _snapshot()["b"], snapvc.PathError, KeyError,
                                 "state path 'b': no such key in stored map"),
    "an index past a stored list": (lambda: _long_list_view()[2000], snapvc.PathError, IndexError,
                                    "index out of range for stored list"),
    "an unknown tagged kind": (lambda: snapvc.from_jsonable({"x": {"$snapvc": "set", "items": []}}),
                               snapvc.MalformedJsonError, ValueError, "state['x']: unknown '$snapvc' kind 'set'"),
    "tagged bytes that are not base64": (lambda: snapvc.from_jsonable([{"$snapvc": "bytes", "base64": "!"}]),
                                         snapvc.MalformedJsonError, ValueError, "state[0]: a malformed"),
    "a tagged value of an unknown extension": (
        lambda: snapvc.from_jsonable({"$snapvc": "value", "msgpack": "1GMA"}),  # ExtType(99, b"\0")
        snapvc.MalformedJsonError, ValueError, "extension type 99"),
    "a checkpoint record without values": (lambda: Checkpoint.from_dict({"id": "x"}), snapvc.MalformedJsonError,
                                           ValueError, "checkpoint record: missing 'branch'"),
    "a checkpoint record of a bad time": (lambda: Checkpoint.from_dict(_record(created_at="yesterday")),
                                          snapvc.MalformedJsonError, ValueError,
                                          "'created_at' is not an ISO 8601 time"),
    "a durability mode a repository lacks": (lambda: snapvc.open("memory://", durability="fast"),
                                             snapvc.InvalidArgumentError, ValueError,
                                             "durability must be one of ['batch', 'normal', 'sync'], got 'fast'"),
    "a durability set that a repository lacks": (
        lambda: setattr(snapvc.open("memory://"), "durability", "exit"), snapvc.InvalidArgumentError, ValueError,
        "got 'exit'"),
    "S3 options for another location": (lambda: snapvc.open("memory://", region="eu-west-3"),
                                        snapvc.InvalidArgumentError, TypeError,
                                        "region: options of s3:// locations, not of 'memory://'"),
    "a gc_timing that is no GcTiming": (lambda: snapvc.open("s3://bucket/prefix", gc_timing=60),
                                        snapvc.InvalidArgumentError, TypeError,
                                        "gc_timing is a snapvc.backends.s3.GcTiming, not 60"),
    "a GcTiming of negative seconds": (lambda: GcTiming(clock_skew=-1), snapvc.InvalidArgumentError, ValueError,
                                       "GcTiming.clock_skew is a number of seconds >= 0, got -1"),
    "a negative grace": (lambda: _two_commits().gc(grace=-1), snapvc.InvalidArgumentError, ValueError,
                         "grace must not be negative, got -1"),
    "a grace of text": (lambda: _two_commits().gc(grace="1h"), snapvc.InvalidArgumentError, TypeError,  # type: ignore[arg-type]
                        "grace is a timedelta or seconds, not '1h'"),
    "a grace that is NaN": (lambda: _two_commits().gc(grace=float("nan")), snapvc.InvalidArgumentError, ValueError,
                            "grace is a number of seconds, not nan"),
    "a reflog expiry that is NaN": (lambda: _two_commits().gc(reflog_expiry=float("nan"), dry_run=True),
                                    snapvc.InvalidArgumentError, ValueError,
                                    "reflog_expiry is a number of seconds, not nan"),
    "a Keep count below 0": (lambda: Keep(last=-1), snapvc.InvalidArgumentError, ValueError,
                             "Keep.last is a count >= 0, got -1"),
    "a Keep of no rule": (lambda: Keep(), snapvc.InvalidArgumentError, ValueError,
                          "a Keep policy needs at least one of last, hourly, daily, weekly"),
    "a diff with an int": (lambda: _two_commits().diff("main", 5), snapvc.InvalidArgumentError, TypeError,  # type: ignore[arg-type]
                           "a diff compares revs or states (mappings); b is a int"),
    "a mainline past a merge's parents": (_revert_merge_by_a_third_parent, snapvc.InvalidArgumentError, ValueError,
                                          "main: mainline 3 is not a parent number of commit"),
    "a log bound of text": (lambda: list(_two_commits().log(since="yesterday")), snapvc.InvalidArgumentError,  # type: ignore[arg-type]
                            TypeError, "since= is a datetime or Unix seconds, not a str"),
    "a log bound that is NaN": (lambda: list(_two_commits().log(until=float("nan"))), snapvc.InvalidArgumentError,
                                ValueError, "until= is a datetime or Unix seconds, not nan"),
    "a log bound that is infinite": (lambda: list(_two_commits().log(since=float("-inf"))),
                                     snapvc.InvalidArgumentError, ValueError,
                                     "since= is a datetime or Unix seconds, not -inf"),
    "a type with no adapter to register": (lambda: snapvc.register_type(Path), snapvc.InvalidArgumentError, TypeError,
                                           "is not a dataclass or pydantic model"),
    "a LangGraph config without a thread": (lambda: _saver().get_tuple({"configurable": {}}),
                                            snapvc.InvalidArgumentError, ValueError, "needs a 'thread_id'"),
    "a LangGraph prune strategy it lacks": (lambda: _saver().prune(["t"], strategy="all"),
                                            snapvc.InvalidArgumentError, ValueError, "strategy must be"),
}


def _saver() -> Any:
    from snapvc.integrations.langgraph import SnapvcSaver
    return SnapvcSaver(snapvc.open("memory://"))


@pytest.mark.parametrize("case", REFUSALS)
def test_each_refusal_is_a_snapvc_error_and_still_the_builtin_it_was(case: str) -> None:
    call, kind, builtin, words = REFUSALS[case]
    with pytest.raises(kind) as raised:
        call()
    assert isinstance(raised.value, snapvc.SnapvcError) and isinstance(raised.value, builtin)
    assert words in str(raised.value)


def test_a_resume_error_names_the_checkpoint_and_the_step() -> None:
    with pytest.raises(snapvc.ResumeError) as raised:
        _resume_at_a_step_gone()
    assert raised.value.step == "analyze"
    assert raised.value.checkpoint is not None and raised.value.checkpoint[:12] in str(raised.value)


def test_the_demo_refuses_a_path_that_exists(tmp_path: Path) -> None:
    with pytest.raises(snapvc.InvalidArgumentError, match="exists; the demo needs a new repository path"):
        _demo_over(tmp_path / "taken.snapvc")


def test_a_stored_value_of_an_unknown_extension_names_its_object() -> None:
    """A code no snapvc version wrote is data of a newer one: the object holding it is
    named, as an unknown object kind is."""
    data = bytes((MAP,)) + msgpack.packb([0, 0, {"v": msgpack.ExtType(99, b"\0")}, []], use_bin_type=True)
    oid = ObjectId(hash_bytes(data))
    with pytest.raises(snapvc.FormatVersionError, match=f"object {oid}: an inline value of extension type 99"):
        decode_node(oid, data)


def test_a_stored_reference_that_is_not_an_id_is_a_corrupt_object() -> None:
    data = bytes((MAP,)) + msgpack.packb([0, 0, {"v": msgpack.ExtType(0, b"short")}, []], use_bin_type=True)
    oid = ObjectId(hash_bytes(data))
    with pytest.raises(snapvc.CorruptObjectError, match=f"object {oid} is corrupt: .*32 bytes, got 5"):
        decode_node(oid, data)
