"""A run that searches its grid (``agents.runner.search_run``) on the simulator as its
engine: the search picks the trials measured, every trial ends reported with its fate, brief
looks are not stored as measurements, and a stop ends the search with what it measured."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from agents import protocol
from agents.hardware import DEFAULT_EFFICIENCY, REGISTERED_FACTS, ModelFacts, gpu_profile
from agents.predict import predict_workload
from agents.runner.trial_engine import EngineOptions
from tests.agents.test_runner import make_job
from tests.agents.test_runner import run as run_with_options

pytestmark = pytest.mark.slow


def run(job: protocol.JobSpec, tmp_path, **options):
    """The job in the simulator's own time, as an agent runs a simulated search."""
    return run_with_options(job, tmp_path, engine_options=EngineOptions(), **options)


# An 8B model on an A100 at a 100 ms TPOT (10.4 ms alone: room for a busy machine), up to 8
# users: max_num_seqs 1 and 4 serve far less than 16, and the batched-token budget binds only
# at 16, so the pairs at 1 and at 4 are predicted alike (one of each would be measured). The
# simulator runs 10 times faster than real time: a trial takes a few seconds.
GRID = [
    {"max_num_seqs": seqs, "max_num_batched_tokens": tokens}
    for seqs in (1, 4, 16)
    for tokens in (256, 2048)
]


def searching_job(strategy: str, grid=GRID, **search) -> protocol.JobSpec:
    job = make_job(grid, output_len=32, speed=10)
    model = job.model.model_copy(
        update={
            "parameter_count": 8_000_000_000,
            "num_layers": 32,
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_kv_heads": 8,
        }
    )
    workload = job.workload.model_copy(
        update={
            "concurrency": [1],
            "capacity": protocol.CapacitySearch(max_probes=3, max_load=8),
        }
    )
    return job.model_copy(
        update={
            "model": model,
            "engine": job.engine.model_copy(update={"gpu_type": "A100"}),
            "workload": workload,
            "slos": protocol.Slos(tpot_ms=100),
            "search": protocol.SearchSettings(strategy=strategy, **search),
        }
    )


def _valid(recorder, job) -> None:
    for seq, message in enumerate(recorder.messages):
        parsed = protocol.parse_agent_message({**message, "seq": seq})
        assert str(parsed.run_id) == str(job.run_id)


def _ended(recorder) -> dict[int, dict]:
    ended = {}
    for message in recorder.of("trial_finished"):
        assert message["trial"] not in ended, "a trial reported as ended twice"
        ended[message["trial"]] = message
    return ended


def test_prune_measures_the_survivors_and_reports_every_trials_fate(tmp_path):
    job = searching_job("prune")
    summary, recorder, _ = run(job, tmp_path)
    _valid(recorder, job)
    kinds = [message["type"] for message in recorder.messages]
    assert kinds[-2:] == ["search_finished", "run_finished"]
    (report,) = recorder.of("search_finished")
    fates = {fate["trial"]: fate for fate in report["fates"]}
    assert sorted(fates) == list(range(len(GRID)))
    # Both max_num_seqs=1 trials are pruned on their prediction, never started.
    for index in (0, 1):
        assert fates[index]["fate"] == "pruned" and fates[index]["measured"] is None
        assert fates[index]["predicted"] > 0
    started = {message["trial"] for message in recorder.of("trial_started")}
    measured = {index for index, fate in fates.items() if fate["fate"] in ("measured", "winner")}
    assert started == measured and 0 not in started and 1 not in started
    assert len(measured) < len(GRID)
    # Every trial ends reported once; what was not measured says its fate.
    ended = _ended(recorder)
    assert sorted(ended) == list(range(len(GRID)))
    for index, message in ended.items():
        if index in measured:
            assert message["outcome"] == "succeeded"
            assert {m["trial"] for m in recorder.of("measurement")} >= {index}
        else:
            assert message["outcome"] == "skipped"
            assert message["log_tail"].startswith("pruned by the search: ")
    assert report["winner"] in measured and fates[report["winner"]]["fate"] == "winner"
    assert fates[report["winner"]]["measured"] == max(fates[i]["measured"] for i in measured)
    # Spent: the measured trials' cold starts and levels; all of them would take more.
    assert 0 < report["spent_seconds"] < report["exhaustive_seconds"]
    assert report["measurements"] == len(measured)
    assert (summary.outcome, summary.trials_succeeded) == ("succeeded", len(measured))
    assert summary.trials_skipped == len(GRID) - len(measured)


def test_halving_looks_briefly_without_storing_the_brief_looks(tmp_path):
    grid = [{"max_num_seqs": seqs} for seqs in (1, 2, 4, 16)]
    job = searching_job("halving", grid=grid)
    summary, recorder, _ = run(job, tmp_path)
    _valid(recorder, job)
    (report,) = recorder.of("search_finished")
    fates = {fate["trial"]: fate for fate in report["fates"]}
    eliminated = {i for i, fate in fates.items() if fate["fate"] == "eliminated"}
    full = {i for i, fate in fates.items() if fate["fate"] in ("measured", "winner")}
    assert eliminated and full and eliminated | full == set(range(len(grid)))
    for index in eliminated:
        assert fates[index]["round"] == 1 and fates[index]["effort"] < 1
        assert fates[index]["measured"] is not None  # every one met the SLOs at some load
    # Only trials measured in full were reported as measured: their levels are stored.
    assert {m["trial"] for m in recorder.of("trial_started")} == full
    assert {m["trial"] for m in recorder.of("measurement")} == full
    ended = _ended(recorder)
    for index in eliminated:
        assert ended[index]["outcome"] == "skipped"
        assert "eliminated by the search in round 1" in ended[index]["log_tail"]
    # Every brief look counts: more was spent than on the trials measured in full.
    assert report["measurements"] == len(grid) + len(full)
    assert summary.trials_succeeded == len(full)


def test_a_spend_limit_stops_the_search_before_it_would_pass_it(tmp_path):
    grid = [{"max_num_seqs": seqs} for seqs in (4, 8, 16)]
    _, alone, _ = run(searching_job("exhaustive", grid=grid, max_trials=1), tmp_path / "one")
    one_trial = alone.of("search_finished")[0]["spent_seconds"]
    # Room for one trial and a half: the first is measured, a second would pass the limit.
    limit = 1.5 * one_trial
    job = searching_job("exhaustive", grid=grid, spend_limit_seconds=limit)
    summary, recorder, _ = run(job, tmp_path / "limited")
    (report,) = recorder.of("search_finished")
    assert (report["stopped_by"], report["measurements"]) == ("spend_limit", 1)
    assert report["spent_seconds"] <= limit
    not_reached = [f["trial"] for f in report["fates"] if f["fate"] == "not_reached"]
    ended = _ended(recorder)
    assert len(not_reached) == 2 and all(
        ended[i]["log_tail"] == "not reached: the search stopped at its spend limit"
        for i in not_reached
    )
    assert summary.trials_skipped == 2


def test_an_exhaustive_search_stops_at_its_maximum_of_trials(tmp_path):
    grid = [{"max_num_seqs": seqs} for seqs in (4, 8, 16)]
    job = searching_job("exhaustive", grid=grid, max_trials=2)
    summary, recorder, _ = run(job, tmp_path)
    (report,) = recorder.of("search_finished")
    assert (report["stopped_by"], report["measurements"]) == ("max_trials", 2)
    assert [m["trial"] for m in recorder.of("trial_started")] == [0, 1]
    assert _ended(recorder)[2]["log_tail"] == (
        "not reached: the search stopped at its maximum of trials"
    )
    assert (summary.trials_succeeded, summary.trials_skipped) == (2, 1)


def test_a_cancel_ends_the_search_with_what_it_measured(tmp_path):
    job = searching_job("prune")

    def cancel_after_the_first_measurement(runner, recorder):
        def hook(message):
            if message["type"] == "measurement":
                runner.request_stop("cancelled", "cancelled by the test")

        recorder.hooks.append(hook)

    summary, recorder, _ = run(job, tmp_path, setup=cancel_after_the_first_measurement)
    _valid(recorder, job)
    assert summary.outcome == "cancelled"
    (report,) = recorder.of("search_finished")
    assert report["stopped_by"] == "stop"
    ended = _ended(recorder)
    assert sorted(ended) == list(range(len(GRID)))
    assert len(recorder.of("trial_started")) == 1
    assert recorder.messages[-1]["type"] == "run_finished"


def test_predictions_start_from_the_jobs_prior_calibration(tmp_path):
    job = searching_job("prune", grid=[{"max_num_seqs": seqs} for seqs in (1, 16)])
    _, recorder, _ = run(job, tmp_path / "defaults")
    (defaults,) = recorder.of("search_finished")
    prior = protocol.SearchPrior(
        # A constant a later agent might record is left out by this one.
        constants=dataclasses.asdict(DEFAULT_EFFICIENCY) | {"bandwidth": 0.5, "future_s": 1.0},
        run_id=uuid.uuid4(),
    )
    primed = job.model_copy(
        update={"search": protocol.SearchSettings(strategy="prune", prior=prior)}
    )
    _, recorder, _ = run(primed, tmp_path / "primed")
    (report,) = recorder.of("search_finished")
    assert report["prior_run"] == str(prior.run_id) and defaults["prior_run"] is None
    # Less memory bandwidth than the defaults: each configuration is predicted to serve less,
    # exactly as the simulator predicts it with those constants.
    expected = predict_workload(
        ModelFacts.from_registered(**job.model.model_dump(include=REGISTERED_FACTS)),
        gpu_profile("A100"),
        {"max_num_seqs": 16},
        job.workload,
        job.slos,
        efficiency=dataclasses.replace(DEFAULT_EFFICIENCY, bandwidth=0.5),
    )
    assert report["fates"][1]["predicted"] == expected.capacity["output_throughput"]
    assert report["fates"][1]["predicted"] < defaults["fates"][1]["predicted"]


def test_configurations_predicted_alike_are_measured_once_and_named_by_trial(tmp_path):
    # At 64-token prompts a budget of 2,048 or 4,096 batched tokens never binds.
    grid = [{"max_num_seqs": 16, "max_num_batched_tokens": tokens} for tokens in (2048, 4096)]
    _, recorder, _ = run(searching_job("prune", grid=grid), tmp_path)
    (report,) = recorder.of("search_finished")
    assert [fate["fate"] for fate in report["fates"]] == ["winner", "pruned"]
    assert report["fates"][1]["reason"] == "predicted the same as trial 0"
    assert _ended(recorder)[1]["log_tail"] == "pruned by the search: predicted the same as trial 0"
