"""Trace datasets in the web UI (issue 19): uploaded with a format choice, refused by line and
field under the file with nothing stored, and previewed — counts, length statistics and
histograms, arrivals over time, the shared-prefix share — for any dataset without a 500."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from runs.models import AuditEvent, WorkloadDataset
from runs.services.experiments import dataset_upload

from .conftest import SYSTEM, make_experiment, signed_in
from .db_state import database_state

pytestmark = pytest.mark.django_db

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workloads"
FILES = {"mooncake": "mooncake.jsonl", "burstgpt": "burstgpt.csv", "azure": "azure.csv"}


def example(kind: str) -> bytes:
    return (EXAMPLES / FILES[kind]).read_bytes()


def form(kind: str, raw: bytes | None = None) -> dict:
    file = SimpleUploadedFile(FILES[kind], example(kind) if raw is None else raw)
    return {"name": f"{kind} sample", "format": kind, "file": file}


def preview_url(dataset) -> str:
    return reverse("dataset-preview", args=[dataset.organization.slug, dataset.id])


@pytest.mark.parametrize("kind", list(FILES))
def test_a_member_uploads_a_trace_and_lands_on_its_preview(mallory, kind):
    client = signed_in(mallory)
    response = client.post(reverse("datasets", args=[mallory.org.slug]), form(kind), follow=True)
    dataset = WorkloadDataset.objects.get(organization=mallory.org)
    assert (dataset.format, dataset.num_conversations) == (kind, None)
    assert response.redirect_chain[-1][0] == preview_url(dataset)
    page = response.content.decode()
    requests = dataset.summary["requests"]
    assert f"Uploaded {kind} sample: {requests} requests" in page
    assert AuditEvent.objects.filter(event="dataset.upload", target_id=str(dataset.id)).exists()
    listing = client.get(reverse("datasets", args=[mallory.org.slug])).content.decode()
    assert f"{requests} requests" in listing and preview_url(dataset) in listing


def test_a_bad_trace_is_refused_under_the_file_with_its_line_and_nothing_is_stored(alice, tmp_path):
    raw = b'{"timestamp": 0, "input_length": 4, "output_length": 1}\n{"timestamp": -5}\n'
    before = database_state()
    response = signed_in(alice).post(
        reverse("datasets", args=[alice.org.slug]), form("mooncake", raw)
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert (
        '<ul class="field-errors" id="id_file-errors" data-field="file">'
        "<li>line 2: input_length: missing</li>"
    ) in page
    assert '<option value="mooncake" selected>' in page  # the choice is kept
    assert database_state() == before
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def _bins(lengths: list[int], count: int = 20) -> list[tuple[str, int]]:
    """The preview's histogram worked out here: ``count`` equal bins from the shortest to
    the longest, each labelled by the whole token counts it holds."""
    low, high = min(lengths), max(lengths)
    width = (high - low) / count
    rows = []
    for index in range(count):
        start, end = low + index * width, low + (index + 1) * width
        last = index == count - 1
        first, final = math.ceil(start), (high if last else math.ceil(end) - 1)
        held = sum(first <= n <= final for n in lengths)
        rows.append((f"{first:,}–{final:,}" if first != final else f"{first:,}", held))
    return rows


def test_the_preview_shows_the_figures_of_the_file(alice):
    rows = [json.loads(line) for line in example("mooncake").decode().splitlines()]
    dataset = dataset_upload(
        org=alice.org, actor=SYSTEM, name="m", raw=example("mooncake"), dataset_format="mooncake"
    )
    response = signed_in(alice).get(preview_url(dataset))
    assert response.status_code == 200
    page = response.content.decode()
    span = (rows[-1]["timestamp"] - rows[0]["timestamp"]) / 1000
    assert f"<dt>Requests</dt><dd>{len(rows)}</dd>" in page
    assert f"<dt>Span</dt><dd>{span:,.1f} s</dd>" in page
    assert f"{(len(rows) - 1) / span:.3g} requests/s (a request-rate level of this replays" in page
    # Blocks 0, 1 and 2 open all 24 requests: 23 × 1536 tokens, and 10 later blocks repeat.
    assert "of input tokens in blocks of 512 an earlier request sent" in page
    inputs = [row["input_length"] for row in rows]
    for label, held in _bins(inputs):
        assert f'<tr><td class="num">{label}</td><td class="num">{held}</td></tr>' in page
    assert f'<td class="num">{max(inputs):,}</td>' in page
    # The charts draw the same figures, from the page's own JSON, with the vendored script.
    assert 'id="dataset-chart-data"' in page and "vendor/chart.umd.min.js" in page
    assert "cdn" not in page.lower()


def test_every_dataset_has_a_page(alice):
    chats = dataset_upload(
        org=alice.org,
        actor=SYSTEM,
        name="chats",
        raw=json.dumps([{"conversations": [{"from": "h", "value": "a"}] * 2}]).encode(),
    )
    odd = dataset_upload(
        org=alice.org, actor=SYSTEM, name="odd", raw=example("azure"), dataset_format="azure"
    )
    make_experiment(
        alice.org,
        workload={"dataset": {"kind": "azure", "dataset_id": str(odd.id)}, "concurrency": [1]},
    )
    client = signed_in(alice)
    page = client.get(preview_url(chats))
    assert page.status_code == 200 and "1 usable conversations" in page.content.decode()
    assert "batching" in client.get(preview_url(odd)).content.decode()  # who uses it
    # A summary of another shape (a hand-edited row) still gives a page, not a 500.
    for summary in ({}, {"requests": 3}, {"input_len": []}, []):
        WorkloadDataset.objects.filter(pk=odd.pk).update(summary=summary)
        page = client.get(preview_url(odd))
        assert page.status_code == 200
        assert "nothing to preview" in page.content.decode()
        listing = client.get(reverse("datasets", args=[alice.org.slug])).content.decode()
        assert "a trace without a summary" in listing or "3 requests" in listing


def test_another_tenants_dataset_page_is_not_found(alice, charlie):
    dataset = dataset_upload(
        org=alice.org, actor=SYSTEM, name="m", raw=example("azure"), dataset_format="azure"
    )
    client = signed_in(charlie)
    assert client.get(preview_url(dataset)).status_code == 404
    mine = reverse("dataset-preview", args=[charlie.org.slug, dataset.id])
    assert client.get(mine).status_code == 404
