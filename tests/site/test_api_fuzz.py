"""Schema-driven fuzzing: no input, valid or not, makes the API answer 5xx.

Schemathesis generates requests for every operation in our OpenAPI schema (positive cases
that follow the schema and negative ones that break it) and sends them in-process through the
real WSGI stack, as the owner of an organization with real rows behind every path id.
"""

from __future__ import annotations

import functools
import json

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from runs.models import GpuType, Membership, Promotion, Run, Trial
from runs.services.budgets import budget_set
from runs.services.experiments import dataset_upload
from runs.services.tenancy import token_create

from .conftest import SYSTEM, make_experiment

EXAMPLES_PER_OPERATION = 25


@functools.cache
def _schema():
    return schemathesis.openapi.from_wsgi("/api/v1/schema/", get_wsgi_application())


def _cases() -> list[tuple[str, GenerationMode]]:
    """Every operation with valid input, and with invalid input where it takes any (an
    operation whose only parameters are the fixed path ids has nothing to break)."""
    import django

    django.setup()
    cases = []
    for result in _schema().get_all_operations():
        operation = result.ok()
        cases.append((operation.label, GenerationMode.POSITIVE))
        if len(operation.query) or len(operation.body):
            cases.append((operation.label, GenerationMode.NEGATIVE))
    return cases


@pytest.fixture
def keep_test_connection():
    """The WSGI handler closes the database connection after each request; inside a test
    that would end the test's transaction. Django's own test client detaches it the same way."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def world(alice, bob, keep_test_connection):
    """Real rows for every kind of path id, owned by alice's organization."""
    experiment = make_experiment(alice.org)
    sharegpt = json.dumps(
        [{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}]
    )
    dataset = dataset_upload(org=alice.org, actor=SYSTEM, name="chats", raw=sharegpt.encode())
    budget = budget_set(org=alice.org, actor=SYSTEM, limit_usd=100)
    victim = token_create(org=alice.org, user=bob.user, name="victim", actor=SYSTEM).token
    run = Run.objects.create(organization=alice.org, experiment=experiment)
    trial = Trial.objects.create(run=run, index=0, serve_config={}, outcome="succeeded")
    promotion = Promotion.objects.create(
        organization=alice.org, experiment=experiment, trial=trial, proposed_by=bob.user
    )
    ids = {
        "experiments": str(experiment.id),
        "models": str(experiment.model_id),
        "datasets": str(dataset.id),
        "budgets": str(budget.id),
        "runs": str(run.id),
        "tokens": str(victim.id),
        "members": str(Membership.objects.get(organization=alice.org, user=bob.user).id),
        "gpu-types": GpuType.objects.first().id,
        "promotions": str(promotion.id),
    }
    return alice, ids


@pytest.mark.django_db(transaction=False)
@pytest.mark.parametrize(("label", "mode"), _cases())
def test_it_never_answers_a_server_error(label, mode, world):
    person, ids = world
    operation = _schema().find_operation_by_label(label)
    resource = label.split("/api/v1/orgs/{org}/")[-1].split("/")[0]
    path_parameters = {"org": person.org.slug}
    if "{id}" in label:
        path_parameters["id"] = ids[resource]
    strategy = operation.as_strategy(
        generation_mode=mode,
        path_parameters=path_parameters,
        headers={"Authorization": f"Bearer {person.token}"},
    )

    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def send(case):
        response = case.call()
        assert response.status_code < 500, (
            f"{case.method} {case.formatted_path} → {response.status_code}\n"
            f"body={case.body!r} query={case.query!r}\n{response.text[:2000]}"
        )

    send()
