"""The ``benchsite-agent`` command line's arguments: every subcommand and its options."""

from __future__ import annotations

import argparse
from pathlib import Path

from agents.workloads import BURSTGPT_LOG_TYPES


def add_workload_arguments(command: argparse.ArgumentParser) -> None:
    """The load a benchmark applies and what it reports: ``bench`` and ``predict`` share them."""
    command.add_argument(
        "--endpoint",
        type=endpoint_kind,
        help="completions (default) or chat; vllm bench serve's /v1/completions and "
        "/v1/chat/completions read too",
    )
    command.add_argument("--concurrency", metavar="N[,N...]", help="closed-loop levels, in order")
    command.add_argument(
        "--request-rate", metavar="R[,R...]", help="open-loop levels in req/s ('inf': all at once)"
    )
    command.add_argument("--burstiness", type=float, default=1.0, help="gamma shape; 1 = Poisson")
    command.add_argument(
        "--dataset",
        default="random",
        help="random | sharegpt:PATH | prefix:LEN | mooncake:PATH | burstgpt:PATH | azure:PATH"
        " | chat_sessions (multi-turn, --endpoint chat; --input-len is each user message)"
        " | agentic[:JSON of its fields] | agentic_trace:PATH (a session JSONL file)",
    )
    command.add_argument(
        "--turns", default="2-6", metavar="MIN[-MAX]", help="chat_sessions: turns per session"
    )
    command.add_argument(
        "--system-len", type=int, default=0, metavar="TOKENS", help="chat_sessions: system prompt"
    )
    command.add_argument(
        "--think-time",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="chat_sessions: mean pause before each later turn",
    )
    command.add_argument(
        "--time-scale",
        metavar="S[,S...]",
        help="trace: open-loop levels at the window's own times x S (1: as recorded, 0.5: twice "
        "as fast), each the request rate of the window's rate / S",
    )
    command.add_argument(
        "--trace-start", type=float, default=0.0, metavar="SECONDS", help="trace: window start"
    )
    command.add_argument(
        "--trace-duration", type=float, metavar="SECONDS", help="trace: window length (all)"
    )
    command.add_argument(
        "--block-size",
        type=int,
        default=512,
        metavar="TOKENS",
        help="mooncake, agentic_trace: tokens per hash id",
    )
    command.add_argument("--trace-model", metavar="NAME", help="burstgpt: keep this Model only")
    command.add_argument(
        "--trace-log-type", choices=BURSTGPT_LOG_TYPES, help="burstgpt: keep this Log Type only"
    )
    # vllm bench serve's names for the random dataset's lengths are aliases.
    command.add_argument(
        "--input-len", "--random-input-len", type=int, default=128, help="prompt (or suffix) tokens"
    )
    command.add_argument(
        "--output-len", "--random-output-len", type=int, help="output tokens (default 128)"
    )
    command.add_argument(
        "--range-ratio",
        "--random-range-ratio",
        type=float,
        default=0.0,
        help="random length spread",
    )
    command.add_argument("--num-prefixes", type=int, default=1, help="prefix dataset: prefixes")
    amount = command.add_mutually_exclusive_group()
    amount.add_argument("--num-prompts", type=int, default=200, help="requests per level")
    amount.add_argument("--duration", type=float, metavar="SECONDS", help="seconds per level")
    command.add_argument(
        "--warmup", "--num-warmups", type=int, default=0, help="unmeasured requests per level"
    )
    command.add_argument("--tokenizer", metavar="PATH", help="local tokenizer for exact lengths")
    command.add_argument(
        "--slo",
        metavar="'ttft:p95<300ms, tpot<50ms, attainment>=95%'",
        help="objectives, each at a percentile (p99 when not named); ttft_ms=500 also reads",
    )
    command.add_argument(
        "--steady",
        type=float,
        metavar="MULTIPLE",
        help="steady levels: a ramp, a window of at least --num-prompts and MULTIPLE x the "
        "concurrency requests (the headline figures), a drain; default: vllm bench serve's "
        "whole level",
    )
    command.add_argument(
        "--ramp-up", type=float, default=0.0, metavar="SECONDS", help="staggered start (--steady)"
    )
    command.add_argument(
        "--capacity-search",
        choices=("concurrency", "request_rate"),
        help="after the levels, find the highest load meeting --slo (steady levels)",
    )
    command.add_argument(
        "--max-probes", type=int, default=6, metavar="N", help="capacity search: extra levels"
    )
    command.add_argument("--seed", type=int, default=0)
    command.add_argument("--json", type=Path, metavar="OUT.json", help="write the results")


def endpoint_kind(text: str) -> str:
    """``--endpoint``: ``completions`` or ``chat``, or vllm bench serve's path of either."""
    kinds = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}
    kind = kinds.get(text.rstrip("/"), text)
    if kind not in ("completions", "chat"):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected completions, chat, /v1/completions or /v1/chat/completions"
        )
    return kind


def add_vllm_bench_arguments(bench: argparse.ArgumentParser) -> None:
    """``vllm bench serve``'s common flags, so that its command lines run here
    (``agents.cli.vllm_flags`` reads them as bench's own)."""
    vllm = bench.add_argument_group("vllm bench serve's flags (read as the options above)")
    vllm.add_argument(
        "--backend", help="vllm or openai: --endpoint completions; openai-chat: --endpoint chat"
    )
    vllm.add_argument("--dataset-name", help="random, or sharegpt with --dataset-path")
    vllm.add_argument("--dataset-path", metavar="PATH", help="--dataset-name sharegpt's file")
    vllm.add_argument("--host", default="127.0.0.1", help="without --base-url")
    vllm.add_argument("--port", type=int, default=8000, help="without --base-url")
    vllm.add_argument("--served-model-name", help="the name requests carry (default --model)")
    vllm.add_argument(
        "--save-result", action="store_true", help="write the results file (as --json)"
    )
    vllm.add_argument("--result-dir", type=Path, metavar="DIR", help="its folder (default .)")
    vllm.add_argument(
        "--result-filename", metavar="NAME", help="its name (default vllm bench serve's)"
    )
    vllm.add_argument(
        "--ignore-eos", action="store_true", help="sent already (--no-ignore-eos turns it off)"
    )
    vllm.add_argument("--disable-tqdm", action="store_true", help="no progress bars")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchsite-agent", description="The Benchsite agent.")
    commands = parser.add_subparsers(dest="command", required=True)
    bench = commands.add_parser(
        "bench",
        help="load-test an OpenAI-compatible server",
        description="Streams requests to an OpenAI-compatible server at each load level and "
        "reports TTFT, TPOT, ITL and E2EL with vllm bench serve's semantics.",
    )
    bench.add_argument(
        "--base-url", help="e.g. http://127.0.0.1:8000 (default http://--host:--port)"
    )
    bench.add_argument(
        "--model",
        required=True,
        help="the model: the name requests carry (unless --served-model-name), and where the "
        "tokenizer comes from without --tokenizer (a folder, or the local Hugging Face cache)",
    )
    bench.add_argument("--api-key-env", metavar="VAR", help="environment variable with the key")
    bench.add_argument(
        "--max-concurrency",
        type=int,
        metavar="N",
        help="cap on requests in flight (rate levels); alone, one closed-loop level of N",
    )
    add_workload_arguments(bench)
    add_vllm_bench_arguments(bench)
    bench.add_argument("--metrics-url", help="Prometheus URL (default <base-url>/metrics; none)")
    bench.add_argument("--request-timeout", type=float, default=600.0, metavar="SECONDS")
    bench.add_argument(
        "--no-ignore-eos",
        action="store_true",
        help="do not send vLLM's ignore_eos (for APIs that refuse it; lengths may then differ)",
    )
    bench.add_argument("--per-request", type=Path, metavar="OUT.jsonl", help="one line a request")
    bench.add_argument(
        "--gpu-telemetry",
        action="store_true",
        help="sample this host's GPUs through NVML every second during each level (when the "
        "server runs here): each GPU's mean and max in the results as 'gpus'",
    )

    predict = commands.add_parser(
        "predict",
        help="predict a serve configuration's benchmark on the vLLM simulator, offline",
        description="Runs the same levels as bench against the vLLM simulator in simulated "
        "time (seconds of CPU, no server, no GPU) and writes the same level keys, labelled "
        "simulated. Exit 0 done; 2 bad arguments; 3 vLLM would refuse to start.",
    )
    predict.add_argument(
        "--model-spec",
        required=True,
        help="preset (llama-3.1-8b…), a model facts JSON or a Hugging Face config.json",
    )
    predict.add_argument("--gpu", required=True, help="H100, H200, B200, A100, L40S, RTX 4090…")
    predict.add_argument("--tensor-parallel-size", type=int, metavar="N", help="GPUs per server")
    predict.add_argument("--config", type=Path, metavar="SERVE.json", help="serve flags (schema)")
    predict.add_argument(
        "--vllm-version",
        metavar="X.Y.Z",
        help="the vLLM release whose defaults fill the flags left out (default: the newest "
        "the simulator models)",
    )
    add_workload_arguments(predict)

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
