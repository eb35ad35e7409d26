"""The managers' reports at scale: a fixed number of queries whatever the number of runs, with
or without the level figures kept for ended runs (``runs.selectors.level_figures``), and the same
figures either way."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.models import AuditEvent, GpuType, Measurement, Run, TrialLevelFigures
from runs.models.runs import RunState
from runs.selectors import level_figures
from runs.selectors.ended_trial_figures import EndedTrialFigures, ended_trial_figures
from runs.selectors.trial_costs import trial_costs
from runs.selectors.trial_figures import trial_figures
from runs.services.catalogue import gpu_price_set
from runs.services.experiments import experiment_update
from runs.services.level_figures import trial_level_figures_record

from .conftest import H100, SYSTEM
from .report_data import EXPECTED, add_run, add_trial, build_history, level

COSTS = "/o/acme/reports/costs/"


@pytest.fixture
def history(alice):
    return build_history(alice.org)


def add_runs(history, count: int, *, first: int = 0) -> None:
    """``count`` more finished runs of the measured experiments, two trials each; half of
    them billed at their pod's rate, the others priced from the catalogue."""
    for n in range(first, first + count):
        experiment = (history.small, history.qwen, history.big)[n % 3]
        run = add_run(
            experiment,
            created_at=datetime(2025, 3, 1, tzinfo=UTC) + timedelta(hours=n),
            cost="1",
            price="3.99" if n % 2 else None,
        )
        for index, seqs in enumerate((64, 128)):
            add_trial(
                run,
                index,
                {"max_num_seqs": seqs},
                [level(8, 2000.0 + n, 150.0), level(64, 4000.0 + n, 450.0)],
            )


def queries_of(client, path: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(path).status_code == 200
    return len(queries)


def compared(figure) -> tuple:
    """Everything a report shows of a figure (``TrialCost.level`` aside: a report reads only
    some keys of it, which ``p99_ms`` and ``headroom_pct`` cover)."""
    cost = figure.cost
    return (
        figure.trial_id,
        figure.simulated,
        cost.simulated,
        cost.load,
        cost.output_throughput_tok_s,
        cost.pod_usd_per_hr,
        cost.price_source,
        cost.usd_per_million_output_tokens,
        cost.usd_per_million_output_tokens_cold_start_amortized,
        cost.cold_start_phase,
        cost.cold_start_seconds,
        cost.cold_start_usd,
        cost.notes,
        tuple(figure.p99_ms(metric) for metric in level_figures.SLO_METRICS),
        tuple(figure.headroom_pct().items()),
        figure.qualifying_loads(),
    )


def shown(cost) -> tuple:
    """The figures of a ``TrialCost`` a report shows."""
    return (
        cost.simulated,
        cost.load,
        cost.pod_usd_per_hr,
        cost.price_source,
        cost.usd_per_million_output_tokens,
        cost.usd_per_million_output_tokens_cold_start_amortized,
        cost.notes,
    )


def like_the_selector(figures) -> bool:
    """Whether the figures are those of ``runs.selectors.trial_costs`` (whole rows, nothing
    kept) for the same trials."""
    return [shown(f.cost) for f in figures] == [shown(trial_costs(trial=f.trial)) for f in figures]


# --- Queries ---------------------------------------------------------------------------------


def levels_read(client, path: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(path).status_code == 200
    return sum("runs_measurement" in q["sql"] for q in queries)


@pytest.mark.parametrize("kept", [True, False], ids=["figures kept", "from the levels"])
@pytest.mark.slow
def test_it_reads_the_cost_report_in_as_many_queries_for_ten_times_the_runs(history, web, kept):
    add_runs(history, 3)
    if kept:
        trial_level_figures_record()
    ended_trial_figures.clear()
    few = queries_of(web, COSTS), queries_of(web, COSTS)  # afresh, then priced in memory
    compared_few = web.get(COSTS, {"csv": "measured"}).content.decode()
    add_runs(history, 27, first=3)
    if kept:
        trial_level_figures_record()
    ended_trial_figures.clear()
    assert (queries_of(web, COSTS), queries_of(web, COSTS)) == few
    # With the figures kept, no level is read at all; without, once per report afresh.
    ended_trial_figures.clear()
    assert levels_read(web, COSTS) == (0 if kept else 1)
    assert levels_read(web, COSTS) == 0
    # Every run was read: llama-8b has a third of the added runs, two trials each (2 + 2 × 1
    # trials compared, then 2 + 2 × 10).
    assert ",4 / 4\r\n" in compared_few
    assert ",22 / 22\r\n" in web.get(COSTS, {"csv": "measured"}).content.decode()


@pytest.mark.parametrize("kept", [True, False], ids=["figures kept", "from the levels"])
@pytest.mark.slow
def test_it_reads_the_model_choice_in_as_many_queries_for_ten_times_the_runs(history, web, kept):
    path = f"/o/acme/reports/choice/{history.small.id}/"
    add_runs(history, 3)
    if kept:
        trial_level_figures_record()
    ended_trial_figures.clear()
    few = queries_of(web, path), queries_of(web, path)
    add_runs(history, 27, first=3)
    if kept:
        trial_level_figures_record()
    ended_trial_figures.clear()
    assert (queries_of(web, path), queries_of(web, path)) == few


# --- Figures kept for ended runs -----------------------------------------------------------------


def test_it_reads_no_level_of_an_ended_run_whose_figures_are_kept(history, alice):
    fresh = trial_figures(org=alice.org)
    assert trial_level_figures_record() == 5
    ended_trial_figures.clear()  # as in a process started afresh
    with CaptureQueriesContext(connection) as queries:
        kept = trial_figures(org=alice.org)
    assert not [q for q in queries if "runs_measurement" in q["sql"]]
    assert [compared(f) for f in kept] == [compared(f) for f in fresh]
    assert like_the_selector(kept)


def test_it_reads_the_levels_of_a_run_still_going_every_time(history, alice):
    trial_level_figures_record()
    run = add_run(history.small, created_at=datetime(2025, 3, 1, tzinfo=UTC))
    Run.objects.filter(pk=run.pk).update(state=RunState.BENCHMARKING)
    trial = add_trial(run, 0, {"max_num_seqs": 256}, [level(8, 2000.0, 100.0)])
    # Nothing is kept for a run that has not ended: its levels may still change.
    assert trial_level_figures_record(run_ids=[run.id]) == 0
    assert not TrialLevelFigures.objects.filter(trial=trial).exists()

    def figure():
        return next(f for f in trial_figures(org=alice.org) if f.trial_id == trial.id)

    assert figure().cost.load == "concurrency=8"
    result = level(64, 6000.0, 300.0)
    Measurement.objects.create(
        organization_id=trial.organization_id,
        trial=trial,
        concurrency=result.pop("concurrency"),
        result=result,
    )
    latest = figure()
    # 3.99 / 3600 / 6000 × 1e6 = 0.184722… → 0.1847
    assert latest.cost.load == "concurrency=64"
    assert latest.usd_per_million == Decimal("0.1847")
    assert latest.qualifying_loads() == ["concurrency=8", "concurrency=64"]


def test_it_prices_kept_figures_again_when_a_price_changes(history, alice):
    trial_level_figures_record()
    trial_figures(org=alice.org)
    gpu_price_set(
        org=alice.org,
        gpu_type=GpuType.objects.get(id=H100),
        actor=SYSTEM,
        price_secure_usd_hr=Decimal("2.50"),
        price_community_usd_hr=None,
        note="negotiated",
    )
    figures = {f.trial_id: f for f in trial_figures(org=alice.org)}
    best = figures[history.t128.id]
    # 2.50 / 3600 / 5000 × 1e6 = 0.138888… → 0.1389; × 3720 / 3600 = 0.143518… → 0.1435
    assert best.usd_per_million == Decimal("0.1389")
    assert best.cost.usd_per_million_output_tokens_cold_start_amortized == Decimal("0.1435")
    assert best.cost.price_source.startswith("organization price (negotiated)")
    # llama-70b's pod was billed at its own rate: the override does not touch it.
    assert figures[history.tbig.id].usd_per_million == Decimal(EXPECTED["llama70"]["steady"])
    assert like_the_selector(figures.values())


def test_it_keeps_kept_figures_measured_when_their_experiment_turns_to_the_simulator(
    history, alice
):
    # It pinned a bug: the live experiment's engine relabelled a run measured on vLLM.
    trial_level_figures_record()
    assert not next(
        f for f in trial_figures(org=alice.org) if f.trial_id == history.tqwen.id
    ).simulated
    experiment_update(experiment=history.qwen, actor=SYSTEM, engine="sim", engine_image_tag="")
    qwen = next(f for f in trial_figures(org=alice.org) if f.trial_id == history.tqwen.id)
    assert not qwen.simulated and not qwen.cost.simulated
    assert not any(note.startswith("Simulated:") for note in qwen.cost.notes)


def test_it_gives_the_same_figures_from_the_whole_result_as_from_the_keys_it_picks(
    history, alice, monkeypatch
):
    picked = [compared(f) for f in trial_figures(org=alice.org)]
    # How another database than PostgreSQL reads the levels (the SQLite demo).
    monkeypatch.setattr(level_figures, "level_column", lambda alias: "result")
    ended_trial_figures.clear()
    assert [compared(f) for f in trial_figures(org=alice.org)] == picked
    trial_level_figures_record()
    ended_trial_figures.clear()
    assert [compared(f) for f in trial_figures(org=alice.org)] == picked


# --- Figures priced in memory ----------------------------------------------------------------


def test_it_reads_no_kept_figure_of_a_trial_priced_before(history, alice, monkeypatch):
    trial_level_figures_record()
    first = trial_figures(org=alice.org)
    assert len(ended_trial_figures) == 5
    decoded = []
    original = level_figures.stored_level_figures
    monkeypatch.setattr(
        "runs.selectors.trial_figures.stored_level_figures",
        lambda *row: decoded.append(row) or original(*row),
    )
    again = trial_figures(org=alice.org)
    assert decoded == []
    assert [compared(f) for f in again] == [compared(f) for f in first]
    assert like_the_selector(again)


def test_it_keeps_at_most_its_bound_of_trials(history, alice, monkeypatch):
    bounded = EndedTrialFigures(max_trials=2)
    monkeypatch.setattr("runs.selectors.trial_figures.ended_trial_figures", bounded)
    figures = trial_figures(org=alice.org)
    assert len(bounded) == 2
    # The most recently priced are kept; the others are priced again, the same.
    assert [compared(f) for f in trial_figures(org=alice.org)] == [compared(f) for f in figures]


def test_it_never_serves_a_figure_priced_for_another_run_rules_or_price(history, alice):
    figure = trial_figures(org=alice.org)[0]
    rules = level_figures.FIGURES_RULES
    key = (rules, (figure.cost.pod_usd_per_hr, figure.cost.price_source, False))
    kept = ended_trial_figures.get(figure.trial_id, figure.run_key, key)
    assert kept is not None and kept.cost == figure.cost
    # The same trial id in a re-created database belongs to another run.
    assert ended_trial_figures.get(figure.trial_id, str(history.tbig.run_id), key) is None
    assert (
        ended_trial_figures.get(figure.trial_id, figure.run_key, (rules, (None, "", False))) is None
    )
    assert ended_trial_figures.get(figure.trial_id, figure.run_key, (rules + 1, key[1])) is None


# --- The audit log export --------------------------------------------------------------------


def test_it_exports_every_audit_event_across_chunks(history, web, monkeypatch):
    from runs.selectors import audit_log

    monkeypatch.setattr(audit_log, "EXPORT_CHUNK", 2)
    response = web.get("/o/acme/audit/", {"format": "csv"})
    body = b"".join(response.streaming_content).decode()
    lines = body.split("\r\n")
    header, rows = lines[0], [line for line in lines[1:] if line]
    assert header.startswith("seq,created_at,actor,via,event")
    expected = list(
        AuditEvent.objects.filter(organization=history.small.organization)
        .order_by("seq")
        .values_list("seq", flat=True)
    )
    assert len(expected) > 4  # several chunks
    assert [int(row.split(",", 1)[0]) for row in rows] == expected
