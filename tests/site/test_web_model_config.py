"""The model form takes a config.json, pasted or uploaded (issue 18): the page registers
exactly what the API's ``hf_config`` would, shows the facts read from it, and refuses a bad
one with the API's messages, keeping what was typed and storing nothing."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from agents.hardware import MODEL_PRESETS
from runs.model_config import MAX_HF_CONFIG_BYTES
from runs.models import AuditEvent, ModelSpec
from tests.agents.test_hf_configs import DEEPSEEK_V3, GEMMA_2_9B, MIXTRAL_8X7B

from .conftest import make_model, signed_in
from .db_state import database_state

pytestmark = pytest.mark.django_db

NEW = "/o/acme/models/new/"


def identity(hf_repo: str) -> dict:
    return {"name": hf_repo.split("/")[1], "hf_repo": hf_repo, "revision": "main"}


def test_it_registers_a_pasted_config_and_ignores_the_typed_columns(alice):
    client = signed_in(alice)
    # The form as a preset filled it, with Mixtral's config.json pasted over it.
    typed = MODEL_PRESETS["llama-3.1-8b"].registered
    form = typed | identity("mistralai/Mixtral-8x7B-v0.1") | {"hf_config": json.dumps(MIXTRAL_8X7B)}
    response = client.post(NEW, form)
    assert response.status_code == 302, response.content.decode()[:2000]
    model = ModelSpec.objects.get(organization=alice.org, hf_repo="mistralai/Mixtral-8x7B-v0.1")
    assert response.url == f"/o/acme/models/{model.id}/edit/"
    assert model.num_layers == MIXTRAL_8X7B["num_hidden_layers"]
    assert model.architecture["num_experts"] == MIXTRAL_8X7B["num_local_experts"]
    assert model.created_by == alice.user
    assert AuditEvent.objects.filter(event="model.create", target_id=str(model.id)).exists()
    page = client.get(response.url).content.decode()
    experts = MIXTRAL_8X7B["num_local_experts"]
    assert f"all {experts} experts ({MIXTRAL_8X7B['num_experts_per_tok']} per token" in page
    assert f"{model.kv_cache_bytes_per_token():,}" in page


def test_it_registers_an_uploaded_config(alice):
    client = signed_in(alice)
    upload = SimpleUploadedFile(
        "config.json", json.dumps(DEEPSEEK_V3).encode(), content_type="application/json"
    )
    form = identity("deepseek-ai/DeepSeek-V3") | {"hf_config_file": upload}
    response = client.post(NEW, form)
    assert response.status_code == 302, response.content.decode()[:2000]
    model = ModelSpec.objects.get(organization=alice.org, hf_repo="deepseek-ai/DeepSeek-V3")
    assert model.architecture["kv_lora_rank"] == DEEPSEEK_V3["kv_lora_rank"]
    page = client.get(response.url).content.decode()
    assert "multi-head latent attention" in page
    latent = DEEPSEEK_V3["num_hidden_layers"] * (
        DEEPSEEK_V3["kv_lora_rank"] + DEEPSEEK_V3["qk_rope_head_dim"]
    )
    assert f"{latent * 2:,}" in page  # bytes per token: one 16-bit latent per layer


def test_it_reads_a_new_config_on_the_edit_page(alice):
    model = make_model(alice.org, hf_repo="google/gemma-2-9b")
    client = signed_in(alice)
    edit = f"/o/acme/models/{model.id}/edit/"
    assert "Typed columns only" in client.get(edit).content.decode()
    form = {
        "name": model.name,
        "hf_repo": model.hf_repo,
        "revision": "main",
        "hf_config": json.dumps(GEMMA_2_9B),
    }
    assert client.post(edit, form).status_code == 302
    model.refresh_from_db()
    assert model.architecture["sliding_window"] == GEMMA_2_9B["sliding_window"]
    assert "sliding layers" in client.get(edit).content.decode()


@pytest.mark.parametrize(
    ("form", "shown"),
    [
        ({"hf_config": "{not json"}, "Not valid JSON"),
        ({"hf_config": "[1, 2]"}, "A config.json is a JSON object"),
        ({"hf_config": json.dumps({**DEEPSEEK_V3, "hidden_size": None})}, "missing hidden_size"),
        (
            {"hf_config": json.dumps({**DEEPSEEK_V3, "model_type": "gpt_neox"})},
            "model_type &#x27;gpt_neox&#x27; is not supported",
        ),
        ({"hf_config": "{}", "hf_config_from_hub": "1"}, "Give one config.json"),
    ],
    ids=["not-json", "not-an-object", "missing-key", "unsupported-type", "two-sources"],
)
def test_it_refuses_a_bad_pasted_config_keeps_the_text_and_stores_nothing(alice, form, shown):
    client = signed_in(alice)
    before = database_state()
    page = client.post(NEW, identity("deepseek-ai/DeepSeek-V3") | form)
    assert page.status_code == 200
    text = page.content.decode()
    assert shown in text
    assert 'id="err-hf_config"' in text
    assert database_state() == before


def test_it_refuses_an_upload_over_the_limit_before_reading_it_whole(alice):
    client = signed_in(alice)
    before = database_state()
    padding = " " * MAX_HF_CONFIG_BYTES
    upload = SimpleUploadedFile("config.json", (json.dumps(DEEPSEEK_V3) + padding).encode())
    page = client.post(NEW, identity("deepseek-ai/DeepSeek-V3") | {"hf_config_file": upload})
    assert f"at most {MAX_HF_CONFIG_BYTES // 1024} KiB" in page.content.decode()
    assert database_state() == before
