"""Form input checked exactly as the API checks it.

A page parses its form with the API's serializer and then calls the same service, so a
refused form names the same field paths with the same messages as the API's 400 answer
(``{"limit_usd": ["Must be zero or more."]}``).
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from runs.errors import DomainValidationError
from runs.inputs.errors import flatten_errors


def parse_as_api(
    serializer_class: type[serializers.Serializer], data, *, partial: bool = False, **context: Any
) -> dict[str, Any]:
    """The serializer's validated data; raises ``DomainValidationError`` with the API's field
    paths when the input is refused. ``partial``: as a PATCH reads it (only what is given)."""
    serializer = serializer_class(data=data, context=context, partial=partial)
    if not serializer.is_valid():
        raise DomainValidationError(flatten_errors(serializer.errors))
    return serializer.validated_data


def error_summary(errors: dict[str, list[str]], labels: dict[str, str]) -> list[dict[str, Any]]:
    """The errors as a page lists them above its form: each with the field's label, its API
    path, and the id of its control (``id_<path>``) to link to."""
    return [
        {
            "field": field,
            "label": labels.get(field, field.replace("_", " ").capitalize()),
            "messages": messages,
            "anchor": f"id_{field}" if field in labels else None,
        }
        for field, messages in errors.items()
    ]
