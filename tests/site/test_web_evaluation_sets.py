"""The evaluation sets page (issue 38): a member uploads a set and sees its summary; a
refused file names the line and field, as the API does, and stores nothing; a set in use is
kept with the reason shown, an unused one deleted and audited; a viewer reads, a stranger
finds nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from agents.evaluation.packs import pack_bytes
from runs.models import AuditEvent, EvaluationSet
from runs.services.evaluations import evaluation_set_upload

from .conftest import SYSTEM, make_experiment, signed_in
from .db_state import database_state
from .test_evaluation_sets import JUDGED

pytestmark = pytest.mark.django_db

SUMS = (
    json.dumps({"set": {"scorer": {"kind": "numeric"}, "licence": "CC0-1.0"}})
    + "\n"
    + json.dumps({"id": "a", "prompt": "2 + 2?", "reference": 4})
    + "\n"
    + json.dumps({"id": "b", "prompt": "Say hi", "scorer": {"kind": "regex", "pattern": "hi"}})
    + "\n"
).encode()
# The third line's reference is not a number: refused there, on that field.
BAD = SUMS + json.dumps({"id": "c", "prompt": "3 + 3?", "reference": "six"}).encode() + b"\n"


def form(name: str, raw: bytes, **extra) -> dict:
    return {"name": name, "file": SimpleUploadedFile("set.jsonl", raw)} | extra


def page_url(org) -> str:
    return reverse("evaluation-sets", args=[org.slug])


def files_under(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()]


def test_a_member_uploads_a_set_and_sees_its_summary(mallory):
    client = signed_in(mallory)
    response = client.post(page_url(mallory.org), form("sums", SUMS, description="two items"))
    assert response.status_code == 302
    stored = EvaluationSet.objects.get(organization=mallory.org)
    assert (stored.name, stored.items, stored.description) == ("sums", 2, "two items")
    event = AuditEvent.objects.get(event="evaluation_set.upload")
    assert event.target_id == str(stored.id) and event.actor == mallory.user
    page = client.get(page_url(mallory.org)).content.decode()
    assert "Uploaded sums: 2 items" in page
    row = page.split(f'id="evaluation-set-{stored.id}"', 1)[1].split("</tr>", 1)[0]
    # Items, scorers by kind, how many have a reference, no judge, the licence stated.
    for shown in (
        '<td class="num">2</td>',
        "numeric 1, regex 1",
        '<td class="num">1</td>',
        "<td>no</td>",
        "CC0-1.0",
    ):
        assert shown in row, shown
    # The built-in pack is listed beside the uploads, with its licence.
    assert 'id="pack-arithmetic"' in page and "no outside data" in page


def test_a_set_that_needs_a_judge_says_so(alice):
    evaluation_set_upload(org=alice.org, actor=SYSTEM, name="judged", raw=JUDGED)
    page = signed_in(alice).get(page_url(alice.org)).content.decode()
    assert "judge 1" in page and "yes: an experiment using it names a judge endpoint" in page


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        (lambda: form("bad", BAD), "file", "line 4: reference: the numeric scorer needs a number"),
        (lambda: form("empty", b"\n\n"), "file", "no item"),
        (lambda: form("", SUMS), "name", "This field may not be blank."),
        (lambda: {"name": "no file"}, "file", "No file was submitted."),
    ],
)
def test_a_refused_upload_names_the_line_and_field_and_stores_nothing(
    alice, tmp_path, data, field, message
):
    before = database_state()
    response = signed_in(alice).post(page_url(alice.org), data())
    assert response.status_code == 400
    page = response.content.decode()
    errors = page.split(f'id="id_{field}-errors" data-field="{field}">', 1)[1].split("</ul>")[0]
    assert message in errors
    assert "The form was not saved" in page
    assert database_state() == before and files_under(tmp_path) == []


def test_the_page_refuses_what_the_api_refuses_with_the_same_message(alice):
    api = alice.client().post(
        reverse("evaluation-set-list", kwargs={"org": alice.org.slug}),
        form("x", BAD),
        format="multipart",
    )
    page = signed_in(alice).post(page_url(alice.org), form("x", BAD))
    assert api.status_code == 400 and page.status_code == 400
    (message,) = api.json()["error"]["fields"]["file"]
    assert message.replace("'", "&#x27;") in page.content.decode()


def test_a_set_in_use_is_kept_with_the_reason_and_an_unused_one_deleted(alice):
    used = evaluation_set_upload(org=alice.org, actor=SYSTEM, name="used", raw=SUMS)
    spare = evaluation_set_upload(org=alice.org, actor=SYSTEM, name="spare", raw=SUMS)
    experiment = make_experiment(alice.org, name="scored", evaluation={"set_id": str(used.id)})
    client = signed_in(alice)
    page = client.get(page_url(alice.org)).content.decode()
    assert experiment.name in page  # the "used by" column names it
    assert reverse("evaluation-set-delete", args=[alice.org.slug, used.id]) not in page
    assert reverse("evaluation-set-delete", args=[alice.org.slug, spare.id]) in page

    before = database_state()
    kept = client.post(
        reverse("evaluation-set-delete", args=[alice.org.slug, used.id]), follow=True
    )
    assert "used: This evaluation set is named by an experiment." in kept.content.decode()
    assert database_state() == before

    gone = client.post(
        reverse("evaluation-set-delete", args=[alice.org.slug, spare.id]), follow=True
    )
    assert "Deleted spare." in gone.content.decode()
    assert list(EvaluationSet.objects.filter(organization=alice.org)) == [used]
    event = AuditEvent.objects.get(event="evaluation_set.delete")
    assert event.target_id == str(spare.id) and event.actor == alice.user


def test_a_viewer_reads_the_list_but_cannot_upload_or_delete(alice, bob):
    stored = evaluation_set_upload(org=alice.org, actor=SYSTEM, name="sums", raw=SUMS)
    viewer = signed_in(bob)
    page = viewer.get(page_url(alice.org))
    assert page.status_code == 200
    assert "sums" in page.content.decode()
    assert "Upload an evaluation set" not in page.content.decode()
    before = database_state()
    assert viewer.post(page_url(alice.org), form("v", pack_bytes("arithmetic"))).status_code == 403
    delete = reverse("evaluation-set-delete", args=[alice.org.slug, stored.id])
    assert viewer.post(delete).status_code == 403
    assert database_state() == before


def test_it_hides_other_tenants_evaluation_sets(alice, charlie):
    stored = evaluation_set_upload(org=alice.org, actor=SYSTEM, name="sums", raw=SUMS)
    client = signed_in(charlie)
    assert client.get(page_url(alice.org)).status_code == 404
    assert "sums" not in client.get(page_url(charlie.org)).content.decode()
    before = database_state()
    # His own organization's address with alice's set: still not his.
    for org in (charlie.org, alice.org):
        address = reverse("evaluation-set-delete", args=[org.slug, stored.id])
        assert client.post(address).status_code == 404
    assert database_state() == before
