"""The only way to reach a tenant's rows.

Guarantees, for every caller (API views, web views, consumers):
- a row of another organization is answered exactly like a missing one (``Http404``);
- a token reaches only the organization it was issued for, whatever its user belongs to;
- a role that may not do something gets ``PermissionDenied`` (403), checked after tenancy so
  that a stranger cannot learn that a row exists.
Escape hatches that bypass these rules are named ``unscoped_*`` so they stand out in review.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import models
from django.http import Http404

from runs.errors import DomainValidationError
from runs.models import (
    ApiToken,
    Budget,
    Endpoint,
    EvaluationSet,
    Experiment,
    Membership,
    ModelSpec,
    NotificationHook,
    Promotion,
    Role,
    Run,
    Trial,
    User,
    WorkloadDataset,
)


class Need(enum.Enum):
    READ = "read"
    WRITE = "write"
    MANAGE = "manage"


@dataclass(frozen=True)
class Principal:
    """An authenticated user, restricted to one organization when they came with a token."""

    user: User
    token: ApiToken | None = None


def principal_from_request(request) -> Principal:
    token = request.auth if isinstance(getattr(request, "auth", None), ApiToken) else None
    return Principal(user=request.user, token=token)


_DENIED = {
    Need.WRITE: "Your role ({role}) can only read this organization's data.",
    Need.MANAGE: "Only owners and admins can do this; your role is {role}.",
}


def access_membership(*, principal: Principal, org_slug: str, need: Need = Need.READ) -> Membership:
    """The principal's membership of the organization ``org_slug``, checked for ``need``."""
    memberships = Membership.objects.select_related("organization", "user").filter(
        organization__slug=org_slug, user=principal.user, user__is_active=True
    )
    if principal.token is not None:
        memberships = memberships.filter(organization_id=principal.token.organization_id)
    membership = memberships.first()
    if membership is None:
        raise Http404("No such organization.")
    role = Role(membership.role)
    allowed = {Need.READ: True, Need.WRITE: role.can_write, Need.MANAGE: role.can_manage}[need]
    if not allowed:
        raise PermissionDenied(_DENIED[need].format(role=role.value))
    return membership


def principal_memberships(principal: Principal) -> models.QuerySet[Membership]:
    """The memberships a principal may act through (one, when it came with a token)."""
    memberships = Membership.objects.select_related("organization").filter(
        user=principal.user, user__is_active=True
    )
    if principal.token is not None:
        memberships = memberships.filter(organization_id=principal.token.organization_id)
    return memberships.order_by("organization__slug")


def scoped(membership: Membership, model: type[models.Model]) -> models.QuerySet:
    """Every row of ``model`` that belongs to the membership's organization."""
    return model.objects.filter(organization_id=membership.organization_id)


def _get_scoped(membership: Membership, model: type[models.Model], pk) -> models.Model:
    try:
        pk = model._meta.pk.to_python(pk)
    except ValidationError:
        raise Http404 from None  # a malformed id is as missing as any other
    row = scoped(membership, model).filter(pk=pk).first()
    if row is None:
        raise Http404
    return row


def access_model_spec(*, membership: Membership, model_id) -> ModelSpec:
    """One of the organization's registered models."""
    return _get_scoped(membership, ModelSpec, model_id)


def access_experiment(*, membership: Membership, experiment_id) -> Experiment:
    """One of the organization's experiments."""
    return _get_scoped(membership, Experiment, experiment_id)


def access_dataset(*, membership: Membership, dataset_id) -> WorkloadDataset:
    """One of the organization's uploaded datasets."""
    return _get_scoped(membership, WorkloadDataset, dataset_id)


def access_evaluation_set(*, membership: Membership, evaluation_set_id) -> EvaluationSet:
    """One of the organization's uploaded evaluation sets."""
    return _get_scoped(membership, EvaluationSet, evaluation_set_id)


def access_run_evaluation_set(*, run: Run, evaluation_set_id) -> EvaluationSet:
    """The uploaded evaluation set ``run``'s frozen job names, for the run's agent (its
    token is the run's, not a member's). Any other set, of the organization or not,
    existing or not, is ``Http404`` alike."""
    named = (run.job_spec.get("evaluation") or {}).get("set_id")
    if named is None or str(named) != str(evaluation_set_id):
        raise Http404
    found = EvaluationSet.objects.filter(organization_id=run.organization_id, pk=named).first()
    if found is None:
        raise Http404
    return found


def access_token(*, membership: Membership, token_id) -> ApiToken:
    """One of the organization's API tokens."""
    return _get_scoped(membership, ApiToken, token_id)


def access_budget(*, membership: Membership, budget_id) -> Budget:
    """One of the organization's budgets."""
    return _get_scoped(membership, Budget, budget_id)


def access_endpoint(*, membership: Membership, endpoint_id) -> Endpoint:
    """One of the organization's existing endpoints."""
    return _get_scoped(membership, Endpoint, endpoint_id)


def access_notification_hook(*, membership: Membership, hook_id) -> NotificationHook:
    """One of the organization's notification hooks."""
    return _get_scoped(membership, NotificationHook, hook_id)


def access_member(*, membership: Membership, member_id) -> Membership:
    """Another membership of the same organization."""
    return _get_scoped(membership, Membership, member_id)


# The shortest id prefix a run is found by: the site shows eight hex digits of a run's id.
RUN_ID_PREFIX_MIN = 4


def run_id_prefix_bounds(text: str) -> tuple[uuid.UUID, uuid.UUID] | None:
    """The lowest and highest id starting with ``text`` when it is a prefix of a run's id
    (hex digits, hyphens as in the id, at least ``RUN_ID_PREFIX_MIN`` digits, fewer than a
    whole id); None for anything else (a whole id, or no id at all)."""
    digits = text.replace("-", "").lower()
    if not RUN_ID_PREFIX_MIN <= len(digits) < 32 or digits.strip("0123456789abcdef"):
        return None
    return uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))


def access_run(*, membership: Membership, run_id) -> Run:
    """One of the organization's runs, by its id or by a prefix of it that no other run of
    the organization shares (the eight hex digits the site shows). A prefix that several
    of its runs share is a ``DomainValidationError`` on ``run`` (400), naming how many."""
    bounds = run_id_prefix_bounds(str(run_id))
    if bounds is None:
        return _get_scoped(membership, Run, run_id)
    # Ids are compared as UUIDs: every database orders them as their hex digits.
    found = list(scoped(membership, Run).filter(pk__gte=bounds[0], pk__lte=bounds[1])[:2])
    if not found:
        raise Http404
    if len(found) > 1:
        many = scoped(membership, Run).filter(pk__gte=bounds[0], pk__lte=bounds[1]).count()
        raise DomainValidationError.single(
            "run", f"The id prefix {run_id!r} matches {many} runs; give more of the id."
        )
    return found[0]


def access_run_of_user(*, principal: Principal, run_id) -> Run:
    """A run of any organization the principal belongs to (for the live page, whose URL
    names only the run)."""
    try:
        run_id = Run._meta.pk.to_python(run_id)
    except ValidationError:
        raise Http404 from None
    organizations = principal_memberships(principal).values("organization_id")
    run = Run.objects.filter(pk=run_id, organization_id__in=organizations).first()
    if run is None:
        raise Http404
    return run


def access_trial(*, membership: Membership, run_id, index) -> Trial:
    """Trial ``index`` of one of the organization's runs."""
    run = access_run(membership=membership, run_id=run_id)
    trial = scoped(membership, Trial).filter(run=run, index=index).select_related("run").first()
    if trial is None:
        raise Http404
    return trial


def access_promotion(*, membership: Membership, promotion_id) -> Promotion:
    """One of the organization's promotions."""
    return _get_scoped(membership, Promotion, promotion_id)
