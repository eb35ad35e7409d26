"""The shape every audited create/update/delete shares: write the row, then its event."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from runs.actors import Actor
from runs.audit import audit_diff, audit_record, audit_snapshot
from runs.errors import DomainValidationError


def clean_instance(instance: models.Model, *, exclude: tuple[str, ...] = ()) -> None:
    """The model's own checks (lengths, choices), as a ``DomainValidationError`` naming the
    fields. Serializers check types first; this is the model's own last line, on the values
    as they will be stored (normalized, joined, lower-cased). ``exclude``: fields not set
    yet."""
    try:
        instance.full_clean(exclude=exclude, validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        raise DomainValidationError(exc.message_dict) from None


def create_recorded(*, instance: models.Model, actor: Actor, event: str) -> models.Model:
    """Saves a new tenant-owned row and records ``event`` with its full contents."""
    clean_instance(instance)
    instance.save()
    audit_record(
        org=instance.organization,
        actor=actor,
        event=event,
        target=instance,
        after=audit_snapshot(instance),
    )
    return instance


def update_recorded(
    *, instance: models.Model, changes: dict, actor: Actor, event: str
) -> models.Model:
    """Applies ``changes`` and records only the fields whose values changed (none: no event)."""
    before = audit_snapshot(instance)
    for field, value in changes.items():
        setattr(instance, field, value)
    if hasattr(instance, "updated_at"):
        instance.updated_at = timezone.now()
    clean_instance(instance)
    old, new = audit_diff(before, audit_snapshot(instance))
    new.pop("updated_at", None)
    old.pop("updated_at", None)
    if not new:
        instance.refresh_from_db()
        return instance
    instance.save()
    audit_record(
        org=instance.organization, actor=actor, event=event, target=instance, before=old, after=new
    )
    return instance


def delete_recorded(*, instance: models.Model, actor: Actor, event: str) -> None:
    """Deletes a row after recording its last contents."""
    audit_record(
        org=instance.organization,
        actor=actor,
        event=event,
        target=instance,
        before=audit_snapshot(instance),
    )
    instance.delete()
