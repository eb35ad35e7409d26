"""Rows a batch write collects and inserts together.

Guarantees of ``PendingRows``: ``flush`` inserts every row added since the last flush, one
statement per model, models in the order their first row was added, rows of a model in the
order they were added; nothing is inserted before ``flush``, and a database error (a unique
constraint) is raised as Django's (``IntegrityError``), so the caller's transaction rolls
back as with ``save()``. A reader that must see the batch's own rows flushes first. Rows are
plain model instances, or the values of every column of one (``add_values``), whose primary
key the database assigns and nobody reads back: ``save()`` and its signals do not run; an
instance's field defaults and ``pre_save`` (``auto_now``) do. Models without a parent model
(multi-table inheritance), as ``bulk_create`` requires.

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
import operator
from collections.abc import Callable

from django.db import connection, models


class JsonText(str):
    """The JSON text of a JSON field's value, for ``PendingRows`` to store as it is."""


class _Values(dict):
    """One row given as its column values (by attribute name), not as a model instance."""


Row = models.Model | _Values


class PendingRows:
    """Rows waiting for one INSERT per model (see the module's guarantees)."""

    def __init__(self) -> None:
        # dict keeps insertion order: a model's rows go in before those of a model added later
        # (a row that points at an earlier model's row then finds it).
        self._rows: dict[type[models.Model], list[Row]] = {}

    def add(self, row: models.Model) -> None:
        self._rows.setdefault(type(row), []).append(row)

    def add_values(self, model: type[models.Model], **values: object) -> None:
        """A row of ``model`` given by the value of every column it writes (attribute names:
        ``run_id``, not ``run``; defaults are not applied): the same row as
        ``add(model(**values))``, without building the instance, which on a hot path costs
        more than writing the row."""
        self._rows.setdefault(model, []).append(_Values(values))

    def flush(self) -> None:
        rows, self._rows = self._rows, {}
        for model, pending in rows.items():
            if connection.vendor == "postgresql":
                _copy_rows(model, pending)
            else:
                model.objects.bulk_create([_instance(model, row) for row in pending])


def _instance(model: type[models.Model], row: Row) -> models.Model:
    """``row`` as a model instance for ``bulk_create``, its JSON text decoded (Django writes
    a JSON field's value itself there)."""
    if isinstance(row, _Values):
        return model(**{name: _decoded(value) for name, value in row.items()})
    for field in model._meta.concrete_fields:
        value = getattr(row, field.attname, None)
        if isinstance(value, JsonText):
            setattr(row, field.attname, _decoded(value))
    return row


def _decoded(value: object) -> object:
    return json.loads(value) if isinstance(value, JsonText) else value


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


def _row_value(field: models.Field) -> Callable[[models.Model], object]:
    """How a row's value of ``field`` is read off its instance, as ``pre_save`` reads it on
    an insert: the attribute itself, unless the field's type changes it first (``auto_now``)."""
    if type(field).pre_save is models.Field.pre_save:
        return operator.attrgetter(field.attname)
    return lambda instance: field.pre_save(instance, True)


def _copy_rows(model: type[models.Model], rows: list[Row]) -> None:
    meta = model._meta
    fields = [
        field
        for field in meta.local_concrete_fields
        if field is not meta.auto_field and not field.generated  # the database writes those
    ]
    prepared = [(_row_value(field), _column_value(field)) for field in fields]
    given = [(operator.itemgetter(field.attname), _column_value(field)) for field in fields]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    sql = f"COPY {quote(meta.db_table)} ({columns}) FROM STDIN"
    with connection.cursor() as cursor:
        # A debug cursor (DEBUG, CaptureQueriesContext) records it as it records a query.
        logged = cursor.debug_sql(sql) if hasattr(cursor, "debug_sql") else contextlib.nullcontext()
        with logged, connection.wrap_database_errors, cursor.cursor.copy(sql) as copy:
            for row in rows:
                readers = given if isinstance(row, _Values) else prepared
                copy.write_row([column(read(row)) for read, column in readers])
