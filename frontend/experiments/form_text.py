"""Typed text to JSON values and back, for the model and experiment forms.

Guarantee: nothing is interpreted twice. A value that does not read as JSON (``64``, ``0.9``,
``true``, ``null``) is passed on as typed, and the validator the API uses says what is wrong
with it; a stored value is shown as it would be typed again.
"""

from __future__ import annotations

import json
import math

from agents.protocol import json_loads_bounded


def literal(text: str) -> object:
    """A typed value as JSON would read it (``64``, ``0.9``, ``true``, ``null``), else the text
    itself: the validator then says what it expected."""
    lowered = text.lower()
    if lowered in ("true", "false", "null"):
        return json.loads(lowered)
    try:
        value = json_loads_bounded(text)
    except ValueError:
        return text
    if isinstance(value, float) and not math.isfinite(value):
        return text
    return value


def items(text: str) -> list:
    """'1, 8, 64' → [1, 8, 64]; blanks between commas are ignored."""
    return [literal(part.strip()) for part in text.split(",") if part.strip()]


def put_number(target: dict, key: str, text: str | None) -> None:
    """Sets ``target[key]`` from typed text, leaving it out when blank (the default applies)."""
    text = (text or "").strip()
    if text:
        target[key] = literal(text)


def shown_text(value: object) -> str:
    """A stored value as an input shows it."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return json.dumps(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # 250.0 ms was typed as 250
    return str(value)


def list_text(values: list) -> str:
    return ", ".join(shown_text(v) if v is not None else "null" for v in values)
