"""A run's answer: for each configuration its capacity at the SLOs and the cost per 1M output
tokens there, then the recommended configuration with its margin over the runner-up, or a
tie when the margin is within noise.

Guarantees:

- Only trials whose capacity search found a capacity take part (``Trial.capacity``, what the
  agent's search reported); a trial without one is listed with its reason.
- Cost at capacity = the rate of the GPUs the configuration uses (the pod's × its share,
  ``runs.costs.GpuShare``) ÷ the output throughput measured at capacity × 1e6
  (``runs.costs.level_cost_per_million_output_tokens``, the same rule as every level's cost),
  so configurations of different parallelism compare per GPU used; each says what it is
  priced for (``priced_for``: "priced for 1 of 4 GPUs").
  Its 95 % interval holds the capacity's own uncertainty: from the low end of the throughput's
  interval at capacity (``ci95.output_throughput`` of its measurements, with the pod-to-pod
  spread: ``agents.loadgen.confidence``) to the high end of the throughput's interval at the
  lowest load above it that was confidently missed (``capacity_upper_load``; the bracket's
  high end when none was) — the true capacity lies anywhere between the two, and a load
  between them delivers between their throughputs.
- The winner is the cheapest at capacity. Its margin over the runner-up is the runner-up's
  extra cost in %, with a 95 % interval from the two cost intervals (their relative errors
  in quadrature); "tie" when that interval holds 0 (the difference is within noise), and
  then both are named. The same margin over
  vLLM's defaults (the first trial whose configuration is ``{}``, when the run has one: on the
  experiment's own image when it compares several).
- A run whose experiment sets a quality floor (frozen when it started,
  ``runs.run_as_started.run_quality_floor``) ranks only the configurations that keep it
  (``runs.selectors.trial_quality.quality_floor_exclusions``: absolute, within N
  percentage points of the best priced configuration's score, or within N points of the
  best model's score on the run's evaluation among comparable experiments,
  ``runs.selectors.model_floor.run_model_best``); the others are listed in
  ``excluded_for_quality`` with the reason, after the ranked ones. A configuration without
  a score stays in, marked ``quality not judged`` (why: not scored yet, or simulated) in its
  ``quality_floor`` and in ``quality_not_judged``. Each configuration's ``quality_floor``
  says how it stands ("" without a floor).
- A run over several image tags answers across them: each configuration on each image is one
  candidate, named with its image.
- Each configuration carries its exact ``vllm serve`` command, as promotion would ship it.
- Simulated runs say so (``simulated``): their figures are the modelled hardware's.
- Pure reads of the run's own rows (and, for a floor below the best model, of its
  organization's scores on the same evaluation).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from decimal import Decimal

from agents import protocol
from benchsite_cli.gate import capacity_upper_load
from runs.costs import GpuShare, level_cost_per_million_output_tokens
from runs.models import Run, Trial
from runs.recipes import trial_recipe
from runs.run_as_started import run_is_simulated, run_quality_floor
from runs.selectors.level_results import stored_level_result
from runs.selectors.model_floor import run_model_best
from runs.selectors.trial_costs import trial_costs, trial_gpu_share
from runs.selectors.trial_quality import (
    ModelBest,
    is_model_floor,
    quality_floor_standings,
    quality_floor_text,
    run_quality,
)


@dataclass(frozen=True)
class ConfigAnswer:
    """One configuration's capacity at the SLOs and what a token costs there."""

    trial: int
    serve_config: dict
    image_tag: str  # the vLLM image it ran on ("" for the simulator)
    serve_command: str  # what promotion would ship (runs.recipes)
    axis: str | None
    capacity: float | None
    bracket_low: float | None
    bracket_high: float | None
    probes: int
    bracket_high_verdict: str | None
    stop_reason: str | None
    output_throughput: float | None
    output_throughput_ci95: tuple[float, float] | None
    usd_per_million_output_tokens: Decimal | None
    usd_per_million_ci95: tuple[Decimal, Decimal] | None
    note: str = ""
    # "priced for 1 of 4 GPUs" (runs.costs.GpuShare.describe); "" on a 1-GPU pod.
    priced_for: str = ""
    # Its score on the run's evaluation and drift from the reference configuration
    # (runs.selectors.trial_quality; None: the run has no evaluation).
    quality: dict | None = None
    # How it stands against the run's quality floor (trial_quality.FloorStanding's text):
    # "meets the quality floor", "excluded: <reason>", "quality not judged: <why>"; ""
    # without a floor or a cost to rank by.
    quality_floor: str = ""


@dataclass(frozen=True)
class Margin:
    """How much more ``other`` costs than the winner at capacity, in % of the winner's cost,
    its 95 % interval (when both costs have one), and whether that is within noise."""

    pct: float
    ci95_pct: tuple[float, float] | None
    tie: bool

    def as_json(self) -> dict:
        """The margin as JSON (the API, the CLI and the pages)."""
        return {
            "pct": self.pct,
            "ci95_pct": list(self.ci95_pct) if self.ci95_pct else None,
            "tie": self.tie,
        }


def cost_margin(winner: ConfigAnswer, other: ConfigAnswer) -> Margin | None:
    """The margin of ``winner`` over ``other`` (None when either has no cost)."""
    best, second = winner.usd_per_million_output_tokens, other.usd_per_million_output_tokens
    if best is None or second is None or best <= 0:
        return None
    interval = None
    tie = False
    if winner.usd_per_million_ci95 and other.usd_per_million_ci95:
        # The two costs' relative errors combine in quadrature (they are independent
        # measurements); overlapping intervals would claim about 99.5 %, not 95 %.
        best_low, best_high = (float(bound) / float(best) for bound in winner.usd_per_million_ci95)
        second_low, second_high = (
            float(bound) / float(second) for bound in other.usd_per_million_ci95
        )
        ratio = float(second) / float(best)
        down = math.hypot(1 - second_low, best_high - 1)
        up = math.hypot(second_high - 1, 1 - best_low)
        interval = ((ratio * (1 - down) - 1) * 100, (ratio * (1 + up) - 1) * 100)
        tie = interval[0] <= 0  # the other may cost no more than the winner
    return Margin(float((second - best) / best * 100), interval, tie)


@dataclass(frozen=True)
class RunAnswer:
    """The run's recommendation and every configuration's figures, cheapest first."""

    simulated: bool
    slos: str
    pod_usd_per_hr: Decimal | None
    configs: list[ConfigAnswer]
    winner: ConfigAnswer | None
    runner_up: ConfigAnswer | None
    tie: bool
    margin_pct: float | None  # the runner-up's extra cost at capacity, in % of the winner's
    margin_ci95_pct: tuple[float, float] | None
    defaults: ConfigAnswer | None = None  # the trial with vLLM's defaults, if any
    over_defaults: Margin | None = None  # the winner's margin over it
    quality_floor: dict | None = None  # the floor applied (run_quality_floor), None: none
    # Priced configurations the floor excluded: {"trial", "image_tag", "reason"} each.
    excluded_for_quality: list[dict] = field(default_factory=list)
    # Priced configurations ranked without a score: {"trial", "image_tag", "reason"} each.
    quality_not_judged: list[dict] = field(default_factory=list)

    @property
    def quality_floor_text(self) -> str | None:
        """The floor in words (``trial_quality.quality_floor_text``); None without one."""
        return None if self.quality_floor is None else quality_floor_text(self.quality_floor)

    def as_json(self) -> dict:
        """The answer as the API and the CLI show it (money as strings)."""

        def config_json(config: ConfigAnswer | None) -> dict | None:
            if config is None:
                return None
            data = dict(vars(config))
            data["usd_per_million_output_tokens"] = _text(config.usd_per_million_output_tokens)
            data["usd_per_million_ci95"] = (
                None
                if config.usd_per_million_ci95 is None
                else [_text(bound) for bound in config.usd_per_million_ci95]
            )
            data["output_throughput_ci95"] = (
                None
                if config.output_throughput_ci95 is None
                else list(config.output_throughput_ci95)
            )
            return data

        return {
            "simulated": self.simulated,
            "slos": self.slos,
            "pod_usd_per_hr": _text(self.pod_usd_per_hr),
            "winner": config_json(self.winner),
            "runner_up": config_json(self.runner_up),
            "tie": self.tie,
            "margin_pct": self.margin_pct,
            "margin_ci95_pct": list(self.margin_ci95_pct) if self.margin_ci95_pct else None,
            "defaults": config_json(self.defaults),
            "over_defaults": None if self.over_defaults is None else self.over_defaults.as_json(),
            "configs": [config_json(config) for config in self.configs],
            "quality_floor": self.quality_floor,
            "quality_floor_text": self.quality_floor_text,
            "excluded_for_quality": self.excluded_for_quality,
            "quality_not_judged": self.quality_not_judged,
        }


def _text(amount: Decimal | None) -> str | None:
    return None if amount is None else str(amount)


def _at_load(trial: Trial, axis: str, load: float) -> list[protocol.LevelResult]:
    results = []
    for measurement in trial.measurements.all():
        value = measurement.concurrency if axis == "concurrency" else measurement.request_rate
        if value is not None and float(value) == float(load):
            results.append(stored_level_result(measurement.result))
    return results


def _throughput_interval(results: list[protocol.LevelResult]) -> tuple[float, float] | None:
    # Over repeats, the widest: each repeat's own interval, and the spread between them.
    bounds = [
        r.ci95["output_throughput"] for r in results if r.ci95 and "output_throughput" in r.ci95
    ]
    values = [r.output_throughput for r in results if r.output_throughput is not None]
    if not bounds:
        return (min(values), max(values)) if len(values) > 1 else None
    return (
        min([bound.low for bound in bounds] + values),
        max([bound.high for bound in bounds] + values),
    )


def capacity_usd_per_million(
    capacity: dict | None, *, pod_usd_per_hr, share: GpuShare | None
) -> Decimal | None:
    """The cost per 1M output tokens at the capacity a trial's search found (its
    ``Trial.capacity``): the rate of the GPUs it uses (the pod's × ``share``) ÷ the output
    throughput measured there (``runs.costs``); None without a capacity, a throughput or a
    rate. The one rule every page ranks by."""
    if not capacity or capacity.get("capacity") is None:
        return None
    return _price(capacity.get("output_throughput"), pod_usd_per_hr, share)


def capacity_cost_ci95(
    trial: Trial, *, pod_usd_per_hr, share: GpuShare | None
) -> tuple[Decimal, Decimal] | None:
    """The 95 % interval of ``capacity_usd_per_million`` from the throughput's interval at
    that load (its measurements there; read them with ``prefetch_related("measurements")``)."""
    interval = _capacity_throughput_interval(trial)
    if interval is None or interval[0] <= 0 or pod_usd_per_hr is None:
        return None
    # More tokens per second is a lower cost: the bounds swap.
    return (
        _price(interval[1], pod_usd_per_hr, share),
        _price(interval[0], pod_usd_per_hr, share),
    )


def _price(
    tokens_per_s: float | None, rate: Decimal | None, share: GpuShare | None
) -> Decimal | None:
    if rate is None or not tokens_per_s:
        return None
    return level_cost_per_million_output_tokens(
        output_throughput_tok_s=tokens_per_s, pod_usd_per_hr=rate, share=share
    )


def _capacity_throughput_interval(trial: Trial) -> tuple[float, float] | None:
    capacity = trial.capacity or {}
    if capacity.get("capacity") is None:
        return None
    axis = capacity["axis"]
    upper = capacity_upper_load(capacity)
    return capacity_throughput_interval(
        capacity,
        at_capacity=_at_load(trial, axis, capacity["capacity"]),
        at_upper_load=[] if upper is None else _at_load(trial, axis, upper),
    )


def capacity_throughput_interval(
    capacity: dict,
    *,
    at_capacity: list[protocol.LevelResult],
    at_upper_load: list[protocol.LevelResult],
) -> tuple[float, float] | None:
    """The throughput at the true capacity, somewhere between the capacity and the load
    above which it cannot lie (``capacity_upper_load``): from the low end of its interval at
    the capacity (``at_capacity``: its measurements there) to the high end at that load
    (``at_upper_load``); the one rule of the answer's cost interval (module docstring), also
    for ``benchmarks/reproducibility.py``."""
    if capacity.get("capacity") is None:
        return None
    low = _throughput_interval(at_capacity)
    if low is None or not at_upper_load:
        return low
    high = _throughput_interval(at_upper_load)
    highest = max(
        [low[1]]
        + ([high[1]] if high else [])
        + [r.output_throughput for r in at_upper_load if r.output_throughput is not None]
    )
    return low[0], highest


def _config_answer(trial: Trial, rate: Decimal | None) -> ConfigAnswer:
    capacity = trial.capacity or {}
    share = trial_gpu_share(trial)
    found = capacity.get("capacity")
    note = ""
    if not capacity:
        note = {
            "succeeded": "no capacity search",
            "pending": "not measured yet",
            "running": "still measuring: no capacity yet",
        }.get(trial.outcome, f"trial {trial.outcome}")
    elif found is None:
        note = "no load met the SLOs"
    return ConfigAnswer(
        trial=trial.index,
        serve_config=trial.serve_config,
        image_tag=trial.image_tag,
        serve_command=trial_recipe(trial=trial)["serve_command"],
        axis=capacity.get("axis"),
        capacity=found,
        bracket_low=capacity.get("bracket_low"),
        bracket_high=capacity.get("bracket_high"),
        probes=capacity.get("probes", 0),
        bracket_high_verdict=capacity.get("bracket_high_verdict"),
        stop_reason=capacity.get("stop_reason"),
        output_throughput=capacity.get("output_throughput"),
        output_throughput_ci95=_capacity_throughput_interval(trial),
        usd_per_million_output_tokens=capacity_usd_per_million(
            capacity, pod_usd_per_hr=rate, share=share
        ),
        usd_per_million_ci95=capacity_cost_ci95(trial, pod_usd_per_hr=rate, share=share),
        note=note,
        # One GPU in the pod: nothing to say (every configuration uses the whole pod).
        priced_for="" if share is None or share.pod == 1 else share.describe(),
    )


def run_answer(*, run: Run) -> RunAnswer:
    """The answer of ``run`` (see the module docstring)."""
    trials = list(run.trials.order_by("index").prefetch_related("measurements"))
    rate = trial_costs(trial=trials[0]).pod_usd_per_hr if trials else None
    quality = run_quality(run=run, trials=trials)
    configs = [
        dataclasses.replace(answer, quality=quality[answer.trial].as_json())
        if answer.trial in quality
        else answer
        for answer in (_config_answer(trial, rate) for trial in trials)
    ]
    priced = sorted(
        (c for c in configs if c.usd_per_million_output_tokens is not None),
        key=lambda c: c.usd_per_million_output_tokens,
    )
    floor = run_quality_floor(run) if quality else None
    # A floor below the best model is measured from scores beyond this run's.
    best_model = run_model_best(run) if is_model_floor(floor) else None
    priced, excluded, unjudged = _apply_floor(floor, priced, best_model)
    winner = priced[0] if priced else None
    runner_up = priced[1] if len(priced) > 1 else None
    margin = cost_margin(winner, runner_up) if winner and runner_up else None
    unpriced = [c for c in configs if c.usd_per_million_output_tokens is None]
    ordered = priced + excluded + unpriced  # as the floor marked them
    defaults = next((c for c in ordered if c.serve_config == {}), None)
    over_defaults = None
    if winner is not None and defaults is not None and defaults is not winner:
        over_defaults = cost_margin(winner, defaults)
    slos = protocol.Slos.model_validate(run.job_spec.get("slos") or {})
    return RunAnswer(
        simulated=run_is_simulated(run),
        slos=slos.describe(),
        pod_usd_per_hr=rate,
        configs=ordered,
        winner=winner,
        runner_up=runner_up,
        tie=margin is not None and margin.tie,
        margin_pct=None if margin is None else margin.pct,
        margin_ci95_pct=None if margin is None else margin.ci95_pct,
        defaults=defaults,
        over_defaults=over_defaults,
        quality_floor=floor,
        excluded_for_quality=[
            _listed(c, c.quality_floor.removeprefix("excluded: ")) for c in excluded
        ],
        quality_not_judged=[_listed(c, c.quality_floor) for c in unjudged],
    )


def _listed(config: ConfigAnswer, reason: str) -> dict:
    return {"trial": config.trial, "image_tag": config.image_tag, "reason": reason}


def _apply_floor(
    floor: dict | None, priced: list[ConfigAnswer], best_model: ModelBest | None
) -> tuple[list[ConfigAnswer], list[ConfigAnswer], list[ConfigAnswer]]:
    """``priced`` split by ``floor``: those ranked (unjudged ones included), those excluded,
    and the ranked ones without a score; each marked with how it stands."""
    standings = quality_floor_standings(floor, {c.trial: c.quality for c in priced}, best_model)
    if not standings:
        return priced, [], []
    kept, excluded, unjudged = [], [], []
    for config in priced:
        standing = standings[config.trial]
        marked = dataclasses.replace(config, quality_floor=standing.text)
        (kept if standing.kept else excluded).append(marked)
        if not standing.judged:
            unjudged.append(marked)
    return kept, excluded, unjudged
