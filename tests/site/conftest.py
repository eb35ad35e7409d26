"""The cast and small factories for site tests (need Django and a database)."""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest
from django.db import transaction
from django.test import Client, override_settings
from rest_framework.test import APIClient

from agents.hardware import MODEL_PRESETS
from runs.actors import Actor
from runs.gpu_catalogue_seed import seed_gpu_catalogue
from runs.models import GpuType, Organization, User
from runs.run_as_started import run_frozen_fields
from runs.selectors.ended_trial_figures import ended_trial_figures
from runs.selectors.estimates import experiment_estimate
from runs.services.catalogue import model_spec_create
from runs.services.experiments import experiment_create
from runs.services.tenancy import membership_add, org_create, token_create

from .live_server import broker_queue_delete

SYSTEM = Actor.system("tests")


# The cast's passwords are hashed cheaply: a real hasher costs ~0.3 s per person, and only
# Django's own tests need to prove it.
CHEAP_PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def isolated_media_and_cheap_hashing(settings, tmp_path):
    # Uploaded datasets land in the test's own directory (tmp_path), never in the checkout.
    settings.MEDIA_ROOT = tmp_path
    settings.PASSWORD_HASHERS = CHEAP_PASSWORD_HASHERS


@contextlib.contextmanager
def rows_kept_for_the_module(django_db_blocker, media: Path) -> Iterator[None]:
    """Inside: rows written now stay for every test of a module, as ``setUpTestData`` keeps
    a class's. They are written in a transaction that each (non-transactional) test then runs
    nested in, so a test's own changes roll back to them, and they roll back on leaving.
    Use it in a module-scoped fixture (a module whose tests each built the same rows spent
    most of its time doing so); hand each test a ``copy.deepcopy`` of what it yields, so a
    test that changes an object in memory changes it for itself only."""
    with (
        django_db_blocker.unblock(),
        override_settings(PASSWORD_HASHERS=CHEAP_PASSWORD_HASHERS, MEDIA_ROOT=media),
        transaction.atomic(),
    ):
        yield
        transaction.set_rollback(True)


@pytest.fixture(autouse=True)
def no_hugging_face_hub(settings):
    """A model's config.json is read from a hub nothing listens at (port 9, discard), never
    from huggingface.co: the tests of the hub point this at their fake one."""
    settings.BENCHSITE_HF_ENDPOINT = "http://127.0.0.1:9"


@pytest.fixture(autouse=True)
def nothing_priced_in_memory():
    """The priced figures of ended runs live as long as the process
    (``runs.selectors.trial_figures``): each test starts, and leaves, with none."""
    ended_trial_figures.clear()
    yield
    ended_trial_figures.clear()


@pytest.fixture(autouse=True)
def ingest_answers_its_probe(monkeypatch):
    """Reconcile passes run here judge silence as if the site's ingest answered its probe
    (nothing listens at BENCHSITE_PUBLIC_URL in most tests); tests of the probe itself, and
    workers in their own processes, use the real one (``runs.services.ingest_watch``)."""
    monkeypatch.setattr("runs.services.ingest_watch.ingest_probe", lambda: None)


@pytest.fixture(autouse=True, scope="session")
def celery_tasks_run_in_process():
    """Tasks run where they are enqueued, so no message outlives its test in a shared broker
    (the tests with a real worker process switch this off for themselves)."""
    from benchsite.celery import app

    app.conf.task_always_eager = True
    app.conf.task_eager_propagates = True
    yield
    app.conf.task_always_eager = False


@pytest.fixture
def own_broker_queue(monkeypatch):
    """A Celery queue of this test's own on the shared Redis, for Daphne and the worker.

    Daphne enqueues ``run_finalize`` when a run ends: on this queue, no other test's worker
    takes it (nor ours theirs), and what no worker took is deleted with the queue instead of
    piling up in the shared broker. Tasks of this process stay eager
    (``celery_tasks_run_in_process``)."""
    queue = f"benchsite-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("CELERY_TASK_DEFAULT_QUEUE", queue)  # Daphne and the worker read it
    try:
        yield queue
    finally:
        broker_queue_delete(queue)


@pytest.fixture
def sent(django_capture_on_commit_callbacks):
    """Runs what a change sends after its commit (the tasks run in process):
    ``sent(lambda: client.post(…))``."""

    def run(change):
        with django_capture_on_commit_callbacks(execute=True):
            return change()

    return run


# A local pod's "agent" that only waits (the tests send its messages themselves).
WAITING_AGENT = f"{sys.executable} -c 'import time; time.sleep(300)'"


@pytest.fixture
def waiting_local_pods(settings, tmp_path):
    """Every run on the local provider, its 'agent' a process that only waits; every pod
    terminated afterwards."""
    from runs.providers.registry import local_provider

    settings.BENCHSITE_PROVIDER = "local"
    settings.BENCHSITE_LOCAL_PODS_DIR = tmp_path / "pods"
    settings.BENCHSITE_LOCAL_AGENT_COMMAND = WAITING_AGENT
    yield
    provider = local_provider()
    for pod in provider.list_bench_pods():
        provider.terminate(pod.pod_id)


H100 = "NVIDIA H100 80GB HBM3"


@dataclass
class Person:
    user: User
    org: Organization
    token: str

    def client(self) -> APIClient:
        """An API client authenticated with this person's token."""
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {self.token}")
        return client


def _person(email: str, org: Organization, role: str | None) -> Person:
    user = User.objects.create_user(email, "correct-horse-battery")
    if role:
        membership_add(org=org, user=user, role=role, actor=SYSTEM)
    return Person(
        user=user, org=org, token=token_create(org=org, user=user, name="t", actor=SYSTEM).raw
    )


def org_a_create() -> Organization:
    """Acme, owned by alice (the GPU catalogue seeded first)."""
    seed_gpu_catalogue(GpuType)
    owner = User.objects.create_user("alice@acme.example", "correct-horse-battery")
    return org_create(slug="acme", name="Acme", owner=owner, actor=SYSTEM)


def org_b_create() -> Organization:
    """Globex, owned by charlie (the GPU catalogue seeded first)."""
    # A transactional test flushes every table, the migrated GPU catalogue included, and a
    # test of Globex alone makes experiments on it too: either organization re-seeds it.
    seed_gpu_catalogue(GpuType)
    owner = User.objects.create_user("charlie@globex.example", "correct-horse-battery")
    return org_create(slug="globex", name="Globex", owner=owner, actor=SYSTEM)


def owner_person(org: Organization, email: str) -> Person:
    """The organization's owner ``email`` with a token of their own."""
    user = User.objects.get(email=email)
    return Person(
        user=user, org=org, token=token_create(org=org, user=user, name="t", actor=SYSTEM).raw
    )


@dataclass
class Cast:
    """Acme's alice (owner), bob (viewer) and mallory (member); Globex's charlie (owner)."""

    alice: Person
    bob: Person
    mallory: Person
    charlie: Person


def cast_create() -> Cast:
    """The whole cast, as the fixtures below make it one by one."""
    org_a, org_b = org_a_create(), org_b_create()
    return Cast(
        alice=owner_person(org_a, "alice@acme.example"),
        bob=_person("bob@acme.example", org_a, "viewer"),
        mallory=_person("mallory@acme.example", org_a, "member"),
        charlie=owner_person(org_b, "charlie@globex.example"),
    )


@pytest.fixture
def org_a(db) -> Organization:
    return org_a_create()


@pytest.fixture
def org_b(db) -> Organization:
    return org_b_create()


@pytest.fixture
def alice(org_a) -> Person:
    return owner_person(org_a, "alice@acme.example")


@pytest.fixture
def bob(org_a) -> Person:
    return _person("bob@acme.example", org_a, "viewer")


@pytest.fixture
def mallory(org_a) -> Person:
    return _person("mallory@acme.example", org_a, "member")


@pytest.fixture
def charlie(org_b) -> Person:
    return owner_person(org_b, "charlie@globex.example")


MODEL_FIELDS = MODEL_PRESETS["llama-3.1-8b"].registered

WORKLOAD = {
    "dataset": {"kind": "random", "input_len": 512, "output_len": 128},
    "concurrency": [1, 8, 64],
    "requests_per_level": 100,
}


def make_model(org: Organization, **overrides):
    return model_spec_create(org=org, actor=SYSTEM, **(MODEL_FIELDS | overrides))


def make_experiment(org: Organization, model=None, **overrides):
    fields = dict(
        name="batching",
        model=model or make_model(org),
        gpu_type=GpuType.objects.get(id=H100),
        gpu_count=1,
        engine="vllm",
        engine_image_tag="v0.11.0",
        serve_grid={"max_num_seqs": [64, 128]},
        workload=WORKLOAD,
        slos={"ttft_ms": 500},
        budget_cap_usd=Decimal(50),
    )
    return experiment_create(org=org, actor=SYSTEM, **(fields | overrides))


def frozen(experiment, **snapshot) -> dict:
    """The fields ``run_start`` freezes a run of ``experiment`` with, for a run made in a test
    (``Run.objects.create(..., **frozen(experiment))``); ``snapshot`` replaces facts beside
    the job (``budget_cap_usd="50"``)."""
    fields = run_frozen_fields(
        experiment=experiment, estimate=experiment_estimate(experiment=experiment)
    )
    fields["experiment_snapshot"].update(snapshot)
    return fields


def experiment_payload(model_id, **overrides) -> dict:
    """A valid experiment as the API takes it."""
    return {
        "name": "api-experiment",
        "model": str(model_id),
        "gpu_type": H100,
        "gpu_count": 1,
        "engine": "vllm",
        "engine_image_tag": "v0.11.0",
        "serve_grid": {"max_num_seqs": [64, 128], "max_num_batched_tokens": [2048]},
        "workload": WORKLOAD,
        "slos": {"ttft_ms": 500, "tpot_ms": 50},
        "budget_cap_usd": "25.00",
    } | overrides


def signed_in(person) -> Client:
    """A browser's client, signed in as ``person`` (session cookie, CSRF not enforced)."""
    client = Client()
    client.force_login(person.user)
    return client


@pytest.fixture
def web(alice) -> Client:
    """The web pages as alice sees them."""
    return signed_in(alice)


@pytest.fixture(autouse=True)
def patient_socket_connects(monkeypatch):
    """Channels' test communicator gives a socket 1 s to connect; with every core busy (CI's
    five workers on two cores) a consumer's session and database lookups can take longer,
    and the test failed on the wait, not on what it checks. 10 s, for every site test."""
    from channels.testing import WebsocketCommunicator

    connect = WebsocketCommunicator.connect

    async def patient(self, timeout=10):
        return await connect(self, timeout)

    monkeypatch.setattr(WebsocketCommunicator, "connect", patient)
