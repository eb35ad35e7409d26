"""The OpenAPI schema generates without a warning and validates against the OpenAPI spec."""

from __future__ import annotations

import io

from django.core.management import call_command


def test_it_generates_a_valid_schema_without_warnings(db):
    out = io.StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out)
    schema = out.getvalue()
    assert "/api/v1/orgs/{org}/experiments/" in schema
    assert "bearerToken" in schema and "runToken" in schema
