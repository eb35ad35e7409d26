"""What multi-turn chat sessions say: ``SessionPrompts`` (as
``agents.protocol.ChatSessionsDataset`` describes them) draws each session's turns.

Guarantees: deterministic (the same source, count and seed give the same sessions — turn
counts, messages, requested lengths and think times); the system prompt is drawn once per
call, shared by every session of that level and fresh for the next level (no level is served
from the prefix cache another filled); every message's text is built here, before a level's
clock starts.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from agents.loadgen.prompts import Prompt, _lengths, _random_text, _special_tokens
from agents.loadgen.tokenizer import Tokenizer


@dataclass(frozen=True, slots=True)
class Turn:
    """One user turn: the new message (and its tokens), the reply's requested length, and
    how long the user thinks before sending it (0 for a session's first turn)."""

    message: str
    message_len: int
    output_len: int
    think: float


@dataclass(frozen=True, slots=True)
class SessionPlan:
    """What one session will say: the shared system prompt (None without one) and its
    turns."""

    system: str | None
    system_len: int
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class SessionPrompts:
    """Chat sessions as ``agents.protocol.ChatSessionsDataset`` describes them."""

    min_turns: int
    max_turns: int
    system_len: int
    user_len: int
    output_len: int
    range_ratio: float = 0.0
    think_seconds: float = 0.0

    @property
    def mean_turns(self) -> float:
        return (self.min_turns + self.max_turns) / 2

    def sessions(
        self, count: int, rng: random.Random, tokenizer: Tokenizer | None = None
    ) -> list[SessionPlan]:
        """``count`` sessions sharing one freshly drawn system prompt."""
        system, system_len = (
            _random_text(rng, self.system_len, tokenizer) if self.system_len else (None, 0)
        )
        plans = []
        for _ in range(count):
            turns = rng.randint(self.min_turns, self.max_turns)
            users = _lengths(rng, self.user_len, self.range_ratio, turns)
            outputs = _lengths(rng, self.output_len, self.range_ratio, turns)
            made = []
            for number, (user_len, output_len) in enumerate(zip(users, outputs, strict=True)):
                text, length = _random_text(rng, user_len, tokenizer)
                think = (
                    rng.expovariate(1 / self.think_seconds)
                    if number and self.think_seconds
                    else 0.0
                )
                made.append(Turn(text, length, output_len, think))
            plans.append(SessionPlan(system, system_len, tuple(made)))
        return plans

    def sample(
        self, count: int, rng: random.Random, tokenizer: Tokenizer | None = None
    ) -> list[Prompt]:
        """Single prompts for what is not a session (a warm-up): first turns, the system
        prompt before the message."""
        special = _special_tokens(tokenizer)
        prompts = []
        for plan in self.sessions(count, rng, tokenizer):
            first = plan.turns[0]
            text = f"{plan.system} {first.message}" if plan.system else first.message
            prompts.append(
                Prompt(text, plan.system_len + first.message_len + special, first.output_len)
            )
        return prompts

    def sessions_for(self, requests: int, concurrency: int | None) -> int:
        """How many sessions a level builds for about ``requests`` turns: enough at the
        mean turn count, plus one per slot (sessions cut off when the level ends)."""
        return math.ceil(requests / self.mean_turns) + (concurrency or 0) + 1
