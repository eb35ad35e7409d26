"""Browser tests: Debian's headless Chromium (/usr/bin/chromium), driven by Playwright, on
the real pages served by Daphne from the test database.

Fixtures (names are shared with every browser test):
- ``live_site`` — base URL ("http://127.0.0.1:PORT") of Daphne serving the site; the test's
  database is transactional so the server sees what the test writes; on Redis the server has
  a Celery queue and a channel-layer prefix of its own (this process shares the prefix);
- ``page`` — a fresh Playwright page (own cookies, 1280×900, ``base_url`` = ``live_site``,
  so ``page.goto("/o/acme/")`` works); any console error or uncaught page error fails the
  test at teardown, unless the test allowed it with ``console.allow(pattern)``;
- ``console`` — what the page logged; ``allow`` expected errors (a 404 page logs one);
- ``sign_in(page, person_or_email)`` — signs in through the real form;
- ``screenshot(page, name)`` — a full-page PNG under ``test-output/screenshots/``;
- the cast of tests/site: ``alice`` (owner of acme), ``bob`` (viewer), ``mallory``
  (member), ``charlie`` (owner of globex), and ``org_a``/``org_b``; as there, tasks enqueued
  by this process run in it (the live server's own go to its queue, deleted afterwards).

Every test in this folder is marked ``browser`` (select with ``-m browser``) and ``slow``.
When Chromium or Playwright is missing the tests skip, except with CI=true, where they fail.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.test import override_settings

from tests.conftest import IN_CI
from tests.site.conftest import (  # noqa: F401 — re-exported: the cast, shared with tests/site
    Person,
    alice,
    bob,
    celery_tasks_run_in_process,
    charlie,
    mallory,
    org_a,
    org_b,
)
from tests.site.live_server import (
    ROOT,
    broker_queue_delete,
    channel_layer_delete,
    daphne_server,
)

HERE = Path(__file__).resolve().parent
CHROMIUM = Path(os.environ.get("BENCHSITE_CHROMIUM", "/usr/bin/chromium"))
OUTPUT = ROOT / "test-output"
SCREENSHOTS = OUTPUT / "screenshots"
PASSWORD = "correct-horse-battery"  # the cast's password (tests/site/conftest.py)
# Generous: two shared cores, and Chromium competes with Daphne and PostgreSQL for them.
TIMEOUT_MS = 20_000


def pytest_collection_modifyitems(config, items):
    # Each test drives Chromium against a Daphne serving the site: all of them are slow.
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.browser)
            item.add_marker(pytest.mark.slow)


def _unavailable(reason: str):
    # CI must never pass by skipping: a missing browser there is a broken setup (`make test`
    # installs it), like a missing PostgreSQL or Redis (tests/service_env.py).
    if IN_CI:
        pytest.fail(f"CI: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(autouse=True)
def passwords_the_live_site_accepts(settings, tmp_path):
    """The cast's passwords hash fast here and verify in Daphne (see passwords.py)."""
    settings.PASSWORD_HASHERS = ["tests.browser.passwords.FastPBKDF2PasswordHasher"]
    settings.MEDIA_ROOT = tmp_path


@contextlib.contextmanager
def _environ(**values: str | None) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _own_redis_names(running: contextlib.ExitStack) -> dict[str, str]:
    """A Celery queue and a channel-layer prefix of this folder's own on the shared Redis,
    deleted when ``running`` closes, as the server's environment variables.

    Other test runs (CI, a colleague's) share that Redis. Under the default prefix, the
    layer.flush() of any of them deletes every group, those of this server's pages included:
    a page's socket stays open but hears nothing more, and the page never learns that its run
    ended. The queue holds the tasks the server enqueues (run_provision, run_finalize), which
    no worker serves here: in the shared "celery" queue they would pile up for the next worker
    of anyone's to take, about runs of a database that is gone."""
    if not django_settings.REDIS_URL:
        return {}
    # Not starting with "asgi": the default layer's flush() deletes every "asgi*" key.
    queue = prefix = f"benchsite-browser-{uuid.uuid4().hex}"
    running.callback(broker_queue_delete, queue)
    running.callback(channel_layer_delete, prefix)
    # This process's own notices (a cancel from a test) must reach the server's consumers.
    layers = copy.deepcopy(django_settings.CHANNEL_LAYERS)
    layers["default"]["CONFIG"]["prefix"] = prefix
    running.enter_context(override_settings(CHANNEL_LAYERS=layers))
    return {"CELERY_TASK_DEFAULT_QUEUE": queue, "CHANNEL_LAYER_PREFIX": prefix}


@pytest.fixture(scope="package")
def _daphne(django_db_setup, django_db_blocker) -> Iterator[str]:
    # One server for the whole folder: it reads the test database, whose rows each test's
    # transactional_db flushes afterwards. Its log is kept for a failing test's reader.
    OUTPUT.mkdir(exist_ok=True)
    # One log per xdist worker: each worker has its own server, and a shared file would be
    # unlinked under a running one by the next worker to start.
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    log_path = OUTPUT / (f"browser-live-site-{worker}.log" if worker else "browser-live-site.log")
    log_path.unlink(missing_ok=True)
    with django_db_blocker.unblock(), contextlib.ExitStack() as running:
        names = _own_redis_names(running)  # deleted after the server has stopped
        # The server keeps Django's async-safety checks, whatever this process relaxed
        # (it copies the environment when it starts). Runs started on it freeze its
        # simulator speed into their job: 20x, or a simulated run takes minutes.
        with _environ(DJANGO_ALLOW_ASYNC_UNSAFE=None, BENCHSITE_SIM_SPEED="20", **names):
            address = running.enter_context(daphne_server(timeout=120, log_path=str(log_path)))
        yield f"http://{address}"


@pytest.fixture
def live_site(_daphne, transactional_db) -> str:
    """Base URL of the live site, serving this test's database."""
    return _daphne


@pytest.fixture(scope="package")
def _browser():
    if not CHROMIUM.exists():
        _unavailable(f"{CHROMIUM} is missing (apt-get install chromium; `make test` does)")
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        _unavailable("Playwright is not installed (the dev dependencies have it)")
    # The same patience for assertions (Playwright's own default is 5 s): on 5 test workers
    # over two cores a server-side step, such as predicting a grid, can take longer. A
    # passing assertion returns as soon as it holds; only a failing one waits this long.
    expect.set_options(timeout=TIMEOUT_MS)
    # Playwright's sync API keeps an asyncio loop running on this thread, which Django takes
    # for an async context and refuses the ORM in. Nothing here is async: the tests are plain
    # sync code, so the check is relaxed, only while the browser lives (the folder's tests).
    with _environ(DJANGO_ALLOW_ASYNC_UNSAFE="true"), sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        yield browser
        browser.close()


@dataclass
class ConsoleWatch:
    """Console errors and uncaught exceptions of one page; any not allowed fails the test."""

    errors: list[str] = field(default_factory=list)
    allowed: list[re.Pattern] = field(default_factory=list)

    def allow(self, pattern: str) -> None:
        """Expect errors matching ``pattern`` (a regular expression), e.g. a 404 page's."""
        self.allowed.append(re.compile(pattern))

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(p.search(e) for p in self.allowed)]

    def on_console(self, message) -> None:
        if message.type == "error":
            location = message.location or {}
            self.errors.append(f"console error: {message.text} ({location.get('url', '')})")

    def on_page_error(self, error) -> None:
        self.errors.append(f"uncaught page error: {error}")


@pytest.fixture
def console() -> ConsoleWatch:
    return ConsoleWatch()


@pytest.fixture
def page(_browser, live_site, console):
    """A fresh page in its own browser context (no cookies), at 1280×900."""
    context = _browser.new_context(base_url=live_site, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    context.set_default_navigation_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.on("console", console.on_console)
    page.on("pageerror", console.on_page_error)
    yield page
    context.close()
    problems = console.unexpected()
    if problems:
        pytest.fail("the page reported errors:\n" + "\n".join(problems), pytrace=False)


@pytest.fixture
def sign_in() -> Callable:
    """``sign_in(page, person_or_email)``: signs in through the login form and waits for the
    page it leads to."""

    def sign_in(page, who: Person | str, password: str = PASSWORD):
        email = who if isinstance(who, str) else who.user.email
        page.goto("/login/")
        page.get_by_label("E-mail").fill(email)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(lambda url: "/login/" not in url)
        return page

    return sign_in


@pytest.fixture
def screenshot() -> Callable:
    """``screenshot(page, name)``: saves the whole page as test-output/screenshots/NAME.png
    and returns the path."""

    def screenshot(page, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return screenshot
