"""The figures every report reads: each measured trial of an organization priced at its
best level under the SLOs (``trial_figures``).

Guarantees:
- Every figure is computed by ``runs.costs`` (exact ``Decimal``, rounded once to 0.0001 USD)
  with the pricing rule of ``runs.selectors.trial_costs``, read in a fixed number of queries
  whatever the number of runs. A trial of an ended run is read as one row of its level
  figures (``runs.selectors.level_figures``, kept when its pod is released) to which today's
  price, cold start and engine are applied: nothing price-, engine- or SLO-dependent is kept
  in the database, so a change of those is seen by the next report. A trial without figures
  of today's rules is worked out from its levels. The priced figures of ended runs are kept
  in this process too (``runs.selectors.ended_trial_figures`` says why that is never
  stale).
- Where a trial's capacity search found a capacity (``Trial.capacity``), its figure also
  gives the cost per 1M output tokens there (``runs.selectors.run_answer``'s rule, at the
  same pod rate), and reports rank by it (``cost_order``): trials without one follow, by
  their best fixed level's cost, labelled so (``ranked_by``).
- Simulated figures are never ranked with measured ones: each figure says ``simulated``, and
  a trial counts as simulated when its run's frozen experiment or its experiment says
  ``engine: sim`` or any of its levels carries the simulator's ``simulated`` label.
- Only the organization's own rows are read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal
from uuid import UUID

from django.db.models import CharField
from django.db.models.functions import Cast
from django.utils import timezone

from agents import protocol
from runs import run_as_started
from runs.costs import GpuShare, TrialCost, level_is_simulated
from runs.models import (
    Experiment,
    GpuType,
    Measurement,
    ModelSpec,
    Organization,
    Run,
    Trial,
    TrialLevelFigures,
)
from runs.models.experiments import engine_is_simulated
from runs.models.runs import MEASURED_OUTCOMES, TERMINAL_RUN_STATES
from runs.run_as_started import frozen_value
from runs.selectors import level_figures
from runs.selectors.delivery import delivery_grace
from runs.selectors.ended_trial_figures import PricedTrial, ended_trial_figures
from runs.selectors.level_figures import (
    SLO_METRICS,
    LevelFigures,
    levels_of_trials,
    stored_level_figures,
    trial_cost,
)
from runs.selectors.prices import GpuPrice, gpu_price, pod_rate_from_price
from runs.selectors.run_answer import capacity_usd_per_million

TENTH = Decimal("0.1")


def tenth(value) -> Decimal | None:
    """A measured float (ms, tokens/s) as an exact decimal to one place, half to even."""
    if value is None:
        return None
    return Decimal(str(value)).quantize(TENTH, rounding=ROUND_HALF_EVEN)


@dataclass(frozen=True, slots=True)
class TrialFigure:
    """One trial's cost at its best level under the SLOs, with what a report shows beside it.

    Made from a few columns, not from model instances (a report holds thousands): ``trial``
    and ``run`` are built when asked for, from the columns read; their other fields, the
    run's frozen experiment among them, load on access.
    """

    trial_id: int
    trial_index: int
    serve_config: dict
    image_tag: str  # the vLLM image it ran on ("" for the simulator): reports split by it
    run_key: str  # the run's id as the database spells it (a UUID object per row costs)
    experiment: Experiment
    model: ModelSpec
    gpu_type_id: str
    gpu_count: int
    simulated: bool
    cost: TrialCost
    slos: dict  # the run's frozen SLOs, else its experiment's
    qualifying: tuple[str, ...]  # the loads of the levels that met the SLOs, in order
    capacity: dict | None  # what the trial's capacity search found (``Trial.capacity``)
    _db: str = field(repr=False, compare=False)  # where the row was read
    _row: tuple = field(repr=False, compare=False)  # the trial's row in trial_figures()

    @property
    def run_id(self) -> UUID:
        return UUID(self.run_key)

    @property
    def run(self) -> Run:
        row = self._row
        run = _partial_instance(
            Run,
            self._db,
            id=self.run_id,
            organization_id=self.experiment.organization_id,
            experiment_id=self.experiment.id,
            state=row.run__state,
            pod_gpu_type=row.run__pod_gpu_type,
            price_usd_hr=row.run__price_usd_hr,
        )
        run.experiment = self.experiment
        return run

    @property
    def trial(self) -> Trial:
        row = self._row
        trial = _partial_instance(
            Trial,
            self._db,
            id=row.id,
            run_id=self.run_id,
            index=row.index,
            serve_config=row.serve_config,
            image_tag=row.image_tag,
            cold_start=row.cold_start,
            outcome=row.outcome,
        )
        trial.run = self.run
        return trial

    @property
    def usd_per_million(self) -> Decimal | None:
        return self.cost.usd_per_million_output_tokens

    @property
    def usd_per_million_at_capacity(self) -> Decimal | None:
        """The cost per 1M output tokens at the capacity its search found, at the pod rate
        it was priced at (``runs.selectors.run_answer``'s rule); None without one."""
        return capacity_usd_per_million(
            self.capacity, pod_usd_per_hr=self.cost.pod_usd_per_hr, share=self.cost.share
        )

    @property
    def ranked_at_capacity(self) -> bool:
        """Whether it is ranked by its cost at capacity (else by its best fixed level's)."""
        return self.usd_per_million_at_capacity is not None

    @property
    def ranking_usd_per_million(self) -> Decimal | None:
        """The cost it is ranked by: at capacity where its search found one, else at its best
        fixed level under the SLOs (``cost_order``)."""
        at_capacity = self.usd_per_million_at_capacity
        return self.usd_per_million if at_capacity is None else at_capacity

    @property
    def ranked_by(self) -> str:
        """What ``ranking_usd_per_million`` is, in words (a report's label)."""
        if self.ranked_at_capacity:
            return "capacity"
        return "best fixed level" if self.usd_per_million is not None else ""

    @property
    def throughput_per_gpu(self) -> Decimal | None:
        tput = self.cost.output_throughput_tok_s
        return None if tput is None else tenth(tput / self.gpu_count)

    def p99_ms(self, metric: str) -> Decimal | None:
        level = self.cost.level
        return None if level is None else tenth(level.get(protocol.latency_field("p99", metric)))

    def headroom_pct(self) -> dict[str, Decimal | None]:
        """Per SLO given: how far below its target the chosen level's p99 is, in percent."""
        headroom: dict[str, Decimal | None] = {}
        level = self.cost.level or {}
        for metric in SLO_METRICS:
            target = self.slos.get(f"{metric}_ms")
            if target is None:
                continue
            p99 = level.get(protocol.latency_field("p99", metric))
            if p99 is None:
                headroom[metric] = None
                continue
            target = Decimal(str(target))
            share = (target - Decimal(str(p99))) / target * 100
            headroom[metric] = share.quantize(TENTH, rounding=ROUND_HALF_EVEN)
        return headroom

    def qualifying_loads(self) -> list[str]:
        return list(self.qualifying)


def _partial_instance(model, db: str, **values):
    """An instance of ``model`` as loaded from ``db`` with only ``values`` (by attname); its
    other fields load on first access, like ``QuerySet.only()``."""
    names = [f.attname for f in model._meta.concrete_fields if f.attname in values]
    return model.from_db(db, names, [values[name] for name in names])


def trial_is_simulated(trial: Trial) -> bool:
    """Whether a trial's figures come from the simulator (see the module docstring)."""
    if run_as_started.run_is_simulated(trial.run):
        return True
    return any(level_is_simulated(m.result) for m in trial.measurements.all())


# Below this many trials to work out from their levels, their levels are read by id; above,
# all of the report's.
_LEVELS_BY_ID = 500


def trial_figures(
    *, org: Organization, experiments: Iterable[Experiment] | None = None
) -> list[TrialFigure]:
    """Every measured trial of the organization's runs — succeeded, or partial: cut short,
    its measured levels count — (of ``experiments`` when given), priced at its best level
    under its experiment's SLOs. A trial of an ended run is read
    with its level figures (``runs.selectors.level_figures``) instead of its levels, and priced once
    per pricing in this process (``runs.selectors.ended_trial_figures``)."""
    trials = Trial.objects.filter(organization=org, outcome__in=MEASURED_OUTCOMES)
    levels_query = Measurement.objects.filter(
        organization=org, trial__outcome__in=MEASURED_OUTCOMES
    )
    if experiments is not None:
        wanted = [e.id for e in experiments]
        trials = trials.filter(run__experiment__in=wanted)
        levels_query = levels_query.filter(trial__run__experiment__in=wanted)
    # Plain rows, and of the frozen experiment only the keys a report reads: thousands of
    # rows, where model instances and whole JSON documents would take most of the time.
    rows = list(
        trials.annotate(
            frozen_engine=frozen_value(run_as_started.ENGINE_KIND_PATH, via="run__", text=True),
            frozen_gpu_type=frozen_value(run_as_started.GPU_TYPE_PATH, via="run__", text=True),
            frozen_gpu_count=frozen_value(run_as_started.GPU_COUNT_PATH, via="run__"),
            frozen_cloud=frozen_value(run_as_started.CLOUD_TYPE_PATH, via="run__", text=True),
            frozen_slos=frozen_value(run_as_started.SLOS_PATH, via="run__"),
            # Ids as text: thousands of UUID objects would outlive the loop, for the garbage
            # collector to walk.
            run_key=Cast("run_id", CharField()),
            experiment_key=Cast("run__experiment_id", CharField()),
        )
        .order_by("run__created_at", "run_id", "index")
        .values_list(
            "id",
            "index",
            "serve_config",
            "image_tag",
            "cold_start",
            "run_key",
            "experiment_key",
            "outcome",
            "run__state",
            "run__finished_at",
            "run__pod_gpu_type",
            "run__price_usd_hr",
            "frozen_engine",
            "frozen_gpu_type",
            "frozen_gpu_count",
            "frozen_cloud",
            "frozen_slos",
            "capacity",
            named=True,
        )
    )
    # Few experiments, models and GPU types: read once each, not once per trial.
    experiment_rows = {}
    experiments_read = Experiment.objects.filter(
        organization=org, id__in={row.experiment_key for row in rows}
    )
    for e in experiments_read.select_related("model", "gpu_type"):
        # PostgreSQL spells a UUID with dashes, SQLite as 32 hex digits.
        experiment_rows[str(e.id)] = experiment_rows[e.id.hex] = e
    pricings: dict[tuple, tuple] = {}
    gpu_prices: dict[tuple[str, str], GpuPrice] = {}
    gpu_types = GpuType.objects.in_bulk({row.frozen_gpu_type for row in rows})

    def pricing_of(row) -> tuple:
        # A few distinct pricings (GPUs as started, a billed rate): worked out once each.
        key = (
            row.frozen_gpu_type,
            row.frozen_cloud,
            row.frozen_gpu_count,
            row.run__price_usd_hr,
            row.frozen_engine,
        )
        if key not in pricings:
            pricings[key] = _pricing(
                org=org,
                gpu_type=gpu_types[row.frozen_gpu_type],
                cloud_type=row.frozen_cloud,
                gpu_count=int(row.frozen_gpu_count),
                billed_rate=row.run__price_usd_hr,
                frozen_engine=row.frozen_engine,
                gpu_prices=gpu_prices,
            )
        return pricings[key]

    # A trial of an ended run priced before at the same pricing is taken from this
    # process's memory; the others are priced from their level figures, kept (one row each,
    # read here) or, when none are kept, worked out from the levels read here.
    rules = level_figures.FIGURES_RULES
    computed: dict[int, PricedTrial] = {}
    pending = []
    # An ended run's agent may still deliver levels for the delivery grace: frozen after it.
    frozen_before = timezone.now() - delivery_grace()

    def frozen(row) -> bool:
        # A run ended without an end time (imported, or older than end times) takes nothing.
        return row.run__state in TERMINAL_RUN_STATES and (
            row.run__finished_at is None or row.run__finished_at <= frozen_before
        )

    for row in rows:
        entry = frozen(row) and ended_trial_figures.get(
            row.id, row.run_key, (rules, pricing_of(row))
        )
        if entry:
            computed[row.id] = entry
        else:
            pending.append(row)
    level_figures_of: dict[int, LevelFigures] = {}
    ended_pending = {row.id for row in pending if row.run__state in TERMINAL_RUN_STATES}
    if ended_pending:
        kept = TrialLevelFigures.objects.filter(organization=org, rules=rules)
        if len(ended_pending) <= _LEVELS_BY_ID:
            kept = kept.filter(trial_id__in=ended_pending)
        else:
            kept = kept.filter(trial__in=trials)
        for trial_id, *figures in kept.values_list(
            "trial_id", "deciding_levels", "qualifying", "levels_simulated"
        ):
            if trial_id in ended_pending:  # only an ended run's levels are frozen
                level_figures_of[trial_id] = stored_level_figures(rules, *figures)
    missing = [row.id for row in pending if row.id not in level_figures_of]
    if missing:
        if len(missing) <= _LEVELS_BY_ID:
            levels_query = levels_query.filter(trial_id__in=missing)
        levels = levels_of_trials(levels_query)
        for trial_id in missing:
            level_figures_of[trial_id] = level_figures.level_figures(levels.get(trial_id, []))
    ended = {}
    for row in pending:
        rate, source, simulated_engine = pricing = pricing_of(row)
        levels = level_figures_of[row.id]
        share = GpuShare.of(row.serve_config, pod_gpus=int(row.frozen_gpu_count))
        entry = computed[row.id] = PricedTrial(
            run_key=row.run_key,
            key=(rules, pricing),
            cost=trial_cost(
                levels,
                pod_usd_per_hr=rate,
                price_source=source,
                simulated_engine=simulated_engine,
                cold_start=row.cold_start,
                share=share,
            ),
            qualifying=levels.qualifying,
            levels_simulated=levels.levels_simulated,
        )
        if frozen(row):
            ended[row.id] = entry
    ended_trial_figures.put_many(ended)

    figures = []
    for row in rows:
        experiment = experiment_rows[row.experiment_key]
        entry = computed[row.id]
        figures.append(
            TrialFigure(
                trial_id=row.id,
                trial_index=row.index,
                serve_config=row.serve_config,
                image_tag=row.image_tag,
                run_key=row.run_key,
                experiment=experiment,
                model=experiment.model,
                gpu_type_id=row.run__pod_gpu_type or row.frozen_gpu_type,
                gpu_count=int(row.frozen_gpu_count),
                simulated=entry.key[1][2] or entry.levels_simulated,
                cost=entry.cost,
                slos=row.frozen_slos,
                qualifying=entry.qualifying,
                capacity=row.capacity,
                _db=trials.db,
                _row=row,
            )
        )
    return figures


def _pricing(
    *, org, gpu_type, cloud_type, gpu_count, billed_rate, frozen_engine, gpu_prices
) -> tuple:
    """(pod rate, its source, simulated by engine) by the rule of runs.selectors.trial_costs,
    for the GPUs a run was started with; the organization's GPU prices are read once per
    report (``gpu_prices``)."""
    if billed_rate is not None:
        rate, source = billed_rate, "the pod's billed rate"
    else:
        key = (gpu_type.id, cloud_type)
        if key not in gpu_prices:
            gpu_prices[key] = gpu_price(org=org, gpu_type=gpu_type, cloud_type=cloud_type)
        rate, source = pod_rate_from_price(gpu_prices[key], gpu_count)
    return rate, source, engine_is_simulated(frozen_engine)


def cost_order(figure: TrialFigure):
    """The order of figures by cost, cheapest first: those with a cost at the capacity their
    search found, by it; then the others by their best fixed level's (steady, then with cold
    start amortized); a trial without a cost per token last; ties by run and trial."""
    ranking = figure.ranking_usd_per_million
    amortized = figure.cost.usd_per_million_output_tokens_cold_start_amortized
    return (
        ranking is None,
        not figure.ranked_at_capacity,
        ranking or Decimal(0),
        amortized is None,
        amortized or Decimal(0),
        # Sorts as str(run_id) would: the same lowercase hex digits, dashes (if any) at the
        # same places in every key.
        figure.run_key,
        figure.trial_index,
    )
