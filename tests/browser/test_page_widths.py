"""Every main page of the demo fits the window (issue 35, point 1): at 1366×768 and 1920×1080,
signed in as a member and as a manager, no table is wider than its container, no page is
wider than the window, and every checkbox sits on the line of its label's words.

The data is the demo's own: ``manage.py demo_run`` runs as ``make demo`` does (SQLite, the
simulator, its answer), and the pages are found by following the links of the overview, as a
newcomer clicks through them, with the comparison of the demo run's trials and the builder's
prediction panel (filled on request) beside them. A table folded into a closed disclosure is
not measured: it is not on the screen until its reader opens it.

As the manager, at 1366×768, it saves the pictures docs/getting-started.md shows (the run
page's first screen and its answer) into docs/img/, so that they show the pages as they are.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.browser.conftest import TIMEOUT_MS
from tests.demo_process import demo_started, migrated_demo_env
from tests.polling import wait_for
from tests.site.live_server import ROOT, free_port

DOCS_IMAGES = ROOT / "docs" / "img"

VIEWPORTS = [(1366, 768), (1920, 1080)]
PEOPLE = {"member": "bob@demo.example", "manager": "alice@demo.example"}
# Links that are not pages to look at: exports, the account's own forms, and copies of a
# page already visited (an experiment's duplicate is its edit form).
SKIPPED = re.compile(r"\?|#|/duplicate/|\.csv$|/download")
RUN_PAGE = re.compile(r"^/o/demo/runs/([0-9a-f-]{36})/$")
# What overflows, as the browser lays the page out: the page past the window, and each
# visible table past the box it sits in (its scroll wrapper where it has one).
OVERFLOWS = """() => {
  const found = [];
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth + 1) {
    found.push(`the page is ${root.scrollWidth} px wide in a ${root.clientWidth} px window`);
  }
  for (const table of document.querySelectorAll("table")) {
    if (table.offsetParent === null) continue;  // in a closed disclosure
    const width = table.getBoundingClientRect().width;
    const room = table.parentElement.clientWidth;
    if (width > room + 1) {
      const name = table.className || table.id || "table";
      found.push(`table.${name} is ${Math.round(width)} px wide in ${room} px`);
    }
  }
  // A checkbox sits beside its words: on the line of the label's first text.
  for (const box of document.querySelectorAll("label > input[type=checkbox]")) {
    if (box.offsetParent === null) continue;
    const words = [...box.parentElement.childNodes].find(
      n => n.nodeType === Node.TEXT_NODE && n.textContent.trim());
    if (!words) continue;
    const range = document.createRange();
    range.selectNodeContents(words);
    const line = range.getClientRects()[0];
    const middle = (box.getBoundingClientRect().top + box.getBoundingClientRect().bottom) / 2;
    if (line && (middle < line.top || middle > line.bottom)) {
      found.push(`the checkbox of "${words.textContent.trim().slice(0, 40)}" is off its line`);
    }
  }
  return found;
}"""


@dataclass(frozen=True)
class Demo:
    base_url: str
    password: str
    run_ids: list[str]


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Iterator[Demo]:
    """``manage.py demo_run`` serving its finished run; stopped (SIGTERM) afterwards."""
    folder = tmp_path_factory.mktemp("demo")
    log = folder / "demo.log"
    port = free_port()
    env = migrated_demo_env(folder, columns=120)
    process = demo_started("--port", str(port), env=env, log=log)
    try:
        wait_for(
            lambda: "The site keeps serving" in log.read_text() or process.poll() is not None,
            timeout=600,
            what="the demo's run to end",
            every=0.5,
        )
        output = log.read_text()
        assert process.poll() is None, output[-3000:]
        password = re.search(r"Password: (\S+)", output)[1]
        run_ids = re.findall(r"/runs/([0-9a-f-]{36})/", output)
        yield Demo(f"http://127.0.0.1:{port}", password, sorted(set(run_ids)))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=90)
        except Exception:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _pages(page, start: str) -> Iterator[str]:
    """Every page under the demo organization reachable from ``start`` by its links, each
    once, then the comparison of each run page's trials."""
    seen, queue = set(), [start]
    while queue:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        yield path
        # The page's links and the menu's (the organization switcher repeats the page).
        links = page.eval_on_selector_all(
            "main a[href], .primary-nav a[href]", "as => as.map(a => a.getAttribute('href'))"
        )
        queue.extend(
            link for link in links if link.startswith("/o/demo/") and not SKIPPED.search(link)
        )
        run = RUN_PAGE.match(path)
        trials = page.locator("article.trial").count()
        if run and trials > 1:
            picks = "&".join(f"trials={run[1]}:{index}" for index in range(trials))
            queue.append(f"/o/demo/runs/compare/?{picks}")


def _open(page, path: str, *, predict: bool) -> None:
    page.goto(path)
    page.wait_for_load_state("load")
    # The builder's prediction panel fills in on request: the widest thing it can show.
    button = page.locator("#predict-button")
    if predict and button.count():
        button.click()
        page.locator("#live-prediction table, #live-prediction .error").first.wait_for(
            timeout=120_000
        )


def _predicts(path: str, predicted: set[str]) -> bool:
    """Whether to fill the prediction panel on ``path``: once on a new experiment's form and
    once on an existing one's (each prediction simulates the whole grid)."""
    kind = path.rstrip("/").rsplit("/", 1)[-1]
    if "/experiments/" not in path or kind not in ("new", "edit") or kind in predicted:
        return False
    predicted.add(kind)
    return True


def _picture_the_run_page(page) -> None:
    """docs/img/run-page.png (the first screen a reader sees) and docs/img/answer.png."""
    DOCS_IMAGES.mkdir(exist_ok=True)
    page.screenshot(path=str(DOCS_IMAGES / "run-page.png"))
    page.locator("#run-answer").screenshot(path=str(DOCS_IMAGES / "answer.png"))


@pytest.mark.parametrize("role", sorted(PEOPLE))
def test_it_fits_every_main_page_in_the_window(_browser, demo, role):
    context = _browser.new_context(base_url=demo.base_url, viewport={"width": 1366, "height": 768})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    errors, opened = [], ["/login/"]
    page.on("pageerror", lambda error: errors.append(f"{opened[-1]}: {error}"))
    page.on(
        "console",
        lambda message: message.type == "error" and errors.append(f"{opened[-1]}: {message.text}"),
    )
    try:
        page.goto("/login/")
        page.get_by_label("E-mail").fill(PEOPLE[role])
        page.get_by_label("Password").fill(demo.password)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(lambda url: "/login/" not in url)
        problems, visited, predicted, pictured = [], [], set(), False
        for path in _pages(page, "/o/demo/"):
            opened.append(path)
            _open(page, path, predict=_predicts(path, predicted))
            if role == "manager" and RUN_PAGE.match(path) and not pictured:
                _picture_the_run_page(page)
                pictured = True
            visited.append(path)
            for width, height in VIEWPORTS:
                page.set_viewport_size({"width": width, "height": height})
                problems += [f"{width}×{height} {path}: {p}" for p in page.evaluate(OVERFLOWS)]
            page.set_viewport_size({"width": 1366, "height": 768})
    finally:
        context.close()
    # The pages a newcomer looks at first were among those measured.
    for wanted in ("/o/demo/runs/", "/o/demo/reports/costs/", "/o/demo/experiments/new/"):
        assert wanted in visited, visited
    assert any(RUN_PAGE.match(path) for path in visited), visited
    assert any(path.startswith("/o/demo/runs/compare/") for path in visited), visited
    assert predicted == {"new", "edit"}, visited
    assert pictured or role != "manager"
    assert not problems, "\n".join(problems)
    assert not errors, "\n".join(errors)
