"""Reports for managers: costs, models, spend, cold starts and the model choice of an experiment
(printable, each table exportable as CSV with the same rows and text).

Every page is an ``org_page`` (another organization's report is a 404). Reports read through
the selectors (``runs.selectors.trial_figures`` and what ranks them) and write nothing;
simulated figures are shown in sections of their own and never ranked with measured ones.
"""

from __future__ import annotations

from django.http import Http404
from django.shortcuts import render
from django.urls import reverse

from frontend.org_pages import org_context, org_page
from frontend.reports import choice_tables, quality_tables, tables
from runs.access import access_experiment, scoped
from runs.models import Experiment
from runs.selectors.cold_starts import cold_start_report
from runs.selectors.cost_rankings import best_configs
from runs.selectors.model_choice import model_choice
from runs.selectors.models_report import models_report
from runs.selectors.spend import spend_by_experiment, spend_by_month
from runs.selectors.trial_figures import trial_figures


def _run_href(org_slug: str):
    def href(figure) -> str:
        return reverse("run-detail", args=[org_slug, figure.run_id])

    return href


def _experiment_href(org_slug: str):
    def href(experiment) -> str:
        return reverse("experiment-detail", args=[org_slug, experiment.id])

    return href


def _report(request, membership, template: str, report_tables: list, **extra):
    """The page, or with ``?csv=<table>`` that table as a CSV file (same rows, same text)."""
    wanted = request.GET.get("csv")
    if wanted is not None:
        table = next((t for t in report_tables if t.key == wanted), None)
        if table is None:
            raise Http404("No such table in this report.")
        name = f"{membership.organization.slug}-{template.rsplit('/', 1)[-1][:-5]}-{wanted}.csv"
        return tables.csv_response(table, filename=name)
    return render(request, template, org_context(membership, tables=report_tables, **extra))


@org_page()
def reports_index(request, membership):
    experiments = scoped(membership, Experiment).select_related("model").order_by("name")
    return render(
        request,
        "frontend/reports/index.html",
        org_context(membership, experiments=experiments),
    )


@org_page()
def report_costs(request, membership):
    figures = trial_figures(org=membership.organization)
    href = _run_href(membership.organization.slug)
    measured_bests = best_configs(f for f in figures if not f.simulated)
    simulated_bests = best_configs(f for f in figures if f.simulated)
    measured = tables.cost_table(
        "measured",
        "Measured on real vLLM",
        measured_bests,
        simulated=False,
        run_href=href,
    )
    measured.empty = "No measured trial yet."
    simulated = tables.cost_table(
        "simulated",
        "Simulated (not measurements)",
        simulated_bests,
        simulated=True,
        run_href=href,
    )
    simulated.empty = "No simulated trial."
    simulated.note = (
        "The simulator's figures are in the modelled GPU's time, priced at its rate. They are "
        "never ranked with measured figures. " + simulated.note
    )
    steady, amortized = "USD / 1M output tokens", "USD / 1M, cold start amortized"
    chart = [
        {
            # Each image of a model × GPU is a bar of its own: its tag tells them apart.
            "label": " · ".join(
                part
                for part in (
                    measured.column(row, "Model"),
                    measured.column(row, "GPUs"),
                    measured.column(row, tables.IMAGE),
                )
                if part
            ),
            "steady": measured.column(row, steady),
            "amortized": measured.column(row, amortized),
        }
        for row in measured.rows
        if measured.column(row, steady)
    ]
    return _report(
        request,
        membership,
        "frontend/reports/costs.html",
        [measured, simulated],
        chart=chart,
    )


@org_page()
def report_models(request, membership):
    report = models_report(org=membership.organization)
    href = _run_href(membership.organization.slug)
    measured = tables.model_table(
        "measured", "Measured on real vLLM", report.measured, simulated=False
    )
    measured.empty = "No model has a measured cost per token yet."
    simulated = tables.model_table(
        "simulated", "Simulated (not measurements)", report.simulated, simulated=True
    )
    simulated.empty = "No simulated figures."
    quality = quality_tables.quality_table(
        "quality",
        "Quality against cost at the SLOs",
        report.quality_measured,
        simulated=False,
        run_href=href,
    )
    quality.empty = (
        "No measured configuration has a score yet: an experiment's evaluation scores each "
        "configuration on real vLLM (docs/quality.md)."
    )
    quality.note = QUALITY_NOTE
    quality_simulated = quality_tables.quality_table(
        "quality-simulated",
        "Quality of simulated configurations",
        report.quality_simulated,
        simulated=True,
        run_href=href,
    )
    quality_simulated.empty = "No simulated run had an evaluation."
    excluded = _excluded_table(report.excluded_for_quality, report.quality, href)
    return _report(
        request,
        membership,
        "frontend/reports/models.html",
        [measured, simulated, quality, quality_simulated, excluded],
        # Without a measured model (the demo's simulator), the simulated figures are charted,
        # labelled so: a chart of nothing would tell a manager nothing.
        chart=tables.model_chart_data(report.measured or report.simulated),
        chart_simulated=not report.measured and bool(report.simulated),
        quality_chart=quality_tables.quality_chart_data(quality),
        excluded=_with_reasons(report.excluded_for_quality[:CHOICE_TAIL_ROWS], report.quality),
    )


# What the quality table says of itself (and why one chart never mixes evaluations).
QUALITY_NOTE = (
    "Per model and evaluation, its cheapest configuration that keeps its run's quality floor "
    "(among those with a score): its cost per 1M output tokens at the SLOs against its score "
    "on the run's evaluation, with the 95 % interval. Scores on different evaluations are "
    "not on one scale: the chart draws each evaluation apart. Simulated configurations serve "
    "no text: their quality is not judged."
)


def _excluded_table(figures, quality, href) -> tables.ReportTable:
    """The configurations excluded for quality, cheapest first, cut at ``CHOICE_TAIL_ROWS``."""
    table = choice_tables.choice_table(
        "excluded-quality",
        "Excluded for quality (below their run's quality floor, never recommended)",
        figures[:CHOICE_TAIL_ROWS],
        run_href=href,
        empty="None: every measured configuration keeps its run's quality floor, or has none.",
        quality=lambda f: quality.get(f.trial_id),
    )
    table.note = _tail_note(len(figures), f"The {CHOICE_TAIL_ROWS} cheapest")
    return table


def _with_reasons(figures, quality) -> list[dict]:
    """Each configuration a floor excluded or could not judge, as the page lists it, with
    the reason."""
    return [
        {
            "figure": f,
            "config": tables.config_text(f.serve_config),
            "reason": quality[f.trial_id].standing.reason,
        }
        for f in figures
    ]


@org_page()
def report_spend(request, membership):
    months = spend_by_month(org=membership.organization)
    month_table = tables.month_table(months)
    experiment_table = tables.experiment_spend_table(
        spend_by_experiment(org=membership.organization),
        _experiment_href(membership.organization.slug),
    )
    chart = [
        {
            "month": month_table.column(row, "Month"),
            "spend": month_table.column(row, "Spend USD"),
            "budget": month_table.column(row, "Budget USD"),
        }
        for row in reversed(month_table.rows)
    ]
    return _report(
        request,
        membership,
        "frontend/reports/spend.html",
        [month_table, experiment_table],
        chart=chart,
    )


@org_page()
def report_cold_starts(request, membership):
    groups = cold_start_report(org=membership.organization)
    return _report(
        request,
        membership,
        "frontend/reports/cold_starts.html",
        [
            tables.cold_start_table(groups, simulated=False),
            tables.cold_start_table(groups, simulated=True),
        ],
    )


# A recommendation's tail (trials that met no SLO, simulated ones) is context, not the
# answer: after a year of sweeps it runs to hundreds of rows, which the history lists anyway.
CHOICE_TAIL_ROWS = 10


def _tail_note(total: int, shown: str) -> str:
    """What a table cut at ``CHOICE_TAIL_ROWS`` says of the rest ("" when nothing was cut)."""
    if total <= CHOICE_TAIL_ROWS:
        return ""
    return (
        f"{shown} of {total:,} trials (the CSV holds the same rows); "
        "the run history lists them all."
    )


# What fills an empty table of measured figures, for a reader of the demo (all simulated).
MEASURE_HINT = (
    "Measured figures come from runs on real vLLM: a GPU pod, an endpoint, or "
    "`make demo ENGINE=vllm` on this machine's CPU; simulated figures are never recommended."
)


@org_page()
def report_choice(request, membership, experiment_id):
    experiment = access_experiment(membership=membership, experiment_id=experiment_id)
    choice = model_choice(experiment=experiment)
    href = _run_href(membership.organization.slug)
    quality = choice.quality_of
    recommended = choice_tables.choice_table(
        "recommended",
        "Recommended",
        choice.measured[:1],
        run_href=href,
        empty=f"No measured trial met the SLOs: nothing to recommend yet. {MEASURE_HINT}",
        quality=quality,
    )
    runners_up = choice_tables.choice_table(
        "runners-up",
        "Runners-up",
        choice.runners_up,
        run_href=href,
        first_rank=2,
        empty="None yet: the measured configurations after the recommended one, cheapest "
        "first, are listed here once two or more meet the SLOs.",
        quality=quality,
    )
    per_model = choice_tables.choice_table(
        "per-model",
        "Best configuration per model",
        choice.per_model,
        run_href=href,
        empty="None yet: each model's cheapest measured configuration meeting the SLOs is "
        "listed here, one row per model.",
        quality=quality,
    )
    per_model.note = (
        "Each model's cheapest configuration: its capacity at the SLOs and the cost per 1M "
        "output tokens there, beside its best fixed load level's figures."
    )
    unpriced = choice_tables.choice_table(
        "unpriced",
        "Measured, but no level met the SLOs (or no price is known)",
        choice.unpriced[:CHOICE_TAIL_ROWS],
        run_href=href,
        first_rank=len(choice.measured) + 1,
        empty="None: every measured trial met the SLOs at a priced level."
        if choice.measured
        else "None: measured trials that meet no SLO, or have no price, are listed here.",
        quality=quality,
    )
    unpriced.note = _tail_note(len(choice.unpriced), f"The first {CHOICE_TAIL_ROWS}")
    simulated = choice_tables.choice_table(
        "simulated",
        "Simulated (not measurements, never recommended)",
        choice.simulated[:CHOICE_TAIL_ROWS],
        run_href=href,
        simulated=True,
        empty="No simulated trial: the simulator's predictions for this workload appear here.",
        quality=quality,
    )
    excluded = _excluded_table(choice.excluded_for_quality, choice.quality, href)
    simulated.note = _tail_note(len(choice.simulated), f"The {CHOICE_TAIL_ROWS} cheapest")
    return _report(
        request,
        membership,
        "frontend/reports/choice.html",
        [recommended, runners_up, per_model, excluded, unpriced, simulated],
        experiment=experiment,
        choice=choice,
        best_quality=choice.quality_of(choice.recommended) if choice.recommended else None,
        excluded=_with_reasons(choice.excluded_for_quality[:CHOICE_TAIL_ROWS], choice.quality),
        unjudged=_with_reasons(choice.quality_not_judged[:CHOICE_TAIL_ROWS], choice.quality),
        chart=choice_tables.capacity_chart_data([*choice.measured, *choice.simulated]),
        best=choice.recommended,
        best_config=(
            tables.config_text(choice.recommended.serve_config) if choice.recommended else ""
        ),
        best_capacity=(
            tables.capacity_text(choice.recommended.capacity) if choice.recommended else ""
        ),
        slos_text=tables.slos_text(experiment.slos or {}),
        others=[e for e in choice.comparable if e.id != experiment.id],
        headroom=[
            (tables.SLO_LABELS[metric], value)
            for metric, value in (
                choice.recommended.headroom_pct().items() if choice.recommended else []
            )
        ],
    )
