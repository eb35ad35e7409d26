"""Agentic session files on the site (issue 19): uploaded through the API with their summary,
refused by line and field with nothing stored, named by a workload of their own kind (block
size and context checked on the stored file), estimated on their mean lengths, predicted, and
served to the run that names one exactly as uploaded."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from agents.workloads.agentic import parse_agentic
from agents.workloads.summary import summarize_sessions
from runs.models import WorkloadDataset
from runs.selectors.estimates import experiment_estimate

from .conftest import make_experiment, make_model, signed_in
from .db_state import database_state
from .test_trace_datasets import NOT_FOUND, _run_of, check, refused_fields, stored

pytestmark = pytest.mark.django_db

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "workloads" / "agentic.jsonl"


def upload(person, raw: bytes, name: str = "sessions"):
    return person.client().post(
        reverse("dataset-list", kwargs={"org": person.org.slug}),
        {"name": name, "format": "agentic_trace", "file": SimpleUploadedFile("s.jsonl", raw)},
        format="multipart",
    )


def sessions_workload(dataset, **options) -> dict:
    return {
        "dataset": {"kind": "agentic_trace", "dataset_id": str(dataset.id)} | options,
        "concurrency": [2],
    }


def test_a_session_file_is_uploaded_with_its_summary(alice):
    response = upload(alice, EXAMPLE.read_bytes())
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["format"], body["num_conversations"]) == ("agentic_trace", None)
    expected = summarize_sessions(parse_agentic(EXAMPLE.read_bytes()))
    assert body["summary"] == expected
    assert (expected["sessions"], expected["requests"], expected["max_session_requests"]) == (
        2,
        8,
        5,
    )
    assert expected["session_rate"] == 0.5 and expected["mean_rate"] is None
    dataset = WorkloadDataset.objects.get(pk=body["id"])
    with dataset.file.open("rb") as file:
        assert file.read() == EXAMPLE.read_bytes()
    page = signed_in(alice).get(f"/o/acme/experiments/datasets/{dataset.id}/")
    assert page.status_code == 200 and "Agentic session file (JSONL)" in page.content.decode()


def test_a_bad_session_file_is_refused_by_line_and_field_and_nothing_is_stored(alice):
    lines = EXAMPLE.read_text().splitlines()
    lines[3] = lines[3].replace('"parent": "A2"', '"parent": "Z9"')
    before = database_state()
    fields = refused_fields(upload(alice, ("\n".join(lines) + "\n").encode()))
    assert fields == {"file": ["line 4: parent: 'Z9' is not the id of an earlier line"]}
    assert database_state() == before


ROOT = b'{"session": "s1", "id": "a", "input_length": 5, "output_length": 5}\n'
BAD_SESSION_FILES = {
    "a line nested 100,000 deep": (
        ROOT + b"[" * 100_000 + b"\n",
        "line 2: not JSON (JSON nested deeper than 64 levels)",
    ),
    "a delay past any float": (
        ROOT
        + b'{"session": "s2", "id": "b", "delay_ms": 1'
        + b"0" * 400
        + b', "input_length": 5, "output_length": 5}\n',
        "line 2: delay_ms: must be a finite number",
    ),
}


@pytest.mark.parametrize(
    ("raw", "message"), BAD_SESSION_FILES.values(), ids=list(BAD_SESSION_FILES)
)
def test_a_session_file_the_reader_cannot_hold_is_refused_by_line(alice, raw, message):
    before = database_state()
    (refusal,) = refused_fields(upload(alice, raw))["file"]
    assert refusal.startswith(message), refusal
    assert database_state() == before


def test_sessions_a_denormal_apart_are_accepted_as_starting_at_once(alice):
    raw = (
        ROOT + b'{"session": "s2", "id": "b", "delay_ms": 5e-321, "input_length": 5, '
        b'"output_length": 5}\n'
    )
    response = upload(alice, raw)
    assert response.status_code == 201, response.content
    summary = response.json()["summary"]
    assert (summary["sessions"], summary["span_seconds"]) == (2, 5e-324)
    assert summary["arrivals"] == {"bucket_seconds": 1e-06, "counts": [2]}
    assert summary["session_rate"] is None


def test_a_workload_replays_it_and_is_checked_on_the_stored_file(alice):
    model = make_model(alice.org)
    dataset = stored(alice.org, "agentic_trace", raw=EXAMPLE.read_bytes())
    assert check(alice, model, sessions_workload(dataset)).status_code == 200
    # Blocks of 256 tokens: the example's 2,600-token prompt with 5 hash ids still fits (11
    # blocks); blocks of 1024 hold 3, fewer than its ids.
    assert check(alice, model, sessions_workload(dataset, block_size=256)).status_code == 200
    fields = refused_fields(check(alice, model, sessions_workload(dataset, block_size=1024)))
    assert "lists 5 blocks" in fields["workload.dataset.block_size"][0]
    small = refused_fields(
        check(alice, model, sessions_workload(dataset), serve_grid={"max_model_len": [4096]})
    )
    assert "longest request has 5000" in small["workload.dataset.dataset_id"][0]
    trace = stored(alice.org, "mooncake", name="trace")
    wrong = refused_fields(check(alice, model, sessions_workload(trace)))
    assert "needs Agentic session file (JSONL)" in wrong["workload.dataset.dataset_id"][0]


def test_the_estimate_uses_the_files_mean_lengths(alice):
    dataset = stored(alice.org, "agentic_trace", raw=EXAMPLE.read_bytes())
    model = make_model(alice.org)
    experiment = make_experiment(alice.org, model=model, workload=sessions_workload(dataset))
    requests = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    mean_input = round(sum(r["input_length"] for r in requests) / len(requests))
    other = make_experiment(
        alice.org,
        model=model,
        name="random of the same lengths",
        workload={
            "dataset": {
                "kind": "random",
                "input_len": mean_input,
                "output_len": round(sum(r["output_length"] for r in requests) / len(requests)),
            },
            "concurrency": [2],
        },
    )
    assert experiment_estimate(experiment=experiment).sweep_seconds == pytest.approx(
        experiment_estimate(experiment=other).sweep_seconds
    )


def test_the_agent_downloads_its_runs_session_file_as_uploaded(alice):
    dataset = stored(alice.org, "agentic_trace", raw=EXAMPLE.read_bytes())
    run, agent = _run_of(alice.org, sessions_workload(dataset))
    response = agent.get(f"/api/v1/agent/runs/{run.id}/datasets/{dataset.id}/")
    assert response.status_code == 200 and response["Content-Type"] == "application/jsonl"
    assert b"".join(response.streaming_content) == EXAMPLE.read_bytes()
    refused = agent.get(f"/api/v1/agent/runs/{run.id}/datasets/{uuid.uuid4()}/")
    assert refused.status_code == 404 and refused.json() == NOT_FOUND


def test_a_session_file_workload_is_predicted(alice):
    dataset = stored(alice.org, "agentic_trace", raw=EXAMPLE.read_bytes())
    experiment = make_experiment(alice.org, workload=sessions_workload(dataset), slos={})
    response = alice.client().get(
        reverse("experiment-prediction", kwargs={"org": "acme", "pk": experiment.pk})
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["simulated"] is True and body["warnings"] == []
    assert all(row["starts"] and row["output_throughput"] > 0 for row in body["rows"])
