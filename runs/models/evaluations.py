"""Evaluation sets: the items an experiment's configurations are scored on (issue 38)."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone

from runs.models.tenancy import Organization, User


class EvaluationSet(models.Model):
    """A JSONL evaluation set uploaded by a tenant, checked on upload by the agent's own
    parser (``agents.evaluation.parse_evaluation_set``) and kept exactly as uploaded;
    ``summary`` is ``EvaluationSet.summary()`` of it (items, scorers, whether a judge is
    needed)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="evaluation_sets"
    )
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    file = models.FileField(upload_to="evaluations/")
    sha256 = models.CharField(max_length=64)
    size_bytes = models.BigIntegerField()
    items = models.PositiveIntegerField()
    needs_judge = models.BooleanField(default=False)
    summary = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "id"]

    def __str__(self) -> str:
        return self.name


class TrialEvaluation(models.Model):
    """A trial's score on its run's evaluation, measured on its served configuration after
    its load levels (``protocol.EvaluationReport``): the mean over the scored items with its
    95 % Wilson interval (null when nothing was scored), the counts, and every item's
    outcome by id (``outcomes``: id → score, output cut short, the whole output's digest,
    latency, error). One per trial: a resent or repeated report updates it in place."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    trial = models.OneToOneField(
        "runs.Trial", on_delete=models.CASCADE, related_name="evaluation_result"
    )
    score = models.FloatField(null=True, blank=True)
    score_low = models.FloatField(null=True, blank=True)
    score_high = models.FloatField(null=True, blank=True)
    items = models.PositiveIntegerField(default=0)
    scored = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    unscored = models.PositiveIntegerField(default=0)
    seconds = models.FloatField(default=0.0)
    outcomes = models.JSONField(default=dict, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"evaluation of trial {self.trial_id}"
