"""``benchsite-agent predict``: one serve configuration's benchmark predicted on the vLLM
simulator offline, in simulated time (``agents.predict``).

Guarantees: the same workload options as ``bench``, checked the same way; ``--json`` gets
``bench --json``'s keys with ``"simulated": true`` and a ``prediction`` object (model, GPU,
the flags, KV cache, simulated start-up and level seconds, vLLM's refusal if any). Exit 0
done; 2 bad arguments (one clear error line naming the option); 3 vLLM would refuse to
start this configuration (its reason printed and written).
"""

from __future__ import annotations

import argparse

from rich.console import Console

from agents.cli.bench import workload_fields
from agents.cli.usage import (
    EXIT_ENGINE_FAILED,
    EXIT_USAGE,
    UsageError,
    print_error,
    read_json_object,
)
from agents.hardware import GpuProfile, ModelFacts, gpu_profile, load_model_facts
from agents.loadgen import BenchConfig, DatasetError
from agents.loadgen.report import capacity_line, level_table, write_json
from agents.predict import OFFLINE_URL, TrialPrediction, predict_trial
from agents.protocol import ServeGridError, check_serve_config


def _flags(args: argparse.Namespace) -> dict:
    raw = read_json_object("--config", args.config) if args.config else {}
    if args.tensor_parallel_size is not None:
        given = raw.get("tensor_parallel_size")
        if given is not None and given != args.tensor_parallel_size:
            raise UsageError(
                f"--tensor-parallel-size {args.tensor_parallel_size} contradicts --config's "
                f"tensor_parallel_size {given}"
            )
        raw = raw | {"tensor_parallel_size": args.tensor_parallel_size}
    try:
        return check_serve_config(raw)
    except ServeGridError as exc:
        option = "--config" if args.config else "--tensor-parallel-size"
        raise UsageError(f"{option}: {exc}") from None


def _inputs(args: argparse.Namespace) -> tuple[ModelFacts, GpuProfile, dict, BenchConfig]:
    try:
        model = load_model_facts(args.model_spec)
    except ValueError as exc:
        raise UsageError(f"--model-spec: {exc}") from None
    try:
        gpu = gpu_profile(args.gpu)
    except ValueError as exc:
        raise UsageError(f"--gpu: {exc}") from None
    flags = _flags(args)
    config = BenchConfig(
        base_url=OFFLINE_URL, model=model.name, metrics_url=None, **workload_fields(args)
    )
    return model, gpu, flags, config


def _document(model: ModelFacts, gpu: GpuProfile, prediction: TrialPrediction) -> dict:
    facts = prediction.as_json()
    return {
        "simulated": True,
        "prediction": {
            "model": model.name,
            "gpu": gpu.name,
            "flags": facts["flags"],
            "refusal": facts["refusal"],
            "kv_cache_tokens": facts["kv_cache_tokens"],
            "cold_start_seconds": facts["cold_start_seconds"],
            "level_seconds": facts["level_seconds"],
        },
    }


def run_predict_command(args: argparse.Namespace) -> int:
    console = Console()
    errors = Console(stderr=True)
    try:
        model, gpu, flags, config = _inputs(args)
    except (UsageError, DatasetError) as exc:
        print_error(errors, exc)
        return EXIT_USAGE
    console.print(
        f"[bold]SIMULATED[/] prediction: {model.name} on {gpu.name}, flags {flags or '{}'} "
        "(the vLLM simulator offline; no GPU, no server)",
        highlight=False,
    )
    prediction = predict_trial(model, gpu, flags, config, vllm_version=args.vllm_version)
    extra = _document(model, gpu, prediction)
    if not prediction.starts:
        print_error(errors, f"vLLM would refuse to start: {prediction.refusal_summary}")
        errors.print(prediction.refusal, highlight=False, soft_wrap=True, markup=False)
        if args.json:
            write_json(args.json, config.describe(), [], interrupted=False, extra=extra)
        return EXIT_ENGINE_FAILED
    for level in prediction.levels:
        console.print(level_table(level))
    if prediction.capacity is not None:
        console.print(capacity_line(prediction.capacity))
    console.print(
        f"simulated time on the GPU: start-up {prediction.cold_start_seconds:.0f} s, "
        f"levels {prediction.level_seconds:.0f} s",
        highlight=False,
    )
    if args.json:
        write_json(
            args.json,
            config.describe(),
            prediction.levels,
            interrupted=False,
            capacity=prediction.capacity,
            extra=extra,
        )
    return 0
