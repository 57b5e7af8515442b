"""``snapvc mcp`` through the MCP SDK's own client: ``python -m snapvc mcp`` started as a
process, spoken to over its stdin and stdout with ``stdio_client`` and ``ClientSession``.

One read-only server on a repository with branches, metadata, a long text, a long list
and typed values; one writable server on a small repository of its own, whose writes are
read back through the library. Each server runs for the whole module, its session on a
thread of its own (an anyio blocking portal), so the tests call it as plain functions.
"""

from __future__ import annotations

import datetime as dt
import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio.from_thread
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

import snapvc
from snapvc.encoding.jsonable import from_jsonable
from snapvc.mcp.server import READ_TOOLS, WRITE_TOOLS
from snapvc.mcp.tools import MAX_VALUE_CHARS
from snapvc.objects import MAX_DEPTH
from tests.test_metadata_rules import chain, depth_of, stored_before_the_rule

pytestmark = pytest.mark.slow  # servers in processes

WHEN = dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC)
CALL_TIMEOUT = 60.0  # seconds a tool call may take before the test fails
LONG_TEXT = "".join(f"paragraph {i}. " for i in range(3000))  # about 45,000 characters


class Server:
    """A ``snapvc mcp`` process and an initialized ``ClientSession`` to it, driven from
    the test's thread. ``problems`` collects what the client could not read as the
    protocol (a stray line on the server's stdout would land there)."""

    def __init__(self, *args: str) -> None:
        self.problems: list[BaseException] = []
        self.stderr = open(Path(args[args.index("--repo") + 1]).with_suffix(".stderr"), "w+")
        self._portal_cm = anyio.from_thread.start_blocking_portal()
        self.portal = self._portal_cm.__enter__()
        self._session_cm = self.portal.wrap_async_context_manager(self._session(args))
        self.session: ClientSession = self._session_cm.__enter__()

    @asynccontextmanager
    async def _session(self, args: tuple[str, ...]) -> AsyncIterator[ClientSession]:
        params = StdioServerParameters(command=sys.executable, args=["-m", "snapvc", "mcp", *args])

        async def on_message(message: Any) -> None:
            if isinstance(message, Exception):
                self.problems.append(message)

        async with stdio_client(params, errlog=self.stderr) as (read, write), \
                ClientSession(read, write, message_handler=on_message) as session:
            await session.initialize()
            yield session

    def tools(self) -> dict[str, Any]:
        return {t.name: t for t in self.portal.call(self.session.list_tools).tools}

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> CallToolResult:
        # A server that never answers (one that failed to write its answer) fails the test instead of hanging it.
        result = self.portal.call(self.session.call_tool, name, arguments or {}, CALL_TIMEOUT)
        assert isinstance(result, CallToolResult)
        return result

    def ok(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """A call that must succeed: its structured answer, the same as its text."""
        result = self.call(name, arguments)
        assert not result.is_error, result.content
        assert result.structured_content is not None
        assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
        return result.structured_content

    def error(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        """A call that must fail as a tool error: its text."""
        result = self.call(name, arguments)
        assert result.is_error, result.structured_content
        return result.content[0].text  # type: ignore[union-attr]

    def close(self) -> None:
        try:
            self._session_cm.__exit__(None, None, None)
        finally:
            self._portal_cm.__exit__(None, None, None)
            self.stderr.close()


def _make_read_repo(path: Path) -> dict[str, str]:
    ids = {}
    with snapvc.open(path) as repo:
        state: dict[str, Any] = {"messages": ["hello"], "plan": {"next": "search"}, "notes": "short"}
        ids["one"] = repo.commit(state, message="step 1", metadata={"step": 1, "agent": "planner"}).id.hex
        state = {**state, "messages": ["hello", "searching"], "when": WHEN, "blob": b"\x00\x01"}
        ids["two"] = repo.commit(state, message="step 2", metadata={"step": 2, "agent": "researcher",
                                                                   "usage": {"tokens": 10}}).id.hex
        repo.branch("try-b", "main")
        repo.tag("v1", "main")
        state = {**state, "notes": LONG_TEXT, "items": list(range(300)), "plan": {"next": "write"}}
        ids["three"] = repo.commit(state, message="step 3", metadata={"step": 3, "agent": "planner"}).id.hex
        ids["b"] = repo.commit({**repo.checkout("try-b"), "plan": {"next": "browse"}}, branch="try-b",
                               message="try b", metadata={"step": 3, "agent": "browser"}).id.hex
    return ids


@pytest.fixture(scope="module")
def read_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    path = tmp_path_factory.mktemp("mcp") / "agent.snapvc"
    return path, _make_read_repo(path)


@pytest.fixture(scope="module")
def reader(read_repo: tuple[Path, dict[str, str]]) -> Iterator[Server]:
    server = Server("--repo", str(read_repo[0]))
    yield server
    assert not server.problems, server.problems  # nothing but the protocol came on its stdout
    server.close()


@pytest.fixture(scope="module")
def writer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    path = tmp_path_factory.mktemp("mcp-write") / "agent.snapvc"
    with snapvc.open(path) as repo:
        repo.commit({"messages": ["hi"], "plan": {"next": "search"}}, message="start", metadata={"step": 1})
    server = Server("--repo", str(path), "--write")
    yield server, path
    assert not server.problems, server.problems
    server.close()


# -- what is offered ---------------------------------------------------------------------------


def test_read_only_server_lists_only_the_read_tools(reader: Server) -> None:
    tools = reader.tools()
    assert set(tools) == set(READ_TOOLS)
    for tool in tools.values():
        assert tool.description and len(tool.description) > 40, tool.name  # what a model picks by
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
    log = tools["log"].input_schema["properties"]
    assert {"rev", "where", "path", "since", "until", "limit", "offset"} <= set(log)
    assert all(prop.get("description") for prop in log.values())
    assert log["limit"]["maximum"] == 500 and log["limit"]["minimum"] == 1


def test_write_tools_are_not_callable_without_write(reader: Server, read_repo: tuple[Path, dict[str, str]]) -> None:
    for name, arguments in (("commit", {"message": "x", "set": {"a": 1}}), ("branch", {"name": "x"}),
                            ("reset", {"branch": "main", "to": "main~1"})):
        assert name in reader.error(name, arguments)
    with snapvc.open(read_repo[0]) as repo:
        assert set(repo.branches()) == {"main", "try-b"}
        assert repo.get_commit(repo.resolve("main")).message == "step 3"


def test_writable_server_lists_the_write_tools_too(writer: tuple[Server, Path]) -> None:
    tools = writer[0].tools()
    assert set(tools) == set(READ_TOOLS) | set(WRITE_TOOLS)
    assert tools["reset"].annotations.destructive_hint is True
    assert tools["commit"].annotations.read_only_hint is False
    assert {"message", "set", "delete", "state", "branch", "metadata", "expected_tip"} <= \
        set(tools["commit"].input_schema["properties"])


# -- reading -----------------------------------------------------------------------------------


def test_refs(reader: Server, read_repo: tuple[Path, dict[str, str]]) -> None:
    ids = read_repo[1]
    found = reader.ok("refs")
    assert found["head"] == {"branch": "main", "commit": ids["three"]}
    assert [(b["name"], b["commit"], b["message"]) for b in found["branches"]] == \
        [("main", ids["three"], "step 3"), ("try-b", ids["b"], "try b")]
    assert [(t["name"], t["commit"]) for t in found["tags"]] == [("v1", ids["two"])]


def test_log_filters_and_pages(reader: Server, read_repo: tuple[Path, dict[str, str]]) -> None:
    ids = read_repo[1]
    commits = reader.ok("log")["commits"]
    assert [c["id"] for c in commits] == [ids["three"], ids["two"], ids["one"]]
    assert commits[0]["refs"] == ["HEAD -> main"] and commits[1]["refs"] == ["tag: v1"]
    assert commits[1]["metadata"] == {"step": 2, "agent": "researcher", "usage": {"tokens": 10}}
    assert [c["id"] for c in reader.ok("log", {"where": {"agent": "planner"}})["commits"]] == [ids["three"], ids["one"]]
    assert [c["id"] for c in reader.ok("log", {"where": {"usage.tokens": 10}})["commits"]] == [ids["two"]]
    assert reader.ok("log", {"where": {"step": "2"}})["commits"] == []  # types must match, as repo.log's where
    assert [c["id"] for c in reader.ok("log", {"rev": "try-b", "path": "plan.next"})["commits"]] == [ids["b"], ids["one"]]
    first = reader.ok("log", {"limit": 2})
    assert [c["id"] for c in first["commits"]] == [ids["three"], ids["two"]] and first["next_offset"] == 2
    rest = reader.ok("log", {"limit": 2, "offset": first["next_offset"]})
    assert [c["id"] for c in rest["commits"]] == [ids["one"]] and rest["next_offset"] is None
    assert reader.ok("log", {"since": "2999-01-01"})["commits"] == []


def test_show(reader: Server, read_repo: tuple[Path, dict[str, str]]) -> None:
    ids = read_repo[1]
    shown = reader.ok("show", {"rev": "main~1"})
    assert shown["id"] == ids["two"] and shown["parents"] == [ids["one"]] and shown["message"] == "step 2"
    assert shown["metadata"]["agent"] == "researcher" and shown["refs"] == ["tag: v1"]
    assert shown["counts"] == {"added": 3, "removed": 0, "modified": 0}
    assert sorted(c["path"] for c in shown["changes"]) == ["blob", "messages.1", "when"]
    assert "old" not in shown["changes"][0] and shown["changes_total"] == 3
    root = reader.ok("show", {"rev": ids["one"][:10]})
    assert root["parents"] == [] and root["counts"]["added"] == 3


def test_diff_cuts_long_values_to_a_preview(reader: Server, read_repo: tuple[Path, dict[str, str]]) -> None:
    ids = read_repo[1]
    found = reader.ok("diff", {"a": "main~1", "b": "main"})
    assert found["a"] == ids["two"] and found["b"] == ids["three"]
    changes = {c["path"]: c for c in found["changes"]}
    assert changes["plan.next"] == {"path": "plan.next", "steps": ["plan", "next"], "kind": "modified",
                                    "old": "search", "old_size": 8, "new": "write", "new_size": 7}
    notes = changes["notes"]
    assert notes["old"] == "short"
    assert notes["new"]["$truncated"] is True and notes["new"]["size"] == notes["new_size"] == len(LONG_TEXT) + 2
    assert notes["new"]["preview"].startswith('"paragraph 0. ') and len(notes["new"]["preview"]) == 500
    assert changes["items"]["kind"] == "added" and changes["items"]["new"] == list(range(300))
    # One path only, and one commit against its first parent.
    assert [c["path"] for c in reader.ok("diff", {"a": "main~1", "b": "main", "path": "plan"})["changes"]] == ["plan.next"]
    own = reader.ok("diff", {"a": "try-b"})
    assert own["a"] == ids["two"] and [c["path"] for c in own["changes"]] == ["plan.next"]
    paged = reader.ok("diff", {"a": "main~1", "b": "main", "limit": 1})
    assert len(paged["changes"]) == 1 and paged["next_offset"] == 1 and paged["changes_total"] == len(changes)


def test_diff_summarises_an_array_and_never_sends_its_values(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy", reason="the numpy extra is in the test extra")
    path = tmp_path / "agent.snapvc"
    with snapvc.open(path) as repo:
        embeddings = np.zeros((2000, 64), dtype="<f4")
        repo.commit({"emb": embeddings}, message="one")
        grown = np.vstack([embeddings, np.ones((3, 64), dtype="<f4")])
        grown[5] = 2.0
        repo.commit({"emb": grown}, message="two")
    server = Server("--repo", str(path))
    try:
        (change,) = server.ok("diff", {"a": "main~1", "b": "main"})["changes"]
    finally:
        server.close()
    assert change["summary"] == "array <f4 (2000, 64) -> (2003, 64): 3 rows appended, 1 row changed"
    assert change["old"] == {"$snapvc": "ndarray", "dtype": "<f4", "shape": [2000, 64], "order": "C", "bytes": 512000}
    assert change["new"]["shape"] == [2003, 64] and change["new_size"] == 2003 * 64 * 4
    assert "values" not in change["new"] and "base64" not in change["new"]


def test_checkout_gives_small_values_whole_and_large_ones_in_pages(reader: Server,
                                                                   read_repo: tuple[Path, dict[str, str]]) -> None:
    ids = read_repo[1]
    small = reader.ok("checkout", {"rev": "v1"})
    assert small["commit"] == ids["two"] and small["kind"] == "map"
    assert from_jsonable(small["value"]) == {"messages": ["hello", "searching"], "plan": {"next": "search"},
                                             "notes": "short", "when": WHEN, "blob": b"\x00\x01"}
    assert small["value"]["when"] == {"$snapvc": "datetime", "value": "2024-05-06T07:08:09+00:00"}
    assert reader.ok("checkout", {"path": "plan.next"})["value"] == "write"
    assert reader.ok("checkout", {"path": "/messages/1", "rev": "v1"})["value"] == "searching"
    # The whole state at main holds a long text and a long list: a page of its children.
    top = reader.ok("checkout", {})
    assert "value" not in top and top["size"] == 6 and top["next_offset"] is None
    children = {c["key"]: c for c in top["children"]}
    assert children["notes"]["kind"] == "value" and children["notes"]["size"] == len(LONG_TEXT)
    assert "value" not in children["notes"] and children["notes"]["preview"].startswith('"paragraph 0.')
    assert children["plan"]["value"] == {"next": "write"}
    # A long list, a page at a time.
    items = reader.ok("checkout", {"path": "items", "limit": 100, "offset": 100})
    assert [c["value"] for c in items["children"]] == list(range(100, 200)) and items["next_offset"] == 200
    # A long text, a slice at a time.
    notes = reader.ok("checkout", {"path": "notes"})
    assert notes["value"] == LONG_TEXT[:MAX_VALUE_CHARS] and notes["next_offset"] == MAX_VALUE_CHARS
    tail = reader.ok("checkout", {"path": "notes", "offset": 40_000})
    assert tail["value"] == LONG_TEXT[40_000:] and tail["next_offset"] is None


def test_history_of_a_path(reader: Server, read_repo: tuple[Path, dict[str, str]]) -> None:
    ids = read_repo[1]
    found = reader.ok("history", {"path": "plan.next"})
    assert [(e["commit"]["id"], e["kind"], e.get("value"), e.get("old")) for e in found["entries"]] == \
        [(ids["three"], "modified", "write", "search"), (ids["one"], "added", "search", None)]
    oldest = reader.ok("history", {"path": "messages", "oldest_first": True, "limit": 1})
    assert oldest["entries"][0]["commit"]["id"] == ids["one"] and oldest["entries"][0]["value"] == ["hello"]
    assert oldest["next_offset"] == 1


def test_reflog(reader: Server, read_repo: tuple[Path, dict[str, str]]) -> None:
    ids = read_repo[1]
    entries = reader.ok("reflog", {"ref": "try-b"})["entries"]
    assert [(e["old"], e["new"]) for e in entries] == [(ids["two"], ids["b"]), (None, ids["two"])]
    assert entries[0]["reason"] == "commit: try b" and entries[1]["reason"].startswith("branch: created from main")


# -- bad input: a tool error naming what was wrong, and the server goes on ---------------------


def test_bad_input_is_a_tool_error_naming_it(reader: Server) -> None:
    message = reader.error("show", {"rev": "no-such-branch"})
    assert "UnknownRevisionError" in message and "no-such-branch" in message
    message = reader.error("checkout", {"path": "plan.missing"})
    assert "PathError" in message and "'missing'" in message and "plan" in message
    message = reader.error("checkout", {"path": "items.900"})
    assert "PathError" in message and "900" in message and "300" in message
    assert "PathError" in reader.error("history", {"path": "a..b"})
    assert "InvalidRevisionError" in reader.error("diff", {"a": "main~~x", "b": "main"})
    assert "RefNotFoundError" in reader.error("reflog", {"ref": "nowhere"})
    assert "InvalidArgumentError" in reader.error("log", {"since": "yesterday-ish"})
    assert "limit" in reader.error("log", {"limit": 0})  # the input schema's bounds, checked by the SDK
    assert "a" in reader.error("diff", {})  # a required argument missing
    assert "no_such_tool" in reader.error("no_such_tool")
    assert reader.ok("refs")["head"]["branch"] == "main"  # the server lives on


# -- writing -----------------------------------------------------------------------------------


def test_commit_with_values_set_is_read_back_by_the_library(writer: tuple[Server, Path]) -> None:
    server, path = writer
    with snapvc.open(path) as repo:
        before = repo.resolve("main")
    made = server.ok("commit", {"message": "plan changed", "metadata": {"step": 2, "agent": "planner"},
                                "set": {"plan.next": "write", "plan.when": {"$snapvc": "datetime",
                                                                           "value": "2024-05-06T07:08:09+00:00"},
                                        "/messages/0": "hello"},
                                "delete": []})
    assert made["branch"] == "main" and made["previous"] == before.hex
    assert made["commit"]["parents"] == [before.hex] and made["commit"]["metadata"] == {"step": 2, "agent": "planner"}
    with snapvc.open(path) as repo:
        assert repo.resolve("main").hex == made["commit"]["id"]
        assert repo.checkout("main") == {"messages": ["hello"], "plan": {"next": "write", "when": WHEN}}
        assert repo.reflog("main", 1)[0].reason == "commit: plan changed"
        assert repo.reflog("main", 1)[0].new.hex == made["commit"]["id"]


def test_commit_whole_state_on_a_new_branch_and_delete(writer: tuple[Server, Path]) -> None:
    server, path = writer
    made = server.ok("commit", {"message": "fresh", "state": {"only": [1, 2]}, "branch": "scratch"})
    assert made["previous"] is None and made["commit"]["parents"] == []
    trimmed = server.ok("commit", {"message": "trim", "branch": "scratch", "delete": ["only.0"]})
    with snapvc.open(path) as repo:
        assert repo.checkout("scratch") == {"only": [2]}
        assert [e.reason for e in repo.reflog("scratch")] == ["commit: trim", "commit: fresh"]
        assert repo.resolve("scratch").hex == trimmed["commit"]["id"]


def test_commit_refuses_what_it_cannot_do(writer: tuple[Server, Path]) -> None:
    server, path = writer
    with snapvc.open(path) as repo:
        tip = repo.resolve("main")
    assert "nothing to commit" in server.error("commit", {"message": "empty"})
    assert "not both" in server.error("commit", {"message": "x", "state": {"a": 1}, "set": {"b": 2}})
    assert "PathError" in server.error("commit", {"message": "x", "delete": ["plan.nothing"]})
    assert "UnsupportedValueError" in server.error("commit", {"message": "x", "set": {"a": {"$snapvc": "no-such"}}}) \
        or "MalformedJsonError" in server.error("commit", {"message": "x", "set": {"a": {"$snapvc": "no-such"}}})
    stale = server.error("commit", {"message": "x", "set": {"a": 1}, "expected_tip": "main~1"})
    assert "RefConflictError" in stale and "refs/heads/main" in stale
    with snapvc.open(path) as repo:
        assert repo.resolve("main") == tip  # nothing was committed


def test_branch_and_reset_land_in_the_reflog(writer: tuple[Server, Path]) -> None:
    server, path = writer
    forked = server.ok("branch", {"name": "experiment", "at": "main~1"})
    with snapvc.open(path) as repo:
        assert forked["commit"] == repo.resolve("main~1").hex and forked["previous"] is None
        assert repo.reflog("experiment", 1)[0].reason == "branch: created from main~1"
    assert "RefExistsError" in server.error("branch", {"name": "experiment"})
    assert "InvalidRefNameError" in server.error("branch", {"name": "bad name"})
    moved = server.ok("branch", {"name": "experiment", "at": "main", "force": True})
    assert moved["previous"] == forked["commit"]
    reset = server.ok("reset", {"branch": "experiment", "to": "experiment@{1}"})
    assert reset["commit"] == forked["commit"] and reset["previous"] == moved["commit"]
    log = server.ok("reflog", {"ref": "experiment"})["entries"]
    assert [e["reason"] for e in log] == ["reset: moving to experiment@{1}", "branch: created from main",
                                          "branch: created from main~1"]
    assert "RefNotFoundError" in server.error("reset", {"branch": "nowhere", "to": "main"})
    with snapvc.open(path) as repo:
        assert repo.resolve("experiment").hex == forked["commit"]


# -- the command -------------------------------------------------------------------------------


def test_missing_repository_and_missing_extra(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "snapvc", "mcp", "--repo", str(tmp_path / "nope.snapvc")],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    assert done.returncode == 2 and "nope.snapvc" in done.stderr and done.stdout == ""
    # As if the mcp package were not installed (None in sys.modules makes its import fail).
    code = ("import sys; sys.modules['mcp'] = None; sys.argv = ['snapvc', 'mcp']; "
            "from snapvc.cli.main import main; main()")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=60)
    assert done.returncode == 2 and "needs the mcp extra" in done.stderr and done.stdout == ""
    done = subprocess.run([sys.executable, "-m", "snapvc", "mcp", "--port", "9999"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)
    assert done.returncode == 2 and "--http" in done.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening_addresses(pid: int, port: int) -> set[str]:
    """The local addresses on which process ``pid`` listens on TCP ``port``, as Linux lists
    them in /proc/net/tcp and tcp6 (hexadecimal, in the kernel's byte order), found by
    the inodes of the sockets the process holds."""
    import ipaddress

    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if fields[3] == "0A" and int(hex_port, 16) == port and fields[9] in inodes:  # 0A: LISTEN
                raw = bytes.fromhex(address)
                # each 32-bit word is in host (little-endian) order
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                found.add(str(ipaddress.ip_address(raw)))
    return found


def test_http_transport_on_localhost(read_repo: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    port = _free_port()
    with open(tmp_path / "stderr", "w+") as errors:
        proc = subprocess.Popen([sys.executable, "-m", "snapvc", "mcp", "--repo", str(read_repo[0]), "--http",
                                 "--port", str(port)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=errors, text=True)
        try:
            url = f"http://127.0.0.1:{port}/mcp"

            async def talk() -> tuple[set[str], dict[str, Any] | None]:
                async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
                    await session.initialize()
                    tools = {t.name for t in (await session.list_tools()).tools}
                    result = await session.call_tool("refs", {})
                    return tools, result.structured_content  # type: ignore[union-attr]

            deadline = time.monotonic() + 30
            while True:  # until it listens
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    assert proc.poll() is None and time.monotonic() < deadline, errors.seek(0) or errors.read()
                    time.sleep(0.1)
            # This machine only: it listens on the loopback address and no other.
            if sys.platform == "linux":
                assert _listening_addresses(proc.pid, port) == {"127.0.0.1"}
            tools, refs = anyio.run(talk)
            assert tools == set(READ_TOOLS)
            assert refs is not None and refs["head"]["commit"] == read_repo[1]["three"]
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            assert proc.stdout is not None
            assert proc.stdout.read() == ""  # the address goes to stderr, as every other word
            proc.stdout.close()


def test_paths_given_back_are_paths_the_tools_take(tmp_path: Path) -> None:
    from snapvc.mcp.tools import parse_steps, path_text

    for steps in (("messages", 3, "content"), ("a.b", 0), ("x/y", "~"), ("k", ""), ()):
        text = path_text(steps)
        assert parse_steps(text) == tuple(str(s) for s in steps), text
    assert path_text(("messages", 3, "content")) == "messages.3.content"


# -- metadata stored before the rules on metadata ---------------------------------------------


def test_metadata_stored_too_deep_or_too_large_is_shown_cut_by_every_tool(tmp_path: Path) -> None:
    """A commit whose metadata nests 250 levels (what ``commit`` took before metadata
    had ``MAX_DEPTH``) and holds a 900,000-character value: log, show and history answer,
    the metadata cut and its size stated, instead of failing (orjson writes at most 255
    levels)."""
    path = tmp_path / "agent.snapvc"
    with snapvc.open(path) as repo:
        repo.commit({"a": 0}, message="first", metadata={"step": 1})
        stored_before_the_rule(repo, {"step": 2, "deep": chain(250), "note": "n" * 900_000}, state={"a": 1})
    server = Server("--repo", str(path))
    try:
        answers = [server.ok("log")["commits"][0], server.ok("show", {"rev": "main"}),
                   server.ok("history", {"path": "a"})["entries"][0]["commit"]]
        for tip in answers:
            metadata = tip["metadata"]
            assert metadata["step"] == 2 and depth_of(metadata) <= MAX_DEPTH
            assert "nested deeper than 100 containers" in json.dumps(metadata["deep"])
            assert metadata["note"]["$truncated"] is True and metadata["note"]["size"] == 900_002
            assert len(json.dumps(metadata)) < 2 * MAX_VALUE_CHARS
        assert not server.problems, server.problems
    finally:
        server.close()
