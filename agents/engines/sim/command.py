"""The simulator's command: ``python -m agents.engines.sim MODEL_SPEC --gpu H100 --host H
--port P [vllm serve flags] [--speed S] [--seed N]``.

Guarantees: the configuration is checked like vLLM (``agents.hardware.start_check``); where
vLLM would refuse it, vLLM's kind of error is printed and the exit code is 1. Otherwise
start-up prints vLLM-worded log lines (phases scaled by weight size, divided by
``--startup-speed`` or ``--speed``), the first of them saying SIMULATED, then serves until
SIGTERM or SIGINT and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import signal
import time
from dataclasses import dataclass

from agents.engines.sim.completions import SIM_VERSION
from agents.engines.sim.http import Connection
from agents.engines.sim.noise import StepNoise
from agents.engines.sim.scheduler import Scheduler, make_scheduler
from agents.engines.sim.server import SimServer
from agents.engines.sim.startup import cold_start_seconds
from agents.hardware import (
    GIB,
    ModelFacts,
    ServeSettings,
    StartRefusal,
    gpu_profile,
    load_model_facts,
)


def _log(source: str, where: str, text: str, level: str = "INFO") -> None:
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"({source} pid=0) {level} {stamp} [sim:{where}] {text}", flush=True)


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vllm serve (benchsite simulator)")
    parser.add_argument("model_spec", help="preset name or model facts JSON file")
    parser.add_argument("--gpu", required=True, help="H100, H200, B200, A100, L40S, RTX 4090")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name")
    parser.add_argument("--speed", type=float, default=1.0, help="simulated s per wall s")
    parser.add_argument(
        "--startup-speed", type=float, help="speed of the simulated start-up (default --speed)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--vllm-version",
        help="the vLLM release whose defaults fill unset flags (default: the newest modelled)",
    )
    parser.add_argument(
        "--noise-seed",
        type=int,
        help="seeded step-time noise (agents.engines.sim.noise); none without it",
    )
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--max-num-batched-tokens", type=int)
    parser.add_argument("--gpu-memory-utilization", type=float)
    parser.add_argument("--tensor-parallel-size", type=int)
    parser.add_argument("--pipeline-parallel-size", type=int)
    parser.add_argument("--data-parallel-size", type=int)
    parser.add_argument("--enable-expert-parallel", action="store_true", default=None)
    parser.add_argument("--decode-context-parallel-size", type=int)
    parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
    parser.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction)
    parser.add_argument("--kv-cache-dtype")
    parser.add_argument("--dtype")
    parser.add_argument("--quantization")
    parser.add_argument("--block-size", type=int)
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--swap-space", type=float)
    parser.add_argument("--speculative-config", help="JSON, as vllm serve takes it")
    return parser


FLAG_NAMES = (
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "enable_expert_parallel",
    "decode_context_parallel_size",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "kv_cache_dtype",
    "dtype",
    "quantization",
    "block_size",
    "enforce_eager",
    "speculative_config",
)


@dataclass(frozen=True)
class SimSetup:
    """A checked simulator configuration: the model, its serve settings and the scheduler
    that serves it (with the step noise of ``--noise-seed``, if any)."""

    model: ModelFacts
    settings: ServeSettings
    scheduler: Scheduler


def build_scheduler(args: argparse.Namespace) -> SimSetup:
    """Checks the configuration like vLLM (``agents.hardware.start_check``) and builds its
    scheduler; raises ``StartRefusal``."""
    try:
        model = load_model_facts(args.model_spec)
        gpu = gpu_profile(args.gpu)
    except ValueError as exc:
        raise StartRefusal(
            f"ValueError: Invalid repository ID or local directory: {exc}",
            summary="the simulator does not know this model or GPU",
        ) from None
    if args.speed <= 0 or not math.isfinite(args.speed):
        raise StartRefusal(
            "error: argument --speed: must be a positive number", summary="a bad --speed"
        )
    flags = {name: getattr(args, name) for name in FLAG_NAMES}
    noise = None if args.noise_seed is None else StepNoise(args.noise_seed)
    scheduler = make_scheduler(model, gpu, flags, vllm_version=args.vllm_version, noise=noise)
    return SimSetup(model, scheduler.settings, scheduler)


def build(args: argparse.Namespace) -> SimServer:
    """The server of ``build_scheduler``'s configuration; raises ``StartRefusal``."""
    setup = build_scheduler(args)
    return SimServer(
        model=setup.model,
        gpu_name=setup.scheduler.step_model.gpu.name,
        settings=setup.settings,
        scheduler=setup.scheduler,
        served_model_name=args.served_model_name or setup.model.name,
        speed=args.speed,
        seed=args.seed,
    )


def _pause(seconds: float, speed: float) -> None:
    time.sleep(seconds / speed)


def main(argv: list[str] | None = None) -> int:
    args = argument_parser().parse_args(argv)
    _log("APIServer", "banner", f"SIMULATED vLLM ({SIM_VERSION}): no GPU is used; GPU={args.gpu}")
    try:
        server = build(args)
    except StartRefusal as exc:
        print("Traceback (most recent call last):", flush=True)
        print(str(exc), flush=True)
        print("RuntimeError: Engine core initialization failed. See root cause above.", flush=True)
        return 1
    settings, model = server.settings, server.model
    plan = server.scheduler.step_model.plan
    phases = cold_start_seconds(model, settings)
    speed = args.startup_speed or args.speed
    _log("APIServer", "model", f"Using max model len {settings.max_model_len}")
    _pause(phases["init"], speed)
    _log(
        "EngineCore",
        "core",
        f"Initializing a V1 LLM engine (v{SIM_VERSION}) with config: model='{model.name}', "
        f"tensor_parallel_size={settings.tensor_parallel_size}, "
        f"data_parallel_size={settings.data_parallel_size}, "
        f"enable_expert_parallel={settings.enable_expert_parallel}, "
        f"decode_context_parallel_size={settings.decode_context_parallel_size}",
    )
    _pause(phases["weights"], speed)
    _log(
        "Worker",
        "gpu_model_runner",
        f"Model loading took {plan.weight_bytes / GIB:.4f} GiB memory and "
        f"{phases['weights']:.6f} seconds",
    )
    _pause(phases["profile"], speed)
    _log("Worker", "gpu_worker", f"Available KV cache memory: {plan.kv_bytes / GIB:.2f} GiB")
    concurrency = plan.kv_tokens / settings.max_model_len
    _log(
        "EngineCore",
        "kv_cache_utils",
        f"GPU KV cache size: {plan.kv_tokens:,} tokens, Maximum concurrency for "
        f"{settings.max_model_len:,} tokens per request: {concurrency:.2f}x",
    )
    if not settings.enforce_eager:
        _pause(phases["graphs"], speed)
        _log(
            "Worker",
            "gpu_model_runner",
            f"Graph capturing finished in {phases['graphs']:.0f} secs, took 0.50 GiB",
        )
    init = phases["profile"] + phases["graphs"]
    _log(
        "EngineCore",
        "core",
        f"init engine (profile, create kv cache, warmup model) took {init:.2f} s",
    )
    _pause(phases["api"], speed)
    with contextlib.suppress(KeyboardInterrupt):
        # uvloop when installed: its transport writes cost about half of asyncio's.
        from agents.loadgen import event_loop_runner

        with event_loop_runner() as runner:
            runner.run(_serve(server, args.host, args.port))
    return 0


async def _serve(server: SimServer, host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    listener = await loop.create_server(lambda: Connection(server), host, port, backlog=4096)
    bound = listener.sockets[0].getsockname()[1]
    _log("APIServer", "entry", f"Starting vLLM server on http://{host}:{bound}")
    engine = asyncio.create_task(server.run_engine())
    await stop.wait()
    _log("APIServer", "entry", "Shutting down (simulated engine)")
    engine.cancel()
    listener.close()
    with contextlib.suppress(asyncio.CancelledError):
        await engine
