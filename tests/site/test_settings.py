"""Settings come from the environment; a bad value stops start-up naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import WORKER_OWN_SETTINGS

# Every test starts Django in a process of its own (manage.py check, or an import).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = {
    "SECRET_KEY": "k" * 20 + "-production-only-7f3a9c2e41d8b6a5c0e9f2d4b7a1c3e5",
    "DATABASE_URL": "postgres://bench:s3cret-pass@db.internal:5432/benchsite",
    "REDIS_URL": "redis://cache.internal:6379/0",
    "ALLOWED_HOSTS": "bench.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://bench.example.com",
    # A Fernet key (32 url-safe base64 bytes): encrypts the organizations' provider keys.
    "CREDENTIALS_ENCRYPTION_KEY": "ZmRzYWZkc2FmZHNhZmRzYWZkc2FmZHNhZmRzYWZkc2E=",
}


def _django(env: dict, *args: str) -> subprocess.CompletedProcess:
    unset = {"DEBUG", *PRODUCTION, *WORKER_OWN_SETTINGS}
    clean = {k: v for k, v in os.environ.items() if k not in unset}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=clean | env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_it_passes_the_deployment_checklist_with_production_variables():
    result = _django(PRODUCTION, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DATABASE_URL", "mysql-ish://bench:s3cret-pass@db/x"),
        ("DATABASE_URL", "not a url at all"),
        ("REDIS_URL", "http://cache.internal:6379"),
        ("REDIS_URL", "redis://cache.internal:port/0"),
        ("DEBUG", "maybe"),
        ("ALLOWED_HOSTS", "a.example.com,,b.example.com"),
        ("SECURE_HSTS_SECONDS", "a year"),
        ("LOG_LEVEL", "chatty"),
        ("BENCHSITE_PROVIDER", "aws"),
        ("BENCHSITE_MAX_GRID_TRIALS", "0"),
    ],
)
def test_it_stops_on_a_malformed_value_naming_the_variable(variable, value):
    result = _django(PRODUCTION | {variable: value}, "check")
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert variable in result.stderr
    assert "s3cret-pass" not in result.stderr  # a URL's password is never echoed


@pytest.mark.parametrize(
    "variable",
    ["SECRET_KEY", "DATABASE_URL", "REDIS_URL", "ALLOWED_HOSTS", "CREDENTIALS_ENCRYPTION_KEY"],
)
def test_it_requires_production_variables_outside_debug(variable):
    env = {k: v for k, v in PRODUCTION.items() if k != variable}
    result = _django(env, "check")
    assert result.returncode != 0
    assert variable in result.stderr


def test_it_reads_a_choice_in_any_case_as_the_settings_spell_it():
    code = "from django.conf import settings as s; print(s.BENCHSITE_PROVIDER, s.LOGGING)"
    env = PRODUCTION | {"BENCHSITE_PROVIDER": "Local", "LOG_LEVEL": "warning"}
    result = _django(env, "shell", "-c", code)
    assert result.returncode == 0, result.stderr
    assert "\nlocal {" in result.stdout and "'level': 'WARNING'" in result.stdout


def test_it_runs_on_embedded_defaults_in_debug():
    result = _django({"DEBUG": "true"}, "check")
    assert result.returncode == 0, result.stderr


def test_it_keeps_the_channel_layer_under_the_prefix_it_is_given():
    # Deployments (or test runs) sharing one Redis stay apart: a layer's flush() deletes
    # every key under its prefix.
    code = "from django.conf import settings as s; print(s.CHANNEL_LAYERS['default']['CONFIG'])"
    given = _django(PRODUCTION | {"CHANNEL_LAYER_PREFIX": "bench-blue"}, "shell", "-c", code)
    assert given.returncode == 0, given.stderr
    assert "'prefix': 'bench-blue'" in given.stdout
    default = _django(PRODUCTION, "shell", "-c", code)
    assert "'prefix': 'asgi'" in default.stdout
