"""docker/compose.yaml validates against the Compose specification and starts the site as
its settings require: every service healthy-checked, started in order, configured from .env.

The validator is Debian's ``docker-compose`` (``make test`` installs it as it installs
Chromium); it checks the file against the Compose specification's JSON schema it bundles,
with no Docker engine. Outside CI a machine without it skips that one test; with CI=true the
test fails instead.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.conf import settings

from benchsite.queues import notifications_queue
from tests.ops.test_secret_files import SECRETS

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
SITE_SERVICES = {"migrate", "web", "worker", "notifier", "beat"}
SECRET_FILES = [
    "secret_key",
    "database_url",
    "credentials_encryption_key",
    "runpod_price_key",
    "postgres_password",
]


def _compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def _env_example() -> dict[str, str]:
    values = {}
    for line in (DOCKER / ".env.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, equals, value = line.partition("=")
            assert equals, f"not NAME=VALUE: {line!r}"
            values[name.strip()] = value
    return values


@pytest.fixture
def compose_dir(tmp_path):
    """A copy of docker/ with .env made from .env.example and the secret files present,
    as an operator's checkout would have them (the real docker/.env is never read)."""
    copy = tmp_path / "docker"
    shutil.copytree(DOCKER, copy, ignore=shutil.ignore_patterns(".env", "secrets"))
    shutil.copy(copy / ".env.example", copy / ".env")
    (copy / "secrets").mkdir()
    for name in SECRET_FILES:
        (copy / "secrets" / name).write_text("placeholder\n")
    return copy


def _docker_compose() -> str:
    found = shutil.which("docker-compose")
    if found is None:
        if IN_CI:
            pytest.fail("docker-compose is not installed (make test installs it)")
        pytest.skip("docker-compose not installed (apt-get install docker-compose)")
    return found


@pytest.mark.parametrize(
    "files", [["compose.yaml"], ["compose.yaml", "compose.secrets.yaml"]], ids=["env", "secrets"]
)
@pytest.mark.slow
def test_it_validates_against_the_compose_specification(compose_dir, files):
    args = [_docker_compose()]
    for name in files:
        args += ["-f", name]
    result = subprocess.run(
        [*args, "config"], cwd=compose_dir, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)
    assert set(resolved["services"]) == {"postgres", "redis", *SITE_SERVICES}
    # .env fills both the ${…} in compose.yaml and the site containers' environment.
    assert resolved["services"]["web"]["environment"]["ALLOWED_HOSTS"] == "bench.example.com"
    assert resolved["services"]["worker"]["command"][-1] == "2"
    if "compose.secrets.yaml" in files:
        worker = resolved["services"]["worker"]
        assert worker["environment"]["SECRET_KEY_FILE"] == "/run/secrets/secret_key"
        assert {s["source"] for s in worker["secrets"]} >= {"secret_key", "database_url"}


def test_it_refuses_a_compose_file_that_breaks_the_specification(compose_dir):
    # The validator above is not a rubber stamp: a misspelt key fails it.
    broken = (compose_dir / "compose.yaml").read_text().replace("depends_on:", "depend_on:", 1)
    (compose_dir / "compose.yaml").write_text(broken)
    result = subprocess.run(
        [_docker_compose(), "-f", "compose.yaml", "config", "-q"],
        cwd=compose_dir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "depend_on" in result.stderr


def test_it_health_checks_every_service_and_starts_the_site_after_its_dependencies():
    services = _compose()["services"]
    for name, service in services.items():
        check = service.get("healthcheck", {})
        if name == "migrate":  # a one-off job: it finishes rather than stays healthy
            assert check == {"disable": True}
            continue
        assert check.get("test"), f"{name} has no health check"
    for name in SITE_SERVICES:
        depends = services[name]["depends_on"]
        assert depends["postgres"] == {"condition": "service_healthy"}
        assert depends["redis"] == {"condition": "service_healthy"}
        if name != "migrate":
            assert depends["migrate"] == {"condition": "service_completed_successfully"}
        assert services[name]["env_file"] == ".env"
        assert services[name]["build"]["dockerfile"] == "docker/site.Dockerfile"
    assert "media:/data/media" in services["web"]["volumes"]
    assert "media:/data/media" in services["worker"]["volumes"]  # datasets the web took in
    assert "postgres-data:/var/lib/postgresql/data" in services["postgres"]["volumes"]


def test_it_pins_the_database_images():
    for name in ("postgres", "redis"):
        image = _compose()["services"][name]["image"]
        assert re.fullmatch(r"[a-z]+:\d+(\.\d+)+(-\w+)?", image), image


def test_it_starts_the_site_roles_from_one_image():
    services = _compose()["services"]
    assert services["web"]["command"][0] == "daphne"
    assert services["worker"]["command"][:4] == ["celery", "-A", "benchsite", "worker"]
    assert services["notifier"]["command"][:4] == ["celery", "-A", "benchsite", "worker"]
    assert services["beat"]["command"][:4] == ["celery", "-A", "benchsite", "beat"]
    assert len({services[name]["image"] for name in SITE_SERVICES}) == 1


def test_it_gives_notifications_a_worker_of_their_own():
    def queues(service: str) -> str:
        command = _compose()["services"][service]["command"]
        return command[command.index("--queues") + 1]

    default = "${CELERY_TASK_DEFAULT_QUEUE:-celery}"
    assert queues("worker") == default
    assert queues("notifier") == notifications_queue(default)


def test_it_documents_every_variable_the_settings_read():
    read = set(settings.ENVIRONMENT_VARIABLES)
    assert {"SECRET_KEY", "DATABASE_URL", "BENCHSITE_RUNPOD_PRICE_KEY"} <= read
    documented = set(_env_example())
    assert read - documented == set(), "missing from docker/.env.example"
    compose_text = (DOCKER / "compose.yaml").read_text()
    for name in re.findall(r"\$\{(\w+)", compose_text):
        assert name in documented, f"compose.yaml uses ${{{name}}}, undocumented"


def test_it_keeps_secrets_in_the_example_as_placeholders():
    env = _env_example()
    for name in ("SECRET_KEY", "CREDENTIALS_ENCRYPTION_KEY", "POSTGRES_PASSWORD"):
        assert env[name] == "change-me"
    assert ":change-me@" in env["DATABASE_URL"]
    assert env["DEBUG"] == "false"


@pytest.mark.slow
def test_it_runs_the_site_with_the_example_once_the_placeholders_are_filled():
    env = _env_example()
    env = {k: v for k, v in env.items() if not k.startswith(("POSTGRES_", "COMPOSE_"))}
    env["SECRET_KEY"] = "filled-in-" + "x" * 50
    env["CREDENTIALS_ENCRYPTION_KEY"] = "ZmRzYWZkc2FmZHNhZmRzYWZkc2FmZHNhZmRzYWZkc2E="
    env["DATABASE_URL"] = env["DATABASE_URL"].replace("change-me", "a-real-password")
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in env and not k.endswith("_FILE") and k != "DEBUG"
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=clean | env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


def test_it_names_in_the_secrets_override_only_variables_the_settings_read_from_files():
    # test_secret_files.py proves each of SECRETS is read from <NAME>_FILE.
    override = yaml.safe_load((DOCKER / "compose.secrets.yaml").read_text())
    for name in override["services"]["web"]["environment"]:
        assert name.endswith("_FILE")
        assert name.removesuffix("_FILE") in SECRETS
    assert set(override["secrets"]) == set(SECRET_FILES)
