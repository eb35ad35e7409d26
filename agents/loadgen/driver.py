"""The load generator's driver: runs load levels in order and streams progress events; each
finished level's result is the protocol's ``LevelResult``.

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
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
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
    result_key,
    send_offsets,
    typed_level_result,
    window_target,
)
from agents.loadgen.loops import (
    LevelPlan,
    LevelSamples,
    Progress,
    closed_loop,
    encode_requests,
    open_loop,
    prompt_digest,
)
from agents.loadgen.records import RequestRecord
from agents.loadgen.server_metrics import MetricsScraper
from agents.loadgen.session_prompts import SessionPrompts
from agents.loadgen.sessions import SessionDriver
from agents.loadgen.steady import ClosedLoopWindow, OpenLoopWindow
from agents.protocol import LevelResult


class ServerUnreachable(RuntimeError):
    """The server could not be reached before a level's clock started: nothing of that level
    (or of any later one) was measured."""


class LevelDriver:
    """Runs one benchmark: preflight, then each level in order (``prepare``, ``drive``,
    ``finish``), reporting through ``emit``."""

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

    async def run_level(
        self, index: int, level: dict, *, probe: bool = False, extension: int = 0
    ) -> LevelResult | None:
        """Runs one level; its result, or None when ``stop`` came before its clock started.
        ``probe``: a capacity search asked for it; ``extension``: the n-th measurement again
        of a level too close to call (the result says either)."""
        plan = await self.prepare(index, level)
        if plan is None:
            return None
        samples = await self.drive(plan)
        return await self.finish(plan, samples, probe=probe, extension=extension)

    async def prepare(self, index: int, level: dict) -> LevelPlan | None:
        """Everything costly before the level's clock starts: its traffic sampled and
        encoded, connections opened, the warm-up sent. None when ``stop`` came first."""
        config = self.config
        self.level_index = index
        key = level_key(level)
        repeat = self.level_runs[key]
        self.level_runs[key] += 1
        concurrency, rate = level_load(level)
        rng, arrivals_rng = level_rngs(config.seed, key, repeat)
        prompt_count = level_prompt_count(config, concurrency, rate)
        plan = LevelPlan(
            index,
            level,
            repeat,
            concurrency,
            rate,
            arrivals_rng,
            steady=is_steady(config, rate),
            target=window_target(config, concurrency, rate),
            # A steady level ends when its window is full, a classic one after its count.
            count=level_send_limit(config, rate),
        )
        source = config.source
        if isinstance(source, SessionPrompts):
            plan.sessions = source.sessions(
                source.sessions_for(prompt_count, concurrency), rng, config.tokenizer
            )
        elif isinstance(source, AgenticPrompts):
            plan.sessions = source.sessions(source.sessions_for(prompt_count, concurrency), rng)
            plan.salt = rng.getrandbits(64)
        else:
            plan.prompts = source.sample(prompt_count, rng, config.tokenizer)
            plan.requests = encode_requests(config, self.origin, plan.prompts)
            plan.digests = [prompt_digest(prompt.text) for prompt in plan.prompts]
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
            warm_up = closed_loop(
                config,
                self.pool,
                min(config.warmup, concurrency or config.max_concurrency or config.warmup),
                warm_prompts,
                encode_requests(config, self.origin, warm_prompts),
                config.warmup,
                None,
                None,
                [],
            )
            if await self._unless_stopped(warm_up):
                return None
        return None if self.stopped else plan

    async def drive(self, plan: LevelPlan) -> LevelSamples:
        """Starts the level's clock and sends its traffic until it is done or stopped."""
        config = self.config
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
        concurrency, count, target = plan.concurrency, plan.count, plan.target
        # What a progress bar counts to: a steady level's window, its ramp and its drain.
        expected = count if target is None else target + 2 * (concurrency or 0)
        self.emit(LevelStarted(plan.index, plan.level, expected, config.duration))
        progress = Progress(plan.index, self.emit)
        records: list[RequestRecord] = []
        window: ClosedLoopWindow | OpenLoopWindow | None = None
        start = progress.started = perf_counter()
        deadline = start + config.duration if config.duration is not None else None
        try:
            if isinstance(config.source, SessionPrompts | AgenticPrompts):
                driver = (
                    AgenticDriver(
                        config,
                        self.pool,
                        self.origin,
                        plan.sessions,
                        records,
                        progress.done,
                        plan.salt,
                    )
                    if isinstance(config.source, AgenticPrompts)
                    else SessionDriver(
                        config, self.pool, self.origin, plan.sessions, records, progress.done
                    )
                )
                if concurrency is not None:
                    window = ClosedLoopWindow(concurrency, target) if plan.steady else None
                    work = driver.closed_loop(
                        concurrency,
                        count,
                        deadline,
                        window,
                        config.ramp_up_seconds if plan.steady else 0.0,
                    )
                else:
                    offsets = send_offsets(config, plan.rate, plan.arrivals_rng, steady=plan.steady)
                    work = driver.open_loop(offsets, start, count, config.duration)
            elif concurrency is not None:
                window = ClosedLoopWindow(concurrency, target) if plan.steady else None
                work = closed_loop(
                    config,
                    self.pool,
                    concurrency,
                    plan.prompts,
                    plan.requests,
                    count,
                    deadline,
                    progress,
                    records,
                    window,
                    plan.digests,
                )
            else:
                window = OpenLoopWindow(config.ramp_up_seconds, target) if plan.steady else None
                work = open_loop(
                    config,
                    self.pool,
                    send_offsets(config, plan.rate, plan.arrivals_rng, steady=plan.steady),
                    start,
                    plan.prompts,
                    plan.requests,
                    count,
                    config.duration,
                    progress,
                    records,
                    window,
                    plan.digests,
                )
            stopped = await self._unless_stopped(work)
        finally:
            gc.unfreeze()
            if gc_was_enabled:
                gc.enable()
        return LevelSamples(records, start, window, stopped)

    async def finish(
        self, plan: LevelPlan, samples: LevelSamples, *, probe: bool, extension: int
    ) -> LevelResult:
        """The level's result from what its clock measured; reported with its records."""
        finished = samples.finished
        end = max((record.finished for record in finished), default=perf_counter())
        server = await self.scraper.finish() if self.scraper is not None else None
        figures = finished_level_result(
            self.config,
            plan.level,
            finished,
            start=samples.start,
            end=end,
            window=samples.window,
            server=server,
        )
        if probe:
            figures["probe"] = True
        if plan.repeat:
            figures["repeat"] = plan.repeat
        if extension:
            figures["extension"] = extension
        if samples.stopped:
            figures["partial"] = True
            figures["aborted"] = samples.aborted
        result, server = typed_level_result(figures)
        self.emit(LevelFinished(plan.index, result, finished, server))
        return result

    async def run(self) -> None:
        try:
            await self.preflight()
            results: list[LevelResult] = []
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

    def _resumed(self, level: dict) -> LevelResult | None:
        """The result an earlier attempt on this configuration measured for the next level
        (``resume_results``, in order), counted as a run of its level; None once they are
        used up: from there on every level is measured."""
        if self._resume and result_key(self._resume[0]) == level_key(level):
            self.level_runs[level_key(level)] += 1
            return self._resume.pop(0)
        self._resume.clear()  # the earlier attempt went another way: measure from here
        return None

    def _searches(self) -> bool:
        slos = self.config.slos
        return self.config.capacity is not None and slos is not None and slos.given

    async def _search_capacity(self, results: list[LevelResult], index: int) -> dict:
        """Measures probe levels until the capacity planner is done; appends them to
        ``results`` and returns what the search found."""
        planner = CapacityPlanner(self.config.capacity, max_extensions=self.config.max_extensions)
        # The planner reads results as JSON, the way the site reads what it stored.
        for result in results:
            planner.record(result.model_dump())
        while not self.stopped and (load := planner.next_load()) is not None:
            axis = planner.axis
            level = {axis: int(load) if axis == "concurrency" else load}
            result = self._resumed(level) or await self.run_level(index, level, probe=True)
            index += 1
            if result is None:
                break
            results.append(result)
            planner.record(result.model_dump(), probe=True)
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
    runner = LevelDriver(config, queue.put_nowait, stop)

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


async def run_levels(config: BenchConfig) -> list[LevelFinished]:
    """Runs the benchmark and returns each level as it finished (its result, records and
    server's metrics), without the progress events."""
    return [event async for event in run_bench(config) if isinstance(event, LevelFinished)]
