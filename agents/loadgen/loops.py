"""How a level's requests leave: a closed loop that keeps ``concurrency`` requests in flight,
or an open loop that sends each at its scheduled time; both append each request's record
as it is sent, and count it as it ends.

A level's ``LevelPlan`` (built before its clock starts) goes in, its ``LevelSamples`` (every
request's record) come out: the raw material its result is computed from.

Guarantees: a closed-loop slot sends its next request as soon as its last one ended (a
steady level's slots join over the ramp, one by one); an open-loop request never leaves
before its time, and at most ``max_concurrency`` are in flight when that is set. Requests
are encoded before the level's clock starts (``encode_requests``).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from time import perf_counter

from agents.loadgen.config import BenchConfig
from agents.loadgen.events import Event, RequestDone
from agents.loadgen.http import ConnectionPool, Origin
from agents.loadgen.levels import level_wants_more
from agents.loadgen.lora_spread import request_model
from agents.loadgen.openai import encode_request, send_request
from agents.loadgen.prompts import Prompt
from agents.loadgen.records import RequestRecord
from agents.loadgen.schedule import run_on_schedule
from agents.loadgen.steady import ClosedLoopWindow, OpenLoopWindow


@dataclass
class LevelPlan:
    """One level as prepared before its clock starts: its load, its window's size, and its
    traffic (prompts encoded as requests, or the sessions a session level plays)."""

    index: int
    level: dict
    repeat: int
    concurrency: int | None
    rate: float | None
    arrivals_rng: random.Random
    steady: bool
    target: int | None  # a steady window's requests
    count: int | None  # requests to send (None: until the deadline or the window is full)
    prompts: list[Prompt] = field(default_factory=list)
    requests: list[bytes] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)
    sessions: list = field(default_factory=list)  # a session level's plans
    salt: int = 0  # an agentic level's


@dataclass
class LevelSamples:
    """What a level's clock measured: every request sent (in the order sent), when the clock
    started, the steady window it filled (None: not steady) and whether a stop cut it short.
    The raw material of the level's result (``agents.loadgen.driver``)."""

    records: list[RequestRecord]
    start: float
    window: ClosedLoopWindow | OpenLoopWindow | None
    stopped: bool

    @property
    def finished(self) -> list[RequestRecord]:
        """The requests that count: all of them, or those that ended before a stop."""
        return [r for r in self.records if r.finished] if self.stopped else self.records

    @property
    def aborted(self) -> int:
        """Requests a stop cut off."""
        return len(self.records) - len(self.finished)


def prompt_digest(text: str) -> str:
    """A short digest of a prompt, to show that trials sent the same traffic."""
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def encode_requests(config: BenchConfig, origin: Origin, prompts: list[Prompt]) -> list[bytes]:
    """Each prompt's request, as the bytes sent."""
    return [
        encode_request(
            origin,
            endpoint=config.endpoint,
            model=request_model(config, key),
            prompt=prompt.text,
            output_len=prompt.output_len,
            api_key=config.api_key,
            ignore_eos=config.ignore_eos,
        )
        for key, prompt in enumerate(prompts)
    ]


class Progress:
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


async def closed_loop(
    config: BenchConfig,
    pool: ConnectionPool,
    concurrency: int,
    prompts: list[Prompt],
    requests: list[bytes],
    count: int | None,
    deadline: float | None,
    progress: Progress | None,
    records: list[RequestRecord],
    window: ClosedLoopWindow | None = None,
    digests: list[str] | None = None,
) -> None:
    """Keeps ``concurrency`` requests in flight until the level wants no more."""
    timeout = config.request_timeout
    ramp = config.ramp_up_seconds if window is not None else 0.0
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
            record.model = request_model(config, index % len(requests))
            if digests is not None:
                record.prompt_sha = digests[index % len(digests)]
            records.append(record)
            await send_request(
                pool,
                requests[index % len(requests)],
                record,
                timeout=timeout,
                activity=config.activity,
            )
            if window is not None:
                window.finished(record, first_of_slot=first)
            first = False
            if progress is not None:
                progress.done(record)

    await asyncio.gather(*(slot(number) for number in range(concurrency)))


async def open_loop(
    config: BenchConfig,
    pool: ConnectionPool,
    offsets: Iterable[float],
    start: float,
    prompts: list[Prompt],
    requests: list[bytes],
    count: int | None,
    duration: float | None,
    progress: Progress,
    records: list[RequestRecord],
    window: OpenLoopWindow | None = None,
    digests: list[str] | None = None,
) -> None:
    """Sends each request at ``start`` plus its offset until the level wants no more."""
    timeout = config.request_timeout
    limit = config.max_concurrency
    gate = asyncio.Semaphore(limit) if limit else None

    async def send(record: RequestRecord, request: bytes) -> None:
        if gate is None:
            await send_request(pool, request, record, timeout=timeout, activity=config.activity)
        else:
            async with gate:
                await send_request(pool, request, record, timeout=timeout, activity=config.activity)
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
        record.model = request_model(config, index % len(requests))
        if digests is not None:
            record.prompt_sha = digests[index % len(digests)]
        records.append(record)
        if window is not None:
            window.sent(offset)
        return send(record, requests[index % len(requests)])

    await run_on_schedule(offsets, start, ended=ended, launch=launch)
