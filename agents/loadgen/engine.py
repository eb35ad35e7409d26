"""The load generator's engine: runs load levels in order and streams progress events.

Guarantees:

- ``run_bench`` is an async iterator of events (``LevelStarted``, ``RequestDone``,
  ``LevelFinished``, ``BenchFinished``); closing it early cancels the run cleanly.
- Closed-loop levels keep exactly ``concurrency`` requests in flight (each slot sends its next
  request as soon as the last one ends); open-loop levels send at gamma-distributed times
  (``agents.loadgen.arrivals``) or a trace's times scaled to their rate
  (``agents.loadgen.levels.send_offsets``), optionally capped by ``max_concurrency``; no
  request leaves before its time, and the level reports how late they left
  (``send_lateness``).
- Everything costly happens before a level's clock starts: prompts are sampled, every
  request's bytes are encoded, connections are opened and garbage is collected and frozen.
- Traffic is fair: a level's prompts, lengths and send times derive from ``seed``, the level
  and how many times that level ran before in this benchmark (never from its position), so
  every trial given the same seed sends the same traffic at a level, and no level (nor a
  repeat of one) is served from the prefix cache another filled.
- With ``steady_multiple`` each level is steady (``agents.loadgen.steady``): ramp, window,
  drain; its headline figures describe the window and ``whole_level`` every request.
- Each fixed level runs ``repeats`` times in a row, each run a level of its own (``repeat``
  counts the earlier ones).
- With ``capacity`` (and SLOs), after the fixed levels a capacity search
  (``agents.loadgen.capacity``) measures further levels (each marked ``probe``) and reports
  ``CapacityFound``.
- A server that cannot be reached before a level's clock starts raises ``ServerUnreachable``:
  before the first level when it never answered, before a later one when it went away (an
  engine that died between levels; the levels before it were reported). Once a level's clock
  runs, failures are counted in its results, never raised.
- ``resume_results`` (what an earlier attempt on the same configuration measured, in order)
  are taken instead of measuring those levels again, and count as their levels' runs: the
  next level measured sends exactly the traffic it would have, and a capacity search goes on
  from them. They are not reported again.
- ``activity`` (``agents.loadgen.activity``), when given, hears every request and response.
- Setting the ``stop`` event ends the benchmark within one event-loop turn: no request is
  sent after it, requests in flight are abandoned, and the level in progress is reported from
  the requests that had finished (``"partial": true``, ``"aborted"``: how many were cut off);
  no later level starts. A stop before a level's clock started reports nothing for it.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import suppress
from time import perf_counter

from agents.loadgen.agentic import AgenticDriver
from agents.loadgen.agentic_prompts import AgenticPrompts
from agents.loadgen.capacity import CapacityPlanner
from agents.loadgen.config import BenchConfig
from agents.loadgen.events import (
    BenchFinished,
    CapacityFound,
    Event,
    LevelFinished,
    LevelStarted,
    RequestDone,
    ServerSample,
    level_label,
)
from agents.loadgen.http import ConnectionPool, HttpError, Origin, fetch, parse_base_url
from agents.loadgen.levels import (
    extension_due,
    finished_level_result,
    fixed_levels,
    is_steady,
    level_key,
    level_load,
    level_prompt_count,
    level_rngs,
    level_send_limit,
    level_wants_more,
    send_offsets,
    window_target,
)
from agents.loadgen.lora_spread import request_model
from agents.loadgen.openai import encode_request, send_request
from agents.loadgen.prompts import Prompt
from agents.loadgen.records import RequestRecord
from agents.loadgen.schedule import run_on_schedule
from agents.loadgen.server_metrics import MetricsScraper
from agents.loadgen.session_prompts import SessionPrompts
from agents.loadgen.sessions import SessionDriver
from agents.loadgen.steady import ClosedLoopWindow, OpenLoopWindow


def prompt_digest(text: str) -> str:
    """A short digest of a prompt, to show that trials sent the same traffic."""
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


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
        self.origin: Origin = parse_base_url(config.base_url, config.connect_addresses)
        self.pool = ConnectionPool(self.origin, connect_timeout=config.connect_timeout)
        self.scraper: MetricsScraper | None = None
        # How many times each level ran so far: a repeat gets fresh prompts of its own.
        self.level_runs: Counter[str] = Counter()
        self._resume = list(config.resume_results)

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
                model=request_model(config, key),
                prompt=prompt.text,
                output_len=prompt.output_len,
                api_key=config.api_key,
                ignore_eos=config.ignore_eos,
            )
            for key, prompt in enumerate(prompts)
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
        window: ClosedLoopWindow | None = None,
        digests: list[str] | None = None,
    ) -> None:
        timeout = self.config.request_timeout
        ramp = self.config.ramp_up_seconds if window is not None else 0.0
        pool = self.pool
        start = perf_counter()

        async def slot(number: int) -> None:
            if ramp > 0:
                # A staggered ramp: slot i joins at i/concurrency of the ramp.
                await asyncio.sleep(max(start + ramp * number / concurrency - perf_counter(), 0))
            first = True
            while True:
                index = len(records)
                if not level_wants_more(index, perf_counter(), count, deadline, window):
                    return
                prompt = prompts[index % len(prompts)]
                record = RequestRecord(index, prompt.output_len, prompt.prompt_len)
                record.model = request_model(self.config, index % len(requests))
                if digests is not None:
                    record.prompt_sha = digests[index % len(digests)]
                records.append(record)
                await send_request(
                    pool,
                    requests[index % len(requests)],
                    record,
                    timeout=timeout,
                    activity=self.config.activity,
                )
                if window is not None:
                    window.finished(record, first_of_slot=first)
                first = False
                if progress is not None:
                    progress.done(record)

        await asyncio.gather(*(slot(number) for number in range(concurrency)))

    async def _open_loop(
        self,
        offsets: Iterable[float],
        start: float,
        prompts: list[Prompt],
        requests: list[bytes],
        count: int | None,
        duration: float | None,
        progress: _Progress,
        records: list[RequestRecord],
        window: OpenLoopWindow | None = None,
        digests: list[str] | None = None,
    ) -> None:
        timeout = self.config.request_timeout
        limit = self.config.max_concurrency
        gate = asyncio.Semaphore(limit) if limit else None

        async def send(record: RequestRecord, request: bytes) -> None:
            if gate is None:
                await send_request(
                    self.pool, request, record, timeout=timeout, activity=self.config.activity
                )
            else:
                async with gate:
                    await send_request(
                        self.pool, request, record, timeout=timeout, activity=self.config.activity
                    )
            if window is not None:
                window.answer()
            progress.done(record)

        if window is not None:
            window.begin(start)

        def ended(index: int, offset: float) -> bool:
            return (
                (count is not None and index >= count)
                or (duration is not None and offset >= duration)
                or (window is not None and window.draining)
            )

        def launch(index: int, offset: float) -> Awaitable[None]:
            prompt = prompts[index % len(prompts)]
            record = RequestRecord(index, prompt.output_len, prompt.prompt_len, offset)
            record.model = request_model(self.config, index % len(requests))
            if digests is not None:
                record.prompt_sha = digests[index % len(digests)]
            records.append(record)
            if window is not None:
                window.sent(offset)
            return send(record, requests[index % len(requests)])

        await run_on_schedule(offsets, start, ended=ended, launch=launch)

    async def run_level(
        self, index: int, level: dict, *, probe: bool = False, extension: int = 0
    ) -> dict | None:
        """Runs one level; its result, or None when ``stop`` came before its clock started.
        ``probe``: a capacity search asked for it; ``extension``: the n-th measurement again
        of a level too close to call (the result says either)."""
        config = self.config
        self.level_index = index
        key = level_key(level)
        repeat = self.level_runs[key]
        self.level_runs[key] += 1
        concurrency, rate = level_load(level)
        rng, arrivals_rng = level_rngs(config.seed, key, repeat)
        prompt_count = level_prompt_count(config, concurrency, rate)
        source = config.source
        if isinstance(source, SessionPrompts):
            plans = source.sessions(
                source.sessions_for(prompt_count, concurrency), rng, config.tokenizer
            )
        elif isinstance(source, AgenticPrompts):
            plans = source.sessions(source.sessions_for(prompt_count, concurrency), rng)
            salt = rng.getrandbits(64)
        else:
            prompts = source.sample(prompt_count, rng, config.tokenizer)
            requests = self._prepare(prompts)
            digests = [prompt_digest(prompt.text) for prompt in prompts]
        steady = is_steady(config, rate)
        target = window_target(config, concurrency, rate)
        # A steady level ends when its window is full, a classic one after its count.
        count = level_send_limit(config, rate)
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
        if config.duration is None:
            gc.disable()
        # What a progress bar counts to: a steady level's window, its ramp and its drain.
        expected = count if target is None else target + 2 * (concurrency or 0)
        self.emit(LevelStarted(index, level, expected, config.duration))
        progress = _Progress(index, self.emit)
        records: list[RequestRecord] = []
        closed_window = open_window = None
        start = progress.started = perf_counter()
        deadline = start + config.duration if config.duration is not None else None
        try:
            if isinstance(source, SessionPrompts | AgenticPrompts):
                driver = (
                    AgenticDriver(
                        config, self.pool, self.origin, plans, records, progress.done, salt
                    )
                    if isinstance(source, AgenticPrompts)
                    else SessionDriver(
                        config, self.pool, self.origin, plans, records, progress.done
                    )
                )
                if concurrency is not None:
                    closed_window = ClosedLoopWindow(concurrency, target) if steady else None
                    work = driver.closed_loop(
                        concurrency,
                        count,
                        deadline,
                        closed_window,
                        config.ramp_up_seconds if steady else 0.0,
                    )
                else:
                    offsets = send_offsets(config, rate, arrivals_rng, steady=steady)
                    work = driver.open_loop(offsets, start, count, config.duration)
            elif concurrency is not None:
                closed_window = ClosedLoopWindow(concurrency, target) if steady else None
                work = self._closed_loop(
                    concurrency,
                    prompts,
                    requests,
                    count,
                    deadline,
                    progress,
                    records,
                    closed_window,
                    digests,
                )
            else:
                open_window = OpenLoopWindow(config.ramp_up_seconds, target) if steady else None
                work = self._open_loop(
                    send_offsets(config, rate, arrivals_rng, steady=steady),
                    start,
                    prompts,
                    requests,
                    count,
                    config.duration,
                    progress,
                    records,
                    open_window,
                    digests,
                )
            stopped = await self._unless_stopped(work)
        finally:
            gc.unfreeze()
            if gc_was_enabled:
                gc.enable()
        finished = [record for record in records if record.finished] if stopped else records
        end = max((record.finished for record in finished), default=perf_counter())
        server = await self.scraper.finish() if self.scraper is not None else None
        result = finished_level_result(
            config,
            level,
            finished,
            start=start,
            end=end,
            window=closed_window or open_window,
            server=server,
        )
        if probe:
            result["probe"] = True
        if repeat:
            result["repeat"] = repeat
        if extension:
            result["extension"] = extension
        if stopped:
            result["partial"] = True
            result["aborted"] = len(records) - len(finished)
        self.emit(LevelFinished(index, result, finished))
        return result

    async def run(self) -> None:
        try:
            await self.preflight()
            results = []
            # Each fixed level `repeats` times in a row (fresh prompts each time).
            # A level too close to call is measured again right after (``extension_due``).
            index = 0
            for level in fixed_levels(self.config):
                extension = 0
                while not self.stopped:
                    result = self._resumed(level) or await self.run_level(
                        index, level, extension=extension
                    )
                    index += 1
                    if result is None:
                        break
                    results.append(result)
                    if not (extension := extension_due(self.config, level, results)):
                        break
            capacity = None
            if self._searches():
                capacity = await self._search_capacity(results, index)
                self.emit(CapacityFound(capacity))
            self.emit(
                BenchFinished(
                    self.config.describe(), results, stopped=self.stopped, capacity=capacity
                )
            )
        finally:
            self.pool.close()
            if self.scraper is not None:
                self.scraper.close()

    def _resumed(self, level: dict) -> dict | None:
        """The result an earlier attempt on this configuration measured for the next level
        (``resume_results``, in order), counted as a run of its level; None once they are
        used up: from there on every level is measured."""
        if self._resume and level_key(self._resume[0]) == level_key(level):
            self.level_runs[level_key(level)] += 1
            return self._resume.pop(0)
        self._resume.clear()  # the earlier attempt went another way: measure from here
        return None

    def _searches(self) -> bool:
        slos = self.config.slos
        return self.config.capacity is not None and slos is not None and slos.given

    async def _search_capacity(self, results: list[dict], index: int) -> dict:
        """Measures probe levels until the capacity planner is done; appends them to
        ``results`` and returns what the search found."""
        planner = CapacityPlanner(self.config.capacity, max_extensions=self.config.max_extensions)
        for result in results:
            planner.record(result)
        while not self.stopped and (load := planner.next_load()) is not None:
            axis = planner.axis
            level = {axis: int(load) if axis == "concurrency" else load}
            result = self._resumed(level) or await self.run_level(index, level, probe=True)
            index += 1
            if result is None:
                break
            results.append(result)
            planner.record(result, probe=True)
        return planner.outcome()


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
