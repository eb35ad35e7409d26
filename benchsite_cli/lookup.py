"""Finding a row of the API by id or by exact name."""

from __future__ import annotations

from typing import Any

from benchsite_cli.client import ApiClient, CliError


def find_row(api: ApiClient, path: str, ref: str, what: str) -> dict[str, Any]:
    """A row by id, or by exact name when ``ref`` is not an id."""
    if looks_like_uuid(ref):
        return api.get(f"{path}/{ref}/")
    params = {"name": ref} if path == "experiments" else None
    matches = [row for row in api.list_all(f"{path}/", params) if row.get("name") == ref]
    if len(matches) != 1:
        found = "no" if not matches else f"{len(matches)}"
        raise CliError(f"{found} {what} named {ref!r} in this organization")
    return api.get(f"{path}/{matches[0]['id']}/")


def looks_like_run_id(value: str) -> bool:
    """A run's id, or what could be a prefix of one (hex digits and hyphens); the site
    decides whether a prefix is long enough and names one run."""
    return bool(value) and not value.lower().strip("0123456789abcdef-")


def looks_like_uuid(value: str) -> bool:
    import uuid

    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
