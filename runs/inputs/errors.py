"""How an error names a field (a path), and how much of the input its text may repeat.

``flatten_errors`` turns DRF's nested error detail into ``{"serve_grid.max_num_seqs[1]":
["…"]}``; the API's error answers and the pages' forms both name fields this way, so a
client and a page show the same path for the same mistake. A pydantic error dict
contributes its message, never the ``input`` it carries. ``clip_text`` bounds any text an
error carries that may repeat what was sent (the API's error answers, an agent message's
refusal).
"""

from __future__ import annotations

MAX_ERROR_TEXT_CHARS = 300

# The keys of a pydantic error dict ({"type", "loc", "msg", "input", "ctx", "url"}).
_PYDANTIC_ERROR_KEYS = {"type", "loc", "msg"}


def flatten_errors(detail, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error detail → {"a.b[2].c": ["message", …]}."""
    flat: dict[str, list[str]] = {}
    if isinstance(detail, dict) and detail.keys() >= _PYDANTIC_ERROR_KEYS:
        # A pydantic error dict: its message, not the input it carries.
        flat[prefix or "non_field_errors"] = [str(detail["msg"])]
    elif isinstance(detail, dict):
        for key, value in detail.items():
            key = str(key)
            path = (
                key if not prefix else (f"{prefix}[{key}]" if key.isdigit() else f"{prefix}.{key}")
            )
            if key == "non_field_errors":
                path = prefix or "non_field_errors"
            for field, messages in flatten_errors(value, path).items():
                flat.setdefault(field, []).extend(messages)
    elif isinstance(detail, list):
        if all(not isinstance(item, (dict, list)) for item in detail):
            flat[prefix or "non_field_errors"] = [str(item) for item in detail]
        else:
            for index, item in enumerate(detail):
                if item:
                    for field, messages in flatten_errors(item, f"{prefix}[{index}]").items():
                        flat.setdefault(field, []).extend(messages)
    else:
        flat[prefix or "non_field_errors"] = [str(detail)]
    return flat


def clip_text(text: str, limit: int = MAX_ERROR_TEXT_CHARS) -> str:
    """``text`` cut to ``limit`` characters (marked "..."): the one rule for any text an
    error answer carries that may repeat what the client sent."""
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "..."
