"""Rules that the web pages and the API share: each lives in one service or selector, and
both doors give the same answer (same rows, same refusal) for the same input."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from runs.models import ApiToken, AuditEvent, Experiment, Membership, Promotion, User
from runs.services.promotions import promotion_decision_refusal, promotion_is_own

from .conftest import WORKLOAD, _person, experiment_payload, make_experiment, make_model, signed_in
from .test_web_experiments import builder_form


def _members_api(org: str) -> str:
    return reverse("member-list", kwargs={"org": org})


def _tokens_api(org: str) -> str:
    return reverse("token-list", kwargs={"org": org})


@pytest.fixture
def dana(org_a):
    """An admin of acme: may add members, may not grant the owner role."""
    return _person("dana@acme.example", org_a, "admin")


# ---- Member add: find or create the user, add, audit; one transaction ----


def _add_member_web(person, email: str, role: str):
    return signed_in(person).post("/o/acme/settings/members/", {"email": email, "role": role})


def _add_member_api(person, email: str, role: str):
    return person.client().post(_members_api("acme"), {"email": email, "role": role}, format="json")


@pytest.mark.parametrize("add", [_add_member_web, _add_member_api], ids=["web", "api"])
def test_it_adds_an_existing_user_found_ignoring_case(alice, charlie, add):
    response = add(alice, "CHARLIE@Globex.example", "viewer")
    assert response.status_code in (201, 302)
    assert Membership.objects.filter(organization=alice.org, user=charlie.user).exists()
    assert User.objects.filter(email__iexact="charlie@globex.example").count() == 1


@pytest.mark.parametrize("add", [_add_member_web, _add_member_api], ids=["web", "api"])
def test_it_refuses_an_add_leaving_no_new_user_behind(dana, add):
    users = User.objects.count()
    response = add(dana, "newcomer@acme.example", "owner")  # only an owner grants owner
    assert response.status_code == 403
    assert User.objects.count() == users


@pytest.mark.parametrize("add", [_add_member_web, _add_member_api], ids=["web", "api"])
def test_it_refuses_a_member_added_twice_on_the_email_field(alice, bob, add):
    response = add(alice, "Bob@Acme.example", "admin")
    assert response.status_code in (200, 400)  # the page shows its form again, with the error
    assert "bob@acme.example is already a member." in response.content.decode()
    assert Membership.objects.get(user=bob.user).role == "viewer"


# ---- The user a new token acts as ----


def _token_web(person, name: str, acts_as: str):
    return signed_in(person).post("/o/acme/settings/tokens/", {"name": name, "user": acts_as})


def _token_api(person, name: str, acts_as: str):
    body = {"name": name} | ({"user": acts_as} if acts_as else {})
    return person.client().post(_tokens_api("acme"), body, format="json")


@pytest.mark.parametrize("create", [_token_web, _token_api], ids=["web", "api"])
@pytest.mark.parametrize(
    ("acts_as", "expected"), [("BOB@acme.example", "bob"), ("", "alice")], ids=["member", "self"]
)
def test_it_issues_a_token_acting_as_the_same_user(alice, bob, create, acts_as, expected):
    response = create(alice, "ci", acts_as)
    assert response.status_code in (200, 201)
    token = ApiToken.objects.get(organization=alice.org, name="ci")
    assert token.user == {"bob": bob.user, "alice": alice.user}[expected]


@pytest.mark.parametrize("create", [_token_web, _token_api], ids=["web", "api"])
def test_it_refuses_a_token_acting_as_another_tenants_user(alice, charlie, create):
    response = create(alice, "ci", charlie.user.email)
    assert response.status_code in (200, 400)
    assert "No member with this e-mail address." in response.content.decode()
    assert not ApiToken.objects.filter(name="ci").exists()


# ---- Self-approval of promotions ----


def test_it_lets_nobody_decide_on_their_own_proposal(alice, dana):
    owner = Membership.objects.get(user=alice.user)
    admin = Membership.objects.get(user=dana.user)
    own = Promotion(organization=alice.org, proposed_by=alice.user)
    assert promotion_is_own(membership=owner, promotion=own)
    assert "You proposed this" in promotion_decision_refusal(membership=owner, promotion=own)
    assert promotion_decision_refusal(membership=admin, promotion=own) is None


def test_it_treats_a_proposal_whose_proposer_is_gone_as_nobodys_own(alice):
    owner = Membership.objects.get(user=alice.user)
    orphan = Promotion(organization=alice.org, proposed_by=None)
    assert not promotion_is_own(membership=owner, promotion=orphan)
    assert promotion_decision_refusal(membership=owner, promotion=orphan) is None


def test_it_refuses_a_viewer_a_decision(alice, bob):
    viewer = Membership.objects.get(user=bob.user)
    proposal = Promotion(organization=alice.org, proposed_by=alice.user)
    assert "your role is viewer" in promotion_decision_refusal(
        membership=viewer, promotion=proposal
    )


# ---- Checking a draft experiment: pure, and exactly as strict as create ----


def experiments_state() -> tuple:
    """What checking a draft could write: experiments (every column) and audit events."""
    rows = Experiment.objects.order_by("id").values()
    return [sorted(row.items()) for row in rows], AuditEvent.objects.count()


def _check_api(person, model):
    client, url = person.client(), reverse("experiment-validate", kwargs={"org": "acme"})
    client.get(reverse("org-list"))  # the token's use is recorded now, not during the check
    return lambda: client.post(url, experiment_payload(model.id), format="json")


def _check_web(person, model):
    client = signed_in(person)
    return lambda: client.post("/o/acme/experiments/check/", builder_form(model))


@pytest.mark.parametrize("check", [_check_api, _check_web], ids=["api", "web"])
def test_it_checks_a_draft_without_writing_recording_or_locking(alice, check):
    send = check(alice, make_model(alice.org))
    before = experiments_state()
    with CaptureQueriesContext(connection) as queries:
        response = send()
    assert response.status_code == 200, response.content
    assert experiments_state() == before
    statements = [query["sql"].upper() for query in queries.captured_queries]
    # No insert to roll back, no savepoint to roll back to, no lock on the organization.
    assert not [sql for sql in statements if "SAVEPOINT" in sql or "FOR UPDATE" in sql]
    assert not [sql for sql in statements if sql.startswith(("INSERT", "UPDATE", "DELETE"))]


# A taken name is not among them: validate/ passes a file whose experiment exists (with a
# warning saying how they differ) so a CI step can validate on every push, where create
# refuses it (tests/site/test_experiment_file_check.py).
BAD_DRAFTS = {
    "unknown flag": {"serve_grid": {"max_num_seq": [64]}},
    "too long for context": {
        "workload": WORKLOAD
        | {"dataset": {"kind": "random", "input_len": 131000, "output_len": 128}}
    },
    "no image tag": {"engine_image_tag": ""},
    "negative cap": {"budget_cap_usd": "-1"},
    "gpu count": {"gpu_count": 0},
}


@pytest.mark.parametrize("change", BAD_DRAFTS.values(), ids=BAD_DRAFTS.keys())
def test_it_refuses_a_bad_draft_as_create_refuses_it(alice, change):
    model = make_model(alice.org)
    make_experiment(alice.org, model=model)  # holds the name "batching"
    payload = experiment_payload(model.id) | change
    client = alice.client()
    checked = client.post(
        reverse("experiment-validate", kwargs={"org": "acme"}), payload, format="json"
    )
    created = client.post(
        reverse("experiment-list", kwargs={"org": "acme"}), payload, format="json"
    )
    assert checked.status_code == created.status_code == 400
    assert checked.json()["error"]["fields"] == created.json()["error"]["fields"]
    assert Experiment.objects.filter(organization=alice.org).count() == 1


def test_it_checks_an_edit_as_update_would_and_leaves_the_experiment_as_stored(alice):
    model = make_model(alice.org)
    make_experiment(alice.org, model=model, name="taken")
    experiment = make_experiment(alice.org, model=model)
    before = experiments_state()
    form = builder_form(model, name="taken")
    checked = signed_in(alice).post(f"/o/acme/experiments/{experiment.id}/check/", form).json()
    updated = alice.client().patch(
        reverse("experiment-detail", kwargs={"org": "acme", "pk": experiment.id}),
        {"name": "taken"},
        format="json",
    )
    assert checked["ok"] is False
    assert checked["fields"] == updated.json()["error"]["fields"]
    assert experiments_state() == before
