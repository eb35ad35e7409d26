"""The gate's metric names and every result figure the CLI reads are the protocol's
LevelResult fields (issue 15): both take the names from ``figures.level_results``; the few the
protocol spells in its own class (the SLO attainment, ``ci95``) are held to it here."""

from __future__ import annotations

import pytest

from agents import protocol
from benchsite_cli import gate, level_results


def test_every_measured_metric_of_the_gate_is_a_level_result_field():
    measured = gate.KNOWN_METRICS - {gate.COST_METRIC, gate.CAPACITY_METRIC}
    assert measured <= protocol.LevelResult.model_fields.keys()
    # A configuration's capacity is its trial's capacity search result's, not a level's.
    assert gate.CAPACITY_METRIC in protocol.CapacityResult.model_fields


def test_every_result_figure_the_cli_reads_is_a_level_result_field():
    read = {
        *level_results.FIGURES,
        *level_results.SUMMARY_FIGURES,
        level_results.CI95,
    }
    assert read <= protocol.LevelResult.model_fields.keys()


def test_it_refuses_to_read_a_figure_no_result_carries():
    with pytest.raises(KeyError, match="p99_ttft"):
        level_results.level_figure({"p99_ttft": 1.0}, "p99_ttft")
    assert level_results.level_figure({"p99_ttft_ms": 1.0}, "p99_ttft_ms") == 1.0
