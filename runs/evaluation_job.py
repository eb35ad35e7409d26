"""An experiment's evaluation as its run's job carries it (issue 38, docs/quality.md).

Guarantees:

- ``job_evaluation`` freezes the experiment's evaluation into the job when the run starts:
  the uploaded set by its id and the sha256 of its stored file (the agent fetches the file
  by route, ``protocol.AGENT_EVALUATION_SET_ROUTE``, and uses it only when the digest
  matches; so a set of any size the upload allows runs), or the pack's name; the judge
  endpoint's URL, served model and id. Nothing secret: the judge's key reaches the pod only
  in its environment (``runs.services.evaluation_runs``), never the job, a log or a
  message. A set or judge endpoint gone since the experiment was saved is refused by field
  and nothing is written.
- ``evaluation_requests`` is how many requests scoring one configuration sends (each item,
  and each judge item's judge), for the estimate.
"""

from __future__ import annotations

from agents import protocol
from agents.evaluation.packs import load_pack
from runs.errors import DomainValidationError
from runs.experiment_evaluation import ExperimentEvaluation
from runs.models import Endpoint, EvaluationSet, Experiment


def _evaluation(experiment: Experiment) -> ExperimentEvaluation | None:
    if not experiment.evaluation:
        return None
    return ExperimentEvaluation.model_validate(experiment.evaluation)


def _own_row(experiment: Experiment, model, row_id, field: str):
    """The organization's row ``row_id`` of ``model``; gone since the experiment was saved,
    a refusal on ``field``."""
    row = model.objects.filter(organization_id=experiment.organization_id, id=row_id).first()
    if row is None:
        noun = "endpoint" if model is Endpoint else "evaluation set"
        raise DomainValidationError.single(field, f"No such {noun} in this organization.")
    return row


def job_evaluation(experiment: Experiment) -> protocol.EvaluationJob | None:
    """The experiment's evaluation as the job carries it (module docstring); None: none."""
    evaluation = _evaluation(experiment)
    if evaluation is None:
        return None
    source: dict = {"pack": evaluation.pack}
    if evaluation.set_id is not None:
        stored = _own_row(experiment, EvaluationSet, evaluation.set_id, "evaluation.set_id")
        source = {"set_id": str(stored.id), "set_sha256": stored.sha256}
    judge = None
    if evaluation.judge_endpoint_id is not None:
        endpoint = _own_row(
            experiment, Endpoint, evaluation.judge_endpoint_id, "evaluation.judge_endpoint_id"
        )
        judge = protocol.EvaluationJudge(
            base_url=endpoint.base_url,
            model=endpoint.served_model_name,
            endpoint_id=str(endpoint.id),
        )
    return protocol.EvaluationJob(**source, judge=judge, concurrency=evaluation.concurrency)


def evaluation_requests(experiment: Experiment) -> tuple[int, int]:
    """The requests scoring one configuration of ``experiment`` sends (each item once, a
    judge item twice) and how many it keeps in flight; (0, 1) without an evaluation."""
    evaluation = _evaluation(experiment)
    if evaluation is None:
        return 0, 1
    if evaluation.pack is not None:
        summary = load_pack(evaluation.pack).summary()
    else:
        stored = EvaluationSet.objects.filter(
            organization_id=experiment.organization_id, id=evaluation.set_id
        ).first()
        summary = {} if stored is None else stored.summary
    judged = summary.get("scorers", {}).get("judge", 0)
    return summary.get("items", 0) + judged, evaluation.concurrency
