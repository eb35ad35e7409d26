"""The regression gate: a new run against a baseline, config by config, level by level.

Guarantees (pure: no network, no clock; ``docs/cli.md`` documents the rules):

- Trials are paired by their exact serve configuration, measurements by their load level
  (``concurrency=8``, ``request_rate=inf``): every metric is compared at every level both
  runs measured, so a regression at one load is not averaged away by another.
- A run that measured its grid on several vLLM images (its trials' ``image_tag``) keys each
  configuration by image too, labelled ``v0.12.0 · max_num_seqs=64``: one configuration on
  two images is two configurations, never one. Runs of one image keep the plain label, so
  their gate files and baselines read as before. Against a run of one image, every image of
  the other run is paired with the same configuration (each version gated against that
  baseline); two runs of several images pair image with image. Every row names the images it
  compared (``image``: ``v0.12.0``, or ``v0.11.0 → v0.12.0`` when the baseline's differs).
- A threshold's sign says which way is worse. ``p99_ttft_ms=10%`` fails when the new value is
  more than 10 % *higher* than the baseline's; ``output_throughput=-5%`` fails when it is more
  than 5 % *lower*. The change is ``(new − baseline) ÷ baseline``.
- A configuration the baseline measured that the new run did not (its trial failed, or one of
  the workload's fixed levels is missing) fails the gate: a config that stopped working is the
  worst regression. A capacity search's probe load that only one of the two runs visited
  (each search probes where its own measurements lead) is shown, never a failure.
- A load measured several times in a run (a search's repeats, a fixed level the search probed
  again) is judged on all its measurements: the figure is their mean and its interval spans
  every measurement's interval.
- ``cost_per_mtok`` is USD per 1M output tokens at the level: the run's pod rate × the GPUs
  the configuration uses ÷ the pod's (``figures.gpu_share``) ÷ 3600 ÷ output tokens/s × 1e6
  (``figures.costs``: the rules ``runs/costs.py`` prices by too), so costs compare per GPU
  used across pods of different GPU counts. A run without a billed rate (the local
  provider) has none; such rows read ``n/a``, never fail (also at a level the new run did not
  measure), and the result says why in ``not_compared`` so a cost threshold never passes
  without saying it checked nothing.
- Where both levels carry a 95 % interval of a figure (``ci95``), the change has one too,
  conservatively from the two, and a threshold fails only when that whole interval lies
  beyond it; an interval that holds 0 reads "within noise". A figure without intervals
  (results stored before them, ITL) is gated on its point estimate, and its row says "no
  interval". The change, its interval and its words (``worse by 12 % (CI 8–16 %)``,
  ``better by 5 % (CI 2–9 %)``, ``within noise (CI −3–+4 %)``) are ``figures.deltas``', the
  site's history and comparison pages' own.
- When both runs' answers name a winner (a capacity search ran), each paired configuration
  also compares its capacity at the SLOs (the trials' ``capacity``; ``[bracket_low,
  capacity_upper_load)`` is its interval); informational unless a ``capacity``
  threshold is given, then gated like the figures (a higher capacity is better).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Any

from benchsite_cli.level_results import level_figure, level_interval
from figures.costs import usd_per_million_output_tokens
from figures.deltas import change_interval_pct, change_pct, change_wording
from figures.gpu_share import GpuShare
from figures.level_results import FIGURES, OUTPUT_THROUGHPUT
from figures.levels import load_key

# Every figure of a level's result may be gated, its cost per token (derived here) and a
# configuration's capacity at the SLOs (its trial's capacity search).
COST_METRIC = "cost_per_mtok"
CAPACITY_METRIC = "capacity"
KNOWN_METRICS = FIGURES | {COST_METRIC, CAPACITY_METRIC}
# The "level" of a configuration's capacity row: the load the SLOs allow, not a measured one.
CAPACITY_LEVEL = "at the SLOs"
# The verdict of a capacity probe's load that only one of the two runs measured.
PROBE = "probe"


class ThresholdError(ValueError):
    """A ``--max-regression`` value that cannot be read; the message names the part."""


@dataclass(frozen=True)
class Threshold:
    """Fail when ``metric`` changes by more than ``limit_pct`` in the limit's direction."""

    metric: str
    limit_pct: float

    def text(self) -> str:
        return f"{self.limit_pct:+g}%"

    @property
    def higher_is_better(self) -> bool:
        return self.limit_pct < 0

    def breached(self, change_pct: float, interval: tuple[float, float] | None = None) -> bool:
        """With an interval, only when all of it lies beyond the limit; else the point."""
        if interval is not None:
            low, high = interval
            return low > self.limit_pct if self.limit_pct > 0 else high < self.limit_pct
        if self.limit_pct > 0:
            return change_pct > self.limit_pct
        return change_pct < self.limit_pct


def parse_thresholds(spec: str) -> list[Threshold]:
    """``"p99_ttft_ms=10%,output_throughput=-5%"`` → thresholds, in the order given."""
    thresholds: list[Threshold] = []
    seen: set[str] = set()
    for part in (piece.strip() for piece in spec.split(",")):
        if not part:
            continue
        metric, sep, value = part.partition("=")
        metric, value = metric.strip(), value.strip()
        if not sep or not metric or not value:
            raise ThresholdError(f"{part!r}: expected METRIC=PERCENT%, e.g. p99_ttft_ms=10%")
        if metric not in KNOWN_METRICS:
            raise ThresholdError(
                f"{metric!r} is not a metric; use one of {', '.join(sorted(KNOWN_METRICS))}"
            )
        if metric in seen:
            raise ThresholdError(f"{metric!r} is given twice")
        if not value.endswith("%"):
            raise ThresholdError(f"{part!r}: the limit is a percentage and ends with '%'")
        try:
            limit = float(value[:-1])
        except ValueError:
            raise ThresholdError(f"{part!r}: {value[:-1]!r} is not a number") from None
        if not math.isfinite(limit) or limit == 0:
            # 0 has no sign, so no direction: which way would be "worse"?
            raise ThresholdError(
                f"{part!r}: the limit must be a non-zero finite percentage (its sign says "
                "which way is worse: + for higher, - for lower)"
            )
        seen.add(metric)
        thresholds.append(Threshold(metric, limit))
    if not thresholds:
        raise ThresholdError("no thresholds given")
    return thresholds


def config_label(serve_config: dict[str, Any]) -> str:
    """A serve configuration as one stable, readable string (``max_num_seqs=8 …``); none
    set reads ``vLLM defaults``, as on the site."""
    if not serve_config:
        return "vLLM defaults"
    return " ".join(f"{key}={json.dumps(serve_config[key])}" for key in sorted(serve_config))


def image_config_label(image: str, config: str, *, several_images: bool) -> str:
    """``v0.12.0 · max_num_seqs=64`` when the runs gated measured several images (the site's
    rule for a trial's label, ``runs.selectors.run_levels``), else the config's own label."""
    return f"{image} · {config}" if several_images and image else config


def image_text(base_image: str, new_image: str) -> str:
    """The images a row compared: ``v0.12.0``, or ``v0.11.0 → v0.12.0`` when the baseline
    ran another; "" when neither run names one (the simulator, or a site before image tags)."""
    if not base_image or not new_image or base_image == new_image:
        return new_image or base_image
    return f"{base_image} → {new_image}"


def level_label(level: dict[str, Any]) -> str:
    """``concurrency=8`` or ``request_rate=2.0`` / ``request_rate=inf``: a measurement's load
    as the gate pairs and reports it (``figures.levels.load_key``)."""
    return load_key(
        concurrency=level.get("concurrency"),
        request_rate=level.get("request_rate"),
        infinite=bool(level.get("request_rate_infinite")),
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            value = float(value)  # decimals arrive from the API as strings
        except (TypeError, ValueError):
            return None
    return float(value) if math.isfinite(float(value)) else None


def metric_value(level: dict[str, Any], metric: str, price_usd_hr: Any) -> float | None:
    """One metric of a level's result; ``cost_per_mtok`` derived from the run's pod rate."""
    if metric != COST_METRIC:
        return _number(level_figure(level, metric))
    rate, throughput = _number(price_usd_hr), _number(level_figure(level, OUTPUT_THROUGHPUT))
    # A rate of 0 is "not billed" (local pods), not "free": it would make every cost equal.
    if rate is None or rate <= 0 or not throughput:
        return None
    return usd_per_million_output_tokens(rate, throughput)


def metric_interval(
    level: dict[str, Any], metric: str, price_usd_hr: Any
) -> tuple[float, float] | None:
    """A metric's 95 % interval at a level (None when the result has none); the cost's is
    the throughput's, inverted (more tokens per second is a lower cost)."""
    if metric == COST_METRIC:
        rate = _number(price_usd_hr)
        throughput = _interval(level_interval(level, OUTPUT_THROUGHPUT))
        if rate is None or rate <= 0 or throughput is None or throughput[0] <= 0:
            return None
        return (
            usd_per_million_output_tokens(rate, throughput[1]),
            usd_per_million_output_tokens(rate, throughput[0]),
        )
    return _interval(level_interval(level, metric))


def _interval(bounds: tuple[Any, Any] | None) -> tuple[float, float] | None:
    if bounds is None:
        return None
    low, high = (_number(bound) for bound in bounds)
    return None if low is None or high is None or low > high else (low, high)


# A trial's configuration as the gate keys it: (its image tag or "", its config label).
ConfigKey = tuple[str, str]


def _trials(run: dict[str, Any], only_trial: int | None) -> list[dict[str, Any]]:
    return [
        trial
        for trial in run.get("trials") or []
        if only_trial is None or trial.get("index") == only_trial
    ]


def _config_key(trial: dict[str, Any]) -> ConfigKey:
    return str(trial.get("image_tag") or ""), config_label(trial.get("serve_config") or {})


def run_levels(
    run: dict[str, Any], only_trial: int | None = None
) -> dict[ConfigKey, dict[str, list[dict[str, Any]]]]:
    """{(image, config label): {level label: every result measured at that load, in order}}
    of a run detail's measured trials."""
    configs: dict[ConfigKey, dict[str, list[dict[str, Any]]]] = {}
    for trial in _trials(run, only_trial):
        levels = configs.setdefault(_config_key(trial), {})
        for measurement in trial.get("measurements") or []:
            result = measurement.get("result") or {}
            levels.setdefault(level_label(measurement), []).append(result)
    return configs


def only_probed(results: list[dict[str, Any]]) -> bool:
    """Whether a load was measured only as a capacity search's probe (not a fixed level of
    the workload, which every run of the experiment measures)."""
    return all(result.get("probe") for result in results)


def pooled_value(results: list[dict[str, Any]], metric: str, price_usd_hr: Any) -> float | None:
    """A metric over every measurement of one load: their mean (None when one lacks it)."""
    values = [metric_value(result, metric, price_usd_hr) for result in results]
    if not values or any(value is None for value in values):
        return None
    return math.fsum(values) / len(values)


def pooled_interval(
    results: list[dict[str, Any]], metric: str, price_usd_hr: Any
) -> tuple[float, float] | None:
    """The interval spanning every measurement's interval of a metric at one load (None
    when one has none)."""
    intervals = [metric_interval(result, metric, price_usd_hr) for result in results]
    if not intervals or any(interval is None for interval in intervals):
        return None
    return min(low for low, _ in intervals), max(high for _, high in intervals)


def run_prices(run: dict[str, Any], only_trial: int | None = None) -> dict[ConfigKey, Any]:
    """{(image, config label): the USD per hour its cost per token is priced at}: the run's
    pod rate × the GPUs the configuration uses ÷ the pod's (``GpuShare``, the site's rule),
    so a TP=1 trial on a 4-GPU pod and one on a 1-GPU pod compare per GPU used. The pod rate
    as it is when the run does not say its pod's GPU count (its ``job_spec``)."""
    rate = _number(run.get("price_usd_hr"))
    pod_gpus = ((run.get("job_spec") or {}).get("engine") or {}).get("gpu_count")
    prices = {}
    for trial in _trials(run, only_trial):
        price = run.get("price_usd_hr")
        if rate is not None and isinstance(pod_gpus, int) and pod_gpus >= 1:
            share = GpuShare.of(trial.get("serve_config"), pod_gpus=pod_gpus)
            price = share.rate_for(rate)
        prices[_config_key(trial)] = price
    return prices


def run_capacities(
    run: dict[str, Any], only_trial: int | None = None
) -> dict[ConfigKey, dict[str, Any] | None]:
    """{(image, config label): the trial's capacity search result, None without one}."""
    return {_config_key(trial): trial.get("capacity") or None for trial in _trials(run, only_trial)}


@dataclass(frozen=True)
class _Pair:
    """A baseline configuration and where the new run's should be (``new`` is its key, found
    or not), under the label the gate shows."""

    label: str
    base: ConfigKey
    new: ConfigKey

    @property
    def image(self) -> str:
        return image_text(self.base[0], self.new[0])


def _pairs(base: list[ConfigKey], new: list[ConfigKey]) -> tuple[list[_Pair], list[str]]:
    """Each baseline configuration paired with the new run's (see the module docstring), by
    label; and the labels of the new run's configurations no baseline one was paired with."""
    base_images = sorted({image for image, _ in base if image})
    new_images = sorted({image for image, _ in new if image})
    several = len(base_images) > 1 or len(new_images) > 1
    pairs = []
    for image, config in base:
        if len(new_images) > 1:
            # Image with image when both runs measured several; else every image of the new
            # run against this one baseline configuration.
            wanted = [image] if len(base_images) > 1 else new_images
        else:
            wanted = new_images or [""]
        for new_image in wanted:
            label_image = image if len(base_images) > 1 else new_image
            label = image_config_label(label_image, config, several_images=several)
            pairs.append(_Pair(label, (image, config), (new_image, config)))
    if len(new_images) <= 1:
        # A run of one image names it on every trial (or on none): its configurations are
        # found by config alone, whatever the baseline's image.
        by_config = {config: (image, config) for image, config in new}
        pairs = [
            _Pair(pair.label, pair.base, by_config.get(pair.new[1], pair.new)) for pair in pairs
        ]
    paired = {pair.new for pair in pairs}
    unmatched = sorted(
        {
            image_config_label(image, config, several_images=several)
            for image, config in new
            if (image, config) not in paired
        }
    )
    return sorted(pairs, key=lambda pair: pair.label), unmatched


def _answered(run: dict[str, Any]) -> bool:
    winner = (run.get("answer") or {}).get("winner") or {}
    return _number(winner.get("capacity")) is not None


@dataclass(frozen=True)
class Row:
    config: str
    level: str
    metric: str
    baseline: float | None
    new: float | None
    change_pct: float | None
    limit: Threshold | None  # None: informational (a capacity without a threshold)
    # "ok", "regression", "missing" (a fixed level not measured by the new run), "n/a",
    # "info", "probe" (a capacity probe's load only one run measured: shown, never failed)
    verdict: str
    interval_pct: tuple[float, float] | None = None  # the change's 95 % interval
    higher_is_better: bool = False
    image: str = ""  # the images compared (``image_text``); "" when neither run names one
    flags: str = ""  # the serve configuration alone: ``config`` less its image

    @property
    def config_cell(self) -> str:
        """What the table's config column shows: the image has a column of its own."""
        return self.flags or self.config

    @property
    def failed(self) -> bool:
        return self.verdict in ("regression", "missing")

    @property
    def change_text(self) -> str:
        """The change in words, with its interval (or "no interval")."""
        if self.change_pct is None:
            return "—"
        return change_wording(
            self.change_pct, self.interval_pct, higher_is_better=self.higher_is_better
        )

    @property
    def limit_text(self) -> str:
        return "—" if self.limit is None else self.limit.text()

    @property
    def why(self) -> str:
        """Why the verdict, where the interval decided it or there was none to decide."""
        if self.verdict == "missing":
            return "not measured by the new run"
        if self.verdict == PROBE:
            side = "the baseline" if self.new is None else "the new run"
            return f"a capacity probe's load only {side} measured: shown, not gated"
        if self.verdict == "info":
            return "informational (no capacity threshold)"
        if self.limit is None or self.change_pct is None:
            return ""
        if self.verdict == "regression":
            if self.interval_pct is None:
                return f"beyond the threshold {self.limit_text} (no interval: the point decides)"
            return f"the whole CI lies beyond the threshold {self.limit_text}"
        if self.interval_pct is not None and self.limit.breached(self.change_pct):
            return f"the CI is not beyond the threshold {self.limit_text}"
        return ""

    @property
    def verdict_text(self) -> str:
        return f"{self.verdict}: {self.why}" if self.why else self.verdict


@dataclass
class GateResult:
    new_run: str
    baseline_run: str
    baseline_kind: str
    rows: list[Row] = field(default_factory=list)
    unmatched_configs: list[str] = field(default_factory=list)  # new configs, no baseline
    # {metric: why it read n/a}: thresholds that checked nothing somewhere, said out loud.
    not_compared: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return any(row.failed for row in self.rows)

    def regressions(self) -> list[Row]:
        return [row for row in self.rows if row.failed]

    def as_json(self) -> dict[str, Any]:
        return {
            "new_run": self.new_run,
            "baseline_run": self.baseline_run,
            "baseline": self.baseline_kind,
            "passed": not self.failed,
            "rows": [
                {
                    "config": row.config,
                    "image": row.image,
                    "level": row.level,
                    "metric": row.metric,
                    "baseline": row.baseline,
                    "new": row.new,
                    "change_pct": row.change_pct,
                    "change_ci95_pct": None if row.interval_pct is None else list(row.interval_pct),
                    "change": row.change_text,
                    "limit_pct": None if row.limit is None else row.limit.limit_pct,
                    "verdict": row.verdict,
                    "why": row.why,
                }
                for row in self.rows
            ],
            "configs_without_baseline": self.unmatched_configs,
            "not_compared": self.not_compared,
        }


def promoted_baseline_kind(*, trial_index: int, simulated: bool) -> str:
    """How a gate names an approved promotion as its baseline: the CLI's and a schedule's
    verdicts read alike, and a sandbox's simulated promotion says it is one."""
    return f"promoted (trial {trial_index}{', simulated' if simulated else ''})"


class NothingToCompare(ValueError):
    """The baseline measured nothing: a gate over nothing cannot pass."""


def gate_compare(
    *,
    new_run: dict[str, Any],
    baseline_run: dict[str, Any],
    thresholds: list[Threshold],
    baseline_kind: str,
    baseline_trial: int | None = None,
) -> GateResult:
    """Every threshold at every (config, level) of the baseline; ``baseline_trial`` narrows
    the baseline to one trial (a promotion's), and the new run's other configs are then
    listed as not gated."""
    base = run_levels(baseline_run, only_trial=baseline_trial)
    new = run_levels(new_run)
    pairs, unmatched = _pairs(list(base), list(new))
    result = GateResult(
        new_run=str(new_run.get("id")),
        baseline_run=str(baseline_run.get("id")),
        baseline_kind=baseline_kind,
        unmatched_configs=unmatched,
    )
    if not base:
        raise NothingToCompare(f"the baseline run {result.baseline_run} has no measurements")
    capacity_limit = next((t for t in thresholds if t.metric == CAPACITY_METRIC), None)
    figure_limits = [t for t in thresholds if t.metric != CAPACITY_METRIC]
    # Capacities are compared when gated, or (for information) when both runs searched.
    capacities = capacity_limit is not None or (_answered(new_run) and _answered(baseline_run))
    base_capacity = run_capacities(baseline_run, only_trial=baseline_trial)
    new_capacity = run_capacities(new_run)
    base_prices = run_prices(baseline_run, only_trial=baseline_trial)
    new_prices = run_prices(new_run)
    for pair in pairs:
        config, measured = pair.label, pair.new in new
        prices = base_prices.get(pair.base), new_prices.get(pair.new)
        base_levels, new_levels = base[pair.base], new.get(pair.new, {})
        rows = []
        for level in sorted(set(base_levels) | set(new_levels), key=_level_order):
            before_results, after_results = base_levels.get(level), new_levels.get(level)
            for threshold in figure_limits:
                metric = threshold.metric
                before = before_results and pooled_value(before_results, metric, prices[0])
                after = after_results and pooled_value(after_results, metric, prices[1])
                if before_results is None or after_results is None:
                    rows.append(
                        _unpaired_row(config, level, threshold, before, after, before_results)
                    )
                    continue
                intervals = (
                    pooled_interval(before_results, metric, prices[0]),
                    pooled_interval(after_results, metric, prices[1]),
                )
                rows.append(_row(config, level, threshold, before, after, intervals))
        if capacities and (capacity_limit is not None or measured):
            rows.append(
                _capacity_row(
                    config,
                    base_capacity.get(pair.base),
                    new_capacity.get(pair.new) if measured else None,
                    capacity_limit,
                    missing=not measured,
                )
            )
        result.rows += [replace(row, image=pair.image, flags=pair.base[1]) for row in rows]
    result.not_compared = _why_not_compared(result, new_run, baseline_run)
    return result


def _why_not_compared(
    result: GateResult, new_run: dict[str, Any], baseline_run: dict[str, Any]
) -> dict[str, str]:
    """Why each metric with ``n/a`` rows could not be compared, one sentence per metric."""
    counts: dict[str, list[int]] = {}
    for row in result.rows:
        seen = counts.setdefault(row.metric, [0, 0])
        seen[0] += row.verdict == "n/a"
        seen[1] += 1
    reasons = {}
    for metric, (na, total) in counts.items():
        if not na:
            continue
        where = "at every level" if na == total else f"at {na} of {total} levels"
        if metric == CAPACITY_METRIC:
            where = "for every configuration" if na == total else f"for {na} of {total}"
            reasons[metric] = (
                f"n/a {where}: a trial without a capacity search on both sides (or one on "
                "another axis), not gated there"
            )
            continue
        if metric != COST_METRIC:
            reasons[metric] = f"n/a {where}: not reported by the load generator, not gated there"
            continue
        unbilled = [
            f"{side} run {run.get('id')}"
            for side, run in (("new", new_run), ("baseline", baseline_run))
            if (_number(run.get("price_usd_hr")) or 0) <= 0
        ]
        if unbilled:
            reasons[metric] = (
                f"n/a {where}: the {' and the '.join(unbilled)} "
                f"{'has' if len(unbilled) == 1 else 'have'} no billed pod rate (the local "
                "provider bills nothing), so cost is not gated"
            )
        else:
            reasons[metric] = f"n/a {where}: no output throughput to price, not gated there"
    return reasons


def _unpaired_row(
    config: str, level: str, threshold: Threshold, before, after, base_results
) -> Row:
    """A load only one run measured: a probe's is shown; a fixed level the new run lacks
    fails, unless the metric could not be compared anyway (an unbilled run's cost)."""
    unbilled = threshold.metric == COST_METRIC and before is None
    if base_results is None or only_probed(base_results):
        verdict = PROBE
    else:
        verdict = "n/a" if unbilled else "missing"
    return Row(config, level, threshold.metric, before, after, None, threshold, verdict)


def _row(config: str, level: str, threshold: Threshold, before, after, intervals) -> Row:
    if before is None or after is None:
        return Row(config, level, threshold.metric, before, after, None, threshold, "n/a")
    change = change_pct(after, before)
    base_interval, new_interval = intervals
    interval = (
        change_interval_pct(new_interval, base_interval)
        if base_interval is not None and new_interval is not None
        else None
    )
    verdict = "regression" if threshold.breached(change, interval) else "ok"
    return Row(
        config,
        level,
        threshold.metric,
        before,
        after,
        change,
        threshold,
        verdict,
        interval,
        threshold.higher_is_better,
    )


def capacity_upper_load(search: dict[str, Any]) -> float | None:
    """The load below which a search's true capacity lies: the lowest one confidently missed
    above the capacity (``first_missed``), else (none was, or a search reported before
    verdicts) the bracket's high end. The one rule of the capacity's interval, here and in
    the site's answer (``runs.selectors.run_answer``)."""
    return _number(search.get("first_missed")) or _number(search.get("bracket_high"))


def _capacity(search: dict[str, Any] | None) -> tuple[float, tuple[float, float]] | None:
    """A capacity search's capacity and ``[low, upper)`` as its interval (``upper``:
    ``capacity_upper_load``, +inf when no load failed); a search that found no load meeting
    the SLOs is 0, below its first failing load. None without a search."""
    if not search or not search.get("axis"):
        return None
    capacity = _number(search.get("capacity"))
    high = capacity_upper_load(search)
    high = math.inf if high is None else high
    if capacity is None:
        return 0.0, (0.0, high)
    low = _number(search.get("bracket_low"))
    return capacity, (capacity if low is None else low, max(high, capacity))


def _capacity_row(
    config: str,
    base_search: dict[str, Any] | None,
    new_search: dict[str, Any] | None,
    threshold: Threshold | None,
    *,
    missing: bool,
) -> Row:
    axis = (base_search or new_search or {}).get("axis")
    level = f"{CAPACITY_LEVEL} ({axis})" if axis else CAPACITY_LEVEL
    before, after = _capacity(base_search), _capacity(new_search)
    cells = (config, level, CAPACITY_METRIC, before and before[0], after and after[0])
    if missing:
        return Row(*cells, None, threshold, "missing", higher_is_better=True)
    same_axis = new_search is not None and new_search.get("axis") == axis
    if before is None or after is None or not same_axis:
        verdict = "n/a" if threshold is not None else "info"
        return Row(*cells, None, threshold, verdict, higher_is_better=True)
    change = change_pct(after[0], before[0])
    interval = change_interval_pct(after[1], before[1])
    if threshold is None:
        verdict = "info"
    else:
        verdict = "regression" if threshold.breached(change, interval) else "ok"
    return Row(*cells, change, threshold, verdict, interval, higher_is_better=True)


def _level_order(label: str) -> tuple[str, float]:
    kind, _, value = label.partition("=")
    number = _number(value) if value != "inf" else math.inf
    return kind, number if number is not None else math.inf


def format_value(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"


# The columns every rendering of the gate's table shows before its verdict; an ``image``
# column comes first when a row names one (``result_columns``).
ROW_COLUMNS = ("config", "level", "metric", "baseline", "new", "change", "limit")
IMAGE_COLUMN = "image"


def shows_images(result: GateResult) -> bool:
    """Whether the table has an image column: some row names the images it compared (a table
    of runs that name none, the simulator's, has no empty column)."""
    return any(row.image for row in result.rows)


def result_columns(result: GateResult) -> tuple[str, ...]:
    """The columns of ``result``'s table before its verdict (``row_cells`` fills them)."""
    return (IMAGE_COLUMN, *ROW_COLUMNS) if shows_images(result) else ROW_COLUMNS


def row_cells(row: Row, *, image: bool = False) -> tuple[str, ...]:
    """``row`` as text under ``ROW_COLUMNS`` (``result_columns`` with ``image``): the terminal
    table and the Markdown file agree."""
    cells = (
        row.config_cell,
        row.level,
        row.metric,
        format_value(row.baseline),
        format_value(row.new),
        row.change_text,
        row.limit_text,
    )
    return (row.image or "—", *cells) if image else cells
