"""A model of vLLM's V1 scheduler and KV block manager, driven step by step.

Guarantees (after ``vllm/v1/core/sched/scheduler.py`` and ``kv_cache_manager.py``):

- Each step has a budget of ``max_num_batched_tokens`` tokens. Running requests are served
  first, in order: one token each when decoding, the rest of the prompt (chunked to what is
  left of the budget) when prefilling. Waiting requests are admitted after them, first come
  first served, while fewer than ``max_num_seqs`` run and budget is left; with chunked
  prefill off, a prompt that does not fit the remaining budget waits.
- KV cache is counted in blocks of ``block_size`` tokens. When a running request needs a
  block and none is free, the most recently admitted running request is preempted (its
  blocks freed, its progress discarded, back at the head of the queue for recomputation),
  and no new request is admitted in that step.
- With prefix caching, full prompt blocks are identified by a hash chain of their tokens;
  a new request reuses the cached blocks of its longest cached prefix (at least one token is
  always computed). Freed cached blocks stay reusable until evicted, least recently freed
  first. Queries and hits are counted in tokens, as vLLM's metrics do.
- The engine never waits for a request: one sent at ``arrival`` reaches the scheduler when
  the API server's serial queue has tokenized it (``frontend.FrontEndQueue.admit``) plus
  ``Efficiency.request_overhead_s`` (the hand-off to the engine core and the first token's
  way back), and a step that began before then runs without it. A step's tokens reach their
  clients when that same queue has detokenized and streamed them (``deliver``):
  ``token_times`` are those delivery times, what a client sees.
- No clock: ``Scheduler.schedule(now)`` and ``Scheduler.finish`` are pure state
  transitions, so the same arrivals give the same steps. The only randomness is the seeded
  ``StepNoise`` a scheduler may be given (``agents.engines.sim.noise``); without it every
  step lasts what the step model computes. ``simulate`` runs a whole list of requests
  offline in simulated time.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from agents.engines.sim.frontend import DEFAULT_FRONT_END, FrontEnd, FrontEndQueue
from agents.engines.sim.noise import StepNoise
from agents.hardware import (
    DEFAULT_EFFICIENCY,
    Efficiency,
    GpuProfile,
    ModelFacts,
    ServeSettings,
    StepModel,
    start_check,
)
from agents.hardware.vllm_defaults import EntryPoint, batch_defaults
from agents.protocol.versions import parse_vllm_version


@dataclass(eq=False)
class SimRequest:
    """One request inside the simulator; times are simulated seconds."""

    id: int
    prompt_len: int
    max_tokens: int
    arrival: float = 0.0  # when its client sent it
    ready_at: float = 0.0  # when the scheduler may first see it (set by Scheduler.add)
    block_hashes: tuple[int, ...] = ()  # of the prompt's full blocks (prefix caching)
    chat: bool = False  # sent to /v1/chat/completions (the front end's cost differs)
    computed: int = 0
    output: int = 0
    # Blocks this request holds: shared cached ones (hashes) and private ones (a count).
    cached: list[int] = field(default_factory=list)
    private: int = 0
    registered: int = 0  # how many of block_hashes this request put in the cache
    scheduled_at: float | None = None
    token_times: list[float] = field(default_factory=list)
    preemptions: int = 0
    # Speculative decoding: the expected tokens of its steps not yet emitted (a fraction).
    spec_credit: float = 0.0
    on_tokens: Callable[[SimRequest, int, bool], None] | None = None

    @property
    def total_len(self) -> int:
        return self.prompt_len + self.output

    @property
    def done(self) -> bool:
        return self.output >= self.max_tokens

    @property
    def num_blocks(self) -> int:
        return len(self.cached) + self.private


def batch_shape(items: Sequence[tuple[SimRequest, int]]) -> tuple[list[tuple[int, int]], int]:
    """A picked batch as the step model costs it: (new tokens, tokens already computed) per
    request, and how many requests sample a token at the step's end."""
    batch = [(new, request.computed) for request, new in items]
    sampled = sum(1 for request, new in items if request.computed + new >= request.total_len)
    return batch, sampled


def prompt_block_hashes(tokens: Sequence[object], block_size: int) -> tuple[int, ...]:
    """A hash chain over the full blocks of a prompt: equal prefixes, equal hashes."""
    hashes = []
    parent = 0
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash((parent, tuple(tokens[start : start + block_size])))
        hashes.append(parent)
    return tuple(hashes)


class BlockPool:
    """Free blocks, plus cached blocks by hash: in use (refcount) or evictable (LRU)."""

    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self.free = num_blocks
        self.refs: dict[int, int] = {}
        self.evictable: OrderedDict[int, None] = OrderedDict()

    @property
    def available(self) -> int:
        return self.free + len(self.evictable)

    @property
    def usage(self) -> float:
        return 1.0 - self.available / self.num_blocks if self.num_blocks else 0.0

    def take(self, count: int) -> bool:
        if count > self.available:
            return False
        from_free = min(count, self.free)
        self.free -= from_free
        for _ in range(count - from_free):
            self.evictable.popitem(last=False)  # evicting forgets the cached content
        return True

    def is_cached(self, block_hash: int) -> bool:
        return block_hash in self.refs or block_hash in self.evictable

    def share(self, block_hash: int) -> None:
        if block_hash in self.evictable:
            del self.evictable[block_hash]
            self.refs[block_hash] = 1
        else:
            self.refs[block_hash] += 1

    def release(self, request: SimRequest) -> None:
        # Tail first, as vLLM frees a request's blocks (``reversed(req_blocks)`` in its KV
        # cache manager): the prefix is evicted last, so a preempted request resumes from it.
        for block_hash in reversed(request.cached):
            self.refs[block_hash] -= 1
            if self.refs[block_hash] == 0:
                del self.refs[block_hash]
                self.evictable[block_hash] = None
        self.free += request.private
        request.cached = []
        request.private = 0
        request.registered = 0


@dataclass(frozen=True)
class Step:
    """What one engine step computes: (request, new tokens) pairs, and its duration; with
    data parallelism, ``parts`` holds each rank's share (the rank and its step)."""

    items: tuple[tuple[SimRequest, int], ...]
    duration: float
    preempted: int
    parts: tuple = ()


class Scheduler:
    """vLLM V1-style continuous batching over a ``BlockPool``."""

    def __init__(
        self,
        settings: ServeSettings,
        step_model: StepModel,
        noise: StepNoise | None = None,
        front_end: FrontEnd = DEFAULT_FRONT_END,
    ):
        self.settings = settings
        self.step_model = step_model
        self.noise = noise
        self.front_end = FrontEndQueue(front_end)
        self.pool = BlockPool(step_model.plan.num_blocks)
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.preemptions = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.steps = 0
        # vLLM's spec_decode counters: drafts, proposed tokens, accepted tokens.
        self.spec_drafts = 0
        self.spec_draft_tokens = 0
        self.spec_accepted_tokens = 0

    def add(self, request: SimRequest) -> None:
        """Queues ``request`` (sent at its ``arrival``); it can be scheduled from its
        ``ready_at`` on. The front end serves requests in the order they are added, so the
        queue stays in order of readiness."""
        admitted = self.front_end.admit(request.arrival, request.prompt_len, request.chat)
        request.ready_at = admitted + self.step_model.eff.request_overhead_s
        self.waiting.append(request)

    def waiting_at(self, now: float) -> int:
        """How many requests wait in the engine at ``now`` (vLLM's ``num_requests_waiting``):
        those still in the server's front end are not counted. They are the queue's tail."""
        in_front_end = 0
        for request in reversed(self.waiting):
            if request.ready_at <= now:
                break
            in_front_end += 1
        return len(self.waiting) - in_front_end

    def ready_later(self, now: float) -> float | None:
        """When a driver whose ``schedule(now)`` found nothing to run should try again: the
        moment the first waiting request reaches the scheduler, if that is after ``now``;
        ``None`` when waiting would not help (nothing waits, or what waits cannot fit)."""
        if self.waiting and self.waiting[0].ready_at > now:
            return self.waiting[0].ready_at
        return None

    def abort(self, request: SimRequest) -> None:
        """Drops a request (its client went away) and frees its blocks."""
        if request in self.running:
            self.running.remove(request)
            self.pool.release(request)
        elif request in self.waiting:
            self.waiting.remove(request)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def _blocks_needed(self, request: SimRequest, new: int) -> int:
        size = self.settings.block_size
        return max(0, -(-(request.computed + new) // size) - request.num_blocks)

    def _preempt(self, victim: SimRequest) -> None:
        self.running.remove(victim)
        self.pool.release(victim)
        victim.computed = 0
        victim.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(victim)

    def schedule(self, now: float) -> Step | None:
        """Picks the batch of the step starting at ``now``; ``None`` when there is nothing
        to run yet (see ``ready_later``)."""
        picked = self.pick(now)
        if picked is None:
            return None
        items, preempted = picked
        cost = self.step_model.cost(*batch_shape(items))
        seconds = cost.seconds if self.noise is None else self.noise.duration(now, cost.seconds)
        return Step(tuple(items), seconds, preempted)

    def pick(self, now: float) -> tuple[list[tuple[SimRequest, int]], int] | None:
        """The (request, new tokens) pairs of the step starting at ``now`` and how many
        requests it preempted, applied to the KV blocks; ``None`` when nothing can run. Not
        yet timed: ``schedule`` (or a data-parallel engine, all ranks together) costs it."""
        budget = self.settings.max_num_batched_tokens
        items: list[tuple[SimRequest, int]] = []
        preempted = 0
        size = self.settings.block_size
        for request in list(self.running):
            if budget <= 0:
                break
            if preempted and request not in self.running:
                continue  # preempted earlier in this loop
            new = min(request.total_len - request.computed, budget)
            spec = self.settings.speculative
            if spec is not None and request.output >= 1:
                # A decode verifies its proposals too, never past the request's last token.
                proposals = min(spec.tokens, request.max_tokens - request.output - 1)
                new = min(1 + proposals, budget)
            while True:
                # Most steps fit in the blocks a request holds (a decode needs a new block
                # once every block_size tokens): checked inline, it is the hot path.
                if request.computed + new <= (len(request.cached) + request.private) * size:
                    break
                need = self._blocks_needed(request, new)
                if self.pool.take(need):
                    request.private += need
                    break
                victim = self.running[-1]
                self._preempt(victim)
                preempted += 1
                if victim is request:
                    new = 0
                    break
            if new:
                items.append((request, new))
                budget -= new
        if not preempted:
            budget = self._admit(items, budget, now)
        if not items:
            return None
        return items, preempted

    def _admit(self, items: list[tuple[SimRequest, int]], budget: int, now: float) -> int:
        settings = self.settings
        while self.waiting and budget > 0 and len(self.running) < settings.max_num_seqs:
            request = self.waiting[0]
            if request.ready_at > now:
                break  # still in the server's front end
            hits: list[int] = []
            if settings.enable_prefix_caching and request.computed == 0:
                # Always leave one token to compute: the step must produce a token.
                usable = (request.total_len - 1) // settings.block_size
                for block_hash in request.block_hashes[:usable]:
                    if not self.pool.is_cached(block_hash):
                        break
                    hits.append(block_hash)
                self.prefix_queries += request.total_len
            computed = len(hits) * settings.block_size
            new = request.total_len - computed
            if not settings.enable_chunked_prefill and new > budget:
                break
            new = min(new, budget)
            size = settings.block_size
            need = -(-(computed + new) // size) - len(hits)
            # Blocks reused from the cache leave the free pool's evictable list first.
            evictable_hits = sum(1 for h in hits if h in self.pool.evictable)
            if need > self.pool.available - evictable_hits:
                break
            for block_hash in hits:
                self.pool.share(block_hash)
            self.pool.take(need)
            request.cached = list(hits)
            request.registered = len(hits)
            request.private = need
            request.computed = computed
            if settings.enable_prefix_caching:
                self.prefix_hits += computed
            self.waiting.popleft()
            self.running.append(request)
            items.append((request, new))
            budget -= new
        return budget

    def finish(self, step: Step, now: float) -> list[SimRequest]:
        """Applies a step that ended at ``now``; returns the requests that finished."""
        self.steps += 1
        finished = []
        sampled = sum(1 for r, new in step.items if r.computed + new >= r.total_len)
        delivered = self.front_end.deliver(now, sampled) if sampled else now
        for request, new in step.items:
            if request.scheduled_at is None:
                request.scheduled_at = now - step.duration
            request.computed += new
            if request.registered < len(request.block_hashes):
                self._register(request)
            if request.computed < request.total_len:
                continue  # a prefill chunk: no token sampled yet
            kept = 1
            if self.settings.speculative is not None and request.output >= 1:
                kept = self._kept(request, new)
                request.computed -= new - kept  # the rejected proposals' KV is dropped
            request.output += kept
            if request.output == kept:
                self.prompt_tokens += request.prompt_len  # counted once, as vLLM does
            self.generation_tokens += kept
            request.token_times.append(delivered)  # one chunk, however many tokens
            done = request.done
            if request.on_tokens is not None:
                request.on_tokens(request, kept, done)
            if done:
                self.running.remove(request)
                self.pool.release(request)
                finished.append(request)
        return finished

    def _kept(self, request: SimRequest, verified: int) -> int:
        """Tokens a decode step that verified ``verified`` (1 + proposals) keeps: the
        expected count (``SpecDecoding.expected_tokens`` for its proposals) accumulated per
        request and emitted in whole tokens, so the mean is exact and the steps
        deterministic; at least the target model's own token, at most all verified."""
        spec = self.settings.speculative
        assert spec is not None
        proposals = verified - 1
        if proposals:
            self.spec_drafts += 1
            self.spec_draft_tokens += proposals
        expected = type(spec)(spec.method, proposals, spec.acceptance_rate).expected_tokens
        request.spec_credit += expected
        kept = max(1, min(verified, int(request.spec_credit)))
        request.spec_credit -= kept
        self.spec_accepted_tokens += kept - 1
        return kept

    def _register(self, request: SimRequest) -> None:
        """Puts the request's newly completed full prompt blocks into the prefix cache."""
        if not self.settings.enable_prefix_caching:
            return
        full = min(request.computed, request.prompt_len) // self.settings.block_size
        while request.registered < min(full, len(request.block_hashes)):
            block_hash = request.block_hashes[request.registered]
            request.registered += 1
            if self.pool.is_cached(block_hash) or request.private == 0:
                continue  # someone else's copy is cached; ours stays private
            request.private -= 1
            self.pool.refs[block_hash] = 1
            request.cached.append(block_hash)


class _PoolsView:
    """The KV blocks of all data-parallel ranks as one server reports them: usage over all
    ranks' blocks; ``num_blocks`` per rank, as vLLM's ``cache_config_info`` states it."""

    def __init__(self, ranks: Sequence[Scheduler]):
        self._ranks = ranks

    @property
    def num_blocks(self) -> int:
        return self._ranks[0].pool.num_blocks

    @property
    def usage(self) -> float:
        total = sum(rank.pool.num_blocks for rank in self._ranks)
        used = sum(rank.pool.num_blocks - rank.pool.available for rank in self._ranks)
        return used / total if total else 0.0


def _summed_over_ranks(counter: str) -> property:
    """A counter of a data-parallel server: the sum of its ranks' ``counter``."""
    return property(lambda self: sum(getattr(rank, counter) for rank in self.ranks))


class DataParallelScheduler(Scheduler):
    """``data_parallel_size`` engine cores behind one API server, as vLLM runs them
    (docs/serving/data_parallel_deployment.md; ``vllm/v1/engine/core_client.py``,
    ``DPLBAsyncMPClient``).

    Guarantees:

    - Each rank is a ``Scheduler`` of its own: its own KV cache (the plan's blocks), its own
      ``max_num_seqs`` and token budget. A request goes to the rank of lowest
      ``4 x waiting + running`` when it reaches the API server (first rank on a tie) and
      stays there; the counts are exact here, where vLLM's are up to 100 ms stale.
    - The ranks step together: every step lasts as long as the slowest rank's batch, and a
      MoE model's experts see every rank's tokens (``StepModel.cost``'s ``moe_tokens``).
      vLLM runs a MoE model's ranks so ("forward passes must be aligned"); a dense model's
      ranks are independent there, so for it lockstep is an approximation that makes a
      step no shorter than its own rank's.
    - The same interface as ``Scheduler``: counters summed over ranks; one front end.
    """

    def __init__(self, ranks: Sequence[Scheduler], noise: StepNoise | None = None):
        # Not Scheduler.__init__: the state is the ranks'; these attributes are the server's.
        self.ranks = list(ranks)
        self.settings = ranks[0].settings
        self.step_model = ranks[0].step_model
        self.noise = noise
        self.front_end = ranks[0].front_end  # shared by every rank: one API server
        self.steps = 0
        self._rank_of: dict[int, Scheduler] = {}

    # The server's view of its ranks' state, read-only: each rank keeps its own.
    @property  # type: ignore[override]
    def pool(self) -> _PoolsView:
        return _PoolsView(self.ranks)

    @property  # type: ignore[override]
    def running(self) -> list[SimRequest]:
        return [request for rank in self.ranks for request in rank.running]

    @property  # type: ignore[override]
    def waiting(self) -> deque[SimRequest]:
        return deque(request for rank in self.ranks for request in rank.waiting)

    # The server's counters, each the sum of its ranks' (properties over the base's fields).
    preemptions = _summed_over_ranks("preemptions")  # type: ignore[assignment]
    prefix_queries = _summed_over_ranks("prefix_queries")  # type: ignore[assignment]
    prefix_hits = _summed_over_ranks("prefix_hits")  # type: ignore[assignment]
    prompt_tokens = _summed_over_ranks("prompt_tokens")  # type: ignore[assignment]
    generation_tokens = _summed_over_ranks("generation_tokens")  # type: ignore[assignment]
    spec_drafts = _summed_over_ranks("spec_drafts")  # type: ignore[assignment]
    spec_draft_tokens = _summed_over_ranks("spec_draft_tokens")  # type: ignore[assignment]
    spec_accepted_tokens = _summed_over_ranks("spec_accepted_tokens")  # type: ignore[assignment]

    def add(self, request: SimRequest) -> None:
        admitted = self.front_end.admit(request.arrival, request.prompt_len, request.chat)
        request.ready_at = admitted + self.step_model.eff.request_overhead_s
        rank = min(self.ranks, key=lambda r: 4 * len(r.waiting) + len(r.running))
        rank.waiting.append(request)
        self._rank_of[request.id] = rank

    def waiting_at(self, now: float) -> int:
        return sum(rank.waiting_at(now) for rank in self.ranks)

    def ready_later(self, now: float) -> float | None:
        times = [t for rank in self.ranks if (t := rank.ready_later(now)) is not None]
        return min(times) if times else None

    def abort(self, request: SimRequest) -> None:
        rank = self._rank_of.pop(request.id, None)
        if rank is not None:
            rank.abort(request)

    @property
    def has_work(self) -> bool:
        return any(rank.has_work for rank in self.ranks)

    def schedule(self, now: float) -> Step | None:
        picked = [(rank, rank.pick(now)) for rank in self.ranks]
        busy = [(rank, found) for rank, found in picked if found is not None]
        if not busy:
            return None
        shapes = [batch_shape(items) for _, (items, _) in busy]
        moe_tokens = sum(new for batch, _ in shapes for new, _ in batch)
        seconds = max(
            rank.step_model.cost(batch, sampled, moe_tokens).seconds
            for (rank, _), (batch, sampled) in zip(busy, shapes, strict=True)
        )
        if self.noise is not None:
            seconds = self.noise.duration(now, seconds)
        parts = tuple(
            (rank, Step(tuple(items), seconds, preempted)) for rank, (items, preempted) in busy
        )
        return Step(
            tuple(item for _, part in parts for item in part.items),
            seconds,
            sum(part.preempted for _, part in parts),
            parts,
        )

    def finish(self, step: Step, now: float) -> list[SimRequest]:
        self.steps += 1
        finished = []
        for rank, part in step.parts:
            done = rank.finish(part, now)
            for request in done:
                self._rank_of.pop(request.id, None)
            finished.extend(done)
        return finished


@dataclass(frozen=True)
class OfflineResult:
    requests: list[SimRequest]
    duration: float
    steps: int
    preemptions: int
    max_waiting: int
    max_running: int
    prefix_queries: int
    prefix_hits: int

    def ttfts(self) -> list[float]:
        return [r.token_times[0] - r.arrival for r in self.requests if r.token_times]

    def itls(self) -> list[float]:
        gaps = []
        for r in self.requests:
            gaps.extend(b - a for a, b in zip(r.token_times, r.token_times[1:], strict=False))
        return gaps

    @property
    def output_throughput(self) -> float:
        return sum(r.output for r in self.requests) / self.duration if self.duration else 0.0


def simulate(scheduler: Scheduler, requests: Iterable[SimRequest]) -> OfflineResult:
    """Runs ``requests`` (with their ``arrival`` times) to completion in simulated time."""
    pending = deque(sorted(requests, key=lambda r: (r.arrival, r.id)))
    done: list[SimRequest] = []
    now = pending[0].arrival if pending else 0.0
    start = now
    max_waiting = max_running = 0
    while pending or scheduler.has_work:
        while pending and pending[0].arrival <= now:
            scheduler.add(pending.popleft())
        step = scheduler.schedule(now)
        max_waiting = max(max_waiting, scheduler.waiting_at(now))
        max_running = max(max_running, len(scheduler.running))
        if step is None:
            upcoming = [pending[0].arrival] if pending else []
            if (ready := scheduler.ready_later(now)) is not None:
                upcoming.append(ready)
            if not upcoming:
                break
            now = min(upcoming)
            continue
        now += step.duration
        # Sent while the step ran: the front end took them in before the step's outputs.
        while pending and pending[0].arrival <= now:
            scheduler.add(pending.popleft())
        done.extend(scheduler.finish(step, now))
    duration = _last_token(done, now) - start
    return _offline_result(scheduler, done, duration, max_waiting, max_running)


def closed_loop(
    scheduler: Scheduler,
    *,
    concurrency: int,
    total: int,
    make: Callable[[int], SimRequest],
) -> OfflineResult:
    """``concurrency`` clients each sending the next request when theirs finishes, like a
    closed-loop level of the load generator; ``make(i)`` builds request ``i``."""
    issued = 0
    now = 0.0
    done: list[SimRequest] = []
    max_waiting = max_running = 0
    for _ in range(min(concurrency, total)):
        request = make(issued)
        request.arrival = now
        scheduler.add(request)
        issued += 1
    while scheduler.has_work:
        step = scheduler.schedule(now)
        max_waiting = max(max_waiting, scheduler.waiting_at(now))
        max_running = max(max_running, len(scheduler.running))
        if step is None:
            ready = scheduler.ready_later(now)
            if ready is None:
                break
            now = ready
            continue
        now += step.duration
        for request in scheduler.finish(step, now):
            done.append(request)
            if issued < total:
                follow = make(issued)
                follow.arrival = request.token_times[-1]  # its client saw the last token
                scheduler.add(follow)
                issued += 1
    return _offline_result(scheduler, done, _last_token(done, now), max_waiting, max_running)


def _offline_result(
    scheduler: Scheduler,
    done: list[SimRequest],
    duration: float,
    max_waiting: int,
    max_running: int,
) -> OfflineResult:
    """An offline run's result: its requests in id order and the scheduler's counters."""
    return OfflineResult(
        sorted(done, key=lambda r: r.id),
        duration,
        scheduler.steps,
        scheduler.preemptions,
        max_waiting,
        max_running,
        scheduler.prefix_queries,
        scheduler.prefix_hits,
    )


def _last_token(done: Sequence[SimRequest], now: float) -> float:
    """When the run ended for its clients: the last token delivered (or the last step)."""
    return max([now, *(r.token_times[-1] for r in done if r.token_times)])


def with_version_defaults(
    gpu: GpuProfile,
    flags: Mapping[str, object],
    vllm_version: str | None = None,
    entry_point: EntryPoint = "serve",
) -> dict[str, object]:
    """``flags`` with what they leave out filled as ``vllm_version`` (None: the newest the
    table knows) sets it on ``gpu`` at ``entry_point`` (``agents.hardware.vllm_defaults``);
    raises ``ValueError`` for a version string vLLM never had."""
    release = None if vllm_version is None else parse_vllm_version(vllm_version)[0]
    given = {name: value for name, value in flags.items() if value is not None}
    return {**batch_defaults(release, gpu, entry_point).as_flags(), **given}


def make_scheduler(
    model: ModelFacts,
    gpu: GpuProfile,
    flags: Mapping[str, object] | None = None,
    *,
    vllm_version: str | None = None,
    entry_point: EntryPoint = "serve",
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
    front_end: FrontEnd = DEFAULT_FRONT_END,
    noise: StepNoise | None = None,
) -> Scheduler:
    """A scheduler for ``model`` on ``gpu`` with serve ``flags`` (protocol names), the rest
    as ``vllm_version`` sets them at ``entry_point`` (a ``DataParallelScheduler`` of one
    ``Scheduler`` per rank when ``data_parallel_size`` > 1); raises ``StartRefusal`` where
    vLLM would refuse to start (``agents.hardware.start_check``). ``efficiency`` and
    ``front_end`` are the constants of its step model and API server (a calibration's, or
    the defaults); ``noise`` its seeded step-time noise, if any."""
    flags = with_version_defaults(gpu, flags or {}, vllm_version, entry_point)
    settings, plan = start_check(model, gpu, flags)
    step_model = StepModel(model, gpu, settings, plan, efficiency)
    if settings.data_parallel_size == 1:
        return Scheduler(settings, step_model, noise, front_end=front_end)
    ranks = [
        Scheduler(settings, step_model, front_end=front_end)
        for _ in range(settings.data_parallel_size)
    ]
    for rank in ranks[1:]:
        rank.front_end = ranks[0].front_end  # one API server streams every rank's tokens
    return DataParallelScheduler(ranks, noise)
