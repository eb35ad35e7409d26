"""Budgets: an organization's monthly spending cap, and caps on single experiments."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from runs.models.experiments import Experiment
from runs.models.tenancy import Organization


class Budget(models.Model):
    """A spending cap in USD.

    Three scopes, told apart by which of ``month``/``experiment`` is set:
    - neither: the organization's standing cap for every calendar month;
    - ``month`` (first day of a month): the cap for that month only, replacing the standing one;
    - ``experiment``: a cap on everything that experiment's runs spend, on top of the
      experiment's own ``budget_cap_usd`` (the lower one wins).
    """

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="budgets")
    month = models.DateField(null=True, blank=True)
    experiment = models.ForeignKey(
        Experiment, on_delete=models.CASCADE, null=True, blank=True, related_name="budgets"
    )
    limit_usd = models.DecimalField(max_digits=12, decimal_places=2)
    note = models.CharField(max_length=300, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(month__isnull=True) | Q(experiment__isnull=True),
                name="budget_one_scope",
            ),
            models.UniqueConstraint(
                fields=["organization"],
                condition=Q(month__isnull=True, experiment__isnull=True),
                name="budget_unique_standing",
            ),
            models.UniqueConstraint(
                fields=["organization", "month"],
                condition=Q(month__isnull=False),
                name="budget_unique_month",
            ),
            models.UniqueConstraint(
                fields=["organization", "experiment"],
                condition=Q(experiment__isnull=False),
                name="budget_unique_experiment",
            ),
        ]

    def __str__(self) -> str:
        if self.experiment_id:
            return f"budget for experiment {self.experiment_id}"
        return f"budget for {self.month:%Y-%m}" if self.month else "standing monthly budget"

    @property
    def scope(self) -> str:
        if self.experiment_id:
            return "experiment"
        return "month" if self.month else "standing"
