"""A measurement's result as the site's API answers it (the protocol's ``LevelResult``,
dumped to JSON): the one place the CLI names the figures it reads of a load level.

Guarantee: every name is a ``LevelResult`` field. The names are ``figures.level_results``',
which the agent's protocol declares its fields from: the CLI shares no code with the agent's
package (its import contract), and both import that pure one. ``level_figure`` refuses any
other name, so a reader elsewhere in the CLI cannot ask for a figure no result carries;
``level_interval`` reads a figure's 95 % confidence interval (``ci95``) under the same rule,
and answers None for a result stored before intervals were sent, or a figure that has none
(ITL).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from figures.level_results import CI95, FIGURES, OUTPUT_THROUGHPUT, latency_field

# What a run's summary shows of each level.
SUMMARY_FIGURES = (latency_field("p99", "ttft"), latency_field("p99", "itl"), OUTPUT_THROUGHPUT)


def level_figure(result: Mapping[str, Any], name: str) -> Any:
    """The figure ``name`` of a level's result as the API sent it (None when absent)."""
    if name not in FIGURES:
        raise KeyError(f"{name!r} is not a figure of a level's result")
    return result.get(name)


def level_interval(result: Mapping[str, Any], name: str) -> tuple[Any, Any] | None:
    """The 95 % interval of the figure ``name`` as ``(low, high)`` as the API sent them, or
    None when the result carries none for it."""
    if name not in FIGURES:
        raise KeyError(f"{name!r} is not a figure of a level's result")
    intervals = result.get(CI95)
    interval = intervals.get(name) if isinstance(intervals, Mapping) else None
    if not isinstance(interval, Mapping):
        return None
    return interval.get("low"), interval.get("high")
