"""Domain errors raised by services and turned into clear API/UI answers.

A service raises these *before* writing anything, or inside its transaction so that the
whole change rolls back: a refused request never leaves a half-written row.
"""

from __future__ import annotations


class DomainValidationError(Exception):
    """Input that is well-formed but not allowed. ``fields`` maps a field path to messages."""

    def __init__(self, fields: dict[str, list[str]]):
        self.fields = fields
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in fields.items()))

    @classmethod
    def single(cls, field: str, message: str) -> DomainValidationError:
        return cls({field: [message]})


class Conflict(Exception):
    """The request is valid but clashes with the current state (e.g. deleting a used model)."""


class RateLimited(Exception):
    """Too many of one action in a while. The message says when it may be done again;
    ``retry_after`` in how many seconds."""

    def __init__(self, message: str, *, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after
