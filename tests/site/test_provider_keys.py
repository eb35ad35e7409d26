"""The organization's Runpod API key: stored encrypted, shown only by its fingerprint, never
logged or audited, managed by owners and admins only."""

from __future__ import annotations

import json
import logging

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured
from django.urls import reverse
from rest_framework.test import APIClient

from benchsite.env import env_fernet_keys
from runs.models import AuditEvent, Membership, ProviderCredential
from runs.providers.base import PermanentProviderError
from runs.secrets import SecretUnreadable, decrypt_secret, encrypt_secret
from runs.services.credentials import (
    key_fingerprint,
    provider_key_clear,
    provider_key_for_run,
    provider_key_set,
)

from .conftest import SYSTEM
from .db_state import database_state

KEY = "rpa_7F3A9C2E41D8B6A5C0E9F2D4B7A1C3E5F00Dabcd"
OTHER_KEY = "rpa_0D1E2F3A4B5C6D7E8F9A0B1C2D3E4F5A6B7Cwxyz"


def url(org: str = "acme", provider: str = "runpod") -> str:
    return reverse("provider-key-detail", kwargs={"org": org, "provider": provider})


@pytest.fixture
def everything_logged(caplog):
    caplog.set_level(logging.DEBUG)
    return caplog


def send(client, method: str, path: str, api_key: str = OTHER_KEY):
    """A request of ``method``; only PUT carries a body (GET would put it in the URL)."""
    if method == "put":
        return client.put(path, {"api_key": api_key}, format="json")
    return getattr(client, method)(path)


def audit_text(org) -> str:
    rows = AuditEvent.objects.filter(organization=org).values()
    return json.dumps(list(rows), default=str)


def test_it_stores_the_key_encrypted_and_shows_only_its_fingerprint(alice, everything_logged):
    client = alice.client()

    response = client.put(url(), {"api_key": KEY}, format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"provider", "fingerprint", "updated_at"}
    assert body["provider"] == "runpod" and body["fingerprint"] == "…abcd"
    shown = client.get(url())
    assert shown.status_code == 200 and shown.json() == body
    stored = ProviderCredential.objects.get(organization=alice.org, provider="runpod")
    assert stored.created_by == alice.user
    assert KEY not in stored.encrypted_key and KEY[4:20] not in stored.encrypted_key
    assert decrypt_secret(stored.encrypted_key) == KEY
    assert provider_key_for_run(alice.org) == KEY
    event = AuditEvent.objects.filter(organization=alice.org).order_by("-seq").first()
    assert event.event == "provider_key.set" and event.actor == alice.user
    assert event.before is None
    assert event.after == {"provider": "runpod", "fingerprint": "…abcd"}
    for secret in (KEY, stored.encrypted_key):
        assert secret not in response.content.decode() + shown.content.decode()
        assert secret not in audit_text(alice.org)
        assert secret not in everything_logged.text


def test_it_replaces_the_key_and_audits_the_change_of_fingerprint(alice):
    provider_key_set(actor=SYSTEM, org=alice.org, provider="runpod", api_key=KEY)
    response = alice.client().put(url(), {"api_key": OTHER_KEY}, format="json")
    assert response.status_code == 200
    assert response.json()["fingerprint"] == "…wxyz"
    assert ProviderCredential.objects.filter(organization=alice.org).count() == 1
    assert provider_key_for_run(alice.org) == OTHER_KEY
    event = AuditEvent.objects.filter(organization=alice.org).order_by("-seq").first()
    assert (event.event, event.before, event.after) == (
        "provider_key.set",
        {"provider": "runpod", "fingerprint": "…abcd"},
        {"provider": "runpod", "fingerprint": "…wxyz"},
    )
    assert KEY not in audit_text(alice.org) and OTHER_KEY not in audit_text(alice.org)


def test_it_clears_the_key(alice, everything_logged):
    provider_key_set(actor=SYSTEM, org=alice.org, provider="runpod", api_key=KEY)
    client = alice.client()

    assert client.delete(url()).status_code == 204

    assert client.get(url()).status_code == 404
    assert provider_key_for_run(alice.org) is None
    event = AuditEvent.objects.filter(organization=alice.org).order_by("-seq").first()
    assert (event.event, event.before, event.after) == (
        "provider_key.clear",
        {"provider": "runpod", "fingerprint": "…abcd"},
        None,
    )
    # Clearing again is a no-op: still 204, no second event.
    events = AuditEvent.objects.filter(organization=alice.org).count()
    assert client.delete(url()).status_code == 204
    assert AuditEvent.objects.filter(organization=alice.org).count() == events
    assert KEY not in everything_logged.text


def test_it_answers_404_without_a_key_and_for_unknown_providers(alice):
    client = alice.client()
    unset = client.get(url())
    assert unset.status_code == 404
    assert unset.json() == {"error": {"status": 404, "code": "not_found", "message": "Not found."}}
    before = database_state()
    for method in ("get", "put", "delete"):
        response = send(client, method, url(provider="aws"))
        assert response.status_code == 404
        assert response.json() == unset.json()
    assert database_state() == before


# ------------------------------------------------------------------------------------------
# Who may
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["get", "put", "delete"])
@pytest.mark.parametrize("person", ["bob", "mallory"])
def test_it_keeps_the_key_to_owners_and_admins(request, alice, method, person):
    provider_key_set(actor=SYSTEM, org=alice.org, provider="runpod", api_key=KEY)
    someone = request.getfixturevalue(person)
    before = database_state()
    response = send(someone.client(), method, url())
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"
    assert "…abcd" not in response.content.decode()
    assert database_state() == before


def test_it_lets_admins_manage_the_key(alice, mallory):
    Membership.objects.filter(organization=alice.org, user=mallory.user).update(role="admin")
    client = mallory.client()
    assert client.put(url(), {"api_key": KEY}, format="json").status_code == 200
    assert client.get(url()).json()["fingerprint"] == "…abcd"
    assert client.delete(url()).status_code == 204


def test_it_hides_other_tenants_keys(alice, charlie):
    provider_key_set(actor=SYSTEM, org=alice.org, provider="runpod", api_key=KEY)
    client = charlie.client()
    before = database_state()
    for method in ("get", "put", "delete"):
        missing = send(client, method, url("no-such-org"))
        foreign = send(client, method, url("acme"))
        assert foreign.status_code == missing.status_code == 404
        assert foreign.json() == missing.json()
    assert database_state() == before
    # charlie's own organization has its own key, or none: never acme's.
    assert client.get(url("globex")).status_code == 404
    assert client.put(url("globex"), {"api_key": OTHER_KEY}, format="json").status_code == 200
    assert provider_key_for_run(charlie.org) == OTHER_KEY
    assert provider_key_for_run(alice.org) == KEY


def test_it_requires_credentials(alice):
    assert APIClient().get(url()).status_code == 401


# ------------------------------------------------------------------------------------------
# Bad input: a clear error naming api_key, and the stored key untouched
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        {"api_key": ""},
        {"api_key": f" {KEY}"},
        {"api_key": f"{KEY}\n"},
        {"api_key": "rpa_with space_0000000000"},
        {"api_key": "rpa_tab\there_000000000000"},
        {"api_key": "rpa_clé_000000000000000000"},
        {"api_key": "rpa_" + "x" * 197},
        {"api_key": 12345678901234567890},
        {"api_key": None},
        {"api_key": ["rpa_list_0000000000000000"]},
        {},
    ],
    ids=repr,
)
def test_it_refuses_bad_keys_naming_the_field_and_keeps_the_old_one(alice, payload):
    provider_key_set(actor=SYSTEM, org=alice.org, provider="runpod", api_key=KEY)
    before = database_state()
    response = alice.client().put(url(), payload, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid" and list(error["fields"]) == ["api_key"]
    if isinstance(payload.get("api_key"), str) and payload["api_key"].strip():
        assert payload["api_key"].strip() not in response.content.decode()
    assert database_state() == before
    assert provider_key_for_run(alice.org) == KEY


def test_it_refuses_a_key_of_201_characters_but_takes_200(alice):
    client = alice.client()
    assert client.put(url(), {"api_key": "k" * 201}, format="json").status_code == 400
    assert client.put(url(), {"api_key": "k" * 200}, format="json").status_code == 200


def test_it_shows_no_characters_of_a_short_key():
    assert key_fingerprint("short-key-123") == "…"
    assert key_fingerprint(KEY) == "…abcd"


# ------------------------------------------------------------------------------------------
# The encryption key setting
# ------------------------------------------------------------------------------------------


def test_it_says_clearly_when_the_encryption_key_changed(alice, settings):
    provider_key_set(actor=SYSTEM, org=alice.org, provider="runpod", api_key=KEY)
    ciphertext = ProviderCredential.objects.get(organization=alice.org).encrypted_key
    old = settings.CREDENTIALS_ENCRYPTION_KEY
    settings.CREDENTIALS_ENCRYPTION_KEY = Fernet.generate_key().decode()

    with pytest.raises(PermanentProviderError) as raised:
        provider_key_for_run(alice.org)
    assert "CREDENTIALS_ENCRYPTION_KEY has changed" in str(raised.value)
    assert "…abcd" in str(raised.value)
    with pytest.raises(SecretUnreadable) as unreadable:
        decrypt_secret(ciphertext)
    assert "CREDENTIALS_ENCRYPTION_KEY" in str(unreadable.value)
    for error in (raised.value, unreadable.value):
        assert ciphertext not in repr(error) and KEY not in repr(error)
        assert error.__cause__ is None and error.__suppress_context__
    # The fingerprint is still shown (it is stored apart), and a new key can be set.
    assert alice.client().get(url()).json()["fingerprint"] == "…abcd"

    # Rotation: the new key first, the old one after it, and old secrets read again.
    settings.CREDENTIALS_ENCRYPTION_KEY = f"{settings.CREDENTIALS_ENCRYPTION_KEY},{old}"
    assert provider_key_for_run(alice.org) == KEY
    assert decrypt_secret(encrypt_secret("fresh")) == "fresh"


def test_it_requires_the_encryption_key_outside_the_demo(monkeypatch):
    monkeypatch.delenv("CREDENTIALS_ENCRYPTION_KEY", raising=False)
    with pytest.raises(ImproperlyConfigured, match="CREDENTIALS_ENCRYPTION_KEY must be set"):
        env_fernet_keys("CREDENTIALS_ENCRYPTION_KEY", derive_from=None)


def test_it_derives_the_demo_key_from_the_secret_key(monkeypatch):
    monkeypatch.delenv("CREDENTIALS_ENCRYPTION_KEY", raising=False)
    first = env_fernet_keys("CREDENTIALS_ENCRYPTION_KEY", derive_from="secret-one")
    assert first == env_fernet_keys("CREDENTIALS_ENCRYPTION_KEY", derive_from="secret-one")
    assert first != env_fernet_keys("CREDENTIALS_ENCRYPTION_KEY", derive_from="secret-two")
    Fernet(first)  # a valid key
    assert "secret-one" not in first


@pytest.mark.parametrize(
    # A valid key before a bad one; fixed, as it names a test every parallel worker collects.
    "value",
    ["not-a-key-s3cret", "s3cret" * 8, f"{'A' * 43}=,s3cret-2"],
)
def test_it_refuses_a_malformed_encryption_key_without_echoing_it(monkeypatch, value):
    monkeypatch.setenv("CREDENTIALS_ENCRYPTION_KEY", value)
    with pytest.raises(ImproperlyConfigured) as raised:
        env_fernet_keys("CREDENTIALS_ENCRYPTION_KEY", derive_from="demo")
    assert "CREDENTIALS_ENCRYPTION_KEY" in str(raised.value)
    assert "s3cret" not in str(raised.value)


def test_it_takes_several_encryption_keys(monkeypatch):
    keys = [Fernet.generate_key().decode() for _ in range(2)]
    monkeypatch.setenv("CREDENTIALS_ENCRYPTION_KEY", f" {keys[0]} , {keys[1]} ")
    assert env_fernet_keys("CREDENTIALS_ENCRYPTION_KEY", derive_from=None) == ",".join(keys)


def test_it_clears_through_the_service_as_a_no_op_when_unset(alice):
    before = database_state()
    provider_key_clear(actor=SYSTEM, org=alice.org, provider="runpod")
    assert database_state() == before
