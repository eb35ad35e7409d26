"""The audit log page's chain status (``runs.audit.audit_chain_check``): it verifies only the
events after the organization's checkpoint, finds any break there, and shows the break the
periodic full verification (``manage.py audit_verify``) found before it."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from runs import audit, tasks
from runs.audit import audit_chain_check, audit_chain_verify_full
from runs.models import AuditChainCheckpoint, AuditEvent, ModelSpec

from .conftest import make_experiment, make_model

AUDIT = "/o/acme/audit/"


def grow(org, *, name: str) -> None:
    """A few more events in ``org``'s chain (an experiment and what it records)."""
    model = ModelSpec.objects.filter(organization=org).first() or make_model(org)
    make_experiment(org, model=model, name=name)


def _tamper(event: AuditEvent) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_auditevent SET actor_label = %s WHERE id = %s", ["mallory", event.id]
        )


def _events(org) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(organization=org).order_by("seq"))


def _status(web) -> str:
    text = web.get(AUDIT).content.decode()
    if 'data-chain="verified"' in text:
        return "verified"
    assert 'data-chain="broken"' in text
    return text.split("Chain broken at #", 1)[1].split("<", 1)[0]


@pytest.fixture
def hashed(monkeypatch):
    """How many events were hashed since the test began."""
    calls = []
    original = audit._event_hash

    def counting(event):
        calls.append(event.seq)
        return original(event)

    monkeypatch.setattr(audit, "_event_hash", counting)
    return calls


def test_it_verifies_only_the_events_after_the_checkpoint(alice, web, hashed):
    for n in range(3):
        grow(alice.org, name=f"e{n}")
    total = len(_events(alice.org))
    hashed.clear()  # appending hashes too
    assert _status(web) == "verified"  # the first view walks the whole chain once
    assert sorted(hashed) == list(range(1, total + 1))
    checkpoint = AuditChainCheckpoint.objects.get(organization=alice.org)
    assert checkpoint.seq == total and checkpoint.full_verified_at is None
    grow(alice.org, name="e3")
    new = len(_events(alice.org)) - total
    hashed.clear()
    assert _status(web) == "verified"
    # The checkpoint's own event again, and the new ones: nothing older.
    assert sorted(hashed) == list(range(total, total + new + 1))
    assert AuditChainCheckpoint.objects.get(organization=alice.org).seq == total + new


def test_it_shows_a_tampered_event_after_the_checkpoint(alice, web):
    grow(alice.org, name="e0")
    assert _status(web) == "verified"
    checkpoint = AuditChainCheckpoint.objects.get(organization=alice.org).seq
    grow(alice.org, name="e1")
    victim = _events(alice.org)[-1]
    assert victim.seq > checkpoint
    _tamper(victim)
    assert _status(web) == str(victim.seq)
    assert _status(web) == str(victim.seq)  # and on every view after
    # The checkpoint never moves past a break: up to the event before it at most.
    assert AuditChainCheckpoint.objects.get(organization=alice.org).seq == victim.seq - 1


def test_it_shows_a_tampered_checkpoint_event(alice, web):
    grow(alice.org, name="e0")
    assert _status(web) == "verified"
    checkpoint = AuditChainCheckpoint.objects.get(organization=alice.org)
    _tamper(AuditEvent.objects.get(organization=alice.org, seq=checkpoint.seq))
    assert _status(web) == str(checkpoint.seq)


def test_it_leaves_an_older_tampered_event_to_the_full_verification_then_shows_it(alice, web):
    grow(alice.org, name="e0")
    assert _status(web) == "verified"
    victim = _events(alice.org)[0]
    _tamper(victim)
    # Before the checkpoint: not re-read by the page (the module docstring says so)...
    assert _status(web) == "verified"
    # ...but found by the periodic full verification, which the page then shows until a
    # full verification passes again.
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("audit_verify", "--org", "acme", stdout=out)
    assert f"BROKEN at event #{victim.seq}" in out.getvalue()
    assert _status(web) == str(victim.seq)
    grow(alice.org, name="e1")
    assert _status(web) == str(victim.seq)
    checkpoint = AuditChainCheckpoint.objects.get(organization=alice.org)
    assert checkpoint.full_break_seq == victim.seq and checkpoint.full_verified_at is not None


def test_it_clears_a_recorded_break_once_a_full_verification_passes(alice, web):
    grow(alice.org, name="e0")
    victim = _events(alice.org)[0]
    original = victim.actor_label
    _tamper(victim)
    assert audit_chain_verify_full(org=alice.org).seq == victim.seq
    assert _status(web) == str(victim.seq)
    with connection.cursor() as cursor:  # the operator restores the row from a backup
        cursor.execute(
            "UPDATE runs_auditevent SET actor_label = %s WHERE id = %s", [original, victim.id]
        )
    assert audit_chain_verify_full(org=alice.org) is None
    assert _status(web) == "verified"
    checkpoint = AuditChainCheckpoint.objects.get(organization=alice.org)
    assert checkpoint.full_break_seq is None and checkpoint.seq == len(_events(alice.org))


def test_it_records_a_passing_full_verification_as_the_checkpoint(alice, hashed):
    grow(alice.org, name="e0")
    out = io.StringIO()
    call_command("audit_verify", "--org", "acme", stdout=out)
    assert "acme: ok" in out.getvalue()
    checkpoint = AuditChainCheckpoint.objects.get(organization=alice.org)
    assert checkpoint.seq == len(_events(alice.org)) and checkpoint.full_verified_at
    hashed.clear()
    status = audit_chain_check(org=alice.org)
    assert status.chain_break is None and status.checked == 1 and hashed == [checkpoint.seq]
    assert status.full_verified_at == checkpoint.full_verified_at


def test_it_keeps_one_checkpoint_per_organization(alice, charlie, web):
    grow(charlie.org, name="theirs")
    victim = _events(charlie.org)[-1]
    _tamper(victim)
    assert _status(web) == "verified"
    assert audit_chain_check(org=charlie.org).chain_break.seq == victim.seq
    theirs = AuditChainCheckpoint.objects.get(organization=charlie.org)
    ours = AuditChainCheckpoint.objects.get(organization=alice.org)
    assert theirs.seq == victim.seq - 1 and ours.seq == len(_events(alice.org))


def test_the_daily_beat_task_walks_every_chain_and_the_page_says_when(
    alice, charlie, web, settings
):
    entry = settings.CELERY_BEAT_SCHEDULE["audit-chains-verify"]
    assert entry["task"] == "runs.tasks.audit_chains_verify" and entry["schedule"] == 86400
    page = web.get(AUDIT).content.decode()
    assert "the daily full walk has not run yet" in page

    grow(alice.org, name="more")
    _status(web)  # the page's checkpoint passes the events: only the full walk sees them now
    victim = _events(charlie.org)[0]
    _tamper(victim)
    assert tasks.audit_chains_verify.delay().get() == {"broken": ["globex"]}
    checkpoint = AuditChainCheckpoint.objects.get(organization=alice.org)
    page = web.get(AUDIT).content.decode()
    assert f'data-full-verified="{checkpoint.full_verified_at.isoformat()}"' in page
    assert "The whole chain\n  was last walked" in page
    assert audit_chain_check(org=charlie.org).chain_break.seq == victim.seq
