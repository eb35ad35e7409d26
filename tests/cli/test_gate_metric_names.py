"""The gate's metric names are the protocol's LevelResult fields (issue 15): the CLI may not
import the agent's package, so this test holds the two spellings to one truth."""

from __future__ import annotations

from agents import protocol
from benchsite_cli import gate


def test_the_gates_latency_metrics_are_the_level_results():
    expected = {
        f"{statistic}_{metric}_ms"
        for metric in protocol.LATENCY_METRICS
        for statistic in protocol.LATENCY_STATISTICS
    }
    assert set(gate.LATENCY_METRICS) == expected


def test_every_measured_metric_of_the_gate_is_a_level_result_field():
    measured = gate.KNOWN_METRICS - {gate.COST_METRIC}
    assert measured <= protocol.LevelResult.model_fields.keys()
