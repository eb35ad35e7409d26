"""Chat sessions on the simulator offline: the rules of ``agents.loadgen.sessions`` in
simulated time.

Guarantees:

- A turn's prompt is the history as the simulator's server tokenizes a chat request: a role
  marker and the words of each message — the shared system prompt, every earlier user
  message and reply, the new message. A reply is ``output_len`` tokens unique to its turn,
  so what two turns share is exactly their common history (the prefix cache sees that).
- A closed-loop level keeps ``concurrency`` sessions open (a slot starts a new session when
  its last one ended; the steady window opens when every slot's first session ended); an
  open-loop level starts sessions at its send times, each run to its end. A turn is sent
  when the last reply arrived plus its think time; a refused turn ends its session. Turns
  are counted as the live driver counts them (``count``, deadline, window).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agents.engines.sim.completions import role_marker
from agents.engines.sim.scheduler import SimRequest
from agents.loadgen.records import RequestRecord
from agents.loadgen.session_prompts import SessionPlan
from agents.loadgen.steady import ClosedLoopWindow
from agents.predict.senders import SessionClock
from agents.predict.senders import words as _words

if TYPE_CHECKING:
    from agents.predict.offline import OfflineBench


@dataclass
class _Session:
    number: int
    plan: SessionPlan
    slot: int | None  # closed loop: the slot it occupies
    first: bool  # the slot's first session (its end closes the ramp)
    scheduled: float | None = None  # open loop: when it was due to start
    turn: int = 0  # turns sent so far
    history: list[str] = field(default_factory=list)


def run_sessions(
    bench: OfflineBench,
    plans: list[SessionPlan],
    records: list[RequestRecord],
    *,
    concurrency: int | None,
    offsets: Iterable[float] = (),
    count: int | None,
    deadline: float | None,
    window: ClosedLoopWindow | None,
    ramp_seconds: float = 0.0,
) -> None:
    """One session level on ``bench``'s scheduler from ``bench.now``: closed loop with
    ``concurrency``, else open loop at ``offsets`` (seconds from the level's start)."""
    started = itertools.count()
    owners: dict[int, tuple[RequestRecord, _Session]] = {}

    def start_session(moment: float, slot: int | None, first: bool, scheduled: float | None):
        number = next(started)
        plan = plans[number % len(plans)]  # more than were built: they come round again
        history = [role_marker("system"), *_words(plan.system)] if plan.system else []
        session = _Session(number, plan, slot, first, scheduled, history=history)
        send_turn(moment, session, -1)
        return len(plan.turns)

    def send_turn(moment: float, session: _Session, _: int) -> None:
        if session.slot is not None and session.turn and not clock.may_send(moment):
            return  # the level wants no more: the slot ends with its session
        turn = session.plan.turns[session.turn]
        session.turn += 1
        user = [role_marker("user"), *_words(turn.message)]
        record = RequestRecord(
            len(records),
            turn.output_len,
            len(session.history) + len(user),
            session.scheduled if session.turn == 1 else None,
        )
        record.session, record.turn, record.start = session.number, session.turn, moment
        records.append(record)
        request = bench.request_for([*session.history, *user], turn.output_len, record)
        if request is None:  # refused (too long): the session cannot go on
            turn_done(record, session, moment, ends=True)
            return
        session.history.extend(user)
        owners[request.id] = (record, session)
        bench.scheduler.add(request)

    def turn_done(record: RequestRecord, session: _Session, now: float, *, ends: bool) -> None:
        if window is not None:
            window.finished(record, first_of_slot=session.first and ends)
        if ends:
            if session.slot is not None:
                clock.slot_free(now, session.slot)
            return
        clock.due(now + session.plan.turns[session.turn].think, session)

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
        send_item=send_turn,
    )

    def finished(request: SimRequest, now: float) -> None:
        record, session = owners.pop(request.id)
        bench.finish(record, request)
        # The reply joins the history: tokens of its own, unique to this turn.
        reply = f"s{session.number}t{session.turn}"
        session.history.extend([role_marker("assistant"), *([reply] * request.output)])
        turn_done(record, session, now, ends=session.turn == len(session.plan.turns))

    bench.drive(clock, finished)
