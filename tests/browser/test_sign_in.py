"""Signing in and out through the real pages."""

from __future__ import annotations

from playwright.sync_api import expect

from runs.models import Membership


def test_it_signs_in_and_out(page, sign_in, alice):
    sign_in(page, alice)
    expect(page.get_by_role("heading", name="Your organizations")).to_be_visible()
    # The ORM still works here while the browser runs (see _browser in conftest.py).
    assert Membership.objects.filter(user=alice.user).count() == 1
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
