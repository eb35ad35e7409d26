"""Promotion of a trial to production, with approval: the list (current, pending,
decided), a proposal's page with its decision, proposing a trial.

Every page is an ``org_page``: proposing needs a member, deciding an owner or admin (403
otherwise); the self-approval rule and every other is ``runs.services.promotions``', which
also writes the audit trail. A refused proposal or decision keeps what was typed.
"""

from __future__ import annotations

from django.shortcuts import redirect, render
from django.urls import reverse

from frontend.org_pages import org_context, org_page
from frontend.reports.tables import config_text
from runs.access import Need, access_promotion, access_trial, scoped
from runs.actors import actor_from_request
from runs.errors import Conflict, DomainValidationError
from runs.models import Promotion, PromotionState
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


def _promotion_page(request, membership, promotion, *, error="", values=None, status=200):
    trial = promotion.trial
    context = org_context(
        membership,
        promotion=promotion,
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
        config_text=config_text(trial.serve_config),
        simulated=trial_is_simulated(trial),
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
