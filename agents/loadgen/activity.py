"""How lively the server is: requests in flight and when it last sent a byte.

Guarantee: ``Activity`` is updated by the load generator for every request it sends (in flight
up at the send, down at the end) and every read of a response body (``last``, the
``perf_counter`` time), at the cost of two attribute stores; whoever watches for a hung
server (the agent's runner) reads ``silent_for`` from the same event loop.
"""

from __future__ import annotations

from time import perf_counter


class Activity:
    """Requests in flight and the time of the last response bytes (``perf_counter``)."""

    __slots__ = ("in_flight", "last")

    def __init__(self) -> None:
        self.in_flight = 0
        self.last = perf_counter()

    def silent_for(self, now: float | None = None) -> float:
        """Seconds without a byte from the server while requests were waiting for one; 0
        while none is in flight."""
        if self.in_flight <= 0:
            return 0.0
        return (perf_counter() if now is None else now) - self.last
