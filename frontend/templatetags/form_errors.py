"""Field errors in templates: ``{{ errors|field_errors:"limit_usd" }}`` gives that field's
messages from an ``{API field path: [messages]}`` dict (see frontend/validation.py)."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def field_errors(errors, field: str) -> list[str]:
    return (errors or {}).get(field, [])
