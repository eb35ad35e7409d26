"""Evaluation sets (issue 38): uploaded, checked with the agent's own parser, and deleted
when no experiment names them."""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.db import transaction

from agents.evaluation import EvaluationSetError, parse_evaluation_set
from runs.actors import Actor
from runs.errors import Conflict, DomainValidationError
from runs.models import EvaluationSet, Experiment, Organization, Run
from runs.models.runs import TERMINAL_RUN_STATES
from runs.services.uploads import upload_create_recorded, upload_delete_recorded


@transaction.atomic
def evaluation_set_upload(
    *, org: Organization, actor: Actor, name: str, raw: bytes, description: str = ""
) -> EvaluationSet:
    """Stores an uploaded evaluation set after checking its name, size and every line
    (``agents.evaluation.parse_evaluation_set``, the parser the agent runs it with). A
    refusal names its field (the file's: the line and the item's field too) and stores
    nothing: no row, no file. Recorded as ``evaluation_set.upload``."""
    if not name.strip():
        raise DomainValidationError.single("name", "An evaluation set needs a name.")
    if len(raw) > settings.DATASET_MAX_BYTES:
        raise DomainValidationError.single(
            "file", f"File is larger than the limit of {settings.DATASET_MAX_BYTES} bytes."
        )
    try:
        parsed = parse_evaluation_set(raw)
    except EvaluationSetError as error:
        raise DomainValidationError.single("file", str(error)) from None
    evaluation_set = EvaluationSet(
        organization=org,
        name=name.strip(),
        description=description.strip() or parsed.description,
        sha256=hashlib.sha256(raw).hexdigest(),
        size_bytes=len(raw),
        items=len(parsed.items),
        needs_judge=parsed.needs_judge,
        summary=parsed.summary() | {"licence": parsed.licence},
        created_by=actor.user,
    )
    return upload_create_recorded(
        instance=evaluation_set,
        file_name=f"{org.id}/{evaluation_set.id}.jsonl",
        raw=raw,
        actor=actor,
        event="evaluation_set.upload",
    )


@transaction.atomic
def evaluation_set_delete(*, evaluation_set: EvaluationSet, actor: Actor) -> None:
    """Deletes an evaluation set that no experiment names and no run under way carries
    (its agent fetches the file by route): 409 otherwise. Its file goes once the deletion
    commits. Recorded as ``evaluation_set.delete``."""
    in_use = Experiment.objects.filter(
        organization_id=evaluation_set.organization_id,
        evaluation__set_id=str(evaluation_set.id),
    )
    if in_use.exists():
        raise Conflict("This evaluation set is named by an experiment.")
    running = Run.objects.filter(
        organization_id=evaluation_set.organization_id,
        job_spec__evaluation__set_id=str(evaluation_set.id),
    ).exclude(state__in=TERMINAL_RUN_STATES)
    if running.exists():
        raise Conflict("This evaluation set is being scored by a run under way.")
    upload_delete_recorded(instance=evaluation_set, actor=actor, event="evaluation_set.delete")
