"""Request body parsing.

Guarantees of ``StrictJSONParser`` (every JSON body of the API, the agents' batch included):

- a body larger than ``BENCHSITE_MAX_BODY_BYTES`` is answered 413 before it is read whole;
- a document nested deeper than ``agents.protocol.MAX_JSON_DEPTH`` is answered 400 before it
  is decoded, so no body can exhaust the stack of the decoder or of any later walk;
- a U+0000 anywhere in a string is answered 400 naming the field that holds it (PostgreSQL
  cannot store it in text or jsonb); in the agents' batch each message holding one is
  refused on its own instead (``runs.api.views_agent``), as on the socket;
- NaN and infinities are refused as DRF's strict JSON refuses them.
"""

from __future__ import annotations

import json

from django.conf import settings
from rest_framework import renderers, status
from rest_framework.exceptions import APIException, ParseError, ValidationError
from rest_framework.parsers import BaseParser, get_encoding
from rest_framework.settings import api_settings
from rest_framework.utils.json import strict_constant

from agents import protocol
from runs.inputs.nul_characters import nul_character_path


class RequestTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"


def _declared_length(parser_context) -> int:
    request = parser_context.get("request")
    meta = getattr(request, "META", {})
    try:
        return int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


class StrictJSONParser(BaseParser):
    """JSON that is small, shallow and storable; see the module's guarantees.

    Not a subclass of DRF's ``JSONParser`` on purpose: DRF reads a ``JSONParser``'s body
    whole through Django's ``request.body`` first, which refuses a large one with Django's
    HTML 400 before any limit here could answer, and would hold the agents' batch to the
    forms' limit. This parser reads the stream itself, at most one byte past its limit."""

    media_type = "application/json"
    renderer_class = renderers.JSONRenderer
    strict = api_settings.STRICT_JSON
    refuses_nul = True

    def max_body_bytes(self) -> int:
        return settings.BENCHSITE_MAX_BODY_BYTES

    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        limit = self.max_body_bytes()
        too_large = RequestTooLarge(f"The request body is larger than {limit} bytes.")
        if _declared_length(parser_context) > limit:
            raise too_large  # refused before a byte of it is read
        raw = stream.read(limit + 1)
        if len(raw) > limit:
            raise too_large
        try:
            text = raw.decode(get_encoding(parser_context))
        except UnicodeDecodeError as exc:
            raise ParseError(f"JSON parse error - {exc.reason} at byte {exc.start}") from None
        if protocol.json_depth_exceeds(text):
            raise ParseError(
                f"JSON parse error - nested deeper than {protocol.MAX_JSON_DEPTH} levels."
            )
        try:
            data = json.loads(text, parse_constant=strict_constant if self.strict else None)
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        # A decoded U+0000 can only come from a "\u0000" escape (the decoder refuses a raw
        # control character in a string), so a body without one skips the walk of every
        # string, which cost as much as decoding it.
        could_hold_nul = self.refuses_nul and "\\u0000" in text
        nul_at = nul_character_path(data) if could_hold_nul else None
        if nul_at is not None:
            # Refused here, naming the field: PostgreSQL cannot store it in text or jsonb.
            raise ValidationError({nul_at: ["Null characters (U+0000) are not allowed."]})
        return data


class AgentBatchParser(StrictJSONParser):
    """The agents' REST batch: taken up to the protocol's batch size whatever the site's
    body limit says, so that no setting can make an agent's results undeliverable."""

    # The batch's envelope around its messages: '{"messages":[', the commas, ']}'.
    ENVELOPE_BYTES = 64 * 1024
    # Each message holding a U+0000 is refused on its own by the view, as on the socket: one
    # such message (a log tail with a stray byte) must not hold back every batch after it.
    refuses_nul = False

    def max_body_bytes(self) -> int:
        return max(super().max_body_bytes(), protocol.MAX_BATCH_BYTES + self.ENVELOPE_BYTES)
