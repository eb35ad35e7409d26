"""vLLM's Prometheus metrics, scraped around and during a load level.

Guarantees:

- Only the metric names the report uses are read (one regular expression over the text), so a
  scrape costs well under a millisecond of the event loop that is timing requests.
- Counters are reported as deltas against a baseline scrape taken just before the level;
  gauges as max and mean over samples taken about every ``period`` seconds during the level,
  and as a time series. Histogram sums and counts give the server's own mean TTFT, ITL, E2EL
  and queue time over the level; the speculative-decoding counters its acceptance rate.
- A failed scrape is counted, never raised: a level's results never depend on /metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from time import perf_counter

from agents.loadgen.http import ConnectionPool, HttpError, fetch
from agents.loadgen.speculative import spec_decode_acceptance

GAUGES = ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc")
COUNTERS = (
    "num_preemptions",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "prompt_tokens",
    "generation_tokens",
    # Speculative decoding (vLLM's V1 engine, ``vllm/v1/spec_decode/metrics.py``): drafts
    # proposed, tokens in them, and tokens of them the model accepted.
    "spec_decode_num_drafts",
    "spec_decode_num_draft_tokens",
    "spec_decode_num_accepted_tokens",
)
HISTOGRAMS = {
    "time_to_first_token_seconds": "server_mean_ttft_ms",
    "inter_token_latency_seconds": "server_mean_itl_ms",
    "e2e_request_latency_seconds": "server_mean_e2el_ms",
    "request_queue_time_seconds": "server_mean_queue_time_ms",
}
# Before vLLM's V1 engine the KV-cache gauge had another name.
_DEPRECATED_KV = "gpu_cache_usage_perc"

_WANTED = (
    [*GAUGES, _DEPRECATED_KV]
    + [f"{name}_total" for name in COUNTERS]
    + [f"{name}_{part}" for name in HISTOGRAMS for part in ("sum", "count")]
    + ["cache_config_info"]
)
_LINE = re.compile(
    r"^vllm:(" + "|".join(re.escape(name) for name in _WANTED) + r")(\{[^}\n]*\})?[ \t]+(\S+)",
    re.MULTILINE,
)
_GPU_BLOCKS = re.compile(r'num_gpu_blocks="(\d+)"')


@dataclass
class Snapshot:
    """One scrape: time (perf_counter) and each wanted metric's values, one per label set."""

    time: float
    values: dict[str, list[float]] = field(default_factory=dict)
    num_gpu_blocks: int | None = None

    def total(self, name: str) -> float | None:
        values = self.values.get(name)
        return math.fsum(values) if values else None

    def gauge(self, name: str) -> float | None:
        if name == "kv_cache_usage_perc":
            # A fraction per engine: average them (data-parallel servers expose several).
            values = self.values.get(name) or self.values.get(_DEPRECATED_KV)
            return math.fsum(values) / len(values) if values else None
        return self.total(name)


def parse_metrics(text: str, now: float = 0.0) -> Snapshot:
    """Reads the wanted ``vllm:`` samples from Prometheus text exposition."""
    snapshot = Snapshot(now)
    for match in _LINE.finditer(text):
        name, labels, raw = match.groups()
        try:
            value = float(raw)
        except ValueError:
            continue
        snapshot.values.setdefault(name, []).append(value)
        if name == "cache_config_info" and labels:
            blocks = _GPU_BLOCKS.search(labels)
            if blocks:
                snapshot.num_gpu_blocks = int(blocks.group(1))
    return snapshot


def _delta(before: Snapshot, after: Snapshot, name: str) -> float | None:
    end = after.total(name)
    if end is None:
        return None
    start = before.total(name) or 0.0
    # A counter that went down means the server restarted: the level's count is what's there.
    return end - start if end >= start else end


class MetricsScraper:
    """Scrapes one /metrics URL: ``begin`` before a level, ``finish`` after it."""

    def __init__(
        self,
        pool: ConnectionPool,
        path: str,
        *,
        period: float = 1.0,
        on_sample: Callable[[Snapshot], None] | None = None,
    ):
        self._pool = pool
        self._path = path
        self.period = period
        self._on_sample = on_sample
        self._baseline: Snapshot | None = None
        self._samples: list[Snapshot] = []
        self._errors = 0
        self._last_error: str | None = None
        self._task: asyncio.Task | None = None

    def close(self) -> None:
        self._pool.close()

    async def scrape(self) -> Snapshot | None:
        try:
            response = await fetch(self._pool, self._path, timeout=5.0)
        except HttpError as error:
            self._errors += 1
            self._last_error = f"{error.kind}: {error}"
            return None
        if response.status != 200:
            self._errors += 1
            self._last_error = f"HTTP {response.status}"
            return None
        return parse_metrics(response.body.decode("utf-8", "replace"), perf_counter())

    async def probe(self) -> bool:
        """Whether the URL answers with Prometheus text holding vLLM metrics."""
        snapshot = await self.scrape()
        return snapshot is not None and bool(snapshot.values)

    async def begin(self) -> None:
        self._samples = []
        self._errors = 0
        self._last_error = None
        self._baseline = await self.scrape()
        self._task = asyncio.create_task(self._sample_loop())

    async def _sample_loop(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            snapshot = await self.scrape()
            if snapshot is not None:
                self._samples.append(snapshot)
                if self._on_sample is not None:
                    self._on_sample(snapshot)

    async def finish(self) -> dict:
        """The level's server-side report (see module docstring)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        final = await self.scrape()
        return self._report(final)

    def _report(self, final: Snapshot | None) -> dict:
        baseline = self._baseline
        origin = baseline.time if baseline is not None else None
        report: dict = {}
        for name in GAUGES:
            values = [v for s in self._samples if (v := s.gauge(name)) is not None]
            report[name] = (
                {"max": max(values), "mean": math.fsum(values) / len(values)} if values else None
            )
        can_diff = baseline is not None and final is not None
        for name in COUNTERS:
            report[name] = _delta(baseline, final, f"{name}_total") if can_diff else None
        hits, queries = report["prefix_cache_hits"], report["prefix_cache_queries"]
        report["prefix_cache_hit_rate"] = hits / queries if hits is not None and queries else None
        report.update(spec_decode_acceptance(report))
        for name, key in HISTOGRAMS.items():
            total = _delta(baseline, final, f"{name}_sum") if can_diff else None
            count = _delta(baseline, final, f"{name}_count") if can_diff else None
            report[key] = total / count * 1000 if total is not None and count else None
        latest = final or (self._samples[-1] if self._samples else baseline)
        report["num_gpu_blocks"] = latest.num_gpu_blocks if latest is not None else None
        report["series"] = [
            {"t": round(s.time - (origin or s.time), 3)} | {name: s.gauge(name) for name in GAUGES}
            for s in self._samples
        ]
        report["scrape_errors"] = self._errors
        report["last_scrape_error"] = self._last_error
        return report
