"""What an ended trial's levels give, whatever the price: kept so a report reads one row per
trial instead of every level of every trial (``runs.selectors.level_figures``)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from runs.models.runs import Trial
from runs.models.tenancy import Organization


class TrialLevelFigures(models.Model):
    """The price-independent figures of one succeeded trial of an ended run.

    Derived only from the trial's levels, which never change once its run has ended (ingest
    refuses every message then). ``rules`` is the version of the rules that derived them
    (``runs.selectors.level_figures.FIGURES_RULES``): a row of other rules is never read, only
    computed again. Everything else a figure needs — price, cold start, engine, SLOs — is
    read afresh by each report.
    """

    # Always the trial's organization (set by ``runs.services.level_figures``).
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    trial = models.OneToOneField(
        Trial, on_delete=models.CASCADE, primary_key=True, related_name="level_figures"
    )
    rules = models.PositiveSmallIntegerField()
    # The levels that decide the cost (the chosen one, and one of each other kind of load)
    # cut down to what a report reads; the loads that met the SLOs; any level simulated.
    deciding_levels = models.JSONField()
    qualifying = models.JSONField()
    levels_simulated = models.BooleanField()
    computed_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"level figures of trial {self.trial_id}"
