"""What the simulator measures on the server side and how ``/metrics`` shows it.

Guarantees: vLLM's metric names and histogram buckets, in simulated seconds, plus the
``benchsite:simulated`` gauge and the step-timing gauges, in Prometheus' text format.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agents.engines.sim.scheduler import SimRequest
    from agents.engines.sim.server import SimServer

_BUCKETS = {
    "time_to_first_token_seconds": (
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
        7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
    ),
    "inter_token_latency_seconds": (
        0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
        10.0, 20.0, 40.0, 80.0,
    ),
    "e2e_request_latency_seconds": (
        0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
        120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
    ),
    "request_queue_time_seconds": (
        0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
        120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
    ),
}  # fmt: skip  # a table


class Histogram:
    def __init__(self, buckets: Sequence[float]):
        self.buckets = tuple(buckets)
        self.counts = [0] * len(self.buckets)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.sum += value
        self.count += 1
        index = bisect.bisect_left(self.buckets, value)
        if index < len(self.counts):
            self.counts[index] += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out = []
        running = 0
        for bound, count in zip(self.buckets, self.counts, strict=False):
            running += count
            out.append(f'{name}_bucket{{{labels},le="{bound}"}} {running}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.count}')
        out.append(f"{name}_sum{{{labels}}} {self.sum!r}")
        out.append(f"{name}_count{{{labels}}} {self.count}")
        return out


def latency_histograms() -> dict[str, Histogram]:
    """vLLM's request latency histograms, empty, by metric name (without ``vllm:``)."""
    return {name: Histogram(buckets) for name, buckets in _BUCKETS.items()}


def observe_token(histograms: dict[str, Histogram], request: SimRequest, done: bool) -> None:
    """Records the request's latest token (its time is ``request.token_times[-1]``)."""
    now = request.token_times[-1]
    if request.output == 1:
        histograms["time_to_first_token_seconds"].observe(now - request.arrival)
        if request.scheduled_at is not None:
            # vLLM's queue time is the engine core's: from the request reaching it.
            queued = request.scheduled_at - request.ready_at
            histograms["request_queue_time_seconds"].observe(max(0.0, queued))
    else:
        gap = now - request.token_times[-2]
        histograms["inter_token_latency_seconds"].observe(gap)
    if done:
        histograms["e2e_request_latency_seconds"].observe(now - request.arrival)


def metrics_text(server: SimServer) -> bytes:
    """The server's ``/metrics`` body."""
    s = server.scheduler
    settings = server.settings
    labels = server.labels
    lines = [
        "# benchsite vLLM simulator: every value below is simulated",
        f'benchsite:simulated{{{labels},gpu="{server.gpu_name}",speed="{server.speed}"}} 1',
        f"vllm:num_requests_running{{{labels}}} {len(s.running)}",
        f"vllm:num_requests_waiting{{{labels}}} {s.waiting_at(server.sim_now)}",
        f"vllm:kv_cache_usage_perc{{{labels}}} {s.pool.usage!r}",
        f"vllm:num_preemptions_total{{{labels}}} {s.preemptions}",
        f"vllm:prefix_cache_queries_total{{{labels}}} {s.prefix_queries}",
        f"vllm:prefix_cache_hits_total{{{labels}}} {s.prefix_hits}",
        f"vllm:prompt_tokens_total{{{labels}}} {s.prompt_tokens}",
        f"vllm:generation_tokens_total{{{labels}}} {s.generation_tokens}",
        f'vllm:cache_config_info{{block_size="{settings.block_size}",'
        f'enable_prefix_caching="{settings.enable_prefix_caching}",{labels},'
        f'gpu_memory_utilization="{settings.gpu_memory_utilization}",'
        f'num_gpu_blocks="{s.pool.num_blocks}"}} 1.0',
        # How faithfully wall time follows simulated time (benchmarks/sim_capacity.py).
        f"benchsite:sim_max_step_slip_seconds{{{labels}}} {server.max_slip!r}",
        f"benchsite:sim_steps_total{{{labels}}} {server.steps_timed}",
        f"benchsite:sim_steps_late_total{{{labels}}} {server.slips_over_1ms}",
    ]
    for name, histogram in server.histograms.items():
        lines.extend(histogram.lines(f"vllm:{name}", labels))
    return ("\n".join(lines) + "\n").encode()
