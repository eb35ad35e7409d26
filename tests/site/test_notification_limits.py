"""What one organization may ask of the notifications (issue 32, finding 5): at most
``BENCHSITE_MAX_HOOKS_PER_ORG`` hooks (a refused one is a 409 and stores nothing), and at most
so many tests (and confirmation rounds, ``test_notification_recipients.py``) per hook and per
organization an hour: more are refused with a 429 that says when to try again, and nothing is
sent or stored."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from runs.models import Notification, NotificationDelivery, NotificationHook
from runs.services.notifications.hooks import hook_create

from .conftest import SYSTEM, signed_in
from .db_state import database_state

pytestmark = pytest.mark.django_db

API = "/api/v1/orgs/acme/notification-hooks/"
PAGE = "/o/acme/settings/notifications/"


@pytest.fixture
def local_hooks(settings):
    """Hooks may name 127.0.0.1 (nothing listens on port 9: nothing is sent anywhere)."""
    settings.BENCHSITE_OUTBOUND_PRIVATE_HOSTS = ["127.0.0.1"]


def slack_hook(org, name: str) -> NotificationHook:
    return hook_create(
        org=org,
        actor=SYSTEM,
        name=name,
        kind="slack",
        events=["run.failed"],
        url="http://127.0.0.1:9/hook",
    ).hook


def test_an_organization_holds_no_more_hooks_than_the_cap(alice, charlie, settings, local_hooks):
    settings.BENCHSITE_MAX_HOOKS_PER_ORG = 3
    for n in range(3):
        slack_hook(alice.org, f"hook {n}")
    before = database_state()
    body = {
        "name": "one more",
        "kind": "slack",
        "url": "http://127.0.0.1:9/hook",
        "events": ["run.failed"],
    }
    response = alice.client().post(API, body, format="json")
    assert response.status_code == 409, response.json()
    message = response.json()["error"]["message"]
    assert "3 hooks" in message and "delete one" in message
    page = signed_in(alice).post(PAGE, body)
    assert page.status_code == 200
    assert "3 hooks" in page.content.decode()  # in the form's error summary
    assert database_state() == before
    # Another organization's hooks are its own count.
    charlie_hook = slack_hook(charlie.org, "hook 0")
    assert charlie_hook.organization == charlie.org
    # One deleted, one may be added.
    alice.client().delete(f"{API}{NotificationHook.objects.filter(organization=alice.org)[0].id}/")
    assert alice.client().post(API, body, format="json").status_code == 201


def test_the_cap_defaults_to_twenty(settings):
    assert settings.BENCHSITE_MAX_HOOKS_PER_ORG == 20


def send_test(person, hook):
    return person.client().post(
        f"/api/v1/orgs/{person.org.slug}/notification-hooks/{hook.id}/test/"
    )


def test_tests_of_a_hook_are_limited_per_hour(alice, settings, local_hooks):
    settings.BENCHSITE_HOOK_TESTS_PER_HOUR = 2
    hook = slack_hook(alice.org, "ci")
    assert [send_test(alice, hook).status_code for _ in range(2)] == [202, 202]
    before = database_state()
    refused = send_test(alice, hook)
    assert refused.status_code == 429, refused.json()
    error = refused.json()["error"]
    assert error["code"] == "rate_limited"
    assert "2 tests" in error["message"] and "try again after" in error["message"]
    assert 3500 <= int(refused["Retry-After"]) <= 3600
    assert database_state() == before
    # The page says the same, and sends nothing either.
    page = signed_in(alice).post(f"{PAGE}{hook.id}/test/", follow=True).content.decode()
    assert "try again after" in page
    assert database_state() == before
    # An hour after the first, one more may go.
    first = Notification.objects.order_by("created_at").first()
    Notification.objects.filter(pk=first.pk).update(
        created_at=timezone.now() - datetime.timedelta(minutes=61)
    )
    NotificationDelivery.objects.filter(notification=first).update(
        created_at=timezone.now() - datetime.timedelta(minutes=61)
    )
    assert send_test(alice, hook).status_code == 202


def test_tests_of_an_organization_are_limited_per_hour_across_its_hooks(
    alice, charlie, settings, local_hooks
):
    settings.BENCHSITE_HOOK_TESTS_PER_HOUR = 5
    settings.BENCHSITE_ORG_HOOK_TESTS_PER_HOUR = 3
    hooks = [slack_hook(alice.org, f"hook {n}") for n in range(4)]
    assert [send_test(alice, hook).status_code for hook in hooks[:3]] == [202] * 3
    refused = send_test(alice, hooks[3])
    assert refused.status_code == 429
    assert "3 tests" in refused.json()["error"]["message"]
    assert "organization" in refused.json()["error"]["message"]
    # A deleted hook's tests still count for its organization.
    alice.client().delete(f"{API}{hooks[0].id}/")
    assert send_test(alice, hooks[3]).status_code == 429
    # Another organization is not held back by this one.
    assert send_test(charlie, slack_hook(charlie.org, "ci")).status_code == 202
