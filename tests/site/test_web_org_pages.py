"""One door for every organization page (``frontend.org_pages.org_page``): sign in first, then
the page's methods (405), then membership (404 for a stranger, the same as for no such
organization) and role (403), through the pages of several areas."""

from __future__ import annotations

import re
import uuid
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from runs.services.budgets import budget_set

from .conftest import SYSTEM, signed_in
from .test_web_runs import answered_run, text_of

pytestmark = pytest.mark.django_db

# Fixed: it names parametrized tests, which every parallel worker must collect alike.
SOME_ID = uuid.UUID("b8ae9d24-1a83-44e4-8ed5-d46177bf6c4d")


def _org_patterns(patterns, prefix: str = "") -> list[tuple[str, URLPattern]]:
    found = []
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            found += _org_patterns(pattern.url_patterns, route)
        elif route.startswith("o/<slug:org>"):
            found.append((route, pattern))
    return found


def test_every_organization_route_goes_through_the_door():
    patterns = _org_patterns(get_resolver().url_patterns)
    assert len(patterns) >= 40
    assert [route for route, p in patterns if not getattr(p.callback, "org_page", False)] == []


@pytest.mark.parametrize(
    "path",
    [
        "/o/acme/",
        "/o/acme/settings/members/",
        "/o/acme/experiments/",
        "/o/acme/runs/",
        "/o/acme/reports/costs/",
        "/o/acme/promotions/",
        "/o/acme/audit/",
    ],
)
def test_it_answers_404_to_a_stranger_as_for_no_such_organization(path, alice, charlie):
    assert signed_in(alice).get(path).status_code == 200
    assert signed_in(charlie).get(path).status_code == 404
    assert signed_in(alice).get(path.replace("acme", "no-such-org")).status_code == 404


@pytest.mark.parametrize(
    ("who", "method", "path"),
    [
        ("bob", "get", "/o/acme/models/new/"),  # a viewer may not open a write form
        ("bob", "post", "/o/acme/experiments/new/"),
        ("bob", "post", "/o/acme/experiments/datasets/"),  # reading the list is fine (below)
        ("bob", "post", f"/o/acme/runs/{SOME_ID}/cancel/"),
        ("mallory", "get", "/o/acme/settings/tokens/"),  # a member may not manage
        ("mallory", "post", "/o/acme/settings/members/"),
        ("mallory", "post", f"/o/acme/promotions/{SOME_ID}/approve/"),
    ],
)
def test_it_answers_403_to_a_role_too_low_before_looking_anything_up(
    who, method, path, request, alice
):
    client = signed_in(request.getfixturevalue(who))
    assert getattr(client, method)(path).status_code == 403


def test_a_page_may_need_more_for_a_post_than_for_a_get(bob):
    client = signed_in(bob)
    assert client.get("/o/acme/experiments/datasets/").status_code == 200
    assert client.post("/o/acme/experiments/datasets/", {"name": "x"}).status_code == 403
    assert client.get("/o/acme/settings/members/").status_code == 200
    assert client.post("/o/acme/settings/members/", {"email": "e@x.example"}).status_code == 403


def test_a_read_sent_as_post_needs_only_read(bob):
    # The builder's live check stores nothing, so a viewer may ask it.
    response = signed_in(bob).post("/o/acme/experiments/check/", {})
    assert response.status_code == 200 and "ok" in response.json()


def test_it_answers_405_for_a_method_the_page_does_not_take_before_membership(charlie):
    client = signed_in(charlie)
    assert client.get(f"/o/acme/runs/{SOME_ID}/cancel/").status_code == 405
    assert client.post("/o/acme/audit/").status_code == 405


def test_it_sends_an_anonymous_visitor_to_sign_in_first(alice):
    response = Client().get(f"/o/acme/runs/{SOME_ID}/cancel/")
    assert response.status_code == 302
    assert response.headers["Location"].startswith("/login/?next=")


def test_it_shows_recent_runs_their_answers_and_the_months_spend(alice, charlie):
    run = answered_run(alice.org)
    answered_run(charlie.org)  # another tenant's run: never on acme's overview
    budget_set(org=alice.org, actor=SYSTEM, limit_usd=Decimal(100), note="standing")
    html = signed_in(alice).get("/o/acme/").content.decode()
    text = text_of(html)
    assert re.findall(r'href="/o/acme/runs/([0-9a-f-]{36})/"', html) == [str(run.id)]
    assert "concurrency 31 (trial #1) 0.5000" in text
    assert "of a 100.00 USD budget" in text
    # Each experiment's name leads to its page.
    assert f'href="/o/acme/experiments/{run.experiment_id}/">{run.experiment.name}</a>' in html
