"""Trace datasets on the site (issue 19): Mooncake, BurstGPT and Azure traces uploaded through
the API, refused by line and field with nothing stored, named by experiments only with their
own format and a window that holds requests that fit the context, estimated on that window,
and served to the run that names one exactly as uploaded."""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.files.uploadhandler import TemporaryFileUploadHandler
from django.urls import reverse
from rest_framework.test import APIClient

from agents.predict import predict_workload
from agents.protocol import Slos, Workload
from agents.workloads import parse_trace
from agents.workloads.summary import summarize_trace
from runs.models import AuditEvent, GpuType, Run, WorkloadDataset
from runs.selectors.estimates import experiment_estimate
from runs.services.experiments import dataset_upload
from runs.services.run_tokens import run_token_issue

from .conftest import (
    H100,
    SYSTEM,
    experiment_payload,
    frozen,
    make_experiment,
    make_model,
    signed_in,
)
from .db_state import database_state

pytestmark = pytest.mark.django_db

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workloads"
FILES = {"mooncake": "mooncake.jsonl", "burstgpt": "burstgpt.csv", "azure": "azure.csv"}
NOT_FOUND = {"error": {"status": 404, "code": "not_found", "message": "Not found."}}


def example(kind: str) -> bytes:
    return (EXAMPLES / FILES[kind]).read_bytes()


def upload(person, kind: str, raw: bytes | None = None, name: str = "trace"):
    file = SimpleUploadedFile(FILES[kind], raw or example(kind))
    return person.client().post(
        reverse("dataset-list", kwargs={"org": person.org.slug}),
        {"name": name, "format": kind, "file": file},
        format="multipart",
    )


def stored(org, kind: str, raw: bytes | None = None, name: str = "trace") -> WorkloadDataset:
    return dataset_upload(
        org=org, actor=SYSTEM, name=name, raw=raw or example(kind), dataset_format=kind
    )


def files_under(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()]


def trace_workload(dataset, **options) -> dict:
    return {
        "dataset": {"kind": dataset.format, "dataset_id": str(dataset.id)} | options,
        "concurrency": [1],
    }


def check(person, model, workload: dict, **overrides):
    """The API's check of a draft experiment with ``workload``: writes nothing."""
    return person.client().post(
        reverse("experiment-validate", kwargs={"org": person.org.slug}),
        experiment_payload(model.id, workload=workload, **overrides),
        format="json",
    )


def refused_fields(response) -> dict[str, list[str]]:
    assert response.status_code == 400, response.content
    return response.json()["error"]["fields"]


# ------------------------------------------------------------------------------------------
# Upload through the API
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(FILES))
def test_it_uploads_each_example_trace_with_its_summary(alice, tmp_path, kind):
    response = upload(alice, kind)
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["format"], body["num_conversations"]) == (kind, None)
    expected = summarize_trace(parse_trace(example(kind), kind))
    assert body["summary"] == expected
    dataset = WorkloadDataset.objects.get(pk=body["id"])
    assert dataset.summary == expected and dataset.size_bytes == len(example(kind))
    with dataset.file.open("rb") as file:
        assert file.read() == example(kind)  # kept exactly as uploaded
    assert AuditEvent.objects.filter(event="dataset.upload", target_id=str(dataset.id)).exists()

    detail = (
        alice.client()
        .get(reverse("dataset-detail", kwargs={"org": "acme", "pk": dataset.pk}))
        .json()
    )
    assert detail["summary"] == expected
    (listed,) = (
        alice.client().get(reverse("dataset-list", kwargs={"org": "acme"})).json()["results"]
    )
    assert listed["format"] == kind and "summary" not in listed


def test_the_stored_summary_counts_what_the_file_holds(alice):
    # Figures worked out here from the file itself, not by the reader under test.
    rows = [json.loads(line) for line in example("mooncake").decode().splitlines() if line]
    summary = upload(alice, "mooncake").json()["summary"]
    assert summary["requests"] == len(rows) == 24
    assert summary["span_seconds"] == (rows[-1]["timestamp"] - rows[0]["timestamp"]) / 1000
    assert summary["input_len"]["max"] == max(row["input_length"] for row in rows)
    assert summary["longest_request_tokens"] == max(
        row["input_length"] + row["output_length"] for row in rows
    )


BAD_TRACES = {
    "mooncake with a word for a length": (
        "mooncake",
        b'{"timestamp": 0, "input_length": 5, "output_length": 5}\n'
        b'{"timestamp": 1, "input_length": 5, "output_length": 5}\n'
        b'{"timestamp": 2, "input_length": "many", "output_length": 5}\n',
        "line 3: input_length: must be a whole number",
    ),
    "burstgpt without its header": (
        "burstgpt",
        b"1.0,ChatGPT,10,10,20,API log\n",
        "line 1: the header has no column 'Timestamp'",
    ),
    "azure with a bad time": (
        "azure",
        b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47,10,10\nyesterday,5,5\n",
        "line 3: TIMESTAMP: must be a date and time",
    ),
    "a mooncake file sent as azure": ("azure", example("mooncake"), "line 1: the header"),
    # Python's JSON decoder recurses once per bracket: 100,000 of them exhaust its stack.
    "mooncake with a line nested 100,000 deep": (
        "mooncake",
        b'{"timestamp": 0, "input_length": 5, "output_length": 5}\n' + b"[" * 100_000 + b"\n",
        "line 2: not JSON (JSON nested deeper than 64 levels)",
    ),
    # A whole number of 401 digits is valid JSON but has no float: it cannot be scaled.
    "mooncake with a time past any float": (
        "mooncake",
        b'{"timestamp": 1' + b"0" * 400 + b', "input_length": 5, "output_length": 5}\n',
        "line 1: timestamp: must be a finite number",
    ),
}


@pytest.mark.parametrize(("kind", "raw", "message"), BAD_TRACES.values(), ids=list(BAD_TRACES))
def test_a_bad_trace_is_refused_by_line_and_field_and_nothing_is_stored(
    alice, tmp_path, kind, raw, message
):
    before = database_state()
    fields = refused_fields(upload(alice, kind, raw))
    (refusal,) = fields["file"]
    assert refusal.startswith(message), refusal
    assert database_state() == before
    assert files_under(tmp_path) == []


@pytest.mark.parametrize(
    ("kind", "raw"),
    [
        (
            "burstgpt",
            b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            b"0,ChatGPT,10,10,20,API log\n5e-324,ChatGPT,10,10,20,API log\n",
        ),
        (
            "mooncake",
            b'{"timestamp": 0, "input_length": 5, "output_length": 5}\n'
            b'{"timestamp": 5e-321, "input_length": 5, "output_length": 5}\n',
        ),
    ],
)
def test_requests_a_denormal_apart_are_accepted_as_arriving_at_once(alice, kind, raw):
    # Their gap (5e-324 s, the smallest float) over 120 buckets rounds to 0: no bucket width
    # has a logarithm there. They are two requests that arrive together.
    response = upload(alice, kind, raw)
    assert response.status_code == 201, response.content
    summary = response.json()["summary"]
    assert summary["requests"] == 2 and summary["span_seconds"] == 5e-324
    assert summary["arrivals"] == {"bucket_seconds": 1e-06, "counts": [2]}
    assert summary["mean_rate"] is None  # infinite: every request at once
    dataset = WorkloadDataset.objects.get(pk=response.json()["id"])
    assert dataset.summary == summary


def test_an_unknown_format_is_refused_under_format(alice, tmp_path):
    before = database_state()
    response = alice.client().post(
        reverse("dataset-list", kwargs={"org": "acme"}),
        {"name": "t", "format": "parquet", "file": SimpleUploadedFile("t", example("azure"))},
        format="multipart",
    )
    assert "format" in refused_fields(response)
    assert database_state() == before and files_under(tmp_path) == []


def test_the_size_limit_holds_for_traces(alice, settings, tmp_path):
    settings.DATASET_MAX_BYTES = 1024
    assert len(example("mooncake")) > 1024
    before = database_state()
    (refusal,) = refused_fields(upload(alice, "mooncake"))["file"]
    assert "larger than the limit of 1024 bytes" in refusal
    assert database_state() == before and files_under(tmp_path) == []


class CountingUploadHandler(TemporaryFileUploadHandler):
    """Keeps each upload in a temporary file, as Django does past its memory limit, and
    counts the bytes the site then reads from it."""

    read_bytes = 0

    def file_complete(self, file_size):
        uploaded = super().file_complete(file_size)
        uploaded.file = _CountedReads(uploaded.file)
        return uploaded


class _CountedReads:
    def __init__(self, file):
        self._file = file

    def read(self, size=-1):
        data = self._file.read(size)
        CountingUploadHandler.read_bytes += len(data)
        return data

    def __getattr__(self, name):
        return getattr(self._file, name)


@pytest.mark.parametrize("through", ["api", "page"])
def test_a_file_past_the_limit_is_refused_after_reading_one_byte_more(
    alice, settings, tmp_path, through
):
    settings.DATASET_MAX_BYTES = 1024
    settings.FILE_UPLOAD_HANDLERS = [f"{__name__}.CountingUploadHandler"]
    CountingUploadHandler.read_bytes = 0
    raw = b"x" * (4 * 1024 * 1024)
    before = database_state()
    if through == "api":
        (refusal,) = refused_fields(upload(alice, "mooncake", raw))["file"]
    else:
        response = signed_in(alice).post(
            reverse("datasets", args=[alice.org.slug]),
            {"name": "big", "format": "mooncake", "file": SimpleUploadedFile("t.jsonl", raw)},
        )
        assert response.status_code == 400
        refusal = response.content.decode()
        assert 'id="id_file-errors"' in refusal
    assert "File is larger than the limit of 1024 bytes." in refusal
    assert 0 < CountingUploadHandler.read_bytes <= 1024 + 1
    assert database_state() == before and files_under(tmp_path) == []


def test_a_trace_in_use_is_not_deleted(alice):
    dataset = stored(alice.org, "azure")
    make_experiment(alice.org, workload=trace_workload(dataset))
    before = database_state()
    response = alice.client().delete(
        reverse("dataset-detail", kwargs={"org": "acme", "pk": dataset.pk})
    )
    assert response.status_code == 409
    assert database_state() == before


def test_it_hides_other_tenants_traces(alice, charlie):
    dataset = stored(alice.org, "mooncake")
    address = reverse("dataset-detail", kwargs={"org": charlie.org.slug, "pk": dataset.pk})
    assert charlie.client().get(address).status_code == 404
    model = make_model(charlie.org)
    fields = refused_fields(check(charlie, model, trace_workload(dataset)))
    assert fields["workload.dataset.dataset_id"] == ["No such dataset in this organization."]


# ------------------------------------------------------------------------------------------
# Experiments naming a trace
# ------------------------------------------------------------------------------------------


def test_a_workload_names_a_dataset_of_its_own_format(alice):
    model = make_model(alice.org)
    chats = dataset_upload(
        org=alice.org,
        actor=SYSTEM,
        name="chats",
        raw=json.dumps([{"conversations": [{"from": "h", "value": "a"}] * 2}]).encode(),
    )
    azure = stored(alice.org, "azure", name="azure week")
    before = database_state()
    as_trace = {"dataset": {"kind": "mooncake", "dataset_id": str(chats.id)}, "concurrency": [1]}
    (message,) = refused_fields(check(alice, model, as_trace))["workload.dataset.dataset_id"]
    assert message == (
        "'chats' holds ShareGPT conversations (JSON); the dataset kind 'mooncake' needs "
        "Mooncake trace (JSONL)."
    )
    as_chats = {"dataset": {"kind": "sharegpt", "dataset_id": str(azure.id)}, "concurrency": [1]}
    (message,) = refused_fields(check(alice, model, as_chats))["workload.dataset.dataset_id"]
    assert "'azure week' holds Azure LLM inference trace (CSV)" in message
    assert database_state() == before


@pytest.mark.parametrize("kind", list(FILES))
def test_a_whole_trace_that_fits_is_accepted(alice, kind):
    dataset = stored(alice.org, kind)
    response = alice.client().post(
        reverse("experiment-list", kwargs={"org": "acme"}),
        experiment_payload(make_model(alice.org).id, workload=trace_workload(dataset)),
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["workload"]["dataset"] == {
        "kind": kind,
        "dataset_id": str(dataset.id),
        "start_seconds": 0.0,
        "duration_seconds": None,
        "block_size": 512,
        "model": None,
        "log_type": None,
    }


WINDOW_REFUSALS = {
    # The example's requests span 9.875 s.
    "a window after the last request": (
        "mooncake",
        {"start_seconds": 10},
        "start_seconds",
        "The trace's last request is at 9.875 s: no request from 10 s on.",
    ),
    # Nothing between 1.45 s and 2.346 s (timestamps 1831 and 2727 ms, from 381 ms).
    "a window in a gap": (
        "mooncake",
        {"start_seconds": 1.5, "duration_seconds": 0.5},
        "duration_seconds",
        "No request from 1.5 s for 0.5 s; the next one is at 2.346 s.",
    ),
    # The first request lists 4 hash ids for 1739 tokens: 2 blocks of 1024.
    "blocks too large for the hash ids": (
        "mooncake",
        {"block_size": 1024},
        "block_size",
        "The trace does not fit blocks of 1024 tokens: line 1: hash_ids: lists 4 blocks",
    ),
    "a model the trace does not have": (
        "burstgpt",
        {"model": "Claude"},
        "model",
        "No request of this trace has model 'Claude'.",
    ),
}


@pytest.mark.parametrize(
    ("kind", "options", "field", "message"), WINDOW_REFUSALS.values(), ids=list(WINDOW_REFUSALS)
)
def test_a_window_without_requests_is_refused_on_the_field_at_fault(
    alice, kind, options, field, message
):
    dataset = stored(alice.org, kind)
    model = make_model(alice.org)
    before = database_state()
    fields = refused_fields(check(alice, model, trace_workload(dataset, **options)))
    assert list(fields) == [f"workload.dataset.{field}"]
    assert fields[f"workload.dataset.{field}"][0].startswith(message)
    assert database_state() == before


def test_burstgpt_filters_are_told_apart(alice):
    # ChatGPT logged conversations only; GPT-4 only API calls.
    raw = (
        b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        b"0.5,ChatGPT,10,10,20,Conversation log\n"
        b"1.5,GPT-4,10,10,20,API log\n"
    )
    dataset = stored(alice.org, "burstgpt", raw)
    model = make_model(alice.org)
    both = refused_fields(
        check(alice, model, trace_workload(dataset, model="ChatGPT", log_type="API log"))
    )
    assert both == {
        "workload.dataset.log_type": ["No request of model 'ChatGPT' has log type 'API log'."]
    }
    alone = refused_fields(check(alice, model, trace_workload(dataset, model="Claude")))
    assert list(alone) == ["workload.dataset.model"]
    fine = check(alice, model, trace_workload(dataset, model="GPT-4", log_type="API log"))
    assert fine.status_code == 200, fine.content


def test_every_request_of_the_window_must_fit_the_smallest_context(alice):
    rows = [json.loads(line) for line in example("mooncake").decode().splitlines() if line]
    totals = [row["input_length"] + row["output_length"] for row in rows]
    too_long = sum(total > 2048 for total in totals)
    assert 0 < too_long < len(rows)
    dataset = stored(alice.org, "mooncake")
    model = make_model(alice.org)
    grid = {"max_num_seqs": [64], "max_model_len": [2048, 4096]}
    fields = refused_fields(check(alice, model, trace_workload(dataset), serve_grid=grid))
    assert fields["workload.dataset.dataset_id"] == [
        f"{too_long} of the window's 24 requests have more prompt plus output tokens than "
        f"the smallest context served (2048); the longest has {max(totals)}."
    ]
    # A window of only the short ones fits: the first two requests (2088 and 2247) do not,
    # the fourth (1616) does, alone in the window from 0.814 s to 1.3 s.
    short = trace_workload(dataset, start_seconds=0.8, duration_seconds=0.5)
    assert check(alice, model, short, serve_grid=grid).status_code == 200


# ------------------------------------------------------------------------------------------
# Estimates
# ------------------------------------------------------------------------------------------


def _sweep(model, dataset, name, rates, **options) -> float:
    experiment = make_experiment(
        model.organization,
        model=model,
        name=name,
        serve_grid={},
        workload={
            "dataset": {"kind": "mooncake", "dataset_id": str(dataset.id)} | options,
            "request_rates": rates,
        },
    )
    return experiment_estimate(experiment=experiment).sweep_seconds


def test_a_rate_level_sends_the_window_once_at_its_rate(alice):
    dataset, model = stored(alice.org, "mooncake"), make_model(alice.org)
    # One trial: the window's 24 requests, 23 gaps, at 1 and at 2 per second, plus the same
    # drain: the difference is 23 / 1 - 23 / 2.
    slow = _sweep(model, dataset, "slow", [1])
    fast = _sweep(model, dataset, "fast", [2])
    assert math.isclose(slow - fast, 23 / 2, abs_tol=0.11)
    # The window from 4 s for 3 s: its requests counted here from the file's timestamps.
    times = [json.loads(line)["timestamp"] for line in example("mooncake").decode().splitlines()]
    inside = sum(4000 <= ms - times[0] < 7000 for ms in times)
    assert inside == 7
    part = _sweep(model, dataset, "part", [1], start_seconds=4, duration_seconds=3)
    part_fast = _sweep(model, dataset, "part-fast", [2], start_seconds=4, duration_seconds=3)
    assert math.isclose(part - part_fast, (inside - 1) / 2, abs_tol=0.11)


# ------------------------------------------------------------------------------------------
# The agent's download
# ------------------------------------------------------------------------------------------


def _run_of(org, workload) -> tuple[Run, APIClient]:
    experiment = make_experiment(org, name=f"e-{uuid.uuid4()}", workload=workload)
    run = Run.objects.create(organization=org, experiment=experiment, **frozen(experiment))
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {run_token_issue(run=run)}")
    return run, agent


@pytest.mark.parametrize(
    ("kind", "content_type"),
    [("mooncake", "application/jsonl"), ("burstgpt", "text/csv"), ("azure", "text/csv")],
)
def test_the_agent_downloads_its_runs_trace_as_uploaded(alice, kind, content_type):
    dataset = stored(alice.org, kind)
    other = stored(alice.org, kind, name="other")
    run, agent = _run_of(alice.org, trace_workload(dataset))
    response = agent.get(f"/api/v1/agent/runs/{run.id}/datasets/{dataset.id}/")
    assert response.status_code == 200
    assert response["Content-Type"] == content_type
    assert b"".join(response.streaming_content) == example(kind)
    for missing in (other.id, uuid.uuid4()):
        refused = agent.get(f"/api/v1/agent/runs/{run.id}/datasets/{missing}/")
        assert refused.status_code == 404 and refused.json() == NOT_FOUND


# ------------------------------------------------------------------------------------------
# Predictions
# ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_trace_workload_is_predicted_on_its_window(alice):
    dataset = stored(alice.org, "mooncake")
    window = {"start_seconds": 4, "duration_seconds": 3}  # 7 of the 24 requests (above)
    workload = trace_workload(dataset, **window) | {"request_rates": [1]}
    experiment = make_experiment(alice.org, workload=workload, slos={})
    response = alice.client().get(
        reverse("experiment-prediction", kwargs={"org": "acme", "pk": experiment.pk})
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["simulated"] is True and body["warnings"] == []
    few, many = body["rows"]
    assert few["starts"] and many["starts"]

    # The site's figures are the simulator's replay of that window of the uploaded file.
    direct = predict_workload(
        experiment.model.facts,
        GpuType.objects.get(id=H100).hardware,
        {"max_num_seqs": 64},
        Workload.model_validate(workload),
        Slos(),
        dataset_path=Path(dataset.file.path),
    )
    closed, rate = direct.levels
    # A closed-loop level sends the window's requests in order; the open-loop level sends
    # each once at the trace's times scaled to its rate, and says how late its sends were.
    assert closed["replay"] == rate["replay"] | {"time_scale": None}
    assert "send_lateness" not in closed
    replay = rate["replay"]
    assert (rate["request_rate"], rate["completed"], replay["requests"]) == (1, 7, 7)
    assert replay["time_scale"] == pytest.approx(replay["trace_rate"])  # to 1 request/s
    assert rate["send_lateness"]["max_ms"] < 1  # simulated time: no send is late
    assert few["output_throughput"] == pytest.approx(
        max(level["output_throughput"] for level in direct.levels)
    )
