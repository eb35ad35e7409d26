"""Secrets may come from the file ``<NAME>_FILE`` names (Docker and Kubernetes secrets)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from benchsite.env import env_database, env_fernet_keys, env_str

ROOT = Path(__file__).resolve().parents[2]
FERNET = "ZmRzYWZkc2FmZHNhZmRzYWZkc2FmZHNhZmRzYWZkc2E="
PRODUCTION = {
    "SECRET_KEY": "k" * 20 + "-production-only-7f3a9c2e41d8b6a5c0e9f2d4b7a1c3e5",
    "DATABASE_URL": "postgres://bench:s3cret-pass@db.internal:5432/benchsite",
    "REDIS_URL": "redis://cache.internal:6379/0",
    "ALLOWED_HOSTS": "bench.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://bench.example.com",
    "CREDENTIALS_ENCRYPTION_KEY": FERNET,
    "BENCHSITE_RUNPOD_PRICE_KEY": "rpa_price-key-s3cret",
}
SECRETS = [
    "SECRET_KEY",
    "DATABASE_URL",
    "REDIS_URL",
    "CREDENTIALS_ENCRYPTION_KEY",
    "BENCHSITE_RUNPOD_PRICE_KEY",
]


def _django(env: dict, *args: str) -> subprocess.CompletedProcess:
    names = {"DEBUG", *PRODUCTION, *(f"{name}_FILE" for name in PRODUCTION)}
    clean = {k: v for k, v in os.environ.items() if k not in names}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=clean | env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_it_reads_a_secret_from_its_file_dropping_the_trailing_newline(tmp_path, monkeypatch):
    secret = tmp_path / "secret_key"
    secret.write_text("from-a-file\n")
    monkeypatch.delenv("SECRET_KEY", raising=False)
    monkeypatch.setenv("SECRET_KEY_FILE", str(secret))
    assert env_str("SECRET_KEY", required=True, secret=True) == "from-a-file"


def test_it_ignores_name_file_for_a_variable_that_is_not_a_secret(tmp_path, monkeypatch):
    (tmp_path / "hosts").write_text("evil.example.com")
    monkeypatch.delenv("LOG_LEVEL", raising=False)
    monkeypatch.setenv("LOG_LEVEL_FILE", str(tmp_path / "hosts"))
    assert env_str("LOG_LEVEL", "INFO") == "INFO"


def test_it_refuses_a_secret_set_both_ways(tmp_path, monkeypatch):
    (tmp_path / "key").write_text("in-the-file")
    monkeypatch.setenv("SECRET_KEY", "in-the-variable")
    monkeypatch.setenv("SECRET_KEY_FILE", str(tmp_path / "key"))
    with pytest.raises(ImproperlyConfigured, match="SECRET_KEY or SECRET_KEY_FILE, not both"):
        env_str("SECRET_KEY", required=True, secret=True)


def test_it_names_the_variable_of_an_unreadable_file(tmp_path, monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("DATABASE_URL_FILE", str(tmp_path / "missing"))
    with pytest.raises(ImproperlyConfigured, match=r"DATABASE_URL_FILE: cannot read .*missing"):
        env_database("DATABASE_URL", None, required=True)


def test_it_treats_an_empty_file_as_unset(tmp_path, monkeypatch):
    (tmp_path / "empty").write_text("\n")
    monkeypatch.delenv("SECRET_KEY", raising=False)
    monkeypatch.setenv("SECRET_KEY_FILE", str(tmp_path / "empty"))
    with pytest.raises(ImproperlyConfigured, match="SECRET_KEY must be set"):
        env_str("SECRET_KEY", required=True, secret=True)


def test_it_never_echoes_a_malformed_secret_from_a_file(tmp_path, monkeypatch):
    (tmp_path / "key").write_text("not-a-fernet-key-s3cret\n")
    monkeypatch.delenv("CREDENTIALS_ENCRYPTION_KEY", raising=False)
    monkeypatch.setenv("CREDENTIALS_ENCRYPTION_KEY_FILE", str(tmp_path / "key"))
    with pytest.raises(ImproperlyConfigured) as caught:
        env_fernet_keys("CREDENTIALS_ENCRYPTION_KEY", derive_from=None)
    assert "CREDENTIALS_ENCRYPTION_KEY" in str(caught.value)
    assert "s3cret" not in str(caught.value)


@pytest.mark.slow
def test_it_starts_in_production_with_every_secret_from_a_file(tmp_path):
    env = {k: v for k, v in PRODUCTION.items() if k not in SECRETS}
    for name in SECRETS:
        path = tmp_path / name.lower()
        path.write_text(PRODUCTION[name] + "\n")
        env[f"{name}_FILE"] = str(path)
    code = (
        "from django.conf import settings as s; "
        "print(s.SECRET_KEY == {!r}, s.DATABASES['default']['PASSWORD'], s.REDIS_URL, "
        "s.CREDENTIALS_ENCRYPTION_KEY == {!r}, s.BENCHSITE_RUNPOD_PRICE_KEY)"
    ).format(PRODUCTION["SECRET_KEY"], FERNET)
    result = _django(env, "shell", "-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1].split() == [
        "True",
        "s3cret-pass",
        PRODUCTION["REDIS_URL"],
        "True",
        PRODUCTION["BENCHSITE_RUNPOD_PRICE_KEY"],
    ]
    deploy = _django(env, "check", "--deploy", "--fail-level", "WARNING")
    assert deploy.returncode == 0, deploy.stderr


@pytest.mark.slow
def test_it_stops_start_up_on_a_secret_set_both_ways_without_echoing_it(tmp_path):
    (tmp_path / "database_url").write_text(PRODUCTION["DATABASE_URL"])
    env = PRODUCTION | {"DATABASE_URL_FILE": str(tmp_path / "database_url")}
    result = _django(env, "check")
    assert result.returncode != 0
    assert "DATABASE_URL or DATABASE_URL_FILE, not both" in result.stderr
    assert "s3cret-pass" not in result.stderr
