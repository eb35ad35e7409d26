"""Promotion with approval: who may propose and decide, one approved config per experiment,
the deployment recipe, and the audit trail of every step."""

from __future__ import annotations

import shlex

import pytest
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from agents import protocol
from agents.runner.trial_engine import EngineOptions, trial_engine
from runs.actors import Actor
from runs.audit import audit_verify
from runs.errors import Conflict, DomainValidationError
from runs.models import AuditEvent, Membership, Promotion, PromotionState
from runs.run_as_started import job_spec_for_attempt
from runs.services.promotions import promotion_approve, promotion_propose, promotion_reject

from .conftest import _person
from .report_data import build_history


def member(person) -> Membership:
    return Membership.objects.get(user=person.user, organization=person.org)


def actor(person) -> Actor:
    return Actor(user=person.user, via="web", ip="127.0.0.1")


def propose(person, trial, note="cheapest at the SLOs"):
    return promotion_propose(membership=member(person), actor=actor(person), trial=trial, note=note)


def approve(person, promotion, comment="ok"):
    return promotion_approve(
        membership=member(person), actor=actor(person), promotion=promotion, comment=comment
    )


@pytest.fixture
def history(alice):
    return build_history(alice.org)


@pytest.fixture
def dana(org_a):
    """An admin of acme: a second person who may decide."""
    return _person("dana@acme.example", org_a, "admin")


def events(org, prefix="promotion."):
    return list(
        AuditEvent.objects.filter(organization=org, event__startswith=prefix)
        .order_by("seq")
        .values_list("event", "target_id")
    )


def test_it_lets_a_member_propose_and_an_owner_approve(history, mallory, alice):
    promotion = propose(mallory, history.t128)
    assert promotion.state == PromotionState.PROPOSED
    assert promotion.experiment_id == history.small.id
    approved = approve(alice, promotion, comment="ship it")
    assert approved.state == PromotionState.APPROVED
    assert approved.decided_by == alice.user and approved.decision_comment == "ship it"
    assert events(alice.org) == [
        ("promotion.propose", str(promotion.id)),
        ("promotion.approve", str(promotion.id)),
    ]
    approve_event = AuditEvent.objects.get(organization=alice.org, event="promotion.approve")
    assert approve_event.actor_label == "alice@acme.example"
    assert approve_event.after["decision_comment"] == "ship it"
    assert audit_verify(alice.org) is None


def test_it_builds_the_recipe_from_the_serve_flag_schema(history, mallory):
    recipe = propose(mallory, history.t128).recipe
    assert recipe["serve_argv"] == [
        "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--revision", "main",
        "--host", "0.0.0.0", "--port", "8000",
        "--served-model-name", "meta-llama/Llama-3.1-8B-Instruct",
        "--max-num-seqs", "128",
    ]  # fmt: skip  # flag, value
    assert shlex.split(recipe["serve_command"]) == recipe["serve_argv"]
    docker = shlex.split(recipe["docker_command"])
    assert docker[:2] == ["docker", "run"] and "vllm/vllm-openai:v0.11.0" in docker
    assert docker[-2:] == ["--max-num-seqs", "128"]
    pod = recipe["runpod_pod"]
    assert pod["gpu_type_id"] == "NVIDIA H100 80GB HBM3" and pod["gpu_count"] == 1
    assert pod["cloud_type"] == "SECURE" and pod["image_name"] == "vllm/vllm-openai:v0.11.0"
    assert pod["container_disk_in_gb"] == 80 and pod["ports"] == "8000/http"


def test_the_recipe_serves_exactly_what_the_agent_benchmarked(history, mallory, tmp_path):
    """The agent's own argv for the trial (built by the agent's code from the run's frozen
    job) and the recipe's command differ only in the executable and the listening address."""
    trial = history.t128
    job = job_spec_for_attempt(
        trial.run, deadline=timezone.now(), report=protocol.ReportTo(), gpu_type=None
    )
    job = job.model_copy(update={"engine": job.engine.model_copy(update={"kind": "vllm"})})
    engine = trial_engine(
        job,
        trial.serve_config,
        workdir=tmp_path,
        options=EngineOptions(vllm_command=("/opt/venv/bin/vllm", "serve")),
        weights_dir=tmp_path / "weights",
    )
    recipe = propose(mallory, trial).recipe

    def served(argv: list[str]) -> list[str]:
        words = argv[argv.index("serve") + 1 :]
        for flag in ("--host", "--port"):
            words[words.index(flag) + 1] = "ADDRESS"
        return words

    assert served(engine.argv) == served(recipe["serve_argv"])
    assert "--revision" in recipe["serve_argv"]


def test_it_refuses_the_proposer_approving_their_own_proposal(history, alice, dana):
    promotion = propose(alice, history.t128)
    with pytest.raises(PermissionDenied, match="another owner or admin"):
        approve(alice, promotion)
    promotion.refresh_from_db()
    assert promotion.state == PromotionState.PROPOSED and promotion.decided_at is None
    assert events(alice.org) == [("promotion.propose", str(promotion.id))]
    # Another admin may.
    assert approve(dana, promotion).state == PromotionState.APPROVED


def test_it_refuses_a_viewer_proposing(history, bob):
    with pytest.raises(PermissionDenied, match="viewer"):
        propose(bob, history.t128)
    assert not Promotion.objects.exists() and events(bob.org) == []


def test_it_refuses_a_member_deciding(history, alice, mallory):
    promotion = propose(alice, history.t128)
    with pytest.raises(PermissionDenied, match="owners and admins"):
        approve(mallory, promotion)
    with pytest.raises(PermissionDenied, match="owners and admins"):
        promotion_reject(
            membership=member(mallory), actor=actor(mallory), promotion=promotion, comment="no"
        )
    promotion.refresh_from_db()
    assert promotion.state == PromotionState.PROPOSED
    assert [e for e, _ in events(alice.org)] == ["promotion.propose"]


def test_it_keeps_one_approved_config_per_experiment_superseding_the_previous(
    history, mallory, alice, dana
):
    first = approve(alice, propose(mallory, history.t64))
    second_proposal = propose(mallory, history.t128)
    second = approve(dana, second_proposal, comment="faster")
    first.refresh_from_db()
    assert first.state == PromotionState.SUPERSEDED
    assert first.superseded_by_id == second.id and first.superseded_at is not None
    assert second.state == PromotionState.APPROVED
    approved = Promotion.objects.filter(experiment=history.small, state=PromotionState.APPROVED)
    assert list(approved) == [second]
    assert [e for e, _ in events(alice.org)] == [
        "promotion.propose",
        "promotion.approve",
        "promotion.propose",
        "promotion.supersede",
        "promotion.approve",
    ]
    supersede = AuditEvent.objects.get(organization=alice.org, event="promotion.supersede")
    assert supersede.target_id == str(first.id) and supersede.actor_label == "dana@acme.example"
    assert supersede.after["superseded_by"] == str(second.id)
    # Another experiment's approval supersedes nothing here.
    approve(alice, propose(mallory, history.tqwen))
    assert Promotion.objects.get(pk=second.pk).state == PromotionState.APPROVED
    assert audit_verify(alice.org) is None


def test_it_rejects_with_a_required_comment(history, mallory, alice):
    promotion = propose(mallory, history.t128)
    with pytest.raises(DomainValidationError) as refused:
        promotion_reject(
            membership=member(alice), actor=actor(alice), promotion=promotion, comment="  "
        )
    assert "comment" in refused.value.fields
    assert Promotion.objects.get(pk=promotion.pk).state == PromotionState.PROPOSED
    rejected = promotion_reject(
        membership=member(alice), actor=actor(alice), promotion=promotion, comment="too risky"
    )
    assert rejected.state == PromotionState.REJECTED
    assert rejected.decision_comment == "too risky"
    assert [e for e, _ in events(alice.org)] == ["promotion.propose", "promotion.reject"]


def test_it_decides_a_proposal_only_once(history, mallory, alice, dana):
    promotion = propose(mallory, history.t128)
    stale = Promotion.objects.get(pk=promotion.pk)  # what a second browser tab still shows
    approve(alice, promotion)
    with pytest.raises(Conflict, match="already been decided"):
        promotion_reject(membership=member(dana), actor=actor(dana), promotion=stale, comment="x")
    with pytest.raises(Conflict):
        approve(dana, stale)
    assert Promotion.objects.get(pk=promotion.pk).state == PromotionState.APPROVED
    assert [e for e, _ in events(alice.org)] == ["promotion.propose", "promotion.approve"]


def test_it_refuses_simulated_failed_and_duplicate_proposals(history, mallory):
    with pytest.raises(DomainValidationError, match="simulator"):
        propose(mallory, history.tsim)
    failed = history.run_small.trials.get(index=2)
    with pytest.raises(DomainValidationError, match="succeeded"):
        propose(mallory, failed)
    propose(mallory, history.t128)
    with pytest.raises(Conflict, match="open proposal"):
        propose(mallory, history.t128)
    assert Promotion.objects.count() == 1
    assert [e for e, _ in events(mallory.org)] == ["promotion.propose"]


def test_it_refuses_a_note_too_long_and_writes_nothing(history, mallory):
    with pytest.raises(DomainValidationError) as refused:
        propose(mallory, history.t128, note="x" * 2001)
    assert "note" in refused.value.fields
    assert not Promotion.objects.exists() and events(mallory.org) == []


def test_it_hides_other_tenants_promotions_from_their_members(history, mallory, charlie):
    promotion = propose(mallory, history.t128)
    charlies = Membership.objects.get(user=charlie.user)
    with pytest.raises(PermissionDenied):
        promotion_approve(
            membership=charlies, actor=actor(charlie), promotion=promotion, comment=""
        )
    with pytest.raises(PermissionDenied):
        promotion_propose(membership=charlies, actor=actor(charlie), trial=history.t64, note="")
    assert Promotion.objects.get(pk=promotion.pk).state == PromotionState.PROPOSED


# --- API (read-only) ------------------------------------------------------------------------


def test_it_serves_the_promoted_config_per_experiment_over_the_api(history, mallory, alice, bob):
    superseded = approve(alice, propose(mallory, history.t64))
    current = approve(alice, propose(mallory, history.t128))
    propose(mallory, history.tqwen)  # open, not promoted
    response = bob.client().get(
        "/api/v1/orgs/acme/promotions/",
        {"state": "approved", "experiment": str(history.small.id)},
    )
    assert response.status_code == 200
    (promoted,) = response.json()["results"]
    assert promoted["id"] == str(current.id) and promoted["state"] == "approved"
    assert promoted["run"] == str(history.t128.run_id) and promoted["trial_index"] == 1
    assert promoted["serve_config"] == {"max_num_seqs": 128}
    assert promoted["recipe"]["serve_command"].endswith("--max-num-seqs 128")
    assert promoted["proposed_by"] == "mallory@acme.example"
    assert promoted["decided_by"] == "alice@acme.example"
    everything = bob.client().get("/api/v1/orgs/acme/promotions/").json()["results"]
    assert {p["state"] for p in everything} == {"approved", "superseded", "proposed"}
    detail = bob.client().get(f"/api/v1/orgs/acme/promotions/{superseded.id}/").json()
    assert detail["superseded_by"] == str(current.id)


def test_it_hides_other_tenants_promotions_in_the_api(history, mallory, charlie):
    promotion = propose(mallory, history.t128)
    client = charlie.client()
    assert client.get("/api/v1/orgs/acme/promotions/").status_code == 404
    assert client.get(f"/api/v1/orgs/acme/promotions/{promotion.id}/").status_code == 404
    assert client.get(f"/api/v1/orgs/globex/promotions/{promotion.id}/").status_code == 404
    assert client.get("/api/v1/orgs/globex/promotions/").json()["results"] == []


def test_it_offers_no_way_to_write_promotions_over_the_api(history, mallory, alice):
    promotion = propose(mallory, history.t128)
    client = alice.client()
    assert client.post("/api/v1/orgs/acme/promotions/", {}).status_code == 405
    assert client.delete(f"/api/v1/orgs/acme/promotions/{promotion.id}/").status_code == 405
    assert Promotion.objects.get().state == PromotionState.PROPOSED


# --- The run's answer on the promotion pages ----------------------------------------------


def test_it_proposes_the_run_s_answer_with_its_capacity_cost_and_margin(history, web):
    from .test_web_reports import searched

    searched(history.t64, 96, 8000.0)  # 3.99 / 3600 / 8000 × 1e6 → 0.1385, the winner
    searched(history.t128, 96, 6000.0)  # → 0.1847: (0.1847 − 0.1385) / 0.1385 = 33.4 % more
    run = history.run_small
    page = web.get(f"/o/acme/promotions/propose/{run.id}/")
    assert page.status_code == 200
    text = page.content.decode()
    # The answer's winner is pre-selected, its figures shown.
    assert '<option value="0" selected>' in text and '<option value="1">' in text
    assert "(the run's answer)" in text
    assert "concurrency 96 (96–104)" in text and "<strong>0.1385</strong>" in text
    assert "costs <strong>33.4 % more</strong>" in text
    # Another trial named: its own figures, and how far it is from the winner.
    other = web.get(f"/o/acme/promotions/propose/{run.id}/1/").content.decode()
    assert '<option value="1" selected>' in other and "<strong>0.1847</strong>" in other
    assert "costs <strong>33.4 % more</strong> than the winner, trial #0" in other
    response = web.post(f"/o/acme/promotions/propose/{run.id}/", {"trial": "0", "note": "cheap"})
    promotion = Promotion.objects.get(trial=history.t64)
    assert response.status_code == 302 and response.url.endswith(f"/{promotion.id}/")
    detail = web.get(response.url).content.decode()
    assert "concurrency 96 (96–104)" in detail and "<strong>0.1385</strong>" in detail
    assert "costs <strong>33.4 % more</strong>" in detail
    # The form may pick another trial than the URL's.
    web.post(f"/o/acme/promotions/propose/{run.id}/0/", {"trial": "1", "note": "other"})
    assert Promotion.objects.filter(trial=history.t128, note="other").exists()


def test_it_pre_selects_the_first_trial_when_the_answer_names_no_winner(history, web, charlie):
    run = history.run_small
    text = web.get(f"/o/acme/promotions/propose/{run.id}/").content.decode()
    assert '<option value="0" selected>' in text
    assert "names no winner" in text
    assert web.get(f"/o/acme/promotions/propose/{run.id}/", {"trial": "9"}).status_code == 200
    assert web.post(f"/o/acme/promotions/propose/{run.id}/", {"trial": "9"}).status_code == 404
    assert not Promotion.objects.exists()
    # Another tenant's run: the same 404 as a missing one.
    from .conftest import signed_in

    stranger = signed_in(charlie)
    assert stranger.get(f"/o/acme/promotions/propose/{run.id}/").status_code == 404
    assert stranger.get(f"/o/globex/promotions/propose/{run.id}/").status_code == 404


# --- A sandbox organization (the demo's) may promote a simulated trial, labelled -----------


@pytest.fixture
def promotion_hook(alice, settings):
    """A webhook asking for promotions: a refused proposal must notify nobody."""
    from runs.services.notifications.hooks import hook_create

    settings.BENCHSITE_OUTBOUND_PRIVATE_HOSTS = ["127.0.0.1"]
    hook_create(
        org=alice.org,
        actor=Actor.system("test"),
        name="promotions",
        kind="webhook",
        events=["promotion.proposed", "promotion.approved"],
        url="http://127.0.0.1:9/hook",
    )


def sandbox(org) -> None:
    type(org).objects.filter(pk=org.pk).update(sandbox=True)
    org.refresh_from_db()


def test_it_refuses_a_simulated_promotion_outside_a_sandbox_and_stores_nothing(
    history, mallory, promotion_hook
):
    from runs.models import Notification

    before = AuditEvent.objects.filter(organization=mallory.org).count()
    with pytest.raises(DomainValidationError) as refused:
        propose(mallory, history.tsim)
    assert "simulator" in refused.value.fields["trial"][0]
    assert "sandbox" in refused.value.fields["trial"][0]
    assert not Promotion.objects.exists()
    assert AuditEvent.objects.filter(organization=mallory.org).count() == before
    assert not Notification.objects.exists()
    # The run page offers no dead end: no "Propose" on a simulated run outside a sandbox.
    from .conftest import signed_in

    page = signed_in(mallory).get(f"/o/acme/runs/{history.tsim.run_id}/").content.decode()
    assert "for production" not in page


def test_it_promotes_a_simulated_trial_in_a_sandbox_labelled_everywhere(
    history, mallory, alice, promotion_hook
):
    from runs.models import Notification

    from .conftest import signed_in

    sandbox(alice.org)
    run_page = signed_in(mallory).get(f"/o/acme/runs/{history.tsim.run_id}/").content.decode()
    assert (
        'Propose <span class="visually-hidden">trial 0 </span>for production (simulated)'
        in run_page
    )
    propose_page = (
        signed_in(mallory)
        .get(f"/o/acme/promotions/propose/{history.tsim.run_id}/0/")
        .content.decode()
    )
    assert "is a sandbox organization, so it may be promoted" in propose_page
    promotion = approve(alice, propose(mallory, history.tsim))
    assert promotion.state == PromotionState.APPROVED and promotion.simulated
    # A measured trial of the same sandbox is promoted as measured.
    assert not propose(mallory, history.t128).simulated
    # The audit trail: every row names it a simulated promotion, and says so in its changes.
    rows = AuditEvent.objects.filter(organization=alice.org, target_id=str(promotion.id))
    assert {row.event for row in rows} == {"promotion.propose", "promotion.approve"}
    assert all(row.target_repr.startswith("simulated promotion of trial 0") for row in rows)
    assert all(row.after["simulated"] is True for row in rows)
    assert audit_verify(alice.org) is None
    audit_page = signed_in(alice).get("/o/acme/audit/").content.decode()
    assert "simulated promotion of trial 0" in audit_page
    # The notifications.
    notices = Notification.objects.filter(data__promotion=str(promotion.id))
    assert {n.event for n in notices} == {"promotion.proposed", "promotion.approved"}
    assert all("simulated promotion" in n.summary and n.data["simulated"] for n in notices)
    # The API, and the pages.
    body = alice.client().get(f"/api/v1/orgs/acme/promotions/{promotion.id}/").json()
    assert body["simulated"] is True
    measured = alice.client().get("/api/v1/orgs/acme/promotions/", {"state": "proposed"})
    assert [p["simulated"] for p in measured.json()["results"]] == [False]
    listing = signed_in(alice).get("/o/acme/promotions/").content.decode()
    assert listing.count('<span class="badge badge-simulated"') == 1
    detail = signed_in(alice).get(f"/o/acme/promotions/{promotion.id}/").content.decode()
    assert 'id="simulated-promotion"' in detail and "not measurements" in detail


def test_a_sandbox_is_only_what_the_demo_seeds(db):
    import io

    from django.core.management import call_command

    from runs.models import Organization, User

    call_command("createorg", "plain", owner="owner@plain.example", stdout=io.StringIO())
    call_command("seed_demo", stdout=io.StringIO())
    assert Organization.objects.get(slug="demo").sandbox
    assert not Organization.objects.get(slug="plain").sandbox
    # Seeding again keeps it one; the API shows it, read-only.
    call_command("seed_demo", stdout=io.StringIO())
    assert Organization.objects.get(slug="demo").sandbox
    from .conftest import signed_in

    owner = type("Person", (), {"user": User.objects.get(email="alice@demo.example")})
    page = signed_in(owner).get("/o/demo/settings/").content.decode()
    assert 'id="sandbox-notice"' in page
