"""A picture of every Benchsite row, to prove that a refused request wrote nothing."""

from __future__ import annotations

from django.apps import apps

# Authenticating records these; that is bookkeeping, not a write of the request.
_BOOKKEEPING = {"last_used_at", "last_login"}


def database_state() -> dict[str, list[str]]:
    """Every row of every table of the ``runs`` app, in a stable order."""
    state = {}
    for model in apps.get_app_config("runs").get_models():
        state[model.__name__] = sorted(
            repr(sorted((k, v) for k, v in row.items() if k not in _BOOKKEEPING))
            for row in model.objects.values()
        )
    return state
