"""A level's steady state: where its measurement window starts and ends, and which requests
its headline figures come from.

Guarantees:

- Closed loop: the ramp is the first wave (each slot's first request; staggered over
  ``ramp_up_seconds`` when given). The window opens when the last first-wave request ends,
  so the synchronized burst of a level's start is never in it, and closes at the finish that
  brings its completions (requests that started and ended inside it, failures included) to
  the target; then no request is sent any more (the drain). Latency figures come from the
  requests that started and ended inside the window; throughputs from the requests that
  ended inside it.
- Open loop: the window opens once the schedule's ramp is over and the first answer came
  back (before it, the server's queue is still filling), and closes at the send that brings
  the requests sent inside it to the target; latency figures come from the requests sent
  inside it, throughputs from those that ended inside it. Rate ``inf`` has no steady state:
  its window is the whole level.
- ``ramped_offsets`` turns a schedule at a constant rate into one whose rate rises linearly
  from 0 to it over the ramp (as ``vllm bench serve --ramp-up-strategy linear``), keeping
  the same random gaps: every trial of a run sees the same send times.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from agents.loadgen.records import RequestRecord


def ramped_offsets(offsets: Iterable[float], ramp_seconds: float) -> Iterator[float]:
    """Send times whose rate rises linearly from 0 to the schedule's rate over
    ``ramp_seconds``: a time change of the constant-rate schedule (the expected number of
    sends by ``t`` is ``rate·t²/2R`` during the ramp, ``rate·(t − R/2)`` after it)."""
    for offset in offsets:
        if ramp_seconds <= 0:
            yield offset
        elif offset < ramp_seconds / 2:
            yield math.sqrt(2 * ramp_seconds * offset)
        else:
            yield offset + ramp_seconds / 2


class _Window:
    """Where a level's window opened and closed (``perf_counter`` times), and how many
    requests it counts towards its ``target`` (None: it closes when the level ends)."""

    def __init__(self, target: int | None):
        self.target = target
        self.start: float | None = None
        self.end: float | None = None
        self.in_window = 0

    @property
    def draining(self) -> bool:
        """The window holds its target: no more requests are sent."""
        return self.end is not None

    def _count(self, moment: float) -> None:
        self.in_window += 1
        if self.target is not None and self.in_window >= self.target:
            self.end = moment


class ClosedLoopWindow(_Window):
    """Follows a closed-loop level's finishes and says when its window opens and closes."""

    def __init__(self, concurrency: int, target: int | None):
        super().__init__(target)
        self.first_wave_left = concurrency

    def finished(self, record: RequestRecord, *, first_of_slot: bool) -> None:
        """One request ended (``first_of_slot``: it was its slot's first)."""
        if self.end is not None:
            return
        if self.start is not None and record.start >= self.start:
            self._count(record.finished)
        if first_of_slot:
            self.ramp_done(record.finished)

    def ramp_done(self, moment: float) -> None:
        """One slot's part of the ramp ended at ``moment`` (a ``perf_counter`` time): its
        first request, or (sessions) its first session."""
        if self.end is not None:
            return
        self.first_wave_left -= 1
        if self.first_wave_left == 0:
            self.start = moment


class OpenLoopWindow(_Window):
    """Follows an open-loop level's sends and answers and says when its window opens and
    closes."""

    def __init__(self, ramp_seconds: float, target: int | None):
        super().__init__(target)
        self.ramp_seconds = ramp_seconds
        self.origin = 0.0
        self.answered = False

    def begin(self, origin: float) -> None:
        """The schedule's offsets count from ``origin`` (a ``perf_counter`` time)."""
        self.origin = origin

    def answer(self) -> None:
        """A request ended: the queue has filled once."""
        self.answered = True

    def sent(self, offset: float) -> None:
        """A request is sent at ``offset`` seconds of the schedule."""
        if self.end is not None:
            return
        moment = self.origin + offset
        if self.start is None and self.answered and offset >= self.ramp_seconds:
            self.start = moment
        if self.start is not None:
            self._count(moment)


@dataclass(frozen=True)
class WindowSplit:
    """A level's requests by where they fell: the window's bounds (``perf_counter`` times),
    the requests its latency figures come from, and those that ended inside it."""

    start: float
    end: float
    measured: list[RequestRecord]
    ended_inside: list[RequestRecord]
    ramp: int
    drain: int


def split_window(
    records: Sequence[RequestRecord],
    start: float | None,
    end: float | None,
    *,
    schedule_origin: float | None = None,
) -> WindowSplit | None:
    """The window of a level whose window opened at ``start`` and closed at ``end`` (None:
    it never closed, e.g. a timed level: it closes at the last finish), or None when the
    window never opened or holds no request. An open-loop level gives its
    ``schedule_origin``: its requests belong to the window by their scheduled send time."""
    if start is None:
        return None
    if end is None:
        end = max((record.finished for record in records), default=start)
    if not end > start:
        return None
    if schedule_origin is not None:
        measured = [
            r
            for r in records
            if r.scheduled is not None and start <= schedule_origin + r.scheduled <= end
        ]
    else:
        measured = [r for r in records if r.start >= start and r.finished <= end]
    if not measured:
        return None
    ended_inside = [r for r in records if start <= r.finished <= end]
    measured_ids = {id(r) for r in measured}
    ramp = sum(1 for r in records if r.start < start and id(r) not in measured_ids)
    return WindowSplit(
        start, end, measured, ended_inside, ramp, len(records) - ramp - len(measured)
    )
