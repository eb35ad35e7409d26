"""Organization settings pages: members and roles, API tokens, budgets, the Runpod key.

Access rules for every page (anonymous → sign in, another tenant → 404, a role that may
not → 403 with nothing changed), field-named errors from the API's validation, and secrets
never rendered (except a new token, once).
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client

from runs.models import ApiToken, AuditEvent, Budget, Membership, ProviderCredential, User
from runs.services.budgets import budget_set
from runs.services.credentials import provider_key_set
from runs.services.tenancy import membership_add, token_digest

from .conftest import SYSTEM, make_experiment, signed_in

RUNPOD_KEY = "rpa_SECRETSECRETSECRET1234abcd"


@pytest.fixture
def acme_rows(alice, bob):
    """One of each of acme's settings rows, to aim at from outside."""
    budget = budget_set(org=alice.org, actor=SYSTEM, limit_usd=Decimal(100))
    provider_key_set(actor=SYSTEM, org=alice.org, provider="runpod", api_key=RUNPOD_KEY)
    return {
        "member": Membership.objects.get(user=bob.user),
        "token": ApiToken.objects.filter(user=alice.user).first(),
        "budget": budget,
    }


def pages(rows) -> list[tuple[str, str, dict]]:
    """(method, path, form data) for every page and action of acme's settings."""
    member, token, budget = rows["member"].pk, rows["token"].pk, rows["budget"].pk
    return [
        ("get", "/o/acme/settings/", {}),
        ("get", "/o/acme/settings/members/", {}),
        ("post", "/o/acme/settings/members/", {"email": "eve@acme.example", "role": "admin"}),
        ("post", f"/o/acme/settings/members/{member}/role/", {"role": "admin"}),
        ("post", f"/o/acme/settings/members/{member}/remove/", {}),
        ("get", "/o/acme/settings/tokens/", {}),
        ("post", "/o/acme/settings/tokens/", {"name": "stolen"}),
        ("post", f"/o/acme/settings/tokens/{token}/revoke/", {}),
        ("get", "/o/acme/settings/budgets/", {}),
        ("post", "/o/acme/settings/budgets/", {"limit_usd": "1"}),
        ("post", f"/o/acme/settings/budgets/{budget}/delete/", {}),
        ("get", "/o/acme/settings/runpod-key/", {}),
        ("post", "/o/acme/settings/runpod-key/", {"api_key": "rpa_attackerattackerattacker"}),
        ("post", "/o/acme/settings/runpod-key/remove/", {}),
        ("get", "/o/acme/settings/hf-token/", {}),
        ("post", "/o/acme/settings/hf-token/", {"api_key": "hf_attackerattackerattacker"}),
        ("post", "/o/acme/settings/hf-token/remove/", {}),
    ]


def settings_state() -> tuple:
    """Everything a settings page could change, to prove a refused request changed nothing."""
    return (
        sorted(Membership.objects.values_list("organization__slug", "user__email", "role")),
        sorted(ApiToken.objects.values_list("name", "revoked_at")),
        sorted(Budget.objects.values_list("organization__slug", "limit_usd")),
        sorted(ProviderCredential.objects.values_list("organization__slug", "fingerprint")),
        User.objects.count(),
    )


def test_it_sends_anonymous_visitors_to_sign_in(acme_rows):
    before = settings_state()
    for method, path, data in pages(acme_rows):
        response = getattr(Client(), method)(path, data)
        assert response.status_code == 302, (method, path)
        assert response.url.startswith("/login/?next="), (method, path)
    assert settings_state() == before


def test_it_hides_other_tenants_settings(acme_rows, charlie):
    client = signed_in(charlie)
    before = settings_state()
    for method, path, data in pages(acme_rows):
        response = getattr(client, method)(path, data)
        assert response.status_code == 404, (method, path)
        assert b"Acme" not in response.content and b"alice@" not in response.content
    assert settings_state() == before


def test_it_hides_other_tenants_rows_from_their_own_pages(acme_rows, charlie):
    # charlie manages globex: aiming globex's actions at acme's rows finds nothing.
    client = signed_in(charlie)
    before = settings_state()
    member, token, budget = (acme_rows[k].pk for k in ("member", "token", "budget"))
    for path in (
        f"/o/globex/settings/members/{member}/role/",
        f"/o/globex/settings/members/{member}/remove/",
        f"/o/globex/settings/tokens/{token}/revoke/",
        f"/o/globex/settings/budgets/{budget}/delete/",
    ):
        assert client.post(path, {"role": "viewer"}).status_code == 404, path
    assert settings_state() == before


MANAGE_ONLY_READS = {
    "/o/acme/settings/hf-token/",
    "/o/acme/settings/tokens/",
    "/o/acme/settings/runpod-key/",
}


@pytest.mark.parametrize("who", ["bob", "mallory"])
def test_it_lets_viewers_and_members_read_but_not_manage(who, acme_rows, request):
    person = request.getfixturevalue(who)
    client = signed_in(person)
    before = settings_state()
    for method, path, data in pages(acme_rows):
        response = getattr(client, method)(path, data)
        expected = 200 if method == "get" and path not in MANAGE_ONLY_READS else 403
        assert response.status_code == expected, (who, method, path)
    assert settings_state() == before


def test_it_shows_readers_no_controls_they_cannot_use(bob, acme_rows):
    client = signed_in(bob)
    members = client.get("/o/acme/settings/members/").content.decode()
    assert "bob@acme.example" in members and "alice@acme.example" in members
    assert "Add a member" not in members and "/remove/" not in members
    budgets = client.get("/o/acme/settings/budgets/").content.decode()
    assert "$100.00" in budgets and "Set a budget" not in budgets
    overview = client.get("/o/acme/settings/").content.decode()
    assert "/settings/tokens/" not in overview and "/settings/runpod-key/" not in overview
    assert "/settings/hf-token/" not in overview


# ---- Members and roles ----


def test_it_adds_a_member_with_a_role(alice):
    response = signed_in(alice).post(
        "/o/acme/settings/members/", {"email": "Eve@Acme.example", "role": "admin"}, follow=True
    )
    assert b"Added eve@acme.example as admin." in response.content
    eve = Membership.objects.get(user__email="eve@acme.example")
    assert eve.role == "admin" and not eve.user.has_usable_password()
    event = AuditEvent.objects.filter(event="member.add").latest("seq")
    assert event.actor_via == "web" and event.actor_label == "alice@acme.example"


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"email": "not-an-address", "role": "member"}, "email", "valid email"),
        ({"email": "", "role": "member"}, "email", "may not be blank"),
        ({"email": "eve@acme.example", "role": "emperor"}, "role", "not a valid choice"),
        ({"email": "bob@acme.example", "role": "viewer"}, "email", "already a member"),
    ],
)
def test_it_names_the_field_of_a_refused_member(alice, bob, data, field, message):
    before = settings_state()
    response = signed_in(alice).post("/o/acme/settings/members/", data)
    assert response.status_code == 200
    errors = response.context["errors"]
    assert list(errors) == [field] and message in errors[field][0]
    html = response.content.decode()
    assert f'data-field="{field}"><li>' in html  # the message sits under its control
    assert 'id="error-summary"' in html and f'<code class="muted">{field}</code>' in html
    assert settings_state() == before


def test_it_lets_only_owners_grant_the_owner_role(alice, mallory):
    membership_add(
        org=alice.org,
        user=User.objects.create_user("ada@acme.example", "pw"),
        role="admin",
        actor=SYSTEM,
    )
    admin = Client()
    admin.force_login(User.objects.get(email="ada@acme.example"))
    page = admin.get("/o/acme/settings/members/").content.decode()
    assert 'value="owner"' not in page  # not offered…
    before = settings_state()
    member = Membership.objects.get(user=mallory.user)
    response = admin.post(f"/o/acme/settings/members/{member.pk}/role/", {"role": "owner"})
    assert response.status_code == 403  # …and refused when sent anyway
    assert settings_state() == before


def test_it_changes_a_role(alice, bob):
    member = Membership.objects.get(user=bob.user)
    response = signed_in(alice).post(
        f"/o/acme/settings/members/{member.pk}/role/", {"role": "member"}, follow=True
    )
    assert b"bob@acme.example is now member." in response.content
    member.refresh_from_db()
    assert member.role == "member"


def test_it_keeps_the_last_owner(alice):
    own = Membership.objects.get(user=alice.user)
    client = signed_in(alice)
    response = client.post(
        f"/o/acme/settings/members/{own.pk}/role/", {"role": "viewer"}, follow=True
    )
    assert b"must keep at least one owner" in response.content
    response = client.post(f"/o/acme/settings/members/{own.pk}/remove/", follow=True)
    assert b"must keep at least one owner" in response.content
    own.refresh_from_db()
    assert own.role == "owner"


def test_it_removes_a_member_and_revokes_their_tokens(alice, bob):
    member = Membership.objects.get(user=bob.user)
    response = signed_in(alice).post(f"/o/acme/settings/members/{member.pk}/remove/", follow=True)
    assert b"Removed bob@acme.example" in response.content
    assert not Membership.objects.filter(user=bob.user).exists()
    assert not ApiToken.objects.filter(user=bob.user, revoked_at__isnull=True).exists()


# ---- API tokens ----


def test_it_shows_a_new_token_once(alice, bob):
    client = signed_in(alice)
    response = client.post("/o/acme/settings/tokens/", {"name": "ci-nightly", "user": ""})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    raw = response.context["issued"].raw
    assert raw in response.content.decode()
    token = ApiToken.objects.get(name="ci-nightly")
    assert token.token_hash == token_digest(raw) and token.user == alice.user
    # Afterwards only its prefix is ever shown.
    listing = client.get("/o/acme/settings/tokens/").content.decode()
    assert raw not in listing and f"{token.prefix}…" in listing
    event = AuditEvent.objects.filter(event="token.create").latest("seq")
    assert raw not in str(event.after)


def test_it_creates_a_token_acting_as_another_member(alice, bob):
    response = signed_in(alice).post(
        "/o/acme/settings/tokens/", {"name": "bob-ci", "user": "bob@acme.example"}
    )
    assert response.status_code == 200
    assert ApiToken.objects.get(name="bob-ci").user == bob.user


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"name": ""}, "name", "required"),
        ({"name": "x" * 101}, "name", "no more than 100"),
        ({"name": "t", "user": "charlie@globex.example"}, "user", "No member"),
        ({"name": "t", "user": "not-an-address"}, "user", "valid email"),
    ],
)
def test_it_names_the_field_of_a_refused_token(alice, charlie, data, field, message):
    before = settings_state()
    response = signed_in(alice).post("/o/acme/settings/tokens/", data)
    assert response.status_code == 200 and response.context["issued"] is None
    errors = response.context["errors"]
    assert list(errors) == [field] and message in errors[field][0]
    assert settings_state() == before


def test_it_revokes_a_token(alice):
    token = ApiToken.objects.get(user=alice.user)
    response = signed_in(alice).post(f"/o/acme/settings/tokens/{token.pk}/revoke/", follow=True)
    assert "Revoked the token" in response.content.decode()
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert alice.client().get("/api/v1/orgs/").status_code == 401


# ---- Budgets ----


def test_it_sets_standing_month_and_experiment_budgets(alice):
    experiment = make_experiment(alice.org)
    client = signed_in(alice)
    for data in (
        {"limit_usd": "500", "note": "standing"},
        {"limit_usd": "750.50", "month": "2026-07"},  # what <input type="month"> sends
        {"limit_usd": "40", "experiment": str(experiment.pk)},
    ):
        response = client.post("/o/acme/settings/budgets/", data)
        assert response.status_code == 302, response.context and response.context["errors"]
    budgets = {b.scope: b for b in Budget.objects.filter(organization=alice.org)}
    assert budgets["standing"].limit_usd == Decimal(500) and budgets["standing"].note == "standing"
    assert budgets["month"].month.isoformat() == "2026-07-01"
    assert budgets["experiment"].experiment == experiment
    page = client.get("/o/acme/settings/budgets/").content.decode()
    assert "July 2026" in page and "batching" in page and "$750.50" in page


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"limit_usd": "-1"}, "limit_usd", "greater than or equal to 0"),
        ({"limit_usd": "lots"}, "limit_usd", "valid number"),
        ({}, "limit_usd", "required"),
        ({"limit_usd": "5", "month": "2026-07-15"}, "month", "first day"),
        ({"limit_usd": "5", "month": "July"}, "month", "wrong format"),
        ({"limit_usd": "5", "month": "2026-07", "experiment": "EXP"}, "month", "not both"),
        ({"limit_usd": "5", "experiment": "GLOBEX"}, "experiment", "does not exist"),
    ],
)
def test_it_names_the_field_of_a_refused_budget(alice, charlie, data, field, message):
    ours = make_experiment(alice.org)
    theirs = make_experiment(charlie.org)
    ids = {"EXP": str(ours.pk), "GLOBEX": str(theirs.pk)}
    data = {k: ids.get(v, v) for k, v in data.items()}
    before = settings_state()
    response = signed_in(alice).post("/o/acme/settings/budgets/", data)
    assert response.status_code == 200
    errors = response.context["errors"]
    assert field in errors and message in " ".join(errors[field]), errors
    assert settings_state() == before


def test_it_removes_a_budget(alice):
    budget = budget_set(org=alice.org, actor=SYSTEM, limit_usd=Decimal(10))
    response = signed_in(alice).post(f"/o/acme/settings/budgets/{budget.pk}/delete/", follow=True)
    assert b"Removed the standing monthly budget." in response.content
    assert not Budget.objects.filter(pk=budget.pk).exists()


# ---- The Runpod key ----


def test_it_sets_replaces_and_removes_the_runpod_key_showing_only_its_fingerprint(alice):
    client = signed_in(alice)
    assert b"No key is set" in client.get("/o/acme/settings/runpod-key/").content
    response = client.post("/o/acme/settings/runpod-key/", {"api_key": RUNPOD_KEY}, follow=True)
    html = response.content.decode()
    assert "…abcd" in html and RUNPOD_KEY not in html and "SECRET" not in html
    replacement = "rpa_ANOTHERANOTHERANOTHER9876wxyz"
    html = client.post(
        "/o/acme/settings/runpod-key/", {"api_key": replacement}, follow=True
    ).content.decode()
    assert "…wxyz" in html and replacement not in html
    assert ProviderCredential.objects.get(organization=alice.org).fingerprint == "…wxyz"
    html = client.post("/o/acme/settings/runpod-key/remove/", follow=True).content.decode()
    assert "Removed the Runpod API key" in html
    assert not ProviderCredential.objects.filter(organization=alice.org).exists()


@pytest.mark.parametrize(
    ("api_key", "message"),
    [
        ("", "Must not be empty."),
        (
            "rpa_with space_0123456789",
            "Must be printable ASCII without spaces, tabs or line breaks.",
        ),
    ],
)
def test_it_refuses_a_bad_runpod_key_and_keeps_the_old_one(alice, api_key, message):
    provider_key_set(actor=SYSTEM, org=alice.org, provider="runpod", api_key=RUNPOD_KEY)
    response = signed_in(alice).post("/o/acme/settings/runpod-key/", {"api_key": api_key})
    assert response.status_code == 200
    assert response.context["errors"] == {"api_key": [message]}
    html = response.content.decode()
    assert RUNPOD_KEY not in html and (not api_key or api_key not in html)
    assert ProviderCredential.objects.get(organization=alice.org).fingerprint == "…abcd"


# ---- The shell: organization switcher and navigation ----


def test_it_lists_the_users_organizations_in_the_switcher_with_the_current_one_marked(
    alice, charlie
):
    membership_add(org=charlie.org, user=alice.user, role="viewer", actor=SYSTEM)
    html = signed_in(alice).get("/o/globex/settings/budgets/").content.decode()
    # Switching keeps the section: globex's budgets page → acme's budgets page.
    assert '<a href="/o/acme/settings/budgets/">Acme' in html
    assert '<a href="/o/globex/settings/budgets/" aria-current="true">Globex' in html
    assert '<a href="/o/globex/settings/" aria-current="page">Settings</a>' in html


def test_it_shows_a_stranger_no_trace_of_the_organization(alice, charlie):
    response = signed_in(charlie).get("/o/acme/settings/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "Acme" not in html and 'id="primary-nav"' not in html


def test_it_links_only_the_sections_whose_pages_exist(alice, monkeypatch):
    from frontend.templatetags import shell

    monkeypatch.setattr(shell, "SECTIONS", (*shell.SECTIONS, ("no-such-page", "Ghost section")))
    html = signed_in(alice).get("/o/acme/settings/").content.decode()
    assert '<a href="/o/acme/settings/" aria-current="page">Settings</a>' in html
    assert "Ghost section" not in html


def test_it_refuses_a_settings_form_without_its_csrf_token(alice):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice.user)
    before = settings_state()
    response = client.post("/o/acme/settings/tokens/", {"name": "forged"})
    assert response.status_code == 403
    assert settings_state() == before
    # The page's own form carries the token.
    assert b'name="csrfmiddlewaretoken"' in client.get("/o/acme/settings/tokens/").content
