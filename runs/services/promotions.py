"""Promoting a trial to production: propose, then approve or reject.

Guarantees:
- A member, admin or owner may propose a trial of their organization that succeeded on real
  vLLM (a simulated trial is not a measurement); a viewer may not (``PermissionDenied``).
  A sandbox organization (``Organization.sandbox``, the demo's) may also propose a simulated
  trial: the promotion is then ``simulated`` for good, and says so wherever it is named.
- A configuration its run's answer excluded for quality (below the run's quality floor,
  ``runs.selectors.run_answer``) is neither proposed nor approved: ``DomainValidationError``
  on ``trial`` with the answer's reason. There is no override: the floor is the
  experiment's, frozen with each run; a team that wants another floor sets it and runs again.
- A refused proposal writes nothing: no promotion, no audit row, no notification.
- Only an owner or admin may decide, and never on their own proposal (``PermissionDenied``).
- A proposal is decided once: the decision is a conditional UPDATE from ``proposed``, so two
  people deciding at once cannot both win; the loser gets ``Conflict`` and nothing is written.
- At most one promotion per experiment is approved at a time. Approving another supersedes
  the previous one in the same transaction (a partial unique index backs this up).
- Every step writes its audit event (``promotion.propose``, ``promotion.approve``,
  ``promotion.reject``, ``promotion.supersede``) in the transaction of the change.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from agents.protocol import ServeGridError
from runs.actors import Actor
from runs.audit import audit_record, audit_snapshot
from runs.errors import Conflict, DomainValidationError
from runs.models import (
    Experiment,
    Membership,
    NotificationEvent,
    Promotion,
    PromotionState,
    Role,
    Trial,
)
from runs.models.runs import TrialOutcome
from runs.recipes import trial_recipe
from runs.selectors.run_answer import run_answer
from runs.selectors.trial_figures import trial_is_simulated
from runs.selectors.trial_quality import quality_floor_text
from runs.services.notifications.events import notify_promotion
from runs.services.text_input import clean_short_text

MAX_TEXT_CHARS = 2000
SIMULATED_REFUSAL = (
    "This trial ran on the simulator: its figures are not measurements. Promote a trial "
    "measured on real vLLM (only a sandbox organization, such as the demo's, may promote a "
    "simulated one)."
)


def _quality_check(trial: Trial) -> None:
    """Refuses a configuration its run's answer excluded for quality (module docstring)."""
    answer = run_answer(run=trial.run)
    reason = next(
        (x["reason"] for x in answer.excluded_for_quality if x["trial"] == trial.index), None
    )
    if reason is not None:
        raise DomainValidationError.single(
            "trial",
            f"Excluded for quality by its run's answer: {reason} (the run's quality floor: "
            f"{quality_floor_text(answer.quality_floor)}). Promote a configuration that keeps "
            "the floor.",
        )


def _same_org(membership: Membership, org_id) -> None:
    # Callers reach rows through runs.access; this keeps a slip from crossing tenants.
    if membership.organization_id != org_id:
        raise PermissionDenied("Not a member of this organization.")


@transaction.atomic
def promotion_propose(
    *, membership: Membership, actor: Actor, trial: Trial, note: str = ""
) -> Promotion:
    """Proposes ``trial``'s serve configuration as its experiment's production config."""
    _same_org(membership, trial.run.organization_id)
    if not Role(membership.role).can_write:
        raise PermissionDenied(f"Your role ({membership.role}) cannot propose a promotion.")
    note = clean_short_text(note, field="note", max_chars=MAX_TEXT_CHARS)
    run = trial.run
    if trial.outcome != TrialOutcome.SUCCEEDED:
        raise DomainValidationError.single(
            "trial", f"Only a trial that succeeded can be promoted; this one is {trial.outcome}."
        )
    simulated = trial_is_simulated(trial)
    if simulated and not run.organization.sandbox:
        raise DomainValidationError.single("trial", SIMULATED_REFUSAL)
    _quality_check(trial)
    try:
        recipe = trial_recipe(trial=trial)
    except ServeGridError as exc:
        raise DomainValidationError.single(
            "trial", f"Its serve configuration no longer renders: {exc}"
        ) from None
    # Serialises proposals and decisions of one experiment (see promotion_approve).
    Experiment.objects.select_for_update().filter(pk=run.experiment_id).first()
    if Promotion.objects.filter(trial=trial, state=PromotionState.PROPOSED).exists():
        raise Conflict("This trial already has an open proposal.")
    promotion = Promotion.objects.create(
        organization_id=run.organization_id,
        experiment_id=run.experiment_id,
        trial=trial,
        note=note,
        recipe=recipe,
        simulated=simulated,
        proposed_by=actor.user,
    )
    audit_record(
        org=run.organization,
        actor=actor,
        event="promotion.propose",
        target=promotion,
        after=audit_snapshot(promotion),
    )
    notify_promotion(promotion, NotificationEvent.PROMOTION_PROPOSED)
    return promotion


def promotion_is_own(*, membership: Membership, promotion: Promotion) -> bool:
    """Whether ``membership``'s user proposed ``promotion``: the self-approval rule, nobody
    decides on their own proposal. A proposal whose proposer is gone is nobody's own."""
    return promotion.proposed_by_id is not None and promotion.proposed_by_id == membership.user_id


def promotion_decision_refusal(*, membership: Membership, promotion: Promotion) -> str | None:
    """Why ``membership`` may not decide on ``promotion`` (its role, or its own proposal);
    None when they may. Whether it is still open is settled when deciding (``Conflict``)."""
    if not Role(membership.role).can_manage:
        return f"Only owners and admins can decide on a promotion; your role is {membership.role}."
    if promotion_is_own(membership=membership, promotion=promotion):
        return "You proposed this promotion: another owner or admin must decide on it."
    return None


def _may_decide(membership: Membership, promotion: Promotion) -> None:
    _same_org(membership, promotion.organization_id)
    refusal = promotion_decision_refusal(membership=membership, promotion=promotion)
    if refusal is not None:
        raise PermissionDenied(refusal)


def _decide(
    *, membership: Membership, actor: Actor, promotion: Promotion, state: str, comment: str
) -> Promotion:
    _may_decide(membership, promotion)
    comment = clean_short_text(comment, field="comment", max_chars=MAX_TEXT_CHARS)
    if state == PromotionState.REJECTED and not comment:
        raise DomainValidationError.single("comment", "Say why the proposal is rejected.")
    Experiment.objects.select_for_update().filter(pk=promotion.experiment_id).first()
    if state == PromotionState.APPROVED:
        # A trial scored after it was proposed may have moved a relative floor's best.
        _quality_check(promotion.trial)
    now = timezone.now()
    superseded = None
    if state == PromotionState.APPROVED:
        superseded = (
            Promotion.objects.select_for_update()
            .filter(experiment_id=promotion.experiment_id, state=PromotionState.APPROVED)
            .first()
        )
        if superseded is not None and superseded.pk != promotion.pk:
            Promotion.objects.filter(pk=superseded.pk, state=PromotionState.APPROVED).update(
                state=PromotionState.SUPERSEDED, superseded_by=promotion, superseded_at=now
            )
    decided = Promotion.objects.filter(pk=promotion.pk, state=PromotionState.PROPOSED).update(
        state=state, decided_by=actor.user, decided_at=now, decision_comment=comment
    )
    if decided != 1:
        # Someone decided first: roll the supersede back with everything else.
        current = Promotion.objects.get(pk=promotion.pk).state
        raise Conflict(f"This proposal has already been decided ({current}).")
    promotion.refresh_from_db()
    org = promotion.organization
    if superseded is not None and superseded.pk != promotion.pk:
        audit_record(
            org=org,
            actor=actor,
            event="promotion.supersede",
            target=superseded,
            before={"state": PromotionState.APPROVED},
            after={
                "state": PromotionState.SUPERSEDED,
                "superseded_by": str(promotion.pk),
                "superseded_at": now.isoformat(),
            },
        )
    audit_record(
        org=org,
        actor=actor,
        event=f"promotion.{'approve' if state == PromotionState.APPROVED else 'reject'}",
        target=promotion,
        before={"state": PromotionState.PROPOSED},
        after={
            **({"simulated": True} if promotion.simulated else {}),
            "state": state,
            "decided_by": actor.label,
            "decided_at": now.isoformat(),
            "decision_comment": comment,
        },
    )
    if state == PromotionState.APPROVED:
        notify_promotion(promotion, NotificationEvent.PROMOTION_APPROVED)
    return promotion


@transaction.atomic
def promotion_approve(
    *, membership: Membership, actor: Actor, promotion: Promotion, comment: str = ""
) -> Promotion:
    """Approves a proposal; the experiment's previously approved promotion is superseded."""
    return _decide(
        membership=membership,
        actor=actor,
        promotion=promotion,
        state=PromotionState.APPROVED,
        comment=comment,
    )


@transaction.atomic
def promotion_reject(
    *, membership: Membership, actor: Actor, promotion: Promotion, comment: str
) -> Promotion:
    """Rejects a proposal; a comment saying why is required."""
    return _decide(
        membership=membership,
        actor=actor,
        promotion=promotion,
        state=PromotionState.REJECTED,
        comment=comment,
    )
