"""The price-independent figures of a trial's levels, kept in the database once its run ends.

A report prices thousands of trials. What a trial's levels give — which level is the best
under the SLOs, its throughput and latencies, which loads met the SLOs, whether any level was
simulated — does not depend on the price, and never changes once the run has ended (ingest
refuses every message of an ended run, ``runs.services.ingest``). So it is derived once, when
the run's pod is released (``runs.services.level_figures.trial_level_figures_record``), and a
report reads one row per trial (``runs.models.TrialLevelFigures``) and applies today's price,
cold start and engine. This module derives and reads them; it writes nothing.

Guarantees:
- ``trial_cost`` over a trial's ``LevelFigures`` equals ``runs.costs``'
  ``trial_cost_per_million_output_tokens`` over all its levels, field for field: the kept
  levels are the ones that decide it (the chosen level, and one level of each other kind of
  load so the same notes are written).
- Only measured trials (succeeded or partial) of ended runs get a row; a row is written
  under ``FIGURES_RULES`` and a row of other rules is never read (reports compute such a
  trial from its levels), so a change to these rules only needs the number bumped —
  ``manage.py report_figures_backfill`` or the next release of a pod writes the new rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

from django.db import connections
from django.db.models import Func, JSONField, Value
from django.db.models.fields.json import KeyTransform

from agents import protocol
from runs.costs import (
    CLOSED_LOOP,
    OPEN_LOOP,
    RESULT_KEYS_READ,
    GpuShare,
    TrialCost,
    best_level_under_slos,
    level_is_simulated,
    level_load,
    qualifying_levels,
    trial_cost_per_million_output_tokens,
)

# Bump when what ``level_figures`` derives changes: rows of other rules are then ignored.
FIGURES_RULES = 1
# An SLO may be set on every latency metric, at its p99.
SLO_METRICS = protocol.LATENCY_METRICS

# What the reports read of a level's result (``runs.costs``' rules and the p99 latencies a
# ``runs.selectors.trial_figures.TrialFigure`` shows), all ``LevelResult`` fields:
# on PostgreSQL only these keys leave the database, so the rest of each result (dozens of
# percentiles) is never sent nor decoded. A figure's ``cost.level`` holds only these, and the
# level's load.
LEVEL_KEYS = (
    *RESULT_KEYS_READ,
    *(protocol.latency_field("p99", metric) for metric in SLO_METRICS),
)


class _LevelFigures(Func):
    """``result`` cut down to ``LEVEL_KEYS`` (a key the result lacks comes back null)."""

    function = "jsonb_build_object"
    output_field = JSONField()

    def __init__(self, column: str):
        pairs = [part for key in LEVEL_KEYS for part in (Value(key), KeyTransform(key, column))]
        super().__init__(*pairs)


def level_column(alias: str) -> str | Func:
    """The expression that reads a level's result for the reports on database ``alias``."""
    # Elsewhere (the SQLite demo) the whole result is read: the same keys, more bytes.
    return _LevelFigures("result") if connections[alias].vendor == "postgresql" else "result"


def report_level(concurrency, request_rate, infinite, result) -> dict:
    """One level as the reports see it: its result's ``LEVEL_KEYS`` and its load."""
    # As runs.selectors.trial_costs: the stored columns are authoritative for the load of a level. A
    # key the result lacks comes back null from PostgreSQL: left out, as it was.
    level = {k: v for k, v in result.items() if v is not None and k not in (CLOSED_LOOP, OPEN_LOOP)}
    if concurrency is not None:
        level[CLOSED_LOOP] = concurrency
    else:
        level[OPEN_LOOP] = "inf" if infinite else request_rate
    return level


def levels_of_trials(levels_query) -> dict[int, list[dict]]:
    """The report levels (``report_level``) of the measurements of ``levels_query``, per
    trial, in the order they were measured."""
    levels: dict[int, list[dict]] = {}
    for trial_id, *level in levels_query.order_by("created_at", "id").values_list(
        "trial_id",
        "concurrency",
        "request_rate",
        "request_rate_infinite",
        level_column(levels_query.db),
    ):
        levels.setdefault(trial_id, []).append(report_level(*level))
    return levels


@dataclass(frozen=True, slots=True)
class LevelFigures:
    """What a trial's levels give whatever the price (see the module docstring)."""

    deciding_levels: tuple[dict, ...]
    qualifying: tuple[str, ...]  # the loads of the levels that met the SLOs, in order
    levels_simulated: bool


def level_figures(levels: Iterable[dict]) -> LevelFigures:
    """The ``LevelFigures`` of a trial's report levels, in the order they were measured."""
    levels = list(levels)
    chosen = best_level_under_slos(levels)
    deciding = [] if chosen is None else [chosen]
    kinds = set() if chosen is None else {level_load(chosen)[0]}
    for level in levels:
        # The first level of every other kind: not ranked against the chosen one (or, with
        # none chosen, not qualifying), it only tells trial_cost which kinds were measured.
        kind = level_load(level)[0]
        if kind not in kinds:
            kinds.add(kind)
            deciding.append(level)
    return LevelFigures(
        deciding_levels=tuple(deciding),
        qualifying=tuple(
            dict.fromkeys(  # each load once, however often it was measured
                f"{kind}={level[kind]}"
                for level in qualifying_levels(levels)
                for kind, _ in [level_load(level)]
            )
        ),
        levels_simulated=any(level_is_simulated(level) for level in levels),
    )


def trial_cost(
    figures: LevelFigures,
    *,
    pod_usd_per_hr: Decimal | None,
    price_source: str,
    simulated_engine: bool,
    cold_start: dict,
    share: GpuShare | None,
) -> TrialCost:
    """The trial's ``TrialCost`` at this price for its ``share`` of the pod's GPUs
    (``runs.costs`` does every sum)."""
    return trial_cost_per_million_output_tokens(
        figures.deciding_levels,
        pod_usd_per_hr=pod_usd_per_hr,
        share=share,
        cold_start=cold_start,
        price_source=price_source,
        simulated=simulated_engine or figures.levels_simulated,
    )


def stored_level_figures(
    rules, deciding_levels: list, qualifying: list, levels_simulated: bool
) -> LevelFigures | None:
    """``LevelFigures`` from a ``TrialLevelFigures`` row's columns; None when it was written
    under other rules."""
    if rules != FIGURES_RULES:
        return None
    return LevelFigures(
        deciding_levels=tuple(deciding_levels),
        qualifying=tuple(qualifying),
        levels_simulated=levels_simulated,
    )
