"""Where an error is shown on the model and experiment forms: every API field path
(``serve_grid.max_num_seqs[1]``, ``workload.dataset.input_len``) lands in one *slot* of the
form (``serve_grid``, ``input_len`` …), or in the general slot ``form`` when no field matches,
so no error is ever dropped.

The form's field lists come from the API's own models, so a field added there gets a slot here
(and its errors a place on the page) without a second list to keep in step.
"""

from __future__ import annotations

from typing import get_args

from agents.protocol import (
    TRACE_FORMATS,
    CapacitySearch,
    Dataset,
    Slos,
    TraceDataset,
    Workload,
)
from frontend.experiments.evaluation_form import EVALUATION_SLOTS
from runs.experiment_search import ExperimentSearch
from runs.services.catalogue import MODEL_SPEC_FIELDS
from runs.services.experiments import EXPERIMENT_FIELDS

GENERAL_SLOT = "form"
# The model form's config.json inputs, and the facts read from one (``architecture``).
MODEL_CONFIG_FIELDS = ("hf_config", "hf_config_from_hub", "architecture")

# Every dataset kind the protocol knows has inputs here (a trace format's are below).
_DATASET_MODELS = {
    model.model_fields["kind"].default: model
    for model in get_args(get_args(Dataset)[0])
    if model is not TraceDataset
} | dict.fromkeys(TRACE_FORMATS, TraceDataset)
DATASET_FIELDS_BY_KIND = {
    kind: tuple(name for name in model.model_fields if name != "kind")
    for kind, model in _DATASET_MODELS.items()
    if model is not TraceDataset
}
# A trace option that means something to one format only: the tokens a Mooncake hash id
# stands for, and BurstGPT's row filters (which the protocol refuses on other formats).
TRACE_FORMAT_ONLY = {"block_size": "mooncake", "model": "burstgpt", "log_type": "burstgpt"}
DATASET_FIELDS_BY_KIND |= {
    kind: tuple(
        name
        for name in TraceDataset.model_fields
        if name != "kind" and TRACE_FORMAT_ONLY.get(name, kind) == kind
    )
    for kind in TRACE_FORMATS
}
# What a blank dataset input means, by kind: the protocol's defaults, shown in the help.
DATASET_DEFAULTS = {
    kind: {
        name: field.default
        for name, field in model.model_fields.items()
        if name in DATASET_FIELDS_BY_KIND[kind] and not field.is_required()
    }
    for kind, model in _DATASET_MODELS.items()
}
# Dataset options typed as text, not read as numbers (a model may be named "4").
DATASET_TEXT_FIELDS = ("dataset_id", "model", "log_type")
DATASET_FIELDS = tuple(dict.fromkeys(n for names in DATASET_FIELDS_BY_KIND.values() for n in names))


def dataset_input(name: str) -> str:
    """The form input (and error slot) of the workload dataset's field ``name``: the name
    itself, but for BurstGPT's ``model`` filter, since ``model`` is the experiment's model."""
    return "trace_model" if name == "model" else name


DATASET_INPUTS = tuple(dataset_input(name) for name in DATASET_FIELDS)
# The capacity search is a group of inputs of its own (``capacity_<field>``, error_slot).
WORKLOAD_FIELDS = tuple(
    name for name in Workload.model_fields if name not in ("dataset", "capacity")
)
CAPACITY_FIELDS = tuple(CapacitySearch.model_fields)
SLO_NAMES = tuple(Slos.model_fields)
# The search is a group of inputs of its own (``search_<field>``, error_slot).
SEARCH_FIELDS = tuple(ExperimentSearch.model_fields)
# Nested fields (the grid, fallbacks, workload, SLOs) have slots of their own (error_slot).
_NESTED = ("serve_grid", "fallback_gpu_types", "workload", "slos", "search")
_TOP_LEVEL = (
    *(name for name in EXPERIMENT_FIELDS if name not in _NESTED),
    "budget",
    "reason",
    *MODEL_SPEC_FIELDS,
    *MODEL_CONFIG_FIELDS,
)


def error_slot(path: str) -> str:
    """The slot of the form where the error at ``path`` (the API's field path) is shown."""
    head, _, rest = path.partition(".")
    head = head.split("[", 1)[0]
    if head in ("serve_grid", "fallback_gpu_types", "slos") and not rest:
        return head
    if head in ("serve_grid", "lora_adapters"):
        return head
    if head == "slos":
        name = rest.split(".", 1)[0]
        return f"slo_{name}" if name in SLO_NAMES else "slos"
    if head == "search":
        name = rest.split(".", 1)[0]
        return f"search_{name}" if name in SEARCH_FIELDS else "search"
    if head == "workload":
        first, _, tail = rest.partition(".")
        first = first.split("[", 1)[0]
        if first == "dataset":
            name = tail.split(".", 1)[0]
            return dataset_input(name) if name in DATASET_FIELDS else "dataset_kind"
        if first == "capacity":
            name = tail.split(".", 1)[0]
            return f"capacity_{name}" if name in CAPACITY_FIELDS else "capacity"
        return first if first in WORKLOAD_FIELDS else "workload"
    if head == "evaluation":
        return EVALUATION_SLOTS.get(rest.split(".", 1)[0], "evaluation")
    if head == "endpoint" and not rest:
        # The existing endpoint's picker: "endpoint" alone is the workload's API route's slot.
        return "existing_endpoint"
    if head in _TOP_LEVEL and not rest:
        return head
    return GENERAL_SLOT


def _shown(path: str, slot: str, message: str) -> str:
    # A message about a part of a field (a grid value, a list item) keeps its path so that
    # the reader sees which one; one about the whole field needs no prefix.
    whole = {
        slot,
        f"workload.{slot}",
        f"workload.dataset.{'model' if slot == dataset_input('model') else slot}",
        f"slos.{slot.removeprefix('slo_')}",
        f"workload.capacity.{slot.removeprefix('capacity_')}",
        f"search.{slot.removeprefix('search_')}",
        f"evaluation.{slot.removeprefix('evaluation_')}",
    }
    return message if path in whole else f"{path}: {message}"


def invalid_grid_flags(fields: dict[str, list[str]]) -> set[str]:
    """The grid flags that errors name (``serve_grid.max_num_seqs[1]`` → ``max_num_seqs``)."""
    flags = set()
    for path in fields:
        if path.startswith("serve_grid."):
            flags.add(path.removeprefix("serve_grid.").split("[", 1)[0].split(".", 1)[0])
    return flags


def errors_by_slot(fields: dict[str, list[str]]) -> dict[str, list[str]]:
    """Every message of ``fields`` (path → messages), grouped by the slot that shows it."""
    slots: dict[str, list[str]] = {}
    for path, messages in fields.items():
        slot = error_slot(path)
        slots.setdefault(slot, []).extend(_shown(path, slot, message) for message in messages)
    return slots
