"""Notifications (issue 20): an organization's webhooks (JSON, HMAC-signed with the hook's own
secret, retried with backoff, every attempt in the delivery log), Slack-compatible incoming
webhooks and e-mail, told of runs that end, promotions and budget use; a receiver on
127.0.0.1 checks every signature. Addresses inward are refused unless the operator allows
them; no secret reaches a page, the delivery log or a log line."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time
from decimal import ROUND_DOWN, Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail
from django.utils import timezone

from runs.costs import month_start
from runs.models import (
    Budget,
    ModelSpec,
    Notification,
    NotificationDelivery,
    NotificationHook,
    Run,
)
from runs.secrets import decrypt_secret
from runs.selectors.spend import org_month_spend_usd
from runs.services.notifications.delivery import BACKOFF_SECONDS, MAX_ATTEMPTS, delivery_attempt
from runs.services.notifications.events import notify_budget_use, notify_run_ended
from runs.services.notifications.hooks import hook_create
from runs.services.run_tokens import run_token_issue

from .conftest import SYSTEM, frozen, make_experiment, make_model, signed_in
from .db_state import database_state
from .report_data import build_history
from .test_agent_ingest import messages
from .test_notification_recipients import addresses_confirmed
from .test_promotions import approve, propose
from .test_web_runs import answered_run

pytestmark = pytest.mark.django_db


class Receiver:
    """An HTTP receiver on 127.0.0.1: keeps every request, answers the next of ``statuses``
    (then 200), and checks each webhook's signature against ``secret`` when it is set."""

    def __init__(self):
        self.requests: list[dict] = []
        self.statuses: list[int] = []
        self.secret: str | None = None
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/s3cr3t-path"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def verified(self, request: dict) -> dict:
        """The body of a webhook request whose signature holds (and is recent)."""
        header = request["headers"]["X-Benchsite-Signature"]
        parts = dict(part.split("=", 1) for part in header.split(","))
        signed = f"{parts['t']}.".encode() + request["body"]
        expected = hmac.new(self.secret.encode(), signed, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(parts["v1"], expected)
        assert abs(time.time() - int(parts["t"])) < 60
        return json.loads(request["body"])


@pytest.fixture
def receiver(settings):
    settings.BENCHSITE_OUTBOUND_PRIVATE_HOSTS = ["127.0.0.1"]
    running = Receiver()
    yield running
    running.server.shutdown()


def webhook(org, receiver, events=("run.finished", "run.failed"), name="ci"):
    created = hook_create(
        org=org, actor=SYSTEM, name=name, kind="webhook", events=list(events), url=receiver.url
    )
    receiver.secret = created.secret
    return created.hook


def finished_run(org, *, agent_outcome="succeeded"):
    """A run whose agent reports one trial and its end (through the agent's REST batch)."""
    from rest_framework.test import APIClient

    model = ModelSpec.objects.filter(organization=org).first() or make_model(org)
    experiment = make_experiment(org, model=model, name=f"exp-{time.time_ns()}")
    run = Run.objects.create(organization=org, experiment=experiment, **frozen(experiment))
    token = run_token_issue(run=run)
    batch = messages(run.id)
    batch[-1] = batch[-1] | {"outcome": agent_outcome}
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")

    def post():
        return agent.post(
            f"/api/v1/agent/runs/{run.id}/messages/", {"messages": batch}, format="json"
        )

    return run, post


def test_a_run_that_ends_is_posted_once_signed_to_its_webhook(alice, receiver, sent):
    webhook(alice.org, receiver)
    run, post = finished_run(alice.org)
    assert sent(post).status_code == 200
    (request,) = receiver.requests
    body = receiver.verified(request)
    assert request["headers"]["X-Benchsite-Event"] == "run.finished" == body["event"]
    assert request["headers"]["X-Benchsite-Delivery"] == body["id"]
    assert body["organization"] == "acme"
    assert body["data"]["run"] == str(run.id) and body["data"]["state"] == "succeeded"
    assert body["data"]["url"].endswith(f"/o/acme/runs/{run.id}/")
    assert f"Run {str(run.id)[:8]} of “{run.experiment.name}” succeeded" in body["summary"]
    # The agent sends its messages again: the fact was told once.
    assert sent(post).status_code == 200
    assert len(receiver.requests) == 1 and Notification.objects.count() == 1
    (delivery,) = NotificationDelivery.objects.all()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("delivered", 1, 200)


def test_a_hook_is_told_only_the_events_it_asked_for(alice, receiver, sent):
    webhook(alice.org, receiver, events=("run.failed",))
    _, post = finished_run(alice.org)
    sent(post)
    assert receiver.requests == [] and NotificationDelivery.objects.count() == 0
    _, post = finished_run(alice.org, agent_outcome="failed")
    sent(post)
    (request,) = receiver.requests
    assert receiver.verified(request)["event"] == "run.failed"


def test_a_failing_receiver_is_retried_and_every_attempt_logged(alice, receiver, sent, caplog):
    hook = webhook(alice.org, receiver)
    receiver.statuses = [500, 503]
    _, post = finished_run(alice.org)
    caplog.set_level(logging.INFO)  # the site's default level: nothing secret at it
    sent(post)  # in process, each retry follows at once (its countdown is the worker's)
    assert len(receiver.requests) == 3
    ids = {receiver.verified(request)["id"] for request in receiver.requests}
    assert len(ids) == 1  # one delivery, retried
    (delivery,) = NotificationDelivery.objects.all()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("delivered", 3, 200)
    receiver.statuses = [500] * MAX_ATTEMPTS
    _, post = finished_run(alice.org)
    sent(post)
    failed = NotificationDelivery.objects.exclude(pk=delivery.pk).get()
    assert (failed.status, failed.attempts, failed.last_error) == (
        "failed",
        MAX_ATTEMPTS,
        "HTTP 500",
    )
    # The page's delivery log shows both; no secret or URL path anywhere.
    page = signed_in(alice).get("/o/acme/settings/notifications/").content.decode()
    assert "Delivered" in page and "Failed (no attempt left)" in page and "HTTP 500" in page
    secret = decrypt_secret(hook.encrypted_secret)
    for text in (page, caplog.text):
        assert "s3cr3t-path" not in text and secret not in text
    assert "attempt 1 HTTP 500" in caplog.text


def test_retries_back_off_exponentially(alice, receiver, django_capture_on_commit_callbacks):
    webhook(alice.org, receiver)
    receiver.statuses = [500] * MAX_ATTEMPTS
    _, post = finished_run(alice.org)
    with django_capture_on_commit_callbacks(execute=False):  # no task: attempted by hand
        post()
    (delivery,) = NotificationDelivery.objects.all()
    waits = [delivery_attempt(delivery.id) for _ in range(MAX_ATTEMPTS)]
    assert waits == [BACKOFF_SECONDS * 2**n for n in range(MAX_ATTEMPTS - 1)] + [None]
    delivery.refresh_from_db()
    assert delivery.status == "failed" and delivery.attempts == MAX_ATTEMPTS


def test_slack_and_email_hooks_get_their_own_formats(alice, receiver, sent, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    hook_create(
        org=alice.org,
        actor=SYSTEM,
        name="slack",
        kind="slack",
        events=["run.finished"],
        url=receiver.url,
    )
    mailed = hook_create(
        org=alice.org,
        actor=SYSTEM,
        name="mail",
        kind="email",
        events=["run.finished"],
        email_to="ops@acme.example, lead@acme.example",
    ).hook
    addresses_confirmed(mailed)  # test_notification_recipients.py: until then, none is sent
    run, post = finished_run(alice.org)
    sent(post)
    (request,) = receiver.requests
    assert "X-Benchsite-Signature" not in request["headers"]
    text = json.loads(request["body"])["text"]
    assert text.startswith("[Benchsite · Acme] Run ") and "succeeded" in text
    (message,) = mail.outbox
    assert message.to == ["ops@acme.example", "lead@acme.example"]
    assert message.subject.startswith("[Benchsite · Acme] Run ")
    assert str(run.id) in message.body


def test_send_test_from_the_page_and_the_secret_shown_once(alice, receiver, sent):
    client = signed_in(alice)
    form = {
        "name": "ci",
        "kind": "webhook",
        "url": receiver.url,
        "events": ["run.finished", "promotion.approved"],
    }
    page = client.post("/o/acme/settings/notifications/", form).content.decode()
    hook = NotificationHook.objects.get()
    secret = decrypt_secret(hook.encrypted_secret)
    assert secret in page and "Copy it now" in page
    assert secret not in client.get("/o/acme/settings/notifications/").content.decode()
    # Stored encrypted: neither the secret nor the URL's path is in any column.
    assert secret not in json.dumps(database_state(), default=str)
    assert "s3cr3t-path" not in json.dumps(database_state(), default=str)
    receiver.secret = secret
    sent(lambda: client.post(f"/o/acme/settings/notifications/{hook.id}/test/"))
    (request,) = receiver.requests
    assert receiver.verified(request)["event"] == "test"
    page = client.get("/o/acme/settings/notifications/").content.decode()
    assert "Test of the hook “ci”" in page and "Delivered" in page


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"url": "http://127.0.0.1:9/x"}, "url", "private, loopback or link-local"),
        ({"url": "http://10.1.2.3/x"}, "url", "private, loopback or link-local"),
        ({"url": "ftp://example.com/x"}, "url", "http:// or https://"),
        ({"url": "https://user:pw@example.com/x"}, "url", "no user name or password"),
        ({"events": ["run.exploded"]}, "events", "Unknown event &#x27;run.exploded&#x27;"),
        ({"events": []}, "events", "Choose at least one event"),
        ({"kind": "email", "email_to": "not-an-address"}, "email_to", "is not an e-mail"),
        ({"name": ""}, "name", "1 to 100 characters"),
    ],
    ids=["loopback", "private", "scheme", "credentials", "event", "no-event", "email", "name"],
)
def test_a_bad_hook_is_refused_by_field_and_nothing_is_stored(alice, change, field, message):
    form = {
        "name": "x",
        "kind": "webhook",
        "url": "https://example.com/x",
        "events": ["run.finished"],
    } | change
    before = database_state()
    response = signed_in(alice).post("/o/acme/settings/notifications/", form)
    assert response.status_code == 200
    html = response.content.decode()
    errors = html[html.index(f'id="id_{field}-errors"') :]
    assert message in errors[: errors.index("</ul>")]
    assert database_state() == before


def test_only_owners_and_admins_see_or_change_hooks(mallory, bob, charlie, alice, receiver):
    hook = webhook(alice.org, receiver)
    for person in (mallory, bob):
        client = signed_in(person)
        assert client.get("/o/acme/settings/notifications/").status_code == 403
        assert client.post(f"/o/acme/settings/notifications/{hook.id}/delete/").status_code == 403
    outsider = signed_in(charlie)
    assert outsider.post(f"/o/acme/settings/notifications/{hook.id}/test/").status_code == 404
    assert NotificationHook.objects.filter(pk=hook.pk).exists()


def test_promotions_and_budget_use_are_told(alice, receiver, sent):
    webhook(
        alice.org,
        receiver,
        events=(
            "promotion.proposed",
            "promotion.approved",
            "budget.80_percent",
            "budget.100_percent",
        ),
    )
    history = build_history(alice.org)
    promotion = sent(lambda: propose(alice, history.t64))
    from .conftest import _person

    admin = _person("ada@acme.example", alice.org, "admin")
    sent(lambda: approve(admin, promotion))
    events = [receiver.verified(r)["event"] for r in receiver.requests]
    assert events == ["promotion.proposed", "promotion.approved"]
    # The month's budget: told at 80 % and at 100 %, each once however often it is checked.
    Run.objects.filter(organization=alice.org).update(created_at=timezone.now())
    month = month_start(timezone.now())
    spent = org_month_spend_usd(org=alice.org, month=month)
    assert spent > 0
    Budget.objects.create(organization=alice.org, limit_usd=Decimal(spent) / Decimal("0.9"))
    for _ in range(2):
        sent(lambda: notify_budget_use(org=alice.org, month=month))
    told = [receiver.verified(r) for r in receiver.requests[2:]]
    assert [body["event"] for body in told] == ["budget.80_percent"]
    assert told[0]["data"]["share"] == 80
    # A budget lowered to what is spent: 80 % and 100 % of this limit are new facts.
    Budget.objects.update(limit_usd=spent.quantize(Decimal("0.01"), rounding=ROUND_DOWN))
    sent(lambda: notify_budget_use(org=alice.org, month=month))
    events = [receiver.verified(r)["event"] for r in receiver.requests[3:]]
    assert events == ["budget.80_percent", "budget.100_percent"]


def test_hooks_over_the_api_for_pipelines(alice, mallory, charlie, receiver, sent):
    api = "/api/v1/orgs/acme/notification-hooks/"
    client = alice.client()
    body = {"name": "ci", "kind": "webhook", "url": receiver.url, "events": ["run.failed"]}
    response = client.post(api, body, format="json")
    assert response.status_code == 201, response.content
    created = response.json()
    receiver.secret = created["secret"]
    assert created["url_host"].startswith("127.0.0.1:") and created["events"] == ["run.failed"]
    listed = client.get(api).json()["results"]
    assert [hook["id"] for hook in listed] == [created["id"]]
    assert "secret" not in listed[0] and "s3cr3t-path" not in json.dumps(listed)
    test = sent(lambda: client.post(f"{api}{created['id']}/test/"))
    assert test.status_code == 202
    (delivery,) = client.get(f"{api}{created['id']}/deliveries/").json()
    assert (delivery["event"], delivery["status"], delivery["last_status_code"]) == (
        "test",
        "delivered",
        200,
    )
    assert receiver.verified(receiver.requests[0])["event"] == "test"
    # Refused by field, nothing stored; members may not; other organizations do not see it.
    before = database_state()
    bad = client.post(api, body | {"url": "http://10.0.0.1/x", "name": "other"}, format="json")
    assert bad.status_code == 400 and "url" in bad.json()["error"]["fields"]
    assert database_state() == before
    assert mallory.client().get(api).status_code == 403
    assert (
        charlie.client().get(f"/api/v1/orgs/acme/notification-hooks/{created['id']}/").status_code
        == 404
    )
    assert client.delete(f"{api}{created['id']}/").status_code == 204
    assert not NotificationHook.objects.exists()


def test_a_finished_run_tells_its_answer(alice, receiver, sent):
    webhook(alice.org, receiver, events=("run.finished",))
    run = answered_run(alice.org)
    run.state = "succeeded"
    sent(lambda: notify_run_ended(run))
    body = receiver.verified(receiver.requests[0])
    winner = body["data"]["answer"]["winner"]
    assert winner["trial"] == 1 and winner["capacity"] == 31
    assert winner["serve_command"].startswith("vllm serve ")
    label, price = winner["label"], winner["usd_per_million"]
    assert (
        f"— best: {label} (concurrency 31 at the SLOs, {price} per 1M output tokens)"
        in (body["summary"])
    )
