"""Starting a run: the budget check against the estimate, the run row, its provisioning.

Guarantees of ``run_start``:
- Nothing is written and nothing is rented when a cap would be broken: the error names the
  cap and the numbers (``BudgetExceeded``, a ``DomainValidationError`` on field ``budget``).
- Caps checked (real money only: a simulated experiment rents nothing and costs nothing; an
  existing endpoint without a price has an unknown cost, so it runs time-boxed, unchecked):
  the experiment's own ``budget_cap_usd`` against the run's estimate; an experiment budget
  (``Budget`` with ``experiment``) against what the experiment's runs spent plus this
  estimate; the organization's budget for this month (or its standing monthly budget)
  against the month's spend, plus what active runs may still spend (their estimates), plus
  this estimate.
- ``image_tag`` runs a vLLM experiment on another image for this run only (a CI pipeline
  gating a vLLM bump against the promoted baseline): checked like the experiment's own tag,
  its serve grid checked against that vLLM version, frozen into the run and audited; the
  experiment itself is not changed.
- ``noise_seed`` (a simulated experiment only, refused on others) fixes the simulator's noise:
  a run with the same noise seed and traffic seed as another gives the same figures. Without
  one a simulated run draws its own (a realistic re-run); either way it is frozen in the job.
- The run, its frozen job (``runs.run_as_started``: exactly what its agent will run), the
  experiment's other facts and the estimate, and its ``run.start`` audit event are committed
  together; provisioning is enqueued only after that commit, so a
  rolled-back start never rents a GPU.
"""

from __future__ import annotations

import copy
from decimal import Decimal

from django.db import transaction
from django.db.models import Q, Sum
from django.utils import timezone

from agents import protocol
from runs.actors import Actor
from runs.audit import audit_record
from runs.costs import month_start
from runs.errors import DomainValidationError
from runs.experiment_spec import grid_problem_on_image, image_tag_problem
from runs.models import Budget, Experiment, Organization, Run
from runs.models.experiments import Engine
from runs.models.runs import TERMINAL_RUN_STATES, RunTrigger
from runs.run_as_started import run_frozen_fields
from runs.selectors.calibrations import search_prior
from runs.selectors.estimates import CostEstimate, experiment_estimate
from runs.selectors.spend import budget_capping_month, org_month_spend_usd
from runs.services.text_input import clean_short_text
from runs.task_queue import enqueue_after_commit

MAX_REASON_CHARS = Run._meta.get_field("reason").max_length


def _on_image(experiment: Experiment, image_tag: str) -> Experiment:
    """The experiment as this run sees it on ``image_tag`` alone (a copy: nothing is saved);
    refused, naming ``image_tag``, when the tag is invalid or the grid is not valid on the vLLM
    it names."""
    if experiment.engine != "vllm":
        raise DomainValidationError.single(
            "image_tag",
            f"Only a vLLM experiment runs an image; this one's engine is {experiment.engine!r}.",
        )
    problem = image_tag_problem(image_tag)
    if problem:
        raise DomainValidationError.single("image_tag", problem)
    problem = grid_problem_on_image(experiment, image_tag)
    if problem:
        raise DomainValidationError.single("image_tag", problem)
    on_image = copy.copy(experiment)
    # This image only: a CI gate of a vLLM bump measures the grid on the one tag it names.
    on_image.engine_image_tag, on_image.compare_image_tags = image_tag, []
    return on_image


class BudgetExceeded(DomainValidationError):
    """The run would break a cap; the message names the cap and the numbers."""


def _usd(value: Decimal) -> str:
    return f"${value.quantize(Decimal('0.01')):,}"


def _active_runs_commitment(org: Organization, *, exclude_experiment=None) -> Decimal:
    """What runs still under way may yet spend: the larger of their estimate and what they
    have cost so far."""
    total = Decimal(0)
    active = Run.objects.filter(organization=org).exclude(state__in=TERMINAL_RUN_STATES)
    for run in active.only("cost_usd", "experiment_snapshot"):
        estimate = Decimal(str(run.experiment_snapshot.get("estimate_usd") or 0))
        total += max(estimate, run.cost_usd)
    return total


def budget_check(*, experiment: Experiment, estimate: CostEstimate) -> None:
    """Raises ``BudgetExceeded`` when starting a run of ``experiment`` would break a cap."""
    if experiment.simulated:
        return  # the simulator rents no GPU
    org = experiment.organization
    if estimate.cost_usd is None and experiment.engine == Engine.ENDPOINT:
        # An endpoint we rent nothing on, of unknown price: its run is time-boxed (its
        # deadline) and its cost stays unknown; no cap can be checked against nothing.
        return
    if estimate.cost_usd is None:
        raise BudgetExceeded.single(
            "budget",
            f"No price is known ({estimate.price_source}), so the run's cost cannot be "
            "checked against its budget; set a GPU price first.",
        )
    cost = estimate.cost_usd
    if cost > experiment.budget_cap_usd:
        raise BudgetExceeded.single(
            "budget",
            f"The run's estimated cost {_usd(cost)} exceeds the experiment's cap "
            f"{_usd(experiment.budget_cap_usd)} (budget_cap_usd).",
        )
    experiment_budget = Budget.objects.filter(organization=org, experiment=experiment).first()
    if experiment_budget is not None:
        spent = Run.objects.filter(experiment=experiment).aggregate(total=Sum("cost_usd"))[
            "total"
        ] or Decimal(0)
        if spent + cost > experiment_budget.limit_usd:
            raise BudgetExceeded.single(
                "budget",
                f"The experiment's budget is {_usd(experiment_budget.limit_usd)}; its runs "
                f"have spent {_usd(spent)} and this run's estimate is {_usd(cost)}.",
            )
    month = month_start(timezone.now())
    month_budget = budget_capping_month(
        Budget.objects.filter(Q(month=month) | Q(month=None), organization=org), month
    )
    if month_budget is not None:
        spent = org_month_spend_usd(org=org, month=month)
        committed = _active_runs_commitment(org)
        if spent + committed + cost > month_budget.limit_usd:
            raise BudgetExceeded.single(
                "budget",
                f"The organization's budget for {month:%B %Y} is "
                f"{_usd(month_budget.limit_usd)}: {_usd(spent)} spent, {_usd(committed)} "
                f"committed to runs under way, and this run's estimate is {_usd(cost)}.",
            )


def _clean_reason(reason: object) -> str:
    return clean_short_text(reason, field="reason", max_chars=MAX_REASON_CHARS)


@transaction.atomic
def run_start(
    *,
    actor: Actor,
    experiment: Experiment,
    reason: str = "",
    trigger: str = RunTrigger.API,
    image_tag: str = "",
    noise_seed: int | None = None,
) -> Run:
    """Starts a run of ``experiment`` (see the module docstring)."""
    reason = _clean_reason(reason)
    if noise_seed is not None and experiment.engine != Engine.SIM:
        raise DomainValidationError.single(
            "noise_seed", "Only a simulated experiment has a noise seed."
        )
    if trigger not in RunTrigger.values:
        raise DomainValidationError.single("trigger", f"One of {', '.join(RunTrigger.values)}.")
    if image_tag:
        experiment = _on_image(experiment, image_tag)
    # One start at a time per organization, so two starts cannot both fit the last dollars.
    Organization.objects.select_for_update().filter(pk=experiment.organization_id).first()
    estimate = experiment_estimate(experiment=experiment)
    budget_check(experiment=experiment, estimate=estimate)
    prior = search_prior(experiment)
    frozen = run_frozen_fields(  # may refuse the job
        experiment=experiment,
        estimate=estimate,
        search_prior=(
            protocol.SearchPrior(constants=prior.constants, run_id=prior.run_ids[0])
            if prior is not None
            else None
        ),
        noise_seed=noise_seed,
    )
    run = Run.objects.create(
        organization=experiment.organization,
        experiment=experiment,
        started_by=actor.user,
        trigger=trigger,
        reason=reason,
        **frozen,
    )
    audit_record(
        org=run.organization,
        actor=actor,
        event="run.start",
        target=run,
        before=None,
        after={
            "experiment": str(experiment.id),
            "reason": reason,
            "trigger": trigger,
            **({"image_tag": image_tag} if image_tag else {}),
            **({"noise_seed": noise_seed} if noise_seed is not None else {}),
        },
    )
    enqueue_after_commit("runs.tasks.run_provision", str(run.id))
    return run
