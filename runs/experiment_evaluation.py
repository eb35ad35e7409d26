"""What an experiment's configurations are scored on, and the quality they must keep
(issue 38, docs/quality.md): the stored shape and its checks.

Guarantees:

- ``ExperimentEvaluation`` is the one stored shape (``Experiment.evaluation``; ``{}`` is no
  evaluation): an uploaded set of the organization (``set_id``) or a built-in pack
  (``pack``), never both; a judge endpoint of the organization when the set has judge items;
  the concurrency it is run at; and an optional quality floor.
- A quality floor is one of: an absolute score (``min_score``, 0–1), a distance from the
  run's best configuration (``max_points_below_best``, percentage points), or a distance
  from the best model's score on the same evaluation (``max_points_below_best_model``,
  percentage points; ``runs.selectors.model_floor``).
- ``evaluation_check`` returns the evaluation as it will be stored, or reports every problem
  by field (``evaluation.set_id``, ``evaluation.quality_floor.min_score`` …).
- ``builtin_packs`` describes every pack an experiment may name, as the pages show them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Literal
from uuid import UUID

import pydantic
from pydantic import Field

from agents import protocol
from agents.evaluation.packs import BUILTIN_PACKS, load_pack
from runs.models import Endpoint, EvaluationSet, Organization

# The evaluation shares the served configuration with nothing else, but a few requests at
# once keep its own time short without loading the server as a benchmark level does.
MAX_EVALUATION_CONCURRENCY = 32


class QualityFloor(protocol.StrictModel):
    """The least quality a configuration must keep to be recommended or promoted."""

    min_score: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    max_points_below_best: Annotated[float, Field(gt=0, le=100, allow_inf_nan=False)] | None = None
    max_points_below_best_model: (
        Annotated[float, Field(gt=0, le=100, allow_inf_nan=False)] | None
    ) = None

    @pydantic.model_validator(mode="after")
    def _one_floor(self) -> QualityFloor:
        given = [name for name, value in self if value is not None]
        if len(given) != 1:
            raise ValueError(
                "give min_score, max_points_below_best or max_points_below_best_model, one of them"
            )
        return self


class ExperimentEvaluation(protocol.StrictModel):
    """An experiment's evaluation as stored (module docstring)."""

    set_id: UUID | None = Field(default=None, strict=False)
    pack: Literal[tuple(BUILTIN_PACKS)] | None = None  # type: ignore[valid-type]
    judge_endpoint_id: UUID | None = Field(default=None, strict=False)
    concurrency: Annotated[int, Field(ge=1, le=MAX_EVALUATION_CONCURRENCY)] = 4
    quality_floor: QualityFloor | None = None

    @pydantic.model_validator(mode="after")
    def _one_source(self) -> ExperimentEvaluation:
        if (self.set_id is None) == (self.pack is None):
            raise ValueError("name an evaluation set (set_id) or a built-in pack (pack), one")
        return self


def evaluation_check(
    evaluation: object, *, org: Organization, add: Callable[[str, str], None]
) -> dict:
    """The evaluation as it will be stored ({} when there is none), problems reported to
    ``add(field, message)``: the set must be the organization's, and a set with judge items
    needs a judge endpoint of the organization (one without needs none)."""
    if evaluation is None or evaluation == {}:
        return {}
    try:
        checked = ExperimentEvaluation.model_validate(evaluation)
    except pydantic.ValidationError as exc:
        for error in protocol.pydantic_field_errors(
            exc, prefix="evaluation", model=ExperimentEvaluation
        ):
            add(error.field, error.message)
        return {}
    if checked.set_id is not None:
        stored = EvaluationSet.objects.filter(organization=org, id=checked.set_id).first()
        if stored is None:
            add("evaluation.set_id", "No such evaluation set in this organization.")
            return {}
        needs_judge = stored.needs_judge
    else:
        needs_judge = load_pack(checked.pack).needs_judge
    if checked.judge_endpoint_id is not None:
        if not Endpoint.objects.filter(organization=org, id=checked.judge_endpoint_id).exists():
            add("evaluation.judge_endpoint_id", "No such endpoint in this organization.")
        elif not needs_judge:
            add("evaluation.judge_endpoint_id", "The set has no item scored by a judge.")
    elif needs_judge:
        add(
            "evaluation.judge_endpoint_id",
            "The set has items scored by a judge: name one of the organization's endpoints.",
        )
    return checked.model_dump(mode="json", exclude_none=True)


@dataclass(frozen=True)
class BuiltinPack:
    """A built-in pack as the pages show it: its name, what it is, its licence and its
    summary (``items``, ``scorers``, ``with_reference``, ``needs_judge``)."""

    name: str
    description: str
    licence: str
    summary: dict


def builtin_packs() -> list[BuiltinPack]:
    """Every built-in pack, by name."""
    found = []
    for name in sorted(BUILTIN_PACKS):
        pack = load_pack(name)
        found.append(BuiltinPack(name, pack.description, pack.licence, pack.summary()))
    return found
