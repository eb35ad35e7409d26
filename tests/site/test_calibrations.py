"""Calibrated from every run (issue 33): a measured vLLM run's success refits the simulator's
constants for its model × GPU type × vLLM version after its end commits; a simulated run
never does; predictions, the estimate and a search's prior use the newest calibration and
say which, with its own fit error."""

from __future__ import annotations

import dataclasses

import pytest
from django.urls import reverse
from django.utils import timezone

from agents.hardware import DEFAULT_EFFICIENCY, Efficiency
from agents.predict import predict_workload
from agents.protocol import Workload
from frontend.experiments.estimate_panel import estimate_json
from frontend.experiments.prediction_panel import prediction_json
from runs.models import Calibration, GpuType, Measurement, Run, Trial
from runs.selectors.estimates import experiment_estimate
from runs.selectors.predictions import experiment_prediction
from runs.selectors.run_search import run_search_state
from runs.services.calibrations import calibration_refit
from runs.services.run_end import run_end_settle
from runs.services.run_start import run_start

from .conftest import H100, SYSTEM, frozen, make_experiment, signed_in

# A GPU slower per step and per request than the simulator's defaults say.
# Slower than the defaults everywhere, as a perturbation of them (whatever they are fitted to).
WORLD = dataclasses.replace(
    DEFAULT_EFFICIENCY,
    flops=0.77 * DEFAULT_EFFICIENCY.flops,
    bandwidth=0.65 * DEFAULT_EFFICIENCY.bandwidth,
    step_overhead_s=2 * DEFAULT_EFFICIENCY.step_overhead_s,
    request_overhead_s=3 * DEFAULT_EFFICIENCY.request_overhead_s,
)
WORKLOAD = {
    "dataset": {"kind": "random", "input_len": 512, "output_len": 128},
    "concurrency": [1, 4, 16],
    "requests_per_level": 60,
}


def calibrated_experiment(org, **overrides):
    # A TTFT bound: queueing past max_num_seqs breaks it, so the capacity search ends within
    # the site's work budget (a TPOT bound alone holds at any queue).
    return make_experiment(
        org, **({"workload": WORKLOAD, "slos": {"tpot_ms": 40, "ttft_ms": 1000}} | overrides)
    )


def measured_run(experiment, *, engine_kind=None, state="succeeded") -> Run:
    """A run of ``experiment`` whose trials measured what the simulator computes in
    ``WORLD``, stored as ingest stores measurements (the server's figures beside them)."""
    fields = frozen(experiment)
    if engine_kind is not None:
        fields["job_spec"]["engine"]["kind"] = engine_kind
    run = Run.objects.create(
        organization=experiment.organization,
        experiment=experiment,
        state=state,
        finished_at=timezone.now(),
        pod_gpu_type=experiment.gpu_type_id,
        **fields,
    )
    hardware = GpuType.objects.get(id=H100).hardware
    for trial_spec in run.job_spec["trials"]:
        trial = Trial.objects.create(
            organization=run.organization,
            run=run,
            index=trial_spec["index"],
            serve_config=trial_spec["serve_config"],
            image_tag=experiment.engine_image_tag,
            outcome="succeeded",
        )
        prediction = predict_workload(
            experiment.model.facts,
            hardware,
            trial.serve_config,
            Workload.model_validate(experiment.workload),
            None,
            efficiency=WORLD,
        )
        for level in prediction.levels:
            result = {key: value for key, value in level.items() if key != "server"}
            Measurement.objects.create(
                organization=run.organization,
                trial=trial,
                concurrency=level["concurrency"],
                result=result,
                server_metrics=level["server"],
            )
    return run


def test_it_refits_when_a_measured_run_succeeds_once_its_end_commits(
    alice, django_capture_on_commit_callbacks
):
    experiment = calibrated_experiment(alice.org)
    run = measured_run(experiment)
    with django_capture_on_commit_callbacks() as callbacks:
        run_end_settle(run=run, reason="")
    assert not Calibration.objects.exists()  # not inside the ending transaction
    for callback in callbacks:
        callback()
    (calibration,) = Calibration.objects.all()
    assert (calibration.organization_id, calibration.model_id, calibration.gpu_type_id) == (
        alice.org.id,
        experiment.model_id,
        H100,
    )
    assert calibration.vllm_version == "0.11.0" and calibration.made_by_id == run.id
    assert list(calibration.runs.all()) == [run]
    assert calibration.points == 6  # 2 configurations × 3 levels
    assert set(calibration.metrics) == {"itl", "ttft", "throughput"}
    for metric in calibration.metrics.values():
        assert metric["points"] == 6
    assert calibration.error_after_pct < calibration.error_before_pct
    # Fitted toward the slower world: less bandwidth, more time per request than the defaults.
    fitted = Efficiency.from_constants(calibration.constants)
    assert fitted.request_overhead_s > Efficiency().request_overhead_s
    # The refit again (a second delivery of the task) makes nothing new.
    assert calibration_refit(run_id=run.id) == [calibration]
    assert Calibration.objects.count() == 1


def test_a_simulated_or_failed_run_stores_no_calibration(alice, django_capture_on_commit_callbacks):
    experiment = calibrated_experiment(alice.org)
    measured = measured_run(experiment)  # levels a refit could read
    simulated = measured_run(experiment, engine_kind="sim")
    failed = measured_run(experiment, state="failed")
    for run in (simulated, failed):
        with django_capture_on_commit_callbacks(execute=True):
            run_end_settle(run=run, reason="")
        assert calibration_refit(run_id=run.id) == []
    assert not Calibration.objects.exists()
    # A measured run's refit reads only succeeded measured runs: neither is its source.
    (calibration,) = calibration_refit(run_id=measured.id)
    assert list(calibration.runs.all()) == [measured]


# What a prediction's capacity search may probe: two loads up to 8 users, enough to compare
# the calibrated world with the defaults at capacity, for a fraction of the defaults' CPU
# (each prediction here simulates the whole grid, and the test makes several).
SMALL_SEARCH = WORKLOAD | {"capacity": {"max_probes": 2, "max_load": 8}}


@pytest.mark.slow
def test_a_prediction_names_its_calibration_and_its_fit_error(alice, charlie):
    experiment = calibrated_experiment(alice.org, workload=SMALL_SEARCH)
    default = experiment_prediction(experiment=experiment)
    default_estimate = experiment_estimate(experiment=experiment)
    assert default.calibration is None and default_estimate.calibration is None
    # Another tenant's calibration of the same model and GPU is never read.
    theirs = calibrated_experiment(charlie.org, name="theirs")
    calibration_refit(run_id=measured_run(theirs).id)
    assert experiment_prediction(experiment=experiment).calibration is None
    run = measured_run(experiment)
    (calibration,) = calibration_refit(run_id=run.id)
    named = {
        "id": calibration.id,
        "runs": [str(run.id)],
        "points": 6,
        "vllm_version": "0.11.0",
        "fit_error_pct": calibration.error_after_pct,
        "error_before_pct": calibration.error_before_pct,
    }
    predicted = experiment_prediction(experiment=experiment)
    assert named.items() <= predicted.calibration.items()
    assert predicted.calibration["metrics"] == calibration.metrics
    # The calibrated simulator serves less than the defaults say, as the world did.
    for before, after in zip(default.rows, predicted.rows, strict=True):
        assert after.output_throughput < before.output_throughput
    text = prediction_json(predicted)["calibration_text"]
    assert text.startswith("Calibrated:") and str(run.id)[:8] in text
    assert f"{calibration.error_after_pct:.1f} %" in text
    # The pre-run estimate is timed with it, and says so.
    estimate = experiment_estimate(experiment=experiment)
    assert named.items() <= estimate.calibration.items()
    assert estimate.sweep_seconds > default_estimate.sweep_seconds
    assert estimate_json(default_estimate)["calibration_text"] == ""
    page = (
        signed_in(alice)
        .get(
            reverse(
                "experiment-detail", kwargs={"org": alice.org.slug, "experiment_id": experiment.id}
            )
        )
        .content.decode()
    )
    assert "Timed with the simulator calibrated" in page and str(run.id)[:8] in page
    # The API returns the same.
    base = f"/api/v1/orgs/{alice.org.slug}/experiments/{experiment.id}"
    body = alice.client().get(f"{base}/prediction/").json()
    assert named.items() <= body["calibration"].items()
    # A vLLM version it was not measured on is not calibrated.
    other = calibrated_experiment(
        alice.org,
        model=experiment.model,
        name="newer",
        engine_image_tag="v0.12.0",
        workload=SMALL_SEARCH,
    )
    assert experiment_prediction(experiment=other).calibration is None


@pytest.mark.slow
def test_a_pruning_run_starts_from_the_newest_calibration_and_its_page_says_which(alice):
    experiment = calibrated_experiment(
        alice.org, search={"strategy": "prune"}, workload=SMALL_SEARCH
    )
    first = measured_run(experiment)
    calibration_refit(run_id=first.id)
    second = measured_run(experiment)
    (newest,) = calibration_refit(run_id=second.id)
    assert list(newest.runs.all()) == [second, first]
    run = run_start(actor=SYSTEM, experiment=experiment)
    assert run.job_spec["search"]["prior"] == {
        "constants": newest.constants,
        "run_id": str(second.id),
    }
    run.search = {
        experiment.engine_image_tag: {"strategy": "prune", "fates": [], "spent_seconds": 0}
    }
    run.save(update_fields=["search"])
    assert run_search_state(run=run)["prior"]["id"] == newest.id
    page = (
        signed_in(alice)
        .get(reverse("run-detail", kwargs={"org": alice.org.slug, "run_id": run.id}))
        .content.decode()
    )
    assert "Predictions started from the calibration of" in page
    assert f"/runs/{first.id}/" in page and f"/runs/{second.id}/" in page
