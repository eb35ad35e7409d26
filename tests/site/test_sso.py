"""Single sign-on (issue 20): OpenID Connect's code flow with PKCE against a small issuer on
127.0.0.1; only a verified e-mail signs in, a first sign-in joins the organizations its
domain maps to (audited), password sign-in can be turned off, and with no issuer configured
there is no SSO to start."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
import pytest

from runs.models import AuditEvent, Membership, User
from tests.fakes.oidc_issuer import OidcIssuer

from .conftest import signed_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def issuer(settings, org_a):
    running = OidcIssuer()
    for name, value in running.settings().items():
        setattr(settings, name, value)
    settings.BENCHSITE_SSO_DOMAIN_ORGS = ["acme.example=acme:member", "acme.example=nope:viewer"]
    yield running
    running.close()


def sign_in_through(client, issuer):
    """The browser's round trip: the site → the issuer → the site's callback."""
    start = client.get("/oidc/authenticate/")
    assert start.status_code == 302 and start["Location"].startswith(f"{issuer.base}/authorize?")
    back = httpx.get(start["Location"], follow_redirects=False)
    assert back.status_code == 302, back.text
    callback = urlsplit(back.headers["Location"])
    assert callback.path == "/oidc/callback/"
    return client.get(f"{callback.path}?{callback.query}")


def test_a_first_sign_in_joins_the_organizations_its_domain_maps_to(client, issuer):
    page = sign_in_through(client, issuer)
    assert page.status_code == 302 and page["Location"] == "/"
    user = User.objects.get(email="dana@acme.example")
    assert not user.has_usable_password()
    (membership,) = Membership.objects.filter(user=user)
    assert (membership.organization.slug, membership.role) == ("acme", "member")
    event = AuditEvent.objects.get(event="member.add", target_id=str(membership.pk))
    assert event.actor_via == "sso" and event.actor is None
    assert "Acme" in client.get("/").content.decode()  # signed in
    # Signing in again changes no membership; a role given since stays.
    Membership.objects.filter(pk=membership.pk).update(role="admin")
    client.logout()
    sign_in_through(client, issuer)
    assert list(Membership.objects.filter(user=user).values_list("role", flat=True)) == ["admin"]
    assert issuer.refused == []


def test_an_unverified_email_does_not_sign_in(client, issuer):
    issuer.user = {"email": "eve@acme.example", "email_verified": False}
    page = sign_in_through(client, issuer)
    assert page.status_code == 302 and page["Location"] == "/login/?sso=failed"
    assert "the issuer must confirm your e-mail" in client.get(page["Location"]).content.decode()
    assert not User.objects.filter(email="eve@acme.example").exists()
    assert client.get("/").status_code == 302  # still signed out


def test_another_domain_signs_in_to_no_organization(client, issuer):
    issuer.user = {"email": "zed@elsewhere.example", "email_verified": True}
    sign_in_through(client, issuer)
    user = User.objects.get(email="zed@elsewhere.example")
    assert not Membership.objects.filter(user=user).exists()


def test_password_sign_in_can_be_turned_off(client, issuer, alice, settings):
    page = client.get("/login/").content.decode()
    assert 'id="sso-sign-in"' in page and 'name="password"' in page
    settings.BENCHSITE_PASSWORD_LOGIN = False
    page = client.get("/login/").content.decode()
    assert 'id="sso-sign-in"' in page and 'name="password"' not in page
    refused = client.post("/login/", {"username": alice.user.email,
                                      "password": "correct-horse-battery"})  # fmt: skip
    assert refused.status_code == 200 and client.get("/").status_code == 302
    sign_in_through(client, issuer)
    assert client.get("/").status_code == 200


def test_without_an_issuer_there_is_no_single_sign_on(client, alice):
    page = client.get("/login/").content.decode()
    assert 'id="sso-sign-in"' not in page and 'name="password"' in page
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/?code=x&state=y").status_code == 404
    assert signed_in(alice).get("/").status_code == 200  # passwords as before
