"""The simulator beside published vLLM measurements (the table in docs/simulator.md).

    .venv/bin/python -m benchmarks.sim_calibration

The rows live in ``benchmarks/data/vllm_published.csv`` (how they were collected, the split
and the sources: ``benchmarks/data/README.md``). Version 1 rows (``v1-``) are the table the
simulator's constants were chosen on; version 2 rows (``v2-``) were added later, split once
by a hash of their run into calibration and held-out, and are printed apart, by set and by
regime (low load, overload, many small requests, long prompts, quantized, MoE).

Each row replays a published setup in simulated time (no server, no wall clock: the output
is the same on every machine) and prints the published figure, the simulator's and the
relative error, then the mean absolute percentage error (MAPE) per metric family, for the
calibration rows and, apart, for the independent rows (never looked at when choosing a
constant of ``agents.hardware.Efficiency``). Sources and what was assumed for each are in
docs/simulator.md; every row carries its source's address.

A serving row (``vllm bench serve`` with ``--max-concurrency`` and ``--request-rate inf``) is
a closed loop of that many clients; an offline row (``vllm bench latency`` / ``throughput``)
is one batch of all its requests submitted at once.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import json
import math
import random
import re
import statistics
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from agents.engines.sim import SimRequest, closed_loop
from agents.engines.sim.frontend import DEFAULT_FRONT_END, FrontEnd
from agents.engines.sim.scheduler import make_scheduler, simulate
from agents.hardware import (
    DEFAULT_EFFICIENCY,
    MODEL_PRESETS,
    Efficiency,
    ModelFacts,
    StartRefusal,
    StepModel,
    gpu_profile,
    start_check,
)
from agents.hardware.hf_config import hf_config_facts

DATA = Path(__file__).parent / "data"
# Published config.json files (architecture keys) of the models that are not presets.
MODEL_CONFIGS = DATA / "model_configs.json"
PUBLISHED_CSV = DATA / "vllm_published.csv"


@dataclass(frozen=True)
class Constants:
    """Everything a replay's speed rests on: the step model's and the API server's."""

    efficiency: Efficiency = DEFAULT_EFFICIENCY
    front_end: FrontEnd = DEFAULT_FRONT_END


DEFAULT_CONSTANTS = Constants()
# What benchmarks/sim_fit.py found on the calibration rows on 2026-12-07 (its second fit,
# on MAPE; two significant digits). Not the defaults: with them the demo's intervals cover
# a re-run's cost 82 % of the time, not 90-98 % (docs/simulator.md, "The fitted constants").
# ``python -m benchmarks.sim_calibration --fitted`` prints the table with them.
FITTED_CONSTANTS = Constants(
    efficiency=Efficiency(
        flops=0.53,
        attention_flops=0.36,
        low_precision_flops=0.46,
        expert_min_width=2100.0,
        bandwidth=0.92,
        layer_overhead_s=65e-6,
        step_overhead_s=0.0022,
        allreduce_latency_s=35e-6,
        per_sequence_s=39e-6,
        request_overhead_s=0.0050,
    ),
    front_end=FrontEnd(request_s=0.0051, prompt_token_s=1.2e-6, output_token_s=17e-6),
)

# The ten ShareGPT requests of those two files, (prompt, output) tokens as they record them.
_LAMBDA_PROMPTS = (13, 25, 27, 10, 329, 29, 399, 328, 4, 205)
LAMBDA_H100_LENGTHS = tuple(
    zip(_LAMBDA_PROMPTS, (120, 429, 233, 194, 101, 741, 9, 3, 6, 31), strict=True)
)
LAMBDA_A100_LENGTHS = tuple(
    zip(_LAMBDA_PROMPTS, (120, 507, 233, 194, 101, 741, 9, 3, 6, 31), strict=True)
)
# Rahman's requests ended at EOS, not at max_tokens: output tok/s over req/s is 100.5 tokens
# per request at every concurrency (210/2.09, 377/3.78, 644/6.44, 975/9.73), under the 128
# asked. The page does not give the spread; the rows assume lengths uniform over 73..128
# (mean 100.5), drawn with a fixed seed. With 128 every time the closed loop's clients
# finish in the same step and prefill together again (lockstep), which the source's median
# TTFT at c=4 (53 ms, p99 157 ms) says did not happen.
_RAHMAN_DRAW = random.Random(1668)
RAHMAN_LENGTHS = tuple((256, _RAHMAN_DRAW.randint(73, 128)) for _ in range(300))
# Per-request lengths a row names in its ``lengths`` column.
LENGTH_PROFILES = {
    "rahman": RAHMAN_LENGTHS,
    "lambda-h100": LAMBDA_H100_LENGTHS,
    "lambda-a100": LAMBDA_A100_LENGTHS,
}

# Serve flags every version 1 row starts from (its own flags override them); version 2 rows
# start from vLLM's defaults, as their sources ran.
BASE_FLAGS = {"max_model_len": 4096}

FAMILIES = {
    "output_tok_s": "throughput",
    "decode_tok_s": "throughput",
    "gain_vs_c1": "throughput",
    "req_s": "throughput",
    "tpot_ms": "TPOT/ITL",
    "batch_latency_ms": "TPOT/ITL",
    "mean_tpot_ms": "TPOT/ITL",
    "median_ttft_ms": "TTFT",
    "mean_ttft_ms": "TTFT",
}


@dataclass(frozen=True)
class Row:
    """One published figure: the setup, the metric and the value the source states."""

    source: str
    url: str
    model: str  # the simulator's key: a preset or a key of model_configs.json ('' if none)
    gpu: str
    input_len: int
    output_len: int
    concurrency: int
    requests: int
    metric: str
    published: float
    flags: dict = field(default_factory=dict)
    independent: bool = False  # held out: never looked at when choosing a constant
    offline: bool = False  # all requests in one batch (vllm bench latency/throughput)
    # Per-request (prompt, output) tokens, request i the i-th sent, where the source lists
    # them or says how they vary; then input_len/output_len are their means, for the table
    # only.
    lengths: tuple = ()
    id: str = ""
    run: str = ""
    request_rate: float = math.inf  # Poisson arrivals per second; inf: all at once
    arch: str = "dense"
    dtype: str = "bfloat16"
    quote: str = ""
    vllm_version: str | None = None  # the release the source names, None where it names none
    chat: bool = False  # sent to /v1/chat/completions (the ``endpoint`` column)

    @property
    def version(self) -> int:
        return int(self.id[1]) if self.id.startswith("v") else 1

    @property
    def set_name(self) -> str:
        return "held-out" if self.independent else "calibration"


def split_for(run: str) -> str:
    """The set of a version 2 row, fixed by its run's name alone: about 60 % calibration."""
    return (
        "calibration"
        if int(hashlib.sha256(run.encode()).hexdigest()[:8], 16) % 100 < 60
        else ("held-out")
    )


def _row(record: dict) -> Row:
    flags = json.loads(record["flags"])
    tp = int(record["tp"])
    if tp > 1:
        flags["tensor_parallel_size"] = tp
    if record["kv_cache_dtype"] not in ("", "auto"):
        flags["kv_cache_dtype"] = record["kv_cache_dtype"]
    concurrency = int(record["concurrency"]) if record["concurrency"] else 0
    return Row(
        source=record["source"],
        url=record["url"],
        model=record["model_key"],
        gpu=record["gpu"],
        input_len=int(record["input_len"]),
        output_len=int(record["output_len"]),
        concurrency=concurrency,
        requests=int(record["num_prompts"]),
        metric=record["metric"],
        published=float(record["value"]),
        flags=flags,
        independent=record["set"] == "held-out",
        offline=record["offline"] == "yes",
        lengths=LENGTH_PROFILES[record["lengths"]] if record["lengths"] else (),
        id=record["id"],
        run=record["run"],
        request_rate=float(record["request_rate"]),
        arch=record["arch"],
        dtype=record["dtype"],
        quote=record["quote"],
        vllm_version=_release(record["vllm_version"]),
        chat=record["endpoint"] == "chat",
    )


def _release(stated: str) -> str | None:
    """The vLLM release a row's ``vllm_version`` names ("0.8.2"; "main (2025-08, 0.10.x)"
    gives "0.10"), None where it names none: then vLLM's newest defaults apply."""
    found = re.search(r"\d+\.\d+(?:\.\d+)?", stated)
    return found.group(0) if found else None


def load_rows(path: Path = PUBLISHED_CSV) -> tuple[Row, ...]:
    """Every row of the data file; raises where a version 2 row's set is not its run's."""
    with path.open(newline="") as lines:
        records = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    rows = tuple(_row(record) for record in records)
    for row in rows:
        if row.version >= 2 and row.set_name != split_for(row.run):
            raise ValueError(
                f"{row.id}: its set is {row.set_name}, its run's is {split_for(row.run)}"
            )
    return rows


ALL_ROWS = load_rows()
# The table the simulator's constants were chosen on (version 1), and the rows added since.
ROWS = tuple(row for row in ALL_ROWS if row.version == 1)
PUBLISHED = tuple(row for row in ALL_ROWS if row.version >= 2)


@cache
def _configs() -> dict:
    return json.loads(MODEL_CONFIGS.read_text())


@cache
def model_facts(key: str) -> ModelFacts:
    if key in MODEL_PRESETS:
        return MODEL_PRESETS[key].facts
    entry = _configs()[key]
    return ModelFacts(name=entry["repo"], **hf_config_facts(entry["config"]))


def serve_flags(row: Row) -> dict:
    """The flags a row is replayed with: version 1 rows start from ``BASE_FLAGS``."""
    return {**BASE_FLAGS, **row.flags} if row.version == 1 else dict(row.flags)


@cache
def distinct_prompt(index: int, prompt_len: int, block_size: int) -> tuple[int, ...]:
    """The block hashes of a prompt no other request shares, as `vllm bench serve`'s random
    prompts are: no request hits another's cache, but a preempted request finds its own
    computed blocks in vLLM's prefix cache (on by default in V1) until they are evicted."""
    return tuple(hash((index, block)) for block in range(prompt_len // block_size))


def _measure(
    model: str,
    gpu: str,
    input_len: int,
    output_len: int,
    c: int,
    n: int,
    flags: tuple,
    lengths: tuple = (),
    rate: float = math.inf,
    vllm_version: str | None = None,
    offline: bool = False,
    constants: Constants = DEFAULT_CONSTANTS,
    chat: bool = False,
) -> dict:
    scheduler = make_scheduler(
        model_facts(model),
        gpu_profile(gpu),
        dict(flags),
        vllm_version=vllm_version,
        entry_point="offline" if offline else "serve",
        efficiency=constants.efficiency,
        front_end=constants.front_end,
    )
    block_size = scheduler.settings.block_size

    def make(i: int) -> SimRequest:
        prompt_len, out_len = lengths[i] if lengths else (input_len, output_len)
        hashes = distinct_prompt(i, prompt_len, block_size)
        return SimRequest(i, prompt_len, out_len, block_hashes=hashes, chat=chat)

    if math.isinf(rate):
        result = closed_loop(scheduler, concurrency=c or n, total=n, make=make)
    else:
        # Poisson arrivals, as vllm bench serve draws them (burstiness 1), from a fixed seed.
        draw, now, requests = random.Random(0), 0.0, []
        for i in range(n):
            now += draw.expovariate(rate)
            request = make(i)
            request.arrival = now
            requests.append(request)
        result = simulate(scheduler, requests)
    tpots = [
        (r.token_times[-1] - r.token_times[0]) / (len(r.token_times) - 1)
        for r in result.requests
        if len(r.token_times) > 1
    ]
    return {
        "output_tok_s": result.output_throughput,
        "req_s": len(result.requests) / result.duration,
        "tpot_ms": 1000 * statistics.median(tpots),
        "mean_tpot_ms": 1000 * statistics.fmean(tpots),
        # A burst's tokens can all leave the API server together (TPOT 0): no finite rate.
        "decode_tok_s": 1 / statistics.median(tpots) if statistics.median(tpots) else math.inf,
        "median_ttft_ms": 1000 * statistics.median(result.ttfts()),
        "mean_ttft_ms": 1000 * statistics.fmean(result.ttfts()),
        "batch_latency_ms": 1000 * result.duration,
    }


def simulated(row: Row, constants: Constants = DEFAULT_CONSTANTS) -> float:
    """The simulator's figure for ``row``'s metric with ``constants`` (the defaults unless a
    fit is trying others)."""
    flags = tuple(sorted(serve_flags(row).items()))
    setup = (row.model, row.gpu, row.input_len, row.output_len)
    figures = _measure(
        *setup,
        row.concurrency,
        row.requests,
        flags,
        row.lengths,
        row.request_rate,
        row.vllm_version,
        row.offline,
        constants,
        row.chat,
    )
    if row.metric == "gain_vs_c1":
        base = _measure(
            *setup, 1, 20, flags, vllm_version=row.vllm_version, constants=constants, chat=row.chat
        )
        return figures["output_tok_s"] / base["output_tok_s"]
    return figures[row.metric]


# A single request's TTFT that leaves under this share of its time for anything but the
# prompt's matrix products at the GPUs' full datasheet peak is not a cold prefill of the
# stated prompt (a prefix-cache hit, or another length than stated): attention, the
# all-reduces, the step's own costs and the server's all take time too.
PEAK_SHARE_LIMIT = 0.9


def peak_share(row: Row) -> float | None:
    """For a single-request TTFT row: the share of the published TTFT the prompt's FLOPs take
    at 100 % of the datasheet's dense peaks (all GPUs of the row); else ``None``."""
    if FAMILIES[row.metric] != "TTFT" or row.concurrency != 1 or row.lengths:
        return None
    model, gpu = model_facts(row.model), gpu_profile(row.gpu)
    try:
        settings, plan = start_check(model, gpu, serve_flags(row))
    except StartRefusal:
        return None
    full = Efficiency(flops=1.0, attention_flops=1.0, low_precision_flops=1.0)
    at_peak = StepModel(model, gpu, settings, plan, full)
    compute_s = at_peak.cost([(row.input_len, 0)], 1).compute_s
    return compute_s / (row.published / 1000)


@dataclass(frozen=True)
class Result:
    row: Row
    simulated: float

    @property
    def error(self) -> float:
        """Signed relative error, simulator against published, in percent."""
        return (self.simulated - self.row.published) / self.row.published * 100

    @property
    def implausible(self) -> bool:
        """Published faster than the hardware allows (``PEAK_SHARE_LIMIT``): shown, but
        kept out of the MAPE."""
        share = peak_share(self.row)
        return share is not None and share > PEAK_SHARE_LIMIT


def calibration_results(constants: Constants = DEFAULT_CONSTANTS) -> list[Result]:
    """Every row of ``ROWS`` with the simulator's figure (a few seconds of one core)."""
    return [Result(row, simulated(row, constants)) for row in ROWS]


def mape(results: list[Result]) -> dict[str, float]:
    """Mean absolute percentage error per metric family (``FAMILIES``), and ``all``, over the
    rows that are not ``implausible``."""
    groups: dict[str, list[float]] = {}
    for result in results:
        if result.implausible:
            continue
        groups.setdefault(FAMILIES[result.row.metric], []).append(abs(result.error))
        groups.setdefault("all", []).append(abs(result.error))
    return {family: statistics.fmean(errors) for family, errors in groups.items()}


# The regimes issue 33 names, each a rule on the row's setup alone.
REGIMES = {
    "low load": lambda row: 0 < row.concurrency <= 8 and row.input_len <= 2048,
    "overload": lambda row: (
        row.concurrency >= 64
        or (math.isinf(row.request_rate) and not row.concurrency and row.requests >= 100)
        or (row.requests >= 50 and row.requests / row.request_rate <= 10)
    ),
    "many small requests": lambda row: (
        row.input_len <= 512 and row.output_len <= 128 and row.requests >= 500
    ),
    "long prompts": lambda row: row.input_len >= 4096,
    "quantized": lambda row: row.dtype not in ("bfloat16", "float16"),
    "MoE": lambda row: row.arch == "moe",
}


def regimes(row: Row) -> list[str]:
    return [name for name, holds in REGIMES.items() if not row.offline and holds(row)]


@dataclass(frozen=True)
class Skipped:
    """A published row the simulator cannot replay, and why."""

    row: Row
    reason: str


def published_results(
    constants: Constants = DEFAULT_CONSTANTS,
) -> tuple[list[Result], list[Skipped]]:
    """The version 2 rows replayed; those without a model config or that the start check
    refuses are returned apart."""
    results, skipped = [], []
    for row in PUBLISHED:
        if not row.model:
            skipped.append(Skipped(row, "no model config"))
            continue
        try:
            results.append(Result(row, simulated(row, constants)))
        except StartRefusal as refusal:
            skipped.append(Skipped(row, f"refused: {refusal.summary}"))
    return results, skipped


def _load(row: Row) -> str:
    rate = "inf" if math.isinf(row.request_rate) else f"{row.request_rate:g}/s"
    return f"c={row.concurrency} {rate}" if row.concurrency else f"{rate} n={row.requests}"


def _mape_line(label: str, chosen: list[Result]) -> str:
    errors = mape(chosen)
    order = ("throughput", "TPOT/ITL", "TTFT", "all")
    shown = ", ".join(f"{family} {errors[family]:.1f} %" for family in order if family in errors)
    counted = sum(not r.implausible for r in chosen)
    return f"MAPE {label} ({counted} of {len(chosen)} rows): {shown or '-'}"


def print_published(constants: Constants = DEFAULT_CONSTANTS) -> None:
    """The version 2 table, then its MAPE by set and by regime within each set."""
    results, skipped = published_results(constants)
    print()
    print("Version 2 rows (benchmarks/data/vllm_published.csv), never used to choose a constant:")
    print()
    print(
        "| set | id | source | model | GPU | TP | in/out | load | metric | published | "
        "simulator | error |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for result in results:
        row = result.row
        print(
            f"| {row.set_name} | {row.id} | {row.source} | {row.model} | {row.gpu} | "
            f"{row.flags.get('tensor_parallel_size', 1)} | {row.input_len}/{row.output_len} | "
            f"{_load(row)} | {row.metric} | {row.published:g} | {_shown(result.simulated)} | "
            f"{result.error:+.0f} %{' (excluded: implausible)' if result.implausible else ''} |"
        )
    print()
    for name in ("calibration", "held-out"):
        chosen = [r for r in results if r.row.set_name == name]
        print(_mape_line(f"v2 {name}", chosen))
        for regime in REGIMES:
            within = [r for r in chosen if regime in regimes(r.row)]
            if within:
                print("  " + _mape_line(regime, within))
    for skip in skipped:
        print(f"  not replayed: {skip.row.id} {skip.row.source} {skip.row.metric} ({skip.reason})")


def _shown(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


def with_constant(constants: Constants, given: str) -> Constants:
    """``constants`` with ``OWNER.NAME=VALUE`` set (OWNER ``efficiency`` or ``front_end``);
    raises ``ValueError`` naming what is wrong."""
    target, _, text = given.partition("=")
    owner, _, name = target.partition(".")
    if owner not in ("efficiency", "front_end"):
        raise ValueError("give efficiency.NAME=VALUE or front_end.NAME=VALUE")
    part = getattr(constants, owner)
    if name not in {f.name for f in dataclasses.fields(part)}:
        raise ValueError(f"{owner} has no constant {name!r}")
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value >= 0):
        raise ValueError("must be a finite number of 0 or more")
    return dataclasses.replace(constants, **{owner: dataclasses.replace(part, **{name: value})})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The simulator against published vLLM runs.")
    parser.add_argument(
        "--fitted",
        action="store_true",
        help="replay with FITTED_CONSTANTS (benchmarks/sim_fit.py's) instead of the defaults",
    )
    parser.add_argument(
        "--constant",
        action="append",
        default=[],
        metavar="OWNER.NAME=VALUE",
        help="replay with one constant changed, e.g. front_end.chat_request_s=0.02 or "
        "efficiency.expert_min_width=1800 (a grid's point); repeatable",
    )
    args = parser.parse_args(argv)
    constants = FITTED_CONSTANTS if args.fitted else DEFAULT_CONSTANTS
    for given in args.constant:
        try:
            constants = with_constant(constants, given)
        except ValueError as error:
            parser.error(f"--constant {given}: {error}")
    results = calibration_results(constants)
    print(
        "| set | source | model | GPU | TP | in/out | c | metric | published | simulator | error |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for result in results:
        row = result.row
        print(
            f"| {'indep.' if row.independent else 'calib.'} | {row.source} | {row.model} | "
            f"{row.gpu} | {row.flags.get('tensor_parallel_size', 1)} | "
            f"{row.input_len}/{row.output_len} | {row.concurrency} | {row.metric} | "
            f"{row.published:g} | {_shown(result.simulated)} | {result.error:+.0f} %"
            f"{' (excluded: implausible)' if result.implausible else ''} |"
        )
    print()
    for label, chosen in (
        ("calibration", [r for r in results if not r.row.independent]),
        ("independent", [r for r in results if r.row.independent]),
    ):
        errors = mape(chosen)
        assert all(math.isfinite(v) for v in errors.values())
        order = ("throughput", "TPOT/ITL", "TTFT", "all")
        shown = ", ".join(
            f"{family} {errors[family]:.1f} %" for family in order if family in errors
        )
        counted = sum(not r.implausible for r in chosen)
        print(f"MAPE {label} ({counted} of {len(chosen)} rows): {shown}")
    for result in results:
        share = peak_share(result.row)
        if share is not None:
            print(
                f"  {result.row.source} {result.row.input_len}/{result.row.output_len}: the "
                f"prompt's FLOPs at the datasheet peak take {share:.0%} of the published TTFT"
            )
    print_published(constants)
    return 0


if __name__ == "__main__":
    sys.exit(main())
