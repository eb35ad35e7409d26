"""An experiment's search (docs/search.md): validated like every field, frozen into the job
in the pod's seconds, and a searching run on the simulator end to end — the agent measures
what the search picks, the site stores every trial's fate and shows the search with the
GPU-minutes it spent against measuring everything."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.urls import reverse

from agents.hardware import DEFAULT_EFFICIENCY
from agents.runner.search_run import RunnerTrials
from runs.errors import DomainValidationError
from runs.experiment_search import job_search
from runs.models import Experiment, GpuType, ModelSpec, Run, Trial
from runs.pod_job import run_job_spec
from runs.selectors.run_search import run_search_state
from runs.services.experiments import experiment_update
from runs.services.run_start import run_start
from runs.services.run_tokens import run_token_issue

from .conftest import SYSTEM, experiment_payload, frozen, make_experiment, make_model, signed_in
from .db_state import database_state
from .test_agent_runs import (  # the fixture closes the agent's threads' connections
    Site,
    close_thread_connections,  # noqa: F401
    run_agent,
)
from .test_predictions import SESSIONS, calibration_row
from .test_trace_datasets import stored

pytestmark = pytest.mark.django_db

CAPACITY_WORKLOAD = {
    "dataset": {"kind": "random", "input_len": 64, "output_len": 32},
    "concurrency": [1],
    "requests_per_level": 8,
    "capacity": {"max_probes": 3, "max_load": 8},
}


def _errors(response) -> dict[str, list[str]]:
    """The refusal's messages by field (the API's one error shape)."""
    return response.json()["error"]["fields"]


def _create(person, model=None, **overrides):
    url = reverse("experiment-list", args=[person.org.slug])
    model = model or ModelSpec.objects.filter(organization=person.org).first()
    model = model or make_model(person.org)
    payload = experiment_payload(model.id, workload=CAPACITY_WORKLOAD) | overrides
    return person.client().post(url, payload, format="json")


@pytest.mark.parametrize(
    ("search", "field", "words"),
    [
        ({"strategy": "greedy"}, "search.strategy", "exhaustive"),
        ({"strategy": "prune", "max_trials": 0}, "search.max_trials", "greater than or equal"),
        ({"strategy": "prune", "margin": 1.5}, "search.margin", "less than"),
        ({"strategy": "bayes", "budget": 3}, "search.budget", "unknown field"),
        (
            {"strategy": "prune", "spend_limit_gpu_minutes": 60, "spend_limit_usd": 20},
            "search",
            "not both",
        ),
        ("prune", "search", "valid dictionary"),
    ],
)
def test_a_bad_search_is_refused_by_field_and_nothing_is_stored(alice, search, field, words):
    model = make_model(alice.org)
    before = database_state()
    response = _create(alice, model, search=search)
    assert response.status_code == 400, response.content
    assert words in " ".join(_errors(response)[field]), _errors(response)
    assert database_state() == before


def test_a_ranking_search_needs_slos_and_a_capacity_search(alice):
    no_capacity = {k: v for k, v in CAPACITY_WORKLOAD.items() if k != "capacity"}
    for overrides in ({"slos": {}}, {"workload": no_capacity}):
        response = _create(alice, search={"strategy": "halving"}, **overrides)
        assert response.status_code == 400
        (message,) = _errors(response)["search.strategy"]
        assert "throughput at capacity under the SLOs" in message
    # Exhaustive measures everything: it ranks nothing, so it needs neither.
    assert (
        _create(alice, search={"strategy": "exhaustive", "max_trials": 2}, slos={}).status_code
        == 201
    )


def test_prune_needs_the_simulators_profile_of_the_gpu(alice):
    unknown = GpuType.objects.create(
        id="NVIDIA Imaginary 9000",
        display_name="Imaginary 9000",
        price_secure_usd_hr=Decimal("9.99"),
        price_source="test",
        price_as_of="2026-12-01",
    )
    response = _create(alice, search={"strategy": "prune"}, gpu_type=unknown.id)
    assert response.status_code == 400
    assert "no profile of this GPU type" in _errors(response)["search.strategy"][0]
    assert _create(alice, search={"strategy": "bayes"}, gpu_type=unknown.id).status_code == 201


def test_a_limit_in_dollars_needs_a_price(alice):
    unpriced = GpuType.objects.create(
        id="NVIDIA Unpriced 1",
        display_name="Unpriced 1",
        price_source="test",
        price_as_of="2026-12-01",
    )
    response = _create(
        alice, search={"strategy": "bayes", "spend_limit_usd": 30}, gpu_type=unpriced.id
    )
    assert response.status_code == 400
    assert "GPU-minutes" in _errors(response)["search.spend_limit_usd"][0]


def test_a_search_is_stored_as_given_and_the_default_as_nothing(alice):
    created = _create(alice, search={"strategy": "prune", "spend_limit_gpu_minutes": 90})
    assert created.status_code == 201, created.content
    assert created.json()["search"] == {"strategy": "prune", "spend_limit_gpu_minutes": 90.0}
    plain = _create(alice, name="plain", search={"strategy": "exhaustive", "margin": 0.25})
    assert plain.json()["search"] == {}


def on_two_gpus(org, search: dict):
    """An experiment on a 2-GPU pod (tensor parallelism 2) that searches with ``search``."""
    return make_experiment(
        org,
        gpu_count=2,
        serve_grid={"tensor_parallel_size": [2]},
        workload=CAPACITY_WORKLOAD,
        search=search,
    )


def test_the_job_carries_the_search_in_the_pods_seconds(alice):
    experiment = on_two_gpus(
        alice.org, {"strategy": "prune", "spend_limit_gpu_minutes": 120, "max_trials": 3}
    )
    job = frozen(experiment)["job_spec"]
    # 120 GPU-minutes on a 2-GPU pod: an hour of the pod.
    assert job["search"] == {
        "strategy": "prune",
        "spend_limit_seconds": 3600.0,
        "max_trials": 3,
        "margin": 0.25,
    }
    # Dollars at the pod's price: $6 at $3/GPU-hour on 2 GPUs is an hour.
    search = {"strategy": "bayes", "spend_limit_usd": 6}
    assert (
        job_search(search, gpu_count=2, price_usd_per_gpu_hour=Decimal(3)).spend_limit_seconds
        == 3600
    )
    with pytest.raises(DomainValidationError) as refused:
        job_search(search, gpu_count=2, price_usd_per_gpu_hour=None)
    assert "search.spend_limit_usd" in refused.value.fields
    # No search: the job is as it always was.
    plain = experiment_update(experiment=experiment, actor=SYSTEM, search={})
    assert "search" not in frozen(plain)["job_spec"]


# An 8B model on an H100 up to 8 users at a 100 ms TPOT (room for a busy machine): max_num_seqs
# 16 serves far more than 4 or 1, and the batched-token budget binds only there; the
# simulator runs 10 times faster than real time in this test.
SEARCH_GRID = {"max_num_seqs": [1, 4, 16], "max_num_batched_tokens": [256, 2048]}


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_pruning_run_measures_the_survivors_and_the_site_shows_every_fate(alice, tmp_path):
    experiment = make_experiment(
        alice.org,
        name="searching",
        engine="sim",
        engine_image_tag="",
        serve_grid=SEARCH_GRID,
        workload=CAPACITY_WORKLOAD,
        slos={"tpot_ms": 100},
        search={"strategy": "prune"},
    )
    run = Run.objects.create(organization=alice.org, experiment=experiment, **frozen(experiment))
    token = run_token_issue(run=run)
    site = Site(run.id, token)
    job = run_job_spec(
        run, ws_url=f"ws://testserver{site.path}", rest_url="http://testserver/api/v1/"
    )
    job = job.model_copy(update={"engine": job.engine.model_copy(update={"sim_speed": 10.0})})
    result, _ = run_agent(run, token, tmp_path, site, job=job)
    assert result.exit_code == 0 and result.delivery.pending == 0
    run.refresh_from_db()
    assert run.state == "succeeded"

    (report,) = run.search.values()
    fates = {fate["trial"]: fate for fate in report["fates"]}
    measured = {i for i, fate in fates.items() if fate["fate"] in ("measured", "winner")}
    trials = {trial.index: trial for trial in Trial.objects.filter(run=run)}
    assert sorted(trials) == list(range(6))
    for index, trial in trials.items():
        if index in measured:
            assert trial.outcome == "succeeded" and trial.measurements.exists()
        else:
            assert trial.outcome == "skipped" and not trial.measurements.exists()
            assert trial.log_tail.startswith("pruned by the search: ")
    assert measured and len(measured) < 6
    # The search's winner is the run's answer.
    api = reverse("run-detail", kwargs={"org": alice.org.slug, "pk": run.id})
    detail = alice.client().get(api).json()
    assert detail["answer"]["winner"]["trial"] == report["winner"]
    search = detail["search"]
    assert search["strategy"] == "prune" and search["exhaustive_source"] == "simulated"
    assert 0 < search["spent_gpu_minutes"] < search["exhaustive_gpu_minutes"]
    assert [row["fate"] for row in search["rows"]] == [fates[i]["fate"] for i in range(6)]

    page = signed_in(alice).get(
        reverse("run-detail", kwargs={"org": alice.org.slug, "run_id": run.id})
    )
    html = page.content.decode()
    assert "Search: prune" in html
    assert f"{search['spent_gpu_minutes']} GPU-minutes</strong> spent measuring" in html
    assert "(simulated: the simulator's prediction of each trial)" in html
    assert html.count('class="fate-pruned"') == 6 - len(measured)
    # The live page's re-read brings the same section (it appears when the search ends).
    live = (
        signed_in(alice)
        .get(reverse("run-live", kwargs={"org": alice.org.slug, "run_id": run.id}))
        .json()
    )
    assert "Search: prune" in live["search_html"]
    assert live["search_html"].count('class="fate-pruned"') == 6 - len(measured)


def test_a_pruning_run_starts_its_predictions_from_the_latest_calibration(alice):
    experiment = make_experiment(
        alice.org,
        workload=CAPACITY_WORKLOAD,
        slos={"tpot_ms": 40},
        search={"strategy": "prune"},
    )
    first = run_start(actor=SYSTEM, experiment=experiment)
    assert "prior" not in first.job_spec["search"]  # nothing measured yet
    calibrated = calibration_row(experiment, bandwidth=0.5)
    second = run_start(actor=SYSTEM, experiment=experiment)
    assert second.job_spec["search"]["prior"] == {
        "constants": calibrated.constants,
        "run_id": str(calibrated.made_by_id),
    }
    assert second.experiment_snapshot["calibration"]["id"] == calibrated.id
    # A search that does not predict starts from nothing.
    halving = experiment_update(experiment=experiment, actor=SYSTEM, search={"strategy": "halving"})
    assert "prior" not in run_start(actor=SYSTEM, experiment=halving).job_spec["search"]


@pytest.mark.parametrize("kind", ["chat_sessions", "mooncake"])
@pytest.mark.slow
def test_a_pruning_search_predicts_sessions_and_traces(alice, kind):
    capacity = {"capacity": {"max_probes": 2, "max_load": 8}, "requests_per_level": 16}
    if kind == "mooncake":
        dataset = stored(alice.org, "mooncake")
        workload = {"dataset": {"kind": "mooncake", "dataset_id": str(dataset.id)}}
        path = Path(dataset.file.path)
    else:
        workload, path = {"dataset": SESSIONS["dataset"], "endpoint": "chat"}, None
    created = _create(
        alice,
        workload=workload | {"concurrency": [1]} | capacity,
        slos={"tpot_ms": 100},
        search={"strategy": "prune"},
    )
    assert created.status_code == 201, created.content
    experiment = Experiment.objects.get(pk=created.json()["id"])
    run = Run.objects.create(organization=alice.org, experiment=experiment, **frozen(experiment))
    job = run_job_spec(run, ws_url="ws://testserver/", rest_url="http://testserver/api/v1/")
    # The agent's search predicts each trial as below, with the file the site serves it.
    runner = SimpleNamespace(job=job, dataset_path=lambda dataset_id: path)
    outcome = RunnerTrials(runner, loop=None).predict(0, DEFAULT_EFFICIENCY)
    assert outcome.simulated and outcome.starts and outcome.value > 0
    figures = "turns" if kind == "chat_sessions" else "replay"
    assert all(figures in level for level in outcome.levels)


def test_a_search_without_predictions_is_held_against_the_runs_own_estimate(alice):
    experiment = on_two_gpus(alice.org, {"strategy": "halving"})
    fields = frozen(experiment)
    halving = {
        "strategy": "halving",
        "fates": [{"trial": 0, "fate": "winner", "measured": 900.0, "effort": 1.0}],
        "winner": 0,
        "decided": False,
        "measurements": 2,
        "spent_seconds": 600.0,
        "exhaustive_seconds": None,
        "stopped_by": None,
        "calibration": None,
    }
    run = Run.objects.create(
        organization=alice.org,
        experiment=experiment,
        search={experiment.engine_image_tag: halving},
        **fields,
    )
    state = run_search_state(run=run)
    trial_seconds = fields["experiment_snapshot"]["estimate_trial_seconds"]
    # Pod seconds × 2 GPUs: 600 s spent is 20 GPU-minutes.
    assert state["spent_gpu_minutes"] == 20.0
    assert state["exhaustive_source"] == "estimate"
    assert state["exhaustive_gpu_minutes"] == round(trial_seconds * 2 / 60, 1)
    assert state["winners"] == [{"trial": 0, "decided": False}]
    page = (
        signed_in(alice)
        .get(reverse("run-detail", kwargs={"org": alice.org.slug, "run_id": run.id}))
        .content.decode()
    )
    assert "(the run's estimate)" in page
    assert "won within noise" in page
