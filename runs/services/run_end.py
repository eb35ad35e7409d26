"""What follows every run's end, whichever path ends it (``run_lifecycle.run_fail``:
reconcile's verdicts, the budget stop, a failed provisioning; ``run_cancel`` of a queued run;
the agent's own ``run_finished``, ``run_finish``), in the transaction that ended it: its
trials settled (``trial_settling``), its end and the month's budget use told to the
organization's notification hooks (``notifications``), and once it commits, a scheduled run
gated against the promoted baseline (``schedule_gate``) and a measured run's success
refitting the simulator's calibrations (``calibrations``), each by a task."""

from __future__ import annotations

from runs.costs import month_start
from runs.models import Run
from runs.services.calibrations import calibration_refit_on_commit
from runs.services.notifications.events import notify_budget_use, notify_run_ended
from runs.services.schedule_firing import schedule_run_ended
from runs.services.trial_settling import run_trials_settle


def run_end_settle(*, run: Run, reason: str) -> None:
    """Settles the ended ``run``'s trials and notifies its end (see the module docstring)."""
    run_trials_settle(run=run, reason=reason)
    notify_run_ended(run)
    schedule_run_ended(run)
    notify_budget_use(org=run.organization, month=month_start(run.created_at))
    calibration_refit_on_commit(run)
