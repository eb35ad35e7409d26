"""The level figures kept for ended runs (``runs.selectors.level_figures``, kept by
``runs.services.level_figures``): equal to the figures worked out from the levels for every
trial, never stale (price, engine, GPU count and SLOs are read afresh; other rules are never
read), written when a run's pod is released and by the migration's backfill, and every report
page and CSV the same byte for byte."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.apps import apps
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.models import GpuType, Measurement, Run, TrialLevelFigures
from runs.models.runs import RunState
from runs.selectors import level_figures
from runs.selectors.ended_trial_figures import ended_trial_figures
from runs.selectors.level_figures import SLO_METRICS
from runs.selectors.trial_costs import trial_costs
from runs.selectors.trial_figures import trial_figures
from runs.services.catalogue import gpu_price_set
from runs.services.experiments import experiment_update
from runs.services.level_figures import level_figures_backfill, trial_level_figures_record
from runs.services.provisioning import run_release_pod

from .conftest import H100, SYSTEM
from .report_data import add_run, add_trial, build_history, level


def add_rate_level(trial, rate, tput: float, p99_ttft: float, **extra) -> None:
    """An open-loop level (``rate`` requests/s, or ``"inf"``)."""
    result = {k: v for k, v in level(1, tput, p99_ttft, **extra).items() if k != "concurrency"}
    Measurement.objects.create(
        organization_id=trial.organization_id,
        trial=trial,
        request_rate=None if rate == "inf" else rate,
        request_rate_infinite=rate == "inf",
        result=result,
    )


def build_odd_trials(history) -> None:
    """Trials that take every branch of choosing a level: open-loop beside closed-loop, only
    open-loop (an unbounded rate among them), none qualifying, none measured, a partial and a
    failing level, and a simulated label on one level of a measured experiment."""
    run = add_run(history.small, created_at=datetime(2025, 2, 10, tzinfo=UTC), price="3.5")
    mixed = add_trial(run, 0, {"max_num_seqs": 32}, [level(8, 1800.0, 120.0)])
    add_rate_level(mixed, 2.0, 900.0, 100.0)
    closed_missed = add_trial(run, 1, {"max_num_seqs": 48}, [level(8, 1800.0, 900.0)])
    add_rate_level(closed_missed, 4.0, 1200.0, 100.0)  # qualifies, but is not ranked
    open_only = add_trial(run, 2, {"max_num_seqs": 96}, [])
    add_rate_level(open_only, 1.5, 700.0, 90.0)
    add_rate_level(open_only, "inf", 2500.0, 480.0)
    add_rate_level(open_only, 8.0, 2200.0, 700.0)
    add_trial(run, 3, {"max_num_seqs": 160}, [level(8, 1000.0, 800.0), level(64, 2000.0, 990.0)])
    add_trial(run, 4, {"max_num_seqs": 200}, [])
    add_trial(
        run,
        5,
        {"max_num_seqs": 224},
        [
            level(8, 1500.0, 100.0),
            level(16, 2500.0, 150.0, partial=True),
            level(32, 3500.0, 200.0, failed=2),
            level(4, 800.0, 50.0, simulated={"speed": 2.0}),
        ],
        cold_start={},
    )


@pytest.fixture
def history(alice):
    history = build_history(alice.org)
    build_odd_trials(history)
    return history


def everything(figure) -> tuple:
    """All a figure holds that a report can show, the chosen level's keys included."""
    return (
        figure.trial_id,
        figure.simulated,
        figure.cost,  # every field of the TrialCost, its level and notes too
        figure.qualifying_loads(),
        figure.slos,
        figure.gpu_type_id,
        figure.gpu_count,
        figure.throughput_per_gpu,
        tuple(figure.p99_ms(metric) for metric in SLO_METRICS),
        tuple(figure.headroom_pct().items()),
    )


def like_the_selector(figures) -> bool:
    """Whether every figure's cost is the one ``runs.selectors.trial_costs`` works out from
    whole rows, nothing kept (its level holds every key of the result: compared apart)."""
    for figure in figures:
        fresh = trial_costs(trial=figure.trial)
        if (fresh.level is None) != (figure.cost.level is None):
            return False
        for name in fresh.__dataclass_fields__:
            if name != "level" and getattr(fresh, name) != getattr(figure.cost, name):
                return False
    return True


def test_it_keeps_figures_equal_to_the_fresh_ones_for_every_trial(history, alice):
    fresh = [everything(f) for f in trial_figures(org=alice.org)]
    assert len(fresh) == 11
    assert trial_level_figures_record() == 11
    ended_trial_figures.clear()  # as in a process started afresh
    with CaptureQueriesContext(connection) as queries:
        kept = trial_figures(org=alice.org)
    assert not [q for q in queries if "runs_measurement" in q["sql"]]  # one row per trial
    assert [everything(f) for f in kept] == fresh
    assert like_the_selector(kept)
    loads = {f.serve_config.get("max_num_seqs"): f.cost.load for f in kept}
    assert loads[32] == "concurrency=8" and loads[48] is None
    assert loads[96] == "request_rate=inf" and loads[160] is None and loads[200] is None
    assert loads[224] == "concurrency=8"


def test_it_records_each_trial_once_and_only_for_ended_runs(history, alice):
    assert trial_level_figures_record() == 11
    assert trial_level_figures_record() == 0
    going = add_run(history.qwen, created_at=datetime(2025, 3, 1, tzinfo=UTC))
    Run.objects.filter(pk=going.pk).update(state=RunState.BENCHMARKING)
    add_trial(going, 0, {"max_num_seqs": 64}, [level(8, 2000.0, 100.0)])
    assert trial_level_figures_record(run_ids=[going.id]) == 0
    Run.objects.filter(pk=going.pk).update(state=RunState.SUCCEEDED)
    assert trial_level_figures_record(run_ids=[going.id]) == 1
    assert TrialLevelFigures.objects.count() == 12


def test_it_records_the_figures_when_the_run_s_pod_is_released(history, alice):
    run = history.run_small
    assert run.pod_id == "" and not TrialLevelFigures.objects.exists()
    assert run_release_pod(run_id=run.id) is False  # no pod: nothing to terminate
    kept = set(TrialLevelFigures.objects.values_list("trial_id", flat=True))
    assert kept == {history.t64.id, history.t128.id}  # the failed trial has no figures


def test_it_backfills_the_runs_that_ended_before_the_migration(history, alice):
    fresh = [everything(f) for f in trial_figures(org=alice.org)]
    level_figures_backfill(apps, None)
    assert TrialLevelFigures.objects.count() == 11
    ended_trial_figures.clear()
    assert [everything(f) for f in trial_figures(org=alice.org)] == fresh


def test_it_prices_kept_figures_at_today_s_price(history, alice):
    trial_level_figures_record()
    before = {f.trial_id: f for f in trial_figures(org=alice.org)}
    gpu_price_set(
        org=alice.org,
        gpu_type=GpuType.objects.get(id=H100),
        actor=SYSTEM,
        price_secure_usd_hr=Decimal("2.50"),
        price_community_usd_hr=None,
        note="negotiated",
    )
    after = {f.trial_id: f for f in trial_figures(org=alice.org)}
    t128 = history.t128.id
    # 2.50 / 3600 / 5000 × 1e6 = 0.138888… → 0.1389 (was 3.99: 0.2217)
    assert before[t128].usd_per_million == Decimal("0.2217")
    assert after[t128].usd_per_million == Decimal("0.1389")
    assert like_the_selector(after.values())


def test_it_keeps_the_run_s_frozen_engine_and_gpu_count_after_the_experiment_changed(
    history, alice
):
    # Reports followed the live experiment here (a bug: the run never ran what it was
    # edited into); they read what each run was started with.
    trial_level_figures_record()
    before = [everything(f) for f in trial_figures(org=alice.org)]
    experiment_update(experiment=history.qwen, actor=SYSTEM, engine="sim", engine_image_tag="")
    experiment_update(experiment=history.small, actor=SYSTEM, gpu_count=2)
    figures = {f.trial_id: f for f in trial_figures(org=alice.org)}
    assert not figures[history.tqwen.id].simulated and not figures[history.tqwen.id].cost.simulated
    # Priced from the catalogue for the one GPU it was started with.
    assert figures[history.t128.id].cost.pod_usd_per_hr == Decimal("3.9900")
    assert like_the_selector(figures.values())
    assert [everything(f) for f in figures.values()] == before
    TrialLevelFigures.objects.all().delete()
    ended_trial_figures.clear()
    assert [everything(f) for f in trial_figures(org=alice.org)] == before


def test_it_judges_slos_by_the_run_s_frozen_experiment_after_the_experiment_changed(history, alice):
    trial_level_figures_record()
    before = [everything(f) for f in trial_figures(org=alice.org)]
    experiment_update(experiment=history.small, actor=SYSTEM, slos={"ttft_ms": 100})
    after = trial_figures(org=alice.org)
    # The runs' SLOs are the frozen ones: a later edit of the experiment changes no figure
    # of a run that has ended, kept or worked out afresh.
    assert [everything(f) for f in after] == before
    TrialLevelFigures.objects.all().delete()
    ended_trial_figures.clear()
    assert [everything(f) for f in trial_figures(org=alice.org)] == before


def test_it_never_reads_figures_kept_under_other_rules(history, alice, monkeypatch):
    fresh = [everything(f) for f in trial_figures(org=alice.org)]
    trial_level_figures_record()
    # Kept figures are what a report reads: a row changed by hand shows...
    TrialLevelFigures.objects.filter(trial=history.t128).update(qualifying=["concurrency=1"])
    ended_trial_figures.clear()
    shown = next(f for f in trial_figures(org=alice.org) if f.trial_id == history.t128.id)
    assert shown.qualifying_loads() == ["concurrency=1"]
    # ...until the rules change: then no row of the old rules is read, and the next record
    # writes them anew.
    monkeypatch.setattr(level_figures, "FIGURES_RULES", level_figures.FIGURES_RULES + 1)
    assert [everything(f) for f in trial_figures(org=alice.org)] == fresh
    assert trial_level_figures_record() == 11
    assert set(TrialLevelFigures.objects.values_list("rules", flat=True)) == {
        level_figures.FIGURES_RULES
    }
    assert [everything(f) for f in trial_figures(org=alice.org)] == fresh


def _csrf_free(body: bytes) -> bytes:
    # A fresh CSRF token is masked anew on every response.
    return re.sub(rb'(name="csrfmiddlewaretoken" value=")[^"]+', rb"\1", body)


def _body(client, path: str, params: dict) -> bytes:
    response = client.get(path, params)
    assert response.status_code == 200, path
    return b"".join(response.streaming_content) if response.streaming else response.content


@pytest.mark.slow
def test_it_serves_every_report_page_and_csv_byte_for_byte_as_from_the_levels(history, web):
    choice = f"/o/acme/reports/choice/{history.small.id}/"
    pages = [
        ("/o/acme/reports/", {}),
        ("/o/acme/reports/costs/", {}),
        ("/o/acme/reports/costs/", {"csv": "measured"}),
        ("/o/acme/reports/costs/", {"csv": "simulated"}),
        ("/o/acme/reports/models/", {}),
        ("/o/acme/reports/models/", {"csv": "measured"}),
        ("/o/acme/reports/spend/", {}),
        ("/o/acme/reports/spend/", {"csv": "months"}),
        ("/o/acme/reports/spend/", {"csv": "experiments"}),
        (choice, {}),
        (choice, {"csv": "recommended"}),
        (choice, {"csv": "runners-up"}),
        (choice, {"csv": "simulated"}),
    ]
    from_levels = [_csrf_free(_body(web, path, params)) for path, params in pages]
    trial_level_figures_record()
    ended_trial_figures.clear()
    assert [_csrf_free(_body(web, path, params)) for path, params in pages] == from_levels
    # And again, priced from this process's memory.
    assert [_csrf_free(_body(web, path, params)) for path, params in pages] == from_levels


def test_it_prices_the_capacity_as_the_run_s_answer_does_kept_or_fresh(history, alice, web):
    from runs.selectors.run_answer import run_answer
    from runs.selectors.trial_figures import cost_order

    from .test_web_reports import searched

    searched(history.t64, 96, 8000.0)  # 3.99 / 3600 / 8000 × 1e6 → 0.1385
    searched(history.tbig, 48, 2000.0)  # at the billed 5.38 / h → 0.7472

    def ranked():
        figures = sorted(trial_figures(org=alice.org), key=cost_order)
        return [(f.trial_id, f.usd_per_million_at_capacity, f.ranked_by) for f in figures]

    fresh = ranked()
    by_trial = {trial_id: cost for trial_id, cost, _ in fresh}
    # One rule: the report's cost at capacity is the run's answer's, at the same pod rate.
    for run, trial in [(history.run_small, history.t64), (history.tbig.run, history.tbig)]:
        winner = run_answer(run=run).winner
        assert (winner.trial, winner.usd_per_million_output_tokens) == (
            trial.index,
            by_trial[trial.id],
        )
    assert by_trial[history.t64.id] == Decimal("0.1385")
    assert by_trial[history.tbig.id] == Decimal("0.7472")
    assert by_trial[history.t128.id] is None
    assert [ranked_by for *_, ranked_by in fresh][:2] == ["capacity", "capacity"]
    pages = [("/o/acme/reports/costs/", {"csv": "measured"}), ("/o/acme/reports/models/", {})]
    from_levels = [_csrf_free(_body(web, path, params)) for path, params in pages]
    trial_level_figures_record()
    ended_trial_figures.clear()
    assert ranked() == fresh
    assert [_csrf_free(_body(web, path, params)) for path, params in pages] == from_levels
    # A capacity found later (or changed) is read afresh, never from memory.
    searched(history.t128, 96, 9000.0)  # 0.1231
    assert ranked()[0][:2] == (history.t128.id, Decimal("0.1231"))
