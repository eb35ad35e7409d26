"""Settling a run's trials when the run ends, whichever way it ends.

Guarantees of ``run_trials_settle`` (called through ``run_end.run_end_settle`` by every path
that ends a run, in the same transaction as the run's end: ``run_fail`` — reconcile's
verdicts, the budget stop, a failed provisioning —, ``run_cancel`` and the agent's own
``run_finished`` in ingest):
- no trial of an ended run is left ``pending`` or ``running``;
- a trial that measured at least one level and did not finish on its own is ``partial``
  (its levels stay and count as measured); one that measured nothing is ``skipped``;
- a planned trial the site never heard of gets its row, ``skipped``;
- what the agent said stands where it is the trial's own end: ``succeeded``, ``failed``
  (OOM, crash, …); a ``skipped`` or deadline ``failed`` trial with measured levels is
  ``partial`` (it was cut short, not left out), the deadline kept as its failure class;
- the reason is kept: a trial settled here without a log tail of its own gets the run's end
  reason (``stopped: …`` or ``not run: …``);
- idempotent: settling again (a late message of an ended run, ``runs.services.ingest``)
  changes only what the new facts change.
"""

from __future__ import annotations

from django.db.models import Exists, OuterRef
from django.utils import timezone

from runs.models import Measurement, Run, Trial
from runs.models.runs import FailureClass, TrialOutcome
from runs.run_as_started import run_planned_trials

# The outcomes a trial ends with by itself; the others are settled by the run's end.
_UNSETTLED = (TrialOutcome.PENDING, TrialOutcome.RUNNING)


def trial_outcome_settled(*, outcome: str, failure_class: str, measured: bool) -> str:
    """The outcome a trial of an ended run has, from what it was and whether it measured
    any level (the one rule; see the module docstring)."""
    if outcome == TrialOutcome.SUCCEEDED:
        return TrialOutcome.SUCCEEDED
    if outcome == TrialOutcome.FAILED and failure_class != FailureClass.DEADLINE:
        return TrialOutcome.FAILED  # its own failure: the engine's, not the run's end
    if measured:
        return TrialOutcome.PARTIAL
    if outcome == TrialOutcome.FAILED:
        return TrialOutcome.FAILED  # the deadline came before its first level
    return TrialOutcome.SKIPPED


def run_trials_settle(*, run: Run, reason: str) -> int:
    """Settles every trial of ``run``, which has ended (see the module docstring); returns
    how many trials it changed or added. Call it inside the transaction that ended the run."""
    ended_at = run.finished_at or timezone.now()
    reason = reason.strip() or f"the run ended {run.state}"
    trials = Trial.objects.filter(run=run).annotate(
        measured=Exists(Measurement.objects.filter(trial=OuterRef("pk")))
    )
    changed = 0
    seen = set()
    for trial in trials:
        seen.add(trial.index)
        outcome = trial_outcome_settled(
            outcome=trial.outcome, failure_class=trial.failure_class, measured=trial.measured
        )
        fields = []
        if outcome != trial.outcome:
            if trial.outcome in _UNSETTLED and not trial.log_tail:
                trial.log_tail = f"{'stopped' if trial.started_at else 'not run'}: {reason}"
                fields.append("log_tail")
            trial.outcome = outcome
            fields.append("outcome")
        if trial.finished_at is None:
            trial.finished_at = ended_at
            fields.append("finished_at")
        if fields:
            trial.save(update_fields=fields)
            changed += 1
    missing = [
        Trial(
            organization_id=run.organization_id,
            run=run,
            index=index,
            serve_config=planned.serve_config,
            image_tag=planned.image_tag or "",
            outcome=TrialOutcome.SKIPPED,
            log_tail=f"not run: {reason}",
            finished_at=ended_at,
        )
        for index, planned in enumerate(run_planned_trials(run))
        if index not in seen
    ]
    # A trial's first message may be stored by another connection at this very moment.
    Trial.objects.bulk_create(missing, ignore_conflicts=True)
    return changed + len(missing)
