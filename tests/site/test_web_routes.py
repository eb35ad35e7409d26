"""The access layer on every page of the web UI, found from the URL configuration itself,
so a page added later is checked without being listed here: a stranger to the organization
gets 404 for every address of it — even when each object in the address exists and is the
organization's — on GET and on POST, and an anonymous visitor is sent to sign in. Nothing
is written by any of those requests."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from runs.models import Endpoint, Membership, NotificationHook
from runs.services.budgets import budget_set
from runs.services.evaluations import evaluation_set_upload
from runs.services.experiments import dataset_upload
from runs.services.tenancy import token_create

from .conftest import SYSTEM
from .db_state import database_state
from .report_data import build_history
from .test_promotions import actor, member

pytestmark = pytest.mark.django_db

_PARAM = re.compile(r"<(?:(?P<converter>\w+):)?(?P<name>\w+)>")


def _routes(patterns, prefix: str = "") -> list[str]:
    found = []
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            found += _routes(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern):
            found.append(route)
    return found


ORG_ROUTES = sorted(r for r in _routes(get_resolver().url_patterns) if r.startswith("o/<slug:org>"))


@pytest.fixture
def acme_world(alice, mallory):
    """One real object of acme's for every kind of id a page address carries."""
    from runs.services.promotions import promotion_propose

    history = build_history(alice.org)
    promotion = promotion_propose(
        membership=member(mallory), actor=actor(mallory), trial=history.t128, note="cheapest"
    )
    chats = [
        {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}]}
    ]
    return {
        "org": alice.org.slug,
        "experiment_id": history.small.id,
        "model_id": history.llama8.id,
        "run_id": history.run_small.id,
        "index": history.t128.index,
        "promotion_id": promotion.id,
        "dataset_id": dataset_upload(
            org=alice.org, actor=SYSTEM, name="chats", raw=json.dumps(chats).encode()
        ).id,
        "evaluation_set_id": evaluation_set_upload(
            org=alice.org,
            actor=SYSTEM,
            name="sums",
            raw=b'{"prompt": "2+2=", "reference": "4", "scorer": {"kind": "exact"}}\n',
        ).id,
        "budget_id": budget_set(org=alice.org, actor=SYSTEM, limit_usd=Decimal(100)).id,
        "member_id": Membership.objects.get(organization=alice.org, user=mallory.user).id,
        "token_id": token_create(org=alice.org, user=alice.user, name="ci", actor=SYSTEM).token.id,
        "endpoint_id": Endpoint.objects.create(
            organization=alice.org,
            name="prod",
            base_url="http://127.0.0.1:9",
            served_model_name="fake",
        ).id,
        "hook_id": NotificationHook.objects.create(
            organization=alice.org,
            name="mail",
            kind="email",
            email_to="ops@acme.example",
            events=["run.failed"],
        ).id,
    }


def address(route: str, ids: dict) -> str:
    return "/" + _PARAM.sub(lambda m: str(ids[m.group("name")]), route)


def test_every_organization_page_is_found_and_checked():
    # A guard on the discovery itself: the pages of every area are among the routes.
    assert len(ORG_ROUTES) >= 40
    for part in (
        "settings/",
        "models/",
        "experiments/",
        "runs/",
        "reports/",
        "promotions/",
        "audit/",
    ):
        assert any(part in route for route in ORG_ROUTES), part


# One test per kind of visitor going through every route (instead of one test per route):
# the organization's history is built once, and the failures are listed together.


@pytest.mark.slow
def test_a_stranger_gets_404_for_every_page_of_another_organization(acme_world, charlie):
    client = Client()
    client.force_login(charlie.user)
    before = database_state()
    wrong = []
    for route in ORG_ROUTES:
        url = address(route, acme_world)
        for method in (client.get, client.post):
            response = method(url)
            # A POST-only page may answer a GET with 405 before it looks anything up: that
            # says nothing about the organization either. Never 200, 302, 403 or 500.
            if response.status_code not in (404, 405) or b"acme" in response.content.lower():
                wrong.append((method.__name__, url, response.status_code))
    assert wrong == []
    assert database_state() == before


def test_an_anonymous_visitor_is_sent_to_sign_in_from_every_page(acme_world):
    client = Client()
    before = database_state()
    wrong = []
    for route in ORG_ROUTES:
        url = address(route, acme_world)
        for method in (client.get, client.post):
            response = method(url)
            location = response.headers.get("Location", "")
            if not (
                response.status_code == 405
                or (response.status_code == 302 and location.startswith("/login/?next="))
            ):
                wrong.append((method.__name__, url, response.status_code, location))
    assert wrong == []
    assert database_state() == before


def _named_routes(patterns, prefix: str = "", namespace: str = "") -> list[tuple[str, str]]:
    found = []
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            found += _named_routes(pattern.url_patterns, route, inner)
        elif isinstance(pattern, URLPattern) and pattern.name:
            found.append((namespace + pattern.name, route))
    return found


def _parameters(route: str) -> frozenset[str]:
    names = {m.group("name") for m in _PARAM.finditer(route)}
    names |= set(re.findall(r"\(\?P<(\w+)>", route))
    return frozenset(names - {"format"})


def _without_format_suffix(route: str) -> str:
    """DRF lists each API route again with a `.json`-style suffix: the same route."""
    route = re.sub(r"\\\.\(\?P<format>[^)]*\)|\.?<drf_format_suffix:format>", "", route)
    return re.sub(r"/?\??\$?$", "", route)


def test_no_two_routes_answer_one_name_with_the_same_parameters():
    """A page and an API action may share a name only when their parameters differ (the API's
    `pk`, the page's `experiment_id`), so that `reverse` with keywords finds one of them.
    With the same parameters `reverse` picks whichever was listed first, and a form would
    post to the wrong view — as the builder's predict page once did to the API's."""
    seen: dict[tuple[str, frozenset[str]], str] = {}
    clashes = []
    for name, route in _named_routes(get_resolver().url_patterns):
        key = (name, _parameters(route))
        if key in seen and _without_format_suffix(route) != _without_format_suffix(seen[key]):
            clashes.append((name, seen[key], route))
        seen.setdefault(key, route)
    assert clashes == []
