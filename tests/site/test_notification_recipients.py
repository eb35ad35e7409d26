"""An e-mail hook writes only to addresses that confirmed it (issue 32, finding 5): each
address is first sent a mail of fixed words (the organization's and the hook's names its only
words a person chose) with a link signed for that address of that hook; until it is followed
and confirmed, no notification or test goes there and the delivery log says "awaiting
confirmation". The link's page needs no sign-in, confirms that address of that hook only,
and confirming twice is confirming once. Confirmation rounds count as tests do."""

from __future__ import annotations

import re
import time

import pytest
from django.core import mail
from django.test import Client

from runs.models import AuditEvent, ConfirmedRecipient, NotificationHook
from runs.services.notifications.outbox import notify

from .conftest import signed_in
from .db_state import database_state

pytestmark = pytest.mark.django_db

API = "/api/v1/orgs/acme/notification-hooks/"
LINK = re.compile(r"http://testserver(/notifications/confirm/[^/\s]+/)")
CONFIRMATION_TEXT = """\
The organization “Acme” on Benchsite added this address to its notification hook “ops”.

Nothing is sent to this address until it is confirmed. To receive the hook's notifications,
open this link and confirm:

<link>

If you did not expect this mail, ignore it.
"""


@pytest.fixture(autouse=True)
def mail_here(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.BENCHSITE_PUBLIC_URL = "http://testserver"


def addresses_confirmed(hook: NotificationHook) -> NotificationHook:
    """``hook`` with every address it lists confirmed, as if each had followed its link."""
    for address in hook.email_to.split(", "):
        ConfirmedRecipient.objects.create(
            organization_id=hook.organization_id, hook=hook, address=address
        )
    return hook


def email_hook(person, sent, name="ops", to="ops@acme.example, lead@acme.example") -> dict:
    body = {"name": name, "kind": "email", "email_to": to, "events": ["run.failed"]}
    response = sent(lambda: person.client().post(API, body, format="json"))
    assert response.status_code == 201, response.json()
    return response.json()


def links(messages) -> dict[str, str]:
    """Each message's confirmation link (its path), by the one address it went to."""
    found = {}
    for message in messages:
        (address,) = message.to
        found[address] = LINK.search(message.body).group(1)
    return found


def deliveries(person, hook_id) -> list[dict]:
    return person.client().get(f"{API}{hook_id}/deliveries/").json()


def run_failed(org, sent, n: int):
    sent(
        lambda: notify(
            org_id=org.id,
            event="run.failed",
            key=f"run.end:{n}",
            summary=f"Run {n} failed",
            data={"n": n},
        )
    )


def test_addresses_are_asked_first_and_written_to_only_once_they_confirm(alice, sent):
    hook = email_hook(alice, sent)
    # One mail to each address, of fixed words, each with its own link.
    assert sorted(message.to[0] for message in mail.outbox) == [
        "lead@acme.example",
        "ops@acme.example",
    ]
    asked = links(mail.outbox)
    assert asked["ops@acme.example"] != asked["lead@acme.example"]
    for message in mail.outbox:
        assert message.subject == "Confirm notifications from Benchsite"
        assert LINK.sub("<link>", message.body) == CONFIRMATION_TEXT
    (log,) = deliveries(alice, hook["id"])
    assert (log["event"], log["status"]) == ("hook.confirm", "delivered")
    assert log["last_error"] == "confirmation asked of ops@acme.example, lead@acme.example"
    assert hook["awaiting_confirmation"] == ["ops@acme.example", "lead@acme.example"]

    # Until they confirm: a notification goes nowhere, for good; a test asks them again.
    mail.outbox.clear()
    run_failed(alice.org, sent, 1)
    assert mail.outbox == []
    failed = deliveries(alice, hook["id"])[0]
    assert (failed["event"], failed["status"], failed["attempts"]) == ("run.failed", "failed", 1)
    assert failed["last_error"] == ("awaiting confirmation: ops@acme.example, lead@acme.example")
    assert sent(lambda: alice.client().post(f"{API}{hook['id']}/test/")).status_code == 202
    assert [message.subject for message in mail.outbox] == [
        "Confirm notifications from Benchsite"
    ] * 2
    test = deliveries(alice, hook["id"])[0]
    assert (test["event"], test["status"]) == ("test", "delivered")
    assert test["last_error"] == (
        "awaiting confirmation: ops@acme.example, lead@acme.example (asked again)"
    )

    # The page needs no sign-in; opening it confirms nothing (mail scanners open links).
    anyone = Client()
    page = anyone.get(asked["ops@acme.example"])
    assert page.status_code == 200
    text = page.content.decode()
    assert "ops@acme.example" in text and "“ops”" in text and "Acme" in text
    assert "lead@acme.example" not in text and "is confirmed" not in text
    mail.outbox.clear()
    run_failed(alice.org, sent, 2)
    assert mail.outbox == []
    # Confirming twice is confirming once.
    for _ in range(2):
        confirmed = anyone.post(asked["ops@acme.example"])
        assert confirmed.status_code == 200
        assert "ops@acme.example</strong> is confirmed" in confirmed.content.decode()
    assert AuditEvent.objects.filter(event="notification_hook.confirm_recipient").count() == 1
    run_failed(alice.org, sent, 3)
    (message,) = mail.outbox
    assert message.to == ["ops@acme.example"] and message.subject.endswith("Run 3 failed")
    told = deliveries(alice, hook["id"])[0]
    assert (told["status"], told["last_error"]) == (
        "delivered",
        "awaiting confirmation: lead@acme.example",
    )
    listed = alice.client().get(f"{API}{hook['id']}/").json()
    assert listed["awaiting_confirmation"] == ["lead@acme.example"]
    page = signed_in(alice).get("/o/acme/settings/notifications/").content.decode()
    assert 'lead@acme.example <span class="muted">(awaiting confirmation)</span>' in page
    assert 'ops@acme.example <span class="muted">(awaiting' not in page


def test_a_link_confirms_its_own_address_of_its_own_hook_only(alice, charlie, sent):
    first = email_hook(alice, sent, name="ops", to="ops@acme.example")
    first_link = links(mail.outbox)["ops@acme.example"]
    mail.outbox.clear()
    second = email_hook(alice, sent, name="ops 2", to="ops@acme.example")
    second_link = links(mail.outbox)["ops@acme.example"]
    anyone = Client()
    assert anyone.post(first_link).status_code == 200
    assert alice.client().get(f"{API}{first['id']}/").json()["awaiting_confirmation"] == []
    assert alice.client().get(f"{API}{second['id']}/").json()["awaiting_confirmation"] == [
        "ops@acme.example"
    ]
    # A link altered, or of a hook that is gone, confirms nothing.
    before = database_state()
    token = second_link.split("/")[-2]
    for bad in (token[:-1] + ("A" if token[-1] != "A" else "B"), token + "x", "nonsense"):
        assert anyone.post(f"/notifications/confirm/{bad}/").status_code == 404
    assert database_state() == before
    NotificationHook.objects.filter(id=second["id"]).delete()
    assert anyone.get(second_link).status_code == 404
    assert anyone.post(second_link).status_code == 404


def test_a_link_expires_after_a_week(alice, sent, monkeypatch):
    hook = email_hook(alice, sent, to="ops@acme.example")
    link = links(mail.outbox)["ops@acme.example"]
    later = time.time() + 8 * 24 * 3600
    monkeypatch.setattr("django.core.signing.time.time", lambda: later)
    page = Client().post(link)
    assert page.status_code == 404
    assert "expired" in page.content.decode() or "not valid" in page.content.decode()
    assert alice.client().get(f"{API}{hook['id']}/").json()["awaiting_confirmation"] == [
        "ops@acme.example"
    ]


def test_confirmation_rounds_count_as_tests(alice, settings, sent):
    settings.BENCHSITE_ORG_HOOK_TESTS_PER_HOUR = 2
    email_hook(alice, sent, name="a", to="a@acme.example")
    email_hook(alice, sent, name="b", to="b@acme.example")
    mail.outbox.clear()
    before = database_state()
    body = {"name": "c", "kind": "email", "email_to": "c@acme.example", "events": ["run.failed"]}
    refused = sent(lambda: alice.client().post(API, body, format="json"))
    assert refused.status_code == 429
    assert "try again after" in refused.json()["error"]["message"]
    assert database_state() == before and mail.outbox == []


def test_web_and_slack_hooks_need_no_confirmation(alice, sent, settings):
    settings.BENCHSITE_OUTBOUND_PRIVATE_HOSTS = ["127.0.0.1"]
    body = {"name": "ci", "kind": "slack", "url": "http://127.0.0.1:9/x", "events": ["run.failed"]}
    created = sent(lambda: alice.client().post(API, body, format="json")).json()
    assert created["awaiting_confirmation"] == [] and mail.outbox == []
    assert deliveries(alice, created["id"]) == []  # nothing asked, nothing to confirm
