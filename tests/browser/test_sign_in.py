"""Signing in and out through the real pages, with a password and through single sign-on."""

from __future__ import annotations

from playwright.sync_api import expect

from runs.models import Membership
from tests.fakes.oidc_issuer import OidcIssuer
from tests.site.live_server import daphne_server


def test_it_signs_in_and_out(page, sign_in, alice):
    sign_in(page, alice)
    expect(page.get_by_role("heading", name="Your organizations")).to_be_visible()
    # The ORM still works here while the browser runs (see _browser in conftest.py).
    assert Membership.objects.filter(user=alice.user).count() == 1
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()


def test_it_signs_in_through_single_sign_on(page, alice, console):
    """The whole OpenID Connect round trip in Chromium: a site configured for the test's
    issuer on 127.0.0.1, its button, the issuer, the callback, signed in as a member of the
    organization the e-mail's domain maps to."""
    # The page's server is this test's own and stops with it; Chromium fetches the icon
    # when it pleases (even after "networkidle"), and a fetch after the stop is refused.
    console.allow(r"ERR_CONNECTION_REFUSED \(http://127\.0\.0\.1:\d+/static/frontend/icon\.svg\)")
    issuer = OidcIssuer()
    environment = issuer.settings() | {"BENCHSITE_SSO_DOMAIN_ORGS": "acme.example=acme:viewer"}
    try:
        with daphne_server(timeout=120, env=environment) as address:
            page.goto(f"http://{address}/login/")
            page.get_by_role("link", name="Sign in with single sign-on").click()
            expect(page.get_by_role("heading", name="Your organizations")).to_be_visible()
            expect(page.get_by_role("link", name="Acme", exact=True)).to_be_visible()
            assert page.url == f"http://{address}/"
            # The heading shows before the page's styles and scripts are in (seen in CI:
            # a reset fetch of site.css as the server stopped): let the page finish with
            # its own server, then leave it, before the server goes.
            page.wait_for_load_state("networkidle")
            page.goto("about:blank")
    finally:
        issuer.close()
    membership = Membership.objects.get(user__email="dana@acme.example")
    assert (membership.organization.slug, membership.role) == ("acme", "viewer")
    assert issuer.refused == []
