"""The names a reader of a stored result uses are ``LevelResult``'s own (issue 15): a name
the model has not fails loudly instead of reading nothing."""

from __future__ import annotations

import pytest

from agents import protocol


def test_it_names_every_field_of_the_level_result_and_no_other():
    assert protocol.LEVEL_RESULT_KEY.output_throughput == "output_throughput"
    assert protocol.SLO_CHECK_KEY.met == "met"
    assert set(vars(protocol.LEVEL_RESULT_KEY)) == protocol.LevelResult.model_fields.keys()
    with pytest.raises(AttributeError):
        protocol.LEVEL_RESULT_KEY.output_tput  # noqa: B018 (the lookup is the test)


def test_it_names_every_latency_figure_as_a_field():
    for metric in protocol.LATENCY_METRICS:
        for statistic in protocol.LATENCY_STATISTICS:
            assert protocol.latency_field(statistic, metric) in protocol.LevelResult.model_fields
    with pytest.raises(ValueError, match="p50_ttft_ms"):
        protocol.latency_field("p50", "ttft")
