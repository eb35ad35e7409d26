"""The demo's inbox (issue 35 point 4): a local webhook receiver and a mail sink that the demo
starts, hooks seeded to point at them, and the notifications page showing what they were
sent — while the outbound guard still refuses every other inward address, and refuses the
receiver's setting outside the demo."""

from __future__ import annotations

import json
import socket

import pytest
from django.core.exceptions import ImproperlyConfigured

from benchsite.env import env_demo_receiver_url
from runs.demo.hooks import EMAIL_NAME, EMAIL_TO, WEBHOOK_NAME, demo_hooks_seed
from runs.demo.inbox import inbox_start
from runs.models import AuditEvent, ConfirmedRecipient, NotificationDelivery, NotificationHook
from runs.services.notifications.hooks import hook_create, hook_send_test
from runs.services.outbound import outbound_url_problem

from .conftest import SYSTEM, signed_in

pytestmark = pytest.mark.django_db


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_it_refuses_inward_hooks_but_the_demo_s_own_receiver(settings):
    port = free_port()
    receiver = f"http://127.0.0.1:{port}/"
    # Unset (the default, and every hosted site): loopback is refused like any inward address.
    assert "private, loopback" in outbound_url_problem(f"{receiver}hook")
    settings.BENCHSITE_DEMO_RECEIVER_URL = receiver
    assert outbound_url_problem(f"{receiver}hook") is None
    # Only that scheme, address and port: not another port, name or scheme of this machine.
    for other in (
        f"http://127.0.0.1:{port + 1}/hook",
        f"http://localhost:{port}/hook",
        f"https://127.0.0.1:{port}/hook",
        f"http://127.0.0.2:{port}/hook",
        "http://10.0.0.1/hook",
    ):
        assert "private, loopback" in outbound_url_problem(other), other


def test_a_bad_hook_url_is_still_refused_by_field_in_the_demo(alice, settings):
    settings.BENCHSITE_DEMO_RECEIVER_URL = "http://127.0.0.1:9/"
    from runs.errors import DomainValidationError

    with pytest.raises(DomainValidationError) as refused:
        hook_create(
            org=alice.org,
            actor=SYSTEM,
            name="inward",
            kind="webhook",
            events=["run.finished"],
            url="http://127.0.0.1:8000/admin/",
        )
    assert "private, loopback" in refused.value.fields["url"][0]
    assert not NotificationHook.objects.exists()


@pytest.mark.parametrize(
    ("value", "debug", "words"),
    [
        ("http://127.0.0.1:8001/", False, "only with DEBUG"),
        ("http://10.0.0.5:8001/", True, "http://127.0.0.1:<port>/"),
        ("http://127.0.0.1/", True, "http://127.0.0.1:<port>/"),
        ("http://localhost:8001/", True, "http://127.0.0.1:<port>/"),
        ("https://127.0.0.1:8001/", True, "http://127.0.0.1:<port>/"),
    ],
)
def test_the_receiver_setting_names_one_loopback_port_in_the_demo_only(
    monkeypatch, value, debug, words
):
    monkeypatch.setenv("BENCHSITE_DEMO_RECEIVER_URL", value)
    with pytest.raises(ImproperlyConfigured, match="BENCHSITE_DEMO_RECEIVER_URL") as refused:
        env_demo_receiver_url("BENCHSITE_DEMO_RECEIVER_URL", debug=debug)
    assert words in str(refused.value)
    monkeypatch.setenv("BENCHSITE_DEMO_RECEIVER_URL", "http://127.0.0.1:8001/")
    assert env_demo_receiver_url("BENCHSITE_DEMO_RECEIVER_URL", debug=True).endswith(":8001/")
    monkeypatch.delenv("BENCHSITE_DEMO_RECEIVER_URL")
    assert env_demo_receiver_url("BENCHSITE_DEMO_RECEIVER_URL", debug=False) == ""


@pytest.fixture
def inbox(settings, tmp_path):
    """The demo's receiver and mail sink, as ``manage.py demo_run`` sets them up."""
    running = inbox_start(tmp_path / "inbox")
    settings.BENCHSITE_DEMO_RECEIVER_URL = running.url
    settings.BENCHSITE_DEMO_INBOX = str(running.folder)
    settings.EMAIL_BACKEND = "runs.demo.inbox.MailSinkBackend"
    yield running
    running.stop()


def test_the_demo_seeds_a_webhook_and_a_confirmed_mail_hook_once(alice, inbox, sent, settings):
    sent(lambda: demo_hooks_seed(org=alice.org, inbox=inbox, actor=SYSTEM))
    first = NotificationHook.objects.get(name=WEBHOOK_NAME)
    assert first.url_host == inbox.url.removeprefix("http://").rstrip("/")
    mail = NotificationHook.objects.get(name=EMAIL_NAME)
    assert ConfirmedRecipient.objects.filter(hook=mail, address=EMAIL_TO).exists()
    assert AuditEvent.objects.filter(event="notification_hook.confirm_recipient").count() == 1
    # A demo started again listens elsewhere: its webhook is replaced, the mail hook kept.
    again = inbox_start(inbox.folder)
    settings.BENCHSITE_DEMO_RECEIVER_URL = again.url
    try:
        sent(lambda: demo_hooks_seed(org=alice.org, inbox=again, actor=SYSTEM))
    finally:
        again.stop()
    hooks = NotificationHook.objects.filter(organization=alice.org)
    assert sorted(hooks.values_list("name", flat=True)) == sorted([WEBHOOK_NAME, EMAIL_NAME])
    assert hooks.get(name=WEBHOOK_NAME).pk != first.pk
    assert hooks.get(name=EMAIL_NAME).pk == mail.pk


def test_the_settings_page_shows_what_the_receiver_and_sink_were_sent(alice, charlie, inbox, sent):
    sent(lambda: demo_hooks_seed(org=alice.org, inbox=inbox, actor=SYSTEM))
    for hook in NotificationHook.objects.filter(organization=alice.org):
        sent(lambda hook=hook: hook_send_test(hook=hook, actor=SYSTEM))
    statuses = NotificationDelivery.objects.filter(notification__event="test")
    assert sorted(statuses.values_list("status", flat=True)) == ["delivered", "delivered"]
    [request] = [json.loads(line) for line in (inbox.folder / "webhooks.jsonl").open()]
    assert (request["event"], request["signature"]) == ("test", "valid")
    assert request["body"]["organization"] == "acme"
    page = signed_in(alice).get("/o/acme/settings/notifications/").content.decode()
    assert 'id="demo-inbox"' in page and inbox.url in page
    assert '<td class="signature-valid">valid</td>' in page
    assert "Test of the hook “Demo receiver”" in page
    assert f"to {EMAIL_TO} · [Benchsite · Acme] Test of the hook “Demo mail sink”" in page
    # Another tenant's page shows none of it.
    theirs = signed_in(charlie).get("/o/globex/settings/notifications/").content.decode()
    assert "Nothing received yet." in theirs and "No mail yet." in theirs
    assert "Demo receiver" not in theirs and EMAIL_TO not in theirs


def test_a_forged_delivery_reads_invalid(alice, inbox, sent):
    import httpx

    sent(lambda: demo_hooks_seed(org=alice.org, inbox=inbox, actor=SYSTEM))
    body = json.dumps({"organization": "acme", "summary": "forged"}).encode()
    httpx.post(inbox.url, content=body, headers={"X-Benchsite-Signature": "t=1,v1=00"})
    page = signed_in(alice).get("/o/acme/settings/notifications/").content.decode()
    assert '<td class="signature-invalid">invalid</td>' in page and "forged" in page


def test_there_is_no_inbox_outside_the_demo(alice):
    page = signed_in(alice).get("/o/acme/settings/notifications/").content.decode()
    assert 'id="demo-inbox"' not in page
