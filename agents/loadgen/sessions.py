"""How a level drives multi-turn chat sessions (``agents.loadgen.session_prompts``)
against a server: ``SessionDriver``.

Guarantees:

- Each turn sends the session's whole history: the system prompt (when there is one), every
  earlier user message and every reply exactly as the server streamed it, then the turn's
  new message. A turn that fails ends its session (the next turn would lack its history).
- A closed-loop level keeps ``concurrency`` sessions open: a slot starts a new session when
  its last one ended (thinking counts as open). Its steady window opens when every slot's
  first session has ended (before, the open sessions are all at their first turns). An
  open-loop level starts sessions at its send times, each running to its end; the first
  turn's send is scheduled (its lateness is reported), later turns follow their reply and
  think time; it has no steady window (its turns are measured whole).
- Requests are counted as turns: ``count`` ends a level after that many turns were sent,
  a steady window counts turns, and the turns in flight when a level ends are finished.
- Only the history, which holds the replies, is encoded as a turn is sent; every message's
  text was built before the level's clock started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from time import perf_counter

from agents.loadgen.activity import Activity
from agents.loadgen.config import BenchConfig
from agents.loadgen.http import ConnectionPool, Origin
from agents.loadgen.levels import level_wants_more
from agents.loadgen.lora_spread import request_model
from agents.loadgen.openai import encode_request, send_request
from agents.loadgen.records import RequestRecord
from agents.loadgen.schedule import run_on_schedule
from agents.loadgen.session_prompts import SessionPlan
from agents.loadgen.steady import ClosedLoopWindow


class SessionDriver:
    """Sends a level's sessions over ``pool``; records every turn into ``records`` (in the
    order they were sent) and tells ``on_done`` of each as it finishes."""

    def __init__(
        self,
        config: BenchConfig,
        pool: ConnectionPool,
        origin: Origin,
        plans: list[SessionPlan],
        records: list[RequestRecord],
        on_done: Callable[[RequestRecord], None],
    ):
        self.config = config
        self.pool = pool
        self.origin = origin
        self.plans = plans
        self.records = records
        self.on_done = on_done
        self.activity: Activity | None = config.activity
        self.started = 0  # sessions started, which numbers them

    def _next_plan(self) -> tuple[int, SessionPlan]:
        number = self.started
        self.started += 1
        # More sessions than were built: they come round again (their text repeats).
        return number, self.plans[number % len(self.plans)]

    @staticmethod
    def requests_of(plan: SessionPlan) -> int:
        """How many requests a session sends (when it runs to its end)."""
        return len(plan.turns)

    async def run_session(
        self,
        number: int,
        plan: SessionPlan,
        go_on: Callable[[], bool],
        *,
        scheduled: float | None = None,
        first_session: bool = False,
        window: ClosedLoopWindow | None = None,
    ) -> None:
        """One session, turn by turn, while ``go_on()`` holds before each turn; ``window``
        hears each turn (``first_session``: the slot's first, whose end closes its ramp)."""
        config = self.config
        history: list[dict] = [{"role": "system", "content": plan.system}] if plan.system else []
        context = plan.system_len
        for turn_number, turn in enumerate(plan.turns, start=1):
            if turn.think:
                await asyncio.sleep(turn.think)
            if not go_on():
                return
            messages = [*history, {"role": "user", "content": turn.message}]
            request = encode_request(
                self.origin,
                endpoint="chat",
                model=request_model(config, number),
                prompt=turn.message,
                output_len=turn.output_len,
                api_key=config.api_key,
                ignore_eos=config.ignore_eos,
                messages=messages,
            )
            record = RequestRecord(
                len(self.records),
                turn.output_len,
                context + turn.message_len,
                scheduled if turn_number == 1 else None,
            )
            record.session, record.turn = number, turn_number
            record.model = request_model(config, number)
            self.records.append(record)
            reply: list[str] = []
            await send_request(
                self.pool,
                request,
                record,
                timeout=config.request_timeout,
                activity=self.activity,
                reply=reply,
            )
            if window is not None:
                # The ramp is every slot's first session, start to end: until then the
                # sessions open together are all at their first turns.
                ends = turn_number == len(plan.turns) or not record.success
                window.finished(record, first_of_slot=first_session and ends)
            self.on_done(record)
            if not record.success:
                return  # the next turn would lack this reply in its history
            history = [*messages, {"role": "assistant", "content": "".join(reply)}]
            context = record.input_tokens + record.served_output_tokens

    async def closed_loop(
        self,
        concurrency: int,
        count: int | None,
        deadline: float | None,
        window: ClosedLoopWindow | None,
        ramp_seconds: float,
    ) -> None:
        """``concurrency`` slots, each running sessions back to back until ``count`` turns
        were sent, the ``deadline`` passed or the window drains."""
        start = perf_counter()

        def go_on() -> bool:
            return level_wants_more(len(self.records), perf_counter(), count, deadline, window)

        async def slot(index: int) -> None:
            if ramp_seconds > 0:
                await asyncio.sleep(
                    max(start + ramp_seconds * index / concurrency - perf_counter(), 0)
                )
            first = True
            while go_on():
                number, plan = self._next_plan()
                await self.run_session(number, plan, go_on, first_session=first, window=window)
                first = False

        await asyncio.gather(*(slot(index) for index in range(concurrency)))

    async def open_loop(
        self, offsets: Iterable[float], start: float, count: int | None, duration: float | None
    ) -> None:
        """A new session at each send time (from ``start``) until sessions enough for
        ``count`` turns were started or ``duration`` passed; then the started ones finish."""
        planned = 0

        def ended(index: int, offset: float) -> bool:
            return (count is not None and planned >= count) or (
                duration is not None and offset >= duration
            )

        def launch(index: int, offset: float) -> Awaitable[None]:
            nonlocal planned
            number, plan = self._next_plan()
            planned += self.requests_of(plan)
            return self.run_session(number, plan, lambda: True, scheduled=offset)

        await run_on_schedule(offsets, start, ended=ended, launch=launch)
