"""The gate's metric names and every result figure the CLI reads are the protocol's
LevelResult fields (issue 15): the CLI may not import the agent's package, so this test holds
the two spellings to one truth."""

from __future__ import annotations

import pytest

from agents import protocol
from benchsite_cli import gate, level_results


def test_the_gates_latency_metrics_are_the_level_results():
    expected = {
        f"{statistic}_{metric}_ms"
        for metric in protocol.LATENCY_METRICS
        for statistic in protocol.LATENCY_STATISTICS
    }
    assert set(level_results.LATENCY_FIGURES) == expected


def test_every_measured_metric_of_the_gate_is_a_level_result_field():
    measured = gate.KNOWN_METRICS - {gate.COST_METRIC, gate.CAPACITY_METRIC}
    assert measured <= protocol.LevelResult.model_fields.keys()
    # A configuration's capacity is its trial's capacity search result's, not a level's.
    assert gate.CAPACITY_METRIC in protocol.CapacityResult.model_fields


def test_every_result_figure_the_cli_reads_is_a_level_result_field():
    read = {
        *level_results.FIGURES,
        *level_results.SUMMARY_FIGURES,
        level_results.OUTPUT_THROUGHPUT,
        level_results.DURATION,
    }
    assert read <= protocol.LevelResult.model_fields.keys()


def test_it_refuses_to_read_a_figure_no_result_carries():
    with pytest.raises(KeyError, match="p99_ttft"):
        level_results.level_figure({"p99_ttft": 1.0}, "p99_ttft")
    assert level_results.level_figure({"p99_ttft_ms": 1.0}, "p99_ttft_ms") == 1.0
