"""A run's evaluation on the site's side (issue 38, docs/quality.md): the judge's key its
pod is given, and the results its agent reports per trial.

Guarantees:

- ``trial_evaluation_record`` stores one ``evaluation`` message in the caller's transaction
  (the ingest batch's, which holds the run's lock): the trial's one ``TrialEvaluation``
  takes the report's summary, and each of its items is kept by id, so the parts of a large
  set add up and a part sent again (a resend, a trial measured again on a new pod) leaves
  one outcome per item, the latest. Like every agent message it is recorded in the run's
  ledger (``AgentMessageRecord``), not the audit log: no person acted.

- ``evaluation_pod_env`` gives a real engine's pod the judge's key (read from the endpoint
  the job names; the job itself never holds it) and the addresses the judge's host
  resolves to now, checked against the operator's rule, as an endpoint's are before its run
  (else ``PermanentProviderError`` naming why: the run fails); the agent sends the judge's
  requests to those addresses only. A simulated run gets nothing: the simulator serves no
  text to judge.
"""

from __future__ import annotations

import datetime

from agents import protocol
from runs.models import Endpoint, Run, Trial, TrialEvaluation
from runs.providers.base import PermanentProviderError
from runs.services.endpoints import endpoint_api_key_for_run, endpoint_target
from runs.services.outbound import OutboundRefused


def evaluation_pod_env(run: Run) -> dict[str, str]:
    """The environment a run's pod needs for its evaluation: the judge's checked addresses
    and its key, when its job names a judge (that takes one), for a real engine (module
    docstring)."""
    frozen = run.job_spec.get("evaluation") or {}
    judge = frozen.get("judge")
    if judge is None or run.job_spec["engine"]["kind"] == "sim":
        return {}
    # Resolved and checked again before the agent starts, as an endpoint's is: the agent
    # connects to these addresses, never to what the name answers later.
    try:
        target = endpoint_target(judge["base_url"])
    except OutboundRefused as refused:
        raise PermanentProviderError(
            f"the judge endpoint's address is refused: {refused}"
        ) from None
    env = {protocol.JUDGE_ADDRESSES_ENV: ",".join(target.addresses)}
    endpoint = Endpoint.objects.filter(
        organization_id=run.organization_id, id=judge["endpoint_id"]
    ).first()
    key = endpoint_api_key_for_run(endpoint) if endpoint is not None else None
    return env | {protocol.JUDGE_API_KEY_ENV: key} if key else env


def trial_evaluation_record(
    *, run: Run, trial: Trial, report: protocol.EvaluationReport, now: datetime.datetime
) -> TrialEvaluation:
    """Stores ``report`` for ``trial`` of ``run`` (module docstring)."""
    evaluation, _ = TrialEvaluation.objects.select_for_update().get_or_create(
        trial=trial, defaults={"organization_id": run.organization_id}
    )
    summary = report.summary
    evaluation.score, evaluation.score_low, evaluation.score_high = (
        summary.score,
        summary.low,
        summary.high,
    )
    evaluation.items, evaluation.scored = summary.items, summary.scored
    evaluation.failed, evaluation.unscored = summary.failed, summary.unscored
    evaluation.seconds = summary.seconds
    evaluation.outcomes = {
        **evaluation.outcomes,
        **{
            item.id: item.model_dump(mode="json", exclude={"id"}, exclude_none=True)
            for item in report.items
        },
    }
    evaluation.updated_at = now
    evaluation.save()
    return evaluation
