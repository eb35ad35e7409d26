"""Report tables in templates: ``{% if table|numeric_column:forloop.counter0 %}`` says whether a
column holds figures, so that its heading lines up with them (right-aligned)."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def numeric_column(table, index: int) -> bool:
    """True when the column at ``index`` holds figures (its first row's cell is numeric)."""
    rows = getattr(table, "rows", None) or []
    return bool(rows) and index < len(rows[0]) and bool(rows[0][index].numeric)
