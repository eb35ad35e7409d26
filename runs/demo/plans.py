"""The demo experiments (what each runs and how its table is labelled) and their set-up in
the demo organization.

Guarantees: the demo's experiment is created once per organization and plan, through the
same services as a user's (``model_spec_create``, ``experiment_create``: validated and
audited); a later demo reuses it as it is, but gives one that names no evaluation the plan's
(``experiment_update``: an experiment made by a demo older than evaluations).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from agents.hardware import MODEL_PRESETS
from runs.actors import Actor
from runs.demo.vllm_cpu import VllmSetup, tiny_model_spec
from runs.models import Experiment, GpuType, ModelSpec, Organization
from runs.services.catalogue import model_spec_create
from runs.services.experiments import experiment_create, experiment_update

DEMO_ACTOR = "manage.py demo_run"
# The simulator's noise in the demo's run: fixed, so that the demo shows the same answer every
# time, on a quiet machine or a busy one (a run started from the site draws its own).
DEMO_NOISE_SEED = 7


@dataclass(frozen=True)
class DemoPlan:
    """One demo experiment: what it runs and how its table is labelled."""

    engine: str
    experiment: str
    gpu_type: str
    grid: dict
    workload: dict
    slos: dict
    budget_cap_usd: Decimal
    flag: str  # the serve flag the grid varies, one table row group per value
    flag_heading: str
    # A trial with vLLM's defaults beside the grid: the baseline the answer is compared with.
    defaults_trial: bool = False
    # What every configuration is scored on (runs.experiment_evaluation; {}: nothing).
    evaluation: dict = field(default_factory=dict)


SIM_DEMO = DemoPlan(
    engine="sim",
    experiment="Llama 8B on H100: max_num_batched_tokens (simulated)",
    gpu_type="NVIDIA H100 80GB HBM3",
    grid={"max_num_batched_tokens": [2048, 8192, 16384]},
    workload={
        "dataset": {"kind": "random", "input_len": 1024, "output_len": 128},
        "concurrency": [1, 8, 64],
        "requests_per_level": 64,
        "steady_multiple": 2,
        "warmup_requests": 8,
        # The edge lies between the fixed levels: the search finds it per configuration.
        "capacity": {"max_probes": 4},
        # The same traffic in every demo; with DEMO_NOISE_SEED, the same answer.
        "seed": 2026,
    },
    slos={"ttft_ms": 500, "tpot_ms": 50},
    budget_cap_usd=Decimal(20),
    flag="max_num_batched_tokens",
    flag_heading="batched",
    defaults_trial=True,
    # The simulator serves no text: every configuration says "quality not judged: simulated",
    # as a simulated run of a team's own experiment with a set does.
    evaluation={"pack": "arithmetic"},
)

# Real vLLM on a 2-core CPU: each start takes about a minute, so two configurations and two
# short load levels. float32 because vllm-cpu's bfloat16 attention kernel dies with SIGILL on
# CPUs that advertise AMX but cannot run it (docs/engines.md); eager, because CUDA graphs do
# not exist on a CPU and compiling costs start-up time.
VLLM_DEMO = DemoPlan(
    engine="vllm",
    experiment="Tiny random Llama on this CPU: max_num_seqs (real vLLM)",
    # Every experiment names a GPU type; the local provider runs on this machine whatever it
    # names, and its catalogue price is what reports price a local pod's tokens at.
    gpu_type="NVIDIA GeForce RTX 4090",
    grid={
        "max_num_seqs": [2, 8],
        "max_model_len": [512],
        "dtype": ["float32"],
        "enforce_eager": [True],
    },
    workload={
        "dataset": {"kind": "random", "input_len": 64, "output_len": 32},
        "concurrency": [1, 4],
        "requests_per_level": 12,
        "warmup_requests": 2,
        # A level too close to call stays not met rather than measured again: the demo keeps
        # to its four levels on two cores.
        "max_extensions": 0,
    },
    # Judged at the median, which a window of 12 requests can decide at 95 % confidence (a
    # p99 needs 299: minutes per level of a CPU serving a toy model).
    slos={"ttft_ms": 300, "tpot_ms": 50, "ttft_percentile": 50, "tpot_percentile": 50},
    budget_cap_usd=Decimal(2),
    flag="max_num_seqs",
    flag_heading="seqs",
)


def demo_experiment(org: Organization, plan: DemoPlan, vllm: VllmSetup | None) -> Experiment:
    """The organization's experiment of ``plan`` (created, with its model, the first time):
    the 8B preset for the simulator, the tiny model ``vllm`` built for real vLLM."""
    existing = Experiment.objects.filter(organization=org, name=plan.experiment).first()
    actor = Actor.system(DEMO_ACTOR)
    if existing is not None and plan.evaluation and not existing.evaluation:
        return experiment_update(experiment=existing, actor=actor, evaluation=plan.evaluation)
    if existing is not None:
        return existing
    if vllm is None:
        spec = MODEL_PRESETS["llama-3.1-8b"].registered
    else:
        spec = tiny_model_spec(vllm.snapshot)
    model = ModelSpec.objects.filter(organization=org, hf_repo=spec["hf_repo"]).first()
    model = model or model_spec_create(org=org, actor=actor, **spec)
    return experiment_create(
        org=org,
        actor=actor,
        name=plan.experiment,
        model=model,
        gpu_type=GpuType.objects.get(id=plan.gpu_type),
        gpu_count=1,
        engine=plan.engine,
        engine_image_tag=f"v{vllm.version}" if vllm else "",
        serve_grid=plan.grid,
        defaults_trial=plan.defaults_trial,
        workload=plan.workload,
        slos=plan.slos,
        budget_cap_usd=plan.budget_cap_usd,
        evaluation=plan.evaluation,
    )
