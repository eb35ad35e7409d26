"""A model's config.json read from the Hugging Face hub with the organization's token
(issue 18), against the fake hub on 127.0.0.1 (the real ``huggingface_hub`` client; nothing
leaves the machine): the API's ``hf_config_from_hub`` and the form's checkbox register what
the config says, a gated or missing repo is refused by its field, and the token never shows
in an answer, a page or a log."""

from __future__ import annotations

import json
import logging
import socket

import pytest
from django.urls import reverse

from runs.models import ModelSpec
from runs.services.credentials import provider_key_set
from tests.agents.test_hf_configs import LLAMA_3_1_8B, MIXTRAL_8X7B
from tests.fakes.hf_hub import FakeHub, FakeRepo

from .conftest import SYSTEM, signed_in
from .db_state import database_state

pytestmark = pytest.mark.django_db

TOKEN = "hf_acmeReadsGatedModels0123456789"
OPEN, GATED, NO_CONFIG = "mistralai/Mixtral-8x7B-v0.1", "meta-llama/Llama-3.1-8B", "org/weights"


@pytest.fixture
def hub(settings):
    hub = FakeHub().start()
    hub.repos[OPEN] = FakeRepo(OPEN, {"config.json": json.dumps(MIXTRAL_8X7B).encode()})
    config = json.dumps(LLAMA_3_1_8B).encode()
    hub.repos[GATED] = FakeRepo(GATED, {"config.json": config}, gated_token=TOKEN)
    hub.repos[NO_CONFIG] = FakeRepo(NO_CONFIG, {"model.safetensors": b"\0" * 64})
    settings.BENCHSITE_HF_ENDPOINT = hub.url
    yield hub
    hub.stop()


def with_token(org, token: str = TOKEN) -> None:
    provider_key_set(actor=SYSTEM, org=org, provider="huggingface", api_key=token)


def fetch(person, hf_repo: str, **fields):
    url = reverse("model-list", kwargs={"org": person.org.slug})
    body = {"name": "from the hub", "hf_repo": hf_repo, "hf_config_from_hub": True, **fields}
    return person.client().post(url, body, format="json")


def test_it_registers_an_open_model_from_its_config_on_the_hub_without_a_token(alice, hub):
    response = fetch(alice, OPEN)
    assert response.status_code == 201, response.content
    model = ModelSpec.objects.get(id=response.json()["id"])
    assert model.num_layers == MIXTRAL_8X7B["num_hidden_layers"]
    assert model.architecture["num_experts"] == MIXTRAL_8X7B["num_local_experts"]
    asked = hub.file_requests(OPEN)
    assert [r.path for r in asked] == [f"/{OPEN}/resolve/main/config.json"]  # config.json only
    assert not any(r.with_token for r in hub.requests)  # the site's machine lends it none


def test_it_reads_a_gated_model_with_the_organizations_token_and_never_shows_it(alice, hub, caplog):
    with_token(alice.org)
    caplog.set_level(logging.DEBUG)
    response = fetch(alice, GATED)
    assert response.status_code == 201, response.content
    model = ModelSpec.objects.get(id=response.json()["id"])
    assert model.architecture["vocab_size"] == LLAMA_3_1_8B["vocab_size"]
    assert all(r.with_token for r in hub.file_requests(GATED))
    assert TOKEN not in response.content.decode()
    assert TOKEN not in caplog.text


@pytest.mark.parametrize(
    ("token", "repo", "revision", "field", "message"),
    [
        (None, GATED, "main", "hf_repo", "is gated and the organization has no Hugging Face"),
        ("hf_someoneElsesToken0123456789", GATED, "main", "hf_repo", "token has no access"),
        (TOKEN, "org/missing", "main", "hf_repo", "does not exist on the hub"),
        (TOKEN, OPEN, "v9", "revision", "has no revision 'v9'"),
        (TOKEN, NO_CONFIG, "main", "hf_repo", "has no config.json at revision 'main'"),
        (TOKEN, "not a repo", "main", "hf_repo", "Expected a Hugging Face repo id"),
    ],
    ids=["gated-no-token", "gated-wrong-token", "missing", "revision", "no-config", "bad-id"],
)
def test_it_refuses_what_it_cannot_read_by_its_field_and_stores_nothing(
    alice, hub, caplog, token, repo, revision, field, message
):
    if token:
        with_token(alice.org, token)
    caplog.set_level(logging.DEBUG)
    before = database_state()
    response = fetch(alice, repo, revision=revision)
    assert response.status_code == 400, response.content
    fields = response.json()["error"]["fields"]
    assert list(fields) == [field]
    assert message in fields[field][0], fields
    assert database_state() == before
    if token:
        assert token not in response.content.decode() and token not in caplog.text


def test_it_says_when_the_hub_cannot_be_reached(alice, settings):
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        settings.BENCHSITE_HF_ENDPOINT = f"http://127.0.0.1:{closed.getsockname()[1]}"
    with_token(alice.org)
    before = database_state()
    response = fetch(alice, OPEN)
    assert response.status_code == 400, response.content
    (message,) = response.json()["error"]["fields"]["hf_config_from_hub"]
    assert "the hub cannot be reached" in message
    assert TOKEN not in response.content.decode()
    assert database_state() == before


def test_the_form_reads_the_config_from_the_hub(alice, hub):
    with_token(alice.org)
    client = signed_in(alice)
    form = {"name": "Llama", "hf_repo": GATED, "revision": "main", "hf_config_from_hub": "1"}
    response = client.post("/o/acme/models/new/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    model = ModelSpec.objects.get(organization=alice.org, hf_repo=GATED)
    assert model.architecture["vocab_size"] == LLAMA_3_1_8B["vocab_size"]
    # A refusal is shown by the checkbox, with nothing stored and no token on the page.
    before = database_state()
    page = client.post("/o/acme/models/new/", form | {"hf_repo": "org/missing"})
    text = page.content.decode()
    assert page.status_code == 200 and "does not exist on the hub" in text
    assert TOKEN not in text
    assert database_state() == before
