"""manage.py demo_run — the main job end to end on embedded defaults (what ``make demo`` runs).

Serves the site (Daphne, in a child process), starts a run of the demo experiment through
the real path — ``run_start`` (budget check, run row, audit), the provisioning task (run
in-process: no broker needed), the local provider (the agent as a child process, the
simulator as its engine), the agent streaming to the site's socket — and shows progress,
then the final table: per configuration and load level, TTFT / ITL / TPOT p50 and p99,
output tokens/s and the cost per 1M output tokens, and the winner under the SLOs.

The demo experiment is the question the product answers: an 8B Llama-class model on an H100,
``max_num_batched_tokens`` ∈ {2048, 8192, 16384} × concurrency {1, 8, 64, 192}. Everything
it shows is simulated and says so. The site keeps serving afterwards until Ctrl-C
(``--exit`` ends the command with the run).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from decimal import Decimal

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from rich.console import Console
from rich.live import Live
from rich.table import Table

from benchsite.celery import app as celery_app
from runs.actors import Actor
from runs.model_presets import MODEL_PRESETS
from runs.models import Experiment, GpuType, ModelSpec, Organization, Run
from runs.models.runs import TERMINAL_RUN_STATES
from runs.providers.registry import local_provider
from runs.selectors import trial_costs
from runs.services.catalogue import model_spec_create
from runs.services.experiments import experiment_create
from runs.services.reconcile import runs_reconcile
from runs.services.run_start import run_start

DEMO_EXPERIMENT = "Llama 8B on H100: max_num_batched_tokens (simulated)"
DEMO_GRID = {"max_num_batched_tokens": [2048, 8192, 16384]}
DEMO_WORKLOAD = {
    "dataset": {"kind": "random", "input_len": 1024, "output_len": 128},
    "concurrency": [1, 8, 64, 192],
    "requests_per_level": 192,
    "warmup_requests": 8,
}
DEMO_SLOS = {"ttft_ms": 500, "tpot_ms": 50}
RECONCILE_SECONDS = 5.0


def _wait_for_port(host: str, port: int, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise CommandError("the site's server exited at start-up; see its output above")
        try:
            with socket.create_connection((host, port), 1):
                return
        except OSError:
            time.sleep(0.1)
    raise CommandError(f"the site did not answer on {host}:{port} within {timeout:.0f} s")


def _ms(value) -> str:
    """Milliseconds, short enough for an 80-column terminal."""
    if value is None:
        return "–"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def _pair(result: dict, metric: str) -> str:
    return f"{_ms(result.get(f'median_{metric}_ms'))}/{_ms(result.get(f'p99_{metric}_ms'))}"


class Command(BaseCommand):
    help = "Run the demo experiment end to end (site, task, local agent, simulator)."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--exit", action="store_true", help="stop once the run has ended")
        parser.add_argument(
            "--sim-speed",
            type=float,
            default=8.0,
            help="how much faster than the modelled H100 the simulator runs (results are "
            "reported in the H100's time whatever this is)",
        )

    def handle(self, *args, port, exit, sim_speed, **options):
        console = Console()
        base = f"http://127.0.0.1:{port}"
        settings.BENCHSITE_PUBLIC_URL = base
        settings.BENCHSITE_SIM_SPEED = sim_speed
        settings.BENCHSITE_PROVIDER = "local"
        # Tasks run where they are enqueued: the demo needs no broker and no worker process.
        celery_app.conf.task_always_eager = True
        call_command("seed_demo", stdout=self.stdout)
        org = Organization.objects.get(slug="demo")
        experiment = self._experiment(org)
        server = self._serve(port)
        stop = threading.Event()
        try:
            _wait_for_port("127.0.0.1", port, server, 60)
            run = run_start(
                actor=Actor.system("manage.py demo_run"),
                experiment=experiment,
                reason="make demo",
            )
            console.print(
                f"\n[bold]Run {run.id}[/] of “{experiment.name}”: "
                f"{len(DEMO_GRID['max_num_batched_tokens'])} configs × concurrency "
                f"{DEMO_WORKLOAD['concurrency']}.\n"
                f"  Live (API): {base}/api/v1/orgs/demo/runs/{run.id}/\n"
                f"  Agent log:  {local_provider().state_dir / run.pod_name / 'agent.log'}\n"
            )
            threading.Thread(target=self._reconcile_loop, args=(stop,), daemon=True).start()
            run = self._follow(run, console)
            self._final_table(run, console)
            if not exit:
                console.print(f"\nThe site keeps serving at {base}/ — Ctrl-C to stop.")
                server.wait()
        except KeyboardInterrupt:
            pass
        finally:
            stop.set()
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()

    def _experiment(self, org: Organization) -> Experiment:
        existing = Experiment.objects.filter(organization=org, name=DEMO_EXPERIMENT).first()
        if existing is not None:
            return existing
        preset = MODEL_PRESETS["llama-3.1-8b-instruct"]
        model = ModelSpec.objects.filter(organization=org, hf_repo=preset["hf_repo"]).first()
        actor = Actor.system("manage.py demo_run")
        model = model or model_spec_create(org=org, actor=actor, **preset)
        return experiment_create(
            org=org,
            actor=actor,
            name=DEMO_EXPERIMENT,
            model=model,
            gpu_type=GpuType.objects.get(id="NVIDIA H100 80GB HBM3"),
            gpu_count=1,
            engine="sim",
            serve_grid=DEMO_GRID,
            workload=DEMO_WORKLOAD,
            slos=DEMO_SLOS,
            budget_cap_usd=Decimal(20),
        )

    def _serve(self, port: int) -> subprocess.Popen:
        env = {**os.environ, "BENCHSITE_PUBLIC_URL": f"http://127.0.0.1:{port}"}
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
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def _reconcile_loop(self, stop: threading.Event) -> None:
        """The periodic safety net, as Celery beat would run it."""
        while not stop.wait(RECONCILE_SECONDS):
            try:
                runs_reconcile()
            except Exception as exc:  # the demo goes on; the next pass tries again
                self.stderr.write(f"reconcile: {exc}")

    def _follow(self, run: Run, console: Console) -> Run:
        trials_total = len(DEMO_GRID["max_num_batched_tokens"])
        levels_total = trials_total * len(DEMO_WORKLOAD["concurrency"])
        with Live(console=console, refresh_per_second=4, transient=True) as live:
            while True:
                run.refresh_from_db()
                measured = run.trials.filter(measurements__isnull=False).count()
                done = run.trials.exclude(outcome__in=["pending", "running"]).count()
                live.update(
                    f"state [bold]{run.state}[/] · trials {done}/{trials_total} · "
                    f"levels measured {measured}/{levels_total}"
                )
                if run.state in TERMINAL_RUN_STATES and run.pod_terminated_at is not None:
                    return run
                time.sleep(0.5)

    def _final_table(self, run: Run, console: Console) -> None:
        console.print(
            f"Run {run.state}" + (f": {run.failure_reason}" if run.failure_reason else "")
        )
        table = Table(
            title="SIMULATED — an H100 modelled by the simulator, not measured.\n"
            "batched = max_num_batched_tokens, c = concurrency, latencies p50/p99 in ms, "
            "$/1M = USD per 1M output tokens",
            title_justify="left",
        )
        for column in ("batched", "c", "TTFT ms", "ITL ms", "TPOT ms", "tok/s", "$/1M", "SLOs"):
            table.add_column(column, justify="right")
        best = []
        for trial in run.trials.order_by("index").prefetch_related("measurements"):
            config = trial.serve_config.get("max_num_batched_tokens", "default")
            cost = trial_costs(trial=trial)
            for m in sorted(trial.measurements.all(), key=lambda m: m.concurrency or 0):
                r = m.result
                slo = r.get("slo") or {}
                met = all(v["met"] for v in slo.values()) if slo else None
                per_level = cost.pod_usd_per_hr and r.get("output_throughput")
                level_cost = (
                    cost.pod_usd_per_hr / 3600 / Decimal(str(r["output_throughput"])) * 1_000_000
                    if per_level
                    else None
                )
                table.add_row(
                    str(config),
                    str(m.concurrency),
                    _pair(r, "ttft"),
                    _pair(r, "itl"),
                    _pair(r, "tpot"),
                    f"{r.get('output_throughput', 0):,.0f}",
                    "–" if level_cost is None else f"${level_cost:.3f}",
                    "–" if met is None else ("met" if met else "[red]missed[/]"),
                )
            if cost.usd_per_million_output_tokens is not None:
                best.append((cost.usd_per_million_output_tokens, config, cost.load))
        console.print(table)
        if best:
            price, config, load = min(best)
            console.print(
                f"[bold green]Winner under the SLOs[/] (TTFT p99 ≤ {DEMO_SLOS['ttft_ms']} ms, "
                f"TPOT p99 ≤ {DEMO_SLOS['tpot_ms']} ms): max_num_batched_tokens={config} at "
                f"{load}, ${price:.3f} per 1M output tokens (simulated H100, catalogue price)."
            )
        else:
            console.print("[red]No configuration met the SLOs at any load level.[/]")
