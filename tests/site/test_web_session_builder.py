"""The experiment builder with chat-session workloads (issue 19): the kind and its inputs
offered, a session workload stored as the API stores it and shown again unchanged, and each
refusal shown beside the input at fault with nothing stored."""

from __future__ import annotations

import pytest

from agents import protocol
from frontend.experiments.form_slots import error_slot
from runs.models import Experiment

from .conftest import make_model, signed_in
from .test_web_experiments import assert_refused_beside, builder_form, shown_again

pytestmark = pytest.mark.django_db

SESSION_INPUTS = {
    "min_turns": "3",
    "max_turns": "5",
    "system_len": "300",
    "user_len": "120",
    "output_len": "80",
    "range_ratio": "0.2",
    "think_seconds": "1.5",
}


def session_form(model, **overrides) -> dict:
    form = builder_form(model, dataset_kind="chat_sessions", endpoint="chat", input_len="")
    return form | SESSION_INPUTS | overrides


def test_the_builder_offers_chat_sessions_and_their_inputs(alice):
    make_model(alice.org)
    page = signed_in(alice).get("/o/acme/experiments/new/").content.decode()
    assert '<option value="chat_sessions">multi-turn chat sessions</option>' in page
    for name in SESSION_INPUTS:
        start = page.index(f'name="{name}"')
        field = page[page.rindex('<div class="field"', 0, start) : start]
        assert "chat_sessions" in field  # shown for the kind (the script hides the others)


def test_a_session_workload_round_trips_through_the_builder(alice):
    model = make_model(alice.org)
    client = signed_in(alice)
    response = client.post("/o/acme/experiments/new/", session_form(model))
    assert response.status_code == 302, response.content.decode()[-3000:]
    experiment = Experiment.objects.get(organization=alice.org, name="web-experiment")
    assert experiment.workload["endpoint"] == "chat"
    assert experiment.workload["dataset"] == {
        "kind": "chat_sessions",
        "min_turns": 3,
        "max_turns": 5,
        "system_len": 300,
        "user_len": 120,
        "output_len": 80,
        "range_ratio": 0.2,
        "think_seconds": 1.5,
    }
    # Shown again, it is the same experiment: the payload validates to the stored workload.
    shown, _ = shown_again(experiment)
    assert {name: shown.values[name] for name in SESSION_INPUTS} == SESSION_INPUTS
    page = client.get(f"/o/acme/experiments/{experiment.id}/edit/").content.decode()
    assert '<option value="chat_sessions" selected>' in page
    assert '<option value="chat" selected>' in page
    assert 'name="think_seconds" inputmode="decimal" value="1.5"' in page


def test_blank_session_inputs_leave_the_protocols_defaults(alice):
    model = make_model(alice.org)
    blank = dict.fromkeys(
        ("min_turns", "max_turns", "system_len", "range_ratio", "think_seconds"), ""
    )
    response = signed_in(alice).post("/o/acme/experiments/new/", session_form(model, **blank))
    assert response.status_code == 302
    stored = Experiment.objects.get(organization=alice.org).workload["dataset"]
    defaults = protocol.ChatSessionsDataset(user_len=120, output_len=80).model_dump()
    assert stored == defaults


@pytest.mark.parametrize(
    ("change", "path", "slot", "message"),
    [
        ({"endpoint": "completions"}, "workload.endpoint", "endpoint",
         "chat sessions are sent to the chat endpoint: use &#x27;chat&#x27;"),
        ({"max_turns": "2"}, "workload.dataset.max_turns", "max_turns",
         "must be at least min_turns (3)"),
        # The last turn of a session at its longest: 300 + 5 × (144 + 96) = 1,500 tokens.
        ({"grid_flag": ["max_model_len", ""], "grid_values": ["1024", ""]},
         "workload.dataset.max_turns", "max_turns",
         "carries up to 1500 tokens"),
        ({"think_seconds": "-1"}, "workload.dataset.think_seconds", "think_seconds",
         "greater than or equal to 0"),
        ({"user_len": "0"}, "workload.dataset.user_len", "user_len",
         "greater than or equal to 1"),
        ({"system_len": "many"}, "workload.dataset.system_len", "system_len", "integer"),
    ],
    ids=["endpoint", "turns", "context", "think", "message", "system"],
)  # fmt: skip  # a table
def test_a_refused_session_option_is_shown_beside_its_input(alice, change, path, slot, message):
    model = make_model(alice.org)
    form = session_form(model) | change
    assert_refused_beside(alice, form, path, slot, message)


def test_every_session_option_has_its_slot():
    assert error_slot("workload.endpoint") == "endpoint"
    for name in ("min_turns", "max_turns", "system_len", "user_len", "think_seconds"):
        assert error_slot(f"workload.dataset.{name}") == name
