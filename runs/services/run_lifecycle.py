"""A run's life: which state may follow which, and the only code that writes ``Run.state``.

Guarantees:
- ``RUN_TRANSITIONS`` is the whole table of changes (a syntax-tree test,
  ``tests/site/test_run_lifecycle.py``, fails on a write of ``state`` anywhere else);
- a change the table does not list raises ``IllegalRunTransition`` before anything is
  changed, in memory or stored: an ended run's end stands, and no run goes back a step
  except to provisioning, when it moves to a new pod;
- ``runs_transition`` is a conditional UPDATE: it moves only the rows whose state may change
  so (two writers racing: one wins, the other's count says it lost);
- ``run_fail`` ends an active run and settles it (``run_end.run_end_settle``) in one
  transaction.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from runs.models import Run
from runs.models.runs import TERMINAL_RUN_STATES, RunState
from runs.services.run_end import run_end_settle

_ENDS = frozenset(TERMINAL_RUN_STATES)
# A run under way. Its agent's hello (starting) and first trial (benchmarking) may be stored
# before provisioning recorded the pod, and its run_finished (finalizing, or an end) at any step.
_UNDER_WAY = frozenset(
    {RunState.PROVISIONING, RunState.STARTING, RunState.BENCHMARKING, RunState.FINALIZING}
)

RUN_TRANSITIONS: Mapping[RunState, frozenset[RunState]] = {
    RunState.QUEUED: _UNDER_WAY | _ENDS,
    # Provisioning again: a lease taken over, or the run moved to its next pod.
    RunState.PROVISIONING: _UNDER_WAY | _ENDS,
    RunState.STARTING: _UNDER_WAY | _ENDS,
    RunState.BENCHMARKING: frozenset({RunState.PROVISIONING, RunState.FINALIZING}) | _ENDS,
    # Finalizing until every message before run_finished is here; a new pod for the next
    # image, or lost meanwhile.
    RunState.FINALIZING: frozenset({RunState.PROVISIONING, RunState.FINALIZING}) | _ENDS,
    **{state: frozenset() for state in _ENDS},
}


class IllegalRunTransition(Exception):
    """A change of a run's state that ``RUN_TRANSITIONS`` does not allow (a bug: the caller
    checks the state it expects first)."""

    def __init__(self, run_id, current: str, to: str):
        self.run_id, self.current, self.to = run_id, current, to
        super().__init__(f"run {run_id} may not go from {current} to {to}")


def run_states_leading_to(to: RunState) -> frozenset[RunState]:
    """Every state a run may leave for ``to``."""
    return frozenset(state for state, later in RUN_TRANSITIONS.items() if to in later)


def run_transition(run: Run, to: RunState) -> None:
    """Moves ``run`` (its row locked by the caller) to ``to`` in memory; the caller saves it
    with the rest of its change. Raises ``IllegalRunTransition`` and changes nothing when the
    table does not allow it."""
    if to not in RUN_TRANSITIONS[RunState(run.state)]:
        raise IllegalRunTransition(run.id, run.state, to)
    run.state = to


def runs_transition(rows: QuerySet[Run], *, to: RunState, **fields) -> int:
    """Moves the ``rows`` whose state may go to ``to`` there, writing ``fields`` with it, in
    one conditional UPDATE; returns how many moved."""
    return rows.filter(state__in=run_states_leading_to(to)).update(state=to, **fields)


@transaction.atomic
def run_fail(*, run_id, reason: str, state: RunState = RunState.FAILED) -> bool:
    """Ends an active run in ``state`` (an end) with ``reason`` (conditional: a run that
    already ended keeps its end) and settles it in the same transaction. Returns whether it
    changed."""
    if state not in _ENDS:
        raise IllegalRunTransition(run_id, "an active state", state)
    reason = reason[:2000]
    ended = runs_transition(
        Run.objects.filter(id=run_id),
        to=state,
        failure_reason=reason,
        finished_at=timezone.now(),
    )
    if ended:
        run_end_settle(run=Run.objects.get(id=run_id), reason=reason)
    return bool(ended)
