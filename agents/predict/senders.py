"""What the offline levels share: who sends next (``Sender``; ``SessionClock`` for session
levels) and a prompt's tokens as the simulator's server counts them (``words``)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache

from agents.loadgen.levels import level_wants_more
from agents.loadgen.steady import ClosedLoopWindow


class Sender:
    """When a level's next request goes out, and sending it."""

    def next_time(self) -> float | None:
        """The simulated time of the next send; None while none is due (or ever will be)."""
        raise NotImplementedError

    def send(self) -> None:
        raise NotImplementedError


@lru_cache(maxsize=65536)
def words(text: str) -> list[str]:
    """A prompt's tokens as the simulator's server counts them (its words)."""
    return text.split()


class SessionClock(Sender):
    """What happens next in a session level offline: a due request of an open session, a
    closed-loop slot that came free (its next session starts, while the level still wants
    requests), or — open loop — the next session's arrival at ``start + offset`` (while
    sessions enough for ``count`` requests have not started). Earliest first; at equal
    times in the order they became due, an arrival before the rest.

    ``start_session(moment, slot, first, scheduled)`` starts one (``slot`` None in open
    loop; ``first``: the slot's first session; ``scheduled``: its arrival offset) and
    returns how many requests it will send; ``send_item(moment, item, index)`` sends what
    ``due`` queued. ``may_send(moment)`` says whether the level still wants requests: fewer
    than ``count`` in ``records``, its ``deadline`` not reached, its ``window`` not draining.
    """

    def __init__(
        self,
        start: float,
        *,
        concurrency: int | None,
        offsets: Iterable[float],
        ramp_seconds: float,
        count: int | None,
        records: list,
        deadline: float | None,
        window: ClosedLoopWindow | None,
        start_session: Callable[[float, int | None, bool, float | None], int],
        send_item: Callable[[float, object, int], None],
    ):
        self.start, self.count = start, count
        self.records, self.deadline, self.window = records, deadline, window
        self.start_session, self.send_item = start_session, send_item
        self.ready: list[tuple[float, int, object, int]] = []
        self.order = itertools.count()
        self.arrivals = iter(offsets)
        self.upcoming = next(self.arrivals, None) if concurrency is None else None
        self.planned = 0
        self.fresh: set[int] = set(range(concurrency or 0))
        for slot in range(concurrency or 0):
            self.slot_free(start + ramp_seconds * slot / concurrency, slot)

    def may_send(self, moment: float) -> bool:
        """Whether the level sends another request at ``moment``."""
        return level_wants_more(len(self.records), moment, self.count, self.deadline, self.window)

    def due(self, moment: float, item: object, index: int = -1) -> None:
        """``item`` (its request ``index``) goes out at ``moment``."""
        heapq.heappush(self.ready, (moment, next(self.order), item, index))

    def slot_free(self, moment: float, slot: int) -> None:
        """A closed-loop slot's session ended at ``moment``: the slot starts its next one."""
        heapq.heappush(self.ready, (moment, next(self.order), _Slot(slot), -1))

    def _arrival(self) -> float | None:
        if self.upcoming is None or (self.count is not None and self.planned >= self.count):
            return None
        return self.start + self.upcoming

    def next_time(self) -> float | None:
        due = self.ready[0][0] if self.ready else None
        arrival = self._arrival()
        if arrival is not None:
            due = arrival if due is None else min(due, arrival)
        return due

    def send(self) -> None:
        arrival = self._arrival()
        if arrival is not None and (not self.ready or arrival <= self.ready[0][0]):
            self.planned += self.start_session(arrival, None, False, self.upcoming)
            self.upcoming = next(self.arrivals, None)
            return
        moment, _, item, index = heapq.heappop(self.ready)
        if isinstance(item, _Slot):
            if self.may_send(moment):
                first = item.number in self.fresh
                self.fresh.discard(item.number)
                self.start_session(moment, item.number, first, None)
            return
        self.send_item(moment, item, index)


@dataclass(frozen=True)
class _Slot:
    number: int
