"""The audit log: one event per write, append-only, hash-chained, verifiable."""

from __future__ import annotations

import io
import itertools

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from runs.audit import audit_verify
from runs.models import AuditEvent
from runs.models.audit import AuditLogIsAppendOnly

from .conftest import make_experiment


def test_it_chains_every_event_to_the_previous_one(alice):
    make_experiment(alice.org)
    events = list(AuditEvent.objects.filter(organization=alice.org).order_by("seq"))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    for previous, current in itertools.pairwise(events):
        assert current.prev_hash == previous.hash
    assert audit_verify(alice.org) is None


def test_it_keeps_one_chain_per_organization(alice, charlie):
    make_experiment(alice.org)
    make_experiment(charlie.org)
    assert audit_verify(alice.org) is None
    assert audit_verify(charlie.org) is None
    first_b = AuditEvent.objects.filter(organization=charlie.org).order_by("seq").first()
    assert first_b.seq == 1


def test_it_refuses_updates_and_deletes_through_the_orm(alice):
    event = AuditEvent.objects.filter(organization=alice.org).first()
    event.event = "something.else"
    with pytest.raises(AuditLogIsAppendOnly):
        event.save()
    with pytest.raises(AuditLogIsAppendOnly):
        event.delete()
    with pytest.raises(AuditLogIsAppendOnly):
        AuditEvent.objects.filter(organization=alice.org).update(event="x.y")
    with pytest.raises(AuditLogIsAppendOnly):
        AuditEvent.objects.filter(organization=alice.org).delete()


def _tamper(sql: str, params) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def test_it_finds_a_row_altered_directly_in_the_database(alice):
    make_experiment(alice.org)
    victim = AuditEvent.objects.filter(organization=alice.org, event="experiment.create").get()
    _tamper("UPDATE runs_auditevent SET actor_label = %s WHERE id = %s", ["mallory", victim.id])
    chain_break = audit_verify(alice.org)
    assert chain_break is not None
    assert chain_break.seq == victim.seq
    assert "hash" in chain_break.reason


def test_it_finds_a_row_deleted_directly_in_the_database(alice):
    make_experiment(alice.org)
    events = list(AuditEvent.objects.filter(organization=alice.org).order_by("seq"))
    _tamper("DELETE FROM runs_auditevent WHERE id = %s", [events[1].id])
    chain_break = audit_verify(alice.org)
    assert chain_break is not None and chain_break.seq == events[2].seq


def test_it_names_the_first_broken_row_in_the_command(alice, charlie):
    make_experiment(alice.org)
    victim = AuditEvent.objects.filter(organization=alice.org).order_by("seq")[1]
    _tamper("UPDATE runs_auditevent SET after = %s WHERE id = %s", ['{"role": "owner"}', victim.id])
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("audit_verify", stdout=out)
    text = out.getvalue()
    assert f"acme: BROKEN at event #{victim.seq} (id {victim.id})" in text
    assert "globex: ok" in text


def test_it_verifies_clean_chains_in_the_command(alice):
    make_experiment(alice.org)
    out = io.StringIO()
    call_command("audit_verify", "--org", "acme", stdout=out)
    assert "acme: ok" in out.getvalue()


def test_it_never_records_token_secrets(alice):
    for event in AuditEvent.objects.filter(organization=alice.org, event="token.create"):
        assert "token_hash" not in (event.after or {})
        assert alice.token not in str(event.after)


def test_it_records_the_budgets_an_experiment_takes_with_it(alice):
    from decimal import Decimal

    from runs.services.budgets import budget_set
    from runs.services.experiments import experiment_delete

    from .conftest import SYSTEM

    experiment = make_experiment(alice.org)
    budget_set(org=alice.org, actor=SYSTEM, limit_usd=Decimal(10), experiment=experiment)
    last = AuditEvent.objects.filter(organization=alice.org).order_by("-seq").first().seq
    experiment_delete(experiment=experiment, actor=SYSTEM)
    events = AuditEvent.objects.filter(organization=alice.org, seq__gt=last).order_by("seq")
    assert [e.event for e in events] == ["budget.delete", "experiment.delete"]
    assert audit_verify(alice.org) is None
