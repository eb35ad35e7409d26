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
from runs.inputs.errors import clip_text
from runs.inputs.nul_characters import NUL_REFUSAL, has_nul_character

NOT_JSON_REFUSAL = "not a JSON message"
FRAME_TOO_LARGE_REFUSAL = f"an array frame holds at most {protocol.MAX_BATCH_MESSAGES} messages"

# What an agent message parses to: the message, or the answer that refuses it.
Parsed = protocol.AgentMessage | protocol.Rejected


def agent_message_parse(content: object, *, run_id: UUID, may_hold_nul: bool = True) -> Parsed:
    """``content`` (one decoded JSON message) as a protocol message of run ``run_id``, or the
    ``Rejected`` to answer it with. ``may_hold_nul=False``: the caller knows no string in it
    holds a U+0000 (its JSON text had no ``\\u0000``), so it is not walked for one."""
    seq = protocol.message_seq(content)  # echoed in a refusal only when it is one
    try:
        message = protocol.parse_agent_message(content)
    except pydantic.ValidationError as exc:
        errors = protocol.agent_message_errors(exc)
        reason = "; ".join(f"{e.field or 'message'}: {e.message}" for e in errors)
        return protocol.Rejected(seq=seq, reason=clip_text(reason))
    if message.run_id != run_id:
        return protocol.Rejected(seq=seq, reason="message for another run")
    if may_hold_nul and has_nul_character(content):
        return protocol.Rejected(seq=seq, reason=NUL_REFUSAL)
    return message


def agent_frame_parse(
    text: str | bytes, *, run_id: UUID, arrays: bool = False
) -> Parsed | list[Parsed]:
    """One socket frame, as ``agent_message_parse`` takes a message; a frame that is not JSON,
    or nests deeper than ``protocol.MAX_JSON_DEPTH`` (as every API body is bounded), is
    refused without a ``seq``.

    ``arrays`` (a socket opened with ``protocol.BATCH_SUBPROTOCOL``): a frame that is a JSON
    array is parsed element by element, in order, into a list (each element answered on its
    own); one of more than ``protocol.MAX_BATCH_MESSAGES`` messages is refused whole,
    without a ``seq``."""
    try:
        content = protocol.json_loads_bounded(text)
    except protocol.JsonTooDeep as exc:
        return protocol.Rejected(reason=f"{NOT_JSON_REFUSAL}: {exc}")
    except (TypeError, ValueError):
        return protocol.Rejected(reason=NOT_JSON_REFUSAL)
    # JSON text can carry a U+0000 only as the escape \u0000 (the decoder refuses the raw
    # character): text without one needs no walk of the decoded message (about 4 % of the
    # ingest's CPU). Bytes may be UTF-16, full of zero bytes: those are walked.
    may_hold_nul = not isinstance(text, str) or "\\u0000" in text
    if arrays and isinstance(content, list):
        if len(content) > protocol.MAX_BATCH_MESSAGES:
            return protocol.Rejected(reason=FRAME_TOO_LARGE_REFUSAL)
        return [
            agent_message_parse(item, run_id=run_id, may_hold_nul=may_hold_nul) for item in content
        ]
    return agent_message_parse(content, run_id=run_id, may_hold_nul=may_hold_nul)
