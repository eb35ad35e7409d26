"""Uploaded files kept with their row: both stored and recorded, or neither."""

from __future__ import annotations

from django.core.files.base import ContentFile
from django.db import models, transaction

from runs.actors import Actor
from runs.services.audited_writes import create_recorded, delete_recorded


def upload_create_recorded(
    *, instance: models.Model, file_name: str, raw: bytes, actor: Actor, event: str
) -> models.Model:
    """Saves ``raw`` as the row's ``file`` under ``file_name``, then the row and its audit
    event; when the row is not written, its file is deleted too."""
    instance.file.save(file_name, ContentFile(raw), save=False)
    try:
        return create_recorded(instance=instance, actor=actor, event=event)
    except Exception:
        instance.file.delete(save=False)
        raise


def upload_delete_recorded(*, instance: models.Model, actor: Actor, event: str) -> None:
    """Deletes the row and records ``event``; its file goes once the deletion commits (a
    rollback keeps both)."""
    file_name, storage = instance.file.name, instance.file.storage
    delete_recorded(instance=instance, actor=actor, event=event)
    transaction.on_commit(lambda: storage.delete(file_name))
