"""A benchmark run against the simulator offline, in simulated time: no server, no socket,
no wall clock — seconds of CPU for what would take minutes on a GPU.

Guarantees:

- The same benchmark as ``agents.loadgen.driver`` runs over HTTP, driven by the same rules
  (``agents.loadgen.levels``): each level's prompts and send times from the same seeded
  generators, the same warm-up, closed-loop slots (a slot sends its next request the moment
  its last one ended; ``ramp_up_seconds`` staggers them) or open-loop send times
  (``send_offsets``: gamma gaps, ramped, or a trace's times), the same steady windows,
  repeats and capacity search (``CapacityPlanner``). Its level results carry exactly the
  keys of ``bench --json``.
- Every level of one benchmark runs on one ``Scheduler`` (one server: its prefix cache and
  KV blocks carry over), its clock running on from level to level.
- A request is timed as the load generator would time it against the simulator's server
  with no network in between: it starts when sent, its first token is its TTFT, the gaps
  between tokens its ITL. A prompt longer than the server's context is refused as vLLM
  refuses it (``http_400``).
- ``server`` in each level is what a scrape of the simulator's ``/metrics`` would report:
  gauges sampled every simulated second, counters as deltas over the level, histogram means.
- Deterministic: the same benchmark on the same scheduler gives the same results.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache, partial
from itertools import pairwise

from agents.engines.sim.completions import role_marker
from agents.engines.sim.scheduler import Scheduler, SimRequest, prompt_block_hashes
from agents.loadgen.agentic_prompts import AgenticPrompts
from agents.loadgen.capacity import CapacityPlanner
from agents.loadgen.config import BenchConfig
from agents.loadgen.events import CapacityFound, LevelFinished, LevelStarted
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
    typed_level_result,
    window_target,
)
from agents.loadgen.prompts import Prompt
from agents.loadgen.records import RequestRecord
from agents.loadgen.session_prompts import SessionPlan, SessionPrompts
from agents.loadgen.speculative import spec_decode_acceptance
from agents.loadgen.steady import ClosedLoopWindow, OpenLoopWindow
from agents.predict.offline_agentic import run_agentic
from agents.predict.offline_sessions import run_sessions
from agents.predict.senders import Sender
from agents.predict.senders import words as _words
from agents.protocol import LevelResult
from agents.workloads.agentic import AgenticSession

# How often the simulated /metrics is sampled during a level (simulated seconds), as the
# load generator's scraper does by default.
SAMPLE_PERIOD_S = 1.0


class WorkTooLarge(RuntimeError):
    """The benchmark would simulate more work than the caller allowed (``work_budget``)."""


@dataclass
class OfflineBenchResult:
    """What ``run_offline`` measured: every level's result (as ``bench --json`` writes
    them, in order) and, with a capacity search, what it found."""

    levels: list[dict]
    capacity: dict | None
    simulated_seconds: float


@dataclass
class _Gauges:
    """The simulated server's gauges, sampled every ``SAMPLE_PERIOD_S`` of a level."""

    origin: float
    series: list[dict] = field(default_factory=list)
    next_at: float = 0.0

    def sample_until(self, now: float, scheduler: Scheduler) -> None:
        while self.next_at <= now:
            self.series.append(
                {
                    "t": round(self.next_at - self.origin, 3),
                    "num_requests_running": float(len(scheduler.running)),
                    "num_requests_waiting": float(scheduler.waiting_at(self.next_at)),
                    "kv_cache_usage_perc": scheduler.pool.usage,
                }
            )
            self.next_at += SAMPLE_PERIOD_S


class _Counters:
    """The scheduler's counters at a level's start, to report deltas over the level."""

    NAMES = (
        "preemptions",
        "prefix_queries",
        "prefix_hits",
        "prompt_tokens",
        "generation_tokens",
        "spec_drafts",
        "spec_draft_tokens",
        "spec_accepted_tokens",
    )

    def __init__(self, scheduler: Scheduler):
        self.start = {name: getattr(scheduler, name) for name in self.NAMES}

    def delta(self, scheduler: Scheduler, name: str) -> float:
        return float(getattr(scheduler, name) - self.start[name])


class OfflineBench:
    """Runs one ``BenchConfig`` on a scheduler in simulated time (module docstring)."""

    def __init__(
        self,
        config: BenchConfig,
        scheduler: Scheduler,
        *,
        intervals: bool = True,
        work_budget: int | None = None,
    ):
        """``work_budget``: at most this many request-steps (one request in one engine step:
        about one output token, the unit the simulator's CPU cost follows), else
        ``WorkTooLarge`` — a bound on the CPU a caller such as a web request may spend."""
        if config.max_concurrency is not None:
            raise ValueError("max_concurrency is not simulated offline")
        self.config = config
        self.intervals = intervals
        self.work_budget = work_budget
        self.work = 0
        self.scheduler = scheduler
        self.now = 0.0
        self.level_runs: Counter[str] = Counter()
        self._ids = 0

    # -- requests ----------------------------------------------------------------------------

    def _request(self, prompt: Prompt, record: RequestRecord) -> SimRequest | None:
        """The simulator's request for ``prompt`` (None: refused, the record says why)."""
        words = _words(prompt.text)
        if self.config.endpoint == "chat":
            # The chat template's role marker, one token, as the simulator's server counts.
            words = [role_marker("user"), *words]
        return self.request_for(words, prompt.output_len, record)

    def request_for(
        self, words: list[str], output_len: int, record: RequestRecord
    ) -> SimRequest | None:
        """The simulator's request for a prompt of these tokens (its words, chat role
        markers included) sent at ``record.start``; None: refused, the record says why."""
        settings = self.scheduler.settings
        prompt_len = max(1, len(words))
        record.prompt_tokens = prompt_len
        if prompt_len + output_len > settings.max_model_len:
            record.fail(
                "http_400",
                f"This model's maximum context length is {settings.max_model_len} tokens. "
                f"However, you requested {prompt_len + output_len} tokens.",
            )
            record.finished = record.start
            return None
        hashes = (
            prompt_block_hashes(words, settings.block_size)
            if settings.enable_prefix_caching
            else ()
        )
        self._ids += 1
        return SimRequest(
            self._ids,
            prompt_len,
            output_len,
            arrival=record.start,
            block_hashes=hashes,
            chat=self.config.endpoint == "chat",
        )

    @staticmethod
    def finish(record: RequestRecord, request: SimRequest) -> None:
        """Times ``record`` from the simulator's finished ``request``."""
        times = request.token_times
        record.ttft = times[0] - record.start
        record.itl = [b - a for a, b in pairwise(times)]
        record.latency = times[-1] - record.start
        record.finished = times[-1]
        record.chunks = len(times)  # a speculative step streams its tokens in one chunk
        record.output_tokens = request.output
        record.success = True

    def drive(self, sender: Sender, on_finish: Callable[[SimRequest, float], None]) -> None:
        """Runs the scheduler until nothing is left to send or compute: ``sender`` says when
        its next request goes out (asked afresh each time: a finish may make one ready);
        ``on_finish`` hears each finished request."""
        scheduler = self.scheduler
        while True:
            while (moment := sender.next_time()) is not None and moment <= self.now:
                sender.send()
            step = scheduler.schedule(self.now)
            if step is None:
                upcoming = [t for t in (moment, scheduler.ready_later(self.now)) if t is not None]
                if not upcoming:
                    return
                self.now = min(upcoming)
                continue
            end = self.now + step.duration
            if self.work_budget is not None:
                self.work += len(step.items)
                if self.work > self.work_budget:
                    raise WorkTooLarge(
                        f"more than {self.work_budget:,} simulated request-steps: too large "
                        "to predict here"
                    )
            # Requests sent while the step runs join the queue for the next one.
            while (moment := sender.next_time()) is not None and moment <= end:
                sender.send()
            self.now = end
            self._on_step(end)
            for request in scheduler.finish(step, end):
                on_finish(request, end)

    def _on_step(self, now: float) -> None:
        """Hook for the level in progress (gauge sampling)."""

    # -- levels ------------------------------------------------------------------------------

    def _closed_loop(
        self,
        concurrency: int,
        prompts: list[Prompt],
        count: int | None,
        deadline: float | None,
        records: list[RequestRecord],
        window: ClosedLoopWindow | None,
    ) -> None:
        ramp = self.config.ramp_up_seconds if window is not None else 0.0
        start = self.now
        owners: dict[int, tuple[RequestRecord, int, bool]] = {}
        # Slots ready to send at a time: (time, slot, first of slot); a heap by time.
        ready: list[tuple[float, int, bool]] = [
            (start + ramp * slot / concurrency, slot, True) for slot in range(concurrency)
        ]
        heapq.heapify(ready)

        def may_send(moment: float) -> bool:
            return level_wants_more(len(records), moment, count, deadline, window)

        def send_from(moment: float, slot: int, first: bool) -> None:
            while True:
                if not may_send(moment):
                    return
                index = len(records)
                prompt = prompts[index % len(prompts)]
                record = RequestRecord(index, prompt.output_len, prompt.prompt_len)
                record.start = moment
                records.append(record)
                request = self._request(prompt, record)
                if request is not None:
                    owners[request.id] = (record, slot, first)
                    self.scheduler.add(request)
                    return
                # Refused at once: the slot's next request goes out at the same moment.
                if window is not None:
                    window.finished(record, first_of_slot=first)
                first = False

        class Slots(Sender):
            def next_time(self) -> float | None:
                return ready[0][0] if ready and may_send(ready[0][0]) else None

            def send(self) -> None:
                moment, slot, first = heapq.heappop(ready)
                send_from(moment, slot, first)

        def finished(request: SimRequest, now: float) -> None:
            record, slot, first = owners.pop(request.id)
            self.finish(record, request)
            if window is not None:
                window.finished(record, first_of_slot=first)
            # The client sends its next request once it has read the last token.
            heapq.heappush(ready, (request.token_times[-1], slot, False))

        self.drive(Slots(), finished)

    def _open_loop(
        self,
        offsets: Iterable[float],
        prompts: list[Prompt],
        count: int | None,
        duration: float | None,
        records: list[RequestRecord],
        window: OpenLoopWindow | None,
    ) -> None:
        start = self.now
        if window is not None:
            window.begin(start)
        owners: dict[int, RequestRecord] = {}

        def send_at(moment: float, index: int, offset: float) -> None:
            prompt = prompts[index % len(prompts)]
            record = RequestRecord(index, prompt.output_len, prompt.prompt_len, offset)
            record.start = moment
            records.append(record)
            if window is not None:
                window.sent(offset)
            request = self._request(prompt, record)
            if request is None:
                if window is not None:
                    window.answer()
                return
            owners[request.id] = record
            self.scheduler.add(request)

        schedule = enumerate(offsets)

        class Schedule(Sender):
            def __init__(self):
                self.upcoming = next(schedule, None)

            def next_time(self) -> float | None:
                if self.upcoming is None:
                    return None
                index, offset = self.upcoming
                if (
                    (count is not None and index >= count)
                    or (duration is not None and offset >= duration)
                    or (window is not None and window.draining)
                ):
                    return None
                return start + offset

            def send(self) -> None:
                index, offset = self.upcoming
                self.upcoming = next(schedule, None)
                send_at(start + offset, index, offset)

        def finished(request: SimRequest, now: float) -> None:
            self.finish(owners.pop(request.id), request)
            if window is not None:
                window.answer()

        self.drive(Schedule(), finished)

    def run_level(self, level: dict, *, probe: bool = False) -> dict:
        """Runs one level to its end and returns its result (``bench --json``'s keys)."""
        config = self.config
        key = level_key(level)
        repeat = self.level_runs[key]
        self.level_runs[key] += 1
        concurrency, rate = level_load(level)
        prompts, warm_prompts, arrivals_rng = _level_prompts(
            config, key, repeat, level_prompt_count(config, concurrency, rate), concurrency
        )
        steady = is_steady(config, rate)
        target = window_target(config, concurrency, rate)
        count = level_send_limit(config, rate)
        if warm_prompts:
            self._closed_loop(
                min(config.warmup, concurrency or config.warmup),
                warm_prompts,
                config.warmup,
                None,
                [],
                None,
            )
        scheduler = self.scheduler
        counters = _Counters(scheduler)
        start = self.now
        gauges = _Gauges(start, next_at=start + SAMPLE_PERIOD_S)
        self._on_step = lambda now: gauges.sample_until(now, scheduler)
        records: list[RequestRecord] = []
        window: ClosedLoopWindow | OpenLoopWindow | None
        deadline = start + config.duration if config.duration is not None else None
        try:
            if isinstance(prompts, SessionPlans):
                window = ClosedLoopWindow(concurrency, target) if steady and concurrency else None
                agentic = isinstance(config.source, AgenticPrompts)
                run = (
                    partial(run_agentic, self, prompts.plans, prompts.salt)
                    if agentic
                    else partial(run_sessions, self, prompts.plans)
                )
                run(
                    records,
                    concurrency=concurrency,
                    offsets=()
                    if concurrency is not None
                    else send_offsets(config, rate, arrivals_rng, steady=steady),
                    count=count,
                    deadline=deadline,
                    window=window,
                    ramp_seconds=config.ramp_up_seconds if window is not None else 0.0,
                )
            elif concurrency is not None:
                window = ClosedLoopWindow(concurrency, target) if steady else None
                self._closed_loop(concurrency, prompts, count, deadline, records, window)
            else:
                window = OpenLoopWindow(config.ramp_up_seconds, target) if steady else None
                self._open_loop(
                    send_offsets(config, rate, arrivals_rng, steady=steady),
                    prompts,
                    count,
                    config.duration,
                    records,
                    window,
                )
        finally:
            self._on_step = lambda now: None
        end = max((record.finished for record in records), default=self.now)
        server = self._server_report(scheduler, counters, gauges, records)
        result = finished_level_result(
            config,
            level,
            records,
            start=start,
            end=end,
            window=window,
            server=server,
            intervals=self.intervals,
        )
        if probe:
            result["probe"] = True
        if repeat:
            result["repeat"] = repeat
        return result

    @staticmethod
    def _server_report(
        scheduler: Scheduler, counters: _Counters, gauges: _Gauges, records: list[RequestRecord]
    ) -> dict:
        """The level as the simulator's /metrics would report it (``MetricsScraper``'s keys)."""
        report: dict = {}
        for name in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"):
            values = [sample[name] for sample in gauges.series]
            report[name] = (
                {"max": max(values), "mean": math.fsum(values) / len(values)} if values else None
            )
        report["num_preemptions"] = counters.delta(scheduler, "preemptions")
        report["prefix_cache_queries"] = counters.delta(scheduler, "prefix_queries")
        report["prefix_cache_hits"] = counters.delta(scheduler, "prefix_hits")
        report["prompt_tokens"] = counters.delta(scheduler, "prompt_tokens")
        report["generation_tokens"] = counters.delta(scheduler, "generation_tokens")
        queries = report["prefix_cache_queries"]
        report["prefix_cache_hit_rate"] = report["prefix_cache_hits"] / queries if queries else None
        # vLLM exports these counters only with speculative decoding on.
        speculating = scheduler.settings.speculative is not None
        for name, counter in (
            ("num_drafts", "spec_drafts"),
            ("num_draft_tokens", "spec_draft_tokens"),
            ("num_accepted_tokens", "spec_accepted_tokens"),
        ):
            report[f"spec_decode_{name}"] = (
                counters.delta(scheduler, counter) if speculating else None
            )
        report.update(spec_decode_acceptance(report))
        done = [r for r in records if r.success]

        def mean_ms(values: list[float]) -> float | None:
            return 1000 * math.fsum(values) / len(values) if values else None

        report["server_mean_ttft_ms"] = mean_ms([r.ttft for r in done])
        report["server_mean_itl_ms"] = mean_ms([gap for r in done for gap in r.itl])
        report["server_mean_e2el_ms"] = mean_ms([r.latency for r in done])
        report["server_mean_queue_time_ms"] = None
        report["num_gpu_blocks"] = scheduler.pool.num_blocks
        report["series"] = gauges.series
        report["scrape_errors"] = 0
        report["last_scrape_error"] = None
        return report

    # -- the whole benchmark -----------------------------------------------------------------

    def events(self) -> Iterator[LevelStarted | LevelFinished | CapacityFound]:
        """The benchmark as the load generator reports it (``agents.loadgen.events``), one
        level at a time: every fixed level (``repeats`` times), then the capacity search when
        there is one. A level is computed only when the generator is advanced past its
        ``LevelStarted``, so a caller may stop between levels."""
        config = self.config
        results: list[dict] = []
        typed: list[LevelResult] = []  # the same results, as the load generator types them
        for level in fixed_levels(config):
            result, measured = yield from self._level_events(len(results), level, probe=False)
            results.append(result)
            typed.append(measured)
            while extension := extension_due(config, level, typed):
                result, measured = yield from self._level_events(
                    len(results), level, probe=False, extension=extension
                )
                results.append(result)
                typed.append(measured)
        if config.capacity is not None and config.slos is not None and config.slos.given:
            planner = CapacityPlanner(config.capacity, max_extensions=config.max_extensions)
            for result in results:
                planner.record(result)
            while (load := planner.next_load()) is not None:
                axis = planner.axis
                level = {axis: int(load) if axis == "concurrency" else load}
                result, _ = yield from self._level_events(len(results), level, probe=True)
                results.append(result)
                planner.record(result, probe=True)
            yield CapacityFound(planner.outcome())

    def _level_events(self, index: int, level: dict, *, probe: bool, extension: int = 0):
        concurrency, rate = level_load(level)
        target = window_target(self.config, concurrency, rate)
        count = level_send_limit(self.config, rate)
        # What a progress bar counts to, as the load generator says it.
        expected = count if target is None else target + 2 * (concurrency or 0)
        yield LevelStarted(index, level, expected, self.config.duration)
        result = self.run_level(level, probe=probe)
        if extension:
            result["extension"] = extension
        typed, server = typed_level_result(result)
        yield LevelFinished(index, typed, [], server)
        return result, typed

    def run(self) -> OfflineBenchResult:
        """Every level of ``events``, computed at once."""
        levels: list[dict] = []
        capacity = None
        for event in self.events():
            if isinstance(event, LevelFinished):
                levels.append(event.result.model_dump() | {"server": event.server})
            elif isinstance(event, CapacityFound):
                capacity = event.result
        return OfflineBenchResult(levels, capacity, self.now)


def _level_prompts(
    config: BenchConfig, key: str, repeat: int, count: int, concurrency: int | None
) -> tuple[list[Prompt] | SessionPlans, list[Prompt], random.Random]:
    """A level's prompts (a session level's sessions), its warm-up's and the generator of
    its send times, drawn as the load generator draws them (one generator for both, in this
    order)."""
    rng, arrivals_rng = level_rngs(config.seed, key, repeat)
    source = config.source
    if isinstance(source, AgenticPrompts):
        plans = source.sessions(source.sessions_for(count, concurrency), rng)
        salt = rng.getrandbits(64)
        warm = source.sample(config.warmup, rng, config.tokenizer) if config.warmup else []
        return SessionPlans(plans, salt), warm, arrivals_rng
    if isinstance(source, SessionPrompts):
        plans = source.sessions(source.sessions_for(count, concurrency), rng, config.tokenizer)
        warm = source.sample(config.warmup, rng, config.tokenizer) if config.warmup else []
        return SessionPlans(plans), warm, arrivals_rng
    if config.tokenizer is not None:
        prompts = config.source.sample(count, rng, config.tokenizer)
        warm = config.source.sample(config.warmup, rng, config.tokenizer) if config.warmup else []
        return prompts, warm, arrivals_rng
    prompts, warm = _untokenized_prompts(
        config.source, config.seed, key, repeat, count, config.warmup
    )
    return list(prompts), list(warm), arrivals_rng


# A search predicts the same levels for every configuration of a grid: the prompts (text is
# most of a simulated level's set-up) are drawn once. Keyed by everything they depend on.
@lru_cache(maxsize=64)
def _untokenized_prompts(
    source: object, seed: int, key: str, repeat: int, count: int, warmup: int
) -> tuple[tuple[Prompt, ...], tuple[Prompt, ...]]:
    rng, _ = level_rngs(seed, key, repeat)
    prompts = tuple(source.sample(count, rng, None))
    warm = tuple(source.sample(warmup, rng, None)) if warmup else ()
    return prompts, warm


@dataclass(frozen=True)
class SessionPlans:
    """A session level's sessions, where another level has its prompts (an agentic level's
    with the salt of its blocks' text)."""

    plans: list[SessionPlan] | list[AgenticSession]
    salt: int = 0
