"""Models registered from their Hugging Face config.json (issue 18): the site stores every
fact ``agents.hardware`` reads (the dense columns, and the facts beyond them in
``architecture``), so KV bytes per token, weight bytes, the fit check and the frozen job are
those of the MoE, MLA or sliding-window model itself. Expected figures are worked out here
from each config, term by term; a bad config is refused by its field, nothing stored."""

from __future__ import annotations

import copy

import pytest
from django.urls import reverse
from hypothesis import given
from hypothesis import strategies as st

from agents import protocol
from agents.hardware import GIB, MODEL_PRESETS, REGISTERED_FACTS, load_model_facts
from agents.runner.trial_engine import sim_model_file
from frontend.experiments.fit import model_fit_rows
from runs.models import AuditEvent, GpuType, ModelSpec, Run
from runs.run_as_started import job_spec_for_attempt, job_spec_freeze
from tests.agents.test_hf_configs import DEEPSEEK_V3, GEMMA_2_9B, LLAMA_3_1_8B, MIXTRAL_8X7B

from .conftest import H100, frozen, make_experiment, make_model
from .db_state import database_state
from .test_api_fuzz_strict import FUZZ, VALUES, _assert_refused_or_taken

pytestmark = pytest.mark.django_db

BF16 = 2  # bytes per element of weights and KV cache in 16 bit
H200 = "NVIDIA H200"


def register(person, config, *, hf_repo: str, **fields):
    url = reverse("model-list", kwargs={"org": person.org.slug})
    body = {"name": hf_repo.split("/")[1], "hf_repo": hf_repo, "hf_config": config, **fields}
    return person.client().post(url, body, format="json")


def registered(person, config, hf_repo: str) -> ModelSpec:
    response = register(person, config, hf_repo=hf_repo)
    assert response.status_code == 201, response.content
    model = ModelSpec.objects.get(id=response.json()["id"])
    # The API answers with what was stored and what it gives.
    assert response.json()["architecture"] == model.architecture
    assert response.json()["kv_cache_bytes_per_token"] == model.kv_cache_bytes_per_token()
    assert response.json()["weight_bytes"] == model.weight_bytes
    return model


def test_it_registers_deepseek_v3_with_its_latent_attention_and_experts(alice):
    c = DEEPSEEK_V3
    model = registered(alice, c, "deepseek-ai/DeepSeek-V3")
    layers, hidden = c["num_hidden_layers"], c["hidden_size"]
    assert (model.num_layers, model.hidden_size, model.max_context) == (
        layers,
        hidden,
        c["max_position_embeddings"],
    )
    assert (model.num_attention_heads, model.num_kv_heads) == (
        c["num_attention_heads"],
        c["num_key_value_heads"],
    )
    assert model.head_dim == c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    assert model.dtype == "fp8"  # its quantization_config
    moe_layers = layers - c["first_k_dense_replace"]
    expert = 3 * hidden * c["moe_intermediate_size"]
    skipped = moe_layers * (c["n_routed_experts"] - c["num_experts_per_tok"]) * expert
    assert model.architecture == {
        "vocab_size": c["vocab_size"],
        "intermediate_size": c["intermediate_size"],
        "active_parameters": model.parameter_count - skipped,
        "num_experts": c["n_routed_experts"],
        "num_experts_per_token": c["num_experts_per_tok"],
        "num_shared_experts": c["n_shared_experts"],
        "moe_intermediate_size": c["moe_intermediate_size"],
        "num_moe_layers": moe_layers,
        "kv_lora_rank": c["kv_lora_rank"],
        "qk_rope_head_dim": c["qk_rope_head_dim"],
    }
    # One latent per layer, no per-head K and V; every linear weight stored in one byte, the
    # embedding table and the LM head in two (the FP8 checkpoint quantizes linear layers).
    latent = layers * (c["kv_lora_rank"] + c["qk_rope_head_dim"]) * BF16
    assert model.kv_cache_bytes_per_token() == latent
    tables = 2 * c["vocab_size"] * c["hidden_size"]
    assert model.weight_bytes == model.parameter_count + tables
    assert abs(model.parameter_count / 671e9 - 1) < 0.01  # DeepSeek's published total
    assert model.facts.parameters_per_token == model.architecture["active_parameters"]


def test_the_fit_check_of_deepseek_v3_holds_its_latent_cache_on_every_gpu(alice):
    c = DEEPSEEK_V3
    model = registered(alice, c, "deepseek-ai/DeepSeek-V3")
    h200 = GpuType.objects.get(id=H200)
    ((_, cells),) = model_fit_rows(model, [h200])
    usable = 0.9 * h200.hardware.memory_gib * GIB  # gpu_memory_utilization 0.9
    for cell in cells:
        assert cell.fits == (model.weight_bytes / cell.gpu_count < usable), cell
    eight = next(cell for cell in cells if cell.gpu_count == 8)
    # What is left of each GPU beside its eighth of the weights holds whole latents (the
    # whole latent on every GPU: tensor parallelism does not split it), less vLLM's reserve.
    latent = c["num_hidden_layers"] * (c["kv_lora_rank"] + c["qk_rope_head_dim"]) * BF16
    left = usable - model.weight_bytes / 8
    assert left - 8 * GIB < eight.kv_tokens * latent <= left
    # The same columns read as a dense model would cache K and V of 16 heads of 192 per GPU:
    # ten times fewer tokens.
    heads_per_gpu = c["num_attention_heads"] // 8
    dense = 2 * c["num_hidden_layers"] * heads_per_gpu * model.head_dim * BF16
    assert eight.kv_tokens > 9 * left / dense


def test_it_registers_mixtral_with_every_expert_in_its_weights(alice):
    c = MIXTRAL_8X7B
    model = registered(alice, c, "mistralai/Mixtral-8x7B-v0.1")
    hidden, layers, experts = c["hidden_size"], c["num_hidden_layers"], c["num_local_experts"]
    head_dim = hidden // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * head_dim, c["num_key_value_heads"] * head_dim
    attention = hidden * q + 2 * hidden * kv + q * hidden
    expert = 3 * hidden * c["intermediate_size"]
    per_layer = attention + 2 * hidden + experts * hidden + experts * expert  # norms, router
    total = 2 * c["vocab_size"] * hidden + hidden + layers * per_layer
    active = total - layers * (experts - c["num_experts_per_tok"]) * expert
    assert model.parameter_count == total
    assert model.weight_bytes == total * BF16
    assert model.architecture == {
        "vocab_size": c["vocab_size"],
        "intermediate_size": c["intermediate_size"],
        "active_parameters": active,
        "num_experts": experts,
        "num_experts_per_token": c["num_experts_per_tok"],
        "moe_intermediate_size": c["intermediate_size"],
        "num_moe_layers": layers,
    }
    assert model.kv_cache_bytes_per_token() == 2 * layers * c["num_key_value_heads"] * head_dim * 2
    # A step runs a token through its two experts, not all eight.
    assert model.facts.parameters_per_token == active
    # All eight experts are loaded: 87 GiB fits no single H100, two.
    h100 = GpuType.objects.get(id=H100)
    ((_, cells),) = model_fit_rows(model, [h100])
    usable = 0.9 * h100.hardware.memory_gib * GIB
    assert [cell.fits for cell in cells] == [
        total * BF16 / cell.gpu_count < usable for cell in cells
    ]
    assert next(cell.gpu_count for cell in cells if cell.fits) == 2


def test_it_registers_gemma_2_with_its_sliding_window_layers(alice):
    c = GEMMA_2_9B
    model = registered(alice, c, "google/gemma-2-9b")
    hidden, layers, kv_heads = c["hidden_size"], c["num_hidden_layers"], c["num_key_value_heads"]
    assert model.dtype == "bfloat16"  # a float32 checkpoint, served in 16 bit
    assert model.head_dim == c["head_dim"]
    assert model.architecture == {
        "vocab_size": c["vocab_size"],
        "intermediate_size": c["intermediate_size"],
        "sliding_window": c["sliding_window"],
        "sliding_window_layers": list(range(0, layers, 2)),  # local, global, local, ...
    }
    q, kv = c["num_attention_heads"] * c["head_dim"], kv_heads * c["head_dim"]
    per_layer = hidden * q + 2 * hidden * kv + q * hidden + 3 * hidden * c["intermediate_size"]
    total = c["vocab_size"] * hidden + hidden + layers * (per_layer + 4 * hidden)  # tied
    assert model.weight_bytes == total * BF16
    per_layer_token = 2 * kv * BF16
    assert model.kv_cache_bytes_per_token() == layers * per_layer_token  # within the window
    # Beyond the window only the global half of the layers grows.
    window, context = c["sliding_window"], c["max_position_embeddings"]
    held = (layers // 2 * context + layers // 2 * window) * per_layer_token
    assert model.facts.kv_bytes_for_context(context) == held


def test_llama_3_1_8b_from_its_config_has_its_own_vocabulary(alice):
    model = registered(alice, LLAMA_3_1_8B, "meta-llama/Llama-3.1-8B")
    assert model.architecture == {
        "vocab_size": LLAMA_3_1_8B["vocab_size"],
        "intermediate_size": LLAMA_3_1_8B["intermediate_size"],
    }
    assert model.facts.vocab_size == LLAMA_3_1_8B["vocab_size"] == 128_256
    # The same columns as the preset; stated by columns alone, the defaults stand in.
    preset = MODEL_PRESETS["llama-3.1-8b"].facts
    columns = {name: getattr(model, name) for name in REGISTERED_FACTS - {"hf_repo"}}
    assert columns == {k: v for k, v in preset.to_registered().items() if k != "hf_repo"}
    typed = make_model(alice.org, revision="typed")
    assert typed.architecture == {} and typed.facts.vocab_size == 32_000


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"hidden_size": None}, "hf_config", "config.json: missing hidden_size"),
        ({"hidden_size": "7168"}, "hf_config", "hidden_size must be a whole number"),
        ({"num_hidden_layers": 2.5}, "hf_config", "num_hidden_layers must be a whole number"),
        ({"model_type": "gpt_neox"}, "hf_config", "model_type 'gpt_neox' is not supported"),
        ({"model_type": ["llama"]}, "hf_config", "model_type ['llama'] is not supported"),
        ({"quantization_config": "fp8"}, "hf_config", "quantization_config must be a JSON"),
        ({"kv_lora_rank": 0}, "hf_config", "kv_lora_rank must be a whole number of 1"),
        ({"num_experts_per_tok": 300}, "hf_config", "num_experts_per_tok (300) is above"),
        ({"vocab_size": 2**40}, "hf_config", "vocab_size: Input should be less than"),
        ({"qk_nope_head_dim": 70_000}, "hf_config", "head_dim read from it: Ensure"),
        ({"num_hidden_layers": 20_000}, "hf_config", "at most 10000"),
    ],
    ids=lambda value: str(value)[:30],
)
def test_it_refuses_a_bad_config_by_its_field_and_stores_nothing(alice, change, field, message):
    before = database_state()
    config = {**copy.deepcopy(DEEPSEEK_V3), **change}
    response = register(alice, config, hf_repo="deepseek-ai/DeepSeek-V3")
    assert response.status_code == 400, response.content
    fields = response.json()["error"]["fields"]
    assert list(fields) == [field]
    assert any(message in text for text in fields[field]), fields
    assert database_state() == before


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"hf_config": [LLAMA_3_1_8B]}, {"hf_config"}),
        ({"hf_config": "config.json"}, {"hf_config"}),
        ({"hf_config": LLAMA_3_1_8B, "num_layers": 32}, {"num_layers"}),
        ({"hf_config": LLAMA_3_1_8B, "hf_config_from_hub": True}, {"hf_config_from_hub"}),
        ({}, {name for name in REGISTERED_FACTS - {"hf_repo", "dtype"}}),
    ],
    ids=["a-list", "a-string", "config-and-columns", "config-and-hub", "neither"],
)
def test_it_refuses_a_config_that_is_not_one_or_comes_with_columns(alice, body, fields):
    before = database_state()
    url = reverse("model-list", kwargs={"org": "acme"})
    response = alice.client().post(
        url, {"name": "m", "hf_repo": "meta-llama/Llama-3.1-8B", **body}, format="json"
    )
    assert response.status_code == 400, response.content
    assert set(response.json()["error"]["fields"]) == fields
    assert database_state() == before


def test_a_new_config_replaces_the_facts_and_a_typed_column_must_agree_with_them(alice):
    model = make_model(alice.org, hf_repo="google/gemma-2-9b")
    url = reverse("model-detail", kwargs={"org": "acme", "pk": model.pk})
    client = alice.client()
    response = client.patch(url, {"hf_config": GEMMA_2_9B}, format="json")
    assert response.status_code == 200, response.content
    model.refresh_from_db()
    assert model.num_layers == GEMMA_2_9B["num_hidden_layers"]
    assert model.architecture["sliding_window"] == GEMMA_2_9B["sliding_window"]
    event = AuditEvent.objects.filter(event="model.update", target_id=str(model.id)).latest("seq")
    assert event.after["architecture"] == model.architecture
    # Fewer layers than the sliding ones it was read with: refused, nothing changed.
    before = database_state()
    response = client.patch(url, {"num_layers": 20}, format="json")
    assert response.status_code == 400, response.content
    (message,) = response.json()["error"]["fields"]["architecture"]
    assert "sliding_window_layers must be distinct layer indices" in message
    assert database_state() == before
    # A column the facts do not constrain changes, and the facts stay.
    response = client.patch(url, {"max_context": 4096}, format="json")
    assert response.status_code == 200, response.content
    model.refresh_from_db()
    assert model.max_context == 4096 and model.architecture["sliding_window_layers"]


def test_the_job_carries_the_facts_and_the_agents_simulator_uses_them(alice, tmp_path):
    model = registered(alice, MIXTRAL_8X7B, "mistralai/Mixtral-8x7B-v0.1")
    experiment = make_experiment(alice.org, model=model, gpu_count=2)
    job = job_spec_freeze(experiment=experiment)
    assert job["model"]["architecture"] == model.architecture
    run = Run.objects.create(organization=alice.org, experiment=experiment, **frozen(experiment))
    report = protocol.ReportTo(ws_url=None, rest_url=None)
    served = job_spec_for_attempt(run, deadline=run.created_at, report=report)
    # As the agent reads it: the job's JSON.
    read = protocol.JobSpec.model_validate_json(served.model_dump_json())
    assert read.model.facts() == model.facts
    simulated = load_model_facts(str(sim_model_file(read.model, tmp_path)))
    assert simulated == model.facts
    assert simulated.num_experts == MIXTRAL_8X7B["num_local_experts"]
    assert simulated.parameters_per_token == model.architecture["active_parameters"]


def test_a_model_stated_by_its_columns_freezes_the_job_it_always_did(alice):
    experiment = make_experiment(alice.org)
    assert "architecture" not in job_spec_freeze(experiment=experiment)["model"]


def test_the_stored_architecture_is_what_a_job_carries(alice):
    # A job's model source built from the stored row gives the site's very facts.
    for repo, config in (
        ("deepseek-ai/DeepSeek-V3", DEEPSEEK_V3),
        ("google/gemma-2-9b", GEMMA_2_9B),
    ):
        model = registered(alice, config, repo)
        source = protocol.ModelSource(
            served_model_name=repo,
            **{name: getattr(model, name) for name in REGISTERED_FACTS},
            architecture=model.architecture,
        )
        assert source.facts() == model.facts


@pytest.mark.slow
def test_it_never_fails_on_any_config_or_any_value_under_a_key_of_one(alice):
    model = make_model(alice.org)
    url = reverse("model-detail", kwargs={"org": "acme", "pk": model.pk})
    client = alice.client()

    @FUZZ
    @given(key=st.sampled_from(sorted(DEEPSEEK_V3)), value=VALUES)
    def send(key, value):
        for config in (value, {**DEEPSEEK_V3, key: value}):
            response = client.patch(url, {"hf_config": config}, format="json")
            _assert_refused_or_taken(response, "hf_config")

    send()
