"""Running the demo: the site served by Daphne in a child process, the run followed to its
end on one progress line, and everything the demo started stopped again.

Guarantees: ``stop_demo_runs`` and ``stop_site`` are bounded (seconds, not the run's
length), so a demo asked to stop exits soon whatever was still running; every run of the
demo's database whose pod is unreleased ends cancelled with its pod terminated.
"""

from __future__ import annotations

import copy
import logging
import logging.config
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

from celery.signals import setup_logging
from django.conf import settings
from django.core.management.base import CommandError
from django.urls import reverse
from rich.console import Console
from rich.live import Live
from rich.text import Text

from runs.demo.vllm_cpu import VllmSetup
from runs.experiment_spec import experiment_trial_plan
from runs.models import Experiment, Run
from runs.models.runs import TERMINAL_RUN_STATES, RunState
from runs.providers.base import run_id_of_pod
from runs.providers.local import LocalProvider
from runs.providers.registry import local_provider
from runs.services.provisioning import run_release_pod
from runs.services.run_lifecycle import run_fail


def log_to_file(path: Path) -> None:
    """Every log record of this process goes to ``path`` (appended), none to the terminal,
    so that the progress line and the tables stay whole: each handler of the site's logging
    settings writes to ``path`` instead, Django's own terminal handler is dropped, and the
    settings say so too, for whatever sets up logging again later (a Celery worker's Django
    fixup runs ``django.setup()``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    config = copy.deepcopy(settings.LOGGING)
    config["handlers"] = {
        name: {
            "class": "logging.FileHandler",
            "filename": str(path),
            "encoding": "utf-8",
            **({"formatter": handler["formatter"]} if "formatter" in handler else {}),
        }
        for name, handler in config.get("handlers", {}).items()
    }
    # Django's default logging prints its own logger's records in DEBUG: they go to the root.
    config.setdefault("loggers", {})["django"] = {"handlers": [], "propagate": True}
    settings.LOGGING = config
    logging.config.dictConfig(config)
    # A Celery worker started later sets up its own logging to the terminal unless someone
    # handles this signal: the demo's embedded worker logs here too.
    setup_logging.connect(_keep_logging, weak=False)


def _keep_logging(**kwargs) -> None:
    """Celery's ``setup_logging`` handled: the logging set up above stays as it is."""


def serve_site(
    port: int, *, sim_speed: int, log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """Daphne serving the site on ``127.0.0.1:port``, its output appended to ``log``, with
    ``env`` added to its environment. Runs started there (pages, API, CLI) freeze the
    simulator's speed at their start: the demo's own."""
    env = {
        **os.environ,
        **(env or {}),
        "BENCHSITE_PUBLIC_URL": f"http://127.0.0.1:{port}",
        "BENCHSITE_SIM_SPEED": str(sim_speed),
    }
    with log.open("ab") as log_file:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(  # noqa: S603 - our own server, an argv list
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "benchsite.asgi:application",
            ],
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            # Out of the terminal's process group: Ctrl-C reaches the demo alone, which stops
            # the runs while Daphne still takes what their agents deliver, then Daphne.
            process_group=0,
        )


def wait_for_port(host: str, port: int, process: subprocess.Popen, timeout: float) -> None:
    """Returns once ``host:port`` accepts a connection; ``CommandError`` when ``process``
    (the server) exits first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise CommandError(
                "the site's server exited at start-up; its output is in the demo's log"
            )
        try:
            with socket.create_connection((host, port), 1):
                return
        except OSError:
            time.sleep(0.1)
    raise CommandError(f"the site did not answer on {host}:{port} within {timeout:.0f} s")


def print_started(
    console: Console,
    run: Run,
    experiment: Experiment,
    base: str,
    vllm: VllmSetup | None,
    *,
    log: Path,
) -> None:
    """Where to watch ``run``: its page, its API answer, its agent's log and the demo's."""
    org = run.organization
    trials = len(experiment_trial_plan(experiment))
    console.print(
        f"\n[bold]Run {run.id}[/] of “{experiment.name}”: "
        f"{trials} configs × concurrency {experiment.workload['concurrency']}.\n"
        f"  Run page:   {base}{reverse('run-detail', args=[org.slug, run.id])}"
        " (sign in as above)\n"
        f"  Live (API): {base}/api/v1/orgs/{org.slug}/runs/{run.id}/\n"
        f"  Agent log:  {local_provider().state_dir / run.pod_name / 'agent.log'}\n"
        f"  Site log:   {log} (the site, its worker and this command)\n",
        soft_wrap=True,  # a URL or path broken across lines cannot be copied
    )
    if vllm is not None:
        console.print(
            "  Each configuration is a real `vllm serve` start on this CPU (about a "
            "minute on 2 cores) before its load levels.\n"
        )


def print_next_steps(console: Console, run: Run, base: str) -> None:
    """What to try next on the demo's site: promoting the answer (the demo organization is a
    sandbox, where a simulated promotion is allowed and labelled) and the notifications it
    sent to the demo's receiver and mail sink."""
    org = run.organization
    propose = reverse("promotion-propose-run", args=[org.slug, run.id])
    console.print(
        "\nTry next (signed in):\n"
        f"  Promote it:     {base}{propose} — the demo organization is a sandbox, so a "
        "simulated trial may be promoted, labelled simulated; an owner other than the "
        "proposer approves it, then `benchsite runs start … --baseline promoted` gates "
        "against it.\n"
        f"  Notifications:  {base}{reverse('org-notifications', args=[org.slug])} — what the "
        "demo's webhook receiver and mail sink were sent.",
        soft_wrap=True,  # a URL broken across lines cannot be copied
    )


def progress_line(
    *, state: str, trials_done: int, trials_total: int, measured: int, levels_total: int
) -> Text:
    """The demo's one progress line: never wrapped (a wrapped line is redrawn as two and
    leaves its first half behind on every refresh), cut with an ellipsis where the terminal
    is too narrow for it."""
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(state, style="bold")
    line.append(
        f" · trials {trials_done}/{trials_total} · levels measured {measured} "
        f"({levels_total} fixed + capacity probes)"
    )
    return line


def follow_run(run: Run, experiment: Experiment, console: Console) -> Run:
    """``run`` once it has ended and its pod is released, its progress shown meanwhile."""
    trials_total = len(experiment_trial_plan(experiment))
    levels_total = trials_total * len(experiment.workload["concurrency"])
    with Live(console=console, refresh_per_second=4, transient=True) as live:
        while True:
            run.refresh_from_db()
            live.update(
                progress_line(
                    state=run.state,
                    trials_done=run.trials.exclude(outcome__in=["pending", "running"]).count(),
                    trials_total=trials_total,
                    measured=run.trials.filter(measurements__isnull=False).count(),
                    levels_total=levels_total,
                )
            )
            if run.state in TERMINAL_RUN_STATES and run.pod_terminated_at is not None:
                return run
            time.sleep(0.5)


def stop_demo_runs(stderr: TextIO) -> None:
    """Ends what the demo's worker started and is still up: every run of this database
    with an unreleased pod is cancelled (one that has ended keeps its end) and its pod
    terminated, the agent's engines with it; so is a pod of one of its runs that was
    rented but not yet recorded. A run that cannot be stopped is reported on ``stderr``."""
    reason = "The demo was stopped (manage.py demo_run ended) before the run finished."
    unreleased = Run.objects.filter(pod_terminated_at__isnull=True).exclude(pod_id="")
    for run_id in unreleased.values_list("id", flat=True):
        try:
            run_fail(run_id=run_id, reason=reason, state=RunState.CANCELLED)
            run_release_pod(run_id=run_id)
        except Exception as exc:  # the next one is still stopped
            stderr.write(f"could not stop run {run_id}: {exc}")
    ours = {str(run_id) for run_id in Run.objects.values_list("id", flat=True)}
    # No delivery grace: the site goes away with the demo, so an agent that is still up
    # after it was asked to stop has nobody left to deliver to.
    provider = LocalProvider(local_provider().state_dir, delivery_grace=0)
    for pod in provider.list_bench_pods():
        if run_id_of_pod(pod.name) in ours:
            provider.terminate(pod.name)


def stop_site(server: subprocess.Popen) -> None:
    """Daphne stopped: asked to, then killed after 10 s."""
    server.terminate()
    try:
        server.wait(10)
    except subprocess.TimeoutExpired:
        server.kill()
