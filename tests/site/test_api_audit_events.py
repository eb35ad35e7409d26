"""The audit trail of API writes: one event per successful write, naming who, how, from where
and what changed; none for a no-op; a log that can be filtered and exported with its chain
hashes; and API tokens that appear in clear exactly once, in the response that created them."""

from __future__ import annotations

import csv
import datetime
import io
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.urls import reverse
from rest_framework.test import APIClient

from agents.hardware import MODEL_PRESETS
from runs.audit import GENESIS_HASH, audit_verify
from runs.models import ApiToken, AuditEvent, GpuPriceOverride, GpuType, Membership
from runs.services.budgets import budget_set
from runs.services.catalogue import gpu_price_set
from runs.services.experiments import dataset_upload
from runs.services.tenancy import token_create, token_digest

from .conftest import H100, MODEL_FIELDS, SYSTEM, experiment_payload, make_experiment
from .conftest import make_model as make_model_spec
from .db_state import database_state

SHAREGPT = [
    {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello!"}]},
]
QWEN = MODEL_PRESETS["qwen2.5-7b"].registered
CALLER_IP = "203.0.113.7"


@dataclass
class World:
    alice: object
    rows: dict[str, object]


@pytest.fixture
def world(alice, mallory) -> World:
    org = alice.org
    model = make_model_spec(org)
    return World(
        alice=alice,
        rows={
            "model": model.pk,
            "spare_model": make_model_spec(org, **QWEN).pk,
            "experiment": make_experiment(org, model=model).pk,
            "dataset": dataset_upload(
                org=org, actor=SYSTEM, name="chats", raw=json.dumps(SHAREGPT).encode()
            ).pk,
            "budget": budget_set(org=org, actor=SYSTEM, limit_usd=Decimal(50)).pk,
            "token": token_create(org=org, user=alice.user, name="ci", actor=SYSTEM).token.pk,
            "member": Membership.objects.get(organization=org, user=mallory.user).pk,
            "price": gpu_price_set(
                org=org,
                gpu_type=GpuType.objects.get(id=H100),
                actor=SYSTEM,
                price_secure_usd_hr=Decimal("3.00"),
                price_community_usd_hr=None,
            ).pk,
            "other_gpu": GpuType.objects.exclude(id=H100).order_by("id").first().pk,
        },
    )


def url(name: str, **kwargs) -> str:
    return reverse(name, kwargs={"org": "acme", **kwargs})


def upload() -> dict:
    return {"name": "more", "file": SimpleUploadedFile("more.json", json.dumps(SHAREGPT).encode())}


@dataclass(frozen=True)
class Write:
    """A successful API write and the one audit event it must leave."""

    event: str
    method: str
    url: Callable[[World], str]
    payload: Callable[[World], dict] | None
    kind: str  # create | update | delete | revoke | remove
    # Key of world.rows, or how to find the row; None: the row the response created.
    target: str | Callable[[World], object] | None = None
    changed: tuple[str, ...] = ()  # for updates: exactly the keys of before/after
    after: dict | None = None  # expected subset of the event's after


WRITES = {
    "member add": Write(
        "member.add",
        "post",
        lambda w: url("member-list"),
        lambda w: {"email": "Eve@acme.example", "role": "viewer"},
        "create",
        after={"user": "eve@acme.example", "role": "viewer"},
    ),
    "member role change": Write(
        "member.change_role",
        "patch",
        lambda w: url("member-detail", pk=w.rows["member"]),
        lambda w: {"role": "viewer"},
        "update",
        target="member",
        changed=("role",),
        after={"role": "viewer"},
    ),
    "member remove": Write(
        "member.remove",
        "delete",
        lambda w: url("member-detail", pk=w.rows["member"]),
        None,
        "remove",
        target="member",
        after={"tokens_revoked": 1},
    ),
    "token create": Write(
        "token.create", "post", lambda w: url("token-list"), lambda w: {"name": "deploy"}, "create"
    ),
    "token revoke": Write(
        "token.revoke",
        "delete",
        lambda w: url("token-detail", pk=w.rows["token"]),
        None,
        "revoke",
        target="token",
    ),
    "model create": Write(
        "model.create",
        "post",
        lambda w: url("model-list"),
        lambda w: MODEL_FIELDS | {"hf_repo": "google/gemma-2-9b-it"},
        "create",
        after={"hf_repo": "google/gemma-2-9b-it"},
    ),
    "model replace": Write(
        "model.update",
        "put",
        lambda w: url("model-detail", pk=w.rows["spare_model"]),
        lambda w: QWEN | {"notes": "replaced", "max_context": 65_536},
        "update",
        target="spare_model",
        changed=("max_context", "notes"),
        after={"notes": "replaced", "max_context": 65_536},
    ),
    "model patch": Write(
        "model.update",
        "patch",
        lambda w: url("model-detail", pk=w.rows["spare_model"]),
        lambda w: {"licence": "qwen-research"},
        "update",
        target="spare_model",
        changed=("licence",),
    ),
    "model delete": Write(
        "model.delete",
        "delete",
        lambda w: url("model-detail", pk=w.rows["spare_model"]),
        None,
        "delete",
        target="spare_model",
    ),
    "GPU price set": Write(
        "gpu_price.set",
        "put",
        lambda w: url("gpu-type-price", pk=w.rows["other_gpu"]),
        lambda w: {"price_community_usd_hr": "0.99", "note": "reserved"},
        "create",
        target=lambda w: GpuPriceOverride.objects.get(gpu_type_id=w.rows["other_gpu"]).pk,
        after={"price_community_usd_hr": "0.99", "note": "reserved"},
    ),
    "GPU price change": Write(
        "gpu_price.set",
        "put",
        lambda w: url("gpu-type-price", pk=H100),
        lambda w: {"price_secure_usd_hr": "2.50"},
        "update",
        target="price",
        changed=("price_secure_usd_hr",),
        after={"price_secure_usd_hr": "2.5"},
    ),
    "GPU price clear": Write(
        "gpu_price.clear",
        "delete",
        lambda w: url("gpu-type-price", pk=H100),
        None,
        "delete",
        target="price",
    ),
    "experiment create": Write(
        "experiment.create",
        "post",
        lambda w: url("experiment-list"),
        lambda w: experiment_payload(w.rows["model"]),
        "create",
    ),
    "experiment replace": Write(
        "experiment.update",
        "put",
        lambda w: url("experiment-detail", pk=w.rows["experiment"]),
        lambda w: experiment_payload(w.rows["model"], name="batching"),
        "update",
        target="experiment",
        changed=("budget_cap_usd", "serve_grid", "slos"),
    ),
    "experiment patch": Write(
        "experiment.update",
        "patch",
        lambda w: url("experiment-detail", pk=w.rows["experiment"]),
        lambda w: {"gpu_count": 2},
        "update",
        target="experiment",
        changed=("gpu_count",),
        after={"gpu_count": 2},
    ),
    "experiment delete": Write(
        "experiment.delete",
        "delete",
        lambda w: url("experiment-detail", pk=w.rows["experiment"]),
        None,
        "delete",
        target="experiment",
    ),
    "dataset upload": Write(
        "dataset.upload", "post", lambda w: url("dataset-list"), lambda w: upload(), "create"
    ),
    "dataset delete": Write(
        "dataset.delete",
        "delete",
        lambda w: url("dataset-detail", pk=w.rows["dataset"]),
        None,
        "delete",
        target="dataset",
    ),
    "budget set": Write(
        "budget.set",
        "post",
        lambda w: url("budget-list"),
        lambda w: {"month": "2025-07-01", "limit_usd": "120.00"},
        "create",
        after={"month": "2025-07-01", "limit_usd": "120"},
    ),
    "budget replace": Write(
        "budget.set",
        "post",
        lambda w: url("budget-list"),
        lambda w: {"limit_usd": "75.50", "note": "Q3"},
        "update",
        target="budget",
        changed=("limit_usd", "note"),
        after={"limit_usd": "75.5", "note": "Q3"},
    ),
    "budget delete": Write(
        "budget.delete",
        "delete",
        lambda w: url("budget-detail", pk=w.rows["budget"]),
        None,
        "delete",
        target="budget",
    ),
}


def send(client, write: Write, world: World):
    payload = write.payload(world) if write.payload else None
    options = {"REMOTE_ADDR": CALLER_IP}
    if payload is not None:
        multipart = any(hasattr(value, "read") for value in payload.values())
        options["format"] = "multipart" if multipart else "json"
    return getattr(client, write.method)(write.url(world), payload, **options)


def events_of(org) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(organization=org).order_by("seq"))


@pytest.mark.parametrize("write", list(WRITES.values()), ids=list(WRITES))
def test_it_records_one_event_per_write(world, write):
    alice = world.alice
    seen = {e.pk for e in events_of(alice.org)}
    response = send(alice.client(), write, world)
    assert response.status_code < 300, response.content
    new = [e for e in events_of(alice.org) if e.pk not in seen]
    assert len(new) == 1, [e.event for e in new]
    event = new[0]
    assert event.event == write.event
    assert event.actor_label == alice.user.email
    assert event.actor_id == alice.user.pk
    assert event.actor_via == f"api-token:{alice.token[:12]}"
    assert event.ip == CALLER_IP
    if write.target is None:
        target = response.json()["id"]
    else:
        target = write.target(world) if callable(write.target) else world.rows[write.target]
    assert event.target_id == str(target)
    if write.kind == "create":
        assert event.before is None and event.after
    elif write.kind == "update":
        assert set(event.before) == set(event.after) == set(write.changed)
        assert all(event.before[key] != event.after[key] for key in write.changed)
    elif write.kind == "delete":
        assert event.before and event.after is None
        assert str(event.before["id"]) == event.target_id
    elif write.kind == "remove":
        assert event.before == {"user": "mallory@acme.example", "role": "member"}
    else:  # revoke
        assert event.before == {"revoked_at": None} and event.after["revoked_at"]
    assert (write.after or {}).items() <= (event.after or {}).items()
    assert audit_verify(alice.org) is None


def test_it_never_audits_the_dataset_file(world):
    send(world.alice.client(), WRITES["dataset upload"], world)
    event = AuditEvent.objects.filter(organization=world.alice.org, event="dataset.upload").first()
    assert "file" not in event.after and event.after["num_conversations"] == 1


NO_OPS = {
    "member role unchanged": (
        "patch",
        lambda w: url("member-detail", pk=w.rows["member"]),
        lambda w: {"role": "member"},
    ),
    "model patch unchanged": (
        "patch",
        lambda w: url("model-detail", pk=w.rows["spare_model"]),
        lambda w: {"notes": "", "max_context": 32_768},
    ),
    "model replace unchanged": (
        "put",
        lambda w: url("model-detail", pk=w.rows["spare_model"]),
        lambda w: QWEN,
    ),
    "empty model patch": (
        "patch",
        lambda w: url("model-detail", pk=w.rows["spare_model"]),
        lambda w: {},
    ),
    "experiment patch unchanged": (
        "patch",
        lambda w: url("experiment-detail", pk=w.rows["experiment"]),
        lambda w: {"gpu_count": 1, "budget_cap_usd": "50.0"},
    ),
    "experiment replace unchanged": (
        "put",
        lambda w: url("experiment-detail", pk=w.rows["experiment"]),
        lambda w: experiment_payload(
            w.rows["model"],
            name="batching",
            serve_grid={"max_num_seqs": [64, 128]},
            slos={"ttft_ms": 500},
            budget_cap_usd="50",
        ),
    ),
    "GPU price unchanged": (
        "put",
        lambda w: url("gpu-type-price", pk=H100),
        lambda w: {"price_secure_usd_hr": "3"},
    ),
    "GPU price clear without a price": (
        "delete",
        lambda w: url("gpu-type-price", pk=w.rows["other_gpu"]),
        None,
    ),
    "budget unchanged": ("post", lambda w: url("budget-list"), lambda w: {"limit_usd": "50.00"}),
}


@pytest.mark.parametrize(("method", "where", "payload"), list(NO_OPS.values()), ids=list(NO_OPS))
def test_it_records_nothing_for_a_no_op(world, method, where, payload):
    before = database_state()
    data = payload(world) if payload else None
    response = getattr(world.alice.client(), method)(where(world), data, format="json")
    assert response.status_code < 300, response.content
    assert database_state() == before


def test_it_records_a_revocation_once(world):
    client = world.alice.client()
    where = url("token-detail", pk=world.rows["token"])
    assert client.delete(where).status_code == 200
    before = database_state()
    again = client.delete(where)
    assert again.status_code == 200 and again.json()["is_active"] is False
    assert database_state() == before


# ------------------------------------------------------------------------------------------
# Reading the log: filters and exports
# ------------------------------------------------------------------------------------------


@pytest.fixture
def busy_log(world):
    """The world's setup events (by the system) plus one of every API write by alice."""
    client = world.alice.client()
    for name in ("token create", "token revoke", "model create", "budget set", "member add"):
        assert send(client, WRITES[name], world).status_code < 300
    return events_of(world.alice.org)


def listed(world, **params) -> list[dict]:
    response = world.alice.client().get(url("audit-list"), {"page_size": 200, **params})
    assert response.status_code == 200, response.content
    return response.json()["results"]


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"event": "token.create"}, lambda e: e.event == "token.create"),
        ({"event": "token."}, lambda e: e.event.startswith("token.")),
        ({"event": "token"}, lambda e: False),  # a noun alone is not an event name
        ({"actor": "alice@acme.example"}, lambda e: e.actor_label == "alice@acme.example"),
        ({"actor": "tests"}, lambda e: e.actor_label == "tests"),
        (
            {"event": "token.", "actor": "alice@acme.example"},
            lambda e: e.event.startswith("token.") and e.actor_label == "alice@acme.example",
        ),
        ({"target_type": "budget"}, lambda e: e.target_type == "budget"),
    ],
    ids=["event", "event prefix", "bare noun", "actor", "system actor", "combined", "target"],
)
def test_it_filters_the_log(world, busy_log, params, expected):
    want = [e.seq for e in reversed(busy_log) if expected(e)]
    assert [row["seq"] for row in listed(world, **params)] == want
    assert len(want) < len(busy_log)  # the filter did filter


def test_it_filters_the_log_by_time(world, busy_log):
    middle = busy_log[len(busy_log) // 2].created_at
    since = {row["seq"] for row in listed(world, since=middle.isoformat())}
    until = {row["seq"] for row in listed(world, until=middle.isoformat())}
    assert since == {e.seq for e in busy_log if e.created_at >= middle}
    assert until == {e.seq for e in busy_log if e.created_at < middle}
    assert since and until and since.isdisjoint(until)
    later = middle + datetime.timedelta(days=1)
    assert listed(world, since=later.isoformat()) == []


@pytest.mark.parametrize("params", [{"since": "yesterday"}, {"until": "2025-13-45"}])
def test_it_refuses_a_malformed_time_filter(world, params):
    response = world.alice.client().get(url("audit-list"), params)
    assert response.status_code == 400
    assert list(params) == list(response.json()["error"]["fields"])


def test_it_lists_the_chain_hashes(world, busy_log):
    rows = listed(world)
    assert [row["seq"] for row in rows] == [e.seq for e in reversed(busy_log)]
    for row, event in zip(rows, reversed(busy_log), strict=True):
        assert (row["hash"], row["prev_hash"]) == (event.hash, event.prev_hash)


def _export(world, file_format, **params):
    response = world.alice.client().get(url("audit-export"), {"as": file_format, **params})
    assert response.status_code == 200
    return response, b"".join(response.streaming_content).decode()


def _check_chain(rows: list[dict], events: list[AuditEvent]) -> None:
    assert [int(row["seq"]) for row in rows] == [e.seq for e in events]  # oldest first
    assert rows[0]["prev_hash"] == GENESIS_HASH
    for previous, row in itertools.pairwise(rows):
        assert row["prev_hash"] == previous["hash"]
    assert [row["hash"] for row in rows] == [e.hash for e in events]


def test_it_exports_the_log_as_csv(world, busy_log):
    response, text = _export(world, "csv")
    assert response["Content-Type"].startswith("text/csv")
    assert 'filename="audit-acme.csv"' in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(text)))
    _check_chain(rows, busy_log)
    member_add = next(
        row for row in rows if (row["event"], row["actor"]) == ("member.add", "alice@acme.example")
    )
    assert json.loads(member_add["after"]) == {"user": "eve@acme.example", "role": "viewer"}
    assert member_add["actor"] == "alice@acme.example"
    assert member_add["via"] == f"api-token:{world.alice.token[:12]}"


def test_it_exports_the_log_as_json_lines(world, busy_log):
    response, text = _export(world, "json")
    assert response["Content-Type"].startswith("application/x-ndjson")
    rows = [json.loads(line) for line in text.splitlines()]
    _check_chain(rows, busy_log)
    assert {row["event"] for row in rows} >= {"token.create", "budget.set", "member.add"}


@pytest.mark.parametrize("file_format", ["csv", "json"])
def test_it_exports_only_the_filtered_events(world, busy_log, file_format):
    _, text = _export(world, file_format, event="token.")
    if file_format == "csv":
        rows = list(csv.DictReader(io.StringIO(text)))
    else:
        rows = [json.loads(line) for line in text.splitlines()]
    assert [row["event"] for row in rows] == [
        e.event for e in busy_log if e.event.startswith("token.")
    ]
    assert {row["hash"] for row in rows} <= {e.hash for e in busy_log}


def test_it_refuses_an_unknown_export_format(world):
    response = world.alice.client().get(url("audit-export"), {"as": "xml"})
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["as"]


def test_it_still_verifies_after_every_kind_of_write(world):
    client = world.alice.client()
    for write in WRITES.values():
        response = send(client, write, world)
        assert response.status_code < 300, (write.event, response.content)
    assert len({e.event for e in events_of(world.alice.org)}) >= 15
    assert audit_verify(world.alice.org) is None
    out = io.StringIO()
    call_command("audit_verify", "--org", "acme", stdout=out)
    assert "acme: ok" in out.getvalue()


def test_it_offers_no_way_to_change_the_log(world, busy_log):
    client = world.alice.client()
    for method in ("post", "put", "patch", "delete"):
        assert getattr(client, method)(url("audit-list"), {}, format="json").status_code == 405
    before = database_state()
    assert client.delete(f"{url('audit-list')}{busy_log[0].pk}/").status_code == 404
    assert database_state() == before


# ------------------------------------------------------------------------------------------
# A token is shown once
# ------------------------------------------------------------------------------------------


def test_it_shows_a_token_only_in_the_response_that_created_it(world):
    client = world.alice.client()
    created = client.post(
        url("token-list"), {"name": "deploy", "user": "mallory@acme.example"}, format="json"
    )
    assert created.status_code == 201
    raw = created.json()["token"]
    assert raw.startswith("bsk_") and created.json()["prefix"] == raw[:12]
    token_id = created.json()["id"]
    stored = ApiToken.objects.get(pk=token_id)
    assert stored.token_hash == token_digest(raw)

    # It works, as mallory, in acme.
    used = APIClient()
    used.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert used.get(url("model-list")).status_code == 200

    secrets = (raw, raw[12:], token_digest(raw))
    later = [
        client.get(url("token-list"), {"page_size": 200}),
        client.get(url("token-detail", pk=token_id)),
        client.delete(url("token-detail", pk=token_id)),
        client.get(url("audit-list"), {"page_size": 200}),
        client.get(url("member-list")),
    ]
    for response in later:
        assert response.status_code == 200
        assert "token" not in (response.json().get("results") or [response.json()])[0]
        assert not any(secret in response.content.decode() for secret in secrets)
    for file_format in ("csv", "json"):
        _, text = _export(world, file_format)
        assert not any(secret in text for secret in secrets)
    for event in AuditEvent.objects.all():
        text = json.dumps([event.before, event.after, event.target_repr])
        assert not any(secret in text for secret in secrets)
    # Nor does any column anywhere hold it in clear.
    assert raw not in json.dumps(database_state(), default=str)


def test_it_never_returns_a_token_that_is_not_new(world):
    client = world.alice.client()
    rows = client.get(url("token-list"), {"page_size": 200}).json()["results"]
    assert rows and all("token" not in row and "token_hash" not in row for row in rows)
    assert {row["prefix"] for row in rows} >= {world.alice.token[:12]}
    assert all(world.alice.token not in json.dumps(row) for row in rows)
