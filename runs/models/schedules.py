"""An experiment's schedule and what became of each time it fired
(``runs.services.schedules``).

- ``ExperimentSchedule``: one per experiment. When it fires (cron expression and time zone)
  and whether it is paused are the beat's own row (django-celery-beat's ``PeriodicTask`` and
  its ``CrontabSchedule``), which beat reads: not copied here, so the two never disagree.
  ``owner`` is who set it: each scheduled run is started as them, under their role and the
  usual budget check. ``thresholds`` is the regression gate's ``--max-regression`` text.
- ``ScheduleFiring``: one per schedule and minute (a second delivery of the same beat tick
  adds nothing): the run it started, or why none was started; then, when that run ended,
  the gate's verdict against the experiment's promoted baseline. Later firings refused for
  the same reason as the schedule's latest one are counted on it (``repeats``, up to
  ``last_fired_at``), not recorded each on its own.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from runs.models.experiments import Experiment
from runs.models.runs import Run
from runs.models.tenancy import Organization, User

# The gate's default: the promoted configuration's tail latency and throughput (docs/cli.md).
DEFAULT_THRESHOLDS = "p99_ttft_ms=10%,output_throughput=-5%"


class ExperimentSchedule(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="schedules"
    )
    experiment = models.OneToOneField(Experiment, on_delete=models.CASCADE, related_name="schedule")
    owner = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, related_name="+")
    periodic_task = models.OneToOneField(
        PeriodicTask, on_delete=models.PROTECT, related_name="experiment_schedule"
    )
    thresholds = models.CharField(max_length=500, default=DEFAULT_THRESHOLDS)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"schedule of {self.experiment}"


class GateVerdict(models.TextChoices):
    PENDING = "pending", "Run under way"
    PASSED = "passed", "Passed"
    REGRESSION = "regression", "Regression"
    NO_BASELINE = "no_baseline", "Not gated: no promoted baseline"
    NOT_GATED = "not_gated", "Not gated: the run did not succeed"


class ScheduleFiring(models.Model):
    schedule = models.ForeignKey(
        ExperimentSchedule, on_delete=models.CASCADE, related_name="firings"
    )
    # The beat tick's minute: at most one firing per schedule and minute.
    slot = models.DateTimeField()
    fired_at = models.DateTimeField(default=timezone.now)
    run = models.OneToOneField(
        Run, on_delete=models.SET_NULL, null=True, blank=True, related_name="schedule_firing"
    )
    refused = models.TextField(max_length=2000, blank=True)  # why no run started
    # Later firings refused for the same reason, and the minute and time of the last of them.
    repeats = models.PositiveIntegerField(default=0)
    last_slot = models.DateTimeField(null=True, blank=True)
    last_fired_at = models.DateTimeField(null=True, blank=True)
    verdict = models.CharField(max_length=16, choices=GateVerdict.choices, blank=True)
    # The gate's summary: baseline run and trial, failed rows in words, what was not compared.
    gate = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"{self.schedule} at {self.slot:%Y-%m-%d %H:%M} UTC"

    class Meta:
        ordering = ["-slot"]
        constraints = [
            models.UniqueConstraint(fields=["schedule", "slot"], name="schedulefiring_once")
        ]
