"""Simulated trials reported in the simulated hardware's time, and labelled as simulated.

The simulator at ``--speed S`` runs S times faster than the GPU it models: the client sees
latencies S times shorter and throughputs S times higher (docs/simulator.md). So that a
simulated trial reads like the hardware it models, and never like a measurement:

- the load generator judges SLOs against targets divided by S (the same verdicts and goodput
  as at full scale, request by request);
- every latency (``*_ms``) and the duration are multiplied by S, every rate divided by S, the
  SLO report is given back its real targets, and the server's sample times are stretched;
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
    return Slos(**{name: None if t is None else t / speed for name, t in slos.model_dump().items()})


def _times(value, speed: float):
    return None if value is None else value * speed


def result_in_simulated_time(result: dict, speed: float) -> dict:
    """A level's result (as the load generator gave it) in simulated time, labelled."""
    scaled = dict(result)
    for key, value in result.items():
        if key.endswith("_ms") and isinstance(value, int | float):
            scaled[key] = value * speed
        elif key in RATES and isinstance(value, int | float):
            scaled[key] = value / speed
    scaled["duration"] = result["duration"] * speed
    if result.get("slo"):
        scaled["slo"] = {
            name: {**slo, "target": slo["target"] * speed, "p99": _times(slo["p99"], speed)}
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
