"""Outbound requests made on a tenant's behalf (issue 32, finding 1): the host is resolved
once, that address is checked, and the connection goes to it, with the URL's host name kept
as the Host header and the TLS server name. A name that answers a public address to the
check and 127.0.0.1 afterwards (DNS rebinding, ``tests/site/rebinding.py``) never makes a
real Celery worker post a hook, nor the endpoint check ask, to a server on 127.0.0.1."""

from __future__ import annotations

import datetime
import socket
import ssl
import threading
from http.server import ThreadingHTTPServer

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from runs.models import DeliveryStatus, Endpoint, NotificationDelivery
from runs.services.notifications.hooks import hook_create, hook_send_test
from tests.agents.fake_openai_server import FakeServer
from tests.polling import wait_for

from .conftest import SYSTEM
from .live_server import celery_worker
from .rebinding import PUBLIC, Rebinding
from .test_celery_worker import broker_queue  # noqa: F401 (a fixture, used by name)
from .test_notifications import Receiver

HOOK_HOST = "hooks.rebind.example"
KEY = "sk-endpoint-7f3e9c21"


@pytest.fixture
def receiver():
    running = Receiver()
    yield running
    running.server.shutdown()


def send_test(hook, capture):
    with capture(execute=True):
        return hook_send_test(hook=hook, actor=SYSTEM)


@pytest.mark.django_db(transaction=True)
@pytest.mark.needs_redis
@pytest.mark.usefixtures("broker_queue")  # tasks go over Redis to the worker below
@pytest.mark.slow
def test_a_worker_posts_a_hook_only_to_the_address_it_checked(
    alice, receiver, monkeypatch, tmp_path
):
    port = receiver.server.server_address[1]
    url = f"http://{HOOK_HOST}:{port}/hooks/s3cr3t-path"
    # Saved while the name answers a public address.
    Rebinding(HOOK_HOST, PUBLIC, PUBLIC).patch(monkeypatch)
    hook = hook_create(
        org=alice.org, actor=SYSTEM, name="ci", kind="webhook", events=["run.finished"], url=url
    ).hook
    # In the worker, the name answers the public address once, then 127.0.0.1.
    record = tmp_path / "connects"
    rebinding = Rebinding(HOOK_HOST, record=str(record))
    with celery_worker(tmp_path / "worker.log", env=rebinding.env()):
        delivery = hook_send_test(hook=hook, actor=SYSTEM)
        attempted = wait_for(
            lambda: NotificationDelivery.objects.filter(id=delivery.id, attempts__gte=1).first(),
            60,
            "the worker's attempt",
        )
    assert receiver.requests == []  # 127.0.0.1 was never posted to
    assert record.read_text().split() == [PUBLIC, str(port)]  # the checked address, once
    assert attempted.last_status_code is None
    assert attempted.last_error == "connection failed (ConnectError)"
    assert attempted.status == DeliveryStatus.PENDING  # retried later, checked anew


@pytest.mark.django_db
def test_a_hook_to_an_allowed_private_name_keeps_its_host_header(
    alice, receiver, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.BENCHSITE_OUTBOUND_PRIVATE_HOSTS = [HOOK_HOST]  # the operator's, by name
    port = receiver.server.server_address[1]
    resolver = Rebinding(HOOK_HOST, "127.0.0.1", "127.0.0.1").patch(monkeypatch)
    created = hook_create(
        org=alice.org,
        actor=SYSTEM,
        name="ci",
        kind="webhook",
        events=["run.finished"],
        url=f"http://{HOOK_HOST}:{port}/hooks/s3cr3t-path",
    )
    receiver.secret = created.secret
    resolver.lookups = 0
    delivery = send_test(created.hook, django_capture_on_commit_callbacks)
    (request,) = receiver.requests
    assert request["headers"]["Host"] == f"{HOOK_HOST}:{port}"
    assert request["path"] == "/hooks/s3cr3t-path"
    assert receiver.verified(request)["event"] == "test"
    assert resolver.lookups == 1  # resolved once: checked and connected to
    delivery.refresh_from_db()
    assert (delivery.status, delivery.last_status_code) == (DeliveryStatus.DELIVERED, 200)


def tls_files(tmp_path, host: str) -> tuple[str, str, str]:
    """A CA (its certificate file) and a certificate and key for ``host`` it signed; the
    certificate names the host only, not an address."""
    now = datetime.datetime.now(datetime.UTC)

    def certificate(subject, issuer, key, signer, ca: bool, names=()):
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if ca:
            builder = builder.add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
        if names:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(name) for name in names]),
                critical=False,
            )
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = certificate("test CA", "test CA", ca_key, ca_key, True)
    leaf = certificate(host, "test CA", key, ca_key, False, names=[host])
    paths = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return tuple(str(path) for path in paths)


@pytest.mark.django_db
def test_a_https_hook_is_verified_against_its_host_name(
    alice, settings, monkeypatch, tmp_path, django_capture_on_commit_callbacks
):
    settings.BENCHSITE_OUTBOUND_PRIVATE_HOSTS = [HOOK_HOST]
    ca_file, cert_file, key_file = tls_files(tmp_path, HOOK_HOST)
    monkeypatch.setenv("SSL_CERT_FILE", ca_file)  # the site trusts the test's CA
    receiver = Receiver()
    server_names: list[str | None] = []
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    context.sni_callback = lambda sock, name, ctx: server_names.append(name)
    tls = ThreadingHTTPServer(("127.0.0.1", 0), receiver.server.RequestHandlerClass)
    tls.socket = context.wrap_socket(tls.socket, server_side=True)
    threading.Thread(target=tls.serve_forever, daemon=True).start()
    try:
        Rebinding(HOOK_HOST, "127.0.0.1", "127.0.0.1").patch(monkeypatch)
        created = hook_create(
            org=alice.org,
            actor=SYSTEM,
            name="ci",
            kind="webhook",
            events=["run.finished"],
            url=f"https://{HOOK_HOST}:{tls.server_address[1]}/h",
        )
        delivery = send_test(created.hook, django_capture_on_commit_callbacks)
    finally:
        tls.shutdown()
        receiver.server.shutdown()
    delivery.refresh_from_db()
    assert (delivery.status, delivery.last_error) == (DeliveryStatus.DELIVERED, "")
    assert server_names == [HOOK_HOST]
    assert receiver.requests[0]["headers"]["Host"] == f"{HOOK_HOST}:{tls.server_address[1]}"


@pytest.mark.django_db
def test_the_endpoint_check_asks_only_the_address_it_checked(alice, settings, monkeypatch):
    settings.BENCHSITE_ENDPOINT_HOSTS = ["*.rebind.example"]
    with FakeServer(api_key=KEY) as server:
        rebinding = Rebinding("llm.rebind.example").patch(monkeypatch)
        before = server.auth()
        response = alice.client().post(
            f"/api/v1/orgs/{alice.org.slug}/endpoints/",
            {
                "name": "prod",
                "base_url": f"http://llm.rebind.example:{server.port}",
                "served_model_name": "fake",
                "api_key": KEY,
            },
            format="json",
        )
        assert server.auth() == before  # the server on 127.0.0.1 was never asked
    assert response.status_code == 400, response.json()
    (message,) = response.json()["error"]["fields"]["base_url"]
    assert message.startswith("Could not connect to the endpoint")
    assert rebinding.connects == [PUBLIC] and rebinding.lookups == 1
    assert not Endpoint.objects.exists()


@pytest.mark.django_db
def test_a_name_of_two_addresses_is_sent_to_the_next_when_one_refuses(
    alice, receiver, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.BENCHSITE_OUTBOUND_PRIVATE_HOSTS = [HOOK_HOST]
    real = socket.getaddrinfo
    asked: list[str] = []

    def two_answers(host, port, *args, **kwargs):
        if host != HOOK_HOST:
            return real(host, port, *args, **kwargs)
        asked.append(host)
        # Nothing listens on 127.0.0.2: it refuses, as a dead address of a name does.
        return [
            (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))
            for address in ("127.0.0.2", "127.0.0.1")
        ]

    monkeypatch.setattr(socket, "getaddrinfo", two_answers)
    port = receiver.server.server_address[1]
    created = hook_create(
        org=alice.org,
        actor=SYSTEM,
        name="ci",
        kind="webhook",
        events=["run.finished"],
        url=f"http://{HOOK_HOST}:{port}/h",
    )
    asked.clear()
    delivery = send_test(created.hook, django_capture_on_commit_callbacks)
    delivery.refresh_from_db()
    assert (delivery.status, delivery.last_status_code) == (DeliveryStatus.DELIVERED, 200)
    assert asked == [HOOK_HOST]  # one lookup, both of its answers checked and tried
    assert receiver.requests[0]["headers"]["Host"] == f"{HOOK_HOST}:{port}"
