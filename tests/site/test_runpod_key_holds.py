"""An organization's Runpod key stays while a pod rented with it is not released (issue 32
item 3): clearing or replacing it is refused, naming the runs, by the API and the settings
page alike; a pod whose key is gone anyway (an operator deleted the row, the encryption key
changed) is surfaced to the operator, never retried in silence."""

from __future__ import annotations

import logging
import sys

import pytest
from cryptography.fernet import Fernet
from django.urls import reverse
from django.utils import timezone

from runs.models import ProviderCredential, Run
from runs.secrets import decrypt_secret
from runs.services import reconcile
from runs.services.reconcile import runs_reconcile

from .conftest import make_experiment, make_model
from .runpod_setup import fake_runpod, post_run, store_runpod_key

pytestmark = pytest.mark.django_db

KEY = "rpa_acme_holds_0123456789abcdef"
NEW_KEY = "rpa_acme_holds_fedcba9876543210"
WAITING_AGENT = [sys.executable, "-c", "import time; time.sleep(300)"]


@pytest.fixture
def fake(monkeypatch, settings):
    with fake_runpod(
        (KEY, NEW_KEY), agent_command=WAITING_AGENT, monkeypatch=monkeypatch, settings=settings
    ) as api:
        yield api


@pytest.fixture
def rented(alice, fake, django_capture_on_commit_callbacks) -> Run:
    """A run of alice's organization whose Runpod pod is rented with its key."""
    store_runpod_key(alice, KEY)
    experiment = make_experiment(alice.org, model=make_model(alice.org))
    with django_capture_on_commit_callbacks(execute=True):
        response = post_run(alice, experiment)
    assert response.status_code == 201, response.json()
    run = Run.objects.get(id=response.json()["id"])
    assert run.provider == "runpod" and run.pod_id and len(fake.pods(KEY)) == 1
    return run


def key_url(person) -> str:
    return reverse("provider-key-detail", kwargs={"org": person.org.slug, "provider": "runpod"})


def stored_key(person) -> str:
    credential = ProviderCredential.objects.get(organization=person.org, provider="runpod")
    return decrypt_secret(credential.encrypted_key)


def end_and_release(run: Run) -> None:
    """The run is cancelled and, after the grace, reconcile gives its pod back."""
    Run.objects.filter(id=run.id).update(cancel_requested_at=timezone.now(), cancel_reason="done")
    runs_reconcile(now=timezone.now() + reconcile.CANCEL_GRACE + reconcile.QUEUE_GRACE)
    run.refresh_from_db()
    assert run.pod_terminated_at is not None


def test_it_refuses_to_clear_or_replace_the_key_while_a_pod_is_rented(alice, rented):
    client = alice.client()

    cleared = client.delete(key_url(alice))
    replaced = client.put(key_url(alice), {"api_key": NEW_KEY}, format="json")

    for response in (cleared, replaced):
        assert response.status_code == 409, response.content
        message = response.json()["error"]["message"]
        assert str(rented.id) in message and rented.pod_id in message
        assert KEY not in response.content.decode() and NEW_KEY not in response.content.decode()
    assert stored_key(alice) == KEY  # nothing changed
    # The same key again (re-saved after the encryption key was rotated) is no change.
    assert client.put(key_url(alice), {"api_key": KEY}, format="json").status_code == 200

    end_and_release(rented)
    assert client.put(key_url(alice), {"api_key": NEW_KEY}, format="json").status_code == 200
    assert stored_key(alice) == NEW_KEY
    assert client.delete(key_url(alice)).status_code == 204
    assert not ProviderCredential.objects.filter(organization=alice.org).exists()


def test_the_settings_page_keeps_the_same_rule(alice, rented, client):
    client.force_login(alice.user)
    page = reverse("org-runpod-key", args=[alice.org.slug])

    removed = client.post(reverse("org-runpod-key-remove", args=[alice.org.slug]), follow=True)
    replaced = client.post(page, {"api_key": NEW_KEY}, follow=True)

    for response in (removed, replaced):
        assert response.status_code == 200
        assert str(rented.id) in response.content.decode()
        assert "cannot be" in response.content.decode()
    assert stored_key(alice) == KEY


def test_another_organizations_pods_do_not_hold_a_key(alice, charlie, rented):
    store_runpod_key(charlie, NEW_KEY)
    assert charlie.client().delete(key_url(charlie)).status_code == 204


@pytest.mark.parametrize("gone", ["deleted", "undecryptable"])
def test_reconcile_surfaces_a_pod_whose_key_is_gone(
    alice, rented, fake, settings, caplog, admin_client, gone
):
    if gone == "deleted":  # an operator deleted the row behind the site's back
        ProviderCredential.objects.filter(organization=alice.org).delete()
    else:  # CREDENTIALS_ENCRYPTION_KEY changed since the key was saved
        settings.CREDENTIALS_ENCRYPTION_KEY = Fernet.generate_key().decode()
    caplog.set_level(logging.DEBUG)

    report = runs_reconcile()
    again = runs_reconcile()

    rented.refresh_from_db()
    assert report.unreachable == [str(rented.id)] and again.unreachable == []
    assert rented.pod_unreachable and rented.pod_id in rented.pod_unreachable
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1  # once, not every pass
    assert str(rented.id) in errors[0] and rented.pod_id in errors[0]
    assert KEY not in caplog.text
    assert len(fake.pods(KEY)) == 1  # still rented: nothing could terminate it
    changelist = reverse("admin:runs_run_changelist")
    listed = admin_client.get(changelist, {"pod_unreachable": "yes"}).content.decode()
    assert str(rented.id) in listed  # staff find it in the admin

    # The owner sets the key again (allowed: the stored one cannot be used): the pod is
    # reached again, and released once its run ends.
    if gone == "undecryptable":
        assert (
            alice.client().put(key_url(alice), {"api_key": KEY}, format="json").status_code == 200
        )
    else:
        store_runpod_key(alice, KEY)
    runs_reconcile()
    rented.refresh_from_db()
    assert rented.pod_unreachable == ""
    end_and_release(rented)
    assert fake.pods(KEY) == []
