"""docs/ci.md's jobs, run verbatim against a live site (issue 35, point 7): every shell step
of its GitHub Actions job and its GitLab CI script, as a pipeline runs them on two pushes,
with the experiment the file describes already stored. Each step must succeed: validating
the experiment file on a push after the experiment exists is no error."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runs.models import Experiment, Run
from tests.site.conftest import H100, make_model
from tests.site.live_server import ROOT
from tests.site.test_celery_worker import SIM_EXPERIMENT

from .test_cli_runs import ON_SIM, ON_VLLM, promote, seed_run, site_and_worker, switch, weak_levels

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_redis, pytest.mark.slow]

CI_DOC = ROOT / "docs" / "ci.md"
# What a pipeline's platform fills in: GitHub's expressions and GitLab's predefined variables.
GITHUB_CONTEXT = {
    "github.repository": "acme/serving",
    "github.sha": "0123abc",
    "github.event.number": "42",
}
GITLAB_VARIABLES = {
    "CI_PROJECT_PATH": "acme/serving",
    "CI_COMMIT_SHORT_SHA": "4567def",
    "CI_MERGE_REQUEST_IID": "43",
}


def doc_jobs() -> tuple[dict, dict]:
    """The GitHub Actions workflow and the GitLab CI file of docs/ci.md, as parsed YAML."""
    blocks = re.findall(r"```yaml\n(.*?)```", CI_DOC.read_text(encoding="utf-8"), re.S)
    github, gitlab = (yaml.safe_load(block) for block in blocks)
    return github["jobs"]["benchmark"], gitlab["benchmark"]


def is_install(command: str) -> bool:
    """The step that installs the CLI: this checkout's, already on PATH, stands for it."""
    return command.startswith("pip install ") and "benchsite" in command


def github_expressions(command: str, token: str) -> str:
    def value(match: re.Match) -> str:
        name = match.group(1)
        return token if name == "secrets.BENCHSITE_TOKEN" else GITHUB_CONTEXT[name]

    return re.sub(r"\$\{\{\s*([\w.]+)\s*\}\}", value, command)


def run_step(command: str, *, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """One step's shell command, as the runner's bash runs it."""
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("BENCHSITE_")},
        # The checkout's CLI first on PATH: what `pip install "benchsite @ …"` gives a job.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        **env,
    }
    return subprocess.run(
        ["bash", "-e", "-c", command],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


def experiment_file(model_id) -> str:
    """``benchmarks/experiment.yaml`` of the docs' repository: the experiment the jobs run
    (``llama-8b-h100``), on the simulator so that it runs here."""
    fields = {"name": "llama-8b-h100", "model": str(model_id), "gpu_type": H100}
    return yaml.safe_dump(fields | SIM_EXPERIMENT | {"budget_cap_usd": 25})


def test_it_runs_the_ci_docs_jobs_verbatim_on_two_pushes(
    alice, mallory, broker_queue, pods_dir, tmp_path
):
    github, gitlab = doc_jobs()
    checkout = tmp_path / "checkout"
    (checkout / "benchmarks").mkdir(parents=True)
    model = make_model(alice.org)
    (checkout / "benchmarks" / "experiment.yaml").write_text(experiment_file(model.id))

    with site_and_worker(pods_dir, tmp_path / "worker.log") as url:
        # Once, by hand: the experiment is created from the file, and a trial of an earlier
        # run promoted (a simulator's trial cannot be: that history ran on vLLM).
        env = {"BENCHSITE_URL": url, "BENCHSITE_ORG": "acme", "BENCHSITE_TOKEN": alice.token}
        created = run_step(
            "benchsite experiments create --file benchmarks/experiment.yaml", env=env, cwd=checkout
        )
        assert created.returncode == 0, created.stderr
        experiment = Experiment.objects.get(name="llama-8b-h100")
        switch(experiment, ON_VLLM)
        experiment.refresh_from_db()
        history = seed_run(experiment, {json.dumps({"max_num_seqs": 8}): weak_levels()})
        promote(history.trials.get(), proposer=mallory, approver=alice)
        switch(experiment, ON_SIM)

        # Push 1, GitHub Actions: every `run` step of the job, in order.
        summary = tmp_path / "step_summary.md"
        github_env = {
            **{k: github_expressions(str(v), alice.token) for k, v in github["env"].items()},
            "BENCHSITE_URL": url,  # the docs' https://bench.example.com
            "GITHUB_STEP_SUMMARY": str(summary),
        }
        steps = [step for step in github["steps"] if "run" in step]
        assert [step.get("name") for step in steps] == [
            None,
            "Validate the experiment",
            "Benchmark and gate",
            "Summary",
        ]
        said = {}
        for step in steps:
            command = github_expressions(step["run"].strip(), alice.token)
            if is_install(command):
                continue
            done = run_step(command, env=github_env, cwd=checkout)
            assert done.returncode == 0, (step.get("name"), done.stdout, done.stderr)
            said[step["name"]] = done.stdout
        assert "valid — 2 trials × 2 levels" in said["Validate the experiment"]
        assert (
            "warning: An experiment named 'llama-8b-h100' exists" in said["Validate the experiment"]
        )
        assert summary.read_text().startswith("## Benchsite gate: ✅ within thresholds")
        run = Run.objects.exclude(pk=history.pk).get()
        assert run.reason == "acme/serving@0123abc (PR #42)"

        # Push 2, GitLab CI: its before_script (the install) and script, in order.
        gitlab_env = {
            **{k: str(v) for k, v in gitlab["variables"].items()},
            **GITLAB_VARIABLES,
            "BENCHSITE_URL": url,
            "BENCHSITE_TOKEN": alice.token,
        }
        for command in [*gitlab["before_script"], *gitlab["script"]]:
            if is_install(command):
                continue
            done = run_step(command.strip(), env=gitlab_env, cwd=checkout)
            assert done.returncode == 0, (command, done.stdout, done.stderr)
        assert Run.objects.filter(reason="acme/serving@4567def (43)", state="succeeded").exists()
        assert Experiment.objects.filter(name="llama-8b-h100").count() == 1
