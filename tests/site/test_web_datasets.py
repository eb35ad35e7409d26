"""The datasets page and model deletion (issue 7): who may see and do what, that a refused
upload names the API's field with the API's message and stores nothing, and that nothing in
use is ever deleted."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from runs.models import AuditEvent, ModelSpec, WorkloadDataset
from runs.services.experiments import dataset_upload

from .conftest import SYSTEM, make_experiment, make_model, signed_in
from .db_state import database_state

pytestmark = pytest.mark.django_db

CHATS = [
    {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello!"}]},
    {"conversations": [{"from": "human", "value": "Only a prompt"}]},
    {"conversations": [{"from": "human", "value": "2+2?"}, {"from": "gpt", "value": "4"}]},
]


def upload(name: str, content: bytes) -> dict:
    return {"name": name, "file": SimpleUploadedFile("chats.json", content, "application/json")}


def datasets_url(org) -> str:
    return reverse("datasets", args=[org.slug])


def sharegpt_experiment(org, dataset):
    workload = {
        "dataset": {"kind": "sharegpt", "dataset_id": str(dataset.id)},
        "concurrency": [1],
    }
    return make_experiment(org, name="uses-chats", workload=workload)


def test_a_member_uploads_a_sharegpt_file_and_sees_it_listed(mallory):
    client = signed_in(mallory)
    response = client.post(
        datasets_url(mallory.org), upload("support chats", json.dumps(CHATS).encode())
    )
    assert response.status_code == 302
    dataset = WorkloadDataset.objects.get(organization=mallory.org)
    assert (dataset.name, dataset.num_conversations) == ("support chats", 2)
    assert AuditEvent.objects.filter(event="dataset.upload", target_id=str(dataset.id)).exists()
    page = client.get(datasets_url(mallory.org)).content.decode()
    assert "support chats" in page and "Uploaded support chats: 2 usable conversations" in page
    assert f'id="dataset-{dataset.id}"' in page


@pytest.mark.parametrize(
    ("form", "field", "message"),
    [
        (lambda: upload("broken", b"{not json"), "file", "Not valid JSON"),
        (lambda: upload("a dict", b"{}"), "file", "Expected a JSON list of conversations."),
        (lambda: upload("", json.dumps(CHATS).encode()), "name", "This field may not be blank."),
        (lambda: {"name": "no file"}, "file", "No file was submitted."),
    ],
)
def test_a_refused_upload_names_the_field_and_stores_nothing(alice, form, field, message):
    before = database_state()
    response = signed_in(alice).post(datasets_url(alice.org), form())
    assert response.status_code == 400
    page = response.content.decode()
    assert (
        f'<ul class="field-errors" id="id_{field}-errors" data-field="{field}"><li>{message}'
        in page
    )
    assert "The form was not saved" in page
    assert database_state() == before


def test_the_page_refuses_what_the_api_refuses_with_the_same_message(alice):
    api = alice.client().post(
        reverse("dataset-list", kwargs={"org": alice.org.slug}),
        {"name": "x", "file": SimpleUploadedFile("x.json", b"[]")},
        format="multipart",
    )
    page = signed_in(alice).post(datasets_url(alice.org), upload("x", b"[]"))
    assert api.status_code == 400 and page.status_code == 400
    (message,) = api.json()["error"]["fields"]["file"]
    assert message in page.content.decode()


def test_a_dataset_in_use_is_kept_and_an_unused_one_deleted(alice):
    used = dataset_upload(org=alice.org, actor=SYSTEM, name="used", raw=json.dumps(CHATS).encode())
    spare = dataset_upload(
        org=alice.org, actor=SYSTEM, name="spare", raw=json.dumps(CHATS).encode()
    )
    experiment = sharegpt_experiment(alice.org, used)
    client = signed_in(alice)
    page = client.get(datasets_url(alice.org)).content.decode()
    assert experiment.name in page  # the "used by" column names it
    assert reverse("dataset-delete", args=[alice.org.slug, used.id]) not in page

    before = database_state()
    kept = client.post(reverse("dataset-delete", args=[alice.org.slug, used.id]), follow=True)
    assert "used by an experiment" in kept.content.decode()
    assert database_state() == before

    client.post(reverse("dataset-delete", args=[alice.org.slug, spare.id]))
    assert list(WorkloadDataset.objects.filter(organization=alice.org)) == [used]
    assert AuditEvent.objects.filter(event="dataset.delete", target_id=str(spare.id)).exists()


def test_a_viewer_reads_the_list_but_cannot_upload_or_delete(alice, bob):
    dataset = dataset_upload(org=alice.org, actor=SYSTEM, name="d", raw=json.dumps(CHATS).encode())
    viewer = signed_in(bob)
    page = viewer.get(datasets_url(alice.org))
    assert page.status_code == 200 and "Upload a dataset" not in page.content.decode()
    before = database_state()
    assert (
        viewer.post(datasets_url(alice.org), upload("v", json.dumps(CHATS).encode())).status_code
        == 403
    )
    delete = reverse("dataset-delete", args=[alice.org.slug, dataset.id])
    assert viewer.post(delete).status_code == 403
    assert database_state() == before


def test_another_tenants_datasets_are_not_found(alice, charlie):
    dataset = dataset_upload(org=alice.org, actor=SYSTEM, name="d", raw=json.dumps(CHATS).encode())
    client = signed_in(charlie)
    assert client.get(datasets_url(alice.org)).status_code == 404
    before = database_state()
    # His own organization's address with alice's dataset: still not his.
    assert (
        client.post(reverse("dataset-delete", args=[charlie.org.slug, dataset.id])).status_code
        == 404
    )
    assert (
        client.post(reverse("dataset-delete", args=[alice.org.slug, dataset.id])).status_code == 404
    )
    assert database_state() == before


def test_a_model_no_experiment_uses_is_deleted_and_one_in_use_is_kept(alice):
    used = make_experiment(alice.org).model
    spare = make_model(alice.org, name="spare", hf_repo="acme/spare-model")
    client = signed_in(alice)
    edit = client.get(reverse("model-edit", args=[alice.org.slug, used.id])).content.decode()
    assert reverse("model-delete", args=[alice.org.slug, used.id]) not in edit
    assert "it stays while they refer to it" in edit

    before = database_state()
    kept = client.post(reverse("model-delete", args=[alice.org.slug, used.id]), follow=True)
    assert "used by experiments" in kept.content.decode()
    assert database_state() == before

    gone = client.post(reverse("model-delete", args=[alice.org.slug, spare.id]), follow=True)
    assert gone.redirect_chain[-1][0] == reverse("models", args=[alice.org.slug])
    assert "Deleted spare." in gone.content.decode()
    assert not ModelSpec.objects.filter(pk=spare.pk).exists()
    assert AuditEvent.objects.filter(event="model.delete", target_id=str(spare.id)).exists()


def test_only_writers_of_the_organization_delete_models(alice, bob, charlie):
    model = make_model(alice.org, name="spare")
    before = database_state()
    assert (
        signed_in(bob).post(reverse("model-delete", args=[alice.org.slug, model.id])).status_code
        == 403
    )
    for org in (alice.org, charlie.org):
        address = reverse("model-delete", args=[org.slug, model.id])
        assert signed_in(charlie).post(address).status_code == 404
    assert (
        signed_in(alice).get(reverse("model-delete", args=[alice.org.slug, model.id])).status_code
        == 405
    )
    assert database_state() == before


def test_it_points_to_the_sample_workloads_of_each_format(alice):
    page = signed_in(alice).get("/o/acme/experiments/datasets/").content.decode()
    shipped = sorted(p.name for p in (settings.BASE_DIR / "examples" / "workloads").iterdir())
    assert "mooncake.jsonl" in shipped and "sharegpt.json" in shipped
    for name in shipped:
        assert f"<code>{name}</code>" in page, name


def test_the_datasets_page_points_to_the_sample_files_in_the_repository(alice):
    # Issue 35, point 4: a newcomer with no trace of their own is shown the repository's
    # samples, one per format, by name.
    page = signed_in(alice).get("/o/acme/experiments/datasets/")
    assert page.status_code == 200
    hint = page.content.decode().split('id="dataset-samples"', 1)[1].split("</p>", 1)[0]
    assert "examples/workloads/" in hint
    shipped = sorted(p.name for p in (settings.BASE_DIR / "examples/workloads").iterdir())
    assert shipped and all(f"<code>{name}</code>" in hint for name in shipped)
