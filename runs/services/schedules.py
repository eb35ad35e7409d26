"""Experiment schedules: set, pause, remove (what fires them: ``schedule_firing``).

Guarantees:
- Beat (django-celery-beat's ``DatabaseScheduler``) fires a schedule from its own
  ``PeriodicTask`` row, which these write in the same transaction as the schedule and its
  audit event; beat sees a change within its loop interval (5 s) and sends no paused one.
- Whoever sets a schedule becomes its owner: the runs it starts are theirs.
- Removing a schedule removes beat's row with it (a row left behind would keep firing).
"""

from __future__ import annotations

import json

from django.db import transaction
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from runs.actors import Actor
from runs.audit import audit_record
from runs.models import Experiment, ExperimentSchedule
from runs.schedule_spec import ScheduleSpec
from runs.selectors.schedules import schedule_settings

FIRE_TASK = "runs.tasks.schedule_fire"


def _task_name(experiment: Experiment) -> str:
    return f"experiment-schedule:{experiment.id}"


@transaction.atomic
def schedule_set(
    *, actor: Actor, experiment: Experiment, spec: ScheduleSpec, paused: bool = False
) -> ExperimentSchedule:
    """Creates or replaces ``experiment``'s schedule; whoever sets it becomes its owner (the
    runs it starts are theirs)."""
    crontab, _ = CrontabSchedule.objects.get_or_create(timezone=spec.timezone, **spec.cron)
    schedule = (
        ExperimentSchedule.objects.select_for_update(of=("self",))
        .select_related("periodic_task__crontab", "owner")
        .filter(experiment=experiment)
        .first()
    )
    before = schedule_settings(schedule) if schedule else None
    if schedule is None:
        task = PeriodicTask(name=_task_name(experiment), task=FIRE_TASK)
        schedule = ExperimentSchedule(organization=experiment.organization, experiment=experiment)
    else:
        task = schedule.periodic_task
    task.crontab, task.enabled = crontab, not paused
    task.save()  # beat rereads its schedule: django-celery-beat marks the change on save
    schedule.periodic_task, schedule.owner = task, actor.user
    schedule.thresholds = spec.thresholds
    schedule.save()
    task.kwargs = json.dumps({"schedule_id": str(schedule.id)})
    task.save(update_fields=["kwargs"])
    audit_record(
        org=experiment.organization,
        actor=actor,
        event="schedule.set",
        target=schedule,
        before=before,
        after=schedule_settings(schedule),
    )
    return schedule


@transaction.atomic
def schedule_pause(*, actor: Actor, schedule: ExperimentSchedule, paused: bool) -> None:
    """Pauses or resumes ``schedule`` (its history stays); the owner does not change."""
    task = PeriodicTask.objects.select_for_update().get(pk=schedule.periodic_task_id)
    if task.enabled == (not paused):
        return
    before = schedule_settings(schedule)
    task.enabled = not paused
    task.save()
    schedule.periodic_task = task
    audit_record(
        org=schedule.organization,
        actor=actor,
        event="schedule.pause" if paused else "schedule.resume",
        target=schedule,
        before=before,
        after=schedule_settings(schedule),
    )


@transaction.atomic
def schedule_delete(*, actor: Actor, schedule: ExperimentSchedule) -> None:
    """Removes ``schedule`` and its history; the runs it started stay (trigger ``schedule``)."""
    audit_record(
        org=schedule.organization,
        actor=actor,
        event="schedule.delete",
        target=schedule,
        before=schedule_settings(schedule),
    )
    task = schedule.periodic_task
    schedule.delete()
    task.delete()
