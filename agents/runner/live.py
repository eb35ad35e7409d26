"""Live figures of the level in progress, for ``level_progress`` messages.

Guarantees: percentiles are over a bounded window of the most recent requests (so the cost of
a progress message stays small however long the level runs, and the load generator sharing the
event loop is not held up); ``due`` throttles messages to one per ``every`` seconds.
"""

from __future__ import annotations

import time
from collections import deque

from agents.loadgen import RequestRecord
from agents.loadgen.stats import percentile
from agents.protocol import GpuReading

WINDOW_REQUESTS = 512
WINDOW_GAPS = 4096


class LiveLevel:
    """Running figures of one level."""

    def __init__(self, total: int | None, *, every: float = 0.5, clock=time.monotonic):
        self.total = total
        self.every = every
        self._clock = clock
        self._started = clock()
        self._last_sent = float("-inf")
        self.done = 0
        self.output_tokens = 0
        self._ttfts: deque[float] = deque(maxlen=WINDOW_REQUESTS)
        self._gaps: deque[float] = deque(maxlen=WINDOW_GAPS)
        self.kv_cache_usage: float | None = None
        self.num_requests_waiting: int | None = None
        self.gpus: list[GpuReading] | None = None

    def add(self, record: RequestRecord) -> None:
        self.done += 1
        if record.success:
            self.output_tokens += record.served_output_tokens
            if record.ttft is not None:
                self._ttfts.append(record.ttft)
            self._gaps.extend(record.itl)

    def server(self, kv_cache_usage: float | None, waiting: float | None) -> None:
        if kv_cache_usage is not None:
            self.kv_cache_usage = min(max(kv_cache_usage, 0.0), 1.0)
        if waiting is not None:
            self.num_requests_waiting = max(int(waiting), 0)

    def gpu(self, readings: list[GpuReading]) -> None:
        """The GPUs' latest sample (``agents.telemetry.GpuSampler``)."""
        self.gpus = readings

    def due(self) -> bool:
        """Whether a progress message is due now (and, if so, counts it as sent)."""
        now = self._clock()
        if now - self._last_sent < self.every:
            return False
        self._last_sent = now
        return True

    def figures(self) -> dict:
        """The ``level_progress`` fields (milliseconds, tokens per second)."""
        elapsed = self._clock() - self._started
        ttfts, gaps = sorted(self._ttfts), sorted(self._gaps)
        return {
            "requests_done": self.done,
            "requests_total": self.total,
            "ttft_ms_p50": percentile(ttfts, 50) * 1000 if ttfts else None,
            "ttft_ms_p99": percentile(ttfts, 99) * 1000 if ttfts else None,
            "itl_ms_p50": percentile(gaps, 50) * 1000 if gaps else None,
            "itl_ms_p99": percentile(gaps, 99) * 1000 if gaps else None,
            "output_tokens_per_s": self.output_tokens / elapsed if elapsed > 0 else None,
            "kv_cache_usage": self.kv_cache_usage,
            "num_requests_waiting": self.num_requests_waiting,
            "gpus": None if self.gpus is None else [g.model_dump(mode="json") for g in self.gpus],
        }
