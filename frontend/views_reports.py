"""Pages for managers: cost and model-choice reports (printable, exportable as CSV),
promotion of a trial to production with approval, and the audit log viewer.

Like the API, these pages reach tenant rows only through ``runs.access`` (another
organization's row is a 404, a role that may not act a 403) and write only through
``runs.services.promotions``. Reports read through the selectors
(``runs.selectors.trial_figures`` and what ranks them); simulated figures are shown in
sections of their own and never ranked with measured ones.
"""

from __future__ import annotations

import json

from django.core.paginator import Paginator
from django.http import Http404, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from frontend import reports_tables as tables
from frontend.org_pages import org_context, org_page
from runs.access import Need, access_experiment, access_promotion, access_trial, scoped
from runs.actors import actor_from_request
from runs.audit import audit_chain_check
from runs.errors import Conflict, DomainValidationError
from runs.models import AuditEvent, Experiment, Promotion, PromotionState
from runs.selectors.audit_log import AuditFilter, audit_export, audit_filter_parse
from runs.selectors.audit_log import audit_log as audit_log_events
from runs.selectors.cost_rankings import best_configs, model_points
from runs.selectors.model_choice import model_choice
from runs.selectors.spend import spend_by_experiment, spend_by_month
from runs.selectors.trial_figures import trial_figures, trial_is_simulated
from runs.services.promotions import (
    MAX_TEXT_CHARS,
    promotion_approve,
    promotion_decision_refusal,
    promotion_is_own,
    promotion_propose,
    promotion_reject,
)

AUDIT_PAGE_SIZE = 50


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


# ---------------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------------


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
    measured = tables.cost_table(
        "measured",
        "Measured on real vLLM",
        best_configs(f for f in figures if not f.simulated),
        simulated=False,
        run_href=href,
    )
    measured.empty = "No measured trial yet."
    simulated = tables.cost_table(
        "simulated",
        "Simulated (not measurements)",
        best_configs(f for f in figures if f.simulated),
        simulated=True,
        run_href=href,
    )
    simulated.empty = "No simulated trial."
    simulated.note = (
        "The simulator's figures are in the modelled GPU's time, priced at its rate. They are "
        "never ranked with measured figures."
    )
    steady, amortized = "USD / 1M output tokens", "USD / 1M, cold start amortized"
    chart = [
        {
            "label": f"{measured.column(row, 'Model')} · {measured.column(row, 'GPUs')}",
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
    figures = trial_figures(org=membership.organization)
    measured_points = model_points(f for f in figures if not f.simulated)
    simulated_points = model_points(f for f in figures if f.simulated)
    measured = tables.model_table(
        "measured", "Measured on real vLLM", measured_points, simulated=False
    )
    measured.empty = "No model has a measured cost per token yet."
    simulated = tables.model_table(
        "simulated", "Simulated (not measurements)", simulated_points, simulated=True
    )
    simulated.empty = "No simulated figures."
    return _report(
        request,
        membership,
        "frontend/reports/models.html",
        [measured, simulated],
        chart=tables.model_chart_data(measured_points),
    )


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


@org_page()
def report_choice(request, membership, experiment_id):
    experiment = access_experiment(membership=membership, experiment_id=experiment_id)
    choice = model_choice(experiment=experiment)
    href = _run_href(membership.organization.slug)
    recommended = tables.choice_table(
        "recommended",
        "Recommended",
        choice.measured[:1],
        run_href=href,
        empty="No measured trial met the SLOs: nothing to recommend yet.",
    )
    runners_up = tables.choice_table(
        "runners-up", "Runners-up", choice.runners_up, run_href=href, first_rank=2
    )
    unpriced = tables.choice_table(
        "unpriced",
        "Measured, but no level met the SLOs (or no price is known)",
        choice.unpriced[:CHOICE_TAIL_ROWS],
        run_href=href,
        first_rank=len(choice.measured) + 1,
    )
    unpriced.note = _tail_note(len(choice.unpriced), f"The first {CHOICE_TAIL_ROWS}")
    simulated = tables.choice_table(
        "simulated",
        "Simulated (not measurements, never recommended)",
        choice.simulated[:CHOICE_TAIL_ROWS],
        run_href=href,
        simulated=True,
    )
    simulated.note = _tail_note(len(choice.simulated), f"The {CHOICE_TAIL_ROWS} cheapest")
    return _report(
        request,
        membership,
        "frontend/reports/choice.html",
        [recommended, runners_up, unpriced, simulated],
        experiment=experiment,
        choice=choice,
        best=choice.recommended,
        best_config=(
            tables.config_text(choice.recommended.serve_config) if choice.recommended else ""
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


# ---------------------------------------------------------------------------------------------
# Promotions
# ---------------------------------------------------------------------------------------------


@org_page()
def promotions_list(request, membership):
    promotions = (
        scoped(membership, Promotion)
        .select_related("experiment__model", "trial__run", "proposed_by", "decided_by")
        .order_by("-proposed_at", "-id")
    )
    current = [p for p in promotions if p.state == PromotionState.APPROVED]
    pending = [p for p in promotions if p.state == PromotionState.PROPOSED]
    history = [
        p for p in promotions if p.state not in (PromotionState.APPROVED, PromotionState.PROPOSED)
    ]
    return render(
        request,
        "frontend/reports/promotions.html",
        org_context(membership, current=current, pending=pending, history=history[:200]),
    )


def _promotion_page(request, membership, promotion, *, error="", values=None, status=200):
    trial = promotion.trial
    context = org_context(
        membership,
        promotion=promotion,
        trial=trial,
        run=trial.run,
        config_text=tables.config_text(trial.serve_config),
        may_decide=(
            promotion.state == PromotionState.PROPOSED
            and promotion_decision_refusal(membership=membership, promotion=promotion) is None
        ),
        own_proposal=promotion_is_own(membership=membership, promotion=promotion),
        error=error,
        values=values or {},
        max_chars=MAX_TEXT_CHARS,
        run_href=_run_href(membership.organization.slug)(_FigureLike(trial.run)),
    )
    return render(request, "frontend/reports/promotion_detail.html", context, status=status)


class _FigureLike:
    # _run_href takes a report figure; a promotion only has the run.
    def __init__(self, run):
        self.run_id = run.id


@org_page()
def promotion_detail(request, membership, promotion_id):
    promotion = access_promotion(membership=membership, promotion_id=promotion_id)
    return _promotion_page(request, membership, promotion)


def _errors_text(exc: DomainValidationError) -> str:
    return " ".join(" ".join(messages) for messages in exc.fields.values())


@org_page("GET", "POST", need=Need.WRITE)
def promotion_propose_page(request, membership, run_id, index: int):
    trial = access_trial(membership=membership, run_id=run_id, index=index)
    error, status = "", 200
    if request.method == "POST":
        note = request.POST.get("note", "")
        try:
            promotion = promotion_propose(
                membership=membership,
                actor=actor_from_request(request),
                trial=trial,
                note=note,
            )
        except DomainValidationError as exc:
            error, status = _errors_text(exc), 400
        except Conflict as exc:
            error, status = str(exc), 409
        else:
            return redirect("promotion-detail", membership.organization.slug, promotion.id)
    proposals = scoped(membership, Promotion).filter(trial=trial, state=PromotionState.PROPOSED)
    open_proposal = proposals.first()
    context = org_context(
        membership,
        trial=trial,
        run=trial.run,
        experiment=trial.run.experiment,
        config_text=tables.config_text(trial.serve_config),
        simulated=trial_is_simulated(trial),
        open_proposal=open_proposal,
        note=request.POST.get("note", ""),
        error=error,
        max_chars=MAX_TEXT_CHARS,
    )
    return render(request, "frontend/reports/propose.html", context, status=status)


def _decide(request, membership, promotion_id, service):
    promotion = access_promotion(membership=membership, promotion_id=promotion_id)
    comment = request.POST.get("comment", "")
    try:
        service(
            membership=membership,
            actor=actor_from_request(request),
            promotion=promotion,
            comment=comment,
        )
    except DomainValidationError as exc:
        return _promotion_page(
            request,
            membership,
            promotion,
            error=_errors_text(exc),
            values={"comment": comment},
            status=400,
        )
    except Conflict as exc:
        promotion.refresh_from_db()
        return _promotion_page(request, membership, promotion, error=str(exc), status=409)
    return redirect("promotion-detail", membership.organization.slug, promotion.id)


@org_page("POST", need=Need.MANAGE)
def promotion_approve_view(request, membership, promotion_id):
    return _decide(request, membership, promotion_id, promotion_approve)


@org_page("POST", need=Need.MANAGE)
def promotion_reject_view(request, membership, promotion_id):
    return _decide(request, membership, promotion_id, promotion_reject)


# ---------------------------------------------------------------------------------------------
# Audit log
# ---------------------------------------------------------------------------------------------


@org_page()
def audit_log(request, membership):
    organization = membership.organization
    errors: dict[str, str] = {}
    try:
        audit_query = audit_filter_parse(request.GET)
    except DomainValidationError as refusal:
        errors = {field: " ".join(messages) for field, messages in refusal.fields.items()}
        audit_query = AuditFilter()
    if request.GET.get("format") == "csv" and not errors:
        export = audit_export(org=organization, query=audit_query, file_format="csv")
        response = StreamingHttpResponse(export.chunks, content_type=export.content_type)
        response["Content-Disposition"] = f'attachment; filename="{export.filename}"'
        return response
    events = audit_log_events(org=organization, query=audit_query)
    page = Paginator(events, AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    query.pop("format", None)
    # Verified from the checkpoint on; older events by the periodic full verification, whose
    # break is shown here too (runs.audit says what this does and does not prove).
    chain = audit_chain_check(org=organization)
    rows = [
        {
            "event": event,
            "changes": _changes_text(event),
            "href": _audit_target_href(organization.slug, event),
        }
        for event in page.object_list
    ]
    context = org_context(
        membership,
        page=page,
        rows=rows,
        errors=errors,
        values={k: request.GET.get(k, "") for k in ("event", "actor", "target", "since", "until")},
        query=query.urlencode(),
        chain_break=chain.chain_break,
        chain_status=chain,
        chain_length=AuditEvent.objects.filter(organization=organization).count(),
        event_names=AuditEvent.objects.filter(organization=organization)
        .order_by("event")
        .values_list("event", flat=True)
        .distinct(),
    )
    return render(request, "frontend/reports/audit.html", context, status=400 if errors else 200)


def _short(value) -> str:
    # A summary for the table; the CSV export carries the whole before/after.
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:59] + "…"


def _changes_text(event: AuditEvent, shown: int = 6) -> str:
    after = event.after or {}
    before = event.before or {}
    keys = [k for k in dict.fromkeys([*before, *after]) if k != "id"]
    parts = []
    for key in keys[:shown]:
        if key in before and key in after:
            parts.append(f"{key}: {_short(before[key])} → {_short(after[key])}")
        elif key in after:
            parts.append(f"{key}: {_short(after[key])}")
        else:
            parts.append(f"{key}: {_short(before[key])} (removed)")
    if len(keys) > shown:
        parts.append(f"… {len(keys) - shown} more (in the CSV)")
    return "; ".join(parts)


def _audit_target_href(org_slug: str, event: AuditEvent) -> str | None:
    if event.target_type == "promotion":
        return reverse("promotion-detail", args=[org_slug, event.target_id])
    if event.target_type == "run":
        return reverse("run-detail", args=[org_slug, event.target_id])
    return None
