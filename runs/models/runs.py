"""Runs of experiments, their trials (one serve config each) and measurements (one load
level each). Orchestration fills these in; this module only fixes their shape."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.utils import timezone

from figures.levels import level_name
from runs.models.experiments import Experiment
from runs.models.tenancy import Organization, User
from runs.providers.base import pod_name


class RunState(models.TextChoices):
    QUEUED = "queued"
    PROVISIONING = "provisioning"
    STARTING = "starting"
    BENCHMARKING = "benchmarking"
    FINALIZING = "finalizing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    OVER_BUDGET = "over_budget"


TERMINAL_RUN_STATES = frozenset(
    {RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED, RunState.OVER_BUDGET}
)


class RunTrigger(models.TextChoices):
    UI = "ui"
    API = "api"
    CI = "ci"
    SCHEDULE = "schedule"  # started as the schedule's owner (runs.services.schedules)


class Run(models.Model):
    """One execution of an experiment: a state machine plus what it rented and what it cost."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="runs")
    experiment = models.ForeignKey(Experiment, on_delete=models.PROTECT, related_name="runs")
    state = models.CharField(max_length=16, choices=RunState.choices, default=RunState.QUEUED)
    started_by = models.ForeignKey(
        User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    trigger = models.CharField(max_length=8, choices=RunTrigger.choices, default=RunTrigger.API)
    reason = models.CharField(max_length=500, blank=True)
    # What the run was started with, so later edits of its experiment change nothing it
    # does or shows (read through runs.run_as_started): the agent's job less its per-attempt
    # parts, and beside it the experiment's facts that are not the agent's (name, budget
    # cap, cloud and placement choices, the estimate).
    job_spec = models.JSONField(default=dict)
    experiment_snapshot = models.JSONField(default=dict)
    provider = models.CharField(max_length=32, blank=True)
    pod_id = models.CharField(max_length=100, blank=True)
    # Where the pod landed: the experiment's GPU type and cloud, or a fallback it allows.
    pod_gpu_type = models.CharField(max_length=100, blank=True)
    pod_cloud_type = models.CharField(max_length=16, blank=True)
    # The image the current pod runs (a run over several image tags has one pod per tag).
    pod_image_tag = models.CharField(max_length=128, blank=True)
    price_usd_hr = models.DecimalField(max_digits=10, decimal_places=4, null=True, blank=True)
    # The rented pod's lifetime: billing runs from its creation to its termination.
    pod_started_at = models.DateTimeField(null=True, blank=True)
    # When the provider was first seen to report the pod running (its container started):
    # by the create's own answer, else by a reconcile pass (whose period bounds the error).
    pod_running_at = models.DateTimeField(null=True, blank=True)
    pod_terminated_at = models.DateTimeField(null=True, blank=True)
    # Why the site cannot reach its unreleased pod to terminate it (the organization's Runpod
    # key is gone, unreadable or refused), for the operator; empty while it can
    # (``runs.services.reconcile``).
    pod_unreachable = models.TextField(blank=True)
    # How the pod got the model's weights (the agent's ``weights_downloaded`` phase: bytes,
    # seconds, MB/s, cached); empty until reported, and for runs that fetch none.
    weights_fetch = models.JSONField(default=dict, blank=True)
    # What the run's search made of its grid (the agent's ``search_finished``: every trial's
    # fate, the winner, the pod seconds spent, the calibration); empty without a search.
    # A run over several images searches each image's trials on its pod: one entry per pod,
    # keyed by its image tag ("" for the simulator's or a single image).
    search = models.JSONField(default=dict, blank=True)
    billed_seconds = models.FloatField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    run_token_hash = models.CharField(max_length=64, blank=True)
    lease_owner = models.CharField(max_length=100, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    failure_reason = models.TextField(blank=True)
    # Set once, by the first cancel request: a queued run ends at once, any other when its
    # agent reports that it stopped (runs.services.run_control).
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_reason = models.CharField(max_length=500, blank=True)
    agent_info = models.JSONField(default=dict, blank=True)  # the agent's hello: version, host
    # The last sequence space issued to an agent of this run (each agent start without its
    # spool asks for the next one); 0 is the space of agents that never asked (protocol 1).
    agent_epoch = models.PositiveIntegerField(default=0)
    # Resume (runs.services.run_resume): how often the run moved to a new pod after losing
    # one; messages of epochs below ``epoch_floor`` (the lost pod's agents) are refused; the
    # earlier pods (id, where, lifetime, billed seconds and cost, why) and what they cost.
    resumes = models.PositiveSmallIntegerField(default=0)
    # How many pods the run has left behind (resumes and moves to its next image tag): the
    # current pod's idempotency name counts them.
    pod_attempt = models.PositiveSmallIntegerField(default=0)
    epoch_floor = models.PositiveIntegerField(default=0)
    pod_history = models.JSONField(default=list, blank=True)
    earlier_pods_seconds = models.FloatField(default=0)
    earlier_pods_cost_usd = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    # Messages refused because their (epoch, seq) was stored before with other content: a
    # forger with the run token, or an agent that reused its numbers. Shown with the run.
    agent_conflicts = models.PositiveIntegerField(default=0)
    agent_conflict_last = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["organization", "-created_at"]),
            models.Index(fields=["state"]),
        ]
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"run {self.id}"

    @property
    def pod_name(self) -> str:
        """The idempotency name of this run's current pod (``runs.providers.base.pod_name``);
        looked up before any pod is rented."""
        return pod_name(self.id, self.pod_attempt)


class TrialOutcome(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    # Stopped from outside (cancel, deadline, the run's end) after measuring some levels:
    # those levels are real measurements, the rest were never run.
    PARTIAL = "partial"
    SKIPPED = "skipped"


# Trials not ended yet: a resumed run's next pod runs them (from their start).
UNFINISHED_OUTCOMES = frozenset({TrialOutcome.PENDING, TrialOutcome.RUNNING})

# Trials whose levels count in reports and costs: all of them measured, or some before the
# trial was cut short (a failed trial's levels are the failure's, not the config's).
MEASURED_OUTCOMES = frozenset({TrialOutcome.SUCCEEDED, TrialOutcome.PARTIAL})


class FailureClass(models.TextChoices):
    OOM_AT_STARTUP = "oom_at_startup"
    KV_CACHE_TOO_SMALL = "kv_cache_too_small"
    UNSUPPORTED_FLAG = "unsupported_flag"
    MODEL_NOT_FOUND = "model_not_found"
    MODEL_ACCESS_DENIED = "model_access_denied"
    DISK_TOO_SMALL = "disk_too_small"
    STARTUP_TIMEOUT = "startup_timeout"
    CRASH = "crash"
    DEADLINE = "deadline"
    # agents.protocol.CUDA_DRIVER_TOO_OLD: the image's CUDA needs a newer driver than the pod's.
    CUDA_DRIVER_TOO_OLD = "cuda_driver_too_old"
    OTHER = "other"


class Trial(models.Model):
    """One serve configuration inside a run, with its exact command and cold-start record."""

    # Always the run's organization (set by the services that create trials): tenant reads
    # filter by it without joining the run.
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="trials")
    index = models.PositiveIntegerField()
    serve_config = models.JSONField()
    # The vLLM image it ran on ("" for the simulator): a run may measure its grid on several.
    image_tag = models.CharField(max_length=128, blank=True)
    command = models.JSONField(default=list)  # argv, never a shell string
    cold_start = models.JSONField(default=dict)  # phase name → seconds (absent when unseen)
    outcome = models.CharField(
        max_length=16, choices=TrialOutcome.choices, default=TrialOutcome.PENDING
    )
    failure_class = models.CharField(max_length=32, choices=FailureClass.choices, blank=True)
    log_tail = models.TextField(blank=True)
    # What its capacity search found (agents.protocol.CapacityResult JSON), when it ran one.
    capacity = models.JSONField(null=True, blank=True)
    # Self-heal: each time its engine died or hung mid-measuring and was started again
    # (attempt, failure_class, level, requests_lost, log_tail), in order.
    restarts = models.JSONField(default=list, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "index"], name="trial_unique_index")]
        ordering = ["run", "index"]

    def __str__(self) -> str:
        return f"trial {self.index} of run {self.run_id}"


class Measurement(models.Model):
    """One finished load level of a trial: the client metrics and the server's time series."""

    # Always the trial's run's organization (set by ingest).
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    trial = models.ForeignKey(Trial, on_delete=models.CASCADE, related_name="measurements")
    concurrency = models.PositiveIntegerField(null=True, blank=True)
    request_rate = models.FloatField(null=True, blank=True)  # requests/s; inf stored as null + flag
    request_rate_infinite = models.BooleanField(default=False)
    result = models.JSONField()  # the `vllm bench serve` result keys, see agents.protocol
    server_metrics = models.JSONField(default=dict)
    # Each GPU's NVML telemetry over the level (agents.protocol.GpuLevelFigures, in NVML
    # order); empty when the agent had none (a simulator, a host without NVML, protocol < 7).
    gpus = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(concurrency__isnull=False)
                | Q(request_rate__isnull=False)
                | Q(request_rate_infinite=True),
                name="measurement_has_level",
            )
        ]
        ordering = ["trial", "created_at"]

    def __str__(self) -> str:
        level = level_name(
            concurrency=self.concurrency,
            request_rate=self.request_rate,
            infinite=self.request_rate_infinite,
        )
        return f"{level} of trial {self.trial_id}"
