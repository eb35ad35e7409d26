"""``benchsite-agent serve-sim`` and ``engine-up``: one engine in the foreground.

``serve-sim`` runs the vLLM simulator; ``engine-up`` starts an engine (real vLLM or the
simulator) from a JSON description, prints its start-up phases as they happen and serves
until Ctrl-C (exit 0), or prints the failure class and evidence (exit 3).
"""

from __future__ import annotations

import argparse

from rich.console import Console

from agents.cli.usage import (
    EXIT_ENGINE_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    UsageError,
    print_error,
    read_json_object,
)


def run_serve_sim(args: argparse.Namespace) -> int:
    from agents.engines.sim import command
    from agents.protocol import ServeGridError, serve_args

    errors = Console(stderr=True)
    try:
        flags = serve_args(read_json_object("--config", args.config)) if args.config else []
    except UsageError as exc:
        print_error(errors, exc)
        return EXIT_USAGE
    except ServeGridError as exc:
        print_error(errors, f"--config: {exc}")
        return EXIT_USAGE
    argv = [
        args.model_spec,
        "--gpu",
        args.gpu,
        "--host",
        args.host,
        "--port",
        str(args.port),
        "--speed",
        repr(args.speed),
        "--seed",
        str(args.seed),
        *flags,
    ]
    if args.served_model_name:
        argv += ["--served-model-name", args.served_model_name]
    if args.startup_speed:
        argv += ["--startup-speed", repr(args.startup_speed)]
    return command.main(argv)


def run_engine_up(args: argparse.Namespace) -> int:
    import threading

    from agents.engines.base import EngineFailed
    from agents.engines.launch import EngineConfigError, engine_from_config
    from agents.engines.process import Watchdog

    console = Console()
    errors = Console(stderr=True)
    try:
        data = read_json_object("--config", args.config)
        engine = engine_from_config(data, workdir=args.workdir, engine=args.engine)
    except (UsageError, EngineConfigError) as exc:
        print_error(errors, exc)
        return EXIT_USAGE
    console.print(f"starting {engine.name}: {' '.join(engine.argv)}", highlight=False)
    console.print(f"log: {engine.log_path}", highlight=False)

    def show(phase) -> None:
        detail = " ".join(f"{k}={v}" for k, v in phase.detail.items())
        console.print(f"  {phase.at:8.2f}s  {phase.name:<20} {detail}", highlight=False)

    try:
        report = engine.start(on_phase=show)
    except EngineFailed as exc:
        errors.print(f"[red]failed:[/] {exc}", highlight=False, soft_wrap=True)
        for line in exc.evidence:
            errors.print(f"  | {line}", highlight=False, soft_wrap=True, markup=False)
        return EXIT_ENGINE_FAILED
    except KeyboardInterrupt:
        engine.stop()
        return EXIT_INTERRUPTED
    label = " (SIMULATED)" if report.simulated else ""
    down = threading.Event()

    def incident(event) -> None:
        state = "restarted" if event.restarted else "down"
        errors.print(f"[red]engine died[/] ({event.failure}); {state}; {event.lost}")
        if not event.restarted:
            down.set()

    try:
        # Said inside the try: a Ctrl-C right after the line is read still stops cleanly.
        console.print(f"serving{label} at {report.base_url}; unknown phases: {report.unknown}")
        with Watchdog(engine, restarts=args.restarts, on_incident=incident):
            while not down.wait(0.5):
                pass
        return EXIT_ENGINE_FAILED
    except KeyboardInterrupt:
        console.print("stopping…")
        return 0
    finally:
        engine.stop()
