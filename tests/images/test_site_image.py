"""The site's image, built from docker/site.Dockerfile, run as docker/compose.yaml runs it:
against CI's PostgreSQL and Redis, with the documented environment only (docker/.env.example),
as its non-root user. It migrates, makes an organization and a token with its own manage.py,
serves /healthz (its HEALTHCHECK says healthy) and an API call with that token, and its Celery
worker takes a task sent from the image."""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest
import yaml

from agents.engines.process import free_port

from .conftest import AGENT_IMAGE, ROOT, SITE_IMAGE, bh, stop

pytestmark = pytest.mark.timeout(600)
ENV_EXAMPLE = ROOT / "docker" / ".env.example"
COMPOSE = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())["services"]
TASK = "runs.tasks.audit_chains_verify"
assert AGENT_IMAGE  # collected only with both images named (conftest)


def documented_names() -> set[str]:
    lines = ENV_EXAMPLE.read_text().splitlines()
    return {line.split("=", 1)[0] for line in lines if re.match(r"^[A-Z_]+=", line)}


@pytest.fixture(scope="module")
def database_url():
    """A database of its own on CI's PostgreSQL, dropped afterwards."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        pytest.fail(f"the site image runs against PostgreSQL: DATABASE_URL is {url!r}")
    parts = urlsplit(url)
    name = f"{parts.path.lstrip('/') or 'benchsite'}_site_image"
    server = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    yield urlunsplit(parts._replace(path=f"/{name}"))
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def site(container, database_url):
    port = free_port()
    env = {
        "SECRET_KEY": secrets.token_urlsafe(50),
        "DATABASE_URL": database_url,
        "REDIS_URL": os.environ["REDIS_URL"],
        "ALLOWED_HOSTS": "127.0.0.1",
        "CREDENTIALS_ENCRYPTION_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
        # As behind the TLS proxy docs/operating.md puts in front of web.
        "SECURE_PROXY_SSL_HEADER": "true",
        "BENCHSITE_PUBLIC_URL": f"http://127.0.0.1:{port}",
        # A queue of this test's own on the shared Redis.
        "CELERY_TASK_DEFAULT_QUEUE": f"images-{uuid.uuid4().hex[:8]}",
        "WORKER_CONCURRENCY": "1",
    }
    return container(SITE_IMAGE), env, port


def compose_command(service: str, env: dict[str, str]) -> list[str]:
    """docker/compose.yaml's command for ``service``, its ${NAME:-default} filled from env."""

    def fill(match: re.Match) -> str:
        return env.get(match[1], match[2])

    return [re.sub(r"\$\{(\w+):-([^}]*)\}", fill, word) for word in COMPOSE[service]["command"]]


def image_config(key: str) -> list[str]:
    """``key`` of the image's configuration, Docker's format (OCI's has no HEALTHCHECK)."""
    shown = bh("inspect", "--type", "image", SITE_IMAGE)
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)["Docker"]["config"][key]


def test_it_passes_the_documented_environment_only(site):
    _, env, _ = site
    assert set(env) <= documented_names(), set(env) - documented_names()


def test_it_runs_as_its_non_root_user(site):
    box, env, _ = site
    who = box.run("id", "-u", env=env)
    assert who.returncode == 0, who.stderr
    assert who.stdout.strip() == "10001"


def test_it_migrates_serves_an_api_call_and_its_worker_takes_a_task(site, tmp_path):
    box, env, port = site
    migrate = box.run(*compose_command("migrate", env), env=env, timeout=400)
    assert migrate.returncode == 0, migrate.stdout[-2000:] + migrate.stderr[-2000:]
    org = box.run("python", "manage.py", "createorg", "ci", "--owner", "ci@example.com", env=env)
    assert org.returncode == 0, org.stderr
    made = box.run("python", "manage.py", "createtoken", "ci", "ci@example.com", env=env)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()

    # The image's own command (compose's web runs the same), on a free port of this machine
    # rather than 8000: PORT, the image's own variable that its health check reads, says so.
    command = image_config("Cmd")
    command[command.index("--port") + 1] = str(port)
    assert "PORT=8000" in image_config("Env")
    web = box.start(*command, env=env | {"PORT": str(port)}, log=tmp_path / "web.log")
    worker = box.start(*compose_command("worker", env), env=env, log=tmp_path / "worker.log")
    try:
        probe = image_config("Healthcheck")["Test"][1:]  # ["CMD", argv...]
        deadline = time.monotonic() + 120
        while (healthy := box.run(*probe, env=env | {"PORT": str(port)})).returncode != 0:
            assert web.poll() is None, (tmp_path / "web.log").read_text()[-3000:]
            assert time.monotonic() < deadline, healthy.stderr
            time.sleep(2)

        members = httpx.get(
            f"http://127.0.0.1:{port}/api/v1/orgs/ci/members/",
            headers={"Authorization": f"Bearer {token}", "X-Forwarded-Proto": "https"},
            timeout=30,
        )
        assert members.status_code == 200, members.text[:500]
        assert "ci@example.com" in members.text

        send = f"from benchsite.celery import app; print(app.send_task({TASK!r}).id)"
        sent = box.run("python", "-c", send, env=env)
        assert sent.returncode == 0, sent.stderr
        task_id = sent.stdout.strip().splitlines()[-1]
        done = re.compile(rf"Task {re.escape(TASK)}\[{task_id}\] succeeded")
        deadline = time.monotonic() + 120
        while not done.search((tmp_path / "worker.log").read_text()):
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()[-3000:]
            time.sleep(1)
    finally:
        stop(web)
        stop(worker)
