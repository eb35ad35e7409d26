"""From the site's ``Workload`` (``agents.protocol``) to a load-generator configuration.

Guarantees: the levels, dataset, endpoint, burstiness, requests per level, warm-up, steady
window, ramp and capacity search of the workload are carried over unchanged (its levels are
always steady); a ShareGPT workload needs the local path its uploaded file was saved to.
"""

from __future__ import annotations

from pathlib import Path

from agents.loadgen.config import BenchConfig
from agents.loadgen.prompts import PrefixPrompts, PromptSource, RandomPrompts, ShareGptPrompts
from agents.protocol import (
    PrefixDataset,
    RandomDataset,
    ShareGptDataset,
    Slos,
    Workload,
    workload_levels,
)


def prompt_source(workload: Workload, *, sharegpt_path: Path | None = None) -> PromptSource:
    """The prompt source of the workload's dataset."""
    dataset = workload.dataset
    if isinstance(dataset, RandomDataset):
        return RandomPrompts(dataset.input_len, dataset.output_len, dataset.range_ratio)
    if isinstance(dataset, PrefixDataset):
        return PrefixPrompts(
            dataset.shared_len, dataset.suffix_len, dataset.output_len, dataset.num_prefixes
        )
    if isinstance(dataset, ShareGptDataset):
        if sharegpt_path is None:
            raise ValueError(f"ShareGPT dataset {dataset.dataset_id} needs its local file path")
        return ShareGptPrompts(Path(sharegpt_path), dataset.output_len)
    raise TypeError(f"unknown dataset {type(dataset).__name__}")


def config_from_workload(
    workload: Workload,
    *,
    base_url: str,
    model: str,
    slos: Slos | None = None,
    sharegpt_path: Path | None = None,
    **options,
) -> BenchConfig:
    """A ``BenchConfig`` running ``workload``; ``options`` are other ``BenchConfig`` fields
    (``api_key``, ``tokenizer``, ``metrics_url``, ``seed``, …); a timed level is the
    workload's ``level_seconds``."""
    return BenchConfig(
        base_url=base_url,
        model=model,
        source=prompt_source(workload, sharegpt_path=sharegpt_path),
        levels=tuple(workload_levels(workload)),
        endpoint=workload.endpoint,
        burstiness=workload.burstiness,
        num_prompts=workload.requests_per_level,
        warmup=workload.warmup_requests,
        steady_multiple=workload.steady_multiple,
        ramp_up_seconds=workload.ramp_up_seconds,
        capacity=workload.capacity,
        repeats=workload.repeats,
        duration=workload.level_seconds,
        slos=slos,
        **options,
    )
