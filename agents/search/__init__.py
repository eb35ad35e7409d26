"""Spend less to know: search strategies that find the configuration of a serve grid with
the lowest cost at the SLOs while measuring only part of it (``strategies``), what a
configuration's figures mean to a search (``outcomes``), what a brief measurement is
(``effort``), the simulator fitted to real measurements as they come (``calibration``), and
trials on the simulator alone for tests and the benchmark (``simulated``)."""

from agents.search.calibration import Calibration, calibrate, level_points
from agents.search.effort import at_effort
from agents.search.outcomes import Outcome, outcome_of
from agents.search.strategies import (
    STRATEGIES,
    Fate,
    SearchResult,
    SearchSpec,
    SearchStopped,
    Strategy,
    Trials,
    run_search,
)

__all__ = [
    "STRATEGIES",
    "Calibration",
    "Fate",
    "Outcome",
    "SearchResult",
    "SearchSpec",
    "SearchStopped",
    "Strategy",
    "Trials",
    "at_effort",
    "calibrate",
    "level_points",
    "outcome_of",
    "run_search",
]
