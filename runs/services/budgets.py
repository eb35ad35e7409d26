"""Budgets: the organization's monthly caps and per-experiment caps."""

from __future__ import annotations

import datetime
from decimal import Decimal

from django.db import transaction

from runs.actors import Actor
from runs.errors import DomainValidationError
from runs.models import Budget, Experiment, Organization
from runs.services.audited_writes import create_recorded, delete_recorded, update_recorded


@transaction.atomic
def budget_set(
    *,
    org: Organization,
    actor: Actor,
    limit_usd: Decimal,
    month: datetime.date | None = None,
    experiment: Experiment | None = None,
    note: str = "",
) -> Budget:
    """Creates or replaces the cap of one scope: standing monthly (neither ``month`` nor
    ``experiment``), one month, or one experiment."""
    errors: dict[str, list[str]] = {}
    if month is not None and experiment is not None:
        errors["month"] = ["A budget is for a month or for an experiment, not both."]
    if month is not None and month.day != 1:
        errors["month"] = ["Give the first day of the month (YYYY-MM-01)."]
    if experiment is not None and experiment.organization_id != org.id:
        errors["experiment"] = ["No such experiment in this organization."]
    if limit_usd is None or limit_usd < 0:
        errors["limit_usd"] = ["Must be zero or more."]
    if errors:
        raise DomainValidationError(errors)
    existing = (
        Budget.objects.select_for_update()
        .filter(organization=org, month=month, experiment=experiment)
        .first()
    )
    if existing is None:
        budget = Budget(
            organization=org, month=month, experiment=experiment, limit_usd=limit_usd, note=note
        )
        return create_recorded(instance=budget, actor=actor, event="budget.set")
    return update_recorded(
        instance=existing,
        changes={"limit_usd": limit_usd, "note": note},
        actor=actor,
        event="budget.set",
    )


@transaction.atomic
def budget_delete(*, budget: Budget, actor: Actor) -> None:
    """Removes a cap."""
    delete_recorded(instance=budget, actor=actor, event="budget.delete")
