"""Inputs longer than their columns (issue 32): a value that passes its own checks but is
longer than the column that stores it is refused on the field it came from, through the API
and the pages alike, before anything is written. PostgreSQL enforces a column's length (a
500 before); the refusal does not depend on it."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from runs.models import NotificationHook, User

from .conftest import make_experiment, signed_in
from .db_state import database_state

pytestmark = pytest.mark.django_db

# A month field cron reads (1-12, sixteen times over): 79 characters, beat's column holds 64.
LONG_MONTHS = ",".join(["1-12"] * 16)
THRESHOLDS = "p99_ttft_ms=10%"


def address(length: int) -> str:
    """An e-mail address of ``length`` characters that Django's own check accepts."""
    local = "a" * 64
    domain_length = length - len(local) - 1 - len(".com")
    labels = ["b" * min(63, domain_length - 64 * index) for index in range(domain_length // 64 + 1)]
    return f"{local}@{'.'.join(label for label in labels if label)}.com"


def nothing_written(before) -> bool:
    return (
        database_state() == before
        and not PeriodicTask.objects.exists()
        and not CrontabSchedule.objects.filter(month_of_year=LONG_MONTHS).exists()
    )


def test_a_cron_field_longer_than_beats_column_is_refused_on_cron(alice):
    assert len(LONG_MONTHS) == 79
    experiment = make_experiment(alice.org)
    before = database_state()
    api = alice.client().put(
        f"/api/v1/orgs/acme/experiments/{experiment.id}/schedule/",
        {"cron": f"0 6 * {LONG_MONTHS} *", "thresholds": THRESHOLDS},
        format="json",
    )
    assert api.status_code == 400, api.content
    assert api.json()["error"]["fields"] == {
        "cron": [
            "Not a cron expression beat can read: the month(s) of the year field: Ensure this "
            "value has at most 64 characters (it has 79)."
        ]
    }
    page = signed_in(alice).post(
        f"/o/acme/experiments/{experiment.id}/schedule/",
        {"cron": f"0 6 * {LONG_MONTHS} *", "timezone": "UTC", "thresholds": THRESHOLDS},
    )
    assert page.status_code == 200
    (message,) = api.json()["error"]["fields"]["cron"]
    assert f'data-slot="cron"><li>{message}' in page.content.decode()
    assert nothing_written(before)


def test_an_email_to_longer_than_its_column_is_refused_on_email_to(alice):
    # Ten addresses Django accepts, 1,968 characters with their commas; the column holds 1,000.
    email_to = ",".join([address(196)] * 9 + [address(195)])
    assert len(email_to) == 1968
    hook = {"name": "ops", "kind": "email", "email_to": email_to, "events": ["run.failed"]}
    before = database_state()
    page = signed_in(alice).post("/o/acme/settings/notifications/", hook)
    assert page.status_code == 200
    html = page.content.decode()
    errors = html[html.index('id="id_email_to-errors"') :]
    assert "at most 1000 characters" in errors[: errors.index("</ul>")]
    api = alice.client().post("/api/v1/orgs/acme/notification-hooks/", hook, format="json")
    assert api.status_code == 400
    assert list(api.json()["error"]["fields"]) == ["email_to"]
    assert database_state() == before and not NotificationHook.objects.exists()


def test_addresses_that_fit_as_typed_but_not_as_stored_are_refused_on_email_to(alice):
    # 999 characters as sent (the API's limit is 1,000); stored ", "-separated: 1,008.
    email_to = ",".join([address(99)] * 10)
    assert len(email_to) == 999
    before = database_state()
    api = alice.client().post(
        "/api/v1/orgs/acme/notification-hooks/",
        {"name": "ops", "kind": "email", "email_to": email_to, "events": ["run.failed"]},
        format="json",
    )
    assert api.status_code == 400, api.content
    assert api.json()["error"]["fields"] == {
        "email_to": ["Ensure this value has at most 1000 characters (it has 1008)."]
    }
    assert database_state() == before


# Lower-cased, each "İ" becomes two characters: 254 as typed (the API's limit), 314 as stored.
LENGTHENED_BY_LOWER_CASE = f"a@{'İ' * 60}.{'b' * 63}.{'c' * 63}.{'d' * 59}.com"


def test_an_address_longer_once_lower_cased_is_refused_on_email(alice):
    assert len(LENGTHENED_BY_LOWER_CASE) == 254 < len(LENGTHENED_BY_LOWER_CASE.lower())
    before = database_state()
    api = alice.client().post(
        "/api/v1/orgs/acme/members/",
        {"email": LENGTHENED_BY_LOWER_CASE, "role": "member"},
        format="json",
    )
    assert api.status_code == 400, api.content
    fields = api.json()["error"]["fields"]
    assert list(fields) == ["email"]
    assert "Ensure this value has at most 254 characters (it has 314)." in fields["email"]
    page = signed_in(alice).post(
        "/o/acme/settings/members/", {"email": LENGTHENED_BY_LOWER_CASE, "role": "member"}
    )
    assert "at most 254 characters" in page.content.decode()
    assert database_state() == before and not User.objects.filter(email__startswith="a@").exists()


@pytest.mark.parametrize(
    ("command", "field"),
    [
        (["createorg", "globex2", "--owner", "ops@globex.example", "--name", "G" * 201], "name"),
        (["createtoken", "acme", "alice@acme.example", "--name", "n" * 101], "name"),
    ],
    ids=["organization name", "token name"],
)
def test_the_operators_commands_refuse_what_their_columns_cannot_hold(alice, command, field):
    before = database_state()
    with pytest.raises(CommandError) as refused:
        call_command(*command, stdout=io.StringIO(), stderr=io.StringIO())
    assert f"{field}: Ensure this value has at most" in str(refused.value)
    assert database_state() == before


def test_the_schedule_page_refuses_long_thresholds_instead_of_cutting_them(alice):
    experiment = make_experiment(alice.org)
    thresholds = ",".join(["p99_ttft_ms=10%"] * 40)  # 639 characters; the column holds 500
    before = database_state()
    page = signed_in(alice).post(
        f"/o/acme/experiments/{experiment.id}/schedule/",
        {"daily_at": "06:00", "timezone": "UTC", "thresholds": thresholds},
    )
    assert 'data-slot="thresholds"><li>At most 500 characters.' in page.content.decode()
    assert nothing_written(before)
