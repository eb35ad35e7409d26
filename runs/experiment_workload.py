"""Whether an experiment's workload fits what its trials serve: every request within the
smallest context of the serve grid, and an uploaded dataset this organization's, of the
format its kind names, read as the agent will read it.

Guarantee: ``workload_fit_check`` reports each problem by its field path
(``workload.dataset.input_len``, ``workload.dataset.dataset_id`` …) through the experiment
check's ``add`` (``runs.experiment_spec``), and raises nothing itself.
"""

from __future__ import annotations

from functools import lru_cache

from agents.protocol import TRACE_FORMATS, Workload
from agents.workloads import TraceError
from agents.workloads.agentic import parse_agentic
from runs.models import ModelSpec, WorkloadDataset
from runs.models.experiments import AGENTIC_TRACE, DATASET_FORMAT_CHOICES
from runs.selectors.trace_windows import TraceWindowError, trace_window


def workload_fit_check(workload: Workload, grid: dict, model: ModelSpec, org, add) -> None:
    """Adds (``add(field, message)``) every way ``workload`` does not fit the smallest
    context ``grid`` serves ``model`` at, or names an upload ``org`` does not hold."""
    dataset = workload.dataset
    # Every request must fit the smallest context any trial will serve, or it fails for a
    # reason that has nothing to do with the configuration being measured.
    smallest_context = min(grid.get("max_model_len", [model.max_context]))
    if dataset.kind in ("sharegpt", AGENTIC_TRACE) or dataset.kind in TRACE_FORMATS:
        _check_uploaded_dataset(dataset, smallest_context, org, add)
        return
    if dataset.kind in ("chat_sessions", "agentic"):
        # A session's last turn carries the whole conversation: it must fit too.
        if (longest := dataset.longest_context()) > smallest_context:
            add(
                "workload.dataset.max_turns",
                f"A session's last turn carries up to {longest} tokens (its whole context "
                f"after {dataset.max_turns} turns at their longest), more than the smallest "
                f"context served ({smallest_context}).",
            )
        return
    if dataset.kind == "random":
        longest_prompt = int(dataset.input_len * (1 + dataset.range_ratio))
        longest_output = int(dataset.output_len * (1 + dataset.range_ratio))
        prompt_field = "workload.dataset.input_len"
    else:  # prefix sharing: the shared prefix plus a unique suffix
        longest_prompt = dataset.shared_len + dataset.suffix_len
        longest_output = dataset.output_len
        prompt_field = "workload.dataset.shared_len"
    if longest_prompt + longest_output > smallest_context:
        add(
            prompt_field,
            f"Prompt ({longest_prompt}) plus output ({longest_output}) tokens exceed the "
            f"smallest context served ({smallest_context}).",
        )


def _check_session_file(row: WorkloadDataset, dataset, smallest_context: int, add) -> None:
    """An agentic session file read with the workload's block size as the agent reads it:
    its hash ids must fit blocks of that size (``workload.dataset.block_size``) and every
    request must fit ``smallest_context``."""
    problem = session_file_problem(row.file.storage, row.file.name, row.sha256, dataset.block_size)
    if problem is not None:
        add("workload.dataset.block_size", problem)
        return
    longest = row.summary.get("longest_request_tokens") or 0
    if longest > smallest_context:
        add(
            "workload.dataset.dataset_id",
            f"Its longest request has {longest} prompt plus output tokens, more than the "
            f"smallest context served ({smallest_context}).",
        )


@lru_cache(maxsize=4)
def session_file_problem(storage, name: str, sha256: str, block_size: int) -> str | None:
    """What the agent's reader says of a stored session file at ``block_size`` (None: it
    reads); kept per file, content and size, since a stored file never changes."""
    with storage.open(name, "rb") as file:
        data = file.read()
    try:
        parse_agentic(data, block_size=block_size)
    except TraceError as error:
        return f"{error} (blocks of {block_size} tokens)"
    return None


def _check_uploaded_dataset(dataset, smallest_context: int, org, add) -> None:
    """An uploaded dataset: this organization's, of the format the kind names; a trace's
    window holds requests (filters, block size and window checked against the stored file)
    and each of them fits ``smallest_context``."""
    field = "workload.dataset.dataset_id"
    row = WorkloadDataset.objects.filter(organization=org, id=dataset.dataset_id).first()
    if row is None:
        add(field, "No such dataset in this organization.")
        return
    if row.format != dataset.kind:
        formats = dict(DATASET_FORMAT_CHOICES)
        add(
            field,
            f"{row.name!r} holds {formats[row.format]}; the dataset kind {dataset.kind!r} "
            f"needs {formats[dataset.kind]}.",
        )
        return
    if dataset.kind == "sharegpt":
        return  # text: its token counts are the model tokenizer's, known only on the pod
    if dataset.kind == AGENTIC_TRACE:
        _check_session_file(row, dataset, smallest_context, add)
        return
    try:
        window = trace_window(row, dataset)
    except TraceWindowError as error:
        add(f"workload.dataset.{error.field}", error.message)
        return
    over = window.over(smallest_context)
    if over:
        add(
            field,
            f"{over} of the window's {window.requests} requests have more prompt plus output "
            f"tokens than the smallest context served ({smallest_context}); the longest has "
            f"{window.longest_tokens}.",
        )
