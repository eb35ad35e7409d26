"""The load generator's engine: runs load levels in order and streams progress events.

Guarantees:

- ``run_bench`` is an async iterator of events (``LevelStarted``, ``RequestDone``,
  ``LevelFinished``, ``BenchFinished``); closing it early cancels the run cleanly.
- Closed-loop levels keep exactly ``concurrency`` requests in flight (each slot sends its next
  request as soon as the last one ends); open-loop levels send at gamma-distributed times
  (``agents.loadgen.arrivals``), optionally capped by ``max_concurrency``.
- Everything costly happens before a level's clock starts: prompts are sampled, every
  request's bytes are encoded, connections are opened and garbage is collected and frozen.
- Each level uses its own prompts (seeded by ``seed`` and the level's position), so no level
  is served from the prefix cache another level filled.
- A server that cannot be reached before a level's clock starts raises ``ServerUnreachable``:
  before the first level when it never answered, before a later one when it went away (an
  engine that died between levels; the levels before it were reported). Once a level's clock
  runs, failures are counted in its results, never raised.
- Setting the ``stop`` event ends the benchmark within one event-loop turn: no request is
  sent after it, requests in flight are abandoned, and the level in progress is reported from
  the requests that had finished (``"partial": true``, ``"aborted"``: how many were cut off);
  no later level starts. A stop before a level's clock started reports nothing for it.
"""

from __future__ import annotations

import asyncio
import gc
import math
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import suppress
from time import perf_counter

from agents.loadgen.arrivals import arrival_offsets
from agents.loadgen.config import BenchConfig
from agents.loadgen.events import (
    BenchFinished,
    Event,
    LevelFinished,
    LevelStarted,
    RequestDone,
    ServerSample,
    level_label,
)
from agents.loadgen.http import ConnectionPool, HttpError, Origin, fetch, parse_base_url
from agents.loadgen.openai import encode_request, send_request
from agents.loadgen.prompts import Prompt
from agents.loadgen.records import RequestRecord
from agents.loadgen.results import level_result
from agents.loadgen.server_metrics import MetricsScraper

# In duration mode a level cycles through this many pre-built prompts at most.
DURATION_PROMPT_POOL = 2000


class ServerUnreachable(RuntimeError):
    """The server could not be reached before a level's clock started: nothing of that level
    (or of any later one) was measured."""


class _Progress:
    """Counts a level's finished requests and reports each one."""

    def __init__(self, index: int, emit: Callable[[Event], None]):
        self.index = index
        self.emit = emit
        self.completed = self.failed = self.output_tokens = 0
        self.started = perf_counter()

    def done(self, record: RequestRecord) -> None:
        if record.success:
            self.completed += 1
            self.output_tokens += record.served_output_tokens
        else:
            self.failed += 1
        self.emit(
            RequestDone(
                self.index,
                self.completed,
                self.failed,
                self.output_tokens,
                record.finished - self.started,
                record,
            )
        )


class _Runner:
    """Runs one benchmark: preflight, then each level in order, reporting through ``emit``."""

    def __init__(
        self,
        config: BenchConfig,
        emit: Callable[[Event], None],
        stop: asyncio.Event | None = None,
    ):
        self.config = config
        self.emit = emit
        self.stop = stop
        self.level_index = 0
        self.origin: Origin = parse_base_url(config.base_url)
        self.pool = ConnectionPool(self.origin, connect_timeout=config.connect_timeout)
        self.scraper: MetricsScraper | None = None

    async def preflight(self) -> None:
        headers = {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}
        try:
            response = await fetch(
                self.pool, self.origin.path("/v1/models"), headers=headers, timeout=10.0
            )
        except HttpError as error:
            raise ServerUnreachable(f"cannot reach {self.config.base_url}: {error}") from None
        if response.status in (401, 403):
            raise ServerUnreachable(
                f"{self.config.base_url} refused the API key (HTTP {response.status})"
            )
        await self._setup_metrics()

    async def _setup_metrics(self) -> None:
        url = self.config.metrics_url
        if url is None:
            return
        explicit = url != "auto"
        if explicit:
            target = parse_base_url(url)
            path = target.base_path or "/metrics"
        else:
            # vLLM serves /metrics at the root, whatever the API's base path.
            target, path = self.origin, "/metrics"
        pool = ConnectionPool(target, connect_timeout=self.config.connect_timeout)
        scraper = MetricsScraper(
            pool, path, period=self.config.metrics_period, on_sample=self._server_sample
        )
        # An explicit URL is scraped even if it fails now (it is reported per level);
        # the default one only when it answers with vLLM metrics.
        if explicit or await scraper.probe():
            self.scraper = scraper
        else:
            scraper.close()

    def _server_sample(self, snapshot) -> None:
        self.emit(
            ServerSample(
                self.level_index,
                snapshot.gauge("kv_cache_usage_perc"),
                snapshot.gauge("num_requests_running"),
                snapshot.gauge("num_requests_waiting"),
            )
        )

    @property
    def stopped(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    async def _unless_stopped(self, work: Awaitable[object]) -> bool:
        """Runs ``work`` to its end, or cancels it once ``stop`` is set; True when stopped."""
        task = asyncio.ensure_future(work)
        if self.stop is None:
            await task
            return False
        stopper = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        if task.done():
            task.result()  # re-raises a failure of the work itself
            return False
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        return True

    def _prepare(self, prompts: list[Prompt]) -> list[bytes]:
        config = self.config
        return [
            encode_request(
                self.origin,
                endpoint=config.endpoint,
                model=config.model,
                prompt=prompt.text,
                output_len=prompt.output_len,
                api_key=config.api_key,
                ignore_eos=config.ignore_eos,
            )
            for prompt in prompts
        ]

    async def _closed_loop(
        self,
        concurrency: int,
        prompts: list[Prompt],
        requests: list[bytes],
        count: int | None,
        deadline: float | None,
        progress: _Progress | None,
        records: list[RequestRecord],
    ) -> None:
        timeout = self.config.request_timeout
        pool = self.pool

        async def slot() -> None:
            while True:
                index = len(records)
                if (count is not None and index >= count) or (
                    deadline is not None and perf_counter() >= deadline
                ):
                    return
                prompt = prompts[index % len(prompts)]
                record = RequestRecord(index, prompt.output_len, prompt.prompt_len)
                records.append(record)
                await send_request(pool, requests[index % len(requests)], record, timeout=timeout)
                if progress is not None:
                    progress.done(record)

        await asyncio.gather(*(slot() for _ in range(concurrency)))

    async def _open_loop(
        self,
        rate: float,
        prompts: list[Prompt],
        requests: list[bytes],
        count: int | None,
        duration: float | None,
        rng: random.Random,
        progress: _Progress,
        records: list[RequestRecord],
    ) -> None:
        timeout = self.config.request_timeout
        limit = self.config.max_concurrency
        gate = asyncio.Semaphore(limit) if limit else None
        pending: set[asyncio.Task] = set()

        async def send(record: RequestRecord, request: bytes) -> None:
            if gate is None:
                await send_request(self.pool, request, record, timeout=timeout)
            else:
                async with gate:
                    await send_request(self.pool, request, record, timeout=timeout)
            progress.done(record)

        start = perf_counter()
        try:
            for index, offset in enumerate(arrival_offsets(rate, self.config.burstiness, rng)):
                if (count is not None and index >= count) or (
                    duration is not None and offset >= duration
                ):
                    break
                delay = start + offset - perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                prompt = prompts[index % len(prompts)]
                record = RequestRecord(index, prompt.output_len, prompt.prompt_len, offset)
                records.append(record)
                task = asyncio.create_task(send(record, requests[index % len(requests)]))
                pending.add(task)
                task.add_done_callback(pending.discard)
            if pending:
                await asyncio.gather(*pending)
        finally:
            # Stopped (cancelled) while sending: the requests in flight go too.
            for task in list(pending):
                task.cancel()

    async def run_level(self, index: int, level: dict) -> dict | None:
        """Runs one level; its result, or None when ``stop`` came before its clock started."""
        config = self.config
        self.level_index = index
        # Sampling for a benchmark, not secrecy: a seeded, reproducible generator.
        rng = random.Random(f"{config.seed}:{index}")  # noqa: S311
        count = None if config.duration is not None else config.num_prompts
        prompts = config.source.sample(count or DURATION_PROMPT_POOL, rng, config.tokenizer)
        requests = self._prepare(prompts)
        concurrency = level.get("concurrency")
        try:
            # An uncapped open-loop level opens one: every level starts only on a server that
            # takes connections.
            await self.pool.warm(concurrency or config.max_concurrency or 1)
        except HttpError as error:
            # The server answered the preflight (or the last level) and now refuses new
            # connections: it is gone, and a level of refused requests would measure nothing.
            raise ServerUnreachable(
                f"cannot reach {config.base_url} before {level_label(level)}: {error}"
            ) from None
        if config.warmup:
            warm_prompts = config.source.sample(config.warmup, rng, config.tokenizer)
            warm_up = self._closed_loop(
                min(config.warmup, concurrency or config.max_concurrency or config.warmup),
                warm_prompts,
                self._prepare(warm_prompts),
                config.warmup,
                None,
                None,
                [],
            )
            if await self._unless_stopped(warm_up):
                return None
        if self.stopped:
            return None
        if self.scraper is not None:
            await self.scraper.begin()
        # A full collection now, and none of the survivors scanned again during the level:
        # a GC pause would show up as latency that the server never caused. A level of a
        # fixed number of requests makes a bounded amount of garbage, so it runs with no
        # automatic collection at all; a timed level (unbounded) keeps them.
        gc.collect()
        gc.freeze()
        gc_was_enabled = gc.isenabled()
        if count is not None:
            gc.disable()
        self.emit(LevelStarted(index, level, count, config.duration))
        progress = _Progress(index, self.emit)
        records: list[RequestRecord] = []
        start = progress.started = perf_counter()
        try:
            if concurrency is not None:
                deadline = start + config.duration if config.duration is not None else None
                work = self._closed_loop(
                    concurrency, prompts, requests, count, deadline, progress, records
                )
            else:
                rate = level["request_rate"]
                rate = math.inf if rate == "inf" else float(rate)
                work = self._open_loop(
                    rate, prompts, requests, count, config.duration, rng, progress, records
                )
            stopped = await self._unless_stopped(work)
        finally:
            gc.unfreeze()
            if gc_was_enabled:
                gc.enable()
        finished = [record for record in records if record.finished] if stopped else records
        end = max((record.finished for record in finished), default=perf_counter())
        server = await self.scraper.finish() if self.scraper is not None else None
        shown = dict(level)
        if "request_rate" in shown:
            shown["burstiness"] = config.burstiness
        result = level_result(
            shown, finished, duration=end - start, slos=config.slos, server=server
        )
        if stopped:
            result["partial"] = True
            result["aborted"] = len(records) - len(finished)
        self.emit(LevelFinished(index, result, finished))
        return result

    async def run(self) -> None:
        try:
            await self.preflight()
            results = []
            for index, level in enumerate(self.config.levels):
                if self.stopped:
                    break
                result = await self.run_level(index, level)
                if result is not None:
                    results.append(result)
            self.emit(BenchFinished(self.config.describe(), results, stopped=self.stopped))
        finally:
            self.pool.close()
            if self.scraper is not None:
                self.scraper.close()


_END = object()


async def run_bench(
    config: BenchConfig, *, stop: asyncio.Event | None = None
) -> AsyncIterator[Event]:
    """Runs every level of ``config`` in order, yielding progress events as they happen;
    setting ``stop`` ends it early (see the module docstring).

    Raises ``ServerUnreachable`` before a level whose connections cannot be opened (before
    the first if the server does not answer at all).
    """
    queue: asyncio.Queue = asyncio.Queue()
    runner = _Runner(config, queue.put_nowait, stop)

    async def produce() -> None:
        try:
            await runner.run()
        finally:
            queue.put_nowait(_END)

    task = asyncio.create_task(produce())
    try:
        while (event := await queue.get()) is not _END:
            yield event
        await task  # re-raises what ended the run
    finally:
        if not task.done():
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task


async def run_levels(config: BenchConfig) -> list[dict]:
    """Runs the benchmark and returns the level results (no progress)."""
    results: list[dict] = []
    async for event in run_bench(config):
        if isinstance(event, LevelFinished):
            results.append(event.result)
    return results
