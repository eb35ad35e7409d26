"""The audit log's filters, order and export rows are one selector's
(runs.selectors.audit_log): for the same query the web page and the API return the same events
and byte-identical exports."""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal

import pytest
from django.urls import reverse

from runs.actors import Actor
from runs.models import AuditEvent
from runs.services.budgets import budget_set

from .conftest import signed_in

API_LIST = reverse("audit-list", kwargs={"org": "acme"})
API_EXPORT = reverse("audit-export", kwargs={"org": "acme"})
WEB_PAGE = "/o/acme/audit/"


@pytest.fixture
def log(alice, mallory):
    """Budget changes by alice (before/after with two keys, which jsonb stores unsorted)."""
    as_alice = Actor(user=alice.user, via="web")
    budget_set(org=alice.org, actor=as_alice, limit_usd=Decimal(50), note="first")
    budget_set(org=alice.org, actor=as_alice, limit_usd=Decimal(75), note="Q3")
    budget_set(org=alice.org, actor=Actor(user=mallory.user, via="web"), limit_usd=Decimal(80))
    return list(AuditEvent.objects.filter(organization=alice.org).order_by("seq"))


def _body(response) -> bytes:
    assert response.status_code == 200, response.content
    return b"".join(response.streaming_content)


def web_csv(alice, **params) -> bytes:
    return _body(signed_in(alice).get(WEB_PAGE, {**params, "format": "csv"}))


def api_export(alice, file_format="csv", **params) -> bytes:
    return _body(alice.client().get(API_EXPORT, {**params, "as": file_format}))


def api_list(alice, **params) -> list[int]:
    response = alice.client().get(API_LIST, {**params, "page_size": 200})
    assert response.status_code == 200, response.content
    return [row["seq"] for row in response.json()["results"]]


def seqs_of(body: bytes) -> list[int]:
    return [int(row["seq"]) for row in csv.DictReader(io.StringIO(body.decode()))]


def queries(log) -> dict[str, dict]:
    day = log[-1].created_at.date().isoformat()
    return {
        "actor in another case": {"actor": "ALICE@acme.example"},
        "actor by name": {"actor": "Mallory"},
        "until a day, included": {"until": day},
        "a whole day": {"since": day, "until": day},
        "target text": {"target": "budget"},
        "everything": {},
    }


@pytest.mark.parametrize(
    "name",
    [
        "actor in another case",
        "actor by name",
        "until a day, included",
        "a whole day",
        "target text",
        "everything",
    ],
)
def test_it_gives_the_same_events_and_export_on_the_web_and_the_api(alice, log, name):
    params = queries(log)[name]
    exported = api_export(alice, **params)
    assert web_csv(alice, **params) == exported
    seqs = seqs_of(exported)
    assert seqs and seqs == sorted(seqs)  # exports: oldest first, chain order
    assert api_list(alice, **params) == seqs[::-1]  # the list: newest first


def test_it_matches_the_actor_ignoring_case_on_the_whole_address_or_its_name(alice, log):
    mallory = [e.seq for e in log if e.actor_label == "mallory@acme.example"]
    assert seqs_of(api_export(alice, actor="MALLORY@ACME.EXAMPLE")) == mallory
    assert seqs_of(api_export(alice, actor="mallory")) == mallory
    assert seqs_of(api_export(alice, actor="mall")) == []  # part of a name is no name


def test_it_reads_a_date_as_a_whole_utc_day_and_a_date_time_as_an_instant(alice, log):
    last = log[-1].created_at
    everything = [e.seq for e in log]
    assert seqs_of(api_export(alice, until=last.date().isoformat())) == everything
    assert seqs_of(api_export(alice, until=last.isoformat())) == everything[:-1]  # excluded
    assert seqs_of(api_export(alice, since=last.isoformat())) == everything[-1:]


@pytest.mark.parametrize(
    "params",
    [
        {"since": "2025-07-02", "until": "2025-07-01"},
        {"since": "2025-07-01T12:00:00Z", "until": "2025-07-01T11:00:00+00:00"},
    ],
    ids=["dates", "date-times"],
)
def test_it_refuses_an_end_before_the_start_naming_the_field(alice, log, params):
    api = alice.client().get(API_LIST, params)
    assert api.status_code == 400 and list(api.json()["error"]["fields"]) == ["until"]
    exported = alice.client().get(API_EXPORT, params)
    assert exported.status_code == 400
    web = signed_in(alice).get(WEB_PAGE, params)
    assert web.status_code == 400 and b'id="e-until"' in web.content


def test_it_exports_before_and_after_with_sorted_keys_in_every_format(alice, log):
    lines = api_export(alice, "json", event="budget.set").decode().splitlines()
    changed = json.loads(lines[1])
    assert list(changed["before"]) == ["limit_usd", "note"]
    rows = list(csv.DictReader(io.StringIO(api_export(alice, event="budget.set").decode())))
    assert rows[1]["before"] == json.dumps(changed["before"])
    assert json.loads(lines[0])["after"] == json.loads(rows[0]["after"])
