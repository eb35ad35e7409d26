"""Short free-text fields people type (a run's reason, a cancel's reason), checked alike, and
what of such text may go into a one-line header.

Guarantees: ``clean_short_text`` returns a stripped string within ``max_chars`` without NUL;
anything else raises ``DomainValidationError`` naming ``field``. ``one_line`` returns text
without a control character or a line or paragraph separator, each turned into a space: what
``has_control_characters`` finds is what ``one_line`` removes.
"""

from __future__ import annotations

import re
import unicodedata

from runs.errors import DomainValidationError

# Unicode's control characters (Cc: C0, DEL, C1) and line and paragraph separators.
_BREAKING = {"Cc", "Zl", "Zp"}
_RUN_OF_SPACES = re.compile(r" {2,}")


def _breaks_a_line(character: str) -> bool:
    return unicodedata.category(character) in _BREAKING


def has_control_characters(text: str) -> bool:
    """Whether ``text`` holds a control character (a new line, a tab, an escape…)."""
    return any(_breaks_a_line(character) for character in text)


def one_line(text: str) -> str:
    """``text`` fit for a one-line header (a mail's subject): each control character or
    separator a space, runs of spaces one."""
    spaced = "".join(" " if _breaks_a_line(character) else character for character in text)
    return _RUN_OF_SPACES.sub(" ", spaced).strip()


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
