"""Request body parsing."""

from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


def _has_nul(value) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(item) for item in value)
    return False


class StrictJSONParser(JSONParser):
    """JSON that PostgreSQL can store: a U+0000 anywhere in a string is refused with 400 here,
    instead of reaching the database (which cannot hold it in text or jsonb) as a 500."""

    def parse(self, stream, media_type=None, parser_context=None):
        data = super().parse(stream, media_type, parser_context)
        if _has_nul(data):
            raise ParseError("Null characters (U+0000) are not allowed in any string.")
        return data
