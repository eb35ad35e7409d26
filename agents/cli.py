"""``benchsite-agent``: the agent's command line.

``benchsite-agent bench`` load-tests any OpenAI-compatible server on its own. Exit codes:
0 done, 2 bad arguments or a server that cannot be reached before the first level (one clear
error line, nothing measured), 130 interrupted (the levels finished so far are written).

``run`` runs a whole job (every trial of a run) unattended and reports to the site or a
results folder; ``flush`` delivers what an earlier ``run`` could not. ``serve-sim`` runs the
vLLM simulator in the foreground; ``engine-up`` starts an engine (real
vLLM or the simulator) from a JSON description, prints its start-up phases as they happen and
serves until Ctrl-C (exit 0), or prints the failure class and evidence (exit 3).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from pathlib import Path

import pydantic
from rich.console import Console

from agents.loadgen import (
    BenchConfig,
    BenchFinished,
    DatasetError,
    LevelFinished,
    PrefixPrompts,
    RandomPrompts,
    ServerUnreachable,
    ShareGptPrompts,
    TokenizerError,
    event_loop_runner,
    load_tokenizer,
    run_bench,
)
from agents.loadgen.http import parse_base_url
from agents.loadgen.report import ProgressView, append_records, level_table, write_json
from agents.protocol import MAX_CONCURRENCY, Slos, pydantic_field_errors
from agents.runner.job import JobError, load_job, run_token
from agents.runner.outbox import Outbox
from agents.runner.session import (
    EXIT_UNDELIVERED,
    SPOOL,
    SessionError,
    run_session,
    site_endpoints,
)
from agents.runner.summary import read_journal, summary_table
from agents.runner.trial_engine import EngineOptions

EXIT_USAGE = 2
EXIT_ENGINE_FAILED = 3
EXIT_INTERRUPTED = 130


class UsageError(ValueError):
    """A command-line value that cannot be used; the message names the option."""


def _int_list(option: str, text: str) -> list[int]:
    values = []
    for part in text.split(","):
        try:
            value = int(part)
        except ValueError:
            raise UsageError(f"{option}: {part.strip()!r} is not a whole number") from None
        if not 1 <= value <= MAX_CONCURRENCY:
            raise UsageError(f"{option}: {value} is outside 1..{MAX_CONCURRENCY}")
        values.append(value)
    return values


def _rate_list(text: str) -> list[float | str]:
    rates: list[float | str] = []
    for part in text.split(","):
        part = part.strip()
        if part.lower() == "inf":
            rates.append("inf")
            continue
        try:
            rate = float(part)
        except ValueError:
            raise UsageError(f"--request-rate: {part!r} is not a number or 'inf'") from None
        if not rate > 0 or math.isinf(rate):
            raise UsageError(f"--request-rate: {part!r} must be above 0 (or 'inf')")
        rates.append(rate)
    return rates


def _slos(text: str | None) -> Slos | None:
    if not text:
        return None
    values: dict[str, float] = {}
    for part in text.split(","):
        name, equals, raw = part.partition("=")
        name = name.strip()
        if not equals:
            raise UsageError(f"--slo: expected NAME=MS, got {part!r}")
        try:
            values[name] = float(raw)
        except ValueError:
            raise UsageError(f"--slo: {name}={raw!r} is not a number of milliseconds") from None
    try:
        return Slos.model_validate(values)
    except pydantic.ValidationError as exc:
        problems = "; ".join(f"{e.field}: {e.message}" for e in pydantic_field_errors(exc))
        raise UsageError(f"--slo: {problems}") from None


def _source(args: argparse.Namespace):
    kind, _, value = args.dataset.partition(":")
    output_len = args.output_len
    if kind == "random" and not value:
        return RandomPrompts(args.input_len, output_len or 128, args.range_ratio)
    if kind == "sharegpt" and value:
        return ShareGptPrompts(Path(value), output_len)
    if kind == "prefix" and value:
        try:
            shared = int(value)
        except ValueError:
            raise UsageError(f"--dataset prefix:{value}: the shared length is a number") from None
        if shared < 1:
            raise UsageError("--dataset prefix:N: the shared length must be at least 1")
        return PrefixPrompts(shared, args.input_len, output_len or 128, args.num_prefixes)
    raise UsageError(
        f"--dataset: expected random, sharegpt:PATH or prefix:SHARED_LEN, got {args.dataset!r}"
    )


def build_config(args: argparse.Namespace) -> BenchConfig:
    """Turns parsed arguments into a ``BenchConfig``; raises ``UsageError``."""
    try:
        parse_base_url(args.base_url)
    except ValueError as exc:
        raise UsageError(f"--base-url: {exc}") from None
    levels: list[dict] = []
    if args.concurrency:
        levels += [{"concurrency": value} for value in _int_list("--concurrency", args.concurrency)]
    if args.request_rate:
        levels += [{"request_rate": rate} for rate in _rate_list(args.request_rate)]
    if not levels:
        raise UsageError("give at least one load level: --concurrency and/or --request-rate")
    if len({str(level) for level in levels}) != len(levels):
        raise UsageError("a load level is listed twice")
    for name in ("input_len", "num_prompts", "warmup", "num_prefixes"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "warmup" else 1):
            raise UsageError(f"--{name.replace('_', '-')}: {value} is too small")
    if args.output_len is not None and args.output_len < 1:
        raise UsageError("--output-len must be at least 1")
    if not 0 <= args.range_ratio < 1:
        raise UsageError("--range-ratio must be in [0, 1)")
    if not args.burstiness > 0:
        raise UsageError("--burstiness must be above 0")
    if args.duration is not None and not args.duration > 0:
        raise UsageError("--duration must be above 0 seconds")
    for option, path in (("--json", args.json), ("--per-request", args.per_request)):
        if path is not None and not path.parent.is_dir():
            raise UsageError(f"{option}: the folder {str(path.parent)!r} does not exist")
    if args.request_timeout is not None and not args.request_timeout > 0:
        raise UsageError("--request-timeout must be above 0 seconds")
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise UsageError(f"--api-key-env: the variable {args.api_key_env} is not set")
    metrics_url: str | None = args.metrics_url or "auto"
    if metrics_url.lower() == "none":
        metrics_url = None
    elif metrics_url != "auto":
        try:
            parse_base_url(metrics_url)
        except ValueError as exc:
            raise UsageError(f"--metrics-url: {exc}") from None
    try:
        tokenizer = load_tokenizer(args.tokenizer)
    except TokenizerError as exc:
        raise UsageError(f"--tokenizer: {exc}") from None
    source = _source(args)
    if isinstance(source, ShareGptPrompts):
        source.load(tokenizer)  # a bad file is a usage error now, not a crash at level 1
    return BenchConfig(
        base_url=args.base_url,
        model=args.model,
        source=source,
        levels=tuple(levels),
        endpoint=args.endpoint,
        api_key=api_key,
        burstiness=args.burstiness,
        num_prompts=args.num_prompts,
        duration=args.duration,
        warmup=args.warmup,
        max_concurrency=args.max_concurrency,
        tokenizer=tokenizer,
        slos=_slos(args.slo),
        metrics_url=metrics_url,
        seed=args.seed,
        request_timeout=args.request_timeout,
        ignore_eos=not args.no_ignore_eos,
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchsite-agent", description="The Benchsite agent.")
    commands = parser.add_subparsers(dest="command", required=True)
    bench = commands.add_parser(
        "bench",
        help="load-test an OpenAI-compatible server",
        description="Streams requests to an OpenAI-compatible server at each load level and "
        "reports TTFT, TPOT, ITL and E2EL with vllm bench serve's semantics.",
    )
    bench.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000")
    bench.add_argument("--model", required=True, help="the served model name")
    bench.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    bench.add_argument("--api-key-env", metavar="VAR", help="environment variable with the key")
    bench.add_argument("--concurrency", metavar="N[,N...]", help="closed-loop levels, in order")
    bench.add_argument(
        "--request-rate", metavar="R[,R...]", help="open-loop levels in req/s ('inf': all at once)"
    )
    bench.add_argument("--burstiness", type=float, default=1.0, help="gamma shape; 1 = Poisson")
    bench.add_argument(
        "--max-concurrency", type=int, metavar="N", help="cap on requests in flight (rate levels)"
    )
    bench.add_argument("--dataset", default="random", help="random | sharegpt:PATH | prefix:LEN")
    bench.add_argument("--input-len", type=int, default=128, help="prompt (or suffix) tokens")
    bench.add_argument("--output-len", type=int, help="output tokens (default 128)")
    bench.add_argument("--range-ratio", type=float, default=0.0, help="random length spread")
    bench.add_argument("--num-prefixes", type=int, default=1, help="prefix dataset: prefixes")
    amount = bench.add_mutually_exclusive_group()
    amount.add_argument("--num-prompts", type=int, default=200, help="requests per level")
    amount.add_argument("--duration", type=float, metavar="SECONDS", help="seconds per level")
    bench.add_argument("--warmup", type=int, default=0, help="unmeasured requests per level")
    bench.add_argument("--tokenizer", metavar="PATH", help="local tokenizer for exact lengths")
    bench.add_argument("--slo", metavar="ttft_ms=500,tpot_ms=50,e2el_ms=10000")
    bench.add_argument("--metrics-url", help="Prometheus URL (default <base-url>/metrics; none)")
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--request-timeout", type=float, default=600.0, metavar="SECONDS")
    bench.add_argument(
        "--no-ignore-eos",
        action="store_true",
        help="do not send vLLM's ignore_eos (for APIs that refuse it; lengths may then differ)",
    )
    bench.add_argument("--json", type=Path, metavar="OUT.json", help="write the results")
    bench.add_argument("--per-request", type=Path, metavar="OUT.jsonl", help="one line a request")

    sim = commands.add_parser(
        "serve-sim",
        help="serve the vLLM simulator (OpenAI API, simulated timing)",
        description="An OpenAI-compatible server whose timing models vLLM on a GPU. "
        "Everything it serves is labelled simulated.",
    )
    sim.add_argument("--model-spec", required=True, help="preset (llama-3.1-8b…) or JSON file")
    sim.add_argument("--gpu", required=True, help="H100, H200, B200, A100, L40S, RTX 4090")
    sim.add_argument("--config", type=Path, metavar="SERVE.json", help="serve flags (schema)")
    sim.add_argument("--host", default="127.0.0.1")
    sim.add_argument("--port", type=int, default=8000)
    sim.add_argument("--served-model-name", help="default: the model spec's name")
    sim.add_argument("--speed", type=float, default=1.0, help="simulated seconds per second")
    sim.add_argument("--startup-speed", type=float, help="speed of start-up (default --speed)")
    sim.add_argument("--seed", type=int, default=0)

    up = commands.add_parser(
        "engine-up",
        help="start vLLM or the simulator from a JSON description and serve until Ctrl-C",
    )
    up.add_argument("--engine", choices=("vllm", "sim"), help="overrides the file's 'engine'")
    up.add_argument("--config", type=Path, required=True, metavar="ENGINE.json")
    up.add_argument("--workdir", type=Path, default=Path("engine-run"), help="logs and caches")
    up.add_argument("--restarts", type=int, default=1, help="watchdog restarts after a crash")

    run = commands.add_parser(
        "run",
        help="run a whole job (every trial) and report to the site or a results folder",
        description="Runs each trial of the job: engine up, load levels, engine down. The job "
        "comes from --job or BENCHSITE_JOB (base64 JSON), the run token from BENCHSITE_TOKEN. "
        "Exit codes: 0 done and delivered, 2 bad job, 3 stopped early (cancel, deadline, "
        "refused), 4 messages left undelivered in the spool.",
    )
    run.add_argument("--job", type=Path, metavar="JOB.json", help="default: $BENCHSITE_JOB")
    run.add_argument("--workdir", type=Path, help="results, spool and logs (default ./run-<id>)")
    run.add_argument("--dataset-dir", type=Path, help="ShareGPT files as <dataset id>.json")
    run.add_argument(
        "--drain-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="how long to keep delivering after the run",
    )
    run.add_argument(
        "--deadline-margin",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="stop this long before the job's deadline",
    )

    flush = commands.add_parser("flush", help="deliver what an earlier `run` left in its spool")
    flush.add_argument("--job", type=Path, metavar="JOB.json", help="default: $BENCHSITE_JOB")
    flush.add_argument("--workdir", type=Path, required=True, help="the run's folder")
    flush.add_argument("--drain-timeout", type=float, default=600.0, metavar="SECONDS")
    return parser


async def _bench(config: BenchConfig, args: argparse.Namespace, console: Console, done: list):
    with ProgressView(console) as view:
        async for event in run_bench(config):
            view.handle(event)
            if isinstance(event, LevelFinished):
                done.append(event.result)
                view.progress.console.print(level_table(event.result))
                if args.per_request:
                    append_records(args.per_request, {"level": event.index}, event.records)
                if args.json:
                    write_json(args.json, config.describe(), done, interrupted=True)
            elif isinstance(event, BenchFinished) and args.json:
                write_json(args.json, event.config, event.levels, interrupted=False)


def _allow_many_connections() -> None:
    """Raises the open-file limit to its hard maximum: one socket per request in flight."""
    try:
        import resource
    except ImportError:  # not on Windows
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _run_bench_command(args: argparse.Namespace) -> int:
    _allow_many_connections()
    console = Console()
    errors = Console(stderr=True)
    try:
        config = build_config(args)
    except (UsageError, DatasetError) as exc:
        errors.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return EXIT_USAGE
    if args.per_request:
        args.per_request.write_text("")  # one file per run, not appended across runs
    done: list[dict] = []
    try:
        with event_loop_runner() as runner:
            runner.run(_bench(config, args, console, done))
    except (ServerUnreachable, DatasetError) as exc:
        errors.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return EXIT_USAGE
    except KeyboardInterrupt:
        if args.json:
            write_json(args.json, config.describe(), done, interrupted=True)
        errors.print(f"interrupted: {len(done)} level(s) finished and written")
        return EXIT_INTERRUPTED
    return 0


def _read_json_object(option: str, path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{option}: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{option}: expected a JSON object")
    return data


def _run_serve_sim(args: argparse.Namespace) -> int:
    from agents.engines.sim import command
    from agents.protocol import ServeGridError, serve_args

    errors = Console(stderr=True)
    try:
        flags = serve_args(_read_json_object("--config", args.config)) if args.config else []
    except UsageError as exc:
        errors.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return EXIT_USAGE
    except ServeGridError as exc:
        errors.print(f"[red]error:[/] --config: {exc}", highlight=False, soft_wrap=True)
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


def _run_engine_up(args: argparse.Namespace) -> int:
    import threading

    from agents.engines.base import EngineFailed
    from agents.engines.launch import EngineConfigError, engine_from_config
    from agents.engines.process import Watchdog

    console = Console()
    errors = Console(stderr=True)
    try:
        data = _read_json_object("--config", args.config)
        engine = engine_from_config(data, workdir=args.workdir, engine=args.engine)
    except (UsageError, EngineConfigError) as exc:
        errors.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
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
    console.print(f"serving{label} at {report.base_url}; unknown phases: {report.unknown}")
    down = threading.Event()

    def incident(event) -> None:
        state = "restarted" if event.restarted else "down"
        errors.print(f"[red]engine died[/] ({event.failure}); {state}; {event.lost}")
        if not event.restarted:
            down.set()

    try:
        with Watchdog(engine, restarts=args.restarts, on_incident=incident):
            while not down.wait(0.5):
                pass
        return EXIT_ENGINE_FAILED
    except KeyboardInterrupt:
        console.print("stopping…")
        return 0
    finally:
        engine.stop()


def _load_job_or_report(args: argparse.Namespace, errors: Console):
    try:
        return load_job(args.job)
    except JobError as exc:
        errors.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return None


def _run_job_command(args: argparse.Namespace) -> int:
    _allow_many_connections()
    console, errors = Console(), Console(stderr=True)
    job = _load_job_or_report(args, errors)
    if job is None:
        return EXIT_USAGE
    workdir = args.workdir or Path(f"run-{job.run_id}")
    try:
        engine_options = EngineOptions.from_environment()
    except ValueError as exc:
        errors.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return EXIT_USAGE
    try:
        result = run_session(
            job,
            token=run_token(),
            workdir=workdir,
            engine_options=engine_options,
            dataset_dir=args.dataset_dir,
            drain_timeout=args.drain_timeout,
            deadline_margin=args.deadline_margin,
        )
    except SessionError as exc:
        errors.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return EXIT_USAGE
    console.print(summary_table(read_journal(result.journal), simulated=job.engine.kind == "sim"))
    summary, delivery = result.summary, result.delivery
    console.print(
        f"run {summary.outcome}"
        + (f" ({summary.reason})" if summary.reason else "")
        + f": {summary.trials_succeeded} trials succeeded, {summary.trials_failed} failed, "
        f"{summary.trials_skipped} skipped; results in {workdir}",
        highlight=False,
    )
    if delivery.pending:
        errors.print(
            f"[red]{delivery.pending} messages not delivered[/]; they stay in "
            f"{workdir / 'spool'} — `benchsite-agent flush --workdir {workdir}` sends them",
            highlight=False,
        )
    return result.exit_code


def _run_flush_command(args: argparse.Namespace) -> int:
    console, errors = Console(), Console(stderr=True)
    job = _load_job_or_report(args, errors)
    if job is None:
        return EXIT_USAGE
    try:
        site = site_endpoints(job, run_token())
    except SessionError as exc:
        errors.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return EXIT_USAGE
    if site is None:
        errors.print("[red]error:[/] the job names no site to deliver to", highlight=False)
        return EXIT_USAGE
    outbox = Outbox(run_id=str(job.run_id), spool_dir=args.workdir / SPOOL, site=site)
    outbox.start()
    delivery = outbox.close(drain_timeout=args.drain_timeout)
    console.print(f"delivered {delivery.delivered}, still pending {delivery.pending}")
    return EXIT_UNDELIVERED if delivery.pending else 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "run":
        return _run_job_command(args)
    if args.command == "flush":
        return _run_flush_command(args)
    if args.command == "bench":
        return _run_bench_command(args)
    if args.command == "serve-sim":
        return _run_serve_sim(args)
    if args.command == "engine-up":
        return _run_engine_up(args)
    return EXIT_USAGE  # pragma: no cover - argparse requires a command


if __name__ == "__main__":
    sys.exit(main())
