"""Promotion of a trial to production, with approval: the list (current, pending,
decided), a proposal's page with its decision, proposing a trial.

Both the propose page and a proposal's page show the run's answer
(``runs.selectors.run_answer``) for the trial: its capacity at the SLOs, the cost per 1M
output tokens there and its margin. Proposing from a run (no trial named) pre-selects the
answer's winner; the page lets the proposer pick another of the run's trials.

Every page is an ``org_page``: proposing needs a member, deciding an owner or admin (403
otherwise); the self-approval rule and every other is ``runs.services.promotions``', which
also writes the audit trail. A refused proposal or decision keeps what was typed.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse

from frontend.org_pages import org_context, org_page
from frontend.reports.tables import capacity_text, config_text
from runs.access import Need, access_promotion, access_run, access_trial, scoped
from runs.actors import actor_from_request
from runs.errors import Conflict, DomainValidationError
from runs.models import Promotion, PromotionState, Trial
from runs.selectors.run_answer import (
    ConfigAnswer,
    Margin,
    RunAnswer,
    cost_margin,
    run_answer,
)
from runs.selectors.trial_figures import trial_is_simulated
from runs.services.promotions import (
    MAX_TEXT_CHARS,
    promotion_approve,
    promotion_decision_refusal,
    promotion_is_own,
    promotion_propose,
    promotion_reject,
)


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
        "frontend/promotions/list.html",
        org_context(membership, current=current, pending=pending, history=history[:200]),
    )


@dataclass(frozen=True)
class TrialAnswer:
    """One trial's figures in its run's answer, for a promotion's pages."""

    answer: RunAnswer
    config: ConfigAnswer | None  # this trial's capacity and cost there
    is_winner: bool
    # The winner: its margin over the runner-up; another trial: the winner's over it.
    margin: Margin | None
    capacity_text: str


def trial_answer(answer: RunAnswer, index: int) -> TrialAnswer:
    """What ``answer`` says of trial ``index``."""
    config = next((c for c in answer.configs if c.trial == index), None)
    winner = answer.winner
    is_winner = winner is not None and winner.trial == index
    if is_winner:
        margin = (
            None
            if answer.margin_pct is None
            else Margin(answer.margin_pct, answer.margin_ci95_pct, answer.tie)
        )
    else:
        margin = None if winner is None or config is None else cost_margin(winner, config)
    capacity = None if config is None else vars(config)
    return TrialAnswer(
        answer=answer,
        config=config,
        is_winner=is_winner,
        margin=margin,
        capacity_text=capacity_text(capacity),
    )


def _promotion_page(request, membership, promotion, *, error="", values=None, status=200):
    trial = promotion.trial
    context = org_context(
        membership,
        promotion=promotion,
        figures=trial_answer(run_answer(run=trial.run), trial.index),
        trial=trial,
        run=trial.run,
        config_text=config_text(trial.serve_config),
        may_decide=(
            promotion.state == PromotionState.PROPOSED
            and promotion_decision_refusal(membership=membership, promotion=promotion) is None
        ),
        own_proposal=promotion_is_own(membership=membership, promotion=promotion),
        error=error,
        values=values or {},
        max_chars=MAX_TEXT_CHARS,
        run_href=reverse("run-detail", args=[membership.organization.slug, trial.run_id]),
    )
    return render(request, "frontend/promotions/detail.html", context, status=status)


@org_page()
def promotion_detail(request, membership, promotion_id):
    promotion = access_promotion(membership=membership, promotion_id=promotion_id)
    return _promotion_page(request, membership, promotion)


def _errors_text(exc: DomainValidationError) -> str:
    return " ".join(" ".join(messages) for messages in exc.fields.values())


@org_page("GET", "POST", need=Need.WRITE)
def promotion_propose_page(request, membership, run_id, index: int | None = None):
    """Proposes a trial of a run: the one named, else the run's answer's winner (a run whose
    answer names none pre-selects its first trial); the form may pick another."""
    run = access_run(membership=membership, run_id=run_id)
    answer = run_answer(run=run)
    chosen = request.POST.get("trial") if request.method == "POST" else None
    if chosen is not None:
        try:
            index = int(chosen)
        except ValueError:
            raise Http404 from None
    elif index is None and answer.winner is not None:
        index = answer.winner.trial
    elif index is None:
        first = scoped(membership, Trial).filter(run=run).order_by("index").first()
        if first is None:
            raise Http404("This run has no trial to propose.")
        index = first.index
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
    choices = [
        (t.index, config_text(t.serve_config), trial_answer(answer, t.index))
        for t in scoped(membership, Trial).filter(run=run).order_by("index")
    ]
    context = org_context(
        membership,
        trial=trial,
        run=trial.run,
        experiment=trial.run.experiment,
        config_text=config_text(trial.serve_config),
        simulated=trial_is_simulated(trial),
        figures=trial_answer(answer, trial.index),
        choices=choices,
        open_proposal=open_proposal,
        note=request.POST.get("note", ""),
        error=error,
        max_chars=MAX_TEXT_CHARS,
    )
    return render(request, "frontend/promotions/propose.html", context, status=status)


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
