"""The bounded field types of the wire: every number an agent sends fits the site column
that stores it, and free-form JSON holds only finite numbers."""

from __future__ import annotations

import math
from typing import Annotated
from uuid import UUID

import pydantic
from pydantic import (
    Field,
)

# The largest values of the site's integer columns (PostgreSQL ``integer`` and ``bigint``).
# Every number an agent sends is bounded so that it fits where the site stores it: a value
# out of range is refused as one message naming its field, rather than failing the whole
# batch's write. Counts kept only inside JSON are bounded by the integer width too (a count
# beyond 2**31 is no real measurement, and JavaScript reads integers exactly only below 2**53).
INTEGER_COLUMN_MAX = 2**31 - 1
BIGINT_COLUMN_MAX = 2**63 - 1

SeqNumber = Annotated[int, Field(ge=0, le=BIGINT_COLUMN_MAX)]  # AgentMessageRecord.seq: bigint
TrialIndex = Annotated[int, Field(ge=0, le=10_000)]  # Trial.index: integer
Count = Annotated[int, Field(ge=0, le=INTEGER_COLUMN_MAX)]
MAX_EPOCH = INTEGER_COLUMN_MAX  # AgentMessageRecord.epoch and Run.agent_epoch: integer
EpochNumber = Annotated[int, Field(ge=0, le=MAX_EPOCH)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
# UUIDs arrive as JSON strings; this one field is lax so parsed JSON validates as is.
RunId = Annotated[UUID, Field(strict=False)]


def _finite_json(value: object) -> object:
    """Refuses NaN and infinities anywhere in free-form JSON: PostgreSQL's jsonb cannot hold
    them, and a figure that is not a number must never reach a report. Integers are bounded
    by ``BIGINT_COLUMN_MAX`` either way: reports turn figures into floats and columns, where
    a 400-digit token count would fail a page instead of one message. Walks without
    recursion, so no nesting depth can exhaust the stack."""
    pending: list[tuple[object, str]] = [(value, "")]
    while pending:
        item, path = pending.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"{path or 'value'} is not a finite number")
        if isinstance(item, int) and abs(item) > BIGINT_COLUMN_MAX:
            raise ValueError(f"{path or 'value'} is out of range (at most {BIGINT_COLUMN_MAX})")
        if isinstance(item, dict):
            pending.extend((v, f"{path}.{k}" if path else str(k)) for k, v in item.items())
        elif isinstance(item, list):
            pending.extend((v, f"{path}[{i}]") for i, v in enumerate(item))
    return value


FiniteJson = Annotated[dict[str, object], pydantic.AfterValidator(_finite_json)]
