"""Web pages reach tenant rows only through the access layer."""

from __future__ import annotations

from django.test import Client

from .conftest import make_experiment


def test_it_redirects_anonymous_visitors_to_sign_in(db):
    response = Client().get("/")
    assert response.status_code == 302
    assert response.url.startswith("/login/")


def test_it_signs_in_with_email_and_password(alice):
    client = Client()
    response = client.post(
        "/login/", {"username": "alice@acme.example", "password": "correct-horse-battery"}
    )
    assert response.status_code == 302
    page = client.get("/")
    assert b"Acme" in page.content


def test_it_refuses_a_wrong_password(alice):
    response = Client().post("/login/", {"username": "alice@acme.example", "password": "nope"})
    assert response.status_code == 200
    assert b"did not match" in response.content


def test_it_shows_an_organization_to_its_members(alice, bob):
    make_experiment(alice.org, name="secret-sauce")
    client = Client()
    client.force_login(bob.user)
    page = client.get("/o/acme/")
    assert page.status_code == 200
    assert b"secret-sauce" in page.content


def test_it_hides_other_tenants_pages(alice, charlie):
    make_experiment(alice.org, name="secret-sauce")
    client = Client()
    client.force_login(charlie.user)
    foreign = client.get("/o/acme/")
    missing = client.get("/o/no-such-org/")
    assert foreign.status_code == missing.status_code == 404
    assert b"secret-sauce" not in foreign.content
    assert b"Acme" not in client.get("/").content


def test_it_answers_api_404s_in_json(alice):
    response = alice.client().get("/api/v1/no-such-thing/")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_it_highlights_the_section_a_page_belongs_to(alice):
    client = Client()
    client.force_login(alice.user)
    # Promotions are a part of Reports (its sub-navigation lists them), not of the overview
    # whose address /o/acme/ is a prefix of theirs.
    html = client.get("/o/acme/promotions/").content.decode()
    assert '<a href="/o/acme/reports/" aria-current="page">Reports</a>' in html
    assert html.count('aria-current="page"') == 2  # Reports, and Promotions in its sub-navigation
    html = client.get("/o/acme/runs/").content.decode()
    assert '<a href="/o/acme/runs/" aria-current="page">Runs</a>' in html
    assert '<a href="/o/acme/reports/">Reports</a>' in html
    html = client.get("/o/acme/").content.decode()
    assert '<a href="/o/acme/" aria-current="page">Overview</a>' in html
