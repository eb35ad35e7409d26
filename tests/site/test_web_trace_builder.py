"""The experiment builder with trace workloads (issue 19): the trace kinds and their options
offered, a Mooncake workload stored as the API stores it and shown again unchanged, and
refusals shown beside the input at fault."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents import protocol
from frontend.experiments import builder
from frontend.experiments.form_slots import error_slot
from runs.models import Experiment
from runs.services.experiments import dataset_upload

from .conftest import SYSTEM, make_model, signed_in
from .test_web_experiments import assert_refused_beside, builder_form, shown_again

pytestmark = pytest.mark.django_db

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workloads"


def trace(org, kind: str, name: str):
    raw = (EXAMPLES / {"mooncake": "mooncake.jsonl", "burstgpt": "burstgpt.csv"}[kind]).read_bytes()
    return dataset_upload(org=org, actor=SYSTEM, name=name, raw=raw, dataset_format=kind)


def test_the_builder_offers_the_trace_kinds_and_datasets_by_format(alice):
    moon = trace(alice.org, "mooncake", "moon")
    burst = trace(alice.org, "burstgpt", "burst")
    make_model(alice.org)
    page = signed_in(alice).get("/o/acme/experiments/new/").content.decode()
    for kind in protocol.TRACE_FORMATS:
        assert f'<option value="{kind}">replay: ' in page
    assert f'<option value="{moon.id}" data-format="mooncake">moon (24 requests)</option>' in page
    assert f'<option value="{burst.id}" data-format="burstgpt">burst (22 requests)</option>' in page
    for name in ("start_seconds", "duration_seconds", "block_size", "trace_model", "log_type"):
        assert f'name="{name}"' in page


def test_a_mooncake_workload_round_trips_through_the_builder(alice):
    model = make_model(alice.org)
    dataset = trace(alice.org, "mooncake", "moon")
    form = builder_form(
        model,
        dataset_kind="mooncake",
        dataset_id=str(dataset.id),
        start_seconds="1.5",
        duration_seconds="8",
        block_size="256",
        input_len="",
        output_len="",
        concurrency="1, 4",
        request_rates="2, inf",
    )
    client = signed_in(alice)
    response = client.post("/o/acme/experiments/new/", form)
    assert response.status_code == 302, response.content.decode()[-3000:]
    experiment = Experiment.objects.get(organization=alice.org, name="web-experiment")
    assert experiment.model_id == model.id
    assert experiment.workload["dataset"] == {
        "kind": "mooncake",
        "dataset_id": str(dataset.id),
        "start_seconds": 1.5,
        "duration_seconds": 8.0,
        "block_size": 256,
        "model": None,
        "log_type": None,
    }
    # Shown again, it is the same experiment: the payload validates to the stored workload.
    shown, payload = shown_again(experiment)
    assert shown.values["model"] == str(model.id)  # not the dataset's (absent) model filter
    assert (shown.values["start_seconds"], shown.values["block_size"]) == ("1.5", "256")
    assert payload["model"] == str(model.id)
    page = client.get(f"/o/acme/experiments/{experiment.id}/edit/").content.decode()
    assert '<option value="mooncake" selected>' in page
    assert f'<option value="{dataset.id}" data-format="mooncake" selected>' in page
    assert 'name="duration_seconds" inputmode="decimal" value="8"' in page


def test_burstgpt_filters_go_through_the_builder_beside_the_experiments_model(alice):
    model = make_model(alice.org)
    dataset = trace(alice.org, "burstgpt", "burst")
    form = builder_form(
        model,
        dataset_kind="burstgpt",
        dataset_id=str(dataset.id),
        trace_model="GPT-4",
        log_type="API log",
        block_size="7",  # a Mooncake option: not sent for BurstGPT
    )
    assert signed_in(alice).post("/o/acme/experiments/new/", form).status_code == 302
    experiment = Experiment.objects.get(organization=alice.org)
    assert experiment.model_id == model.id
    stored = experiment.workload["dataset"]
    assert (stored["model"], stored["log_type"], stored["block_size"]) == ("GPT-4", "API log", 512)
    assert builder.builder_form_from_experiment(experiment).values["trace_model"] == "GPT-4"


@pytest.mark.parametrize(
    ("change", "path", "slot", "message"),
    [
        ({"trace_model": "Claude"}, "workload.dataset.model", "trace_model",
         "No request of this trace has model &#x27;Claude&#x27;."),
        ({"start_seconds": "100"}, "workload.dataset.start_seconds", "start_seconds",
         "no request from 100 s on"),
        ({"dataset_kind": "azure"}, "workload.dataset.dataset_id", "dataset_id",
         "kind &#x27;azure&#x27; needs Azure LLM inference trace (CSV)"),
    ],
    ids=["filter", "window", "format"],
)  # fmt: skip  # a table
def test_a_refused_trace_option_is_shown_beside_its_input(alice, change, path, slot, message):
    model = make_model(alice.org)
    dataset = trace(alice.org, "burstgpt", "burst")
    form = builder_form(model, dataset_kind="burstgpt", dataset_id=str(dataset.id)) | change
    assert_refused_beside(alice, form, path, slot, message)


def test_every_trace_option_has_its_slot():
    assert error_slot("workload.dataset.model") == "trace_model"
    for name in ("start_seconds", "duration_seconds", "block_size", "log_type"):
        assert error_slot(f"workload.dataset.{name}") == name
