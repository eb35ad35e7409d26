"""Agentic coding sessions in the load generator: ``AgenticDriver`` sends a level's sessions
(``agents.loadgen.agentic_prompts``) with their dependencies.

Guarantees:

- A request is sent its ``delay`` after the last of its parents finished (a root: after its
  session started); requests whose parents are all done run at the same time (sub-agents
  fan out); a request whose parent failed, or that the level no longer wants (its count,
  deadline or window), is not sent, nor is anything after it.
- Its prompt's words are ``agentic_prompts``'s: the same text in every trial.
- Levels are as for chat sessions (``agents.loadgen.sessions``): ``concurrency`` sessions
  open, the steady window after every slot's first session; open loop, sessions start at a
  rate (a session file's own start times scaled to it), measured whole. A request's ``turn``
  is its place in its session (1 the first).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from time import perf_counter

from agents.loadgen.agentic_prompts import fill_words
from agents.loadgen.config import BenchConfig
from agents.loadgen.http import ConnectionPool, Origin
from agents.loadgen.lora_spread import request_model
from agents.loadgen.openai import encode_request, send_request
from agents.loadgen.prompts import BlockText
from agents.loadgen.records import RequestRecord
from agents.loadgen.sessions import SessionDriver
from agents.loadgen.steady import ClosedLoopWindow
from agents.workloads.agentic import AgenticSession


class AgenticDriver(SessionDriver):
    """Sends a level's agentic sessions (module docstring); closed and open loop as
    ``SessionDriver`` runs them."""

    def __init__(
        self,
        config: BenchConfig,
        pool: ConnectionPool,
        origin: Origin,
        plans: list[AgenticSession],
        records: list[RequestRecord],
        on_done: Callable[[RequestRecord], None],
        salt: int,
    ):
        super().__init__(config, pool, origin, plans, records, on_done)
        self.blocks = BlockText(config.source.block_size, salt)
        self.salt = salt

    @staticmethod
    def requests_of(plan: AgenticSession) -> int:
        return len(plan.requests)

    async def run_session(
        self,
        number: int,
        plan: AgenticSession,
        go_on: Callable[[], bool],
        *,
        scheduled: float | None = None,
        first_session: bool = False,
        window: ClosedLoopWindow | None = None,
    ) -> None:
        config = self.config
        requests = plan.requests
        done = [asyncio.Event() for _ in requests]
        sent_ok = [False] * len(requests)

        async def one(index: int) -> None:
            request = requests[index]
            try:
                if request.parents:
                    await asyncio.gather(*(done[p].wait() for p in request.parents))
                    if not all(sent_ok[p] for p in request.parents):
                        return  # a parent failed or was not sent: nothing follows it
                if request.delay:
                    await asyncio.sleep(request.delay)
                if not go_on():
                    return
                words = self.blocks.words(
                    request.hash_ids, request.input_len, fill_words(self.salt, number, index)
                )
                body = encode_request(
                    self.origin,
                    endpoint=config.endpoint,
                    model=request_model(config, number),
                    prompt=" ".join(words),
                    output_len=request.output_len,
                    api_key=config.api_key,
                    ignore_eos=config.ignore_eos,
                )
                first = index == 0
                record = RequestRecord(
                    len(self.records),
                    request.output_len,
                    request.input_len,
                    scheduled if first else None,
                )
                record.session, record.turn = number, index + 1
                record.model = request_model(config, number)
                self.records.append(record)
                await send_request(
                    self.pool,
                    body,
                    record,
                    timeout=config.request_timeout,
                    activity=self.activity,
                )
                sent_ok[index] = record.success
                if window is not None:
                    window.finished(record, first_of_slot=False)
                self.on_done(record)
            finally:
                done[index].set()

        await asyncio.gather(*(one(index) for index in range(len(requests))))
        if window is not None and first_session:
            # The slot's first session has ended, however it ended: its ramp is over.
            window.ramp_done(perf_counter())
