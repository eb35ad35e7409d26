"""Schema-driven fuzzing: no input, valid or not, makes the API answer 5xx.

Schemathesis generates requests for every operation in our OpenAPI schema (positive cases
that follow the schema and negative ones that break it) and sends them in-process through the
real WSGI stack, as the owner of an organization with real rows behind every path id.
"""

from __future__ import annotations

import copy
import functools
import json

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from rest_framework.test import APIClient
from schemathesis import GenerationMode

from runs.models import (
    Endpoint,
    GpuType,
    Membership,
    NotificationHook,
    Promotion,
    Run,
    Trial,
)
from runs.services.budgets import budget_set
from runs.services.evaluations import evaluation_set_upload
from runs.services.experiments import dataset_upload
from runs.services.tenancy import token_create

from .conftest import SYSTEM, cast_create, frozen, make_experiment, rows_kept_for_the_module

# Fuzzing: many cases of a second or more each.
pytestmark = pytest.mark.slow

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


@pytest.fixture(scope="module")
def world_once(django_db_setup, django_db_blocker, tmp_path_factory):
    """The world, built once per module and worker (``rows_kept_for_the_module``)."""
    with rows_kept_for_the_module(django_db_blocker, tmp_path_factory.mktemp("media")):
        cast = cast_create()
        yield _world_build(cast.alice, cast.bob)


@pytest.fixture
def world(world_once, db, keep_test_connection, monkeypatch):
    """Real rows for every kind of path id, owned by alice's organization (this test's copy).
    Predictions run on a small simulation budget: the same code path, 25 examples in seconds
    rather than minutes (the budget's own effect is tested in test_predictions)."""
    monkeypatch.setattr("runs.selectors.predictions.WORK_BUDGET", 20_000)
    return copy.deepcopy(world_once)


def _world_build(alice, bob):
    experiment = make_experiment(alice.org)
    sharegpt = json.dumps(
        [{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}]
    )
    dataset = dataset_upload(org=alice.org, actor=SYSTEM, name="chats", raw=sharegpt.encode())
    evaluation_set = evaluation_set_upload(
        org=alice.org,
        actor=SYSTEM,
        name="sums",
        raw=b'{"prompt": "2+2=", "reference": "4", "scorer": {"kind": "exact"}}\n',
    )
    budget = budget_set(org=alice.org, actor=SYSTEM, limit_usd=100)
    victim = token_create(org=alice.org, user=bob.user, name="victim", actor=SYSTEM).token
    run = Run.objects.create(organization=alice.org, experiment=experiment, **frozen(experiment))
    trial = Trial.objects.create(
        organization_id=run.organization_id, run=run, index=0, serve_config={}, outcome="succeeded"
    )
    promotion = Promotion.objects.create(
        organization=alice.org, experiment=experiment, trial=trial, proposed_by=bob.user
    )
    hook = NotificationHook.objects.create(
        organization=alice.org,
        name="mail",
        kind="email",
        email_to="ops@acme.example",
        events=["run.failed"],
    )
    endpoint = Endpoint.objects.create(
        organization=alice.org,
        name="prod",
        base_url="http://127.0.0.1:9",
        served_model_name="fake",
    )
    ids = {
        "endpoints": str(endpoint.id),
        "experiments": str(experiment.id),
        "models": str(experiment.model_id),
        "datasets": str(dataset.id),
        "evaluation-sets": str(evaluation_set.id),
        "budgets": str(budget.id),
        "runs": str(run.id),
        "tokens": str(victim.id),
        "members": str(Membership.objects.get(organization=alice.org, user=bob.user).id),
        "gpu-types": GpuType.objects.first().id,
        "promotions": str(promotion.id),
        "notification-hooks": str(hook.id),
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


def _json_operations() -> list[str]:
    """Every operation that takes a request body (JSON, or a form that is sent JSON here)."""
    import django

    django.setup()
    return [result.ok().label for result in _schema().get_all_operations() if len(result.ok().body)]


def _path(label: str, person, ids: dict, run_id: str) -> str:
    path = label.split(" ", 1)[1]
    resource = path.split("/api/v1/orgs/{org}/")[-1].split("/")[0]
    return (
        path.replace("{org}", person.org.slug)
        .replace("{id}", str(ids.get(resource, "")))
        .replace("{provider}", "runpod")
        .replace("{run_id}", run_id)
    )


def _huge_integers(value, huge: int):
    """``value`` with every integer in it (booleans aside) replaced by ``huge``."""
    if isinstance(value, dict):
        return {key: _huge_integers(item, huge) for key, item in value.items()}
    if isinstance(value, list):
        return [_huge_integers(item, huge) for item in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return huge
    return value


HUGE_INTEGERS = [2**63, -(2**63) - 1, 10**30]


@pytest.mark.django_db(transaction=False)
@pytest.mark.parametrize("label", _json_operations())
def test_it_never_answers_a_server_error_to_deep_huge_or_oversized_bodies(label, world):
    """Issue 14 items 2, 3 and 7 on every operation with a body: JSON nested far deeper than
    any decoder's recursion, integers beyond every column, and a body over the size limit."""
    from django.conf import settings as django_settings

    from runs.api.parsers import AgentBatchParser
    from runs.services.run_tokens import run_token_issue

    person, ids = world
    run = Run.objects.get(pk=ids["runs"])
    is_agent = "/agent/" in label
    token = run_token_issue(run=run) if is_agent else person.token
    method, _ = label.split(" ", 1)
    path = _path(label, person, ids, str(run.id))
    limit = (
        AgentBatchParser().max_body_bytes()
        if is_agent
        else django_settings.BENCHSITE_MAX_BODY_BYTES
    )
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")

    def answer(body: str):
        response = client.generic(method, path, body, content_type="application/json")
        assert response.status_code < 500, f"{label} → {response.status_code}: {body[:200]!r}"
        return response

    operation = _schema().find_operation_by_label(label)
    path_parameters = {"org": person.org.slug}
    if "{id}" in label:
        path_parameters["id"] = ids[label.split("/api/v1/orgs/{org}/")[-1].split("/")[0]]
    if "{run_id}" in label:
        path_parameters["run_id"] = str(run.id)
    strategy = operation.as_strategy(
        generation_mode=GenerationMode.POSITIVE,
        path_parameters=path_parameters,
        headers={"Authorization": f"Bearer {token}"},
    )

    @settings(
        max_examples=5,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def send(case):
        if not isinstance(case.body, dict | list):
            return  # a form: it has no JSON integers to make huge
        if is_agent and isinstance(case.body.get("messages"), list):
            # Messages of this run, so that they reach the ledger rather than stop at run_id.
            for message in case.body["messages"]:
                if isinstance(message, dict):
                    message["run_id"] = str(run.id)
        for huge in HUGE_INTEGERS:
            case.body = _huge_integers(case.body, huge)
            response = case.call()
            assert response.status_code < 500, (
                f"{case.method} {case.formatted_path} → {response.status_code}\n"
                f"body={case.body!r}\n{response.text[:2000]}"
            )

    send()

    # Last: Django's test client reconnects the connection-closing signal after each request
    # (see keep_test_connection), which would end the test's transaction under schemathesis.
    for depth in (330, 100_000):
        answer("[" * depth + "]" * depth)
        answer('{"messages": ' + '{"a": ' * depth + "1" + "}" * depth + "}")
    oversized = answer(json.dumps({"messages": [], "padding": "p" * limit}))
    if oversized.status_code not in (404, 415):  # a path without this method, or a form
        assert oversized.status_code == 413, oversized.content[:500]
        assert oversized.json()["error"]["code"] == "too_large"
