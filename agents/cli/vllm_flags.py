"""``vllm bench serve``'s common flags, read as ``benchsite-agent bench``'s own, so that a
``vllm bench serve`` command line runs here with the word ``bench`` swapped in.

Guarantees: ``bench_arguments`` returns the arguments with bench's own options set from
vLLM's (``--backend`` → ``--endpoint``, ``--dataset-name``/``--dataset-path`` →
``--dataset``, ``--host``/``--port`` → ``--base-url``, ``--save-result``/``--result-dir``/
``--result-filename`` → ``--json``, ``--max-concurrency`` alone → one closed-loop level,
``--served-model-name`` → the name requests carry, ``--model`` → the tokenizer, out of the
local Hugging Face cache and never downloaded); two options that say different things are a
``UsageError`` naming both. The lengths' and warm-up's aliases are the parser's own.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from agents.cli.usage import UsageError
from agents.loadgen.tokenizer import cached_model_folder

# vllm bench serve's OpenAI-API backends, and the endpoint each streams from.
BACKEND_ENDPOINTS = {"vllm": "completions", "openai": "completions", "openai-chat": "chat"}


def _endpoint(args: argparse.Namespace) -> str:
    if args.backend is None:
        return args.endpoint or "completions"
    if args.backend not in BACKEND_ENDPOINTS:
        raise UsageError(
            f"--backend {args.backend}: bench speaks the OpenAI API; use "
            + ", ".join(BACKEND_ENDPOINTS)
        )
    endpoint = BACKEND_ENDPOINTS[args.backend]
    if args.endpoint is not None and args.endpoint != endpoint:
        raise UsageError(
            f"--backend {args.backend} streams from the {endpoint} endpoint, "
            f"--endpoint says {args.endpoint}"
        )
    return endpoint


def _dataset(args: argparse.Namespace) -> str:
    if args.dataset_name is None:
        if args.dataset_path is not None:
            raise UsageError("--dataset-path goes with --dataset-name sharegpt")
        return args.dataset
    if args.dataset != "random":
        raise UsageError("give --dataset or --dataset-name, not both")
    if args.dataset_name == "random" and args.dataset_path is None:
        return "random"
    if args.dataset_name == "sharegpt" and args.dataset_path is not None:
        return f"sharegpt:{args.dataset_path}"
    raise UsageError(
        f"--dataset-name {args.dataset_name}: bench reads random, or sharegpt with "
        "--dataset-path; for others see --dataset"
    )


def _results_file(args: argparse.Namespace, endpoint: str) -> Path | None:
    """``--json``, or where vllm bench serve's ``--save-result`` would write (its file name:
    ``{backend}-{rate}qps[-concurrency{N}]-{model}-{YYYYmmdd-HHMMSS}.json``)."""
    if not args.save_result:
        if args.result_dir is not None or args.result_filename is not None:
            raise UsageError("--result-dir and --result-filename go with --save-result")
        return args.json
    if args.json is not None:
        raise UsageError("give --json or --save-result, not both")
    name = args.result_filename
    if name is None:
        backend = args.backend or ("openai-chat" if endpoint == "chat" else "openai")
        rate = args.request_rate or "inf"
        cap = f"-concurrency{args.max_concurrency}" if args.max_concurrency else ""
        model = args.model.rstrip("/").split("/")[-1]
        name = f"{backend}-{rate}qps{cap}-{model}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    folder = args.result_dir or Path(".")
    try:
        folder.mkdir(parents=True, exist_ok=True)  # as vllm bench serve does
    except OSError as exc:
        raise UsageError(f"--result-dir: cannot create {str(folder)!r}: {exc.strerror}") from None
    return folder / name


def bench_arguments(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with vllm bench serve's flags turned into bench's own options."""
    endpoint = _endpoint(args)
    levels = (args.concurrency, args.request_rate, args.time_scale, args.capacity_search)
    alone = args.max_concurrency is not None and not any(levels)
    tokenizer = args.tokenizer
    if tokenizer is None:
        folder = cached_model_folder(args.model)
        tokenizer = None if folder is None else str(folder)
    return argparse.Namespace(
        **{
            **vars(args),
            "endpoint": endpoint,
            "dataset": _dataset(args),
            "base_url": args.base_url or f"http://{args.host}:{args.port}",
            "json": _results_file(args, endpoint),
            # vllm bench serve with --max-concurrency N and no rate (all at once) holds N
            # requests in flight: a closed-loop level of N.
            "concurrency": str(args.max_concurrency) if alone else args.concurrency,
            "max_concurrency": None if alone else args.max_concurrency,
            "served_model": args.served_model_name or args.model,
            "tokenizer": tokenizer,
            "tokenizer_from_model": args.tokenizer is None,
        }
    )
