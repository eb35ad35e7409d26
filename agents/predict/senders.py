"""What the offline levels share: who sends next (``Sender``) and a prompt's tokens as the
simulator's server counts them (``words``)."""

from __future__ import annotations

from functools import lru_cache


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
