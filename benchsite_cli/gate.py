"""The regression gate: a new run against a baseline, config by config, level by level.

Guarantees (pure: no network, no clock; ``docs/cli.md`` documents the rules):

- Trials are paired by their exact serve configuration, measurements by their load level
  (``concurrency=8``, ``request_rate=inf``): every metric is compared at every level both
  runs measured, so a regression at one load is not averaged away by another.
- A threshold's sign says which way is worse. ``p99_ttft_ms=10%`` fails when the new value is
  more than 10 % *higher* than the baseline's; ``output_throughput=-5%`` fails when it is more
  than 5 % *lower*. The change is ``(new − baseline) ÷ baseline``.
- A configuration the baseline measured that the new run did not (its trial failed, or a level
  is missing) fails the gate: a config that stopped working is the worst regression.
- ``cost_per_mtok`` is USD per 1M output tokens at the level: the run's pod rate ÷ 3600 ÷
  output tokens/s × 1e6 (``runs/costs.py``'s formula). A run without a billed rate (the local
  provider) has none; such rows read ``n/a``, never fail, and the result says why in
  ``not_compared`` so a cost threshold never passes without saying it checked nothing.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from benchsite_cli.level_results import FIGURES, OUTPUT_THROUGHPUT, level_figure

# Every figure of a level's result may be gated, and its cost per token (derived here).
COST_METRIC = "cost_per_mtok"
KNOWN_METRICS = FIGURES | {COST_METRIC}


class ThresholdError(ValueError):
    """A ``--max-regression`` value that cannot be read; the message names the part."""


@dataclass(frozen=True)
class Threshold:
    """Fail when ``metric`` changes by more than ``limit_pct`` in the limit's direction."""

    metric: str
    limit_pct: float

    def text(self) -> str:
        return f"{self.limit_pct:+g}%"

    def breached(self, change_pct: float) -> bool:
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
    """A serve configuration as one stable, readable string (``max_num_seqs=8 …``)."""
    if not serve_config:
        return "(engine defaults)"
    return " ".join(f"{key}={json.dumps(serve_config[key])}" for key in sorted(serve_config))


def level_label(level: dict[str, Any]) -> str:
    """``concurrency=8`` or ``request_rate=2.0`` / ``request_rate=inf`` (a measurement's load)."""
    if level.get("request_rate_infinite") or level.get("request_rate") == "inf":
        return "request_rate=inf"
    if level.get("concurrency") is not None:
        return f"concurrency={level['concurrency']}"
    return f"request_rate={level.get('request_rate')}"


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
    return rate / 3600 / throughput * 1_000_000


def run_levels(
    run: dict[str, Any], only_trial: int | None = None
) -> dict[str, dict[str, dict[str, Any]]]:
    """{config label: {level label: level result}} of a run detail's measured trials."""
    configs: dict[str, dict[str, dict[str, Any]]] = {}
    for trial in run.get("trials") or []:
        if only_trial is not None and trial.get("index") != only_trial:
            continue
        levels = configs.setdefault(config_label(trial.get("serve_config") or {}), {})
        for measurement in trial.get("measurements") or []:
            result = measurement.get("result") or {}
            levels[level_label(measurement)] = result
    return configs


@dataclass(frozen=True)
class Row:
    config: str
    level: str
    metric: str
    baseline: float | None
    new: float | None
    change_pct: float | None
    limit: Threshold
    verdict: str  # "ok", "regression", "missing" (not measured by the new run), "n/a"

    @property
    def failed(self) -> bool:
        return self.verdict in ("regression", "missing")


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
                    "level": row.level,
                    "metric": row.metric,
                    "baseline": row.baseline,
                    "new": row.new,
                    "change_pct": row.change_pct,
                    "limit_pct": row.limit.limit_pct,
                    "verdict": row.verdict,
                }
                for row in self.rows
            ],
            "configs_without_baseline": self.unmatched_configs,
            "not_compared": self.not_compared,
        }


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
    result = GateResult(
        new_run=str(new_run.get("id")),
        baseline_run=str(baseline_run.get("id")),
        baseline_kind=baseline_kind,
        unmatched_configs=sorted(set(new) - set(base)),
    )
    if not base:
        raise NothingToCompare(f"the baseline run {result.baseline_run} has no measurements")
    for config in sorted(base):
        for level in sorted(base[config], key=_level_order):
            base_level = base[config][level]
            new_level = new.get(config, {}).get(level)
            for threshold in thresholds:
                metric = threshold.metric
                before = metric_value(base_level, metric, baseline_run.get("price_usd_hr"))
                if new_level is None:
                    row = Row(config, level, metric, before, None, None, threshold, "missing")
                    result.rows.append(row)
                    continue
                after = metric_value(new_level, threshold.metric, new_run.get("price_usd_hr"))
                result.rows.append(_row(config, level, threshold, before, after))
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


def _row(config: str, level: str, threshold: Threshold, before, after) -> Row:
    if before is None or after is None:
        return Row(config, level, threshold.metric, before, after, None, threshold, "n/a")
    if before == 0:
        change = 0.0 if after == 0 else math.copysign(math.inf, after)
    else:
        change = (after - before) / abs(before) * 100
    verdict = "regression" if threshold.breached(change) else "ok"
    return Row(config, level, threshold.metric, before, after, change, threshold, verdict)


def _level_order(label: str) -> tuple[str, float]:
    kind, _, value = label.partition("=")
    number = _number(value) if value != "inf" else math.inf
    return kind, number if number is not None else math.inf


def format_value(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"


def format_change(row: Row) -> str:
    if row.change_pct is None:
        return "—"
    if math.isinf(row.change_pct):
        return "+inf%" if row.change_pct > 0 else "-inf%"
    return f"{row.change_pct:+.1f}%"


# The columns every rendering of the gate's table shows before its verdict.
ROW_COLUMNS = ("config", "level", "metric", "baseline", "new", "change", "limit")


def row_cells(row: Row) -> tuple[str, ...]:
    """``row`` as text under ``ROW_COLUMNS``: the terminal table and the Markdown file agree."""
    return (
        row.config,
        row.level,
        row.metric,
        format_value(row.baseline),
        format_value(row.new),
        format_change(row),
        row.limit.text(),
    )
