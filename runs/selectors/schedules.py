"""An experiment's schedule as the page and the API show it: when it fires next, whether it
is paused, and what each firing did (the one read of both)."""

from __future__ import annotations

import datetime

from django.utils import timezone

from runs.models import Experiment, ExperimentSchedule, Run, ScheduleFiring
from runs.schedule_spec import CRON_FIELDS

HISTORY_SHOWN = 50


def experiment_schedule(experiment: Experiment) -> ExperimentSchedule | None:
    return (
        ExperimentSchedule.objects.select_related("periodic_task__crontab", "owner")
        .filter(organization_id=experiment.organization_id, experiment=experiment)
        .first()
    )


def _next_fire(schedule: ExperimentSchedule, now: datetime.datetime) -> datetime.datetime | None:
    if not schedule.periodic_task.enabled:
        return None
    crontab = schedule.periodic_task.crontab
    due = now + crontab.schedule.remaining_estimate(now)
    # Celery's estimate ends a hair before the minute; the schedule speaks in whole minutes.
    return (due + datetime.timedelta(seconds=30)).replace(second=0, microsecond=0)


def schedule_settings(schedule: ExperimentSchedule) -> dict:
    """What a person set (also what the audit log records of each change)."""
    crontab = schedule.periodic_task.crontab
    return {
        "cron": " ".join(str(getattr(crontab, name)) for name in CRON_FIELDS),
        "timezone": str(crontab.timezone),
        "thresholds": schedule.thresholds,
        "paused": not schedule.periodic_task.enabled,
        "owner": schedule.owner.email if schedule.owner else None,
    }


def schedule_state(schedule: ExperimentSchedule, *, now: datetime.datetime | None = None) -> dict:
    """The schedule's settings, its next firing (None while paused) and its recent firings,
    newest first, each with its run, why none started, and the gate's verdict."""
    firings = schedule.firings.select_related("run")[:HISTORY_SHOWN]
    return {
        **schedule_settings(schedule),
        "description": schedule.periodic_task.crontab.human_readable,
        "next_fire_at": _next_fire(schedule, now or timezone.now()),
        "firings": [_firing(firing) for firing in firings],
    }


def _firing(firing: ScheduleFiring) -> dict:
    return {
        "fired_at": firing.fired_at,
        "run": firing.run_id,
        "run_state": firing.run.state if firing.run else None,
        "refused": firing.refused,
        "repeats": firing.repeats,
        "last_fired_at": firing.last_fired_at,
        "verdict": firing.verdict,
        "verdict_text": firing.get_verdict_display() if firing.verdict else "",
        "gate": firing.gate,
    }


def run_firing(run: Run) -> dict | None:
    """The firing that started ``run`` (as in ``schedule_state``), None for a run started by
    hand."""
    firing = ScheduleFiring.objects.select_related("run").filter(run=run).first()
    return _firing(firing) if firing is not None else None
