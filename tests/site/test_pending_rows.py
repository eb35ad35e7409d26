"""``PendingRows`` on PostgreSQL (issue 20, scale): its COPY stores exactly what Django's own
insert stores, though it prepares most values itself, and JSON already written is stored from
its text."""

from __future__ import annotations

import datetime
import json

import pytest
from django.utils import timezone

from runs.models import AgentMessageRecord, Measurement, Trial
from runs.services.pending_rows import JsonText, PendingRows

from .test_agent_ingest import _new_run

pytestmark = pytest.mark.django_db


def _columns(instance) -> dict:
    """The row as stored, without its key."""
    row = type(instance).objects.filter(pk=instance.pk).values().get()
    row.pop("id")
    return row


def test_its_copy_stores_what_djangos_insert_stores(alice):
    run, _ = _new_run(alice.org)
    trial = Trial.objects.create(run=run, organization=alice.org, index=0, serve_config={})
    when = datetime.datetime(2026, 12, 3, 21, 0, 0, 123456, tzinfo=datetime.UTC)

    def measurement(**values) -> Measurement:
        return Measurement(
            organization_id=alice.org.id,
            trial=trial,
            concurrency=None,  # SQL NULL, not JSON null
            request_rate=2.5,
            request_rate_infinite=True,
            result={"completed": 3, "text": 'é ✓ \\ \t\n "quoted"', "nested": [1, None, 2.5]},
            server_metrics={},
            gpus=[{"name": "H100", "power_w": {"mean": 612.25, "max": None}}],
            created_at=when,
            **values,
        )

    by_django = measurement()
    by_django.save()
    rows = PendingRows()
    rows.add(measurement())
    rows.flush()
    by_copy = Measurement.objects.exclude(pk=by_django.pk).get(trial=trial)
    assert _columns(by_copy) == _columns(by_django)
    assert by_copy.concurrency is None and by_copy.created_at == when


def test_json_already_written_is_stored_from_its_text(alice):
    run, _ = _new_run(alice.org)
    content = {"b": 1, "a": "é", "list": [True, None, 2.5]}
    rows = PendingRows()
    rows.add(
        AgentMessageRecord(
            organization_id=alice.org.id,
            run=run,
            epoch=0,
            seq=7,
            type="heartbeat",
            payload=JsonText(json.dumps(content, sort_keys=True, ensure_ascii=False)),
            digest="d" * 64,
            received_at=timezone.now(),
        )
    )
    rows.flush()
    stored = AgentMessageRecord.objects.get(run=run, seq=7)
    assert stored.payload == content and stored.digest == "d" * 64


def test_rows_given_as_values_are_stored_as_instances_would_be_by_either_insert(alice, monkeypatch):
    """``add_values`` and JSON text take the COPY on PostgreSQL and ``bulk_create`` elsewhere
    (the SQLite demo); both store the same rows."""
    run, _ = _new_run(alice.org)
    content = {"type": "heartbeat", "note": "é"}

    def add_both(rows: PendingRows, seq: int) -> None:
        values = {
            "organization_id": alice.org.id,
            "run_id": run.id,
            "epoch": 0,
            "type": "heartbeat",
            "digest": "",
            "received_at": timezone.now(),
        }
        rows.add_values(
            AgentMessageRecord, seq=seq, payload=JsonText(json.dumps(content)), **values
        )
        rows.add(AgentMessageRecord(seq=seq + 1, payload=JsonText(json.dumps(content)), **values))

    by_copy = PendingRows()
    add_both(by_copy, 1)
    by_copy.flush()

    class NotPostgres:  # the connection's vendor as the SQLite demo's
        vendor = "sqlite"

    monkeypatch.setattr("runs.services.pending_rows.connection", NotPostgres())
    by_bulk_create = PendingRows()
    add_both(by_bulk_create, 3)
    by_bulk_create.flush()

    stored = AgentMessageRecord.objects.filter(run=run).order_by("seq")
    assert [(m.seq, m.payload) for m in stored] == [(seq, content) for seq in (1, 2, 3, 4)]
