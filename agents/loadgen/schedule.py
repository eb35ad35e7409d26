"""Sending on a schedule, open loop: what the load generator's open-loop levels share.

Guarantees: ``launch(index, offset)`` is called at ``start + offset`` for each offset in
order — never earlier; a timer brings the loop within ``SPIN_SECONDS`` of it and the loop's
own turns (each reading whatever responses are ready) wait out the rest, since uvloop's
timers are whole milliseconds; as soon as possible when late — until ``ended(index,
offset)`` says no more; its synchronous part runs at that moment
(a record is made and counted before the next send is considered) and the awaitable it
returns runs as a task. Returns when every task has ended; cancelled, it cancels them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from time import perf_counter

# How close to a send the timer brings the loop; the rest is spent turning the loop.
SPIN_SECONDS = 0.0015


async def run_on_schedule(
    offsets: Iterable[float],
    start: float,
    *,
    ended: Callable[[int, float], bool],
    launch: Callable[[int, float], Awaitable[None]],
) -> None:
    """See the module docstring; ``start`` is a ``perf_counter`` time."""
    pending: set[asyncio.Task] = set()
    try:
        for index, offset in enumerate(offsets):
            if ended(index, offset):
                break
            # uvloop's timers are in whole milliseconds (early or late by up to one): the
            # timer only gets within SPIN_SECONDS, then each loop turn (reading whatever
            # responses are ready) checks the clock until the moment has come.
            while (delay := start + offset - perf_counter()) > 0:
                await asyncio.sleep(delay - SPIN_SECONDS if delay > SPIN_SECONDS else 0)
            task = asyncio.ensure_future(launch(index, offset))
            pending.add(task)
            task.add_done_callback(pending.discard)
        if pending:
            await asyncio.gather(*pending)
    finally:
        # Stopped (cancelled) while sending: what is in flight goes too.
        for task in list(pending):
            task.cancel()
