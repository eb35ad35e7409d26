"""What agentic coding sessions a level sends: ``AgenticPrompts`` (synthesized, or read
from a session file; ``agents.workloads.agentic``), and the words of their requests.

Guarantees: a request's words are its hash-id blocks (``BlockText``: the same words for the
same id within a level, fresh words for the next level) and, for what no id names, words
drawn from its session and position (``fill_words``): every trial sends the same text,
whatever order responses arrive in. Synthesized sessions are deterministic for a generator.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from agents.loadgen.prompts import BlockText, Prompt, _special_tokens
from agents.loadgen.tokenizer import Tokenizer
from agents.workloads.agentic import (
    AgenticSession,
    AgenticTrace,
    SessionShape,
    synthesize_sessions,
)


def fill_words(salt: int, session: int, index: int) -> random.Random:
    """The generator of the words no hash id names in one request: seeded by the level's
    salt, the session and the request's place, never by when it is sent."""
    return random.Random(f"{salt}:{session}:{index}")  # noqa: S311 - reproducible text


@dataclass(frozen=True)
class AgenticPrompts:
    """Agentic sessions: synthesized from ``shape``, or a session file's (``trace``)."""

    shape: SessionShape | None = None
    trace: AgenticTrace | None = None

    @property
    def block_size(self) -> int:
        return self.trace.block_size if self.trace is not None else self.shape.block_size

    def sessions(self, count: int, rng: random.Random) -> list[AgenticSession]:
        """``count`` sessions: a file's in its order (from the first again when more are
        needed), or freshly synthesized from ``rng``."""
        if self.trace is not None:
            known = self.trace.sessions
            return [known[index % len(known)] for index in range(count)]
        return list(synthesize_sessions(self.shape, count, rng).sessions)

    def session_offsets(self, rate: float) -> list[float] | None:
        """A session file's start times scaled so that sessions start at ``rate`` per
        second (all at 0 for ``inf``); None for synthesized sessions (gamma arrivals)."""
        if self.trace is None:
            return None
        starts = [session.start for session in self.trace.sessions]
        own = self.trace.mean_rate
        if math.isinf(rate) or math.isinf(own):
            return [0.0] * len(starts)
        return [start * own / rate for start in starts]

    def sessions_for(self, requests: int, concurrency: int | None) -> int:
        """How many sessions a level builds for about ``requests`` requests."""
        if self.trace is None:
            probe = self.sessions(8, random.Random(0))  # noqa: S311 - a sample, not a secret
        else:
            probe = list(self.trace.sessions)
        mean = sum(len(s.requests) for s in probe) / len(probe)
        return math.ceil(requests / mean) + (concurrency or 0) + 1

    def sample(
        self, count: int, rng: random.Random, tokenizer: Tokenizer | None = None
    ) -> list[Prompt]:
        """Single prompts for what is not a session (a warm-up): sessions' first requests."""
        blocks = BlockText(self.block_size, rng.getrandbits(64))
        special = _special_tokens(tokenizer)
        prompts = []
        for number, session in enumerate(self.sessions(count, rng)):
            first = session.requests[0]
            words = blocks.words(first.hash_ids, first.input_len, fill_words(0, number, 0))
            prompts.append(Prompt(" ".join(words), first.input_len + special, first.output_len))
        return prompts
