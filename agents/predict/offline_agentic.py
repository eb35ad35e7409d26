"""Agentic sessions on the simulator offline: the rules of ``agents.loadgen.agentic`` in
simulated time.

Guarantees: a request goes out its delay after the last of its parents finished (a root:
after its session started); requests whose parents are done run side by side; nothing
follows a refused request, nor a request the level no longer wants (its count, deadline or
window). Its tokens are the same words the live driver sends (``BlockText`` and
``fill_words`` with the level's salt), so the prefix cache sees what the sessions share. A
closed-loop level keeps ``concurrency`` sessions open (the steady window after every slot's
first session); an open-loop level starts sessions at its offsets.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agents.engines.sim.completions import role_marker
from agents.engines.sim.scheduler import SimRequest
from agents.loadgen.agentic_prompts import fill_words
from agents.loadgen.prompts import BlockText
from agents.loadgen.records import RequestRecord
from agents.loadgen.steady import ClosedLoopWindow
from agents.predict.senders import SessionClock
from agents.workloads.agentic import AgenticSession

if TYPE_CHECKING:
    from agents.predict.offline import OfflineBench


@dataclass
class _Open:
    """A session in progress: which of its requests are done and how many wait on each."""

    number: int
    session: AgenticSession
    slot: int | None
    first: bool
    scheduled: float | None
    waiting: list[int] = field(default_factory=list)  # parents not yet done, per request
    ok: list[bool] = field(default_factory=list)
    left: int = 0  # requests neither done nor dropped


def run_agentic(
    bench: OfflineBench,
    plans: list[AgenticSession],
    salt: int,
    records: list[RequestRecord],
    *,
    concurrency: int | None,
    offsets: Iterable[float] = (),
    count: int | None,
    deadline: float | None,
    window: ClosedLoopWindow | None,
    ramp_seconds: float = 0.0,
) -> None:
    """One agentic level on ``bench``'s scheduler from ``bench.now``: closed loop with
    ``concurrency``, else open loop with sessions starting at ``offsets``."""
    blocks = BlockText(bench.config.source.block_size, salt)
    chat = bench.config.endpoint == "chat"
    started = itertools.count()
    owners: dict[int, tuple[RequestRecord, _Open, int]] = {}
    children: dict[int, dict[int, list[int]]] = {}  # session number -> parent -> children

    def start_session(moment: float, slot: int | None, first: bool, scheduled: float | None):
        number = next(started)
        session = plans[number % len(plans)]  # more than were built: they come round again
        state = _Open(number, session, slot, first, scheduled)
        state.waiting = [len(r.parents) for r in session.requests]
        state.ok = [False] * len(session.requests)
        state.left = len(session.requests)
        kids: dict[int, list[int]] = {}
        for index, request in enumerate(session.requests):
            for parent in request.parents:
                kids.setdefault(parent, []).append(index)
        children[number] = kids
        for index, request in enumerate(session.requests):
            if not request.parents:
                clock.due(moment + request.delay, state, index)
        return len(session.requests)

    def drop(state: _Open, index: int, moment: float) -> None:
        """Request ``index`` will not be sent: neither will anything after it."""
        state.left -= 1
        for child in children[state.number].get(index, []):
            state.waiting[child] -= 1
            if state.waiting[child] == 0:
                drop(state, child, moment)
        close_if_done(state, moment)

    def close_if_done(state: _Open, moment: float) -> None:
        if state.left:
            return
        if window is not None and state.first:
            window.ramp_done(moment)
        if state.slot is not None:
            clock.slot_free(moment, state.slot)

    def send(moment: float, state: _Open, index: int) -> None:
        request = state.session.requests[index]
        if not clock.may_send(moment):
            drop(state, index, moment)
            return
        words = blocks.words(
            request.hash_ids, request.input_len, fill_words(salt, state.number, index)
        )
        if chat:
            words = [role_marker("user"), *words]
        record = RequestRecord(
            len(records),
            request.output_len,
            request.input_len,
            state.scheduled if index == 0 else None,
        )
        record.session, record.turn, record.start = state.number, index + 1, moment
        records.append(record)
        simulated = bench.request_for(words, request.output_len, record)
        if simulated is None:  # refused: nothing follows it
            done(record, state, index, moment)
            return
        owners[simulated.id] = (record, state, index)
        bench.scheduler.add(simulated)

    def done(record: RequestRecord, state: _Open, index: int, now: float) -> None:
        state.ok[index] = record.success
        state.left -= 1
        if window is not None:
            window.finished(record, first_of_slot=False)
        for child in children[state.number].get(index, []):
            state.waiting[child] -= 1
            if state.waiting[child]:
                continue
            request = state.session.requests[child]
            if all(state.ok[parent] for parent in request.parents):
                clock.due(now + request.delay, state, child)
            else:
                drop(state, child, now)
        close_if_done(state, now)

    clock = SessionClock(
        bench.now,
        concurrency=concurrency,
        offsets=offsets,
        ramp_seconds=ramp_seconds,
        count=count,
        records=records,
        deadline=deadline,
        window=window,
        start_session=start_session,
        send_item=send,
    )

    def finished(simulated: SimRequest, now: float) -> None:
        record, state, index = owners.pop(simulated.id)
        bench.finish(record, simulated)
        done(record, state, index, now)

    bench.drive(clock, finished)
