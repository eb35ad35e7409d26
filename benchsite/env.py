"""Typed reading of environment variables for settings.

Guarantee: every reader either returns a value of the promised type or raises
``ImproperlyConfigured`` naming the variable and what was wrong with it. Values are never
echoed back in errors for variables that may hold secrets. A secret may instead be read from
the file that ``<NAME>_FILE`` names (Docker and Kubernetes secrets), never from both.
Every name a reader is asked for is recorded (``variables_read``), so the settings' own
calls are the list of the variables they read.
"""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path
from urllib.parse import urlparse

import dj_database_url
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
# 32 bytes in URL-safe base64: 43 characters and one '=' of padding.
_FERNET_KEY = re.compile(r"[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]=")


# Every variable a reader was asked for, in order (a dict keeps the order, once each).
_READ: dict[str, None] = {}


def _environ(name: str) -> str | None:
    _READ.setdefault(name, None)
    return os.environ.get(name)


def variables_read() -> tuple[str, ...]:
    """The name of every variable the readers here were asked for so far, in order: once the
    settings are imported, every variable they read (``<NAME>_FILE`` alternatives aside)."""
    return tuple(_READ)


def _secret_value(name: str) -> str | None:
    """``name``'s value, or the contents of the file ``<name>_FILE`` names (one trailing
    newline dropped: ``echo`` and editors add one). Both set is an error: which one wins
    would be a guess, and a stale variable silently beating a rotated file is worse."""
    value = _environ(name)
    path = os.environ.get(f"{name}_FILE")
    if not path:
        return value
    if value:
        raise ImproperlyConfigured(f"set {name} or {name}_FILE, not both")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise ImproperlyConfigured(f"{name}_FILE: cannot read {path!r} ({reason})") from None
    return text.removesuffix("\n").removesuffix("\r")


def env_str(
    name: str, default: str | None = None, *, required: bool = False, secret: bool = False
) -> str | None:
    """The raw string, or ``default``; with ``required`` a missing or empty value is an error.
    With ``secret`` the value may come from the file ``<name>_FILE`` names instead."""
    value = _secret_value(name) if secret else _environ(name)
    if value is None or value == "":
        if required:
            raise ImproperlyConfigured(f"{name} must be set (it has no default outside the demo)")
        return default
    return value


def env_bool(name: str, default: bool) -> bool:
    """Accepts 1/0, true/false, yes/no, on/off (any case); anything else is an error."""
    raw = _environ(name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false, 1/0), got {raw!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    """An integer, at least ``minimum`` when given."""
    raw = _environ(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    """A comma-separated list; blanks around items are dropped, empty items rejected (an
    empty value is the empty list)."""
    raw = _environ(name)
    if raw is None:
        return default
    if not raw.strip():
        return []
    items = [item.strip() for item in raw.split(",")]
    if any(not item for item in items):
        raise ImproperlyConfigured(f"{name} must be a comma-separated list without empty items")
    return items


def env_choice(name: str, default: str, choices: set[str]) -> str:
    """One of ``choices``, in any case, returned as ``choices`` spell it (log levels
    upper-case, provider names lower-case)."""
    raw = _environ(name)
    if raw is None or raw.strip() == "":
        return default
    value = {choice.casefold(): choice for choice in choices}.get(raw.strip().casefold())
    if value is None:
        raise ImproperlyConfigured(
            f"{name} must be one of {', '.join(sorted(choices))}, got {raw!r}"
        )
    return value


def env_database(name: str, default: str | None, *, required: bool) -> dict:
    """A Django DATABASES entry parsed from a URL (postgres://, sqlite:///…); the URL may
    carry a password, so it may come from ``<name>_FILE``."""
    url = env_str(name, default, required=required, secret=True)
    assert url is not None
    try:
        config = dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True)
    except (ValueError, KeyError, dj_database_url.UnknownSchemeError) as exc:
        # The URL may carry a password: name the problem, not the value.
        raise ImproperlyConfigured(
            f"{name} is not a valid database URL ({type(exc).__name__})"
        ) from None
    if not config.get("ENGINE"):
        raise ImproperlyConfigured(f"{name} is not a valid database URL (unknown scheme)")
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # The demo's site, worker and agent ingest write one file from several processes:
        # WAL lets readers run beside a writer, IMMEDIATE transactions queue writers instead
        # of failing them, and the timeout is how long a writer waits its turn.
        config["OPTIONS"] = {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
        config["CONN_MAX_AGE"] = 0
    return config


def env_redis_url(name: str, default: str | None, *, required: bool) -> str | None:
    """A redis:// or rediss:// URL, checked for shape only (no connection is made); it may
    carry a password, so it may come from ``<name>_FILE``."""
    url = env_str(name, default, required=required, secret=True)
    if url is None:
        return None
    parsed = urlparse(url)
    if parsed.scheme not in {"redis", "rediss", "unix"} or (
        parsed.scheme != "unix" and not parsed.hostname
    ):
        raise ImproperlyConfigured(f"{name} must be a redis://host:port/db URL")
    try:
        parsed.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        raise ImproperlyConfigured(f"{name} has a malformed port") from None
    return url


def env_fernet_keys(name: str, *, derive_from: str | None) -> str:
    """One or more Fernet keys (URL-safe base64 of 32 bytes), comma-separated: the first
    encrypts, every one decrypts (so a key can be rotated). Unset, a key is derived from
    ``derive_from`` with HKDF-SHA256 (the demo, from SECRET_KEY); without ``derive_from`` the
    variable is required. The keys may come from ``<name>_FILE``. Errors never echo the
    value."""
    raw = (_secret_value(name) or "").strip()
    if not raw:
        if derive_from is None:
            raise ImproperlyConfigured(
                f"{name} must be set (it has no default outside the demo); generate one with "
                "python -c 'from cryptography.fernet import Fernet; "
                "print(Fernet.generate_key().decode())'"
            )
        derived = HKDF(
            algorithm=hashes.SHA256(), length=32, salt=None, info=b"benchsite/credentials/v1"
        ).derive(derive_from.encode())
        return base64.urlsafe_b64encode(derived).decode()
    keys = [item.strip() for item in raw.split(",")]
    for position, key in enumerate(keys, start=1):
        if not _FERNET_KEY.fullmatch(key):
            raise ImproperlyConfigured(
                f"{name} must hold Fernet keys (32 bytes, URL-safe base64), comma-separated; "
                f"item {position} is not one"
            )
    return ",".join(keys)


def env_demo_receiver_url(name: str, *, debug: bool) -> str:
    """The URL of the demo's own local webhook receiver ("" when unset, the default):
    ``http://127.0.0.1:<port>/…`` with its port named, and only with ``debug`` (the demo).
    Anything else is an error, so this can never open a private network to tenants' hooks:
    it names one loopback port, and only where the site is not in production."""
    raw = (_environ(name) or "").strip()
    if not raw:
        return ""
    if not debug:
        raise ImproperlyConfigured(f"{name} is the demo's own receiver: set it only with DEBUG")
    parsed = urlparse(raw)
    try:
        port = parsed.port
    except ValueError:
        port = None
    if parsed.scheme != "http" or parsed.hostname != "127.0.0.1" or port is None:
        raise ImproperlyConfigured(f"{name} must be http://127.0.0.1:<port>/ (the demo's receiver)")
    return raw
