"""The simulator's engine: vLLM's continuous batching, on a simulated clock, behind an
OpenAI-compatible server (``python -m agents.engines.sim``, see ``command``).

Guarantees:

- Tokens: a prompt's tokens are its whitespace-separated words (the load generator's
  prompts are words); output tokens are words drawn from a generator seeded by ``--seed``
  and the request's order of arrival, so a run is repeatable. ``max_tokens`` is always
  served in full (as with ``ignore_eos``).
- Timing: an engine loop runs the V1-style scheduler; each step lasts its roofline time
  divided by ``--speed``, measured against absolute deadlines so steps never drift, and the
  tokens of a step are written when it ends. Server-side histograms (``metrics``) record
  simulated seconds; a client at ``--speed S`` sees latencies S times shorter.
- Labelled simulated everywhere: the log's first line, every response's
  ``system_fingerprint`` and ``X-Benchsite-Simulated`` header, ``/v1/models``' ``owned_by``,
  ``/version`` (with ``speed``), and the ``benchsite:simulated`` gauge.

The HTTP side is ``http`` (framing and routes) and ``completions`` (the API's request and
response shapes); ``/metrics`` is ``metrics``; start-up and the command line are ``command``.
"""

from __future__ import annotations

import asyncio
import itertools

from agents.engines.sim.completions import WORDS, Client
from agents.engines.sim.metrics import latency_histograms, observe_token
from agents.engines.sim.scheduler import Scheduler, SimRequest, prompt_block_hashes
from agents.hardware import ModelFacts, ServeSettings


class SimServer:
    """The engine loop: it runs on the same asyncio loop as the HTTP side (``http``), which
    submits requests and receives each token through its ``Client``."""

    def __init__(
        self,
        *,
        model: ModelFacts,
        gpu_name: str,
        settings: ServeSettings,
        scheduler: Scheduler,
        served_model_name: str,
        speed: float = 1.0,
        seed: int = 0,
    ):
        self.model = model
        self.gpu_name = gpu_name
        self.settings = settings
        self.scheduler = scheduler
        self.name = served_model_name
        self.speed = speed
        self.seed = seed
        self.ids = itertools.count()
        self.wakeup = asyncio.Event()
        self.t0 = 0.0
        self.sim_now = 0.0
        self.histograms = latency_histograms()
        self.clients: dict[int, Client] = {}
        self.max_slip = 0.0  # worst lateness of a step's end, wall seconds
        self.slips_over_1ms = 0
        self.steps_timed = 0
        self.labels = f'engine="0",model_name="{served_model_name}"'

    # -- clock -----------------------------------------------------------------------------

    def _sim_time_of(self, wall: float) -> float:
        return (wall - self.t0) * self.speed

    async def run_engine(self) -> None:
        loop = asyncio.get_running_loop()
        self.t0 = loop.time()
        scheduler = self.scheduler
        while True:
            if not scheduler.has_work:
                self.wakeup.clear()
                await self.wakeup.wait()
                # Idle time passes in simulation too: the step starts when work arrived.
                self.sim_now = max(self.sim_now, self._sim_time_of(loop.time()))
            step = scheduler.schedule(self.sim_now)
            if step is None:
                ready = scheduler.ready_later(self.sim_now)
                if ready is None:
                    # Only waiting requests that cannot be admitted yet and nothing
                    # running: cannot happen with a valid plan, but never spin.
                    await asyncio.sleep(0.001)
                    continue
                # Nothing to run until the first waiting request is through the server's
                # front end (a request sent later is ready later).
                await self._sleep_until(ready)
                self.sim_now = max(self.sim_now, ready)
                continue
            end = self.sim_now + step.duration
            slip = await self._sleep_until(end)
            self.steps_timed += 1
            if slip > self.max_slip:
                self.max_slip = slip
            if slip > 0.001:
                self.slips_over_1ms += 1
            self.sim_now = end
            for request in scheduler.finish(step, end):
                self.clients.pop(request.id, None)

    async def _sleep_until(self, sim_time: float) -> float:
        """Returns once the wall clock reaches ``sim_time``; how late, in wall seconds."""
        loop = asyncio.get_running_loop()
        deadline = self.t0 + sim_time / self.speed
        # The loop's timers wake up to ~1 ms late (epoll rounds timeouts up to whole
        # milliseconds): sleep to just before the deadline, then yield until it passes.
        delay = deadline - loop.time()
        if delay > 0.002:
            await asyncio.sleep(delay - 0.0015)
        while loop.time() < deadline:
            await asyncio.sleep(0)
        return loop.time() - deadline

    # -- requests --------------------------------------------------------------------------

    def submit(self, client: Client, prompt_words: list[str], max_tokens: int) -> SimRequest:
        settings = self.settings
        hashes = (
            prompt_block_hashes(prompt_words, settings.block_size)
            if settings.enable_prefix_caching
            else ()
        )
        loop = asyncio.get_running_loop()
        arrival = max(self.sim_now, self._sim_time_of(loop.time()))
        request = SimRequest(
            client.id,
            max(1, len(prompt_words)),
            max_tokens,
            arrival=arrival,
            block_hashes=hashes,
            chat=client.chat,
            on_tokens=self._emit,
        )
        self.clients[client.id] = client
        self.scheduler.add(request)
        self.wakeup.set()
        return request

    def _emit(self, request: SimRequest, count: int, done: bool) -> None:
        client = self.clients.get(request.id)
        observe_token(self.histograms, request, done)
        if client is None or client.conn.closed:
            if client is not None:
                self.scheduler.abort(request)
                self.clients.pop(request.id, None)
            return
        # A step may keep several tokens (speculative decoding): one word each, in one chunk.
        words = tuple(client.rng.randrange(len(WORDS)) for _ in range(count))
        # The token leaves when the API server's queue has streamed it (token_times[-1]),
        # which may be after the step's end. A client's tokens leave in the order they were
        # made: timers due at one moment run in no set order, and a token written after the
        # stream's last would be lost to the client.
        deadline = self.t0 + request.token_times[-1] / self.speed
        pending = client.pending
        pending.append((deadline, words, done))
        if len(pending) == 1:  # else a release is already scheduled for the earlier ones
            self._release(client, request, on_time=False)

    @classmethod
    def _release(cls, client: Client, request: SimRequest, on_time: bool = True) -> None:
        """Writes the client's tokens that are due, in order, and schedules the next;
        ``on_time``: called by the timer of the first one (which may fire a hair early)."""
        loop = asyncio.get_running_loop()
        pending = client.pending
        now = loop.time()
        while pending and (on_time or pending[0][0] <= now):
            on_time = False
            _, words, done = pending.popleft()
            if not client.conn.closed:
                client.conn.on_token(client, request, words, done)
        if pending:
            loop.call_at(pending[0][0], cls._release, client, request)
