"""Token bookkeeping and the staff admin."""

from __future__ import annotations

import datetime

import pytest
from django.test import Client
from django.utils import timezone

from runs.models import ApiToken, AuditEvent, User


def test_it_records_when_a_token_was_last_used(alice):
    token = ApiToken.objects.get(organization=alice.org, user=alice.user, name="t")
    assert token.last_used_at is None
    alice.client().get("/api/v1/orgs/acme/models/")
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_it_writes_last_use_at_most_once_a_minute(alice, settings):
    settings.BENCHSITE_TOKEN_TOUCH_SECONDS = 60
    token = ApiToken.objects.get(organization=alice.org, user=alice.user, name="t")
    recent = timezone.now() - datetime.timedelta(seconds=5)
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=recent)
    alice.client().get("/api/v1/orgs/acme/models/")
    token.refresh_from_db()
    assert token.last_used_at == recent  # a read did not turn into a write
    stale = timezone.now() - datetime.timedelta(minutes=5)
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=stale)
    alice.client().get("/api/v1/orgs/acme/models/")
    token.refresh_from_db()
    assert token.last_used_at > stale


def _staff_client() -> Client:
    staff = User.objects.create_superuser("ops@bench.example", "a-long-password")
    client = Client()
    client.force_login(staff)
    return client


@pytest.mark.slow
def test_it_shows_staff_the_audit_log_read_only(alice):
    client = _staff_client()
    event = AuditEvent.objects.filter(organization=alice.org).first()
    assert client.get("/admin/runs/auditevent/").status_code == 200
    page = client.get(f"/admin/runs/auditevent/{event.pk}/change/")
    assert page.status_code == 200
    assert b'name="_save"' not in page.content  # viewable, not editable
    assert (
        client.post(f"/admin/runs/auditevent/{event.pk}/delete/", {"post": "yes"}).status_code
        == 403
    )
    assert AuditEvent.objects.filter(pk=event.pk).exists()


def test_it_never_shows_token_hashes_in_the_admin(alice):
    client = _staff_client()
    token = ApiToken.objects.get(organization=alice.org, user=alice.user, name="t")
    page = client.get(f"/admin/runs/apitoken/{token.pk}/change/")
    assert page.status_code == 200
    assert token.token_hash.encode() not in page.content
    assert alice.token.encode() not in page.content


def test_it_keeps_the_admin_from_non_staff(alice):
    client = Client()
    client.force_login(alice.user)
    response = client.get("/admin/runs/auditevent/")
    assert response.status_code == 302 and "/admin/login/" in response.url
