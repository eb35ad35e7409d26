"""Operators bootstrap without the UI: createorg, addmember, createtoken."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from runs.models import ApiToken, AuditEvent, Membership, Organization, User


def _run(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_it_creates_an_org_with_its_owner_and_password_from_the_environment(db, monkeypatch):
    monkeypatch.setenv("ALICE_PW", "a-long-enough-secret")
    out, _ = _run(
        "createorg", "acme", "--owner", "Alice@Acme.example", "--password-env", "ALICE_PW"
    )
    org = Organization.objects.get(slug="acme")
    alice = User.objects.get(email="alice@acme.example")
    assert Membership.objects.get(organization=org, user=alice).role == "owner"
    assert alice.check_password("a-long-enough-secret")
    assert "a-long-enough-secret" not in out
    assert list(AuditEvent.objects.filter(organization=org).values_list("event", flat=True)) == [
        "member.add",
        "organization.create",
    ]


def test_it_refuses_a_missing_password_variable_and_writes_nothing(db, monkeypatch):
    monkeypatch.delenv("NOPE", raising=False)
    with pytest.raises(CommandError, match="NOPE"):
        _run("createorg", "acme", "--owner", "alice@acme.example", "--password-env", "NOPE")
    assert not Organization.objects.exists()
    assert not User.objects.exists()


def test_it_refuses_a_taken_slug_and_keeps_the_existing_org(db):
    _run("createorg", "acme", "--owner", "alice@acme.example")
    with pytest.raises(CommandError, match="slug"):
        _run("createorg", "acme", "--owner", "eve@evil.example")
    assert Membership.objects.get().user.email == "alice@acme.example"
    assert not User.objects.filter(email="eve@evil.example").exists()


def test_it_adds_members_with_a_role(db):
    _run("createorg", "acme", "--owner", "alice@acme.example")
    _run("addmember", "acme", "bob@acme.example", "--role", "viewer")
    assert Membership.objects.get(user__email="bob@acme.example").role == "viewer"
    with pytest.raises(CommandError, match="already a member"):
        _run("addmember", "acme", "bob@acme.example", "--role", "admin")
    assert Membership.objects.get(user__email="bob@acme.example").role == "viewer"
    with pytest.raises(CommandError):
        _run("addmember", "acme", "carol@acme.example", "--role", "emperor")
    with pytest.raises(CommandError, match="No organization"):
        _run("addmember", "nowhere", "carol@acme.example", "--role", "viewer")


def test_it_prints_only_the_token_which_then_works_on_the_api(db):
    _run("createorg", "acme", "--owner", "alice@acme.example")
    out, err = _run("createtoken", "acme", "alice@acme.example", "--name", "ci")
    raw = out.strip()
    assert out == raw + "\n"  # nothing else on stdout: scripts capture it whole
    assert raw.startswith("bsk_")
    token = ApiToken.objects.get(name="ci")
    assert token.prefix in err and raw not in err
    assert token.token_hash != raw and raw not in token.token_hash
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    response = client.get("/api/v1/orgs/acme/models/")
    assert response.status_code == 200


def test_it_refuses_a_token_for_a_non_member(db):
    _run("createorg", "acme", "--owner", "alice@acme.example")
    User.objects.create_user("stranger@else.example")
    with pytest.raises(CommandError, match="not a member"):
        _run("createtoken", "acme", "stranger@else.example")
    assert not ApiToken.objects.exists()
