"""A run's answer: each configuration's capacity at the SLOs and the cost per 1M output
tokens there, the cheapest recommended with its margin, a tie within noise; in the API's run
detail and stored from the agent's trial_finished."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from agents import protocol
from benchsite_cli.gate import capacity_upper_load
from runs.answer_text import answer_state, capacity_text
from runs.experiment_spec import experiment_trial_plan
from runs.models import Trial
from runs.selectors.run_answer import capacity_throughput_interval, run_answer
from runs.services.ingest import agent_messages_ingest

from .conftest import experiment_payload, make_experiment, make_model
from .report_data import add_run, add_trial, level

pytestmark = pytest.mark.django_db
# $3.60 per hour is $0.001 per second: 1,000 output tokens/s cost $1 per 1M.
PRICE = "3.60"


def capacity(load: float, throughput: float, *, high: float | None = None) -> dict:
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
        "request_throughput": throughput / 100,
        "request_goodput": throughput / 100,
    }


def a_trial(run, index, load, throughput, ci=None):
    extra = {"ci95": {"output_throughput": {"low": ci[0], "high": ci[1]}}} if ci else {}
    trial = add_trial(
        run, index, {"max_num_seqs": 64 * (index + 1)}, [level(load, throughput, 300, **extra)]
    )
    trial.capacity = capacity(load, throughput, high=load + 1)
    trial.save(update_fields=["capacity"])
    return trial


def a_run(org):
    experiment = make_experiment(org)
    return add_run(experiment, created_at=datetime(2026, 11, 1, tzinfo=UTC), price=PRICE)


def test_it_recommends_the_cheapest_at_capacity_with_its_margin(org_a):
    run = a_run(org_a)
    a_trial(run, 0, 20, 1000.0, ci=(950.0, 1050.0))  # $1.000 per 1M
    a_trial(run, 1, 31, 2000.0, ci=(1900.0, 2100.0))  # $0.500 per 1M
    answer = run_answer(run=run)
    assert answer.winner.trial == 1 and answer.runner_up.trial == 0
    assert answer.winner.capacity == 31 and answer.winner.bracket_high == 32
    assert answer.winner.usd_per_million_output_tokens == Decimal("0.5000")
    assert answer.margin_pct == pytest.approx(100.0)
    assert not answer.tie
    low, high = answer.margin_ci95_pct
    assert low < 100 < high
    assert answer.winner.serve_command.startswith("vllm serve ")
    assert "--max-num-seqs 128" in answer.winner.serve_command
    assert answer.slos == "ttft:p99<500ms"


def test_overlapping_intervals_are_a_tie(org_a):
    run = a_run(org_a)
    a_trial(run, 0, 20, 1000.0, ci=(900.0, 1100.0))
    a_trial(run, 1, 21, 1040.0, ci=(940.0, 1140.0))
    answer = run_answer(run=run)
    assert answer.tie and answer.winner.trial == 1
    assert answer.as_json()["tie"] is True


def test_a_trial_without_a_capacity_is_listed_with_its_reason(org_a):
    run = a_run(org_a)
    a_trial(run, 0, 20, 1000.0)
    add_trial(run, 1, {"max_num_seqs": 8}, [level(1, 10.0, 900)])
    answer = run_answer(run=run)
    assert answer.winner.trial == 0 and answer.runner_up is None
    assert [c.note for c in answer.configs] == ["", "no capacity search"]


def test_the_api_gives_the_answer_and_each_trials_capacity(alice, charlie):
    run = a_run(alice.org)
    a_trial(run, 0, 20, 1000.0, ci=(950.0, 1050.0))
    detail = alice.client().get(f"/api/v1/orgs/acme/runs/{run.id}/").json()
    assert detail["answer"]["winner"]["capacity"] == 20
    assert detail["answer"]["winner"]["usd_per_million_output_tokens"] == "1.0000"
    assert detail["trials"][0]["capacity"]["bracket_high"] == 21
    assert charlie.client().get(f"/api/v1/orgs/acme/runs/{run.id}/").status_code == 404


def test_ingest_stores_what_the_capacity_search_found(org_a):
    run = a_run(org_a)
    run.state = "benchmarking"
    run.save(update_fields=["state"])
    found = capacity(24, 1500.0, high=25)
    base = {"run_id": str(run.id), "protocol": 3}
    outcomes = agent_messages_ingest(
        run_id=run.id,
        messages=[
            protocol.parse_agent_message(message)
            for message in (
                base
                | {
                    "type": "trial_started",
                    "seq": 0,
                    "trial": 0,
                    "serve_config": {},
                    "command": [],
                },
                base
                | {"type": "trial_finished", "seq": 1, "trial": 0, "outcome": "succeeded"}
                | {"capacity": found},
            )
        ],
    )
    assert [(outcome.stored, outcome.refused) for outcome in outcomes] == [(True, None)] * 2
    assert Trial.objects.get(run=run, index=0).capacity == found


def test_the_margin_over_vllms_defaults_is_given_when_the_run_has_them(org_a):
    run = a_run(org_a)
    a_trial(run, 0, 20, 1000.0, ci=(950.0, 1050.0))
    a_trial(run, 1, 31, 2000.0, ci=(1900.0, 2100.0))
    defaults = a_trial(run, 2, 10, 800.0, ci=(780.0, 820.0))
    defaults.serve_config = {}
    defaults.save(update_fields=["serve_config"])
    answer = run_answer(run=run)
    assert answer.defaults.trial == 2
    assert answer.over_defaults.pct == pytest.approx(150.0)  # $1.25 vs $0.50
    assert not answer.over_defaults.tie
    assert answer.as_json()["over_defaults"]["pct"] == pytest.approx(150.0)


def test_a_defaults_trial_is_added_to_the_grid_when_asked(org_a):
    run = a_run(org_a)
    assert len(run.job_spec["trials"]) == 2  # this experiment asks for no defaults trial
    experiment = make_experiment(
        org_a, model=run.experiment.model, name="with defaults", defaults_trial=True
    )
    assert [trial.serve_config for trial in experiment_trial_plan(experiment)] == [
        {"max_num_seqs": 64},
        {"max_num_seqs": 128},
        {},
    ]
    frozen_run = add_run(experiment, created_at=datetime(2026, 11, 2, tzinfo=UTC))
    assert [trial["serve_config"] for trial in frozen_run.job_spec["trials"]][-1] == {}
    experiment.defaults_trial = False
    assert len(experiment_trial_plan(experiment)) == 2


def test_the_api_takes_the_defaults_trial_and_names_a_bad_value(alice):
    model = make_model(alice.org)
    client = alice.client()
    created = client.post(
        "/api/v1/orgs/acme/experiments/",
        experiment_payload(model.id, defaults_trial=True),
        format="json",
    )
    assert created.status_code == 201, created.json()
    assert created.json()["defaults_trial"] is True
    assert created.json()["trials"] == 3  # 2 x 1 from the grid, and the defaults
    refused = client.post(
        "/api/v1/orgs/acme/experiments/",
        experiment_payload(model.id, name="other", defaults_trial="yes"),
        format="json",
    )
    assert refused.status_code == 400
    assert "defaults_trial" in str(refused.json())


def test_the_cost_interval_at_capacity_holds_the_capacitys_own_uncertainty():
    # Capacity 18 with a bracket [18, 27] (the search ran out of probes): the true capacity
    # lies anywhere up to 26, where the throughput is up to what 27 measured. The interval
    # spans that, not the ±2 % of the throughput at 18 alone.
    def measured(throughput, low, high):
        return protocol.LevelResult.model_validate(
            {
                "concurrency": 18,
                "duration": 60.0,
                "completed": 300,
                "failed": 0,
                "output_throughput": throughput,
                "ci95": {"output_throughput": {"low": low, "high": high}},
            }
        )

    found = capacity(18, 1000.0, high=27)
    at_18, at_27 = [measured(1000.0, 980.0, 1020.0)], [measured(1300.0, 1280.0, 1330.0)]
    assert capacity_upper_load(found) == 27
    interval = capacity_throughput_interval(found, at_capacity=at_18, at_upper_load=at_27)
    assert interval == (980.0, 1330.0)
    # Converged on one user, or never failing (no high end): the capacity's own interval.
    assert capacity_throughput_interval(found, at_capacity=at_18, at_upper_load=[]) == (
        980.0,
        1020.0,
    )


def test_the_capacity_lies_below_the_first_load_confidently_missed():
    # 27 only too close to call, 40 missed: the true capacity may lie anywhere below 40.
    found = capacity(18, 1000.0, high=27) | {"bracket_high_verdict": "too_close"}
    assert capacity_upper_load(found | {"first_missed": 40.0}) == 40.0
    # Stored before verdicts, or nothing above was missed: the bracket's high end.
    assert capacity_upper_load(found) == 27


def test_a_trial_still_measuring_never_reads_no_load_met(org_a):
    # The early-run answer: a trial whose rows say "met" but whose search has not
    # reported yet was printed "no load met the SLOs".
    run = a_run(org_a)
    a_trial(run, 0, 20, 1000.0, ci=(950.0, 1050.0))
    add_trial(run, 1, {"max_num_seqs": 8}, [level(1, 10.0, 300)], outcome="running")
    state = answer_state(run_answer(run=run), {})
    (measuring,) = [config for config in state["configs"] if config["trial"] == 1]
    assert measuring["note"] == "still measuring: no capacity yet"
    assert measuring["bracket"] == ""
    assert "no load met" not in json.dumps(state)


def test_a_bracket_end_too_close_to_call_says_so():
    found = capacity(17, 1000.0, high=18) | {"bracket_high_verdict": "too_close"}
    assert capacity_text(found)["bracket"] == ("bracket 17–18 (met at 17, too close to call at 18)")
    assert "missed at 18" in capacity_text(capacity(17, 1000.0, high=18))["bracket"]
    # With a load confidently missed further up: the most the capacity can be.
    above = capacity_text(found | {"first_missed": 64.0})["bracket"]
    assert above.endswith("too close to call at 18); first missed at 64, the most it can be")
