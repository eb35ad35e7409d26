"""The experiment builder with agentic workloads (issue 19): synthesized agentic sessions and
uploaded session files offered with their inputs, stored as the API stores them and shown
again unchanged, blank inputs meaning the protocol's defaults (which the help states), and
refusals shown beside the input at fault with nothing stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents import protocol
from frontend.experiments.form_slots import DATASET_FIELDS_BY_KIND, error_slot
from runs.models import Experiment

from .conftest import make_experiment, make_model, signed_in
from .db_state import database_state
from .test_trace_datasets import stored
from .test_web_experiments import assert_refused_beside, builder_form, shown_again

pytestmark = pytest.mark.django_db

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "workloads" / "agentic.jsonl"

AGENTIC_INPUTS = {
    "min_turns": "3",
    "max_turns": "5",
    "system_len": "2000",
    "task_len": "200",
    "output_len": "100",
    "tool_output_len": "400",
    "tool_seconds": "0.5",
    "subagent_probability": "0.25",
    "subagents": "3",
    "subagent_turns": "2",
    "block_size": "32",
}


def agentic_form(model, **overrides) -> dict:
    form = builder_form(model, dataset_kind="agentic", input_len="")
    return form | AGENTIC_INPUTS | overrides


def session_file_form(model, dataset, **overrides) -> dict:
    form = builder_form(
        model, dataset_kind="agentic_trace", dataset_id=str(dataset.id), input_len="", output_len=""
    )
    return form | overrides


def field_of(page: str, name: str) -> str:
    """The builder's field (its ``<div class="field" …>`` opening) holding input ``name``."""
    start = page.index(f'name="{name}"')
    return page[page.rindex('<div class="field"', 0, start) : start]


def test_the_builder_offers_both_agentic_kinds_and_their_inputs(alice):
    make_model(alice.org)
    dataset = stored(alice.org, "agentic_trace", raw=EXAMPLE.read_bytes(), name="coding")
    page = signed_in(alice).get("/o/acme/experiments/new/").content.decode()
    assert '<option value="agentic">agentic coding sessions (synthesized)</option>' in page
    assert '<option value="agentic_trace">replay an agentic session file</option>' in page
    for kind in ("agentic", "agentic_trace"):
        for name in DATASET_FIELDS_BY_KIND[kind]:
            assert kind in field_of(page, name).split("data-kinds=", 1)[1]
    # The session file is offered under its format, with its sessions and requests.
    option = f'<option value="{dataset.id}" data-format="agentic_trace">coding (2 sessions, 8'
    assert option in page
    # Blank means the protocol's default, and the help says which.
    defaults = protocol.AgenticDataset()
    assert f"blank = {defaults.system_len}." in page
    assert f'placeholder="{defaults.tool_output_len}"' in page


def test_a_synthesized_agentic_workload_round_trips_through_the_builder(alice):
    model = make_model(alice.org)
    client = signed_in(alice)
    response = client.post("/o/acme/experiments/new/", agentic_form(model))
    assert response.status_code == 302, response.content.decode()[-3000:]
    experiment = Experiment.objects.get(organization=alice.org, name="web-experiment")
    assert experiment.workload["dataset"] == {
        "kind": "agentic",
        "min_turns": 3,
        "max_turns": 5,
        "system_len": 2000,
        "task_len": 200,
        "output_len": 100,
        "tool_output_len": 400,
        "tool_seconds": 0.5,
        "subagent_probability": 0.25,
        "subagents": 3,
        "subagent_turns": 2,
        "block_size": 32,
    }
    # Shown again, it is the same experiment: the payload validates to the stored workload.
    shown, _ = shown_again(experiment)
    assert {name: shown.values[name] for name in AGENTIC_INPUTS} == AGENTIC_INPUTS
    page = client.get(f"/o/acme/experiments/{experiment.id}/edit/").content.decode()
    assert '<option value="agentic" selected>' in page
    assert 'name="subagent_probability" inputmode="decimal" value="0.25"' in page


def test_blank_agentic_inputs_leave_the_protocols_defaults(alice):
    model = make_model(alice.org)
    blank = dict.fromkeys(AGENTIC_INPUTS, "")
    response = signed_in(alice).post("/o/acme/experiments/new/", agentic_form(model, **blank))
    assert response.status_code == 302, response.content.decode()[-3000:]
    stored_dataset = Experiment.objects.get(organization=alice.org).workload["dataset"]
    assert stored_dataset == protocol.AgenticDataset().model_dump()


def test_a_session_file_workload_round_trips_through_the_builder(alice):
    model = make_model(alice.org)
    dataset = stored(alice.org, "agentic_trace", raw=EXAMPLE.read_bytes())
    client = signed_in(alice)
    form = session_file_form(model, dataset, block_size="256", concurrency="1, 2")
    response = client.post("/o/acme/experiments/new/", form)
    assert response.status_code == 302, response.content.decode()[-3000:]
    experiment = Experiment.objects.get(organization=alice.org, name="web-experiment")
    assert experiment.workload["dataset"] == {
        "kind": "agentic_trace",
        "dataset_id": str(dataset.id),
        "block_size": 256,
    }
    shown_again(experiment)
    page = client.get(f"/o/acme/experiments/{experiment.id}/edit/").content.decode()
    assert '<option value="agentic_trace" selected>' in page
    assert f'<option value="{dataset.id}" data-format="agentic_trace" selected>' in page


def test_edit_and_duplicate_open_an_agentic_experiment_set_through_the_api(alice):
    workload = {"dataset": {"kind": "agentic", "min_turns": 2, "max_turns": 4}, "concurrency": [2]}
    experiment = make_experiment(alice.org, workload=workload)
    before = database_state()
    client = signed_in(alice)
    for page in ("edit", "duplicate"):
        response = client.get(f"/o/acme/experiments/{experiment.id}/{page}/")
        assert response.status_code == 200
        text = response.content.decode()
        assert '<option value="agentic" selected>' in text
        assert 'name="max_turns" inputmode="numeric" value="4"' in text
    assert database_state() == before


@pytest.mark.parametrize(
    ("change", "path", "slot", "message"),
    [
        ({"max_turns": "2"}, "workload.dataset.max_turns", "max_turns",
         "must be at least min_turns (3)"),
        ({"subagent_probability": "2"}, "workload.dataset.subagent_probability",
         "subagent_probability", "less than or equal to 1"),
        ({"tool_seconds": "-1"}, "workload.dataset.tool_seconds", "tool_seconds",
         "greater than or equal to 0"),
        ({"subagents": "many"}, "workload.dataset.subagents", "subagents", "integer"),
        # The main agent's last turn: 2000 + 200 + 4 × (100 + 400) + 100 = 4,300 tokens.
        ({"grid_flag": ["max_model_len", ""], "grid_values": ["4096", ""]},
         "workload.dataset.max_turns", "max_turns", "carries up to 4300 tokens"),
    ],
    ids=["turns", "probability", "tool-time", "subagents", "context"],
)  # fmt: skip  # a table
def test_a_refused_agentic_option_is_shown_beside_its_input(alice, change, path, slot, message):
    model = make_model(alice.org)
    assert_refused_beside(alice, agentic_form(model) | change, path, slot, message)


def test_a_session_file_the_block_size_cannot_hold_is_refused_beside_it(alice):
    model = make_model(alice.org)
    dataset = stored(alice.org, "agentic_trace", raw=EXAMPLE.read_bytes())
    form = session_file_form(model, dataset, block_size="1024")
    path = "workload.dataset.block_size"
    assert_refused_beside(alice, form, path, "block_size", "lists 5 blocks")


def test_every_agentic_option_has_its_slot():
    for name in AGENTIC_INPUTS:
        assert error_slot(f"workload.dataset.{name}") == name
