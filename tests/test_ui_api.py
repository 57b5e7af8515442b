"""``snapvc ui``'s JSON API, through the real server: ``python -m snapvc ui --port 0``
started as a process, asked over HTTP, stopped by its process id.

One read-only server on a repository with branches, merges, a second root, long
strings, typed values and LangGraph threads (``SnapvcSaver``); one writable server on a
small repository of its own for tag, branch, reset and undo.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import select
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

import snapvc
from snapvc.encoding.jsonable import from_jsonable
from snapvc.integrations.langgraph import SnapvcSaver

pytestmark = pytest.mark.slow  # servers in processes


@dataclasses.dataclass
class Plan:
    goal: str
    steps: int


LONG_OLD = "\n".join(f"line {i}" for i in range(40))
LONG_NEW = LONG_OLD.replace("line 20", "line twenty")
WHEN = dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC)


class Chat(TypedDict):
    messages: Annotated[list, add_messages]


def _reply(state: Chat) -> dict[str, Any]:
    n = len(state["messages"])
    return {"messages": [AIMessage(content=f"reply {n}", id=f"ai-{n}")]}


# -- servers ----------------------------------------------------------------------------------


def _start(repo: Path, tmp: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    """A server of ``repo``, and its address (the first line it prints)."""
    errors = (tmp / f"{repo.stem}-server.err").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "snapvc", "ui", "--repo", str(repo), "--port", "0", "--no-browser",
                             *extra], stdout=subprocess.PIPE, stderr=errors, text=True)
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    url = proc.stdout.readline().strip() if ready and proc.stdout else ""
    if not url.startswith("http://127.0.0.1:"):
        _stop(proc)
        pytest.fail(f"the server printed {url!r} instead of its address; stderr: "
                    f"{(tmp / f'{repo.stem}-server.err').read_text()}")
    return proc, url


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()  # by its process id: uvicorn shuts down, the repository closes
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=20)
    if proc.stdout:
        proc.stdout.close()


def _request(url: str, path: str, params: dict[str, Any] | list[tuple[str, str]] | None = None, *,
             body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """(status, JSON answer) of a GET, or of a POST when ``body`` is given."""
    query = "?" + urllib.parse.urlencode(params) if params else ""
    data = None if body is None else json.dumps(body).encode()
    sent = {"Content-Type": "application/json"} if body is not None else {}
    sent.update(headers or {})
    request = urllib.request.Request(url.rstrip("/") + path + query, data=data, headers=sent,
                                     method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _get(url: str, path: str, params: Any = None) -> Any:
    status, found = _request(url, path, params)
    assert status == 200, found
    return found


# -- the repositories -------------------------------------------------------------------------


def _history(repo: snapvc.Repository) -> None:
    """Branches, two merges, a second root, a tag: a graph of several lanes."""
    state: dict[str, Any] = {"step": 0, "messages": ["hi"], "doc": LONG_OLD, "plan": Plan("read", 1), "when": WHEN}
    repo.commit(state, message="c1")
    repo.branch("b")
    for i in range(2, 5):
        state["step"] = i
        repo.commit(state, message=f"c{i}")
        if i == 2:
            repo.branch("a")
    repo.commit({**state, "a": 1}, branch="a", message="a1")
    repo.branch("d", "a")
    repo.commit({**state, "a": 2}, branch="a", message="a2")
    repo.commit({**state, "b": 1}, branch="b", message="b1")
    repo.tag("v1", "b")
    repo.commit({**state, "d": 1}, branch="d", message="d1")
    repo.merge("a", message="merge a")
    state = repo.checkout("main")
    state["messages"] = [*state["messages"], "there", "again"]
    state["doc"] = LONG_NEW
    state["plan"] = Plan("write", 2)
    state["when"] = WHEN + dt.timedelta(days=1)
    repo.commit(state, message="grow")
    repo.merge("b", message="merge b")
    lonely = repo.commit_tree({"other": True}, message="other root")  # a second root...
    repo.branch("lonely", lonely.id)  # ... on a branch of its own


def _threads(path: Path) -> None:
    """Two LangGraph threads of two users, and a fork of one (as tests/test_langgraph_saver.py makes them)."""
    with SnapvcSaver(path) as saver:
        builder = StateGraph(Chat)
        builder.add_node("reply", _reply)
        builder.add_edge(START, "reply")
        builder.add_edge("reply", END)
        graph = builder.compile(checkpointer=saver)
        for thread, user in (("t-ann", "ann"), ("t-bob", "bob")):
            config = {"configurable": {"thread_id": thread}, "metadata": {"user": user}}
            graph.invoke({"messages": [HumanMessage(content="one", id="h0")]}, config)
            graph.invoke({"messages": [HumanMessage(content="two", id="h2")]}, config)
        config = {"configurable": {"thread_id": "t-ann"}, "metadata": {"user": "ann"}}
        first = next(s for s in graph.get_state_history(config) if s.metadata["step"] == 1)
        forked = graph.update_state(first.config, {"messages": [HumanMessage(content="fork", id="h9")]})
        graph.invoke({"messages": [HumanMessage(content="three", id="h3")]}, {**forked, "metadata": {"user": "ann"}})


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    tmp = tmp_path_factory.mktemp("ui")
    path = tmp / "view.snapvc"
    _threads(path)
    with snapvc.open(path) as repo:
        _history(repo)
    proc, url = _start(path, tmp)
    try:
        yield url, path
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def writable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    tmp = tmp_path_factory.mktemp("ui-write")
    path = tmp / "write.snapvc"
    with snapvc.open(path) as repo:
        repo.commit({"n": 1}, message="one")
        repo.commit({"n": 2}, message="two")
        repo.commit({"n": 3}, message="three")
    proc, url = _start(path, tmp, "--write")
    try:
        yield url, path
    finally:
        _stop(proc)


# -- reading ----------------------------------------------------------------------------------


def test_repo_names_head_branches_and_tags(served: tuple[str, Path]) -> None:
    url, path = served
    found = _get(url, "/api/repo")
    with snapvc.open(path, create=False) as repo:
        assert found["head"] == {"branch": "main", "commit": repo.resolve("main").hex}
        assert {b["name"]: b["commit"] for b in found["branches"]} == {n: o.hex for n, o in repo.branches().items()}
        assert found["tags"] == [{"name": "v1", "commit": repo.resolve("v1").hex}]
    assert found["writable"] is False


def _all_rows(url: str, limit: int) -> tuple[list[dict[str, Any]], int]:
    rows: list[dict[str, Any]] = []
    cursor, pages = None, 0
    while True:
        page = _get(url, "/api/graph", {"limit": limit, **({"cursor": cursor} if cursor else {})})
        assert len(page["rows"]) <= limit
        rows += page["rows"]
        pages += 1
        cursor = page["cursor"]
        if cursor is None:
            return rows, pages


def _check_lanes(rows: list[dict[str, Any]]) -> None:
    """Every edge of a row leads into the next row: the lines passing through go on
    (straight, or bending into the commit's first-parent line when they await that
    parent), each parent's line ends where the parent is drawn, and no line is lost or
    left open."""
    awaited: dict[int, str] = {}  # column -> the commit the line in it leads to
    for row in rows:
        lane, edges = row["lane"], [tuple(e) for e in row["edges"]]
        if lane in awaited:
            assert awaited[lane] == row["id"], row["short"]
        else:  # a tip: no line led to it
            assert row["id"] not in awaited.values(), row["short"]
        through = [e for e in edges if e[0] != lane]
        own = [e for e in edges if e[0] == lane]
        for i, j in through:  # a bend: the line awaited the first parent, now drawn under the commit
            assert i == j or (row["parents"] and awaited[i] == row["parents"][0] and own and own[0][1] == j), \
                row["short"]
        assert {i for i, _ in through} == set(awaited) - {lane}, row["short"]
        assert len(own) == len(row["parents"]), row["short"]
        following = {j: awaited[i] for i, j in through if i == j}
        for (_, column), parent in zip(own, row["parents"]):
            if column in following:  # joins the line already leading to that parent
                assert following[column] == parent, row["short"]
            following[column] = parent
        assert len(set(following.values())) == len(following)
        assert row["width"] > max([lane, *(max(e) for e in edges)])
        awaited = following
    assert awaited == {}


def test_a_branch_line_stays_straight_through_the_fork_point(tmp_path: Path) -> None:
    """The fork point is drawn in the lane of the branch drawn left of the other (main,
    drawn first), whose line goes on straight; the side branch's line bends into it."""
    from snapvc.ui.graph import graph_page

    with snapvc.open(tmp_path / "r.snapvc") as repo:
        base = repo.commit({"n": 0}, message="base")
        fork = repo.commit({"n": 1}, message="fork point")
        repo.branch("side", fork.id)
        first = repo.commit({"n": 2}, message="on main")
        side = repo.commit({"n": 2, "side": True}, branch="side", message="on side")  # drawn before "on main"
        tip = repo.commit({"n": 3}, message="main again")
        rows = graph_page(repo, [tip.id, side.id], 50).rows
        lanes = {row.commit.message: row.lane for row in rows}
        assert [row.commit.id for row in rows] == [tip.id, side.id, first.id, fork.id, base.id]
        assert lanes == {"main again": 0, "on side": 1, "on main": 0, "fork point": 0, "base": 0}
        bends = [row for row in rows if row.commit.id == first.id][0].edges
        assert (1, 0) in bends and (0, 0) in bends
        assert [row.width for row in rows][-2:] == [1, 1]


def test_graph_pages_give_every_commit_once_children_first_lanes_continuing(served: tuple[str, Path]) -> None:
    url, path = served
    whole, pages = _all_rows(url, 500)
    assert pages == 1
    with snapvc.open(path, create=False) as repo:
        tips = [*repo.branches().values(), *repo.tags().values()]
        expected = [c.id.hex for c in repo.log(tips)]
    ids = [r["id"] for r in whole]
    assert ids == expected and len(set(ids)) == len(ids)
    position = {oid: i for i, oid in enumerate(ids)}
    assert all(position[r["id"]] < position[p] for r in whole for p in r["parents"])
    assert any(r["width"] >= 3 for r in whole) and sum(len(r["parents"]) == 2 for r in whole) >= 2
    _check_lanes(whole)
    for limit in (1, 3, 7):  # pages of any size give the same rows and the same layout
        paged, pages = _all_rows(url, limit)
        assert pages == -(-len(whole) // limit)
        assert paged == whole
    merge = next(r for r in whole if r["message"] == "merge b")
    assert merge["refs"] == ["HEAD -> main"] and next(r for r in whole if r["message"] == "b1")["refs"] == ["b", "tag: v1"]


def test_graph_refuses_a_cursor_it_did_not_give(served: tuple[str, Path]) -> None:
    url, _ = served
    status, found = _request(url, "/api/graph", {"cursor": "not-a-cursor"})
    assert status == 400 and found["type"] == "InvalidArgumentError" and "'not-a-cursor'" in found["error"]
    status, found = _request(url, "/api/graph", {"limit": "0"})
    assert status == 400 and "limit=0" in found["error"]


def test_commit_changes_against_its_first_parent(served: tuple[str, Path]) -> None:
    url, path = served
    found = _get(url, "/api/commit/main~1")
    assert found["message"] == "grow" and found["short"] == found["id"][:12]
    changes = {c["path_text"]: c for c in found["changes"]}
    assert set(changes) == {"messages", "doc", "plan", "when"}
    messages = changes["messages"]  # two messages appended: the items, not the whole list
    assert messages["kind"] == "changed" and messages["old"] is None
    assert messages["items"] == {"added": [{"index": 1, "value": "there"}, {"index": 2, "value": "again"}],
                                 "removed": []}
    assert (messages["old_size"], messages["new_size"]) == (1, 3)
    doc = changes["doc"]  # a long string: a line diff
    assert "-line 20" in doc["text_diff"] and "+line twenty" in doc["text_diff"]
    assert any(line.startswith("@@") for line in doc["text_diff"]) and doc["new"] == LONG_NEW
    plan = changes["plan"]  # a typed value the server has no class for, as JSON
    assert plan["old"]["$snapvc"] == "typed" and plan["old"]["fields"] == {"goal": "read", "steps": 1}
    assert plan["new"]["fields"] == {"goal": "write", "steps": 2} and plan["text_diff"] is None
    assert from_jsonable(changes["when"]["new"]) == WHEN + dt.timedelta(days=1)
    root = _get(url, "/api/commit/main~6")  # c1, a root commit: against an empty state
    assert root["parents"] == [] and {c["path_text"] for c in root["changes"]} == {"step", "messages", "doc", "plan",
                                                                                    "when"}
    assert all(c["kind"] == "added" for c in root["changes"])


def test_diff_of_two_revs(served: tuple[str, Path]) -> None:
    url, path = served
    found = _get(url, "/api/diff", {"a": "v1", "b": "d"})
    with snapvc.open(path, create=False) as repo:
        assert (found["a"], found["b"]) == (repo.resolve("v1").hex, repo.resolve("d").hex)
    assert {(c["path_text"], c["kind"]) for c in found["changes"]} == {("b", "removed"),
                                                                        ("d", "added")}


def test_a_value_too_long_to_show_is_cut_to_a_preview(served: tuple[str, Path], tmp_path: Path) -> None:
    from snapvc.ui.api import MAX_VALUE_CHARS, change_json
    from snapvc.diff.changes import Change

    shown = change_json(Change(("big",), "added", None, "x" * (MAX_VALUE_CHARS + 10)))
    assert shown["new"]["$truncated"] is True and shown["new"]["size"] == MAX_VALUE_CHARS + 12
    assert len(shown["new"]["preview"]) == 500 and shown["new_size"] == MAX_VALUE_CHARS + 12


def test_state_tree_opens_one_path_at_a_time_children_paged(served: tuple[str, Path]) -> None:
    url, _ = served
    root = _get(url, "/api/state/main", {"path": "[]"})
    assert root["kind"] == "map" and root["size"] == 7
    assert [c["key"] for c in root["children"]] == sorted(["a", "b", "doc", "messages", "plan", "step", "when"])
    messages = next(c for c in root["children"] if c["key"] == "messages")
    assert messages == {"key": "messages", "kind": "list", "size": 3, "preview": '["hi","there","again"]'}
    page = _get(url, "/api/state/main", {"path": '["messages"]', "offset": 1, "limit": 1})
    assert page["size"] == 3 and page["children"] == [{"key": 1, "kind": "value", "size": 5, "preview": '"there"'}]
    keys = _get(url, "/api/state/main", {"path": "[]", "offset": 2, "limit": 2})
    assert [c["key"] for c in keys["children"]] == ["doc", "messages"]
    leaf = _get(url, "/api/state/main", {"path": '["messages", 2]'})
    assert leaf == {"path": ["messages", 2], "kind": "value", "size": 5, "value": "again"}
    assert _get(url, "/api/state/v1", {"path": '["step"]'})["value"] == 4


def test_history_of_a_path(served: tuple[str, Path]) -> None:
    url, _ = served
    found = _get(url, "/api/history", {"path": '["messages"]', "rev": "main"})
    assert [(e["message"], e["kind"], e["value"]) for e in found["entries"]] == [
        ("grow", "changed", ["hi", "there", "again"]), ("c1", "added", ["hi"])]
    assert _get(url, "/api/history", {"path": '["a"]', "rev": "main", "limit": 1})["entries"][0]["message"] == "a2"


def test_threads_filtered_by_metadata_with_their_forks(served: tuple[str, Path]) -> None:
    url, _ = served
    every = {t["thread_id"]: t for t in _get(url, "/api/threads")["threads"]}
    assert {"t-ann", "t-bob", "main", "a", "b", "d"} <= set(every)
    ann = _get(url, "/api/threads", [("where", "user=ann")])["threads"]
    assert [t["thread_id"] for t in ann] == ["t-ann"]
    (fork,) = ann[0]["forks"]
    assert fork.startswith("t-ann/+fork/")
    assert ann[0]["latest"]["metadata"]["user"] == "ann" and ann[0]["commits"] >= 5
    assert every["t-bob"]["forks"] == []
    both = _get(url, "/api/threads", [("where", "source=loop")])["threads"]
    assert {t["thread_id"] for t in both} == {"t-ann", "t-bob"}
    assert _get(url, "/api/threads", [("where", "user=ann"), ("where", "source=input")])["threads"] == []


def test_reflog_of_a_branch(served: tuple[str, Path]) -> None:
    url, path = served
    found = _get(url, "/api/reflog", {"ref": "a", "limit": 2})
    assert found["ref"] == "refs/heads/a" and [e["reason"] for e in found["entries"]] == ["commit: a2", "commit: a1"]


# -- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "params", "status", "named"), [
    ("/api/commit/nosuch", None, 404, "nosuch"),
    ("/api/commit/main~99", None, 404, "main~99"),
    ("/api/state/nosuch", None, 404, "nosuch"),
    ("/api/diff", {"a": "main", "b": "nosuch"}, 404, "nosuch"),
    ("/api/diff", {"a": "main"}, 400, "'b'"),
    ("/api/state/main", {"path": "[messages"}, 400, "[messages"),
    ("/api/state/main", {"path": '{"a": 1}'}, 400, '{"a": 1}'),
    ("/api/state/main", {"path": '["nosuch", 1]'}, 404, "nosuch"),
    ("/api/state/main", {"path": '["messages", 9]'}, 404, "messages[9]"),
    ("/api/state/main", {"path": '["step", "x"]'}, 404, "step"),
    ("/api/history", {"path": "[", "rev": "main"}, 400, "path"),
    ("/api/history", {"path": '["a"]', "rev": "main~x"}, 400, "main~x"),
    ("/api/reflog", {"ref": "nosuch"}, 404, "nosuch"),
    ("/api/threads", [("where", "nokey")], 400, "nokey"),
])
def test_bad_input_is_refused_naming_what_was_wrong(served: tuple[str, Path], path: str, params: Any, status: int,
                                                     named: str) -> None:
    url, _ = served
    got, found = _request(url, path, params)
    assert (got, named in found["error"]) == (status, True), found
    assert issubclass(getattr(snapvc, found["type"]), snapvc.SnapvcError)


# -- writing ----------------------------------------------------------------------------------


def test_writes_are_refused_by_a_read_only_server(served: tuple[str, Path]) -> None:
    url, path = served
    with snapvc.open(path, create=False) as repo:
        before = repo.tags()
    for where, body in (("/api/tag", {"name": "x", "rev": "main"}), ("/api/branch", {"name": "x", "rev": "main"}),
                        ("/api/reset", {"branch": "main", "rev": "main~1"}), ("/api/undo", {"ref": "main"})):
        status, found = _request(url, where, body=body)
        assert status == 403 and found["type"] == "RequestRefusedError" and "--write" in found["error"]
    with snapvc.open(path, create=False) as repo:
        assert repo.tags() == before and "x" not in repo.branches()


def test_a_write_from_another_site_or_not_json_is_refused(writable: tuple[str, Path]) -> None:
    url, path = writable
    status, found = _request(url, "/api/tag", body={"name": "evil", "rev": "main"},
                             headers={"Origin": "http://attacker.example"})
    assert status == 403 and "http://attacker.example" in found["error"]
    status, found = _request(url, "/api/tag", body={"name": "evil", "rev": "main"}, headers={"Content-Type": "text/plain"})
    assert status == 403 and "application/json" in found["error"]
    status, found = _request(url, "/api/repo", headers={"Host": "attacker.example"})  # DNS rebinding
    assert status == 403 and "attacker.example" in found["error"]
    with snapvc.open(path, create=False) as repo:
        assert "evil" not in repo.tags()
    status, found = _request(url, "/api/tag", body={"name": "fine", "rev": "main"}, headers={"Origin": url.rstrip("/")})
    assert status == 200, found


def test_writes_land_in_the_reflog_and_undo_takes_them_back(writable: tuple[str, Path]) -> None:
    url, path = writable
    assert _get(url, "/api/repo")["writable"] is True
    with snapvc.open(path, create=False) as repo:
        tip, back = repo.resolve("main").hex, repo.resolve("main~2").hex

    status, found = _request(url, "/api/reset", body={"branch": "main", "rev": "main~2"})
    assert (status, found) == (200, {"ok": True, "ref": "refs/heads/main", "commit": back})
    assert _get(url, "/api/reflog", {"ref": "main"})["entries"][0]["new"] == back
    status, found = _request(url, "/api/undo", body={"ref": "main"})
    assert (status, found["commit"]) == (200, tip)
    entry = _get(url, "/api/reflog", {"ref": "main"})["entries"][0]
    assert (entry["old"], entry["new"]) == (back, tip) and entry["reason"].startswith("undo:")

    status, found = _request(url, "/api/branch", body={"name": "side", "rev": "main~1"})
    assert status == 200 and found["ref"] == "refs/heads/side"
    assert _get(url, "/api/reflog", {"ref": "side"})["entries"][0]["old"] is None
    status, found = _request(url, "/api/undo", body={"ref": "side"})
    assert (status, found["commit"]) == (200, None)

    status, found = _request(url, "/api/tag", body={"name": "v2", "rev": "main~1"})
    assert status == 200 and found["ref"] == "refs/tags/v2"
    status, found = _request(url, "/api/undo", body={"ref": "refs/tags/v2"})
    assert status == 200
    with snapvc.open(path, create=False) as repo:
        assert repo.resolve("main").hex == tip and "side" not in repo.branches() and "v2" not in repo.tags()

    status, found = _request(url, "/api/tag", body={"name": "bad name", "rev": "main"})
    assert status == 400 and "bad name" in found["error"]
    status, found = _request(url, "/api/branch", body={"name": "new", "rev": "nosuch"})
    assert status == 404 and "nosuch" in found["error"]
    status, found = _request(url, "/api/reset", body={"branch": "nosuch", "rev": "main"})
    assert status == 404 and "nosuch" in found["error"]
    status, found = _request(url, "/api/tag", body={"name": "fine2"})
    assert status == 400 and "'rev'" in found["error"]
