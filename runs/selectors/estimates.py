"""A cost and duration estimate for an experiment before it runs.

This is a planning figure, not a measurement: each configuration goes through the
simulator's own start check and roofline (``agents.hardware``: the KV cache vLLM would
allocate, the time of a prefill and of a decode step), with the efficiency factors in
``Assumptions`` — or, where the organization has measured the experiment's model on its GPU
type and vLLM version, the newest calibration's (``runs.selectors.calibrations``, named in
``calibration``) — plus cold-start allowances. A configuration the start check refuses is
warned about and left out. Every assumption is returned with the estimate so a reader can see
what it rests on. Measured runs replace it; the run's budget check uses it only as a gate.

A trace workload is timed on the window it replays (``runs.selectors.trace_windows``): its
mean prompt and output lengths, and at a request rate its requests sent once.

A simulated experiment rents nothing and runs in the simulator's own time, so its duration is
what computing it takes here: a run's and each trial's fixed share, and each engine step and
each sequence in a step of the modelled sweep (``Assumptions.sim_*``, measured by
``benchmarks/estimate_accuracy.py``); ``gpu_seconds`` keeps what it would take on the
modelled GPU.

A run that scores its configurations on an evaluation set (docs/quality.md) is allowed
``Assumptions.evaluation_request_seconds`` per request of it, shared among the requests in
flight, for every configuration (``evaluation_seconds``); a simulated run scores nothing.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from decimal import Decimal

from agents.hardware import (
    DEFAULT_EFFICIENCY,
    Efficiency,
    StartRefusal,
    StepModel,
    start_check,
)
from agents.protocol import (
    TRACE_FORMATS,
    Slos,
    Workload,
    capacity_probe_levels,
    level_requests,
    workload_levels,
)
from runs.evaluation_job import evaluation_requests
from runs.experiment_spec import experiment_image_tags, experiment_trial_plan
from runs.models import Experiment, GpuType, Run, WorkloadDataset
from runs.models.experiments import Engine
from runs.placement import Placement, experiment_placements
from runs.providers.names import provider_name_for
from runs.selectors.calibrations import experiment_calibration
from runs.selectors.prices import GpuPrice, gpu_price
from runs.selectors.software_stacks import experiment_driver_warnings
from runs.selectors.trace_windows import TraceWindow, TraceWindowError, trace_window

# Computing a simulated run, measured on the 2-core development machine (2026-12-07): the
# offline simulator at 1, 8 and 64 users (300–490 requests of 1,024 + 128 tokens) took
# 10.6 µs per engine step, 4.8 µs per sequence in a step and 0.16 s per level (its
# statistics); the agent's start and end and each trial's start-up are the rest of the
# demo's run (benchmarks/estimate_accuracy.py).
SIM_RUN_SECONDS = 3.0
SIM_TRIAL_SECONDS = 0.3
SIM_LEVEL_SECONDS = 0.16
SIM_STEP_SECONDS = 10.6e-6
SIM_SEQUENCE_STEP_SECONDS = 4.8e-6


@dataclass(frozen=True)
class Assumptions:
    """Factors the estimate rests on; vLLM's own defaults where it has one."""

    pod_provision_seconds: float = 300.0  # pod scheduled, image pulled, agent up (per pod)
    # A local pod (BENCHSITE_PROVIDER=local, and every simulated run): the agent's process
    # starts on the worker's host, which holds the weights already.
    local_pod_start_seconds: float = 3.0
    weight_download_bytes_per_s: float = 500e6  # first fetch of the weights, once per pod
    weight_load_bytes_per_s: float = 2e9  # from local disk or volume into GPU memory
    engine_init_seconds: float = 60.0  # profiling, KV-cache sizing, CUDA graph capture
    engine_init_seconds_eager: float = 20.0  # same, with --enforce-eager
    # The simulator's calibrated shares of the datasheet peaks (agents.hardware.Efficiency).
    bandwidth_efficiency: float = DEFAULT_EFFICIENCY.bandwidth
    compute_efficiency: float = DEFAULT_EFFICIENCY.flops
    sharegpt_input_len: int = 256  # mean lengths assumed for uploaded conversations
    sharegpt_output_len: int = 256
    # Computing a simulated run here (SIM_RUN_SECONDS above says where they come from).
    sim_run_seconds: float = SIM_RUN_SECONDS
    sim_trial_seconds: float = SIM_TRIAL_SECONDS
    sim_level_seconds: float = SIM_LEVEL_SECONDS
    sim_step_seconds: float = SIM_STEP_SECONDS
    sim_sequence_step_seconds: float = SIM_SEQUENCE_STEP_SECONDS
    # Scoring a configuration on its evaluation set (docs/quality.md): each request (an item,
    # or a judge's reading of one) is allowed this long, greedy and a few hundred tokens at
    # most, divided among the requests in flight. A simulated run scores nothing.
    evaluation_request_seconds: float = 3.0


@dataclass
class CostEstimate:
    trials: int
    levels_per_trial: int
    gpu_count: int
    pods: int  # one per image the run measures its grid on, one after another
    price_usd_per_gpu_hour: Decimal | None
    price_source: str
    provisioning_seconds: float  # the pods, and the weights' downloads within them
    # Once per pod; once per run with a network volume (the next pod finds them there), and
    # 0 when the volume holds them already.
    weights_download_seconds: float
    cold_start_seconds: float  # all trials
    sweep_seconds: float  # all trials, all levels
    # The run's duration: on the modelled GPU, or (simulated) computing it here.
    total_seconds: float
    cost_usd: Decimal | None
    budget_cap_usd: Decimal
    within_budget: bool | None
    warnings: list[str] = field(default_factory=list)
    assumptions: dict = field(default_factory=dict)
    # What the run would take on the modelled GPU (provisioning, cold starts, sweep); for a
    # real run the same as ``total_seconds``.
    gpu_seconds: float = 0.0
    # The calibration the sweep was timed with (CalibrationSource.as_json), None: the
    # simulator's defaults (``assumptions``).
    calibration: dict | None = None
    # Scoring every configuration on the experiment's evaluation (0: none, or simulated).
    evaluation_seconds: float = 0.0


def _trace_window(
    experiment: Experiment, workload: Workload, warnings: list[str]
) -> TraceWindow | None:
    """The window a trace workload replays (``runs.selectors.trace_windows``), None for
    another dataset kind, or None with a warning when it cannot be read."""
    dataset = workload.dataset
    if dataset.kind not in TRACE_FORMATS:
        return None
    row = WorkloadDataset.objects.filter(
        organization_id=experiment.organization_id, id=dataset.dataset_id
    ).first()
    if row is None:
        warnings.append("The workload's trace is gone: the sweep time is left out.")
        return None
    try:
        return trace_window(row, dataset)
    except TraceWindowError as error:
        warnings.append(
            f"The workload's trace cannot be replayed ({error}): the sweep time is left out."
        )
        return None


def workload_lengths(
    workload: Workload, a: Assumptions | None = None, window: TraceWindow | None = None
) -> tuple[int, int]:
    """The mean prompt and output tokens of a request of ``workload`` (a trace's from its
    replayed ``window``; a chat session's turn, its mean history)."""
    a = a or Assumptions()
    dataset = workload.dataset
    if window is not None:
        return max(1, round(window.mean_input_len)), max(1, round(window.mean_output_len))
    if dataset.kind in TRACE_FORMATS:  # unreadable: no sweep is timed (the warning says so)
        return a.sharegpt_input_len, a.sharegpt_output_len
    if dataset.kind == "random":
        return dataset.input_len, dataset.output_len
    if dataset.kind == "prefix":
        return dataset.shared_len + dataset.suffix_len, dataset.output_len
    if dataset.kind == "chat_sessions":
        # A turn's prompt is the history so far: over turns 1..T, on average the system
        # prompt, (T + 1) / 2 messages and (T - 1) / 2 replies, T the mean turn count.
        turns = (dataset.min_turns + dataset.max_turns) / 2
        mean_input = (
            dataset.system_len
            + dataset.user_len * (turns + 1) / 2
            + dataset.output_len * (turns - 1) / 2
        )
        return round(mean_input), dataset.output_len
    if dataset.kind == "agentic":
        # The main agent's turns: the context grows by an output and a tool result a turn
        # (sub-agents' shorter contexts are counted as main turns: an overestimate).
        turns = (dataset.min_turns + dataset.max_turns) / 2
        grows = dataset.output_len + dataset.tool_output_len
        return round(dataset.system_len + dataset.task_len + grows * (turns - 1) / 2), (
            dataset.output_len
        )
    if dataset.kind == "agentic_trace":  # the file's means: session_file_lengths
        return a.sharegpt_input_len, a.sharegpt_output_len
    return a.sharegpt_input_len, dataset.output_len or a.sharegpt_output_len


def _dearest_price(experiment: Experiment) -> tuple[GpuPrice, Placement]:
    """The price of the dearest placement the experiment allows (a run may land on any of
    them, so its cap is checked against the worst); an unpriced placement wins, as unknown."""
    allowed = experiment_placements(experiment)
    gpus = {experiment.gpu_type_id: experiment.gpu_type} | GpuType.objects.in_bulk(
        [p.gpu_type_id for p in allowed[1:]]
    )
    dearest: tuple[GpuPrice, Placement] | None = None
    for placement in allowed:
        gpu = gpus.get(placement.gpu_type_id)
        if gpu is None:
            return GpuPrice(None, f"{placement.gpu_type_id} is not in the catalogue"), placement
        price = gpu_price(
            org=experiment.organization, gpu_type=gpu, cloud_type=placement.cloud_type
        )
        if price.usd_per_gpu_hour is None:
            return price, placement
        if dearest is None or price.usd_per_gpu_hour > dearest[0].usd_per_gpu_hour:
            dearest = (price, placement)
    assert dearest is not None  # the experiment's own placement is always first
    price, placement = dearest
    if len(allowed) > 1:
        price = GpuPrice(
            price.usd_per_gpu_hour,
            f"{price.source}; {placement}, the dearest of {len(allowed)} placements allowed",
        )
    return price, placement


def weights_on_volume(experiment: Experiment) -> bool:
    """Whether the experiment's network volume holds its model's weights already: an earlier
    run of the organization with that volume fetched this repository at this revision."""
    if not experiment.network_volume_id:
        return False
    model = experiment.model
    return (
        Run.objects.filter(
            organization_id=experiment.organization_id,
            experiment_snapshot__network_volume_id=experiment.network_volume_id,
            job_spec__model__hf_repo=model.hf_repo,
            job_spec__model__revision=model.revision,
        )
        .exclude(weights_fetch={})
        .exists()
    )


def experiment_estimate(
    *, experiment: Experiment, assumptions: Assumptions | None = None
) -> CostEstimate:
    """Trials × (cold start + sweep) × the organization's price for the experiment's GPUs."""
    a = assumptions or Assumptions()
    model, gpu = experiment.model, experiment.gpu_type
    workload = Workload.model_validate(experiment.workload)
    slos = Slos.model_validate(experiment.slos)
    levels = workload_levels(workload)
    # A capacity search measures up to this many more levels per trial.
    probes = capacity_probe_levels(workload)
    configs = [trial.serve_config for trial in experiment_trial_plan(experiment)]
    pods = len(experiment_image_tags(experiment))
    gpus = experiment.gpu_count
    # An image whose CUDA the pods' driver cannot run fails every trial: said first.
    warnings: list[str] = experiment_driver_warnings(experiment)
    window = _trace_window(experiment, workload, warnings)
    input_len, output_len = workload_lengths(workload, a, window)
    if workload.dataset.kind == "agentic_trace":
        input_len, output_len = session_file_lengths(experiment, workload) or (
            input_len,
            output_len,
        )
    if getattr(workload.dataset, "think_seconds", 0) or getattr(
        workload.dataset, "tool_seconds", 0
    ):
        warnings.append(
            "The sessions' think or tool time is not in the sweep time: levels with long "
            "pauses between turns take longer than estimated."
        )

    weight_bytes = model.weight_bytes
    # Each pod fetches the weights once (agents/weights.py), onto the network volume when
    # there is one: the run's next pods find them there, and so does a later run.
    downloads = pods
    if experiment.network_volume_id:
        downloads = 0 if weights_on_volume(experiment) else 1
    endpoint = experiment.engine == Engine.ENDPOINT  # nothing rented, fetched or started
    local = provider_name_for(engine=experiment.engine) == "local"
    download = 0 if endpoint or local else downloads * weight_bytes / a.weight_download_bytes_per_s
    pod_start = a.local_pod_start_seconds if local else a.pod_provision_seconds
    provisioning = 0 if endpoint else pods * pod_start + download
    cold_start = sweep = 0.0
    engine_steps = sequence_steps = 0.0  # of the modelled sweep: what a simulation computes
    hardware = gpu.hardware
    if hardware is None:
        warnings.append(f"No hardware facts for {gpu.id}: the sweep time is left out.")
    elif window is None and workload.dataset.kind in TRACE_FORMATS:
        hardware = None  # an unreadable trace (warned about) leaves no sweep to time
    efficiency = Efficiency(flops=a.compute_efficiency, bandwidth=a.bandwidth_efficiency)
    calibration = experiment_calibration(experiment)
    if calibration is not None:
        efficiency = Efficiency.from_constants(calibration.constants)
    for index, config in enumerate(configs):
        eager = bool(config.get("enforce_eager", False))
        cold_start += (
            0
            if endpoint
            else weight_bytes / a.weight_load_bytes_per_s
            + (a.engine_init_seconds_eager if eager else a.engine_init_seconds)
        )
        if hardware is None:
            continue
        try:
            settings, plan = start_check(model.facts, hardware, config)
        except StartRefusal as refusal:
            warnings.append(
                f"Trial {index + 1} will fail at start-up on {gpu.display_name}: "
                f"{refusal.summary} ({refusal})."
            )
            continue
        steps = StepModel(model.facts, hardware, settings, plan, efficiency)
        max_batch = min(settings.max_num_seqs, max(1, plan.kv_tokens // (input_len + output_len)))
        if (short := kv_shortfall(plan.kv_tokens, workload, input_len, output_len)) is not None:
            warnings.append(f"Trial {index + 1}: {short}")
        for level in levels * workload.repeats + probes:

            def step_at(batch: int) -> float:
                return _decode_step(steps, batch, input_len, output_len)  # noqa: B023

            if workload.level_seconds is not None:
                # A timed level: its seconds, then the drain of what is in flight; its steps
                # at the batch it holds (its concurrency, or at a rate, the largest).
                drain = level.get("concurrency") or 1
                seconds = workload.level_seconds + _level_seconds(
                    level, drain, input_len, output_len, max_batch, steps
                )
                sweep += seconds
                batch = min(level.get("concurrency") or max_batch, max_batch)
                engine_steps += seconds / step_at(batch)
                sequence_steps += seconds / step_at(batch) * batch
                continue
            requests = _level_sends(workload, level, window, slos)
            seconds = _level_seconds(level, requests, input_len, output_len, max_batch, steps)
            sweep += seconds
            level_sequence_steps = requests * output_len
            batch = _level_batch(level, max_batch, seconds, level_sequence_steps, step_at)
            engine_steps += level_sequence_steps / batch
            sequence_steps += level_sequence_steps

    requests, in_flight = (0, 1) if experiment.simulated else evaluation_requests(experiment)
    evaluation = len(configs) * requests * a.evaluation_request_seconds / in_flight
    gpu_total = provisioning + cold_start + sweep + evaluation
    total = gpu_total
    if experiment.simulated:
        total = (
            a.sim_run_seconds
            + a.sim_trial_seconds * len(configs)
            + a.sim_level_seconds * len(configs) * (len(levels) * workload.repeats + len(probes))
            + a.sim_step_seconds * engine_steps
            + a.sim_sequence_step_seconds * sequence_steps
        )
    price, placement = _dearest_price(experiment)
    cost: Decimal | None
    if experiment.simulated:
        cost, source = Decimal(0), "the simulator rents no GPU"
    elif endpoint:
        cost, source = _endpoint_cost(
            experiment, total, workload, slos, levels, window, input_len, output_len, warnings
        )
    elif price.usd_per_gpu_hour is None:
        cost, source = None, price.source
        warnings.append(f"No price for {placement}; set one to get a cost.")
    else:
        per_second = price.usd_per_gpu_hour * gpus / Decimal(3600)
        cost, source = (
            (per_second * Decimal(str(round(total, 3)))).quantize(Decimal("0.01")),
            price.source,
        )
    return CostEstimate(
        trials=len(configs),
        levels_per_trial=len(levels) * workload.repeats + len(probes),
        gpu_count=gpus,
        pods=pods,
        price_usd_per_gpu_hour=price.usd_per_gpu_hour,
        price_source=source,
        provisioning_seconds=round(provisioning, 1),
        weights_download_seconds=round(download, 1),
        cold_start_seconds=round(cold_start, 1),
        sweep_seconds=round(sweep, 1),
        total_seconds=round(total, 1),
        cost_usd=cost,
        budget_cap_usd=experiment.budget_cap_usd,
        within_budget=None if cost is None else cost <= experiment.budget_cap_usd,
        warnings=warnings,
        assumptions=asdict(a),
        gpu_seconds=round(gpu_total, 1),
        calibration=None if calibration is None else calibration.as_json(),
        evaluation_seconds=round(evaluation, 1),
    )


def _endpoint_cost(
    experiment, seconds, workload, slos, levels, window, input_len, output_len, warnings
) -> tuple[Decimal | None, str]:
    """An existing endpoint's run at its price: per hour over the estimated time (the sweep
    timed on the experiment's GPU type by the simulator), or per token over the requests'
    estimated lengths; unknown without a price or for timed levels priced per token."""
    endpoint = experiment.endpoint
    if endpoint.price_usd_per_hour is not None:
        cost = endpoint.price_usd_per_hour * Decimal(str(round(seconds, 3))) / Decimal(3600)
        return cost.quantize(Decimal("0.01")), f"endpoint {endpoint.name}'s price per hour"
    if endpoint.price_usd_per_1m_input_tokens is None:
        warnings.append(f"Endpoint {endpoint.name} has no price: the run's cost is unknown.")
        return None, f"endpoint {endpoint.name} has no price"
    if workload.level_seconds is not None:
        warnings.append("Timed levels send as many requests as the endpoint takes: no estimate.")
        return None, f"endpoint {endpoint.name}'s price per token, timed levels"
    requests = sum(
        _level_sends(workload, level, window, slos) + workload.warmup_requests
        for level in levels * workload.repeats
    )
    cost = (
        int(requests * input_len) * endpoint.price_usd_per_1m_input_tokens
        + int(requests * output_len) * endpoint.price_usd_per_1m_output_tokens
    ) / Decimal(1_000_000)
    return cost.quantize(Decimal("0.01")), f"endpoint {endpoint.name}'s price per token"


def session_file_lengths(experiment: Experiment, workload: Workload) -> tuple[int, int] | None:
    """The mean prompt and output tokens of an uploaded session file's requests, from the
    summary stored at upload; None when the dataset is gone."""
    row = WorkloadDataset.objects.filter(
        organization_id=experiment.organization_id, id=workload.dataset.dataset_id
    ).first()
    requests = (row.summary or {}).get("requests") if row is not None else None
    if not requests:
        return None
    summary = row.summary
    return (
        max(1, round(summary["input_tokens"] / requests)),
        max(1, round(summary["output_tokens"] / requests)),
    )


def kv_shortfall(kv_tokens: int, workload: Workload, input_len: int, output_len: int) -> str | None:
    """What is wrong when the KV cache cannot hold the workload's heaviest closed-loop level
    (its concurrency, or a concurrency search's upper bound) of requests ``input_len`` +
    ``output_len`` tokens long (the mean in flight); None when it can. Such a level queues
    or preempts in vLLM: it measures the cache's size, not the configuration's compute."""
    loads = list(workload.concurrency)
    search = workload.capacity
    if search is not None and search.axis == "concurrency" and search.max_load:
        loads.append(int(search.max_load))
    if not loads:
        return None
    heaviest, context = max(loads), input_len + output_len
    if heaviest * context <= kv_tokens:
        return None
    holds = kv_tokens // context
    return (
        f"the KV cache holds about {kv_tokens:,} tokens, {holds:,} requests of "
        f"{context:,} tokens; concurrency {heaviest:,} needs {heaviest * context:,}: vLLM "
        "will queue or preempt the rest, and such levels measure the cache, not the "
        "configuration."
    )


def _level_sends(
    workload: Workload, level: dict, window: TraceWindow | None, slos: Slos | None
) -> int:
    """What one level's time is counted in: a trace's open-loop level sends its window once
    at the level's mean rate, its last request (requests - 1) gaps after the first, so that
    many; any other level is steady: the window (as long as ``slos`` need to judge it), the
    ramp and the drain, and its warm-up (``level_requests``), as many arrivals."""
    if window is not None and "request_rate" in level:
        return window.requests - 1
    return level_requests(workload, level, slos)


def _decode_step(steps: StepModel, batch: int, input_len: int, output_len: int) -> float:
    # Each sequence's cache is half way through its output on average.
    context = input_len + output_len // 2
    return steps.cost([(1, context)] * batch, sampled=batch).seconds


def _level_batch(
    level: dict, max_batch: int, seconds: float, sequence_steps: float, step_at
) -> int:
    """The sequences a level's steps hold on average: its concurrency (up to what fits), or
    at a rate, the batch whose steps (``step_at(batch)`` seconds each, ``sequence_steps``
    sequences in all) fill the level's time (a fixed point, from one)."""
    if "concurrency" in level:
        return max(1, min(level["concurrency"], max_batch))
    batch = 1
    for _ in range(4):
        batch = max(1, min(max_batch, round(sequence_steps * step_at(batch) / max(seconds, 1e-9))))
    return batch


def _level_seconds(
    level: dict,
    requests: int,
    input_len: int,
    output_len: int,
    max_batch: int,
    steps: StepModel,
) -> float:
    def decode_step(batch: int) -> float:
        return _decode_step(steps, batch, input_len, output_len)

    prefill = steps.cost([(input_len, 0)], sampled=1).seconds

    def wave(batch: int) -> float:
        return batch * prefill + output_len * decode_step(batch)

    if "concurrency" in level:
        batch = min(level["concurrency"], max_batch)
        return math.ceil(requests / batch) * wave(batch)
    # Open loop: arrivals set the pace unless they outrun what the server can do at its
    # largest batch; then the backlog drains at capacity.
    rate = level["request_rate"]
    capacity = max_batch / wave(max_batch)
    pace = capacity if rate == "inf" else min(float(rate), capacity)
    return requests / pace + wave(1)
