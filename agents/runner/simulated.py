"""Simulated trials reported in the simulated hardware's time, and labelled as simulated.

The simulator at ``--speed S`` runs S times faster than the GPU it models: the client sees
latencies S times shorter and throughputs S times higher (docs/simulator.md). So that a
simulated trial reads like the hardware it models, and never like a measurement:

- the load generator judges SLOs against targets divided by S (the same verdicts and goodput
  as at full scale, request by request);
- every latency (``*_ms``), the duration and the window's bounds are multiplied by S, every
  rate divided by S (in the whole level's figures and the confidence intervals too), the
  SLO report is given back its real targets (an attainment, a share of requests, stays as
  it is), and the server's sample times are stretched;
- the result carries ``"simulated": {"speed": S}`` whatever S is (also S = 1).
"""

from __future__ import annotations

from agents.protocol import Slos

RATES = (
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "max_output_tokens_per_s",
)


def slos_for_speed(slos: Slos, speed: float) -> Slos:
    """The SLO targets in the sped-up client's wall time."""
    return slos.scaled(1 / speed)


def _times(value, speed: float):
    return None if value is None else value * speed


def _figures_in_simulated_time(figures: dict, speed: float) -> dict:
    scaled = dict(figures)
    for key, value in figures.items():
        if key.endswith("_ms") and isinstance(value, int | float):
            scaled[key] = value * speed
        elif key in RATES and isinstance(value, int | float):
            scaled[key] = value / speed
    scaled["duration"] = figures["duration"] * speed
    return scaled


def _interval_in_simulated_time(key: str, interval: dict, speed: float) -> dict:
    if key.endswith("_ms"):
        return {bound: value * speed for bound, value in interval.items()}
    if key in RATES:
        return {"low": interval["high"] / speed, "high": interval["low"] / speed}
    return interval


def capacity_in_simulated_time(capacity: dict, speed: float) -> dict:
    """A capacity search's result with its throughputs in simulated time."""
    return {
        key: value / speed if key in RATES and isinstance(value, int | float) else value
        for key, value in capacity.items()
    }


def result_in_simulated_time(result: dict, speed: float) -> dict:
    """A level's result (as the load generator gave it) in simulated time, labelled."""
    scaled = _figures_in_simulated_time(result, speed)
    if result.get("whole_level"):
        scaled["whole_level"] = _figures_in_simulated_time(result["whole_level"], speed)
    if result.get("window"):
        window = result["window"]
        scaled["window"] = {
            **window,
            "start_s": window["start_s"] * speed,
            "end_s": window["end_s"] * speed,
        }
    if result.get("ci95"):
        scaled["ci95"] = {
            key: _interval_in_simulated_time(key, interval, speed)
            for key, interval in result["ci95"].items()
        }
    if result.get("slo"):
        scaled["slo"] = {
            name: slo
            if name == "attainment"
            else {
                **slo,
                "target": slo["target"] * speed,
                "p99": _times(slo.get("p99"), speed),
                **({"value": _times(slo["value"], speed)} if "value" in slo else {}),
            }
            for name, slo in result["slo"].items()
        }
    if result.get("server") and result["server"].get("series"):
        server = dict(result["server"])
        server["series"] = [{**sample, "t": sample["t"] * speed} for sample in server["series"]]
        scaled["server"] = server
    scaled["simulated"] = {"speed": speed}
    return scaled


def progress_in_simulated_time(figures: dict, speed: float) -> dict:
    """Live ``level_progress`` figures in simulated time."""
    scaled = dict(figures)
    for key in ("ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50", "itl_ms_p99"):
        scaled[key] = _times(figures.get(key), speed)
    if figures.get("output_tokens_per_s") is not None:
        scaled["output_tokens_per_s"] = figures["output_tokens_per_s"] / speed
    return scaled
