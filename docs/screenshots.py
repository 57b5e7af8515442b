"""Take the screenshots of ``docs/ui.md`` from the real page: run by hand after the page changes.

    .venv/bin/python docs/screenshots.py

It makes the demo's repository in a temporary folder, starts ``snapvc ui`` on it, drives
headless Chromium (Debian's ``chromium`` and ``chromium-driver``) through Selenium, and
writes ``docs/img/ui-{graph,commit,diff,history}.png``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

import snapvc

OUT = Path(__file__).resolve().parent / "img"
LIMIT = 200_000  # bytes a screenshot may take in the repository


def wait(driver: Any, css: str) -> Any:
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, css), f"no {css} on the page")
    time.sleep(0.3)  # let the page settle (scroll position, fonts) before the picture
    return driver.find_element(By.CSS_SELECTOR, css)


def shoot(driver: Any, name: str, element: Any = None) -> None:
    path = OUT / f"ui-{name}.png"
    if element is not None:
        element.screenshot(str(path))
    else:
        driver.save_screenshot(str(path))
    size = path.stat().st_size
    print(f"{path.relative_to(OUT.parent.parent)}: {size:,} bytes")
    if size > LIMIT:
        raise SystemExit(f"{path} is {size:,} bytes, over {LIMIT:,}: make the window smaller")


def main() -> None:
    OUT.mkdir(exist_ok=True)
    repo_path = Path(tempfile.mkdtemp(prefix="snapvc-shots-")) / "research-agent.snapvc"
    subprocess.run([sys.executable, "-m", "snapvc", "demo", "--repo", str(repo_path)], check=True, stdout=subprocess.DEVNULL)
    repo = snapvc.open(repo_path)
    try:
        commits = {c.message: str(c.id) for c in repo.log([*repo.branches().values()])}
        base, web = str(repo.tags()["decision-point"]), str(repo.branches()["try-web"])
    finally:
        repo.close()

    server = subprocess.Popen([sys.executable, "-m", "snapvc", "ui", "--repo", str(repo_path), "--port", "0", "--no-browser"],
                              stdout=subprocess.PIPE, text=True)
    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,900", "--hide-scrollbars"):
        options.add_argument(arg)
    driver = None
    try:
        assert server.stdout is not None
        found = re.search(r"https?://\S+", server.stdout.readline())
        if not found:
            raise SystemExit("snapvc ui printed no address")
        url = found.group(0)
        driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
        driver.get(url)
        wait(driver, ".row[data-id]")
        shoot(driver, "graph", driver.find_element(By.CSS_SELECTOR, "#left"))

        wait(driver, f'.row[data-id="{commits["revise paragraph 5"]}"]').click()
        wait(driver, "#commit-detail")
        shoot(driver, "commit")

        wait(driver, f'.row[data-id="{web}"] .pick').click()
        wait(driver, f'.row[data-id="{base}"] .pick').click()
        wait(driver, "#diff-detail")
        shoot(driver, "diff")

        driver.find_element(By.CSS_SELECTOR, "#selection-clear").click()
        wait(driver, f'.row[data-id="{commits["Merge try-web into main"]}"]').click()
        node = wait(driver, '#changes li[data-path="findings"] .hist')
        driver.execute_script("arguments[0].click()", node)
        wait(driver, "#history-detail li.history-entry")
        shoot(driver, "history")
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
