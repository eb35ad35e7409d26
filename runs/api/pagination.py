"""Cursor pagination: stable under inserts and cheap on large tables (no COUNT, no OFFSET)."""

from __future__ import annotations

from rest_framework.pagination import CursorPagination


class CreatedCursorPagination(CursorPagination):
    """Newest first. ``?page_size=`` up to 200."""

    ordering = ("-created_at", "-pk")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


def cursor_pagination(*ordering: str) -> type[CursorPagination]:
    """A cursor paginator over ``ordering`` (the first field should be near-unique)."""
    return type("CursorPagination", (CreatedCursorPagination,), {"ordering": ordering})
