"""A stored measurement's result reads as the protocol's LevelResult, whichever agent stored
it (issue 15)."""

from __future__ import annotations

import pytest

from agents import protocol
from runs.selectors.level_figures import LEVEL_KEYS
from runs.selectors.level_results import stored_level_result

CORE = {"completed": 100, "failed": 0, "duration": 12.5}


def test_it_reads_a_result_as_the_agent_sent_it():
    stored = CORE | {"concurrency": 8, "p99_ttft_ms": 48.2, "output_throughput": 1024.0}
    result = stored_level_result(stored)
    assert (result.completed, result.p99_ttft_ms, result.output_throughput) == (100, 48.2, 1024.0)
    assert result.latency_ms("p99", "ttft") == 48.2
    assert result.model_dump(mode="json") == stored  # nothing added that was not sent


def test_it_reads_a_result_stored_before_results_were_typed():
    """Protocol 1 and 2 results were free-form beyond their core keys: an unknown key, or a
    figure of another shape, reads as absent instead of failing the page."""
    stored = CORE | {"goodput_rps": 3.0, "slo": ["ttft"], "p99_itl_ms": 9.5}
    result = stored_level_result(stored)
    assert result.slo is None and result.p99_itl_ms == 9.5 and result.completed == 100


def test_it_refuses_what_no_agent_ever_stored():
    with pytest.raises(ValueError):
        stored_level_result({"completed": 1})


def test_a_level_result_is_strict_and_bounded_as_protocol_2_was():
    with pytest.raises(ValueError):
        protocol.LevelResult.model_validate(CORE | {"completed": "100"})
    with pytest.raises(ValueError):
        protocol.LevelResult.model_validate(CORE | {"p99_ttft_ms": float("nan")})
    with pytest.raises(ValueError):
        protocol.LevelResult.model_validate(CORE | {"total_output_tokens": 2**63})


def test_the_keys_the_reports_read_in_sql_are_level_result_fields():
    assert set(LEVEL_KEYS) <= protocol.LevelResult.model_fields.keys()
    # What the cost rules decide on, and the p99 latencies a report shows.
    assert set(LEVEL_KEYS) == {
        "completed",
        "failed",
        "partial",
        "slo",
        "simulated",
        "output_throughput",
        "p99_ttft_ms",
        "p99_tpot_ms",
        "p99_itl_ms",
        "p99_e2el_ms",
    }
