"""Single sign-on (issue 20): OpenID Connect's code flow with PKCE against a small issuer on
127.0.0.1; only a verified e-mail signs in, a first sign-in joins the organizations its
domain maps to (audited), password sign-in can be turned off, and with no issuer configured
there is no SSO to start. Identities are linked by issuer and subject, never taken over by
e-mail, and attached to an existing account only by that account, signed in (issue 32)."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
import pytest

from runs.models import AuditEvent, Membership, SsoIdentity, User
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


def sign_in_through(client, issuer, start: str = "/oidc/authenticate/"):
    """The browser's round trip: the site → the issuer → the site's callback."""
    start = client.get(start)
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


def signed_in_as(client) -> str | None:
    """Whose session ``client`` holds (the page header names them), None when signed out."""
    page = client.get("/")
    return page.context["user"].email if page.status_code == 200 else None


def test_an_unmapped_domain_creates_no_account(client, issuer):
    issuer.user = {"email": "zed@elsewhere.example", "email_verified": True}
    page = sign_in_through(client, issuer)
    assert page.status_code == 302 and page["Location"] == "/login/?sso=unmapped"
    assert "creates accounts only" in client.get(page["Location"]).content.decode()
    assert not User.objects.filter(email="zed@elsewhere.example").exists()
    assert signed_in_as(client) is None


@pytest.mark.parametrize("email", ["ALICE@acme.example", "alice@acme.example"])
def test_an_existing_password_account_is_not_signed_into_by_its_email(client, issuer, alice, email):
    # Any issuer account whose verified e-mail is alice's, whatever its case (the domain is
    # mapped, which changes nothing for an existing account).
    issuer.user = {"email": email, "email_verified": True, "sub": "someone-else"}
    page = sign_in_through(client, issuer)
    assert page.status_code == 302 and page["Location"] == "/login/?sso=existing"
    said = client.get(page["Location"]).content.decode()
    assert "Sign in to it with its password first" in said and "account page" in said
    assert signed_in_as(client) is None
    assert not SsoIdentity.objects.exists()


def test_a_linked_identity_signs_in_after_its_email_changes_at_the_issuer(client, issuer):
    issuer.user = {"email": "dana@acme.example", "email_verified": True, "sub": "dana-1"}
    sign_in_through(client, issuer)
    dana = User.objects.get(email="dana@acme.example")
    link = SsoIdentity.objects.get(user=dana)
    assert (link.issuer, link.subject) == (issuer.base, "dana-1")
    client.logout()
    issuer.user = {"email": "dana@elsewhere.example", "email_verified": True, "sub": "dana-1"}
    page = sign_in_through(client, issuer)
    assert page.status_code == 302 and page["Location"] == "/"
    assert signed_in_as(client) == "dana@acme.example"
    assert not User.objects.filter(email="dana@elsewhere.example").exists()  # nobody new
    # Another issuer account with dana's e-mail is not dana.
    client.logout()
    issuer.user = {"email": "dana@acme.example", "email_verified": True, "sub": "dana-2"}
    assert sign_in_through(client, issuer)["Location"] == "/login/?sso=existing"
    assert signed_in_as(client) is None


def attach_through(client, issuer):
    """The signed-in person's confirmation on their account page, then the issuer."""
    confirmed = client.post("/account/sso/attach/")
    assert confirmed.status_code == 302
    return sign_in_through(client, issuer, start=confirmed["Location"])


def test_attaching_while_signed_in_links_the_identity_to_that_account(client, issuer, alice):
    client.force_login(alice.user)
    issuer.user = {"email": "alice@corp.example", "email_verified": True, "sub": "alice-corp"}
    page = attach_through(client, issuer)
    assert page.status_code == 302 and page["Location"] == "/account/"
    link = SsoIdentity.objects.get(subject="alice-corp")
    assert link.user == alice.user and link.issuer == issuer.base
    assert "alice@corp.example" in client.get("/account/").content.decode()
    event = AuditEvent.objects.get(organization=alice.org, event="sso_identity.link")
    assert event.actor == alice.user and event.after == {
        "user": alice.user.email,
        "issuer": issuer.base,
    }
    # From now on the identity signs in to alice's account.
    client.logout()
    assert sign_in_through(client, issuer)["Location"] == "/"
    assert signed_in_as(client) == alice.user.email


def test_nothing_is_attached_without_the_signed_in_persons_confirmation(client, issuer, alice):
    client.force_login(alice.user)
    assert client.get("/account/sso/attach/").status_code == 405  # a POST confirms, a link not
    issuer.user = {"email": alice.user.email, "email_verified": True, "sub": "alice-2"}
    # Signing in through the issuer without asking on the account page attaches nothing.
    sign_in_through(client, issuer)
    assert not SsoIdentity.objects.exists()


def test_an_identity_linked_to_another_account_is_not_attached(client, issuer, alice):
    issuer.user = {"email": "dana@acme.example", "email_verified": True, "sub": "dana-1"}
    sign_in_through(client, issuer)
    dana = User.objects.get(email="dana@acme.example")
    client.logout()
    client.force_login(alice.user)
    page = attach_through(client, issuer)
    assert page.status_code == 302 and page["Location"] == "/account/"
    assert "attached to another account" in client.get("/account/").content.decode()
    assert list(SsoIdentity.objects.values_list("user", flat=True)) == [dana.pk]
    assert signed_in_as(client) == alice.user.email


def test_password_sign_in_can_be_turned_off(client, issuer, alice, settings):
    page = client.get("/login/").content.decode()
    assert 'id="sso-sign-in"' in page and 'name="password"' in page
    settings.BENCHSITE_PASSWORD_LOGIN = False
    page = client.get("/login/").content.decode()
    assert 'id="sso-sign-in"' in page and 'name="password"' not in page
    refused = client.post(
        "/login/", {"username": alice.user.email, "password": "correct-horse-battery"}
    )
    assert refused.status_code == 200 and client.get("/").status_code == 302
    sign_in_through(client, issuer)
    assert client.get("/").status_code == 200


def test_without_an_issuer_there_is_no_single_sign_on(client, alice):
    page = client.get("/login/").content.decode()
    assert 'id="sso-sign-in"' not in page and 'name="password"' in page
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/?code=x&state=y").status_code == 404
    assert signed_in(alice).get("/").status_code == 200  # passwords as before
