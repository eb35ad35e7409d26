"""Simulated trials reported in the simulated hardware's time, and labelled as simulated.

The simulator at ``--speed S`` runs S times faster than the GPU it models: the client sees
latencies S times shorter and throughputs S times higher (docs/simulator.md). So that a
simulated trial reads like the hardware it models, and never like a measurement:

- the load generator judges SLOs against targets divided by S (the same verdicts and goodput
  as at full scale, request by request), and sends open-loop levels at S times their rate
  (a rate in the modelled hardware's time);
- every latency (``*_ms``), the duration and the window's bounds are multiplied by S, every
  rate divided by S (the level's own request rate, the whole level's figures, the
  confidence intervals and a rate capacity search's loads too), the
  SLO report is given back its real targets (an attainment, a share of requests, stays as
  it is), and the server's sample times are stretched;
- the result carries ``"simulated": {"speed": S}`` whatever S is (also S = 1).
"""

from __future__ import annotations

from agents.protocol import Slos, Workload

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


def workload_for_speed(workload: Workload, speed: float) -> Workload:
    """The workload in the sped-up client's wall time: open-loop rates (and a rate search's
    upper bound) multiplied by S; concurrencies are the same in either time."""
    rates = [rate if rate == "inf" else rate * speed for rate in workload.request_rates]
    capacity = workload.capacity
    if capacity is not None and capacity.axis == "request_rate" and capacity.max_load:
        capacity = capacity.model_copy(update={"max_load": capacity.max_load * speed})
    return workload.model_copy(update={"request_rates": rates, "capacity": capacity})


def rate_in_simulated_time(rate, speed: float):
    """A wall-time request rate (``"inf"`` stays) in the modelled hardware's time."""
    return rate if rate in (None, "inf") else rate / speed


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


def _milliseconds_in_simulated_time(figures: dict, speed: float) -> dict:
    """A nested figure set (by turn, send lateness) with its ``_ms`` values S times."""
    return {
        key: value * speed if key.endswith("_ms") and isinstance(value, int | float) else value
        for key, value in figures.items()
    }


def _interval_in_simulated_time(key: str, interval: dict, speed: float) -> dict:
    if key.endswith("_ms"):
        return {bound: value * speed for bound, value in interval.items()}
    if key in RATES:
        return {"low": interval["high"] / speed, "high": interval["low"] / speed}
    return interval


def capacity_in_simulated_time(capacity: dict, speed: float) -> dict:
    """A capacity search's result with its throughputs (and a rate search's loads) in
    simulated time."""
    loads = ("capacity", "bracket_low", "bracket_high")
    scaled = {}
    for key, value in capacity.items():
        if key in RATES and isinstance(value, int | float):
            value = value / speed
        elif key in loads and capacity["axis"] == "request_rate":
            value = rate_in_simulated_time(value, speed)
        scaled[key] = value
    return scaled


def result_in_simulated_time(result: dict, speed: float) -> dict:
    """A level's result (as the load generator gave it) in simulated time, labelled."""
    scaled = _figures_in_simulated_time(result, speed)
    if "request_rate" in result:
        scaled["request_rate"] = rate_in_simulated_time(result["request_rate"], speed)
    if result.get("whole_level"):
        scaled["whole_level"] = _figures_in_simulated_time(result["whole_level"], speed)
    if result.get("turns"):
        scaled["turns"] = [_milliseconds_in_simulated_time(t, speed) for t in result["turns"]]
    if result.get("send_lateness"):
        scaled["send_lateness"] = _milliseconds_in_simulated_time(result["send_lateness"], speed)
    if result.get("replay") and result["replay"].get("time_scale") is not None:
        # The trace's own rate is in its own time; the factor its times were played at is
        # what the sped-up client used, so in the modelled hardware's time it is S times.
        scaled["replay"] = {
            **result["replay"],
            "time_scale": result["replay"]["time_scale"] * speed,
        }
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
