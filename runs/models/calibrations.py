"""The simulator's constants fitted to an organization's own measurements (docs/search.md,
"Calibrations"): one row per refit, for one model on one GPU type and vLLM version; the
newest row of a key is the one predictions use (``runs.selectors.calibrations``)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from runs.models.catalogue import GpuType, ModelSpec
from runs.models.runs import Run
from runs.models.tenancy import Organization


class Calibration(models.Model):
    """The step model's constants (``agents.hardware.Efficiency`` as a dict) fitted to the
    measured levels of ``runs``, with the fit's own mean absolute error before (the
    simulator's defaults) and after, over all and per metric; written by
    ``runs.services.calibrations`` only, after ``made_by`` succeeded."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    model = models.ForeignKey(ModelSpec, on_delete=models.CASCADE, related_name="+")
    gpu_type = models.ForeignKey(GpuType, on_delete=models.CASCADE, related_name="+")
    # The vLLM release its image tag names ("0.11.0"), or the tag where it names none.
    vllm_version = models.CharField(max_length=128)
    constants = models.JSONField()
    points = models.PositiveIntegerField()  # measured levels fitted
    error_before_pct = models.FloatField()
    error_after_pct = models.FloatField()
    # metric ("itl", "ttft", "throughput") → {"points", "before_pct", "after_pct"}
    metrics = models.JSONField(default=dict)
    runs = models.ManyToManyField(Run, related_name="+")
    # The run whose success refitted it: one calibration per run and key, however often the
    # refit task is delivered.
    made_by = models.ForeignKey(Run, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["made_by", "gpu_type", "vllm_version"], name="calibration_once_per_run"
            )
        ]
        indexes = [
            models.Index(
                fields=["organization", "model", "gpu_type", "vllm_version", "-created_at"],
                name="calibration_newest",
            )
        ]
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"calibration of {self.model_id} on {self.gpu_type_id} vLLM {self.vllm_version}"
