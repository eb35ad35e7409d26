"""Billed cost, $ per 1M output tokens and month spend, against figures computed by hand.

The pure functions of runs.costs need no database; only the selector tests at the end do.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from runs.costs import (
    TrialCost,
    best_level_under_slos,
    billed_seconds,
    level_cost_per_million_output_tokens,
    month_bounds_utc,
    month_start,
    pod_usd_per_hr,
    run_cost_usd,
    trial_cost_per_million_output_tokens,
)
from runs.models import GpuType, Measurement, Run, Trial
from runs.selectors.level_figures import level_figures
from runs.selectors.spend import org_month_spend_usd
from runs.selectors.trial_costs import trial_costs
from runs.services.catalogue import gpu_price_set

from .conftest import H100, SYSTEM, frozen, make_experiment, make_model

T0 = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)
FOUR_PLACES = -4


def is_money(value) -> bool:
    return isinstance(value, Decimal) and value.as_tuple().exponent == FOUR_PLACES


def met(p99: float, target: float = 500.0) -> dict:
    return {"ttft_ms": {"target": target, "p99": p99, "met": p99 <= target}}


def level(load: dict, *, tput: float = 1000.0, slo=None, completed=100, failed=0, **extra):
    return {
        **load,
        "duration": 10.0,
        "completed": completed,
        "failed": failed,
        "output_throughput": tput,
        "slo": slo,
        **extra,
    }


# --- billed seconds ----------------------------------------------------------------------


def test_it_rounds_a_pods_lifetime_up_to_whole_seconds():
    # 1,234.2 s → 1,235 s billed; 1 µs → 1 s; a whole number of seconds stays as it is.
    assert billed_seconds(T0, T0 + timedelta(seconds=1234, microseconds=200_000)) == 1235
    assert billed_seconds(T0, T0 + timedelta(microseconds=1)) == 1
    assert billed_seconds(T0, T0 + timedelta(seconds=1234)) == 1234
    # Across a day boundary: 1 day + 0.5 s → 86,401 s.
    assert billed_seconds(T0, T0 + timedelta(days=1, milliseconds=500)) == 86_401
    assert isinstance(billed_seconds(T0, T0 + timedelta(seconds=1)), Decimal)


def test_it_refuses_a_pod_that_has_not_ended_or_ended_before_it_started():
    with pytest.raises(ValueError, match="not ended"):
        billed_seconds(T0, None)
    with pytest.raises(ValueError, match="before it started"):
        billed_seconds(T0, T0 - timedelta(seconds=1))


# --- run cost: per pod vs per GPU ----------------------------------------------------------


def test_it_costs_billed_seconds_at_the_pods_rate():
    # A pod at $3.99/h for 1,234.2 s → 1,235 s billed → 1,235 × 3.99 / 3600
    # = 4,927.65 / 3600 = 1.36879166… → $1.3688. Rounding the per-second rate first
    # (3.99 / 3600 ≈ 0.0011 → × 1,235 = 1.3585) would be wrong.
    seconds = billed_seconds(T0, T0 + timedelta(seconds=1234.2))
    cost = run_cost_usd(seconds=seconds, pod_usd_per_hr=Decimal("3.99"))
    assert cost == Decimal("1.3688")
    assert is_money(cost)


def test_it_multiplies_a_per_gpu_price_by_the_gpu_count_once():
    # 2 × H100 at $2.69 per GPU-hour = $5.38 per pod-hour; one hour of that pod = $5.38.
    pod_rate = pod_usd_per_hr(gpu_usd_per_hr=Decimal("2.69"), gpu_count=2)
    assert pod_rate == Decimal("5.3800") and is_money(pod_rate)
    assert run_cost_usd(seconds=Decimal(3600), pod_usd_per_hr=pod_rate) == Decimal("5.3800")
    # Runpod's costPerHr is already for the whole pod: used as it is, not × 2 again.
    assert run_cost_usd(seconds=3600, pod_usd_per_hr=Decimal("5.38")) == Decimal("5.3800")
    with pytest.raises(ValueError, match="gpu_count"):
        pod_usd_per_hr(gpu_usd_per_hr=Decimal("2.69"), gpu_count=0)


def test_it_rounds_money_half_to_even():
    # $0.18/h for 1 s = 0.18 / 3600 = 0.00005 exactly → 0.0000 (half-up would give 0.0001);
    # $0.54/h for 1 s = 0.00015 → 0.0002; $0.90/h for 1 s = 0.00025 → 0.0002 (not 0.0003).
    assert run_cost_usd(seconds=1, pod_usd_per_hr=Decimal("0.18")) == Decimal("0.0000")
    assert run_cost_usd(seconds=1, pod_usd_per_hr=Decimal("0.54")) == Decimal("0.0002")
    assert run_cost_usd(seconds=1, pod_usd_per_hr=Decimal("0.90")) == Decimal("0.0002")


def test_it_refuses_floats_for_money_and_billed_seconds():
    with pytest.raises(TypeError, match="pod_usd_per_hr"):
        run_cost_usd(seconds=1235, pod_usd_per_hr=3.99)
    with pytest.raises(TypeError, match="seconds"):
        run_cost_usd(seconds=1234.2, pod_usd_per_hr=Decimal("3.99"))
    with pytest.raises(TypeError, match="gpu_usd_per_hr"):
        pod_usd_per_hr(gpu_usd_per_hr=2.69, gpu_count=2)


# --- cost per 1M output tokens -------------------------------------------------------------


def test_it_prices_a_million_output_tokens_at_a_levels_throughput():
    # 2 × H100 at $2.69/GPU-h = $5.38/h; 4,200 tok/s → 5.38 / 3600 / 4200 × 1e6
    # = 0.35582010…/M → $0.3558 per 1M output tokens.
    cost = level_cost_per_million_output_tokens(
        output_throughput_tok_s=4200.0, pod_usd_per_hr=Decimal("5.38")
    )
    assert cost == Decimal("0.3558") and is_money(cost)
    # A measured float enters through its decimal form: 2,000.5 tok/s on $7.98/h
    # → 7.98 / 3600 / 2000.5 × 1e6 = 1.10805631…/M → $1.1081.
    assert level_cost_per_million_output_tokens(
        output_throughput_tok_s=2000.5, pod_usd_per_hr=Decimal("7.98")
    ) == Decimal("1.1081")


def test_it_has_no_cost_per_token_when_nothing_was_served():
    for nothing in (0, 0.0, None):
        assert (
            level_cost_per_million_output_tokens(
                output_throughput_tok_s=nothing, pod_usd_per_hr=Decimal("5.38")
            )
            is None
        )


# --- the best level under the SLOs ----------------------------------------------------------


def test_it_picks_the_highest_concurrency_that_meets_every_slo():
    levels = [
        level({"concurrency": 1}, slo=met(80)),
        level({"concurrency": 64}, slo=met(420)),
        level({"concurrency": 8}, slo=met(150)),
        level({"concurrency": 192}, slo=met(2600)),  # p99 TTFT 2.6 s > 500 ms: missed
    ]
    assert best_level_under_slos(levels)["concurrency"] == 64


def test_a_load_measured_several_times_qualifies_on_all_of_them_pooled():
    # The model-choice row: "capacity 61 (61–64)" beside "load at SLOs 64", where 64
    # met once and missed when the search measured it again. A load is judged on all its
    # measurements, as the capacity search judges it.
    def counted(beyond: int) -> dict:
        check = {"target": 500, "percentile": 99, "value": 480.0, "met": beyond == 0}
        return {"ttft_ms": check | {"judged": 300, "beyond": beyond}}

    levels = [
        level({"concurrency": 8}, slo=counted(0)),
        level({"concurrency": 64}, slo=counted(0)),
        level({"concurrency": 61}, slo=counted(0), probe=True),
        level({"concurrency": 64}, slo=counted(12), probe=True, repeat=1),
    ]
    assert best_level_under_slos(levels)["concurrency"] == 61
    assert level_figures(levels).qualifying == ("concurrency=8", "concurrency=61")


def test_it_needs_every_objective_met():
    both = {
        "ttft_ms": {"target": 500, "p99": 420, "met": True},
        "tpot_ms": {"target": 50, "p99": 61, "met": False},
    }
    nothing_succeeded = {"ttft_ms": {"target": 500, "p99": None, "met": False}}
    no_verdict = {"ttft_ms": {"target": 500, "p99": 300}}  # only an explicit "met": true counts
    levels = [
        level({"concurrency": 8}, slo=met(150)),
        level({"concurrency": 64}, slo=both),
        level({"concurrency": 128}, slo=nothing_succeeded),
        level({"concurrency": 256}, slo=no_verdict),
    ]
    assert best_level_under_slos(levels)["concurrency"] == 8


def test_it_never_picks_a_partial_level_or_one_with_failed_requests():
    levels = [
        level({"concurrency": 8}, slo=met(150)),
        level({"concurrency": 64}, slo=met(300), failed=1),  # one request failed
        level({"concurrency": 192}, slo=met(400), partial=True, aborted=12),  # cut short
        level({"concurrency": 256}, slo=None, completed=0),  # nothing finished
    ]
    assert best_level_under_slos(levels)["concurrency"] == 8


def test_it_counts_a_level_without_slos_as_meeting_them():
    levels = [level({"concurrency": 8}, slo=None), level({"concurrency": 64}, slo={})]
    assert best_level_under_slos(levels)["concurrency"] == 64


def test_it_ranks_open_loop_levels_by_request_rate_with_inf_the_highest():
    levels = [
        level({"request_rate": 2.0}, slo=met(90)),
        level({"request_rate": "inf"}, slo=met(900)),  # missed
        level({"request_rate": 10.0}, slo=met(300)),
        level({"request_rate": 4.5}, slo=met(120)),
    ]
    assert best_level_under_slos(levels)["request_rate"] == 10.0
    levels[1] = level({"request_rate": "inf"}, slo=met(450))
    assert best_level_under_slos(levels)["request_rate"] == "inf"


def test_it_ranks_closed_loop_levels_only_when_a_trial_has_both_kinds():
    closed = [level({"concurrency": 1}, slo=met(80)), level({"concurrency": 8}, slo=met(150))]
    open_loop = [level({"request_rate": "inf"}, slo=met(300))]
    assert best_level_under_slos(closed + open_loop)["concurrency"] == 8
    # No closed-loop level qualifies: no answer, rather than an open-loop one in its place.
    missed = [level({"concurrency": 64}, slo=met(900))]
    assert best_level_under_slos(missed + open_loop) is None


def test_it_has_no_best_level_when_none_qualifies():
    assert best_level_under_slos([]) is None
    assert best_level_under_slos([level({"concurrency": 1}, slo=met(501))]) is None


# --- a trial's cost per token, with cold start amortized -----------------------------------

SWEEP = [
    level({"concurrency": 1}, tput=310.0, slo=met(80)),
    level({"concurrency": 8}, tput=2050.0, slo=met(150)),
    level({"concurrency": 64}, tput=4200.0, slo=met(420)),
    level({"concurrency": 192}, tput=6100.0, slo=met(2600)),  # faster but misses TTFT
]
COLD_START = {
    "process_start": 0.4,
    "weights_loaded": 41.5,
    "health_ready": 118.3,
    "first_token": 120,
}


def test_it_prices_a_trial_at_its_best_level_with_cold_start_amortized():
    cost = trial_cost_per_million_output_tokens(
        SWEEP, pod_usd_per_hr=Decimal("5.38"), cold_start=COLD_START, price_source="billed"
    )
    assert cost.load == "concurrency=64"
    assert cost.output_throughput_tok_s == Decimal("4200.0")
    # Steady: 5.38 / 3600 / 4200 × 1e6 = 0.35582010…/M → $0.3558.
    assert cost.usd_per_million_output_tokens == Decimal("0.3558")
    # Cold start = the last phase, first_token at 120 s, paid once, then 3,600 s of serving:
    # 0.35582010… × (120 + 3600) / 3600 = 0.36768077…/M → $0.3677.
    assert (cost.cold_start_phase, cost.cold_start_seconds) == ("first_token", Decimal(120))
    assert cost.serving_window_seconds == Decimal(3600)
    assert cost.usd_per_million_output_tokens_cold_start_amortized == Decimal("0.3677")
    # One cold start: 5.38 × 120 / 3600 = 0.17933… → $0.1793.
    assert cost.cold_start_usd == Decimal("0.1793")
    assert cost.pod_usd_per_hr == Decimal("5.3800") and cost.price_source == "billed"
    assert cost.simulated is False
    assert any("3600 s of serving" in note and "first_token" in note for note in cost.notes)


def test_it_amortizes_over_the_serving_window_it_is_given():
    cost = trial_cost_per_million_output_tokens(
        SWEEP,
        pod_usd_per_hr=Decimal("5.38"),
        cold_start=COLD_START,
        serving_window_seconds=Decimal(7200),
    )
    # 0.35582010… × (120 + 7200) / 7200 = 0.36175044…/M → $0.3618.
    assert cost.usd_per_million_output_tokens_cold_start_amortized == Decimal("0.3618")
    assert cost.serving_window_seconds == Decimal(7200)
    with pytest.raises(ValueError, match="serving window"):
        trial_cost_per_million_output_tokens(
            SWEEP, pod_usd_per_hr=Decimal("5.38"), cold_start={}, serving_window_seconds=0
        )


def test_it_does_not_amortize_a_cold_start_it_never_saw():
    cost = trial_cost_per_million_output_tokens(
        SWEEP, pod_usd_per_hr=Decimal("5.38"), cold_start={}
    )
    assert cost.usd_per_million_output_tokens == Decimal("0.3558")
    assert cost.usd_per_million_output_tokens_cold_start_amortized is None
    assert cost.cold_start_seconds is None and cost.cold_start_usd is None


def test_it_keeps_the_figures_but_no_money_without_a_price_or_a_qualifying_level():
    unpriced = trial_cost_per_million_output_tokens(
        SWEEP, pod_usd_per_hr=None, cold_start=COLD_START, price_source="no secure price"
    )
    assert unpriced.load == "concurrency=64"
    assert unpriced.usd_per_million_output_tokens is None
    assert unpriced.usd_per_million_output_tokens_cold_start_amortized is None
    assert any("no secure price" in note for note in unpriced.notes)
    missed = trial_cost_per_million_output_tokens(
        SWEEP[3:], pod_usd_per_hr=Decimal("5.38"), cold_start=COLD_START
    )
    assert missed.level is None and missed.usd_per_million_output_tokens is None
    assert missed.cold_start_usd == Decimal("0.1793")  # a start-up still costs its seconds


def test_it_marks_a_cost_from_a_simulated_trial():
    labelled = [{**SWEEP[2], "simulated": {"speed": 1.0}}]
    from_label = trial_cost_per_million_output_tokens(
        labelled, pod_usd_per_hr=Decimal("5.38"), cold_start={}
    )
    from_engine = trial_cost_per_million_output_tokens(
        SWEEP, pod_usd_per_hr=Decimal("5.38"), cold_start={}, simulated=True
    )
    measured = trial_cost_per_million_output_tokens(
        SWEEP, pod_usd_per_hr=Decimal("5.38"), cold_start={}
    )
    assert (from_label.simulated, from_engine.simulated, measured.simulated) == (True, True, False)
    assert any(note.startswith("Simulated") for note in from_label.notes)


def test_every_money_figure_is_a_decimal_to_four_places():
    cost = trial_cost_per_million_output_tokens(
        SWEEP, pod_usd_per_hr=Decimal("5.38"), cold_start=COLD_START
    )
    money = [f.name for f in fields(TrialCost) if f.name.endswith("usd") or "usd_" in f.name]
    assert set(money) == {
        "pod_usd_per_hr",
        "usd_per_million_output_tokens",
        "cold_start_usd",
        "usd_per_million_output_tokens_cold_start_amortized",
    }
    assert all(is_money(getattr(cost, name)) for name in money)
    assert is_money(run_cost_usd(seconds=0, pod_usd_per_hr=Decimal(4)))


# --- spend per organization per month -------------------------------------------------------


def test_it_refuses_an_ambiguous_month():
    with pytest.raises(ValueError, match="first day"):
        month_bounds_utc(date(2025, 1, 15))
    with pytest.raises(ValueError, match="time zone"):
        month_start(datetime(2025, 1, 31, 23, 0))
    assert month_bounds_utc(date(2024, 12, 1)) == (
        datetime(2024, 12, 1, tzinfo=UTC),
        datetime(2025, 1, 1, tzinfo=UTC),
    )


# --- selectors (database) ------------------------------------------------------------------


def make_run(org, experiment, *, created_at=T0, **fields) -> Run:
    return Run.objects.create(
        organization=org,
        experiment=experiment,
        created_at=created_at,
        **frozen(experiment),
        **fields,
    )


@pytest.mark.django_db
def test_it_sums_an_organizations_month_spend_exactly(alice, charlie):
    acme = make_experiment(alice.org)
    globex = make_experiment(charlie.org)
    for org, experiment, created_at, cost in [
        (alice.org, acme, datetime(2025, 1, 31, 23, 59, 59, tzinfo=UTC), "1.3688"),
        (alice.org, acme, datetime(2025, 1, 2, tzinfo=UTC), "0.1"),
        # 00:30 on 1 February in UTC+1 is 23:30 on 31 January in UTC: January.
        (alice.org, acme, datetime(2025, 2, 1, 0, 30, tzinfo=timezone(timedelta(hours=1))), "0.5"),
        (alice.org, acme, datetime(2025, 2, 1, tzinfo=UTC), "2"),
        (charlie.org, globex, datetime(2025, 1, 15, tzinfo=UTC), "100"),
    ]:
        make_run(org, experiment, created_at=created_at, cost_usd=Decimal(cost))
    # January for acme: 1.3688 + 0.1000 + 0.5000 = 1.9688; February: 2.0000; globex's $100 is
    # its own.
    assert org_month_spend_usd(org=alice.org, month=date(2025, 1, 1)) == Decimal("1.9688")
    assert org_month_spend_usd(org=alice.org, month=date(2025, 2, 1)) == Decimal("2.0000")
    assert org_month_spend_usd(org=charlie.org, month=date(2025, 1, 1)) == Decimal("100.0000")
    empty = org_month_spend_usd(org=charlie.org, month=date(2025, 2, 1))
    assert empty == Decimal("0.0000") and is_money(empty)


def record(trial: Trial, result: dict) -> None:
    result = dict(result)
    concurrency = result.pop("concurrency", None)
    rate = result.pop("request_rate", None)
    Measurement.objects.create(
        organization_id=trial.organization_id,
        trial=trial,
        concurrency=concurrency,
        request_rate=None if rate == "inf" else rate,
        request_rate_infinite=rate == "inf",
        result=result,
    )


def priced_trial(org, serve_config=None, **experiment_fields) -> Trial:
    experiment = make_experiment(org, model=make_model(org), **experiment_fields)
    # Every GPU of the pod in use, unless a test says otherwise: priced for the whole pod.
    gpus = experiment_fields.get("gpu_count", 1)
    trial = Trial.objects.create(
        organization=org,
        run=make_run(org, experiment),
        index=0,
        serve_config={"tensor_parallel_size": gpus} if serve_config is None else serve_config,
        cold_start=COLD_START,
    )
    for result in SWEEP:
        record(trial, result)
    return trial


@pytest.mark.django_db
def test_it_prices_a_trial_at_the_pods_billed_rate_when_known(alice):
    trial = priced_trial(alice.org, gpu_count=2)
    Run.objects.filter(id=trial.run_id).update(price_usd_hr=Decimal("5.38"))
    trial.refresh_from_db()
    cost = trial_costs(trial=trial)
    # Billed $5.38/h for the whole pod (not × 2 GPUs): $0.3558/M, $0.3677/M amortized.
    assert cost.pod_usd_per_hr == Decimal("5.3800")
    assert cost.usd_per_million_output_tokens == Decimal("0.3558")
    assert cost.usd_per_million_output_tokens_cold_start_amortized == Decimal("0.3677")
    assert cost.load == "concurrency=64" and cost.simulated is False


@pytest.mark.django_db
def test_it_prices_a_trial_from_its_own_organizations_catalogue_price(alice, charlie):
    # Another tenant's cheaper price for the same GPU never applies to alice's trial.
    gpu_price_set(
        org=charlie.org,
        gpu_type=GpuType.objects.get(id=H100),
        actor=SYSTEM,
        price_secure_usd_hr=Decimal("1.00"),
        price_community_usd_hr=None,
        note="globex deal",
    )
    cost = trial_costs(trial=priced_trial(alice.org, gpu_count=2))
    # No billed rate: H100 secure $3.99/GPU-h × 2 = $7.98/h; 7.98 / 3600 / 4200 × 1e6
    # = 0.52777…/M → $0.5278.
    assert cost.pod_usd_per_hr == Decimal("7.9800")
    assert cost.usd_per_million_output_tokens == Decimal("0.5278")
    assert "× 2 GPU" in cost.price_source and "globex" not in cost.price_source


@pytest.mark.django_db
def test_it_marks_a_trial_of_the_simulator_and_reads_open_loop_levels(alice):
    experiment = make_experiment(alice.org, engine="sim")
    trial = Trial.objects.create(
        organization=alice.org, run=make_run(alice.org, experiment), index=0, serve_config={}
    )
    record(trial, level({"request_rate": 4.0}, tput=900.0, slo=met(100)))
    record(trial, level({"request_rate": "inf"}, tput=4200.0, slo=met(450)))
    cost = trial_costs(trial=trial)
    assert cost.simulated is True
    assert cost.load == "request_rate=inf"
    # $3.99/h × 1 GPU: 3.99 / 3600 / 4200 × 1e6 = 0.26388…/M → $0.2639.
    assert cost.usd_per_million_output_tokens == Decimal("0.2639")
