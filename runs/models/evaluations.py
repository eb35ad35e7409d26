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
