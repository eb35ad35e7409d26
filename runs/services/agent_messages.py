"""What the site takes from an agent, before anything is stored: one parse-or-refuse rule for
every agent message, whichever way it came (the ingest socket or the REST batch).

Guarantees:

- The same content gets the same answer on both ways: the message, or a ``Rejected`` whose
  ``seq`` is the message's own when it is a valid sequence number (else None) and whose
  reason names the fields at fault.
- A message is refused when the protocol refuses it, when it is for another run than the
  token's, or when a string in it holds a U+0000 (PostgreSQL cannot store one, and a message
  that fails its write would fail every resend too).
"""

from __future__ import annotations

from uuid import UUID

import pydantic

from agents import protocol
from runs.api.errors import clip_text
from runs.api.parsers import NUL_REFUSAL, has_nul_character

NOT_JSON_REFUSAL = "not a JSON message"

# What an agent message parses to: the message, or the answer that refuses it.
Parsed = protocol.AgentMessage | protocol.Rejected


def agent_message_parse(content: object, *, run_id: UUID) -> Parsed:
    """``content`` (one decoded JSON message) as a protocol message of run ``run_id``, or the
    ``Rejected`` to answer it with."""
    seq = protocol.message_seq(content)  # echoed in a refusal only when it is one
    try:
        message = protocol.parse_agent_message(content)
    except pydantic.ValidationError as exc:
        errors = protocol.agent_message_errors(exc)
        reason = "; ".join(f"{e.field or 'message'}: {e.message}" for e in errors)
        return protocol.Rejected(seq=seq, reason=clip_text(reason))
    if message.run_id != run_id:
        return protocol.Rejected(seq=seq, reason="message for another run")
    if has_nul_character(content):
        return protocol.Rejected(seq=seq, reason=NUL_REFUSAL)
    return message


def agent_frame_parse(text: str | bytes, *, run_id: UUID) -> Parsed:
    """One socket frame, as ``agent_message_parse`` takes a message; a frame that is not JSON,
    or nests deeper than ``protocol.MAX_JSON_DEPTH`` (as every API body is bounded), is
    refused without a ``seq``."""
    try:
        content = protocol.json_loads_bounded(text)
    except protocol.JsonTooDeep as exc:
        return protocol.Rejected(reason=f"{NOT_JSON_REFUSAL}: {exc}")
    except (TypeError, ValueError):
        return protocol.Rejected(reason=NOT_JSON_REFUSAL)
    return agent_message_parse(content, run_id=run_id)
