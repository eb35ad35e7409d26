"""Every page of the site, checked by axe-core (WCAG 2 A and AA rules) and for sideways
scrolling, at 1280×900 and on a phone (390×844).

A page fails on any axe violation of impact serious or critical, named with its rule, the
selectors of the offending elements and the page; and when its document is wider than the
viewport (a wide table must scroll inside its own box, never the page).

Pages are grouped by area, one test per area: each test seeds the same small history (the
database is flushed after every test) and visits its area's pages in turn, each loaded at
1280 px, checked, then narrowed to 390 px and checked again (a page must also survive a
window that narrows), so the whole file stays under a minute on two cores.
Set ``BENCHSITE_A11Y_SCREENSHOTS=1`` to also save every page as
test-output/screenshots/a11y-AREA-PAGE-VIEWPORT.png for review.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.conf import settings
from django.test import Client
from playwright.sync_api import expect

from runs.actors import Actor
from runs.models import Endpoint, Membership, Run
from runs.services.evaluations import evaluation_set_upload
from runs.services.experiments import dataset_upload
from runs.services.promotions import promotion_approve, promotion_propose
from tests.site.report_data import History, build_history

pytestmark = pytest.mark.needs_redis

VIEWPORTS = {"wide": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}
AXE_OPTIONS = {
    "runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]},
    "resultTypes": ["violations"],
}
FAILING_IMPACTS = {"serious", "critical"}
SCREENSHOTS = os.environ.get("BENCHSITE_A11Y_SCREENSHOTS") == "1"
# Charts draw after load (deferred scripts); axe must see the finished page.
CHARTS_DRAWN = (
    "() => [...document.querySelectorAll('canvas')].every(c => window.Chart && Chart.getChart(c))"
)

# Two animation frames: resize handlers (run in the first) have run and painted.
NEXT_FRAMES = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"


@dataclass
class Seeded:
    """The seeded organization's objects the addresses need."""

    history: History
    promotion_id: str

    @property
    def org(self) -> str:
        return self.history.small.organization.slug


# (name, who visits: "alice"/"mallory"/None for signed out, address from the seeded data)
Page = tuple[str, str | None, Callable[[Seeded], str]]
AREAS: dict[str, list[Page]] = {
    "account": [
        ("sign-in", None, lambda s: "/login/"),
        ("home", "alice", lambda s: "/"),
        ("org-overview", "alice", lambda s: f"/o/{s.org}/"),
        # Another tenant's organization answers 404 (charlie's globex, seen by alice).
        ("not-found", "alice", lambda s: "/o/globex/"),
    ],
    "settings": [
        ("settings", "alice", lambda s: f"/o/{s.org}/settings/"),
        ("members", "alice", lambda s: f"/o/{s.org}/settings/members/"),
        ("tokens", "alice", lambda s: f"/o/{s.org}/settings/tokens/"),
        ("budgets", "alice", lambda s: f"/o/{s.org}/settings/budgets/"),
        ("runpod-key", "alice", lambda s: f"/o/{s.org}/settings/runpod-key/"),
        ("hf-token", "alice", lambda s: f"/o/{s.org}/settings/hf-token/"),
        ("notifications", "alice", lambda s: f"/o/{s.org}/settings/notifications/"),
        ("endpoints", "alice", lambda s: f"/o/{s.org}/settings/endpoints/"),
    ],
    "experiments": [
        ("models", "alice", lambda s: f"/o/{s.org}/models/"),
        ("model-new", "alice", lambda s: f"/o/{s.org}/models/new/"),
        ("model-edit", "alice", lambda s: f"/o/{s.org}/models/{s.history.llama8.id}/edit/"),
        ("experiments", "alice", lambda s: f"/o/{s.org}/experiments/"),
        ("builder", "alice", lambda s: f"/o/{s.org}/experiments/new/"),
        ("experiment", "alice", lambda s: f"/o/{s.org}/experiments/{s.history.small.id}/"),
        ("datasets", "alice", lambda s: f"/o/{s.org}/experiments/datasets/"),
        ("evaluation-sets", "alice", lambda s: f"/o/{s.org}/experiments/evaluation-sets/"),
    ],
    "runs": [
        # An ended simulated run with its measurements, and a warning of refused agent
        # messages (see ``seeded``).
        ("run-sim", "alice", lambda s: f"/o/{s.org}/runs/{s.history.tsim.run_id}/"),
        ("run", "alice", lambda s: f"/o/{s.org}/runs/{s.history.run_small.id}/"),
        ("history", "alice", lambda s: f"/o/{s.org}/runs/"),
        (
            "compare",
            "alice",
            lambda s: (
                f"/o/{s.org}/runs/compare/?runs={s.history.run_small.id}"
                f"&runs={s.history.tqwen.run_id}&runs={s.history.tsim.run_id}"
            ),
        ),
    ],
    "reports": [
        ("reports", "alice", lambda s: f"/o/{s.org}/reports/"),
        ("costs", "alice", lambda s: f"/o/{s.org}/reports/costs/"),
        ("model-size", "alice", lambda s: f"/o/{s.org}/reports/models/"),
        ("spend", "alice", lambda s: f"/o/{s.org}/reports/spend/"),
        ("cold-starts", "alice", lambda s: f"/o/{s.org}/reports/cold-starts/"),
        ("choice", "alice", lambda s: f"/o/{s.org}/reports/choice/{s.history.small.id}/"),
    ],
    "promotions": [
        ("promotions", "alice", lambda s: f"/o/{s.org}/promotions/"),
        ("promotion", "alice", lambda s: f"/o/{s.org}/promotions/{s.promotion_id}/"),
        (
            "propose",
            "mallory",
            lambda s: f"/o/{s.org}/promotions/propose/{s.history.run_small.id}/0/",
        ),
        ("audit-log", "alice", lambda s: f"/o/{s.org}/audit/"),
    ],
}


@pytest.fixture(scope="module")
def axe() -> Axe:
    return Axe()


@pytest.fixture
def seeded(alice, mallory, charlie) -> Seeded:
    """Acme's report history with one approved promotion (mallory proposed, alice approved),
    one uploaded dataset and evaluation set, an existing endpoint, and two conflicts counted
    on the simulated run."""
    history = build_history(alice.org)
    Run.objects.filter(pk=history.tsim.run_id).update(
        agent_conflicts=2,
        agent_conflict_last="2025-01-02 03:04:05 UTC: a heartbeat at epoch 1, seq 4 differed "
        "from the stored measurement",
    )

    def as_person(person):
        membership = Membership.objects.get(user=person.user, organization=alice.org)
        return {"membership": membership, "actor": Actor(user=person.user, via="web")}

    promotion = promotion_propose(**as_person(mallory), trial=history.t128, note="Cheapest.")
    promotion_approve(**as_person(alice), promotion=promotion, comment="Ship it.")
    chats = [{"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hey"}]}]
    dataset_upload(
        org=alice.org,
        actor=as_person(alice)["actor"],
        name="support chats",
        raw=json.dumps(chats).encode(),
    )
    evaluation_set_upload(
        org=alice.org,
        actor=as_person(alice)["actor"],
        name="sums",
        raw=b'{"id": "a", "prompt": "2 + 2?", "reference": 4, "scorer": {"kind": "numeric"}}\n',
    )
    # An existing endpoint, so that its row's forms (replace the key, delete) are checked.
    Endpoint.objects.create(
        organization=alice.org,
        name="prod",
        base_url="http://127.0.0.1:9",
        served_model_name="m",
        api_key_fingerprint="abcd",
        price_usd_per_hour=2,
    )
    return Seeded(history=history, promotion_id=str(promotion.id))


def _session_cookie(person, live_site: str) -> dict:
    # Signing in through the form is tested in test_sign_in.py; here a session made by the
    # test client is quicker and the server reads it from the same database.
    client = Client()
    client.force_login(person.user)
    return {
        "name": settings.SESSION_COOKIE_NAME,
        "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
        "url": live_site,
    }


def _problems(page, name: str) -> list[str]:
    """This page's serious and critical axe violations and sideways overflow, one line each
    (axe must be on the page already)."""
    results = page.evaluate("options => axe.run(document, options)", AXE_OPTIONS)
    problems = [
        f"{name}: {v['id']} ({v['impact']}) at "
        + ", ".join(" ".join(node["target"]) for node in v["nodes"][:5])
        + f" — {v['help']}"
        for v in results["violations"]
        if v["impact"] in FAILING_IMPACTS
    ]
    width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    if width[0] > width[1]:
        problems.append(f"{name}: the document is {width[0]} px wide in a {width[1]} px viewport")
    return problems


@pytest.mark.parametrize("area", list(AREAS))
def test_it_has_no_serious_accessibility_violation_nor_sideways_scroll(
    area, page, console, live_site, axe, seeded, alice, mallory, screenshot
):
    people = {"alice": alice, "mallory": mallory}
    console.allow(r"404 \(Not Found\)")  # the not-found page's own status
    problems: list[str] = []
    signed_in = None
    for name, who, address in AREAS[area]:
        if who != signed_in:
            page.context.clear_cookies()
            if who:
                page.context.add_cookies([_session_cookie(people[who], live_site)])
            signed_in = who
        page.set_viewport_size(VIEWPORTS["wide"])
        page.goto(address(seeded))
        page.wait_for_function(CHARTS_DRAWN)
        if name == "run-sim":  # the warning is part of what axe checks there
            expect(page.locator("#agent-conflicts")).to_be_visible()
        page.evaluate(axe.axe_script)  # axe-core, bundled by axe-playwright-python
        # One load serves both widths (half the time): the page is narrowed in place, and
        # checked once the resize has been handled (shell.js re-marks scroll boxes per frame).
        for viewport, size in VIEWPORTS.items():
            page.set_viewport_size(size)
            page.evaluate(NEXT_FRAMES)
            problems += _problems(page, f"{name} at {size['width']} px")
            if SCREENSHOTS:
                screenshot(page, f"a11y-{area}-{name}-{viewport}")
    assert not problems, "\n".join(problems)
