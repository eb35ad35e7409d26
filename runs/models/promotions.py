"""Promotions: a trial proposed as an experiment's production configuration, and the
decision on it by an owner or admin other than the proposer."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.utils import timezone

from runs.models.experiments import Experiment
from runs.models.runs import Trial
from runs.models.tenancy import Organization, User


class PromotionState(models.TextChoices):
    PROPOSED = "proposed"
    APPROVED = "approved"
    REJECTED = "rejected"
    # Was approved; a later approval for the same experiment took its place.
    SUPERSEDED = "superseded"


class Promotion(models.Model):
    """One proposal to run ``trial``'s serve configuration in production.

    ``recipe`` is frozen when the proposal is made (the ``vllm serve`` command, the
    ``docker run`` line and the pod settings), so the approver decides on exactly what will be
    deployed, whatever is edited later. ``simulated`` is frozen with it: the trial ran on the
    simulator, which only a sandbox organization may promote, and every page, API answer,
    CLI line, notification and audit row naming the promotion says so. At most one promotion
    per experiment is approved at a time (a partial unique index, not only the service's word
    for it).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="promotions"
    )
    experiment = models.ForeignKey(Experiment, on_delete=models.PROTECT, related_name="promotions")
    trial = models.ForeignKey(Trial, on_delete=models.PROTECT, related_name="promotions")
    state = models.CharField(
        max_length=16, choices=PromotionState.choices, default=PromotionState.PROPOSED
    )
    note = models.TextField(max_length=2000, blank=True)
    recipe = models.JSONField(default=dict)
    simulated = models.BooleanField(default=False)
    proposed_by = models.ForeignKey(
        User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    proposed_at = models.DateTimeField(default=timezone.now)
    decided_by = models.ForeignKey(
        User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_comment = models.TextField(max_length=2000, blank=True)
    superseded_by = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    superseded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["experiment"],
                condition=Q(state="approved"),
                name="promotion_one_approved_per_experiment",
            ),
            # Proposing the same trial twice while the first proposal is open adds nothing.
            models.UniqueConstraint(
                fields=["trial"],
                condition=Q(state="proposed"),
                name="promotion_one_open_proposal_per_trial",
            ),
        ]
        indexes = [models.Index(fields=["organization", "-proposed_at"])]
        ordering = ["-proposed_at", "-id"]

    def __str__(self) -> str:
        kind = "simulated promotion" if self.simulated else "promotion"
        return f"{kind} of trial {self.trial.index} of run {self.trial.run_id}"
