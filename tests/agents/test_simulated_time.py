"""A level measured against the simulator at speed S, told in the modelled hardware's time:
the figures of protocol 6 (by turn, send lateness, a trace's replay) scale with the rest."""

from __future__ import annotations

import pytest

from agents.runner.simulated import result_in_simulated_time

LEVEL = {
    "request_rate": 40.0,
    "duration": 2.0,
    "completed": 4,
    "failed": 0,
    "median_ttft_ms": 3.0,
    "output_throughput": 500.0,
    "turns": [
        {
            "turn": 1,
            "requests": 2,
            "completed": 2,
            "mean_prompt_tokens": 100.0,
            "median_ttft_ms": 2.0,
            "p99_ttft_ms": 4.0,
            "median_tpot_ms": 1.0,
        },
    ],
    "send_lateness": {"p50_ms": 0.1, "p99_ms": 0.5, "max_ms": 1.0},
    "replay": {"requests": 4, "trace_rate": 2.0, "time_scale": 0.05},
}


def test_nested_figures_of_protocol_6_are_in_simulated_time():
    scaled = result_in_simulated_time(LEVEL, 10.0)
    assert scaled["median_ttft_ms"] == 30.0 and scaled["request_rate"] == 4.0
    (turn,) = scaled["turns"]
    assert (turn["median_ttft_ms"], turn["p99_ttft_ms"], turn["median_tpot_ms"]) == (20, 40, 10)
    assert (turn["turn"], turn["requests"], turn["mean_prompt_tokens"]) == (1, 2, 100.0)
    assert scaled["send_lateness"] == pytest.approx({"p50_ms": 1.0, "p99_ms": 5.0, "max_ms": 10.0})
    # The client played the trace 20 times faster than recorded at 40/s of wall time; in
    # the hardware's time the level's rate is 4/s, the trace played 2 times faster.
    assert scaled["replay"] == {"requests": 4, "trace_rate": 2.0, "time_scale": 0.5}
    assert LEVEL["turns"][0]["median_ttft_ms"] == 2.0  # the measured result is left as it was
