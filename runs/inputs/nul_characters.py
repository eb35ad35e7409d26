"""The one text PostgreSQL cannot store: a U+0000 in a string (text or jsonb).

``nul_character_path`` names where a decoded JSON value holds one, as error answers name
fields; the API's JSON parser refuses such a body naming that field, and an agent message
holding one is refused on its own with ``NUL_REFUSAL`` (the socket and the REST batch
alike).
"""

from __future__ import annotations

# What an agent message holding a U+0000 is refused with (the socket and the REST batch).
NUL_REFUSAL = "Null characters (U+0000) are not allowed in any string."


def nul_character_path(value) -> str | None:
    """The path (``serve_grid.max_num_seqs[1]``, as error answers name fields) of the first
    string — key or value — of the decoded JSON ``value`` that holds a U+0000; None when none
    does. Iterative: the depth is bounded before decoding, but a walk need not rely on it."""
    pending: list[tuple[object, str]] = [(value, "")]
    while pending:
        item, path = pending.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return path or "non_field_errors"
        elif isinstance(item, dict):
            for key, child in item.items():
                child_path = f"{path}.{key}" if path else str(key)
                if "\x00" in key:
                    return path or "non_field_errors"
                pending.append((child, child_path))
        elif isinstance(item, list):
            pending.extend((child, f"{path}[{index}]") for index, child in enumerate(item))
    return None


def has_nul_character(value) -> bool:
    """True when a U+0000 is in any string (key or value) of the decoded JSON ``value``."""
    return nul_character_path(value) is not None
