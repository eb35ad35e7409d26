"""A scheduled run against its experiment's promoted baseline: the CLI's regression gate.

Guarantees of ``schedule_run_gate`` (a task's, after the commit that ended the run): the
firing that started the run gets its verdict once (``not_gated`` for a run that did not
succeed, else ``promoted_gate``'s), and a regression is notified (``regression.detected``)
once, in the same transaction.

Guarantees of ``promoted_gate``:
- the verdict is exactly what ``benchsite runs start --gate --baseline promoted
  --max-regression THRESHOLDS`` would print for the same two runs: both are read as the API
  gives them to the CLI (``RunDetailSerializer``, through JSON) and compared by the CLI's own
  pure ``gate_compare`` — confidence intervals decide (a threshold fails only when the whole
  interval of the change lies beyond it), a configuration that stopped working fails;
- without an approved promotion the run is not gated (``NO_BASELINE``), never "passed";
- the summary it returns holds the baseline, the failing rows in words and what was not
  compared; nothing in it is a secret (figures and serve flags only).
"""

from __future__ import annotations

import json

from django.db import transaction
from rest_framework.renderers import JSONRenderer

from benchsite_cli.gate import (
    NothingToCompare,
    gate_compare,
    parse_thresholds,
    promoted_baseline_kind,
)
from runs.models import GateVerdict, Promotion, PromotionState, Run, ScheduleFiring
from runs.models.runs import TERMINAL_RUN_STATES, RunState
from runs.run_documents import RunDetailSerializer
from runs.services.notifications.events import notify_regression

MAX_ROWS_KEPT = 20


def _as_cli_sees_it(run: Run) -> dict:
    return json.loads(JSONRenderer().render(RunDetailSerializer(run).data))


def promoted_gate(*, run: Run, thresholds: str) -> tuple[str, dict]:
    """``(verdict, summary)`` for the succeeded ``run`` (see the module docstring)."""
    promotion = (
        Promotion.objects.select_related("trial__run")
        .filter(experiment_id=run.experiment_id, state=PromotionState.APPROVED)
        .first()
    )
    if promotion is None:
        return GateVerdict.NO_BASELINE, {"why": "the experiment has no approved promotion"}
    baseline = promotion.trial.run
    try:
        result = gate_compare(
            new_run=_as_cli_sees_it(run),
            baseline_run=_as_cli_sees_it(baseline),
            thresholds=parse_thresholds(thresholds),
            baseline_kind=promoted_baseline_kind(
                trial_index=promotion.trial.index, simulated=promotion.simulated
            ),
            baseline_trial=promotion.trial.index,
        )
    except NothingToCompare as exc:
        return GateVerdict.NO_BASELINE, {"why": str(exc)}
    regressions = [
        {
            "config": row.config,
            "level": row.level,
            "metric": row.metric,
            "change": row.change_text,
            "why": row.why,
        }
        for row in result.regressions()[:MAX_ROWS_KEPT]
    ]
    summary = {
        "baseline_run": str(baseline.id),
        "baseline_trial": promotion.trial.index,
        "promotion": str(promotion.id),
        "promotion_simulated": promotion.simulated,
        "thresholds": thresholds,
        "rows": len(result.rows),
        "regressions": regressions,
        "not_compared": result.not_compared,
    }
    return (GateVerdict.REGRESSION if result.failed else GateVerdict.PASSED), summary


@transaction.atomic
def schedule_run_gate(*, run_id) -> str:
    """Gives the firing that started the ended run ``run_id`` its verdict, once (a later
    call, or a run not ended, changes nothing); returns the firing's verdict ("" when no
    firing started the run)."""
    firing = (
        ScheduleFiring.objects.select_for_update(of=("self",))
        .select_related("schedule__experiment", "run")
        .filter(run_id=run_id)
        .first()
    )
    if firing is None:
        return ""
    run = firing.run
    if firing.verdict != GateVerdict.PENDING or run.state not in TERMINAL_RUN_STATES:
        return firing.verdict
    if run.state != RunState.SUCCEEDED:
        firing.verdict = GateVerdict.NOT_GATED
        firing.gate = {"why": f"the run ended {run.state}"}
    else:
        firing.verdict, firing.gate = promoted_gate(run=run, thresholds=firing.schedule.thresholds)
    firing.save(update_fields=["verdict", "gate"])
    if firing.verdict == GateVerdict.REGRESSION:
        notify_regression(firing)
    return firing.verdict
