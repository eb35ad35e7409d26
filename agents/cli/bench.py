"""``benchsite-agent bench``: load-tests any OpenAI-compatible server on its own.

Guarantees: exit 0 done; 2 bad arguments or a server that cannot be reached before the
first level (one clear error line, nothing measured); 130 interrupted, the levels finished
so far written to ``--json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import uuid
from pathlib import Path

import pydantic
from rich.console import Console

from agents.cli.sim_clock import config_in_wall_time, event_in_simulated_time, simulator_speed
from agents.cli.usage import EXIT_INTERRUPTED, EXIT_USAGE, UsageError, print_error
from agents.cli.vllm_flags import bench_arguments
from agents.loadgen import (
    AgenticPrompts,
    BenchConfig,
    BenchFinished,
    CapacityFound,
    DatasetError,
    LevelFinished,
    PrefixPrompts,
    RandomPrompts,
    ServerUnreachable,
    SessionPrompts,
    ShareGptPrompts,
    TokenizerError,
    TracePrompts,
    event_loop_runner,
    load_tokenizer,
    run_bench,
)
from agents.loadgen.http import parse_base_url
from agents.loadgen.report import (
    ProgressView,
    append_records,
    capacity_line,
    level_table,
    write_json,
)
from agents.loadgen.workload import agentic_prompts, prompt_source, trace_prompts
from agents.protocol import (
    MAX_CONCURRENCY,
    TRACE_FORMATS,
    AgenticDataset,
    CapacitySearch,
    ChatSessionsDataset,
    Slos,
    TraceDataset,
    Workload,
    parse_slos,
    pydantic_field_errors,
)
from agents.telemetry import GpuLevels, open_gpus


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


def _time_scale_levels(text: str, source) -> list[dict]:
    """``--time-scale``: a request-rate level per factor S, at the trace window's own mean
    rate divided by S, so that the replay sends at the trace's times × S (the level reports
    S back as ``replay.time_scale``)."""
    if not isinstance(source, TracePrompts):
        raise UsageError(
            f"--time-scale: only a trace ({':PATH, '.join(TRACE_FORMATS)}:PATH) has times to "
            "scale; use --request-rate"
        )
    trace_rate = source.trace.mean_rate
    if math.isinf(trace_rate):
        raise UsageError(
            "--time-scale: the trace's window sends every request at one instant; "
            "use --request-rate inf"
        )
    levels = []
    for part in text.split(","):
        try:
            scale = float(part)
        except ValueError:
            raise UsageError(f"--time-scale: {part.strip()!r} is not a number") from None
        if not 0 < scale < math.inf:
            raise UsageError(f"--time-scale: {part.strip()!r} must be above 0")
        levels.append({"request_rate": trace_rate / scale})
    return levels


def _slos(text: str | None) -> Slos | None:
    if not text:
        return None
    try:
        return parse_slos(text)
    except pydantic.ValidationError as exc:
        problems = "; ".join(f"{e.field}: {e.message}" for e in pydantic_field_errors(exc))
        raise UsageError(f"--slo: {problems}") from None
    except ValueError as exc:
        raise UsageError(f"--slo: {exc}") from None


def _capacity(args: argparse.Namespace, slos: Slos | None) -> CapacitySearch | None:
    if args.capacity_search is None:
        return None
    if slos is None or not slos.given:
        raise UsageError("--capacity-search needs --slo: the capacity is the load meeting them")
    try:
        return CapacitySearch(axis=args.capacity_search, max_probes=args.max_probes)
    except pydantic.ValidationError as exc:
        problems = "; ".join(e.message for e in pydantic_field_errors(exc))
        raise UsageError(f"--max-probes: {problems}") from None


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
    if kind in TRACE_FORMATS and value:
        return _trace_source(args, kind, Path(value))
    if kind == "chat_sessions" and not value:
        return _sessions_source(args)
    if kind == "agentic":
        return _agentic_source(value)
    if kind == "agentic_trace" and value:
        try:
            return agentic_prompts(Path(value), block_size=args.block_size)
        except DatasetError as exc:
            raise UsageError(f"--dataset agentic_trace:{value}: {exc}") from None
    raise UsageError(
        "--dataset: expected random, sharegpt:PATH, prefix:SHARED_LEN, chat_sessions, "
        "agentic[:JSON], agentic_trace:PATH or a trace "
        f"({':PATH, '.join(TRACE_FORMATS)}:PATH), got {args.dataset!r}"
    )


def _agentic_source(text: str) -> AgenticPrompts:
    """Synthesized agentic sessions; ``text``: the dataset's fields as a JSON object."""
    try:
        fields = json.loads(text) if text else {}
    except ValueError as exc:
        raise UsageError(f"--dataset agentic:JSON: not JSON ({exc})") from None
    if not isinstance(fields, dict):
        raise UsageError("--dataset agentic:JSON: give an object of the dataset's fields")
    try:
        dataset = AgenticDataset.model_validate({**fields, "kind": "agentic"})
    except pydantic.ValidationError as exc:
        raise UsageError(
            "--dataset agentic: "
            + "; ".join(f"{e.field}: {e.message}" for e in pydantic_field_errors(exc))
        ) from None
    return prompt_source(Workload(dataset=dataset, concurrency=[1]))


def _sessions_source(args: argparse.Namespace) -> SessionPrompts:
    """Chat sessions, their options checked as the protocol checks them."""
    if args.endpoint != "chat":
        raise UsageError(
            "--dataset chat_sessions: sessions are sent to the chat endpoint; add --endpoint chat"
        )
    low, _, high = args.turns.partition("-")
    try:
        turns = (int(low), int(high or low))
    except ValueError:
        raise UsageError(f"--turns: expected MIN or MIN-MAX, got {args.turns!r}") from None
    try:
        dataset = ChatSessionsDataset(
            min_turns=turns[0],
            max_turns=turns[1],
            system_len=args.system_len,
            user_len=args.input_len,
            output_len=args.output_len or 128,
            range_ratio=args.range_ratio,
            think_seconds=args.think_time,
        )
    except pydantic.ValidationError as exc:
        options_of = {"min_turns": "--turns", "max_turns": "--turns",
                      "system_len": "--system-len", "user_len": "--input-len",
                      "output_len": "--output-len", "range_ratio": "--range-ratio",
                      "think_seconds": "--think-time"}  # fmt: skip  # a table
        raise UsageError(_option_problems(exc, options_of)) from None
    return prompt_source(Workload(dataset=dataset, endpoint="chat", concurrency=[1]))


def _option_problems(exc: pydantic.ValidationError, options_of: dict[str, str]) -> str:
    """A protocol model's refusal, each problem named by the command-line option."""
    return "; ".join(
        f"{options_of.get(e.field.rsplit('.', 1)[-1], e.field)}: {e.message}"
        for e in pydantic_field_errors(exc)
    )


def _trace_source(args: argparse.Namespace, kind: str, path: Path) -> TracePrompts:
    """The trace's window as prompts, its options checked as the protocol checks them."""
    try:
        options = TraceDataset(
            kind=kind,
            dataset_id=uuid.UUID(int=0),  # a local file: the site's id does not apply
            start_seconds=args.trace_start,
            duration_seconds=args.trace_duration,
            block_size=args.block_size,
            model=args.trace_model,
            log_type=args.trace_log_type,
        )
    except pydantic.ValidationError as exc:
        options_of = {
            "start_seconds": "--trace-start",
            "duration_seconds": "--trace-duration",
            "block_size": "--block-size",
            "model": "--trace-model",
            "log_type": "--trace-log-type",
        }
        raise UsageError(_option_problems(exc, options_of)) from None
    try:
        return trace_prompts(
            path,
            kind,
            block_size=options.block_size,
            model=options.model,
            log_type=options.log_type,
            start_seconds=options.start_seconds,
            duration_seconds=options.duration_seconds,
        )
    except DatasetError as exc:
        raise UsageError(f"--dataset {kind}:{path}: {exc}") from None


def workload_fields(args: argparse.Namespace) -> dict:
    """The ``BenchConfig`` fields of the workload options ``bench`` and ``predict`` share
    (``add_workload_arguments``), checked; raises ``UsageError`` naming the option."""
    levels: list[dict] = []
    if args.concurrency:
        levels += [{"concurrency": value} for value in _int_list("--concurrency", args.concurrency)]
    if args.request_rate:
        levels += [{"request_rate": rate} for rate in _rate_list(args.request_rate)]
    source = _source(args)
    if args.time_scale:
        levels += _time_scale_levels(args.time_scale, source)
    slos = _slos(args.slo)
    capacity = _capacity(args, slos)
    if not levels and capacity is None:
        raise UsageError(
            "give at least one load level: --concurrency, --request-rate or --time-scale "
            "(or --capacity-search)"
        )
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
    if args.steady is not None and not args.steady >= 0:
        raise UsageError("--steady must be 0 or more")
    if not args.ramp_up >= 0:
        raise UsageError("--ramp-up must be 0 or more seconds")
    if args.json is not None and not args.json.parent.is_dir():
        raise UsageError(f"--json: the folder {str(args.json.parent)!r} does not exist")
    try:
        tokenizer = load_tokenizer(args.tokenizer)
    except TokenizerError as exc:
        raise UsageError(f"--tokenizer: {exc}") from None
    if isinstance(source, ShareGptPrompts):
        source.load(tokenizer)  # a bad file is a usage error now, not a crash at level 1
    return {
        "source": source,
        "levels": tuple(levels),
        "endpoint": args.endpoint or "completions",
        "burstiness": args.burstiness,
        "num_prompts": args.num_prompts,
        "duration": args.duration,
        "warmup": args.warmup,
        "tokenizer": tokenizer,
        "slos": slos,
        "seed": args.seed,
        # A capacity search compares loads: their figures are steady ones.
        "steady_multiple": args.steady if args.steady is not None or capacity is None else 4.0,
        "ramp_up_seconds": args.ramp_up,
        "capacity": capacity,
    }


def build_config(args: argparse.Namespace) -> BenchConfig:
    """Turns parsed arguments (``vllm_flags.bench_arguments``'s) into a ``BenchConfig``;
    raises ``UsageError``."""
    try:
        parse_base_url(args.base_url)
    except ValueError as exc:
        raise UsageError(f"--base-url: {exc}") from None
    workload = workload_fields(args)
    if args.per_request is not None and not args.per_request.parent.is_dir():
        raise UsageError(
            f"--per-request: the folder {str(args.per_request.parent)!r} does not exist"
        )
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
    return BenchConfig(
        base_url=args.base_url,
        model=args.served_model,
        api_key=api_key,
        max_concurrency=args.max_concurrency,
        metrics_url=metrics_url,
        request_timeout=args.request_timeout,
        ignore_eos=not args.no_ignore_eos,
        **workload,
    )


async def _bench(
    config: BenchConfig,
    args: argparse.Namespace,
    console: Console,
    done: list,
    gpu_levels: GpuLevels | None = None,
    speed: float | None = None,
):
    """Runs ``config`` and shows it; against the simulator at ``speed``, in the modelled
    GPU's time (``sim_clock``)."""
    wall = config if speed is None else config_in_wall_time(config, speed)
    described = _described(config, speed)
    with ProgressView(console, hidden=args.disable_tqdm) as view:
        async for raw in run_bench(wall):
            event = raw if speed is None else event_in_simulated_time(raw, speed)
            if gpu_levels is not None:
                event = await gpu_levels.observe(event)  # the level's GPUs join it first
            view.handle(event)
            if isinstance(event, LevelFinished):
                done.append(event.as_json())
                view.progress.console.print(level_table(done[-1]))
                for line in gpu_lines(event.gpus or ()):
                    view.progress.console.print(line)
                if args.per_request:
                    append_records(args.per_request, {"level": event.index}, event.records)
                if args.json:
                    write_json(args.json, described, done, interrupted=True)
            elif isinstance(event, CapacityFound):
                view.progress.console.print(capacity_line(event.result))
            elif isinstance(event, BenchFinished) and args.json:
                write_json(
                    args.json,
                    described,
                    done,  # every level's result, with its server's and GPUs' figures
                    interrupted=False,
                    capacity=event.capacity,
                )


def _described(config: BenchConfig, speed: float | None) -> dict:
    """The results file's ``config``: what was asked for, and the simulator's speed."""
    return config.describe() | ({} if speed is None else {"simulated": {"speed": speed}})


def _tokenizer_note(model: str, folder: str | None) -> str:
    """Where the prompts' tokenizer came from when ``--tokenizer`` was not given."""
    if folder is None:
        return (
            f"tokenizer: none for {model} here (a folder, or the local Hugging Face cache): "
            "prompt lengths are approximate; give --tokenizer PATH for exact ones"
        )
    return f"tokenizer: {model}'s, from {folder}"


def gpu_lines(gpus) -> list[str]:
    """A level's GPUs as the summary prints them: one line each, mean / max."""

    def stat(figure: dict | None, unit: str, scale: float = 1.0) -> str:
        if figure is None:
            return "—"
        return f"{figure['mean'] / scale:.0f} / {figure['max'] / scale:.0f} {unit}"

    return [
        f"  GPU {gpu['index']} {gpu['name']}: utilization {stat(gpu['utilization_pct'], '%')}, "
        f"memory {stat(gpu['memory_used_mib'], 'GiB', 1024)}, power {stat(gpu['power_w'], 'W')}, "
        f"{gpu['samples']} samples"
        for gpu in gpus
    ]


def allow_many_connections() -> None:
    """Raises the open-file limit to its hard maximum: one socket per request in flight."""
    try:
        import resource
    except ImportError:  # not on Windows
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def run_bench_command(args: argparse.Namespace) -> int:
    allow_many_connections()
    console = Console()
    errors = Console(stderr=True)
    try:
        args = bench_arguments(args)
        config = build_config(args)
    except (UsageError, DatasetError) as exc:
        print_error(errors, exc)
        return EXIT_USAGE
    if args.tokenizer_from_model:
        console.print(_tokenizer_note(args.model, args.tokenizer), soft_wrap=True)
    if args.per_request:
        args.per_request.write_text("")  # one file per run, not appended across runs
    speed = simulator_speed(config.base_url)
    if speed is not None:
        console.print(
            f"[bold yellow]SIMULATED[/]: {config.base_url} is Benchsite's simulator at speed "
            f"{speed:g}. Every figure below is the modelled GPU's, in its time (latencies × "
            f"{speed:g}, rates ÷ {speed:g} of what this client saw): not a measurement.",
            soft_wrap=True,
        )
    done: list[dict] = []
    gpus = open_gpus() if args.gpu_telemetry else None
    if args.gpu_telemetry and gpus is None:
        errors.print("--gpu-telemetry: NVML finds no GPU on this host; measuring without it")
    try:
        with event_loop_runner() as runner:
            gpu_levels = GpuLevels(gpus) if gpus is not None else None
            runner.run(_bench(config, args, console, done, gpu_levels, speed))
    except (ServerUnreachable, DatasetError) as exc:
        print_error(errors, exc)
        return EXIT_USAGE
    except KeyboardInterrupt:
        if args.json:
            write_json(args.json, _described(config, speed), done, interrupted=True)
        errors.print(f"interrupted: {len(done)} level(s) finished and written")
        return EXIT_INTERRUPTED
    finally:
        if gpus is not None:
            gpus.close()
    return 0
