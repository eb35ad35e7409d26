"""``JobSpec``: everything an agent needs to run one run, unattended."""

from __future__ import annotations

import datetime
from typing import Annotated, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from agents.hardware import REGISTERED_FACTS, ModelFacts
from agents.protocol.evaluation import EvaluationJob
from agents.protocol.fields import (
    BIGINT_COLUMN_MAX,
    INTEGER_COLUMN_MAX,
    FiniteJson,
    RunId,
    TrialIndex,
)
from agents.protocol.lora import MAX_LORA_ADAPTERS, LoraAdapter, lora_adapters_problems
from agents.protocol.strict import StrictModel
from agents.protocol.workload import MAX_SEED, Slos, Workload

MAX_JOB_TRIALS = 1024


def _absent_when_none():
    # A fact left out of the JSON when None, so a job carries only what it states.
    return Field(default=None, exclude_if=lambda value: value is None)


_Size = Annotated[int, Field(ge=1, le=INTEGER_COLUMN_MAX)]
_Count = Annotated[int, Field(ge=0, le=INTEGER_COLUMN_MAX)]
_LayerIndex = Annotated[int, Field(ge=0, le=INTEGER_COLUMN_MAX)]


class ModelArchitecture(StrictModel):
    """A model's facts beyond ``ModelSource``'s columns, exactly as ``agents.hardware`` holds
    them (``ModelFacts.to_architecture``, the site's ``ModelSpec.architecture``): vocabulary
    and FFN sizes, mixture-of-experts layers, multi-head latent attention, sliding-window
    layers. A fact left out (None) takes ``ModelFacts``' default, that of a dense model with
    full attention."""

    vocab_size: _Size | None = _absent_when_none()
    intermediate_size: _Size | None = _absent_when_none()
    active_parameters: Annotated[int, Field(ge=1, le=BIGINT_COLUMN_MAX)] | None = (
        _absent_when_none()
    )
    num_experts: _Count | None = _absent_when_none()
    num_experts_per_token: _Count | None = _absent_when_none()
    num_shared_experts: _Count | None = _absent_when_none()
    moe_intermediate_size: _Size | None = _absent_when_none()
    num_moe_layers: _Count | None = _absent_when_none()
    kv_lora_rank: _Count | None = _absent_when_none()
    qk_rope_head_dim: _Count | None = _absent_when_none()
    sliding_window: _Size | None = _absent_when_none()
    sliding_window_layers: list[_LayerIndex] | None = Field(
        default=None, max_length=10_000, exclude_if=lambda value: value is None
    )

    def facts_mapping(self) -> dict:
        """The facts stated, in ``ModelFacts.from_registered``'s ``architecture`` names."""
        return self.model_dump(exclude_none=True)


class ModelSource(StrictModel):
    """Which weights to serve and the architecture facts the simulator and memory checks use.

    ``facts()`` is the model as ``agents.hardware`` sees it, translated as the site
    translates its registered model (``ModelFacts.from_registered``); a source whose
    ``architecture`` contradicts its columns is refused when it is read."""

    hf_repo: str = Field(max_length=200)
    revision: str = Field(default="main", max_length=100)
    served_model_name: str = Field(max_length=200)
    local_path: str | None = Field(default=None, max_length=1000)  # weights already on disk
    parameter_count: Annotated[int, Field(ge=1)]
    num_layers: Annotated[int, Field(ge=1)]
    hidden_size: Annotated[int, Field(ge=1)]
    num_attention_heads: Annotated[int, Field(ge=1)]
    num_kv_heads: Annotated[int, Field(ge=1)]
    head_dim: Annotated[int, Field(ge=1)]
    dtype: str = Field(max_length=16)
    max_context: Annotated[int, Field(ge=16)]
    # The facts beyond the columns above (None: a dense model of default vocabulary and FFN
    # sizes, as every job was before they existed). Left out of the JSON when None, so such
    # a job reads as it always did.
    architecture: ModelArchitecture | None = Field(
        default=None, exclude_if=lambda architecture: architecture is None
    )
    # The model's own code (its repository's *.py) is downloaded with the weights and run by
    # vLLM (``--trust-remote-code``): an explicit, audited experiment setting. Left out of the
    # JSON when false, so a job without it reads as it always did.
    trust_remote_code: bool = Field(default=False, exclude_if=lambda trusted: not trusted)
    # LoRA adapters served beside the model (``agents.protocol.lora``), downloaded with the
    # weights; requests are spread over them. Left out of the JSON when there are none.
    lora_adapters: list[LoraAdapter] = Field(
        default_factory=list, max_length=MAX_LORA_ADAPTERS, exclude_if=lambda adapters: not adapters
    )

    @model_validator(mode="after")
    def _adapters_distinct(self) -> ModelSource:
        problems = lora_adapters_problems(
            [adapter.model_dump() for adapter in self.lora_adapters],
            served_model_name=self.served_model_name,
        )
        if problems:
            raise ValueError(f"lora_adapters{problems[0].field}: {problems[0].message}")
        return self

    @model_validator(mode="after")
    def _facts_agree(self) -> ModelSource:
        # Only with an architecture: a job without one is read exactly as before it existed.
        if self.architecture is not None:
            self.facts()  # a ValueError naming the facts that contradict each other
        return self

    def facts(self) -> ModelFacts:
        """The model's facts for the simulator, the memory check and predictions: the same
        ``ModelFacts`` the site's ``ModelSpec.facts`` gives for the registered model."""
        architecture = self.architecture.facts_mapping() if self.architecture else None
        return ModelFacts.from_registered(
            **self.model_dump(include=REGISTERED_FACTS), architecture=architecture
        )


class EngineSpec(StrictModel):
    """What serves each trial: real vLLM (of this version), the simulator (of these GPUs), or
    an existing OpenAI-compatible endpoint at ``base_url`` that the agent starts nothing for
    (its API key travels apart from the job, in ``BENCHSITE_ENDPOINT_API_KEY``)."""

    kind: Literal["vllm", "sim", "endpoint"]
    image_tag: str | None = Field(default=None, max_length=128)
    vllm_version: str | None = Field(default=None, max_length=64)
    gpu_type: str = Field(max_length=100)
    gpu_count: Annotated[int, Field(ge=1, le=64)]
    sim_speed: Annotated[float, Field(gt=0, le=10_000, allow_inf_nan=False)] = 1.0
    # The simulator's step-time noise (``agents.engines.sim.noise``; kind "sim" only): the
    # same seed gives the same figures, another a realistic re-run. None: no noise, every
    # step as the model computes it. Left out of the JSON when None.
    noise_seed: Annotated[int, Field(ge=0, le=MAX_SEED)] | None = Field(
        default=None, exclude_if=lambda seed: seed is None
    )
    # The endpoint's API base, before /v1 (kind "endpoint" only). Left out of the JSON when
    # None, so a job of the other kinds reads as it always did.
    base_url: str | None = Field(default=None, max_length=500, exclude_if=lambda url: url is None)

    @model_validator(mode="after")
    def _base_url_for_endpoints(self) -> EngineSpec:
        if (self.kind == "endpoint") != (self.base_url is not None):
            raise ValueError("base_url is given for, and only for, an engine of kind 'endpoint'")
        if self.base_url is not None and not self.base_url.startswith(("http://", "https://")):
            raise ValueError("base_url must be an http:// or https:// URL")
        if self.noise_seed is not None and self.kind != "sim":
            raise ValueError("noise_seed is given only for an engine of kind 'sim'")
        return self


class TrialSpec(StrictModel):
    index: TrialIndex
    serve_config: FiniteJson
    # The vLLM image the trial runs on, in a run that measures its grid on several (None: the
    # engine's). A pod's job holds the trials of its own image only (``engine.image_tag``).
    # Left out of the JSON when None, so a single-image job reads as it always did.
    image_tag: str | None = Field(default=None, max_length=128, exclude_if=lambda tag: tag is None)


MAX_SPEND_SECONDS = 30 * 86_400
SEARCH_STRATEGIES = ("exhaustive", "prune", "halving", "bayes", "prune+halving")


class SearchPrior(StrictModel):
    """The simulator's constants a run of the organization fitted to its measurements on the
    same GPU type, model and image (``run_id``): predictions start from them."""

    constants: dict[str, Annotated[float, Field(allow_inf_nan=False)]] = Field(max_length=16)
    run_id: RunId


class SearchSettings(StrictModel):
    """How a run searches its grid (``agents.search``; docs/search.md): ``exhaustive``
    measures every trial; the others measure part of it and report what became of each
    (``search_finished``). ``spend_limit_seconds``: the pod's seconds the search may spend
    measuring (cold starts and levels); ``max_trials``: configurations measured; ``margin``:
    how far below the predicted best a configuration is pruned; ``prior``: the calibration
    predictions start from (None: the simulator's defaults)."""

    strategy: Literal[SEARCH_STRATEGIES] = "exhaustive"  # type: ignore[valid-type]
    spend_limit_seconds: (
        Annotated[float, Field(gt=0, le=30 * 86_400, allow_inf_nan=False)] | None
    ) = None
    max_trials: Annotated[int, Field(ge=1, le=MAX_JOB_TRIALS)] | None = None
    margin: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = 0.25
    prior: SearchPrior | None = Field(default=None, exclude_if=lambda prior: prior is None)


class ReportTo(StrictModel):
    """Where results go: the site's WebSocket and REST base, or (both None) a results folder."""

    ws_url: str | None = Field(default=None, max_length=1000)
    rest_url: str | None = Field(default=None, max_length=1000)


class JobSpec(StrictModel):
    """Site → agent, once per run: trials in order, the workload every trial runs, the SLOs,
    the engine, the model, a hard deadline (the agent stops itself there, whatever the site
    does) and where to report. The run token travels apart from it (``BENCHSITE_TOKEN``)."""

    protocol: Literal[1] = 1  # the job is as in protocol 1: agents of either version read it
    run_id: RunId
    trials: list[TrialSpec] = Field(min_length=1, max_length=MAX_JOB_TRIALS)
    workload: Workload
    slos: Slos = Field(default_factory=Slos)
    engine: EngineSpec
    model: ModelSource
    deadline: Annotated[datetime.datetime, Field(strict=False)]
    # The run's traffic seed: every trial's prompts, lengths and send times derive from it
    # and the level, never from the trial (the workload's own seed when it fixes one).
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    report: ReportTo = Field(default_factory=ReportTo)
    # How to search the trials (None: measure every one). Left out of the JSON when None, so
    # a job without a search reads as it always did.
    search: SearchSettings | None = Field(default=None, exclude_if=lambda search: search is None)
    # What every configuration is scored on after its levels (docs/quality.md; None: no
    # evaluation). Left out of the JSON when None, so a job without one reads as it always did.
    evaluation: EvaluationJob | None = Field(
        default=None, exclude_if=lambda evaluation: evaluation is None
    )

    @field_validator("deadline")
    @classmethod
    def _aware(cls, deadline: datetime.datetime) -> datetime.datetime:
        if deadline.tzinfo is None:
            raise ValueError("the deadline needs a time zone (e.g. 2026-11-29T23:00:00Z)")
        return deadline
