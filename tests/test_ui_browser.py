"""The page of ``snapvc ui`` driven in a real browser (headless Chromium through Selenium)
against the real server on the demo's repository: the graph, a commit's changes, a diff of
two ticked commits, a path's history, the state tree, and a fork made from the page with
writes enabled, seen in the graph and the reflog.

Chromium and its driver come from Debian (``apt-get install chromium chromium-driver``;
``.ci/run`` installs them). Without them these tests fail under CI (``CI=true``) and are
skipped, saying why, elsewhere.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import snapvc
from snapvc.diff.changes import format_path

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WAIT = 20  # seconds a page element may take to appear (a loaded CI machine is slow, never this slow)


def _missing_browser() -> str | None:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        return f"{' and '.join(missing)} missing: apt-get install chromium chromium-driver"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed: pip install -e '.[test]'"
    return None


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    reason = _missing_browser()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the browser tests need Chromium under CI: {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,900"):
        options.add_argument(arg)
    browser = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        yield browser
    finally:
        browser.quit()


def make_demo(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "snapvc", "demo", "--repo", str(path)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
    return path


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo(tmp_path_factory.mktemp("ui") / "demo.snapvc")


@contextmanager
def serve(repo: Path, *, write: bool = False) -> Iterator[str]:
    """Run ``snapvc ui`` on ``repo`` and yield its address (the first line it prints);
    stop it by its process id whatever happens."""
    command = [sys.executable, "-m", "snapvc", "ui", "--repo", str(repo), "--port", "0", "--no-browser"]
    proc = subprocess.Popen([*command, *(["--write"] if write else [])], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        first: list[str] = []
        reader = threading.Thread(target=lambda: first.append(proc.stdout.readline() if proc.stdout else ""), daemon=True)
        reader.start()
        reader.join(WAIT)
        found = re.search(r"https?://\S+", first[0]) if first else None
        if not found:
            proc.kill()
            _, err = proc.communicate(timeout=10)
            raise AssertionError(f"snapvc ui printed no address first (got {first!r}); stderr: {err[-2000:]}")
        yield found.group(0).rstrip("/")
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()


def wait_for(driver: Any, css: str, count: int = 1) -> list[Any]:
    """The elements matching ``css`` once there are at least ``count`` of them."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def found(d: Any) -> list[Any] | bool:
        elements = d.find_elements(By.CSS_SELECTOR, css)
        return elements if len(elements) >= count else False

    return WebDriverWait(driver, WAIT).until(found, f"no {css} (wanted {count}) on the page")  # type: ignore[no-any-return]


def open_graph(driver: Any, url: str, commits: int) -> list[Any]:
    driver.get(url + "/")
    return wait_for(driver, ".row[data-id]", commits)


def answer(url: str, path: str, **query: str) -> Any:
    """The server's JSON answer: what the page should show of it."""
    with urllib.request.urlopen(f"{url}{path}?{urllib.parse.urlencode(query)}", timeout=WAIT) as response:
        return json.load(response)


def row(driver: Any, commit: str) -> Any:
    return wait_for(driver, f'.row[data-id="{commit}"]')[0]


def expected(repo_path: Path) -> dict[str, Any]:
    """What the page should show, asked of the repository itself."""
    repo = snapvc.open(repo_path)
    try:
        refs = [*repo.branches().values(), *repo.tags().values()]
        log = list(repo.log(refs))
        return {
            "commits": [str(c.id) for c in log],
            "by_message": {c.message: str(c.id) for c in log},
            "branches": {n: str(c) for n, c in repo.branches().items()},
            "tags": {n: str(c) for n, c in repo.tags().items()},
            "parents": {str(c.id): [str(p) for p in c.parents] for c in log},
            "changed": lambda a, b: [format_path(c.path) for c in repo.diff(a, b)],
            "repo": repo,
        }
    except BaseException:
        repo.close()
        raise


@pytest.fixture(scope="module")
def truth(demo: Path) -> Iterator[dict[str, Any]]:
    found = expected(demo)
    try:
        yield found
    finally:
        found["repo"].close()


def test_the_graph_shows_every_commit_branch_and_tag(driver: Any, demo: Path, truth: dict[str, Any]) -> None:
    with serve(demo) as url:
        rows = open_graph(driver, url, len(truth["commits"]))
        assert [r.get_attribute("data-id") for r in rows] == truth["commits"]
        labels = {e.text for e in driver.find_elements("css selector", ".row .ref")}
        assert "HEAD -> main" in labels and "try-web" in labels and "tag: decision-point" in labels
        # one node drawn per commit, and lines between them
        assert len(driver.find_elements("css selector", ".graph-svg circle")) == len(truth["commits"])
        assert driver.find_elements("css selector", ".graph-svg path")
        assert "step 6" in row(driver, truth["by_message"]["revise paragraph 5"]).text
        assert driver.find_element("css selector", "#mode").text == "read-only"


def test_a_commit_shows_its_metadata_parents_and_changes(driver: Any, demo: Path, truth: dict[str, Any]) -> None:
    commit = truth["by_message"]["revise paragraph 5"]
    parent = truth["parents"][commit][0]
    with serve(demo) as url:
        open_graph(driver, url, len(truth["commits"]))
        row(driver, commit).click()
        detail = wait_for(driver, f'#commit-detail[data-id="{commit}"]')[0]
        assert "revise paragraph 5" in detail.text and "papers" in detail.text
        changed = {li.get_attribute("data-path") for li in wait_for(driver, "#changes li.change-node[data-kind]")}
        assert changed == {c["path_text"] for c in answer(url, f"/api/commit/{commit}")["changes"]}
        assert changed and all(any(c.startswith(shown) for shown in changed) for c in truth["changed"](parent, commit))
        # a long text's change is shown as a line diff
        assert wait_for(driver, '#changes li[data-path="document"] .textdiff .add')
        assert not driver.find_elements("css selector", "#write-forms"), "a read-only server offers no writes"
        driver.find_element("css selector", f'#commit-detail .commit-link[data-commit="{parent}"]').click()
        wait_for(driver, f'#commit-detail[data-id="{parent}"]')
        assert "current" in (row(driver, parent).get_attribute("class") or "")


def test_two_ticked_commits_show_their_diff(driver: Any, demo: Path, truth: dict[str, Any]) -> None:
    main, web = truth["branches"]["main"], truth["branches"]["try-web"]
    base = truth["tags"]["decision-point"]
    with serve(demo) as url:
        open_graph(driver, url, len(truth["commits"]))
        row(driver, web).find_element("css selector", ".pick").click()
        row(driver, base).find_element("css selector", ".pick").click()
        # the older of the two is the left side, whichever was ticked first
        wait_for(driver, f'#diff-detail[data-a="{base}"][data-b="{web}"]')
        changed = {li.get_attribute("data-path") for li in wait_for(driver, "#diff-changes li.change-node[data-kind]")}
        assert changed == {c["path_text"] for c in answer(url, "/api/diff", a=base, b=web)["changes"]}
        assert changed and all(any(c.startswith(shown) for shown in changed) for c in truth["changed"](base, web))
        # what try-web appended to its message and findings lists is shown as added items
        added = " ".join(e.text for e in wait_for(driver, "#diff-changes .items .item.add"))
        assert "a blog post on KV caches" in added
        row(driver, base).find_element("css selector", ".pick").click()  # untick: a third pick replaces it
        row(driver, main).find_element("css selector", ".pick").click()
        wait_for(driver, f'#diff-detail[data-a="{web}"][data-b="{main}"]')


def test_a_paths_history_and_the_state_tree(driver: Any, demo: Path, truth: dict[str, Any]) -> None:
    repo = truth["repo"]
    head = truth["branches"]["main"]
    with serve(demo) as url:
        open_graph(driver, url, len(truth["commits"]))
        row(driver, head).click()
        wait_for(driver, f'#commit-detail[data-id="{head}"]')
        driver.find_element("css selector", "#browse-state").click()
        nodes = wait_for(driver, "#state-tree > ul > li.state-node")
        state = repo.checkout(head)
        assert [n.get_attribute("data-key") for n in nodes] == list(state)
        messages = driver.find_element("css selector", '#state-tree li.state-node[data-key="messages"]')
        messages.find_element("css selector", ".toggle").click()
        inner = wait_for(driver, '#state-tree li[data-key="messages"] .state-children li.state-node', len(state["messages"]))
        assert [n.get_attribute("data-key") for n in inner] == [str(i) for i in range(len(state["messages"]))]
        # a path's history, from the button on its node
        driver.execute_script("arguments[0].click()", messages.find_element("css selector", ".hist"))
        entries = wait_for(driver, "#history-detail li.history-entry")
        assert [e.get_attribute("data-commit") for e in entries] == [str(e.commit.id) for e in repo.history(head, "messages")]


def test_a_fork_made_from_the_page_lands_in_the_graph_and_the_reflog(driver: Any, tmp_path: Path) -> None:
    repo_path = make_demo(tmp_path / "demo.snapvc")
    found = expected(repo_path)
    found["repo"].close()
    base = found["tags"]["decision-point"]
    with serve(repo_path, write=True) as url:
        open_graph(driver, url, len(found["commits"]))
        assert driver.find_element("css selector", "#mode").text == "writes enabled"
        row(driver, base).click()
        wait_for(driver, f'#commit-detail[data-id="{base}"]')
        driver.find_element("css selector", "#fork-name").send_keys("try-again")
        driver.find_element("css selector", "#fork-go").click()
        labels = wait_for(driver, f'.row[data-id="{base}"] .ref.branch')
        assert "try-again" in [e.text for e in labels]
        driver.find_element("css selector", "#see-reflog").click()
        entries = wait_for(driver, "#reflog-table tr.reflog-entry")
        assert driver.find_element("css selector", "#reflog-ref").get_attribute("value") == "refs/heads/try-again"
        assert len(entries) == 1
        assert entries[0].find_element("css selector", "td.to .commit-link").get_attribute("data-commit") == base
    repo = snapvc.open(repo_path)
    try:
        assert str(repo.branches()["try-again"]) == base
    finally:
        repo.close()


def test_a_reset_is_undone_from_the_reflog_view(driver: Any, tmp_path: Path) -> None:
    repo_path = make_demo(tmp_path / "demo.snapvc")
    found = expected(repo_path)
    found["repo"].close()
    base, web = found["tags"]["decision-point"], found["branches"]["try-web"]
    with serve(repo_path, write=True) as url:
        open_graph(driver, url, len(found["commits"]))
        row(driver, base).click()
        wait_for(driver, f'#commit-detail[data-id="{base}"]')
        driver.find_element("css selector", '#reset-branch option[value="try-web"]').click()
        driver.find_element("css selector", "#reset-go").click()
        wait_for(driver, f'.row[data-id="{base}"] .ref.branch')
        driver.find_element("css selector", "#see-reflog").click()
        reasons = wait_for(driver, "#reflog-table tr.reflog-entry .reason")
        assert reasons[0].text.startswith("reset"), reasons[0].text
        driver.find_element("css selector", "#reflog-undo").click()
        wait_for(driver, f'#reflog-table tr.reflog-entry:first-child td.to .commit-link[data-commit="{web}"]')
        assert driver.find_element("css selector", "#reflog-table tr.reflog-entry .reason").text.startswith("undo")
    repo = snapvc.open(repo_path)
    try:
        assert str(repo.branches()["try-web"]) == web
    finally:
        repo.close()


def test_threads_are_listed_and_filtered_by_metadata(driver: Any, tmp_path: Path) -> None:
    repo = snapvc.open(tmp_path / "threads.snapvc")
    try:
        for thread_id, source in (("chat-1", "loop"), ("chat-2", "tool")):
            thread = repo.thread(thread_id, session="s1", metadata={"source": source})
            for step in range(3):
                thread.save({"messages": ["hi"] * (step + 1)}, metadata={"step": step})
    finally:
        repo.close()
    with serve(tmp_path / "threads.snapvc") as url:
        driver.get(url + "/")
        driver.find_element("css selector", "#tab-threads").click()
        listed = {r.get_attribute("data-thread") for r in wait_for(driver, "#threads-table .thread-row", 2)}
        assert {"chat-1", "chat-2"} <= listed
        driver.find_element("css selector", "#threads-where").send_keys("source=tool, step=2")
        driver.find_element("css selector", "#threads-filter button").click()
        from selenium.common.exceptions import StaleElementReferenceException
        from selenium.webdriver.support.ui import WebDriverWait

        # The list is replaced when the filtered answer comes: a row read as it goes is
        # stale, and the wait reads the new list.
        WebDriverWait(driver, WAIT, ignored_exceptions=(StaleElementReferenceException,)).until(
            lambda d: [r.get_attribute("data-thread") for r in d.find_elements("css selector", "#threads-table .thread-row")] == ["chat-2"],
            "the filter source=tool, step=2 did not leave chat-2 alone")


def test_metadata_that_is_no_scalar_is_shown_in_the_graph_as_its_json(driver: Any, tmp_path: Path) -> None:
    """A step or status given as a map, or one the server cut as too large to send whole,
    reads in the graph's chips as the beginning of its JSON, never as "[object Object]"."""
    with snapvc.open(tmp_path / "meta.snapvc") as repo:
        repo.commit({"a": 1}, message="mapped", metadata={"step": {"phase": "plan", "n": 2}, "status": {"code": "ok"}})
        repo.commit({"a": 2}, message="long", metadata={"step": {"trace": "x" * 30_000}})
    with serve(tmp_path / "meta.snapvc") as url:
        rows = open_graph(driver, url, 2)
        chips = [[c.text for c in r.find_elements("css selector", ".meta .chip")] for r in rows]
        assert chips[1] == ['step {"n":2,"phase":"plan"}', '{"code":"ok"}'], chips
        assert len(chips[0]) == 1 and chips[0][0].startswith('step {"trace":"xxx') and chips[0][0].endswith("…"), chips
