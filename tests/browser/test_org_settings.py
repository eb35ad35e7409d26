"""The organization's settings in a real browser: switching organizations, a token shown
once, another tenant's pages answering 404, and the shell at desktop and phone widths."""

from __future__ import annotations

import re
from decimal import Decimal

from playwright.sync_api import expect

from runs.models import ApiToken
from runs.services.budgets import budget_set
from runs.services.credentials import provider_key_set
from runs.services.tenancy import membership_add, token_digest
from tests.site.conftest import SYSTEM, make_experiment


def test_it_refuses_a_wrong_password_and_keeps_the_address(page, alice, screenshot):
    page.goto("/login/")
    page.get_by_label("E-mail").fill("alice@acme.example")
    page.get_by_label("Password").fill("wrong")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("did not match")
    expect(page.get_by_label("E-mail")).to_have_value("alice@acme.example")
    screenshot(page, "sign-in-refused")


def test_it_switches_organization_keeping_the_section(page, sign_in, alice, charlie, screenshot):
    membership_add(org=charlie.org, user=alice.user, role="viewer", actor=SYSTEM)
    sign_in(page, alice)
    page.locator(".org-switcher summary").click()
    screenshot(page, "home-switcher-open")
    page.goto("/o/acme/settings/budgets/")
    switcher = page.locator(".org-switcher")
    expect(switcher.locator("summary")).to_contain_text("Acme")
    switcher.locator("summary").click()
    expect(switcher.get_by_role("link", name=re.compile("Acme"))).to_have_attribute(
        "aria-current", "true"
    )
    switcher.get_by_role("link", name=re.compile("Globex")).click()
    page.wait_for_url("**/o/globex/settings/budgets/")
    expect(switcher.locator("summary")).to_contain_text("Globex")
    # A viewer there: the budgets read, without the form to change them.
    expect(page.get_by_role("heading", name=re.compile("Budgets"))).to_be_visible()
    expect(page.get_by_role("button", name="Set budget")).to_have_count(0)


def test_it_shows_a_new_api_token_once(page, sign_in, alice, screenshot):
    sign_in(page, alice)
    page.goto("/o/acme/settings/")
    page.get_by_role("link", name="API tokens").first.click()
    page.get_by_label("Token name").fill("ci-nightly")
    page.get_by_role("button", name="Create token").click()

    shown = page.locator("[data-token]")
    expect(shown).to_be_visible()
    raw = shown.inner_text().strip()
    token = ApiToken.objects.get(name="ci-nightly")
    assert raw.startswith(token.prefix) and token_digest(raw) == token.token_hash
    screenshot(page, "settings-token-created")

    page.goto("/o/acme/settings/tokens/")
    expect(page.get_by_role("cell", name="ci-nightly", exact=True)).to_be_visible()
    assert raw not in page.content()
    row = page.locator(f'tr[data-token-id="{token.pk}"]')
    row.get_by_role("button", name=re.compile("Revoke")).click()
    expect(page.get_by_role("status")).to_contain_text("Revoked the token “ci-nightly”")
    expect(row).to_contain_text("Revoked")


def test_it_answers_404_to_charlie_on_alices_pages(page, sign_in, alice, charlie, console):
    console.allow(r"status of 404")  # Chromium logs the 404 answers themselves
    make_experiment(alice.org, name="secret-sauce")
    sign_in(page, charlie)
    for path in ("/o/acme/", "/o/acme/settings/", "/o/acme/settings/members/"):
        response = page.goto(path)
        assert response.status == 404, path
        body = page.content()
        assert "Acme" not in body and "secret-sauce" not in body and "alice@" not in body
    # (The live site runs with DEBUG, so these are Django's technical 404 pages; the product's
    # own 404 page is checked in tests/site/test_web_org.py.) Nor does the switcher offer acme.
    page.goto("/")
    page.locator(".org-switcher summary").click()
    expect(page.locator(".org-switcher li")).to_have_count(1)
    expect(page.locator(".org-switcher")).not_to_contain_text("Acme")


def test_it_screenshots_the_settings_pages(page, sign_in, alice, bob, mallory, screenshot):
    budget_set(org=alice.org, actor=SYSTEM, limit_usd=Decimal(500), note="standing cap")
    experiment = make_experiment(alice.org, name="llama-8b-batching")
    budget_set(org=alice.org, actor=SYSTEM, limit_usd=Decimal(40), experiment=experiment)
    provider_key_set(
        actor=SYSTEM, org=alice.org, provider="runpod", api_key="rpa_" + "x" * 28 + "9f3c"
    )
    sign_in(page, alice)
    for path, name in (
        ("/o/acme/settings/", "settings-overview"),
        ("/o/acme/settings/members/", "settings-members"),
        ("/o/acme/settings/tokens/", "settings-tokens"),
        ("/o/acme/settings/budgets/", "settings-budgets"),
        ("/o/acme/settings/runpod-key/", "settings-runpod-key"),
    ):
        page.goto(path)
        expect(page.locator("h1")).to_be_visible()
        screenshot(page, name)
    # A refused form: the error sits under its field and in the summary, naming it.
    page.get_by_label("Runpod API key").fill("has a space")
    page.get_by_role("button", name="Replace key").click()
    expect(page.locator('[data-field="api_key"]')).to_contain_text("printable ASCII")
    expect(page.get_by_label("Runpod API key")).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_label("Runpod API key")).to_have_value("")
    screenshot(page, "settings-runpod-key-error")


def test_it_folds_the_navigation_on_a_phone(page, sign_in, alice, screenshot):
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, alice)
    page.goto("/o/acme/settings/members/")
    nav = page.locator("#primary-nav")
    menu = page.get_by_role("button", name="Menu")
    expect(nav).to_be_hidden()
    expect(menu).to_have_attribute("aria-expanded", "false")
    screenshot(page, "phone-settings-members")
    menu.click()
    expect(nav).to_be_visible()
    expect(nav.get_by_role("link", name="Settings")).to_have_attribute("aria-current", "page")
    screenshot(page, "phone-menu-open")
    # Nothing overflows sideways on a phone.
    assert page.evaluate("document.documentElement.scrollWidth") <= 390


def test_it_reaches_the_content_and_forms_by_keyboard(page, sign_in, alice):
    sign_in(page, alice)
    page.goto("/o/acme/settings/members/")
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to main content")
    expect(skip).to_be_focused()
    expect(skip).to_be_in_viewport()
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_be_focused()
    page.get_by_label("E-mail address").focus()
    page.keyboard.type("eve@acme.example")
    page.keyboard.press("Tab")
    expect(page.get_by_label("Role", exact=True)).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Add member")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_role("status")).to_contain_text("Added eve@acme.example as member.")


def test_it_prints_the_content_without_the_controls(page, sign_in, alice, screenshot):
    budget_set(org=alice.org, actor=SYSTEM, limit_usd=Decimal(500), note="standing cap")
    sign_in(page, alice)
    page.goto("/o/acme/settings/budgets/")
    page.emulate_media(media="print")
    expect(page.locator(".site-header")).to_be_hidden()
    expect(page.get_by_role("button", name="Set budget")).to_be_hidden()
    expect(page.get_by_role("cell", name="$500.00")).to_be_visible()
    screenshot(page, "print-budgets")
