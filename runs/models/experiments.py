"""Experiments (what to measure) and the uploaded datasets their workloads may use."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone

from agents.protocol import TRACE_FORMATS
from runs.models.catalogue import GpuType, ModelSpec
from runs.models.endpoints import Endpoint
from runs.models.tenancy import Organization, User


class Engine(models.TextChoices):
    VLLM = "vllm"
    SIM = "sim"
    # An existing OpenAI-compatible deployment (``Experiment.endpoint``): nothing is started
    # or rented, one trial measures it as it is configured.
    ENDPOINT = "endpoint"


def engine_is_simulated(engine: str) -> bool:
    """The one rule for "simulated": the engine is the simulator, so its figures are not
    measurements and it rents no GPU (an experiment's engine, or a run's frozen one)."""
    return engine == Engine.SIM


class CloudType(models.TextChoices):
    SECURE = "secure"
    COMMUNITY = "community"


# What an uploaded file holds: ShareGPT conversations, or a request trace in one of the
# published formats the protocol names (a workload's dataset kind is its format).
SHAREGPT = "sharegpt"
_TRACE_LABELS = {
    "mooncake": "Mooncake trace (JSONL)",
    "burstgpt": "BurstGPT trace (CSV)",
    "azure": "Azure LLM inference trace (CSV)",
}
# Agentic sessions with their dependencies (agents.workloads.agentic): one request a line.
AGENTIC_TRACE = "agentic_trace"
DATASET_FORMAT_CHOICES = [
    (SHAREGPT, "ShareGPT conversations (JSON)"),
    *((name, _TRACE_LABELS[name]) for name in TRACE_FORMATS),  # a new format needs a label
    (AGENTIC_TRACE, "Agentic session file (JSONL)"),
]


class WorkloadDataset(models.Model):
    """A file uploaded by a tenant for workloads, checked on upload and kept exactly as
    uploaded: ShareGPT conversations (``num_conversations`` usable) or a request trace
    (``summary``: ``agents.workloads.summary.summarize_trace`` of it as uploaded)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="datasets"
    )
    name = models.CharField(max_length=200)
    file = models.FileField(upload_to="datasets/")
    sha256 = models.CharField(max_length=64)
    size_bytes = models.BigIntegerField()
    format = models.CharField(max_length=16, choices=DATASET_FORMAT_CHOICES, default=SHAREGPT)
    num_conversations = models.PositiveIntegerField(null=True, blank=True)  # ShareGPT only
    summary = models.JSONField(default=dict, blank=True)  # traces only
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "id"]
        constraints = [
            # A ShareGPT file has its conversation count, a trace its summary instead.
            models.CheckConstraint(
                condition=(
                    models.Q(format="sharegpt", num_conversations__isnull=False)
                    | (~models.Q(format="sharegpt") & models.Q(num_conversations__isnull=True))
                ),
                name="dataset_count_by_format",
            )
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_trace(self) -> bool:
        """Whether the file is a request trace (not ShareGPT conversations)."""
        return self.format != SHAREGPT


class Experiment(models.Model):
    """model × GPU type/count × engine × serve grid × workload × SLOs × budget cap.

    ``serve_grid``, ``workload`` and ``slos`` are stored as validated by ``agents.protocol``
    (schema version recorded), so the agent builds its arguments from exactly what was checked.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="experiments"
    )
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    model = models.ForeignKey(ModelSpec, on_delete=models.PROTECT, related_name="experiments")
    gpu_type = models.ForeignKey(GpuType, on_delete=models.PROTECT, related_name="+")
    gpu_count = models.PositiveSmallIntegerField(default=1)
    cloud_type = models.CharField(
        max_length=16, choices=CloudType.choices, default=CloudType.SECURE
    )
    # Where else the pod may go when the GPU type has no capacity (runs.placement): other
    # GPU types in order of preference, and whether the other cloud will do.
    fallback_gpu_types = models.JSONField(default=list, blank=True)
    allow_other_cloud = models.BooleanField(default=False)
    container_disk_gb = models.PositiveIntegerField(default=80)
    # A Runpod network volume that keeps downloaded weights between runs ("" = none); it
    # pins the pod to the volume's data centre.
    network_volume_id = models.CharField(max_length=64, blank=True)
    engine = models.CharField(max_length=8, choices=Engine.choices, default=Engine.VLLM)
    # The deployment measured, for engine ``endpoint`` only (None otherwise).
    endpoint = models.ForeignKey(
        Endpoint, on_delete=models.PROTECT, null=True, blank=True, related_name="experiments"
    )
    engine_image_tag = models.CharField(max_length=128, blank=True)
    # More vLLM images to measure the same grid on (vLLM version as an axis): a run's trials
    # are every tag × the grid, one pod per tag, ``engine_image_tag`` first.
    compare_image_tags = models.JSONField(default=list, blank=True)
    serve_grid = models.JSONField(default=dict, blank=True)  # {} = one trial, vLLM defaults
    # One more trial with vLLM's defaults, the baseline every answer is compared with.
    defaults_trial = models.BooleanField(default=False)
    serve_flags_schema_version = models.PositiveSmallIntegerField()
    # vLLM runs the model repository's own code (``--trust-remote-code``; its *.py files are
    # downloaded with the weights) in the organization's own pod. Audited whenever it changes
    # (``experiment.trust_remote_code``).
    trust_remote_code = models.BooleanField(default=False)
    # LoRA adapters served beside the model ([{name, hf_repo, revision}], checked by
    # ``agents.protocol.lora``): downloaded with the weights at their pinned revisions, and
    # each level's requests spread over them by the ``model`` field.
    lora_adapters = models.JSONField(default=list, blank=True)
    workload = models.JSONField()
    slos = models.JSONField(default=dict, blank=True)
    # How runs search the grid (runs.experiment_search.ExperimentSearch; {}: every trial).
    search = models.JSONField(default=dict, blank=True)
    # What the served configurations are scored on, and the quality they must keep
    # (runs.experiment_evaluation.ExperimentEvaluation; {}: no evaluation).
    evaluation = models.JSONField(default=dict, blank=True)
    budget_cap_usd = models.DecimalField(max_digits=10, decimal_places=2)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "name"], name="experiment_unique_name")
        ]
        indexes = [models.Index(fields=["organization", "-created_at", "-id"])]
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name

    @property
    def simulated(self) -> bool:
        """Whether runs of this experiment, as it is now, would be simulated."""
        return engine_is_simulated(self.engine)
