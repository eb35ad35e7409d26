"""What happens when beat fires an experiment's schedule, and when the run it started ends.

Guarantees:
- A firing is recorded once per schedule and minute (``ScheduleFiring``'s constraint): a beat
  tick delivered twice starts one run; a paused or removed schedule starts nothing.
- A run is started only through ``run_start`` as the owner (actor via ``schedule``, trigger
  ``schedule``): the owner's role, the experiment's cap and every budget are checked as for a
  run they started by hand, and the start is audited under their name. When the owner left,
  lost write access, or the previous scheduled run is still under way, no run starts and the
  firing says why (audited as ``schedule.refused``). A refusal for the same reason as the
  schedule's latest firing is counted on that firing (no row, no audit event of its own):
  a run under way for a day is one refusal, not one a firing.
- When a scheduled run ends, its firing gets the gate's verdict (``schedule_gate``) from a
  task enqueued after the commit that ended it (the gate reads both runs as the API shows
  them: no ending transaction waits on it); a regression is notified
  (``regression.detected``) once.
"""

from __future__ import annotations

import datetime

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from runs.actors import Actor
from runs.audit import audit_record
from runs.errors import DomainValidationError
from runs.models import ExperimentSchedule, GateVerdict, Membership, Role, Run, ScheduleFiring
from runs.models.runs import TERMINAL_RUN_STATES, RunTrigger
from runs.selectors.schedules import schedule_settings
from runs.services.run_start import run_start
from runs.task_queue import enqueue_after_commit

SCHEDULE_ACTOR_VIA = "schedule"


def _why_not_start(schedule: ExperimentSchedule) -> str:
    owner = schedule.owner
    if owner is None or not owner.is_active:
        return "The schedule's owner no longer has an account; set the schedule again."
    membership = Membership.objects.filter(
        user=owner, organization_id=schedule.organization_id
    ).first()
    if membership is None:
        return f"{owner.email} is no longer a member; set the schedule again."
    if not Role(membership.role).can_write:
        return f"{owner.email}'s role ({membership.role}) may not start runs."
    under_way = (
        ScheduleFiring.objects.filter(schedule=schedule, run__isnull=False)
        .exclude(run__state__in=TERMINAL_RUN_STATES)
        .select_related("run")
        .first()
    )
    if under_way is not None:
        return f"The run {str(under_way.run_id)[:8]} it started earlier is still under way."
    return ""


def schedule_fire(
    *, schedule_id: str, now: datetime.datetime | None = None
) -> ScheduleFiring | None:
    """One beat tick of the schedule: starts its run, or records why not (see the module
    docstring). None when the schedule is gone or paused."""
    now = now or timezone.now()
    slot = now.replace(second=0, microsecond=0)
    with transaction.atomic():
        schedule = (
            ExperimentSchedule.objects.select_for_update(of=("self",))
            .select_related("periodic_task__crontab", "owner", "experiment__organization")
            .filter(id=schedule_id)
            .first()
        )
        if schedule is None or not schedule.periodic_task.enabled:
            return None
        # The schedule's row is locked: a tick delivered twice waits here, then finds this.
        seen = schedule.firings.filter(Q(slot=slot) | Q(last_slot=slot)).first()
        if seen is not None:
            return seen  # the same tick, delivered again
        firing = ScheduleFiring(schedule=schedule, slot=slot, fired_at=now)
        refused = _why_not_start(schedule)
        if not refused:
            owner = Actor(user=schedule.owner, via=SCHEDULE_ACTOR_VIA)
            try:
                with transaction.atomic():
                    firing.run = run_start(
                        actor=owner,
                        experiment=schedule.experiment,
                        reason=f"scheduled: {schedule_settings(schedule)['cron']} "
                        f"({schedule.periodic_task.crontab.timezone})",
                        trigger=RunTrigger.SCHEDULE,
                    )
                firing.verdict = GateVerdict.PENDING
            except DomainValidationError as exc:
                refused = " ".join(
                    message for messages in exc.fields.values() for message in messages
                )
        if refused:
            firing.refused = refused[:2000]
            latest = schedule.firings.order_by("-slot").first()
            if latest is not None and latest.run_id is None and latest.refused == firing.refused:
                return _repeated(latest, slot=slot, now=now)
            audit_record(
                org=schedule.organization,
                actor=Actor.system(SCHEDULE_ACTOR_VIA),
                event="schedule.refused",
                target=schedule,
                after={"why": firing.refused},
            )
        firing.save()
    return firing


def _repeated(firing: ScheduleFiring, *, slot: datetime.datetime, now: datetime.datetime):
    """Counts one more refusal, for the same reason, on the firing that recorded it."""
    firing.repeats += 1
    firing.last_slot, firing.last_fired_at = slot, now
    firing.save(update_fields=["repeats", "last_slot", "last_fired_at"])
    return firing


def schedule_run_ended(run: Run) -> None:
    """Enqueues the gate of a scheduled ``run`` that just ended, for after the commit that
    ended it (``schedule_gate.schedule_run_gate``)."""
    if run.trigger == RunTrigger.SCHEDULE:
        enqueue_after_commit("runs.tasks.schedule_gate", str(run.id))
