"""Experiments and the datasets their workloads use."""

from __future__ import annotations

import copy
import hashlib
from typing import IO

from django.conf import settings
from django.db import transaction

from agents import protocol
from agents.workloads import TraceError, parse_trace
from agents.workloads.agentic import parse_agentic
from agents.workloads.summary import summarize_sessions, summarize_trace
from runs.actors import Actor
from runs.audit import audit_record
from runs.errors import Conflict, DomainValidationError
from runs.experiment_spec import experiment_spec_check
from runs.models import Experiment, ExperimentSchedule, Organization, WorkloadDataset
from runs.models.experiments import AGENTIC_TRACE, SHAREGPT
from runs.services.audited_writes import (
    clean_instance,
    create_recorded,
    delete_recorded,
    update_recorded,
)
from runs.services.schedules import schedule_delete
from runs.services.uploads import upload_create_recorded, upload_delete_recorded

EXPERIMENT_FIELDS = (
    "name",
    "description",
    "model",
    "gpu_type",
    "gpu_count",
    "cloud_type",
    "fallback_gpu_types",
    "allow_other_cloud",
    "container_disk_gb",
    "network_volume_id",
    "engine",
    "endpoint",
    "engine_image_tag",
    "compare_image_tags",
    "serve_grid",
    "defaults_trial",
    "trust_remote_code",
    "lora_adapters",
    "workload",
    "slos",
    "search",
    "evaluation",
    "budget_cap_usd",
)


def _checked_fields(org: Organization, fields: dict) -> dict:
    spec = experiment_spec_check(
        org=org,
        model=fields["model"],
        gpu_type=fields["gpu_type"],
        gpu_count=fields["gpu_count"],
        engine=fields["engine"],
        engine_image_tag=fields["engine_image_tag"],
        serve_grid=fields["serve_grid"],
        workload=fields["workload"],
        slos=fields["slos"],
        fallback_gpu_types=fields["fallback_gpu_types"],
        container_disk_gb=fields["container_disk_gb"],
        network_volume_id=fields["network_volume_id"],
        compare_image_tags=fields["compare_image_tags"],
        search=fields["search"],
        endpoint=fields["endpoint"],
        defaults_trial=fields["defaults_trial"],
        trust_remote_code=fields["trust_remote_code"],
        lora_adapters=fields["lora_adapters"],
        evaluation=fields["evaluation"],
    )
    return fields | {
        "search": spec.search,
        "evaluation": spec.evaluation,
        "compare_image_tags": spec.compare_image_tags,
        "fallback_gpu_types": spec.fallback_gpu_types,
        "serve_grid": spec.serve_grid,
        "serve_flags_schema_version": spec.serve_flags_schema_version,
        "workload": spec.workload,
        "slos": spec.slos,
    }


def _check_name_free(org: Organization, name: str, *, exclude_id=None) -> None:
    taken = Experiment.objects.filter(organization=org, name=name).exclude(pk=exclude_id)
    if taken.exists():
        raise DomainValidationError.single("name", f"An experiment named {name!r} exists.")


def _check_same_org(org: Organization, fields: dict) -> None:
    # The API resolves ids within the organization already; this guards every other caller.
    model = fields.get("model")
    if model is not None and model.organization_id != org.id:
        raise DomainValidationError.single("model", "No such model in this organization.")


_CREATE_DEFAULTS = {
    "description": "",
    "gpu_count": 1,
    "cloud_type": "secure",
    "fallback_gpu_types": [],
    "allow_other_cloud": False,
    "container_disk_gb": 80,
    "network_volume_id": "",
    "engine": "vllm",
    "endpoint": None,
    "engine_image_tag": "",
    "compare_image_tags": [],
    "serve_grid": {},
    "defaults_trial": False,
    "trust_remote_code": False,
    "lora_adapters": [],
    "slos": {},
    "search": {},
    "evaluation": {},
}


def experiment_draft_check(
    *,
    org: Organization,
    actor: Actor,
    experiment: Experiment | None = None,
    name_in_use_ok: bool = False,
    **fields,
) -> Experiment:
    """The experiment ``fields`` describe (a new one, or ``experiment`` changed by them),
    checked as a whole exactly as ``experiment_create`` and ``experiment_update`` check it
    (they call this), with the same field-named errors; unsaved, ready to estimate. Pure: it
    writes nothing, records no audit event and locks no row, so checking a draft never waits
    for, or holds up, a write of the organization. ``name_in_use_ok``: the name may be
    another experiment's (a check that creates nothing)."""
    if experiment is None:
        merged = _CREATE_DEFAULTS | fields
    else:
        merged = {field: getattr(experiment, field) for field in EXPERIMENT_FIELDS} | fields
    _check_same_org(org, merged)
    if not name_in_use_ok:
        exclude_id = None if experiment is None else experiment.pk
        _check_name_free(org, merged["name"], exclude_id=exclude_id)
    checked = _checked_fields(org, merged)
    if experiment is None:
        draft = Experiment(organization=org, created_by=actor.user, **checked)
    else:
        draft = copy.copy(experiment)  # the caller's instance stays as stored
        for field in (*fields, "serve_flags_schema_version"):
            setattr(draft, field, checked[field])
    clean_instance(draft)
    return draft


def experiment_file_check(
    *, org: Organization, actor: Actor, **fields
) -> tuple[Experiment, list[str]]:
    """A new experiment's ``fields`` (a file kept in a repository and checked on every
    push) checked as ``experiment_create`` checks them, except that the name may be taken:
    the draft, and when an experiment of that name exists, a note saying so and in which
    fields the file differs from it (``runs start`` runs the stored one). Pure, as
    ``experiment_draft_check``."""
    draft = experiment_draft_check(org=org, actor=actor, name_in_use_ok=True, **fields)
    stored = Experiment.objects.filter(organization=org, name=draft.name).first()
    if stored is None:
        return draft, []
    differ = [f for f in EXPERIMENT_FIELDS if getattr(draft, f) != getattr(stored, f)]
    note = f"An experiment named {draft.name!r} exists: a run of that name runs it as stored" + (
        f"; this file differs from it in {', '.join(differ)}."
        if differ
        else ", which this file matches."
    )
    return draft, [note]


@transaction.atomic
def experiment_create(*, org: Organization, actor: Actor, **fields) -> Experiment:
    """A new experiment, stored exactly as validated."""
    experiment = experiment_draft_check(org=org, actor=actor, **fields)
    create_recorded(instance=experiment, actor=actor, event="experiment.create")
    _audit_trust_remote_code(experiment, actor=actor, before=False)
    return experiment


@transaction.atomic
def experiment_update(*, experiment: Experiment, actor: Actor, **changes) -> Experiment:
    """Changes an experiment; the whole result is validated again, as if it were new."""
    experiment = Experiment.objects.select_for_update().get(pk=experiment.pk)
    checked = experiment_draft_check(
        org=experiment.organization, actor=actor, experiment=experiment, **changes
    )
    updates = {field: getattr(checked, field) for field in (*changes, "serve_flags_schema_version")}
    trusted_before = experiment.trust_remote_code
    experiment = update_recorded(
        instance=experiment, changes=updates, actor=actor, event="experiment.update"
    )
    _audit_trust_remote_code(experiment, actor=actor, before=trusted_before)
    return experiment


def _audit_trust_remote_code(experiment: Experiment, *, actor: Actor, before: bool) -> None:
    """Records its own event whenever the model's code is trusted or no longer trusted: the
    one setting that runs a third party's code in the organization's pod, found in the log
    by its name rather than inside an update's diff."""
    if experiment.trust_remote_code != before:
        audit_record(
            org=experiment.organization,
            actor=actor,
            event="experiment.trust_remote_code",
            target=experiment,
            before={"trust_remote_code": before},
            after={"trust_remote_code": experiment.trust_remote_code},
        )


@transaction.atomic
def experiment_delete(*, experiment: Experiment, actor: Actor) -> None:
    """Deletes an experiment that has never run; one with runs keeps its history."""
    if experiment.runs.exists():
        raise Conflict("This experiment has runs; its history is kept, so it cannot be deleted.")
    # Its schedule and budgets go with it, each recorded, so the log never loses one silently
    # (and beat's row of the schedule with it: beat would fire a schedule that is gone).
    schedule = ExperimentSchedule.objects.filter(experiment=experiment).first()
    if schedule is not None:
        schedule_delete(actor=actor, schedule=schedule)
    for budget in experiment.budgets.all():
        delete_recorded(instance=budget, actor=actor, event="budget.delete")
    delete_recorded(instance=experiment, actor=actor, event="experiment.delete")


def _sharegpt_conversations(raw: bytes) -> int:
    """Counts usable conversations; raises DomainValidationError naming what is wrong."""
    try:
        data = protocol.json_loads_bounded(raw)  # bounded in depth like every JSON body
    except ValueError as exc:  # not UTF-8, not JSON, or nested too deep
        raise DomainValidationError.single("file", f"Not valid JSON: {exc}") from None
    if not isinstance(data, list):
        raise DomainValidationError.single("file", "Expected a JSON list of conversations.")
    usable = 0
    for index, item in enumerate(data):
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list):
            raise DomainValidationError.single(
                "file", f"Item {index} has no 'conversations' list (ShareGPT format)."
            )
        for turn_index, turn in enumerate(turns):
            if not (
                isinstance(turn, dict)
                and isinstance(turn.get("value"), str)
                and isinstance(turn.get("from"), str)
            ):
                raise DomainValidationError.single(
                    "file", f"Item {index}, turn {turn_index}: expected {{'from': …, 'value': …}}."
                )
        # Like `vllm bench serve`, a conversation is usable when it has a prompt and a reply.
        if len(turns) >= 2:
            usable += 1
    if usable == 0:
        raise DomainValidationError.single("file", "No conversation has both a prompt and a reply.")
    return usable


# A stored file keeps its format's usual extension (the agent reads it as uploaded).
_EXTENSIONS = {
    SHAREGPT: "json",
    "mooncake": "jsonl",
    "burstgpt": "csv",
    "azure": "csv",
    AGENTIC_TRACE: "jsonl",
}


def _trace_summary(raw: bytes, dataset_format: str) -> dict:
    """The summary of the trace in ``raw`` read at the reader's defaults (every row, blocks
    of 512 tokens); refused under ``file`` with the reader's line and field."""
    try:
        if dataset_format == AGENTIC_TRACE:
            return summarize_sessions(parse_agentic(raw))
        return summarize_trace(parse_trace(raw, dataset_format))
    except TraceError as error:
        raise DomainValidationError.single("file", str(error)) from None


def dataset_file_read(file: IO[bytes]) -> bytes:
    """An uploaded file's bytes for ``dataset_upload``: never more than one byte past
    ``DATASET_MAX_BYTES`` is read, so a file past the limit is refused there (under ``file``)
    without being held whole."""
    return file.read(settings.DATASET_MAX_BYTES + 1)


@transaction.atomic
def dataset_upload(
    *, org: Organization, actor: Actor, name: str, raw: bytes, dataset_format: str = SHAREGPT
) -> WorkloadDataset:
    """Stores an uploaded file after checking its name, size and content: ShareGPT
    conversations (counted), a request trace of ``dataset_format`` (read by
    ``agents.workloads.parse_trace``, summarized by ``summarize_trace``) or an agentic
    session file (``parse_agentic``, ``summarize_sessions``). A refusal names its
    field (a trace's, the line and column too) and stores nothing: no row, no file."""
    if not name.strip():
        raise DomainValidationError.single("name", "A dataset needs a name.")
    if dataset_format not in _EXTENSIONS:
        raise DomainValidationError.single(
            "format", f"Expected one of {', '.join(_EXTENSIONS)}; got {dataset_format!r}."
        )
    if len(raw) > settings.DATASET_MAX_BYTES:
        raise DomainValidationError.single(
            "file", f"File is larger than the limit of {settings.DATASET_MAX_BYTES} bytes."
        )
    if dataset_format == SHAREGPT:
        counts = {"num_conversations": _sharegpt_conversations(raw)}
    else:
        counts = {"summary": _trace_summary(raw, dataset_format)}
    dataset = WorkloadDataset(
        organization=org,
        name=name.strip(),
        format=dataset_format,
        sha256=hashlib.sha256(raw).hexdigest(),
        size_bytes=len(raw),
        created_by=actor.user,
        **counts,
    )
    return upload_create_recorded(
        instance=dataset,
        file_name=f"{org.id}/{dataset.id}.{_EXTENSIONS[dataset_format]}",
        raw=raw,
        actor=actor,
        event="dataset.upload",
    )


@transaction.atomic
def dataset_delete(*, dataset: WorkloadDataset, actor: Actor) -> None:
    """Deletes a dataset no experiment refers to; its file goes once the deletion commits."""
    in_use = Experiment.objects.filter(
        organization_id=dataset.organization_id, workload__dataset__dataset_id=str(dataset.id)
    )
    if in_use.exists():
        raise Conflict("This dataset is used by an experiment's workload.")
    upload_delete_recorded(instance=dataset, actor=actor, event="dataset.delete")
