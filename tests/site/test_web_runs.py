"""The run pages (issue 7, part C): the live run page and its JSON, cancel, history, compare.

Access rules on every page (anonymous → sign in, another tenant → 404, a viewer reads but
cannot cancel) and the bad-input paths (clear message, no 500, nothing changed)."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from decimal import Decimal
from html import unescape

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from runs.models import (
    AgentMessageRecord,
    AuditEvent,
    GpuType,
    Measurement,
    ModelSpec,
    Run,
    Trial,
)

from .conftest import H100, frozen, make_experiment, make_model, signed_in
from .report_data import add_run, add_trial, level

LEVELS = (1, 8, 64)


def result(concurrency: int, *, ttft=50.0, throughput=1000.0, simulated=False) -> dict:
    """A level result with the ``vllm bench serve`` keys the pages read."""
    figures = {
        "completed": 100,
        "failed": 0,
        "duration": 10.0,
        "median_ttft_ms": ttft,
        "p99_ttft_ms": ttft * 2,
        "median_itl_ms": 10.0,
        "p99_itl_ms": 20.0,
        "median_tpot_ms": 11.0,
        "p99_tpot_ms": 22.0,
        "output_throughput": throughput * concurrency,
    }
    if simulated:
        figures["simulated"] = {"speed": 1.0}
    return figures


def new_experiment(org, name: str | None = None, **fields):
    """An experiment of the organization's first model (one is registered when none is)."""
    model = fields.pop("model", None) or (
        ModelSpec.objects.filter(organization=org).first() or make_model(org)
    )
    return make_experiment(org, model=model, name=name or f"e-{uuid.uuid4().hex[:8]}", **fields)


def seed_run(
    org,
    *,
    experiment=None,
    configs=({"max_num_seqs": 64}, {"max_num_seqs": 128}),
    state="succeeded",
    ttft=50.0,
    throughput=1000.0,
    simulated=False,
    created_at=None,
    **run_fields,
) -> Run:
    """A run with one trial per config and a measurement per level (and its agent
    messages: hello, then per trial a start, a cold-start phase and the levels)."""
    experiment = experiment or new_experiment(org)
    run = Run.objects.create(
        organization=org,
        experiment=experiment,
        state=state,
        created_at=created_at or timezone.now(),
        **frozen(experiment),
        **run_fields,
    )
    seq = 0
    AgentMessageRecord.objects.create(
        organization_id=run.organization_id, run=run, seq=seq, type="hello", payload={}
    )
    for index, config in enumerate(configs):
        trial = Trial.objects.create(
            organization_id=run.organization_id,
            run=run,
            index=index,
            serve_config=config,
            command=["vllm", "serve", "m"],
            cold_start={"weights_loaded": 20.5, "health_ready": 31.0},
            outcome="succeeded",
        )
        for concurrency in LEVELS:
            Measurement.objects.create(
                organization_id=trial.organization_id,
                trial=trial,
                concurrency=concurrency,
                result=result(concurrency, ttft=ttft, throughput=throughput, simulated=simulated),
                server_metrics={
                    "kv_cache_usage_perc": {"max": 0.5, "mean": 0.3},
                    "num_requests_waiting": {"max": 3, "mean": 1},
                },
            )
            seq += 1
            AgentMessageRecord.objects.create(
                organization_id=run.organization_id,
                run=run,
                seq=seq,
                type="level_progress",
                payload={
                    "type": "level_progress",
                    "trial": index,
                    "level": {"concurrency": concurrency},
                    "requests_done": 50,
                    "requests_total": 100,
                    "kv_cache_usage": 0.25,
                    "num_requests_waiting": 2,
                    "sent_at": 1_700_000_000.0 + seq,
                },
            )
    return run


def detail_url(run) -> str:
    return reverse("run-detail", args=[run.organization.slug, run.id])


def live_url(run) -> str:
    return reverse("run-live", args=[run.organization.slug, run.id])


def cancel_url(run) -> str:
    return reverse("run-cancel", args=[run.organization.slug, run.id])


def compare_url(org="acme") -> str:
    return reverse("runs-compare", args=[org])


# --- access rules ----------------------------------------------------------------------------


def test_it_sends_anonymous_visitors_to_sign_in(alice):
    run = seed_run(alice.org, state="benchmarking")
    anonymous = Client()
    for url in (reverse("runs", args=["acme"]), detail_url(run), live_url(run), compare_url()):
        response = anonymous.get(url)
        assert response.status_code == 302, url
        assert response.url.startswith("/login/"), url
    response = anonymous.post(cancel_url(run))
    assert response.status_code == 302 and response.url.startswith("/login/")
    assert Run.objects.get(pk=run.pk).cancel_requested_at is None


def test_it_hides_other_tenants_runs(alice, charlie):
    run = seed_run(alice.org, state="benchmarking")
    own = seed_run(charlie.org)
    client = signed_in(charlie)
    assert client.get(detail_url(run)).status_code == 404
    assert client.get(live_url(run)).status_code == 404
    assert client.post(cancel_url(run)).status_code == 404
    # Same answer for a run that does not exist at all.
    missing = reverse("run-detail", args=["acme", uuid.uuid4()])
    assert client.get(missing).status_code == 404
    # An acme run id in globex's history or compare page, or named under acme's slug.
    assert client.get(reverse("runs", args=["acme"])).status_code == 404
    foreign = client.get(compare_url("globex"), {"runs": [str(own.id), str(run.id)]})
    assert foreign.status_code == 404
    assert str(run.id) not in foreign.content.decode()
    assert client.get(compare_url("acme"), {"runs": [str(run.id), str(run.id)]}).status_code == 404
    assert Run.objects.get(pk=run.pk).cancel_requested_at is None


def test_it_hides_other_tenants_runs_from_the_history(alice, charlie):
    seed_run(alice.org, experiment=new_experiment(alice.org, name="acme-secret"))
    seed_run(charlie.org, experiment=new_experiment(charlie.org, name="globex-own"))
    page = signed_in(charlie).get(reverse("runs", args=["globex"]))
    assert page.status_code == 200
    assert b"globex-own" in page.content
    assert b"acme-secret" not in page.content


def test_it_lets_a_viewer_watch_but_not_cancel(alice, bob):
    run = seed_run(alice.org, state="benchmarking")
    client = signed_in(bob)
    page = client.get(detail_url(run))
    assert page.status_code == 200
    assert b"cancel-button" not in page.content
    assert b"can watch this run but not cancel it" in page.content
    assert client.get(live_url(run)).status_code == 200
    refused = client.post(cancel_url(run), {"reason": "mine now"})
    assert refused.status_code == 403
    run.refresh_from_db()
    assert run.cancel_requested_at is None and run.state == "benchmarking"
    assert not AuditEvent.objects.filter(event="run.cancel").exists()


# --- the run page ----------------------------------------------------------------------------


def test_it_shows_a_run_with_every_measurement_without_javascript(alice):
    run = seed_run(alice.org)
    page = signed_in(alice).get(detail_url(run))
    assert page.status_code == 200
    html = page.content.decode()
    # Both trials, labelled by the flag that tells them apart, each with its three levels.
    assert "max_num_seqs=64" in html and "max_num_seqs=128" in html
    assert html.count('<th scope="row">c=') == 2 * len(LEVELS)
    assert "50.0 / 100.0" in html  # TTFT p50 / p99 of a level
    assert "weights_loaded 20.5 s" in html
    assert 'id="run-state-data"' in html  # the live state, for the script
    # Charts come from the vendored file, never a CDN.
    assert "/static/frontend/vendor/chart.umd.min.js" in html
    assert not re.search(r"<script[^>]+src=\"https?://", html)
    assert "badge-simulated" not in html
    assert "{#" not in html and "{%" not in html  # no template syntax leaks into the page


def test_it_labels_simulated_results(alice):
    experiment = new_experiment(alice.org, name="simmed", engine="sim", engine_image_tag="")
    run = seed_run(alice.org, experiment=experiment, simulated=True)
    html = signed_in(alice).get(detail_url(run)).content.decode()
    assert html.count('class="badge-simulated"') >= 1 + 2 + 2 * len(LEVELS)
    state = signed_in(alice).get(live_url(run)).json()
    assert state["run"]["simulated"] is True
    assert all(level["simulated"] for trial in state["trials"] for level in trial["levels"])


def test_it_shows_failure_classes_with_their_log_tails(alice):
    run = seed_run(alice.org, configs=({"max_num_seqs": 64},))
    Trial.objects.create(
        organization_id=run.organization_id,
        run=run,
        index=1,
        serve_config={"max_num_seqs": 128},
        outcome="failed",
        failure_class="oom_at_startup",
        log_tail="torch.OutOfMemoryError: CUDA out of memory <script>x</script>",
    )
    html = signed_in(alice).get(detail_url(run)).content.decode()
    assert "oom_at_startup" in html
    assert "CUDA out of memory &lt;script&gt;" in html  # escaped, never markup


def propose_url(run, index: int) -> str:
    return reverse("promotion-propose", args=[run.organization.slug, run.id, index])


def test_it_offers_each_succeeded_measured_trial_for_production(alice, mallory):
    run = seed_run(alice.org, state="failed")
    Trial.objects.filter(run=run, index=1).update(outcome="failed", failure_class="crash")
    client = signed_in(mallory)  # a member may propose; an owner or admin approves
    html = client.get(detail_url(run)).content.decode()
    assert html.count("for production</a>") == 1
    assert f'href="{propose_url(run, 0)}"' in html and propose_url(run, 1) not in html
    # The live page's trial cards, re-read after a reconnect, carry the same link.
    trials_html = client.get(live_url(run)).json()["trials_html"]
    assert f'href="{propose_url(run, 0)}"' in trials_html and propose_url(run, 1) not in trials_html
    assert client.get(propose_url(run, 0)).status_code == 200


def test_it_offers_no_simulated_trial_for_production(alice):
    experiment = new_experiment(alice.org, name="simmed", engine="sim", engine_image_tag="")
    run = seed_run(alice.org, experiment=experiment, simulated=True)
    client = signed_in(alice)
    assert "for production</a>" not in client.get(detail_url(run)).content.decode()
    assert "for production</a>" not in client.get(live_url(run)).json()["trials_html"]


def test_it_offers_viewers_no_proposal(alice, bob):
    run = seed_run(alice.org)
    client = signed_in(bob)
    assert "for production</a>" not in client.get(detail_url(run)).content.decode()
    assert "for production</a>" not in client.get(live_url(run)).json()["trials_html"]
    assert client.get(propose_url(run, 0)).status_code == 403


def test_its_live_state_names_the_messages_it_covers(alice):
    run = seed_run(alice.org, state="benchmarking")
    AgentMessageRecord.objects.create(
        organization_id=run.organization_id, run=run, seq=9, type="heartbeat", payload={}
    )
    state = signed_in(alice).get(live_url(run)).json()
    # Resends may still fill 7 and 8: not covered.
    assert state["epochs_read"] == [{"epoch": 0, "last_seq": 9, "gaps": [[7, 8]]}]
    assert len(state["progress"]) == 2 * len(LEVELS)
    assert state["progress"][0]["kv_cache_usage"] == 0.25
    assert state["axis"] == "concurrency"
    trial = state["trials"][0]
    assert [level["key"] for level in trial["levels"]] == ["c=1", "c=8", "c=64"]
    assert trial["levels"][1]["ttft_p50"] == 50.0 and trial["levels"][1]["ttft_p99"] == 100.0
    assert trial["levels"][1]["output_throughput"] == 8000.0
    assert 'name="trials"' in state["trials_html"]
    assert [entry["stage"] for entry in state["timeline"]][:2] == ["queued", "agent"]
    assert state["timeline"][-1]["status"] == "now"
    assert state["run"]["terminal"] is False


def test_its_live_state_names_the_messages_it_covers_in_each_epoch(alice):
    # seed_run's messages are epoch 0, seq 0-6; two restarted agents numbered from 0 again.
    run = seed_run(alice.org, state="benchmarking", configs=({"max_num_seqs": 64},))
    # The last, far beyond the others, is one gap: the answer never lists every seq.
    for epoch, seqs in ((1, (0, 1, 2)), (2, (0, 3, 10**6))):
        for seq in seqs:
            AgentMessageRecord.objects.create(
                organization_id=run.organization_id,
                run=run,
                epoch=epoch,
                seq=seq,
                type="level_progress",
                payload={"trial": 0, "level": {"concurrency": 64}, "sent_at": 1_800_000_000 + seq},
            )
    state = signed_in(alice).get(live_url(run)).json()
    assert state["epochs_read"] == [
        {"epoch": 0, "last_seq": 3, "gaps": []},
        {"epoch": 1, "last_seq": 2, "gaps": []},
        {"epoch": 2, "last_seq": 10**6, "gaps": [[1, 2], [4, 10**6 - 1]]},
    ]
    # The live progress in the order the agents sent it: each epoch after the one before.
    order = [(point["epoch"], point["seq"]) for point in state["progress"]]
    assert order == [(0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (2, 0), (2, 3), (2, 10**6)]


def test_it_warns_of_agent_conflicts_on_the_run_page(alice):
    reason = (
        "2025-01-02 03:04:05 UTC: a heartbeat at epoch 1, seq 4 differed from the stored "
        "measurement"
    )
    run = seed_run(alice.org, state="benchmarking", agent_conflicts=3, agent_conflict_last=reason)
    client = signed_in(alice)
    html = client.get(detail_url(run)).content.decode()
    warning = re.search(r'<div id="agent-conflicts"[^>]*>(.*?)</div>', html, re.S)
    assert warning and 'role="alert"' in warning.group(0) and "hidden" not in warning.group(0)
    text = " ".join(re.sub(r"<[^>]+>", " ", warning.group(1)).split())
    assert "3 agent messages were refused" in text
    assert f"The last: {reason}" in text
    shown = client.get(live_url(run)).json()["run"]
    assert shown["agent_conflicts"] == 3 and shown["agent_conflict_last"] == reason


def test_it_shows_no_conflict_warning_for_a_run_without_conflicts(alice):
    run = seed_run(alice.org, state="benchmarking")
    html = signed_in(alice).get(detail_url(run)).content.decode()
    assert re.search(r'<div id="agent-conflicts"[^>]* hidden>', html)
    assert "agent messages were refused" not in html


def test_it_shows_spend_against_the_budget_cap(alice):
    run = seed_run(
        alice.org,
        state="benchmarking",
        price_usd_hr=Decimal("3.99"),
        pod_started_at=timezone.now() - timedelta(minutes=10),
        cost_usd=Decimal("0.25"),
    )
    html = signed_in(alice).get(detail_url(run)).content.decode()
    assert "$0.2500" in html and "of $50.00 cap" in html
    state = signed_in(alice).get(live_url(run)).json()["run"]
    assert state["price_usd_hr"] == "3.9900" and state["budget_cap_usd"] == "50.00"


# --- cancel ----------------------------------------------------------------------------------


def test_it_cancels_a_run_for_a_member(alice, mallory):
    run = seed_run(alice.org, state="benchmarking")
    response = signed_in(mallory).post(cancel_url(run), {"reason": "wrong grid"})
    assert response.status_code == 302 and response.url == detail_url(run)
    run.refresh_from_db()
    assert run.cancel_requested_at is not None and run.cancel_reason == "wrong grid"
    assert AuditEvent.objects.filter(event="run.cancel").count() == 1
    page = signed_in(mallory).get(detail_url(run)).content.decode()
    assert "Cancel requested" in page


def test_it_refuses_to_cancel_an_ended_run_and_says_why(alice):
    run = seed_run(alice.org, state="succeeded")
    client = signed_in(alice)
    response = client.post(cancel_url(run), follow=True)
    assert response.status_code == 200
    assert "Not cancelled: Run" in response.content.decode()
    assert "has already ended" in response.content.decode()
    assert response.content.decode().count("Not cancelled:") == 1  # one messages area
    run.refresh_from_db()
    assert run.state == "succeeded" and run.cancel_requested_at is None


def test_it_refuses_a_too_long_reason_and_keeps_the_run(alice):
    run = seed_run(alice.org, state="benchmarking")
    response = signed_in(alice).post(cancel_url(run), {"reason": "x" * 501}, follow=True)
    assert "Not cancelled:" in response.content.decode()
    run.refresh_from_db()
    assert run.cancel_requested_at is None and run.state == "benchmarking"


def test_it_answers_a_get_on_cancel_with_405(alice):
    run = seed_run(alice.org, state="benchmarking")
    assert signed_in(alice).get(cancel_url(run)).status_code == 405


# --- history ---------------------------------------------------------------------------------


def test_it_filters_the_history_on_the_server(alice):
    make_model(alice.org)  # the runs' usual model
    other_model = make_model(alice.org, name="other-model", hf_repo="acme/other-model")
    now = timezone.now()
    old = seed_run(alice.org, state="failed", created_at=now - timedelta(days=40))
    sim = seed_run(
        alice.org,
        experiment=new_experiment(alice.org, name="sim-exp", engine="sim", engine_image_tag=""),
    )
    tagged = seed_run(
        alice.org,
        experiment=new_experiment(
            alice.org, name="new-vllm", model=other_model, engine_image_tag="v0.12.0"
        ),
        pod_gpu_type="NVIDIA H200",
    )
    client = signed_in(alice)
    url = reverse("runs", args=["acme"])

    def found(**query) -> set:
        page = client.get(url, query)
        assert page.status_code == 200
        return set(re.findall(r'name="runs" value="([0-9a-f-]+)"', page.content.decode()))

    assert found() == {str(old.id), str(sim.id), str(tagged.id)}
    assert found(model=str(other_model.id)) == {str(tagged.id)}
    assert found(gpu="NVIDIA H200") == {str(tagged.id)}
    assert found(gpu="NVIDIA H100 80GB HBM3") == {str(old.id), str(sim.id)}
    assert found(engine="sim") == {str(sim.id)}
    assert found(engine="v0.12.0") == {str(tagged.id)}
    assert found(state="failed") == {str(old.id)}
    yesterday = (now - timedelta(days=1)).date().isoformat()
    assert found(created_from=yesterday) == {str(sim.id), str(tagged.id)}
    assert found(created_to=(now - timedelta(days=30)).date().isoformat()) == {str(old.id)}


def test_it_explains_bad_history_filters_instead_of_failing(alice, charlie):
    run = seed_run(alice.org)
    foreign_model = make_model(charlie.org)
    page = signed_in(alice).get(
        reverse("runs", args=["acme"]),
        {"created_from": "yesterday", "model": str(foreign_model.id), "state": "exploded"},
    )
    assert page.status_code == 200
    html = page.content.decode()
    assert "Enter a valid date." in html
    assert "Select a valid choice" in html  # another tenant's model is no choice here
    assert str(run.id) in html  # the bad fields filter nothing


def test_it_names_the_gpu_a_run_was_started_with_until_its_pod_is_recorded(alice):
    GpuType.objects.filter(id=H100).update(display_name="H100 SXM (catalogue name)")
    unrented = seed_run(alice.org, state="queued")
    rented = seed_run(alice.org, pod_gpu_type="NVIDIA H200")
    client = signed_in(alice)
    history = client.get(reverse("runs", args=["acme"])).content.decode()
    assert "1× H100 SXM (catalogue name)" in history
    assert "1× NVIDIA H200" in history
    assert f"1× {H100}" not in history
    assert "1× H100 SXM (catalogue name)" in client.get(detail_url(unrented)).content.decode()
    assert "1× NVIDIA H200" in client.get(detail_url(rented)).content.decode()


def test_it_pages_the_history_in_constant_queries(alice, django_assert_max_num_queries):
    experiment = new_experiment(alice.org, name="many")
    Run.objects.bulk_create(
        Run(organization=alice.org, experiment=experiment, state="succeeded", **frozen(experiment))
        for _ in range(120)
    )
    client = signed_in(alice)
    client.get(reverse("runs", args=["acme"]))  # session and caches warm
    with django_assert_max_num_queries(12):
        page = client.get(reverse("runs", args=["acme"]), {"page": 2})
    assert page.status_code == 200
    assert "page 2 of 3" in page.content.decode()


# --- compare ---------------------------------------------------------------------------------


def test_it_compares_two_runs_config_by_config_with_direction(alice):
    experiment = new_experiment(alice.org, name="bump")
    before = seed_run(alice.org, experiment=experiment, ttft=100.0, throughput=1000.0)
    after = seed_run(alice.org, experiment=experiment, ttft=80.0, throughput=900.0)
    page = signed_in(alice).get(compare_url(), {"runs": [str(before.id), str(after.id)]})
    assert page.status_code == 200
    html = page.content.decode()
    table = html[html.index('id="compare-table"') :]
    # Four columns: each trial of `after` against the same config of `before`.
    assert table.count("vs column 1") == 2 and table.count("vs column 2") == 1
    # Lower TTFT is better; lower throughput is worse; cost follows throughput (per token).
    assert re.search(r'data-verdict="better">80\.00 <span class="delta">\(-20\.0% ▲ better', table)
    assert re.search(r'data-verdict="worse">900\.00 <span class="delta">\(-10\.0% ▼ worse', table)
    assert "at least <strong>5%</strong>" in html
    cost = table[table.index("$ per 1M output tokens") :]
    assert 'data-verdict="worse">$' in cost.split("</tr>")[0]


def test_the_compare_page_gives_the_answers_cost_at_capacity(alice):
    # The "$0.4710 in the answer and $0.4650 on the compare page": the compare page
    # showed the best fixed level's cost alone. It leads with the answer's own figure.
    run = answered_run(alice.org)
    answer = signed_in(alice).get(f"/api/v1/orgs/acme/runs/{run.id}/").json()["answer"]
    costs = {
        config["trial"]: config["usd_per_million_output_tokens"] for config in answer["configs"]
    }
    trials = [f"{run.id}:0", f"{run.id}:1"]
    html = signed_in(alice).get(compare_url(), {"trials": trials}).content.decode()
    table = html[html.index('id="compare-table"') :]
    row = text_of(table[table.index("$ per 1M output tokens at capacity") :].split("</tr>")[0])
    assert row.startswith(f"$ per 1M output tokens at capacity ${float(costs[0]):.4f}"), row
    assert f"${float(costs[1]):.4f}" in row
    assert "$ per 1M output tokens at the best fixed level" in table


def test_it_marks_the_serve_flags_that_differ_and_honours_the_threshold(alice):
    run = seed_run(alice.org)
    client = signed_in(alice)
    trials = [f"{run.id}:0", f"{run.id}:1"]
    html = client.get(compare_url(), {"trials": trials}).content.decode()
    assert re.search(r'<tr class="differs"><th scope="row"><code>max_num_seqs</code>', html)
    loose = client.get(compare_url(), {"trials": trials, "threshold": "50"}).content.decode()
    assert "at least <strong>50%</strong>" in loose


def test_it_never_ranks_simulated_against_measured(alice):
    measured = seed_run(alice.org, configs=({"max_num_seqs": 64},))
    simulated = seed_run(
        alice.org,
        experiment=new_experiment(alice.org, name="sim", engine="sim", engine_image_tag=""),
        configs=({"max_num_seqs": 64},),
        simulated=True,
        ttft=10.0,
    )
    html = (
        signed_in(alice)
        .get(compare_url(), {"runs": [str(measured.id), str(simulated.id)]})
        .content.decode()
    )
    assert "never compared with each other" in html
    assert "simulated vs measured: not compared" in html
    assert "data-verdict" not in html


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"runs": ["nope", "also-nope"]}, "runs: &#x27;nope&#x27; is not a run id"),
        ({"runs": [str(uuid.uuid4())]}, "Pick two or more runs or trials"),
        ({}, "Pick two or more runs or trials"),
        ({"trials": [str(uuid.uuid4())] * 2}, "is not &lt;run id&gt;:&lt;trial index&gt;"),
        ({"trials": ["12345678-1234-1234-1234-12345678zzzz:0"] * 2}, "is not &lt;run id&gt;"),
        ({"runs": ["x" * 5000]}, "is not a run id"),
    ],
)
def test_it_explains_a_malformed_selection(alice, query, message):
    response = signed_in(alice).get(compare_url(), query)
    assert response.status_code == 400
    assert message in response.content.decode()


def test_it_answers_404_for_a_trial_that_is_not_there(alice):
    run = seed_run(alice.org)
    response = signed_in(alice).get(compare_url(), {"trials": [f"{run.id}:0", f"{run.id}:7"]})
    assert response.status_code == 404


def test_it_explains_a_bad_threshold_and_uses_the_default(alice):
    run = seed_run(alice.org)
    response = signed_in(alice).get(
        compare_url(), {"trials": [f"{run.id}:0", f"{run.id}:1"], "threshold": "lots"}
    )
    assert response.status_code == 200
    assert "is not a percentage from 0 to 100; 5% is used" in response.content.decode()


# --- the answer: capacity at the SLOs, cost there, margin or tie (issue 16) --------------------

# $3.60 per hour is $0.001 per second: 1,000 output tokens/s cost $1 per 1M.
ANSWER_PRICE = "3.60"


def capacity_found(load: float, throughput: float, *, high: float | None) -> dict:
    return {
        "axis": "concurrency",
        "capacity": load,
        "bracket_low": load,
        "bracket_high": high,
        "probes": 3,
        "repeats": 2,
        "levels_measured": 6,
        "stop_reason": "converged",
        "output_throughput": throughput,
    }


def steady_level(load: int, throughput: float, ci: tuple[float, float], **extra) -> dict:
    """A capacity search's level: its steady window, the whole level beside it, a CI."""
    return level(
        load,
        throughput,
        300.0,
        window={
            "start_s": 3.1,
            "end_s": 14.8,
            "requests": 128,
            "ramp_requests": 16,
            "drain_requests": 9,
        },
        whole_level={
            "duration": 17.0,
            "completed": 153,
            "failed": 0,
            "output_throughput": throughput * 0.9,
            "p99_ttft_ms": 777.5,
        },
        ci95={"output_throughput": {"low": ci[0], "high": ci[1]}},
        **extra,
    )


def answered_run(org, *, runner_up_ci=(950.0, 1050.0), experiment=None):
    """A run of two configurations with a capacity each: trial 1 ($0.50 per 1M at c=31)
    against trial 0 ($1.00 per 1M at c=20), or a tie when the margin's interval holds 0."""
    experiment = experiment or new_experiment(org)
    run = add_run(experiment, created_at=timezone.now(), price=ANSWER_PRICE)
    for index, (load, throughput, ci) in enumerate(
        [(20, 1000.0, runner_up_ci), (31, 2000.0, (1900.0, 2100.0))]
    ):
        trial = add_trial(
            run,
            index,
            {"max_num_seqs": 64 * (index + 1)},
            [
                steady_level(load, throughput, ci),
                steady_level(load * 2, throughput, ci, probe=True),
                steady_level(load, throughput, ci, probe=True, repeat=1),
            ],
        )
        trial.capacity = capacity_found(load, throughput, high=load + 1)
        trial.save(update_fields=["capacity"])
    return run


def text_of(html: str) -> str:
    """The page's text, tags dropped and spaces collapsed (to read sentences across tags)."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def test_it_leads_the_run_page_with_the_answer(alice):
    run = answered_run(alice.org)
    html = signed_in(alice).get(detail_url(run)).content.decode()
    text = text_of(html)
    assert html.index('id="run-answer"') < html.index('aria-label="Spend and progress"')
    assert "Recommended: trial 1 (max_num_seqs=128)" in text
    assert "Capacity at the SLOs (ttft:p99<500ms) concurrency 31 bracket 31–32" in text
    assert "$0.5000 per 1M output tokens (95 % CI $0.4762–$0.5263)" in text
    assert "The runner-up, trial 0 (max_num_seqs=64), costs 100.0 % more ($1.0000 per 1M)" in text
    assert "Tie" not in text
    assert "vllm serve " in html and "--max-num-seqs 128" in html
    assert "badge-simulated" not in html


def test_it_calls_a_margin_within_noise_a_tie_naming_both(alice):
    run = answered_run(alice.org, runner_up_ci=(900.0, 4500.0))
    text = text_of(signed_in(alice).get(detail_url(run)).content.decode())
    assert "Tie, within noise : trial 1 (max_num_seqs=128) and trial 0 (max_num_seqs=64)" in text


def test_it_labels_a_simulated_answer(alice):
    experiment = new_experiment(alice.org, name="simmed", engine="sim", engine_image_tag="")
    run = answered_run(alice.org, experiment=experiment)
    html = signed_in(alice).get(detail_url(run)).content.decode()
    answer = html[html.index('id="run-answer"') : html.index('aria-label="Spend and progress"')]
    assert 'class="badge-simulated"' in answer
    assert "not measurements" in answer


def test_it_shows_each_trials_capacity_its_probes_and_steady_windows(alice):
    run = answered_run(alice.org)
    html = signed_in(alice).get(detail_url(run)).content.decode()
    text = text_of(html)
    assert "Capacity at the SLOs: concurrency 20" in text
    assert "3 probes + 2 repeats · converged" in text
    assert text.count("window 3.1–14.8 s, 128 requests") == 6
    assert html.count(">probe</span>") == 4 and html.count(">repeat 1</span>") == 2
    # The whole level's figures are there, labelled, never in the headline's place.
    assert text.count("Whole level") == 6
    assert "16 ramp + 128 window + 9 drain" in text and "777.5" in text


def test_it_sends_the_answer_with_the_live_state(alice):
    run = answered_run(alice.org, runner_up_ci=(900.0, 4500.0))
    state = signed_in(alice).get(live_url(run)).json()
    assert state["answer"]["winner"]["trial"] == 1 and state["answer"]["tie"] is True
    assert state["trials"][1]["capacity"]["text"] == "concurrency 31"
    level_ = state["trials"][0]["levels"][2]
    assert (level_["probe"], level_["repeat"]) == (True, 1)
    assert level_["window"]["requests"] == 128
    assert level_["whole_level"]["ttft_p99"] == 777.5
    assert "Tie, within noise" in state["answer_html"]
    assert "window 3.1–14.8 s" in state["trials_html"]


def test_it_says_when_no_configuration_has_a_capacity(alice):
    run = seed_run(alice.org)
    html = signed_in(alice).get(detail_url(run)).content.decode()
    assert "No configuration has a capacity at the SLOs" in html
    running = seed_run(alice.org, state="benchmarking")
    html = signed_in(alice).get(detail_url(running)).content.decode()
    assert "The answer appears as trials finish their capacity search." in html


def test_it_gives_the_margin_over_vllms_defaults(alice):
    run = answered_run(alice.org)
    defaults = add_trial(run, 2, {}, [steady_level(10, 800.0, (780.0, 820.0))])
    defaults.capacity = capacity_found(10, 800.0, high=11)
    defaults.save(update_fields=["capacity"])
    text = text_of(signed_in(alice).get(detail_url(run)).content.decode())
    # $0.50 per 1M against the defaults' $1.25: 150 % more.
    assert "Against vLLM's defaults vLLM's defaults (trial 2) cost 150.0 % more" in text


def history_rows(client) -> dict[str, list[str]]:
    """The history's cells (tags stripped) by run id."""
    html = client.get(reverse("runs", args=["acme"])).content.decode()
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", html, re.S):
        run_id = re.search(r'name="runs" value="([0-9a-f-]+)"', row)
        if run_id:
            cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
            rows[run_id.group(1)] = [
                " ".join(unescape(re.sub(r"<[^>]+>", "", c)).split()) for c in cells
            ]
    return rows


def test_it_shows_each_run_s_answer_and_its_change_with_the_interval(alice, charlie):
    from datetime import UTC, datetime

    from .test_run_answer import PRICE, a_trial

    experiment = new_experiment(alice.org, name="answers")

    def answered_run(day: int, *trials):
        run = add_run(experiment, created_at=datetime(2026, 11, day, tzinfo=UTC), price=PRICE)
        for index, (load, throughput, ci) in enumerate(trials):
            a_trial(run, index, load, throughput, ci=ci)
        return run

    # $3.60 an hour: 1,000 output tokens/s cost $1 per 1M.
    first = answered_run(1, (20, 1000.0, (950.0, 1050.0)), (24, 800.0, (760.0, 840.0)))
    unsearched = add_run(experiment, created_at=datetime(2026, 11, 2, tzinfo=UTC), price=PRICE)
    add_trial(unsearched, 0, {}, [level(8, 900.0, 300)])
    faster = answered_run(3, (28, 1250.0, (1200.0, 1300.0)))
    same = answered_run(4, (28, 1260.0, (1150.0, 1350.0)))
    rows = history_rows(signed_in(alice))
    header = ["Capacity at SLOs", "USD / 1M at capacity", "vs previous run"]
    html = signed_in(alice).get(reverse("runs", args=["acme"])).content.decode()
    assert all(f">{name}</th>" in html for name in header)

    def answer(run):
        return rows[str(run.id)][8:11]

    # The oldest answered run has nothing to compare with; the winner is the cheapest.
    assert answer(first) == ["concurrency 20 (trial #0)", "1.0000 (0.9524–1.0526)", "—"]
    assert answer(unsearched) == ["—", "—", "—"]
    # 0.80 against 1.00, compared past the run without a search: 20 % cheaper, and its
    # interval (0.7692 / 1.0526 − 1 = −26.9 %, 0.8333 / 0.9524 − 1 = −12.505 %) excludes 0.
    assert answer(faster)[:2] == ["concurrency 28 (trial #0)", "0.8000 (0.7692–0.8333)"]
    assert answer(faster)[2] == f"better by 20 % (CI 13–27 %) vs {str(first.id)[:8]}"
    # 0.7937 against 0.80: the intervals overlap, within noise.
    assert answer(same)[2].startswith("within noise (CI −")
    assert f"vs {str(faster.id)[:8]}" in answer(same)[2]
    # Another tenant sees none of it.
    assert (
        str(first.id)
        not in signed_in(charlie).get(reverse("runs", args=["globex"])).content.decode()
    )


def test_it_reads_the_history_s_answers_in_constant_queries(alice):
    from datetime import UTC, datetime

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from .test_run_answer import PRICE, a_trial

    experiment = new_experiment(alice.org, name="many-answers")
    cheaper = new_experiment(alice.org, name="catalogue-priced")
    client = signed_in(alice)

    def add_runs(count: int, start: int) -> None:
        for day in range(start, start + count):
            when = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=day)
            run = add_run(experiment, created_at=when, price=PRICE)
            other = add_run(cheaper, created_at=when)  # priced from the catalogue
            for target in (run, other):
                a_trial(target, 0, 20, 1000.0 + day, ci=(950.0, 1050.0))
                a_trial(target, 1, 24, 900.0, ci=(860.0, 940.0))

    def queries() -> int:
        client.get(reverse("runs", args=["acme"]))  # session and caches warm
        with CaptureQueriesContext(connection) as captured:
            page = client.get(reverse("runs", args=["acme"]))
        assert "better by" in page.content.decode() or "within noise" in page.content.decode()
        return len(captured)

    add_runs(2, 0)
    few = queries()
    add_runs(20, 2)
    assert queries() == few


def test_an_ended_runs_answer_links_to_proposing_its_winner(alice, bob):
    run = answered_run(alice.org)
    link = f'href="/o/acme/promotions/propose/{run.id}/"'
    assert link in signed_in(alice).get(detail_url(run)).content.decode()
    # A viewer may not propose: no link.
    assert link not in signed_in(bob).get(detail_url(run)).content.decode()
