"""The agent's image, built from docker/agent.Dockerfile on the vLLM image (CI's stand-in,
docker/standin): every module of ``agents`` and everything any of them imports, inside
functions too, imports in it; ``benchsite-agent --help`` and ``predict`` run in it; and a
simulated job from the site — the demo's run, its local provider told to start the image's
own entrypoint — streams its results back."""

from __future__ import annotations

import json
import shlex
import sys

import pytest

from agents.engines.process import free_port
from tests.demo_process import manage, migrated_demo_env

from .conftest import AGENT_IMAGE, ROOT

pytestmark = pytest.mark.timeout(600)
HERE = ROOT / "tests" / "images"
# The environment a pod gives the agent is the image's own: nothing of this process's.
NO_ENV: dict[str, str] = {}
RUN_STATE = """
import json
from runs.models import Run
run = Run.objects.get()
print(json.dumps([run.state, [trial.outcome for trial in run.trials.all()]]))
"""


@pytest.fixture(scope="module")
def agent(container):
    return container(AGENT_IMAGE)


def test_every_module_of_the_agent_and_what_it_imports_imports_in_the_image(agent):
    walk = agent.run("python3", "/walk/import_walk.py", env=NO_ENV, mounts=[f"{HERE}:/walk:ro"])
    assert walk.returncode == 0, walk.stdout[-4000:] + walk.stderr[-2000:]
    # The installed wheel was walked, not a copy of the checkout.
    assert "site-packages/agents" in walk.stdout, walk.stdout


def test_it_runs_on_the_python_of_vllms_image(agent):
    # vLLM's image serves on CPython 3.12; the agent installed in it must run there, not on
    # the 3.11 of the site's image.
    found = agent.run(
        "python3",
        "-c",
        "import sys, agents; print(sys.version_info[:2], agents.__file__)",
        env=NO_ENV,
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.startswith("(3, 12)") and "/opt/venv/" in found.stdout, found.stdout


def test_its_command_line_answers_and_predicts(agent, tmp_path):
    shown = agent.run("benchsite-agent", "--help", env=NO_ENV)
    assert shown.returncode == 0, shown.stderr
    assert "predict" in shown.stdout and "run" in shown.stdout
    predicted = agent.run(
        "benchsite-agent", "predict", "--model-spec", "llama-3.1-8b", "--gpu", "H100",
        "--concurrency", "1,4", "--num-prompts", "8", "--input-len", "128",
        "--output-len", "32", "--json", "/out/predict.json",
        env=NO_ENV, mounts=[f"{tmp_path}:/out"],
    )  # fmt: skip  # flag, value
    assert predicted.returncode == 0, predicted.stdout[-2000:] + predicted.stderr[-2000:]
    levels = json.loads((tmp_path / "predict.json").read_text())["levels"]
    assert [level["completed"] for level in levels] == [8, 8]


@pytest.mark.timeout(900)
def test_a_simulated_job_from_the_site_streams_back_from_the_image(agent, tmp_path):
    env = migrated_demo_env(tmp_path, columns=120)
    command = [sys.executable, str(HERE / "agent_in_image.py"), agent.name]
    env["BENCHSITE_LOCAL_AGENT_COMMAND"] = shlex.join(command)
    demo = manage("demo_run", "--exit", "--port", str(free_port()), env=env, timeout=840)
    out = demo.stdout
    assert demo.returncode == 0, out[-3000:] + demo.stderr[-3000:]
    # Its agent started only through agent_in_image.py, which runs the container or nothing.
    assert "Answer (simulated H100" in out, out[-3000:]
    stored = manage("shell", "-c", RUN_STATE, env=env)
    assert stored.returncode == 0, stored.stderr
    state, outcomes = json.loads(stored.stdout.strip().splitlines()[-1])
    assert state == "succeeded" and outcomes and set(outcomes) == {"succeeded"}, outcomes
