"""Whether a model fits a GPU, for the models pages' table and the builder's live panel.

Guarantee: both ask ``agents.hardware`` (``plan_memory``, ``start_check``), the code with
which the simulator decides to start or refuse, on the model's facts as the simulator
receives them, with memory in GiB as CUDA and vLLM report it. So the builder says "does not
start" exactly where the simulator would refuse, and the reverse.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from agents.hardware import GIB, ServeSettings, StartRefusal, plan_memory, start_check
from agents.protocol import (
    TRACE_FORMATS,
    ServeGridError,
    Workload,
    expand_serve_grid,
    validate_serve_grid,
)
from frontend.experiments.builder import BuilderForm, experiment_payload
from runs.access import scoped
from runs.models import GpuType, Membership, ModelSpec
from runs.selectors.estimates import kv_shortfall, workload_lengths

FIT_GPU_COUNTS = (1, 2, 4, 8)
FIT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default, the figure the KV-cache column assumes


@dataclass(frozen=True)
class FitCell:
    """One GPU count of the table: the weights split over that many GPUs (tensor parallel),
    vLLM's defaults otherwise."""

    gpu_count: int
    fits: bool
    kv_tokens: int  # tokens of KV cache vLLM would allocate (0 if it would refuse)
    reason: str = ""  # why it does not fit, in a few words

    @property
    def kv_text(self) -> str:
        """Roughly, for a table cell: 3.4M tokens, 512k tokens, 900 tokens."""
        for size, unit in ((1_000_000, "M"), (1_000, "k")):
            if self.kv_tokens >= size:
                digits = 1 if self.kv_tokens < 10 * size else 0
                return f"{self.kv_tokens / size:.{digits}f}{unit} tokens"
        return f"{self.kv_tokens} tokens"


def _fit_cell(model: ModelSpec, gpu: GpuType, count: int) -> FitCell:
    hardware = gpu.hardware
    if hardware is None:
        return FitCell(count, False, 0, f"no hardware facts for {gpu.id}")
    flags = {"tensor_parallel_size": count, "gpu_memory_utilization": FIT_GPU_MEMORY_UTILIZATION}
    try:
        settings = ServeSettings.from_flags(flags, model.facts, hardware)
        plan = plan_memory(model.facts, hardware, settings, check_context=False)
    except StartRefusal as refusal:
        return FitCell(count, False, 0, refusal.summary)
    return FitCell(count, True, plan.kv_tokens)


def model_fit_rows(model: ModelSpec, gpu_types: list[GpuType]) -> list[tuple[GpuType, list]]:
    """Per GPU type and count: do the weights and vLLM's reserve fit, and how many tokens of
    KV cache vLLM would allocate at gpu_memory_utilization 0.9 (any context length)."""
    return [(gpu, [_fit_cell(model, gpu, count) for count in FIT_GPU_COUNTS]) for gpu in gpu_types]


def model_for_one_gpu(models: list[ModelSpec], gpu: GpuType | None) -> ModelSpec | None:
    """The first of ``models`` whose weights fit one ``gpu`` (the new experiment's default,
    so that its form opens without an error), else the first of them."""
    if gpu is not None:
        for model in models:
            if _fit_cell(model, gpu, 1).fits:
                return model
    return models[0] if models else None


def builder_fit_json(form: BuilderForm, membership: Membership) -> dict | None:
    """Whether every configuration of the builder's grid starts on the chosen GPUs, and the
    KV cache of the first; None until the model, GPU type, count and grid are valid ones the
    hardware facts know (the form's own errors say what is wrong with them)."""
    values = form.values
    try:
        count = int(values.get("gpu_count", ""))
    except ValueError:
        return None
    model = scoped(membership, ModelSpec).filter(pk=_uuid_or_none(values.get("model"))).first()
    gpu = GpuType.objects.filter(pk=values.get("gpu_type") or None).first()
    if model is None or gpu is None or gpu.hardware is None:
        return None
    if not 1 <= count <= max(FIT_GPU_COUNTS):
        return None
    payload, errors = experiment_payload(form)
    try:
        grid = validate_serve_grid(
            payload["serve_grid"], gpu_count=count, max_context=model.max_context
        )
    except ServeGridError:
        return None
    if errors:
        return None
    configs = expand_serve_grid(grid)
    weights_gib, memory_gib = model.weight_bytes / GIB, gpu.hardware.memory_gib * count
    on = f"{memory_gib:,.1f} GiB ({count}× {gpu.display_name})"
    first = None
    for index, config in enumerate(configs):
        try:
            started = start_check(model.facts, gpu.hardware, config)
        except StartRefusal as refusal:
            which = f"trial {index + 1} of {len(configs)}: " if len(configs) > 1 else ""
            text = (
                f"{model.name} does not start on {on}, {weights_gib:,.1f} GiB of weights: "
                f"{which}{refusal.summary}."
            )
            return {"fits": False, "kv_tokens": 0, "text": text}
        first = first or started
    settings, plan = first
    kv_text = FitCell(count, True, plan.kv_tokens).kv_text
    short = _kv_shortfall(payload.get("workload"), plan.kv_tokens)
    full = plan.kv_tokens // settings.max_model_len
    every = f"; all {len(configs)} configurations start" if len(configs) > 1 else ""
    text = (
        f"{weights_gib:,.1f} GiB of weights on {on}; KV cache ≈ {kv_text} at "
        f"gpu_memory_utilization {settings.gpu_memory_utilization}, {full:,} "
        f"sequence{'' if full == 1 else 's'} at the full {settings.max_model_len:,}-token "
        f"context{every}."
    )
    if short is not None:
        text += f" The first configuration's {short}"
    return {"fits": True, "kv_tokens": plan.kv_tokens, "text": text, "kv_short": short}


def _kv_shortfall(workload: object, kv_tokens: int) -> str | None:
    """The estimate's KV-cache check (``kv_shortfall``) on the builder's workload, when it
    is a valid one whose lengths are known without its file (not a trace's)."""
    try:
        parsed = Workload.model_validate(workload)
    except ValueError:
        return None
    if parsed.dataset.kind in TRACE_FORMATS:
        return None  # its lengths are the uploaded file's: the estimate checks them
    return kv_shortfall(kv_tokens, parsed, *workload_lengths(parsed))


def _uuid_or_none(text: str | None):
    try:
        return uuid.UUID(text or "")
    except ValueError:
        return None
