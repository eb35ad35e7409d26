"""How the protocol reports a refused input: ``FieldError`` (one problem, one field path),
``ServeGridError`` (every problem of a serve grid at once) and how a refusal quotes the value
it refused (in JSON's words: ``got boolean true``, ``got string "8"``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class FieldError:
    """One problem with one input field.

    ``field`` is a path relative to the validated object: dotted for object keys and indexed
    for list items (``max_num_seqs[1]``, ``dataset.input_len``). The empty string means the
    object as a whole (for a serve grid: its size).
    """

    field: str
    message: str


class ServeGridError(ValueError):
    """A serve grid or serve configuration was refused; ``errors`` lists every reason.

    Paths in ``errors`` are relative to the grid (``"max_num_seqs[1]"``, ``"bogus_flag"``, or
    ``""`` for the whole grid), so a caller can prefix them with where the grid sits.
    """

    def __init__(self, errors: Sequence[FieldError]):
        self.errors: list[FieldError] = list(errors)
        # One line per problem: messages contain ";" and "," themselves.
        super().__init__(
            "\n".join(f"{error.field or '(grid)'}: {error.message}" for error in self.errors)
        )

    def __reduce__(self):
        # Celery and multiprocessing pickle exceptions; rebuild from the errors, not the text.
        return (type(self), (self.errors,))


def json_type_name(value: object) -> str:
    # Messages talk JSON, the language the user wrote the grid in.
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def json_literal(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        # Echo user text in quotes, and only so much of it.
        return json.dumps(value if len(value) <= 40 else value[:40] + "...")
    if isinstance(value, int | float):
        return str(value)
    return json_type_name(value)


def got_value(value: object) -> str:
    """``got boolean true``, ``got string "8"``, ``got null``, ``got array``."""
    kind = json_type_name(value)
    literal = json_literal(value)
    return f"got {kind}" if literal == kind else f"got {kind} {literal}"
