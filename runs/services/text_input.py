"""Short free-text fields people type (a run's reason, a cancel's reason), checked alike.

Guarantee: the value returned is a stripped string within ``max_chars`` without NUL; anything
else raises ``DomainValidationError`` naming ``field``.
"""

from __future__ import annotations

from runs.errors import DomainValidationError


def clean_short_text(value: object, *, field: str, max_chars: int) -> str:
    if not isinstance(value, str):
        raise DomainValidationError.single(field, "Expected a string.")
    value = value.strip()
    if len(value) > max_chars:
        raise DomainValidationError.single(
            field, f"At most {max_chars} characters (got {len(value)})."
        )
    if "\x00" in value:
        raise DomainValidationError.single(field, "Null characters are not allowed.")
    return value
