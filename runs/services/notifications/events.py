"""What each event tells an organization's hooks: a run's end, a regression, a promotion,
the month's budget. Each is notified in the transaction of the change it reports
(``runs.services.notifications.outbox.notify``: once per fact), with a summary in words and
its data, and reads nothing when no hook asked for it.
"""

from __future__ import annotations

import datetime

from django.conf import settings

from runs.answer_text import run_answer_state
from runs.models import NotificationEvent, Organization
from runs.services.notifications.outbox import hooks_for, notify

_RUN_END_EVENTS = {
    "succeeded": NotificationEvent.RUN_FINISHED,
    "cancelled": NotificationEvent.RUN_FINISHED,
    "failed": NotificationEvent.RUN_FAILED,
    "over_budget": NotificationEvent.RUN_OVER_BUDGET,
}


def _page(path: str) -> str:
    return settings.BENCHSITE_PUBLIC_URL.rstrip("/") + path


def notify_run_ended(run) -> None:
    """A run's end (in the transaction that ended it): finished, failed or over budget, with
    its answer as the run page gives it (the recommended configuration, its capacity at the
    SLOs and cost per 1M output tokens, its serve command), named in the summary."""
    event = _RUN_END_EVENTS.get(str(run.state))
    if event is None or not hooks_for(run.organization_id, event):
        return  # nobody to tell: the answer is not even read
    name = run.experiment.name
    reason = f": {run.failure_reason}" if run.failure_reason else ""
    answer = run_answer_state(run=run)
    winner = answer["winner"]
    best = (
        f" — best: {winner['label'] or 'defaults'} ({winner['capacity_text']} at the SLOs, "
        f"{winner['usd_per_million']} per 1M output tokens)"
        if winner
        else ""
    )
    notify(
        org_id=run.organization_id,
        event=event,
        key=f"run.end:{run.id}",
        summary=f"Run {str(run.id)[:8]} of “{name}” {run.state}{reason}{best}",
        data={
            "answer": answer,
            "run": str(run.id),
            "experiment": str(run.experiment_id),
            "experiment_name": name,
            "state": str(run.state),
            "reason": run.failure_reason,
            "cost_usd": str(run.cost_usd),
            "url": _page(f"/o/{run.organization.slug}/runs/{run.id}/"),
        },
    )


def notify_regression(firing) -> None:
    """A scheduled run that regressed against the promoted baseline (in the transaction that
    ended it), with the failing rows in words."""
    run, gate = firing.run, firing.gate
    name = firing.schedule.experiment.name
    worst = gate["regressions"][0] if gate.get("regressions") else None
    detail = (
        f": {worst['metric']} at {worst['config']} {worst['level']}, {worst['change']}"
        if worst
        else ""
    )
    notify(
        org_id=run.organization_id,
        event=NotificationEvent.REGRESSION_DETECTED,
        key=f"regression:{run.id}",
        summary=f"Scheduled run {str(run.id)[:8]} of “{name}” regressed against the "
        f"promoted baseline{detail}",
        data={
            "run": str(run.id),
            "experiment": str(run.experiment_id),
            "experiment_name": name,
            "gate": gate,
            "url": _page(f"/o/{run.organization.slug}/runs/{run.id}/"),
        },
    )


def notify_promotion(promotion, event: str) -> None:
    """A promotion proposed or approved (in the transaction that changed it); a sandbox's
    simulated promotion says so in its summary (``str(promotion)``) and its data."""
    verb = "proposed" if event == NotificationEvent.PROMOTION_PROPOSED else "approved"
    notify(
        org_id=promotion.organization_id,
        event=event,
        key=f"{event}:{promotion.id}",
        summary=f"Promotion {verb} for “{promotion.experiment.name}”: {promotion}",
        data={
            "promotion": str(promotion.id),
            "experiment": str(promotion.experiment_id),
            "state": str(promotion.state),
            "simulated": promotion.simulated,
            "url": _page(f"/o/{promotion.organization.slug}/promotions/{promotion.id}/"),
        },
    )


def notify_budget_use(*, org: Organization, month: datetime.date) -> None:
    """The month's budget 80 % and 100 % used, each once per budget, month and limit (a
    changed limit is crossed anew), as the spend crosses it: checked by each reconcile pass
    after it records the active runs' costs, and at each run's end."""
    from runs.selectors.spend import budget_capping_month, org_month_spend_usd

    if not any(
        hooks_for(org.id, event)
        for event in (NotificationEvent.BUDGET_80, NotificationEvent.BUDGET_100)
    ):
        return
    budget = budget_capping_month(org.budgets.all(), month)
    if budget is None or not budget.limit_usd:
        return
    spend = org_month_spend_usd(org=org, month=month)
    for share, event in ((80, NotificationEvent.BUDGET_80), (100, NotificationEvent.BUDGET_100)):
        if spend * 100 >= budget.limit_usd * share:
            notify(
                org_id=org.id,
                event=event,
                key=f"{event}:{budget.id}:{month.isoformat()}:{budget.limit_usd}",
                summary=(
                    f"{share} % of the {month:%B %Y} budget used: ${spend} of ${budget.limit_usd}"
                ),
                data={
                    "month": month.isoformat(),
                    "spend_usd": str(spend),
                    "budget_usd": str(budget.limit_usd),
                    "share": share,
                },
            )
