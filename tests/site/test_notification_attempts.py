"""Every attempt at a delivery ends in the delivery log (issue 32, finding 7): a hook whose
stored name holds a new line (from before names were checked) is mailed with a one-line
subject, an attempt that fails in any way counts as a failed attempt and is never left
pending for the sweep to send again, and a name with control characters is refused on its
field by the API and the page."""

from __future__ import annotations

import datetime
import logging

import pytest
from django.core import mail
from django.core.mail.backends.base import BaseEmailBackend
from django.utils import timezone

from runs.models import DeliveryStatus, NotificationHook
from runs.services.notifications.delivery import MAX_ATTEMPTS, deliveries_due, delivery_attempt
from runs.services.notifications.hooks import hook_send_test

from .conftest import SYSTEM, signed_in
from .db_state import database_state
from .test_notification_recipients import addresses_confirmed

pytestmark = pytest.mark.django_db

SECRET_WORDS = "smtp-password-hunter2"


class FailingBackend(BaseEmailBackend):
    """An e-mail backend that fails as no one planned: not with an OSError."""

    def send_messages(self, email_messages):
        raise ValueError(f"the relay said no ({SECRET_WORDS})")


def email_hook(org, name: str) -> NotificationHook:
    """A hook written as it is stored, past the checks a new one goes through, its address
    confirmed."""
    return addresses_confirmed(
        NotificationHook.objects.create(
            organization=org,
            name=name,
            kind="email",
            events=["run.finished"],
            email_to="ops@acme.example",
        )
    )


def test_a_hook_named_over_two_lines_is_mailed_with_a_one_line_subject(
    alice, settings, django_capture_on_commit_callbacks
):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    hook = email_hook(alice.org, "ops\r\nBcc: everyone@elsewhere.example\x0b")
    with django_capture_on_commit_callbacks(execute=False):  # attempted by hand below
        delivery = hook_send_test(hook=hook, actor=SYSTEM)
    assert delivery_attempt(delivery.id) is None
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_error) == ("delivered", 1, "")
    (message,) = mail.outbox
    assert message.subject.isprintable()
    assert "ops Bcc: everyone@elsewhere.example" in message.subject
    assert (message.to, message.bcc, message.cc) == (["ops@acme.example"], [], [])
    assert deliveries_due(now=timezone.now() + datetime.timedelta(days=1)) == []


def test_an_attempt_that_fails_in_any_way_counts_and_names_no_secret(
    alice, settings, caplog, django_capture_on_commit_callbacks
):
    settings.EMAIL_BACKEND = f"{__name__}.FailingBackend"
    hook = email_hook(alice.org, "ops")
    with django_capture_on_commit_callbacks(execute=False):
        delivery = hook_send_test(hook=hook, actor=SYSTEM)
    caplog.set_level(logging.INFO)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        retry_in = delivery_attempt(delivery.id)
        delivery.refresh_from_db()
        assert delivery.attempts == attempt
        assert delivery.last_error == "the attempt failed (ValueError)"
        assert (retry_in is None) == (attempt == MAX_ATTEMPTS)
    assert delivery.status == DeliveryStatus.FAILED
    assert SECRET_WORDS not in caplog.text
    assert "attempt 6 the attempt failed (ValueError)" in caplog.text


@pytest.mark.parametrize("name", ["ops\nteam", "ops\tteam", "ops\x1bteam", "ops\u2028team"])
def test_the_api_refuses_a_hook_name_with_control_characters(alice, name):
    before = database_state()
    response = alice.client().post(
        "/api/v1/orgs/acme/notification-hooks/",
        {"name": name, "kind": "email", "events": ["run.finished"], "email_to": "ops@acme.example"},
        format="json",
    )
    assert response.status_code == 400, response.content
    (message,) = response.json()["error"]["fields"]["name"]
    assert "control characters" in message
    assert database_state() == before


def test_the_page_refuses_a_hook_name_with_control_characters(alice):
    before = database_state()
    form = {
        "name": "ops\nBcc: everyone@elsewhere.example",
        "kind": "email",
        "email_to": "ops@acme.example",
        "events": ["run.finished"],
    }
    response = signed_in(alice).post("/o/acme/settings/notifications/", form)
    assert response.status_code == 200
    html = response.content.decode()
    errors = html[html.index('id="id_name-errors"') :]
    assert "control characters" in errors[: errors.index("</ul>")]
    assert database_state() == before
