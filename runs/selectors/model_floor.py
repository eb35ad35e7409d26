"""The best model's score that a ``max_points_below_best_model`` quality floor is measured
from (issue 38, docs/quality.md), and which experiments are comparable.

Guarantees:

- ``comparable_experiments`` is the one definition of experiments that compete for the same
  choice: the experiment itself and every experiment of its organization with the same
  workload and SLOs. The model-choice report ranks them; the best model is read among them.
- ``evaluation_key`` names what a score was measured on: a built-in pack by name
  (``pack:<name>``), an uploaded set by its file's digest (``set:<sha256>``). Scores under
  different keys are never compared.
- ``model_bests`` gives, for each experiment asked about and each evaluation key, the best
  stored score among the measured configurations of its comparable experiments: trials of
  the organization's runs whose frozen evaluation has that key, with a measured outcome
  (succeeded or partial) and a score. A trial of a simulated run (frozen engine ``sim``) or
  with a level carrying the simulator's label never counts, whatever was stored: the
  simulator serves no text. Ties go to the model named first. Only the organization's rows
  are read, in three queries whatever the number of experiments.
- ``run_model_best`` is that best for one run: its experiment, its frozen evaluation.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from agents.protocol import LEVEL_RESULT_KEY
from runs.costs import level_is_simulated
from runs.models import Experiment, Measurement, Organization, Run, TrialEvaluation
from runs.models.experiments import Engine
from runs.models.runs import MEASURED_OUTCOMES
from runs.run_as_started import (
    ENGINE_KIND_PATH,
    EVALUATION_PACK_PATH,
    EVALUATION_SET_SHA256_PATH,
    frozen_value,
    run_evaluation_source,
)
from runs.selectors.trial_quality import ModelBest

if TYPE_CHECKING:
    from uuid import UUID


def _comparable(experiment: Experiment, other: Experiment) -> bool:
    return other.id == experiment.id or (
        other.workload == experiment.workload and (other.slos or {}) == (experiment.slos or {})
    )


def comparable_experiments(
    experiment: Experiment, among: Iterable[Experiment] | None = None
) -> list[Experiment]:
    """The experiments of ``experiment``'s organization that compete with it (module
    docstring); ``among``: the organization's experiments, when the caller has them."""
    if among is None:
        among = Experiment.objects.filter(organization=experiment.organization).select_related(
            "model"
        )
    return [other for other in among if _comparable(experiment, other)]


def evaluation_key(pack: str | None, set_sha256: str | None) -> str | None:
    """``pack:<name>`` or ``set:<sha256>``; None when neither is given."""
    if pack:
        return f"pack:{pack}"
    if set_sha256:
        return f"set:{set_sha256}"
    return None


def model_bests(
    *, org: Organization, experiments: Iterable[Experiment]
) -> dict[tuple[UUID, str], ModelBest]:
    """The best score by (experiment id, evaluation key), for each of ``experiments``
    (module docstring)."""
    everyone = list(Experiment.objects.filter(organization=org).select_related("model"))
    groups = {e.id: [o.id for o in comparable_experiments(e, everyone)] for e in experiments}
    wanted = {other for group in groups.values() for other in group}
    if not wanted:
        return {}
    rows = list(
        TrialEvaluation.objects.filter(
            organization=org,
            score__isnull=False,
            trial__outcome__in=MEASURED_OUTCOMES,
            trial__run__experiment_id__in=wanted,
        )
        .exclude(**{f"trial__run__{ENGINE_KIND_PATH}": Engine.SIM})
        .annotate(
            pack=frozen_value(EVALUATION_PACK_PATH, via="trial__run__", text=True),
            set_sha256=frozen_value(EVALUATION_SET_SHA256_PATH, via="trial__run__", text=True),
        )
        .values_list("trial_id", "score", "pack", "set_sha256", "trial__run__experiment_id")
    )
    # The simulator's label on any level makes a trial simulated (trial_figures' rule).
    labelled = Measurement.objects.filter(
        organization=org,
        trial_id__in=[row[0] for row in rows],
        result__has_key=LEVEL_RESULT_KEY.simulated,
    ).values_list("trial_id", f"result__{LEVEL_RESULT_KEY.simulated}")
    simulated = {
        trial
        for trial, label in labelled
        if level_is_simulated({LEVEL_RESULT_KEY.simulated: label})
    }
    models = {e.id: e.model.name for e in everyone}
    # Each experiment's best per evaluation, then each group's best of its experiments'.
    best: dict[tuple[UUID, str], tuple[float, str]] = {}
    for trial_id, score, pack, set_sha256, experiment_id in rows:
        key = evaluation_key(pack, set_sha256)
        if key is None or trial_id in simulated:
            continue
        found = best.get((experiment_id, key))
        candidate = (score, models[experiment_id])
        best[(experiment_id, key)] = (
            candidate if found is None else min(found, candidate, key=_rank)
        )
    bests = {}
    for experiment_id, group in groups.items():
        for key in {key for other, key in best if other in group}:
            score, model = min(
                (best[(other, key)] for other in group if (other, key) in best), key=_rank
            )
            bests[(experiment_id, key)] = ModelBest(score=score, model=model)
    return bests


def _rank(found: tuple[float, str]) -> tuple[float, str]:
    # The highest score first; among equal scores, the model named first.
    return -found[0], found[1]


def run_model_best(run: Run) -> ModelBest | None:
    """The best model's score on ``run``'s frozen evaluation among its experiment's
    comparable experiments; None: the run has no evaluation, or nothing was measured."""
    key = evaluation_key(*run_evaluation_source(run))
    if key is None:
        return None
    return model_bests(org=run.organization, experiments=[run.experiment]).get(
        (run.experiment_id, key)
    )
