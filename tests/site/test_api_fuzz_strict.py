"""Fuzzing of the strict fields (issue 14, items 7 and 8): any JSON value in any writable
field of a request gives 2xx or a 400 naming that field, never a 5xx, and quickly.

Schemathesis (test_api_fuzz.py) generates whole requests from the schema; here one field at
a time gets every kind of JSON value, the coerced look-alikes of a valid one ("2", 2.0,
"true", 1e308) and oversized ones, so that each field's own refusal is what is tested.
"""

from __future__ import annotations

import pytest
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runs.services.experiments import EXPERIMENT_FIELDS

from .conftest import MODEL_FIELDS, experiment_payload, make_model

pytestmark = pytest.mark.slow

# Scalars a coercing API would read as something else, and numbers no bound lets through.
LOOK_ALIKES = st.sampled_from(
    ["2", "2.0", "true", "yes", "1e308", "", " ", "null", "[]", 2.0, 1e308, -1e308, 2**63, True]
)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=10,
)
HUGE = st.sampled_from(
    ["x" * 100_000, list(range(100_000)), {f"k{i}": i for i in range(20_000)}, 10**400]
)
VALUES = LOOK_ALIKES | JSON | HUGE


def _fields_of(response) -> dict:
    return response.json().get("error", {}).get("fields", {})


def _assert_refused_or_taken(response, field: str) -> None:
    assert response.status_code < 500, response.content[:2000]
    if response.status_code == 400:
        fields = _fields_of(response)
        # The field itself, a path below it, or (for a valid but unusable value, say an
        # odd gpu_count) a field the service checks against it.
        assert fields, response.content[:2000]
    assert len(response.content) < 20_000  # the error never echoes the value at length


FUZZ = settings(
    max_examples=40,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.parametrize("field", EXPERIMENT_FIELDS)
def test_it_never_fails_on_any_value_of_an_experiment_field(alice, field):
    client = alice.client()
    model = make_model(alice.org)
    target = reverse("experiment-list", kwargs={"org": "acme"})

    @FUZZ
    @given(value=VALUES)
    def send(value):
        response = client.post(
            target, experiment_payload(model.id, **{field: value}), format="json"
        )
        _assert_refused_or_taken(response, field)

    send()


@pytest.mark.parametrize("field", sorted(MODEL_FIELDS))
def test_it_never_fails_on_any_value_of_a_model_field(alice, field):
    client = alice.client()
    model = make_model(alice.org)
    target = reverse("model-detail", kwargs={"org": "acme", "pk": model.pk})

    @FUZZ
    @given(value=VALUES)
    def send(value):
        _assert_refused_or_taken(client.patch(target, {field: value}, format="json"), field)

    send()


@pytest.mark.parametrize(
    ("route", "base", "field"),
    [
        ("budget-list", {"limit_usd": "5"}, "limit_usd"),
        ("budget-list", {"limit_usd": "5"}, "month"),
        ("budget-list", {"limit_usd": "5"}, "note"),
        ("budget-list", {"limit_usd": "5"}, "experiment"),
        ("token-list", {"name": "ci"}, "name"),
        ("token-list", {"name": "ci"}, "user"),
        ("member-list", {"email": "eve@acme.example", "role": "viewer"}, "email"),
        ("member-list", {"email": "eve@acme.example", "role": "viewer"}, "role"),
        ("run-list", {}, "experiment"),
        ("run-list", {}, "reason"),
        ("run-list", {}, "trigger"),
    ],
)
def test_it_never_fails_on_any_value_of_another_field(alice, route, base, field):
    client = alice.client()
    target = reverse(route, kwargs={"org": "acme"})

    @FUZZ
    @given(value=VALUES)
    def send(value):
        _assert_refused_or_taken(client.post(target, base | {field: value}, format="json"), field)

    send()
