"""Rows a batch write collects and inserts together.

Guarantees of ``PendingRows``: ``flush`` inserts every row added since the last flush, one
statement per model, models in the order their first row was added, rows of a model in the
order they were added; nothing is inserted before ``flush``, and a database error (a unique
constraint) is raised as Django's (``IntegrityError``), so the caller's transaction rolls
back as with ``save()``. A reader that must see the batch's own rows flushes first. Rows are
plain model instances whose primary key the database assigns and nobody reads back:
``save()`` and its signals do not run, field defaults and ``pre_save`` (``auto_now``) do.
Models without a parent model (multi-table inheritance), as ``bulk_create`` requires.

On PostgreSQL the statement is a ``COPY … FROM STDIN`` (logged like a query where queries
are logged): Django's ``bulk_create`` sends a batch through ``UNNEST`` arrays whose JSON
elements psycopg escapes character by character in Python, which cost more CPU than the
rest of a stored agent message. Elsewhere (the SQLite demo) it is ``bulk_create``. A JSON
field whose value is a ``JsonText`` (JSON already written, such as a message's canonical
form) is stored from that text, not written again.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable

from django.db import connection, models


class JsonText(str):
    """The JSON text of a JSON field's value, for ``PendingRows`` to store as it is."""


class PendingRows:
    """Model instances waiting for one INSERT per model (see the module's guarantees)."""

    def __init__(self) -> None:
        # dict keeps insertion order: a model's rows go in before those of a model added later
        # (a row that points at an earlier model's row then finds it).
        self._rows: dict[type[models.Model], list[models.Model]] = {}

    def add(self, row: models.Model) -> None:
        self._rows.setdefault(type(row), []).append(row)

    def flush(self) -> None:
        rows, self._rows = self._rows, {}
        for model, instances in rows.items():
            if connection.vendor == "postgresql":
                _copy_rows(model, instances)
            else:
                model.objects.bulk_create(instances)


# Fields whose attribute value psycopg writes into COPY exactly as Django would prepare it
# on PostgreSQL: the value goes as it is. Django's per-field preparation of every other
# field, for every row, was most of the CPU of storing a batch.
_AS_IS_FIELDS = (
    models.BooleanField,
    models.CharField,
    models.FloatField,
    models.IntegerField,  # and the auto and positive integer fields
    models.TextField,
    models.UUIDField,
)


def _column_value(field: models.Field) -> Callable[[object], object]:
    """How a row's value of ``field`` (after ``pre_save``) goes into the COPY."""
    target = field.target_field if isinstance(field, models.ForeignKey) else field
    if isinstance(target, _AS_IS_FIELDS):
        return lambda value: value
    if isinstance(field, models.DateTimeField):
        # Aware datetimes as they are; anything else the way Django makes it aware.
        prepare = field.get_db_prep_save
        return lambda value: (
            value if value is None or getattr(value, "tzinfo", None) else prepare(value, connection)
        )
    if isinstance(field, models.JSONField):
        encoder = field.encoder
        # None is SQL NULL, as Django stores it; JSON text already written goes as it is.
        return lambda value: (
            value
            if value is None or isinstance(value, JsonText)
            else json.dumps(value, cls=encoder)
        )
    return lambda value: field.get_db_prep_save(value, connection)


def _copy_rows(model: type[models.Model], instances: list[models.Model]) -> None:
    meta = model._meta
    fields = [
        field
        for field in meta.local_concrete_fields
        if field is not meta.auto_field and not field.generated  # the database writes those
    ]
    prepared = [(field.pre_save, _column_value(field)) for field in fields]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    sql = f"COPY {quote(meta.db_table)} ({columns}) FROM STDIN"
    with connection.cursor() as cursor:
        # A debug cursor (DEBUG, CaptureQueriesContext) records it as it records a query.
        logged = cursor.debug_sql(sql) if hasattr(cursor, "debug_sql") else contextlib.nullcontext()
        with logged, connection.wrap_database_errors, cursor.cursor.copy(sql) as copy:
            for instance in instances:
                copy.write_row([value(pre_save(instance, True)) for pre_save, value in prepared])
