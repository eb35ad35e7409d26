"""The images built from docker/*.Dockerfile, run: by ``make test-images`` (and CI's step of
the same), never by ``make test``.

``make test-images`` builds both images (scripts/images/build.sh) and names them in
``BENCHSITE_TEST_SITE_IMAGE`` and ``BENCHSITE_TEST_AGENT_IMAGE``. Without them this folder is
not collected at all; with them, an image that does not start or run fails, never skips.
Each test runs its commands in a buildah working container of the image (``buildah run``:
the image's user, working folder and environment, the host's network), removed afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BH = ROOT / "scripts" / "images" / "bh"
SITE_IMAGE = os.environ.get("BENCHSITE_TEST_SITE_IMAGE")
AGENT_IMAGE = os.environ.get("BENCHSITE_TEST_AGENT_IMAGE")

if not (SITE_IMAGE and AGENT_IMAGE):
    collect_ignore_glob = ["test_*.py"]


def bh(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``buildah ARGS`` on CI's image store, output captured as text."""
    return subprocess.run(
        [str(BH), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _env_args(env: dict[str, str]) -> list[str]:
    return [arg for key, value in env.items() for arg in ("--env", f"{key}={value}")]


class Container:
    """A buildah working container of one image: commands run in it as its image runs them."""

    def __init__(self, image: str):
        self.name = f"benchsite-test-{uuid.uuid4().hex[:10]}"
        made = bh("from", "--pull-never", "--name", self.name, image)
        assert made.returncode == 0, made.stderr

    def run_argv(self, argv: Sequence[str], *, env: dict[str, str], mounts=()) -> list[str]:
        volumes = [arg for mount in mounts for arg in ("--volume", mount)]
        return [str(BH), "run", *volumes, *_env_args(env), self.name, "--", *argv]

    def run(
        self, *argv: str, env: dict[str, str], mounts=(), timeout: float = 300
    ) -> subprocess.CompletedProcess:
        """``argv`` in the container, to its end; its output captured as text."""
        return subprocess.run(
            self.run_argv(argv, env=env, mounts=mounts),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self, *argv: str, env: dict[str, str], log: Path) -> subprocess.Popen:
        """``argv`` in the container in the background, its output going to ``log``; in a
        session of its own, so that stopping it stops what buildah started under it."""
        with log.open("ab") as out:
            return subprocess.Popen(
                self.run_argv(argv, env=env),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def remove(self) -> None:
        bh("rm", self.name)


def stop(process: subprocess.Popen) -> None:
    """Stops a ``Container.start`` process and everything under it: asks, then kills."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def container() -> Iterator[Callable[[str], Container]]:
    """Makes working containers; removes them when the module is done."""
    made: list[Container] = []

    def make(image: str) -> Container:
        made.append(Container(image))
        return made[-1]

    yield make
    for each in made:
        each.remove()
