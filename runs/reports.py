"""Reads behind the managers' reports: cost per token by model × GPU × best config, model
size against cost, spend against budgets, and the model choice for one experiment.

Guarantees:
- Every figure is computed by ``runs.costs`` (exact ``Decimal``, rounded once to 0.0001 USD)
  with the pricing rule of ``runs.selectors.trial_costs``, read in a fixed number of queries
  whatever the number of runs.
- Simulated figures are never ranked with measured ones: every function returns them apart
  (``simulated`` on each figure, separate lists), and a trial counts as simulated when its
  run's frozen experiment or its experiment says ``engine: sim`` or any of its levels carries
  the simulator's ``simulated`` label.
- Only the organization's own rows are read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date
from decimal import ROUND_HALF_EVEN, Decimal

from django.db.models import Count, Sum
from django.db.models.functions import TruncMonth

from runs.costs import (
    TrialCost,
    level_load,
    level_qualifies,
    pod_usd_per_hr,
    round_usd,
    trial_cost_per_million_output_tokens,
)
from runs.models import (
    Budget,
    Experiment,
    Measurement,
    ModelSpec,
    Organization,
    Promotion,
    PromotionState,
    Run,
    Trial,
)
from runs.models.runs import TrialOutcome
from runs.selectors import GpuPrice, gpu_price

SLO_METRICS = ("ttft", "tpot", "itl", "e2el")
TENTH = Decimal("0.1")


def tenth(value) -> Decimal | None:
    """A measured float (ms, tokens/s) as an exact decimal to one place, half to even."""
    if value is None:
        return None
    return Decimal(str(value)).quantize(TENTH, rounding=ROUND_HALF_EVEN)


@dataclass(frozen=True)
class TrialFigure:
    """One trial's cost at its best level under the SLOs, with what a report shows beside it."""

    trial: Trial
    run: Run
    experiment: Experiment
    model: ModelSpec
    gpu_type_id: str
    gpu_count: int
    simulated: bool
    cost: TrialCost
    levels: tuple[dict, ...] = field(repr=False)

    @property
    def usd_per_million(self) -> Decimal | None:
        return self.cost.usd_per_million_output_tokens

    @property
    def throughput_per_gpu(self) -> Decimal | None:
        tput = self.cost.output_throughput_tok_s
        return None if tput is None else tenth(tput / self.gpu_count)

    def p99_ms(self, metric: str) -> Decimal | None:
        level = self.cost.level
        return None if level is None else tenth(level.get(f"p99_{metric}_ms"))

    @property
    def slos(self) -> dict:
        return (self.run.experiment_snapshot or {}).get("slos") or self.experiment.slos or {}

    def headroom_pct(self) -> dict[str, Decimal | None]:
        """Per SLO given: how far below its target the chosen level's p99 is, in percent."""
        headroom: dict[str, Decimal | None] = {}
        level = self.cost.level or {}
        for metric in SLO_METRICS:
            target = self.slos.get(f"{metric}_ms")
            if target is None:
                continue
            p99 = level.get(f"p99_{metric}_ms")
            if p99 is None:
                headroom[metric] = None
                continue
            target = Decimal(str(target))
            share = (target - Decimal(str(p99))) / target * 100
            headroom[metric] = share.quantize(TENTH, rounding=ROUND_HALF_EVEN)
        return headroom

    def qualifying_loads(self) -> list[str]:
        return [
            f"{kind}={level[kind]}"
            for level in self.levels
            for kind, _ in [level_load(level)]
            if level_qualifies(level)
        ]


def _is_simulated(run: Run, experiment: Experiment, levels: Iterable[dict]) -> bool:
    engine = (run.experiment_snapshot or {}).get("engine")
    if engine == "sim" or experiment.engine == "sim":
        return True
    return any(level.get("simulated") not in (None, False) for level in levels)


def trial_is_simulated(trial: Trial) -> bool:
    """Whether a trial's figures come from the simulator (see the module docstring)."""
    levels = [m.result for m in trial.measurements.all()]
    return _is_simulated(trial.run, trial.run.experiment, levels)


def _level(trial_id, concurrency, request_rate, infinite, result) -> dict:
    # As runs.selectors: the stored columns are authoritative for the load of a level.
    level = {k: v for k, v in result.items() if k not in ("concurrency", "request_rate")}
    if concurrency is not None:
        level["concurrency"] = concurrency
    else:
        level["request_rate"] = "inf" if infinite else request_rate
    return level


def trial_figures(
    *, org: Organization, experiments: Iterable[Experiment] | None = None
) -> list[TrialFigure]:
    """Every succeeded trial of the organization's runs (of ``experiments`` when given),
    priced at its best level under its experiment's SLOs."""
    trials = (
        Trial.objects.filter(run__organization=org, outcome=TrialOutcome.SUCCEEDED)
        .select_related("run")
        # Only what a report shows: the runs' logs and agent details stay in the database.
        .only(
            "id", "index", "serve_config", "cold_start", "outcome", "run__id",
            "run__organization_id", "run__experiment_id", "run__experiment_snapshot",
            "run__pod_gpu_type", "run__price_usd_hr", "run__created_at",
        )
        .order_by("run__created_at", "run_id", "index")
    )  # fmt: skip
    if experiments is not None:
        trials = trials.filter(run__experiment__in=list(experiments))
    trials = list(trials)
    # Few experiments, models and GPU types: read once each, not once per trial.
    experiment_rows = {
        e.id: e
        for e in Experiment.objects.filter(
            id__in={t.run.experiment_id for t in trials}
        ).select_related("model", "gpu_type")
    }
    # Levels as plain tuples: thousands of them, and only their figures are needed.
    levels_of: dict[int, list[dict]] = {}
    rows = Measurement.objects.filter(
        trial__run__organization=org, trial__outcome=TrialOutcome.SUCCEEDED
    )
    if experiments is not None:
        rows = rows.filter(trial__run__experiment__in=list(experiment_rows))
    rows = rows.order_by("created_at", "id").values_list(
        "trial_id", "concurrency", "request_rate", "request_rate_infinite", "result"
    )
    for row in rows.iterator(chunk_size=2000):
        levels_of.setdefault(row[0], []).append(_level(*row))
    prices: dict[tuple[str, str], GpuPrice] = {}
    figures = []
    for trial in trials:
        run = trial.run
        experiment = experiment_rows[run.experiment_id]
        run.experiment = experiment
        levels = levels_of.get(trial.id, [])
        # The rule of runs.selectors.trial_costs, with the organization's prices read once.
        if run.price_usd_hr is not None:
            rate, source = run.price_usd_hr, "the pod's billed rate"
        else:
            key = (experiment.gpu_type_id, experiment.cloud_type)
            if key not in prices:
                prices[key] = gpu_price(
                    org=org, gpu_type=experiment.gpu_type, cloud_type=experiment.cloud_type
                )
            price = prices[key]
            rate = (
                None
                if price.usd_per_gpu_hour is None
                else pod_usd_per_hr(
                    gpu_usd_per_hr=price.usd_per_gpu_hour, gpu_count=experiment.gpu_count
                )
            )
            source = f"{price.source}; per GPU-hour × {experiment.gpu_count} GPU(s)"
        simulated = _is_simulated(run, experiment, levels)
        cost = trial_cost_per_million_output_tokens(
            levels,
            pod_usd_per_hr=rate,
            cold_start=trial.cold_start,
            price_source=source,
            simulated=simulated,
        )
        frozen = run.experiment_snapshot or {}
        figures.append(
            TrialFigure(
                trial=trial,
                run=run,
                experiment=experiment,
                model=experiment.model,
                gpu_type_id=run.pod_gpu_type or frozen.get("gpu_type") or experiment.gpu_type_id,
                gpu_count=int(frozen.get("gpu_count") or experiment.gpu_count),
                simulated=simulated,
                cost=cost,
                levels=tuple(levels),
            )
        )
    return figures


def _cost_key(figure: TrialFigure):
    # Cheapest first; a trial without a cost per token goes last.
    steady = figure.usd_per_million
    amortized = figure.cost.usd_per_million_output_tokens_cold_start_amortized
    return (
        steady is None,
        steady or Decimal(0),
        amortized is None,
        amortized or Decimal(0),
        str(figure.run.id),
        figure.trial.index,
    )


@dataclass(frozen=True)
class BestConfig:
    """The cheapest trial of one (model, GPU type, GPU count) and how many were compared."""

    best: TrialFigure
    trials_compared: int
    trials_priced: int


def best_configs(figures: Iterable[TrialFigure]) -> list[BestConfig]:
    """Per (model, GPU type, GPU count): the trial with the lowest cost per 1M output tokens
    at the SLOs. Callers pass measured and simulated figures separately."""
    groups: dict[tuple, list[TrialFigure]] = {}
    for figure in figures:
        groups.setdefault((figure.model.id, figure.gpu_type_id, figure.gpu_count), []).append(
            figure
        )
    rows = [
        BestConfig(
            best=min(group, key=_cost_key),
            trials_compared=len(group),
            trials_priced=sum(1 for f in group if f.usd_per_million is not None),
        )
        for group in groups.values()
    ]
    return sorted(rows, key=lambda row: (_cost_key(row.best), row.best.model.name))


@dataclass(frozen=True)
class ModelPoint:
    """One model's cheapest configuration, and whether it is on the Pareto front."""

    figure: TrialFigure
    pareto: bool


def model_points(figures: Iterable[TrialFigure]) -> list[ModelPoint]:
    """Per model, its cheapest priced trial; on the Pareto front of size (more parameters is
    better) against cost per token (less is better) when no other model is at least as large
    and at most as dear, and strictly one of the two. Largest model first."""
    cheapest: dict = {}
    for figure in figures:
        if figure.usd_per_million is None:
            continue
        current = cheapest.get(figure.model.id)
        if current is None or _cost_key(figure) < _cost_key(current):
            cheapest[figure.model.id] = figure
    points = list(cheapest.values())

    def dominated(a: TrialFigure) -> bool:
        return any(
            b.model.parameter_count >= a.model.parameter_count
            and b.usd_per_million <= a.usd_per_million
            and (
                b.model.parameter_count > a.model.parameter_count
                or b.usd_per_million < a.usd_per_million
            )
            for b in points
        )

    return sorted(
        (ModelPoint(figure=p, pareto=not dominated(p)) for p in points),
        key=lambda point: (-point.figure.model.parameter_count, point.figure.model.name),
    )


# --- Spend -------------------------------------------------------------------------------


@dataclass(frozen=True)
class MonthSpend:
    month: date
    runs: int
    spend_usd: Decimal
    budget_usd: Decimal | None
    budget_scope: str  # "month", "standing" or ""

    @property
    def remaining_usd(self) -> Decimal | None:
        return None if self.budget_usd is None else round_usd(self.budget_usd - self.spend_usd)

    @property
    def used_pct(self) -> Decimal | None:
        if not self.budget_usd:
            return None
        return (self.spend_usd / self.budget_usd * 100).quantize(TENTH, rounding=ROUND_HALF_EVEN)


def spend_by_month(*, org: Organization) -> list[MonthSpend]:
    """The organization's spend per UTC month (runs counted whole in the month they were
    started, as ``runs.costs.spend_by_month``), newest first, beside that month's budget (its
    own, else the standing one). Months with a budget but no run are listed too."""
    totals = {
        row["month"].date() if hasattr(row["month"], "date") else row["month"]: row
        for row in Run.objects.filter(organization=org)
        .annotate(month=TruncMonth("created_at", tzinfo=UTC))
        .values("month")
        .annotate(total=Sum("cost_usd"), runs=Count("id"))
        .order_by()
    }
    budgets = Budget.objects.filter(organization=org, experiment__isnull=True)
    standing = next((b for b in budgets if b.month is None), None)
    by_month = {b.month: b for b in budgets if b.month is not None}
    months = sorted(set(totals) | set(by_month), reverse=True)
    rows = []
    for month in months:
        budget = by_month.get(month) or standing
        row = totals.get(month)
        rows.append(
            MonthSpend(
                month=month,
                runs=row["runs"] if row else 0,
                spend_usd=round_usd(row["total"] if row else Decimal(0)),
                budget_usd=None if budget is None else budget.limit_usd,
                budget_scope="" if budget is None else budget.scope,
            )
        )
    return rows


@dataclass(frozen=True)
class ExperimentSpend:
    experiment: Experiment
    runs: int
    spend_usd: Decimal
    budget_usd: Decimal | None

    @property
    def remaining_usd(self) -> Decimal | None:
        return None if self.budget_usd is None else round_usd(self.budget_usd - self.spend_usd)

    @property
    def used_pct(self) -> Decimal | None:
        if not self.budget_usd:
            return None
        return (self.spend_usd / self.budget_usd * 100).quantize(TENTH, rounding=ROUND_HALF_EVEN)


def spend_by_experiment(*, org: Organization) -> list[ExperimentSpend]:
    """What each experiment's runs cost in total, beside the experiment's budget (a
    ``Budget`` on the experiment), dearest first; experiments without runs are left out."""
    totals = (
        Run.objects.filter(organization=org)
        .values("experiment_id")
        .annotate(total=Sum("cost_usd"), runs=Count("id"))
        .order_by()
    )
    totals = {row["experiment_id"]: row for row in totals}
    experiments = Experiment.objects.filter(organization=org, id__in=list(totals)).select_related(
        "model"
    )
    budgets = {
        b.experiment_id: b.limit_usd
        for b in Budget.objects.filter(organization=org, experiment__isnull=False)
    }
    rows = [
        ExperimentSpend(
            experiment=experiment,
            runs=totals[experiment.id]["runs"],
            spend_usd=round_usd(totals[experiment.id]["total"] or Decimal(0)),
            budget_usd=budgets.get(experiment.id),
        )
        for experiment in experiments
    ]
    return sorted(rows, key=lambda row: (-row.spend_usd, row.experiment.name))


# --- Model choice ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelChoice:
    """The recommendation for one experiment's workload and SLOs.

    ``measured``: priced measured trials of the experiment and of every experiment of the
    organization with the same workload and SLOs (so other models compete), cheapest first;
    ``recommended`` is the first of them. ``unpriced`` measured trials met no level (or had
    no price). ``simulated`` trials are listed apart and never recommended.
    """

    experiment: Experiment
    comparable: list[Experiment]
    measured: list[TrialFigure]
    unpriced: list[TrialFigure]
    simulated: list[TrialFigure]
    promoted: Promotion | None

    @property
    def recommended(self) -> TrialFigure | None:
        return self.measured[0] if self.measured else None

    @property
    def runners_up(self) -> list[TrialFigure]:
        return self.measured[1:6]

    @property
    def saving_pct(self) -> Decimal | None:
        """How much cheaper per token the recommendation is than the first runner-up."""
        if len(self.measured) < 2:
            return None
        best, second = self.measured[0].usd_per_million, self.measured[1].usd_per_million
        if not second:
            return None
        return ((second - best) / second * 100).quantize(TENTH, rounding=ROUND_HALF_EVEN)


def model_choice(*, experiment: Experiment) -> ModelChoice:
    """See ``ModelChoice``."""
    org = experiment.organization
    comparable = [
        other
        for other in Experiment.objects.filter(organization=org).select_related("model")
        if other.id == experiment.id
        or (other.workload == experiment.workload and (other.slos or {}) == (experiment.slos or {}))
    ]
    figures = trial_figures(org=org, experiments=comparable)
    measured = sorted((f for f in figures if not f.simulated), key=_cost_key)
    promoted = (
        Promotion.objects.filter(experiment=experiment, state=PromotionState.APPROVED)
        .select_related("trial__run", "proposed_by", "decided_by")
        .first()
    )
    return ModelChoice(
        experiment=experiment,
        comparable=comparable,
        measured=[f for f in measured if f.usd_per_million is not None],
        unpriced=[f for f in measured if f.usd_per_million is None],
        simulated=sorted((f for f in figures if f.simulated), key=_cost_key),
        promoted=promoted,
    )
