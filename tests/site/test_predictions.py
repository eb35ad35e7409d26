"""Predict before renting (issue 18): every configuration of an experiment on the simulator
offline — capacity at the SLOs, cost per 1M output tokens there, the GPU-minutes an
exhaustive run would spend — through the API, labelled simulated, nothing rented or stored."""

from __future__ import annotations

import dataclasses
import itertools
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agents.hardware import DEFAULT_EFFICIENCY, MODEL_PRESETS
from agents.predict import predict_workload
from agents.protocol import Slos, Workload
from runs.costs import round_usd
from runs.models import AuditEvent, Calibration, Experiment, GpuType, Run
from runs.selectors.predictions import experiment_prediction

from .conftest import H100, WORKLOAD, experiment_payload, frozen, make_experiment, make_model

SMALL_WORKLOAD = WORKLOAD | {"concurrency": [4], "requests_per_level": 30}
GRID = {"max_num_seqs": [4, 64], "max_num_batched_tokens": [2048]}
SLOS = {"ttft_ms": 1000, "tpot_ms": 25, "tpot_percentile": 95}


@pytest.mark.slow
def test_it_predicts_each_configurations_capacity_and_cost_at_the_slos(alice):
    experiment = make_experiment(alice.org, serve_grid=GRID, workload=SMALL_WORKLOAD, slos=SLOS)
    prediction = experiment_prediction(experiment=experiment)
    assert prediction.simulated and prediction.with_slos
    few, many = prediction.rows
    assert (few.label, many.label) == ("max_num_seqs=4", "max_num_seqs=64")
    # Four sequences at a time cap the capacity; 64 serve more users within the SLOs.
    assert few.capacity is not None and many.capacity > few.capacity
    assert prediction.best == 1
    # Cost per 1M output tokens: the pod's $/h over the throughput at capacity.
    price = GpuType.objects.get(id=H100).price_secure_usd_hr
    expected = price / Decimal(3600) / Decimal(str(many.output_throughput)) * 1_000_000
    assert many.cost_per_million_usd == round_usd(expected)
    assert few.cost_per_million_usd > many.cost_per_million_usd
    # The same figures the agent's own prediction gives (one simulator, one rule).
    direct = predict_workload(
        experiment.model.facts,
        GpuType.objects.get(id=H100).hardware,
        {"max_num_seqs": 64, "max_num_batched_tokens": 2048},
        Workload.model_validate(SMALL_WORKLOAD),
        Slos.model_validate(SLOS),
    )
    assert many.capacity == direct.capacity["capacity"]
    assert prediction.exhaustive_gpu_minutes == pytest.approx(
        (few.gpu_seconds + many.gpu_seconds) / 60, abs=0.1
    )
    assert few.gpu_seconds > 30  # a simulated cold start is part of a trial's GPU time


def test_a_configuration_vllm_would_refuse_is_predicted_so(alice):
    seventy = make_model(
        alice.org, **(MODEL_PRESETS["llama-3.1-70b"].registered | {"name": "llama-70b"})
    )
    experiment = make_experiment(
        alice.org, model=seventy, serve_grid={}, workload=SMALL_WORKLOAD, slos=SLOS
    )
    (row,) = experiment_prediction(experiment=experiment).rows
    assert not row.starts and row.refusal == "the weights do not fit"
    assert row.capacity is None and row.cost_per_million_usd is None


@pytest.mark.slow
def test_the_api_predicts_a_saved_experiment_and_a_draft_storing_nothing(alice, bob):
    experiment = make_experiment(alice.org, serve_grid=GRID, workload=SMALL_WORKLOAD, slos=SLOS)
    runs, events = Run.objects.count(), AuditEvent.objects.count()
    # A viewer may read a prediction: it rents and stores nothing.
    response = bob.client().get(f"/api/v1/orgs/acme/experiments/{experiment.id}/prediction/")
    assert response.status_code == 200
    body = response.json()
    assert body["simulated"] is True and len(body["rows"]) == 2 and body["best"] == 1
    assert body["rows"][1]["capacity_axis"] == "concurrency"
    draft = experiment_payload(
        experiment.model_id, name="draft", serve_grid=GRID, workload=SMALL_WORKLOAD, slos=SLOS
    )
    response = alice.client().post(
        "/api/v1/orgs/acme/experiments/predict/", draft, content_type="application/json"
    )
    assert response.status_code == 200
    assert [row["label"] for row in response.json()["rows"]] == [
        "max_num_seqs=4",
        "max_num_seqs=64",
    ]
    assert Experiment.objects.count() == 1
    assert (Run.objects.count(), AuditEvent.objects.count()) == (runs, events)


def test_a_bad_draft_gets_field_named_errors_not_a_prediction(alice):
    model = make_model(alice.org)
    draft = experiment_payload(model.id, serve_grid={"max_num_seqs": [0]})
    response = alice.client().post(
        "/api/v1/orgs/acme/experiments/predict/", draft, content_type="application/json"
    )
    assert response.status_code == 400
    assert "serve_grid.max_num_seqs" in str(response.json())


def test_without_slos_it_ranks_by_the_best_levels_throughput(alice):
    experiment = make_experiment(alice.org, serve_grid=GRID, workload=SMALL_WORKLOAD, slos={})
    prediction = experiment_prediction(experiment=experiment)
    assert not prediction.with_slos
    assert all(row.capacity is None and row.output_throughput for row in prediction.rows)


SESSIONS = {
    "dataset": {
        "kind": "chat_sessions",
        "min_turns": 2,
        "max_turns": 4,
        "system_len": 200,
        "user_len": 100,
        "output_len": 50,
    },
    "endpoint": "chat",
    "concurrency": [4],
    "requests_per_level": 40,
}


@pytest.mark.slow
def test_a_chat_session_workload_is_predicted_turn_by_turn(alice):
    experiment = make_experiment(alice.org, serve_grid=GRID, workload=SESSIONS, slos=SLOS)
    prediction = experiment_prediction(experiment=experiment)
    assert prediction.warnings == [] and len(prediction.rows) == 2
    many = prediction.rows[1]
    assert many.starts and many.capacity is not None
    # The site's figures are the simulator's sessions: each turn carries the history.
    direct = predict_workload(
        experiment.model.facts,
        GpuType.objects.get(id=H100).hardware,
        {"max_num_seqs": 64, "max_num_batched_tokens": 2048},
        Workload.model_validate(SESSIONS),
        Slos.model_validate(SLOS),
    )
    assert many.capacity == direct.capacity["capacity"]
    turns = direct.levels[0]["turns"]
    assert [turn["turn"] for turn in turns] == [1, 2, 3, 4]
    prompts = [turn["mean_prompt_tokens"] for turn in turns]
    assert prompts[0] >= 300  # the system prompt and the first message
    # Each turn adds the last message and reply (150 tokens, and their role markers).
    growth = {later - earlier for earlier, later in itertools.pairwise(prompts)}
    assert len(growth) == 1 and 150 <= growth.pop() < 160


def test_a_grid_too_large_to_predict_here_says_so_within_its_bound(alice, monkeypatch):
    monkeypatch.setattr("runs.selectors.predictions.WORK_BUDGET", 20_000)
    experiment = make_experiment(alice.org, serve_grid=GRID, workload=SMALL_WORKLOAD, slos=SLOS)
    prediction = experiment_prediction(experiment=experiment)
    assert prediction.too_large and prediction.rows == [] and prediction.best is None
    assert "benchsite-agent predict" in prediction.warnings[-1]


def calibration_row(experiment, *, bandwidth=0.4, created_at=None) -> Calibration:
    """A calibration of ``experiment``'s model, GPU type and vLLM version fitted to one
    measured run of it (``runs.services.calibrations`` writes them so)."""
    run = Run.objects.create(
        organization=experiment.organization,
        experiment=experiment,
        state="succeeded",
        finished_at=timezone.now(),
        **frozen(experiment),
    )
    row = Calibration.objects.create(
        organization=experiment.organization,
        model=experiment.model,
        gpu_type=experiment.gpu_type,
        vllm_version=experiment.engine_image_tag.lstrip("v"),
        constants=dataclasses.asdict(DEFAULT_EFFICIENCY) | {"bandwidth": bandwidth},
        points=6,
        error_before_pct=30.0,
        error_after_pct=3.0,
        metrics={"itl": {"points": 6, "before_pct": 30.0, "after_pct": 3.0}},
        made_by=run,
        created_at=created_at or timezone.now(),
    )
    row.runs.set([run])
    return row


@pytest.mark.slow
def test_a_prediction_uses_the_organizations_latest_calibration_and_names_it(alice, charlie):
    experiment = make_experiment(alice.org, serve_grid=GRID, workload=SMALL_WORKLOAD, slos=SLOS)
    default = experiment_prediction(experiment=experiment)
    assert default.calibration is None
    # Not this experiment's: another tenant's.
    theirs = make_experiment(
        charlie.org, serve_grid=GRID, workload=SMALL_WORKLOAD, slos=SLOS, name="theirs"
    )
    calibration_row(theirs)
    assert experiment_prediction(experiment=experiment).calibration is None
    old = calibration_row(experiment, bandwidth=0.3, created_at=timezone.now() - timedelta(days=1))
    new = calibration_row(experiment, bandwidth=0.4)
    calibrated = experiment_prediction(experiment=experiment)
    assert calibrated.calibration["id"] == new.id != old.id
    assert calibrated.calibration["runs"] == [str(new.made_by_id)]
    assert calibrated.calibration["fit_error_pct"] == 3.0
    assert calibrated.calibration["constants"]["bandwidth"] == 0.4
    # Less memory bandwidth than the defaults assume: every configuration serves less.
    for before, after in zip(default.rows, calibrated.rows, strict=True):
        assert after.output_throughput < before.output_throughput
    # The API says it too.
    url = f"/api/v1/orgs/{alice.org.slug}/experiments/{experiment.id}/prediction/"
    body = alice.client().get(url).json()
    assert body["calibration"]["id"] == new.id
