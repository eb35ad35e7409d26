"""Every validation rule of the site core, through the API: the answer is 400 naming the exact
field path in ``error.fields``, and nothing is written (no row, no audit event, no file; an
updated row stays as it was). Conflicts (409) and forbidden role changes (403) likewise."""

from __future__ import annotations

import importlib
import json
import pkgutil
import uuid

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from drf_spectacular.generators import SchemaGenerator
from rest_framework import serializers

import runs.api
import runs.inputs
from runs.inputs.strict_fields import is_strict
from runs.models import Membership, Run
from runs.services.experiments import dataset_upload
from runs.services.tenancy import membership_change_role

from .conftest import MODEL_FIELDS, SYSTEM, WORKLOAD, experiment_payload, frozen, make_experiment
from .conftest import make_model as make_model_spec
from .db_state import database_state

SHAREGPT = [
    {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello!"}]},
]


def url(name: str, org: str = "acme", **kwargs) -> str:
    return reverse(name, kwargs={"org": org, **kwargs})


def assert_refused(response, field: str, before: dict) -> None:
    """400 in the one error shape, naming ``field`` exactly, and nothing written."""
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["status"] == 400 and error["code"] == "invalid"
    assert field in error["fields"], error["fields"]
    assert all(isinstance(m, str) and m for m in error["fields"][field])
    assert database_state() == before


# ------------------------------------------------------------------------------------------
# Experiments: serve grid, workload, SLOs, engine — on create, validate, PUT and PATCH
# ------------------------------------------------------------------------------------------


def workload(**changes) -> dict:
    return WORKLOAD | changes


SESSIONS = {"kind": "chat_sessions", "system_len": 200, "user_len": 100, "output_len": 50}


def random_dataset(**changes) -> dict:
    return {"kind": "random", "input_len": 512, "output_len": 128} | changes


EXPERIMENT_CASES = {
    # serve grid: the flag schema
    "unknown flag": ({"serve_grid": {"max_num_seq": [64]}}, "serve_grid.max_num_seq"),
    "flag in CLI spelling": (
        {"serve_grid": {"--max-num-seqs": [64]}},
        "serve_grid.--max-num-seqs",
    ),
    "bool for int": ({"serve_grid": {"max_num_seqs": [True]}}, "serve_grid.max_num_seqs[0]"),
    "string for int": (
        {"serve_grid": {"max_num_seqs": [64, "8"]}},
        "serve_grid.max_num_seqs[1]",
    ),
    "fraction for int": (
        {"serve_grid": {"max_num_batched_tokens": [2048.5]}},
        "serve_grid.max_num_batched_tokens[0]",
    ),
    "int for bool": (
        {"serve_grid": {"enable_prefix_caching": [1]}},
        "serve_grid.enable_prefix_caching[0]",
    ),
    "string for float": (
        {"serve_grid": {"gpu_memory_utilization": ["0.9"]}},
        "serve_grid.gpu_memory_utilization[0]",
    ),
    "scalar for list": ({"serve_grid": {"max_num_seqs": 64}}, "serve_grid.max_num_seqs"),
    "empty list": ({"serve_grid": {"max_num_seqs": []}}, "serve_grid.max_num_seqs"),
    "duplicate value": ({"serve_grid": {"max_num_seqs": [64, 64]}}, "serve_grid.max_num_seqs[1]"),
    "grid not an object": ({"serve_grid": [64]}, "serve_grid"),
    "below minimum": ({"serve_grid": {"max_num_seqs": [0]}}, "serve_grid.max_num_seqs[0]"),
    "above maximum": (
        {"serve_grid": {"max_num_batched_tokens": [2048, 2**22]}},
        "serve_grid.max_num_batched_tokens[1]",
    ),
    "at exclusive minimum": (
        {"serve_grid": {"gpu_memory_utilization": [0]}},
        "serve_grid.gpu_memory_utilization[0]",
    ),
    "fraction above one": (
        {"serve_grid": {"gpu_memory_utilization": [0.9, 1.5]}},
        "serve_grid.gpu_memory_utilization[1]",
    ),
    "not a choice": ({"serve_grid": {"kv_cache_dtype": ["fp4"]}}, "serve_grid.kv_cache_dtype[0]"),
    "int not a choice": ({"serve_grid": {"block_size": [24]}}, "serve_grid.block_size[0]"),
    "grid over the size limit": (
        {
            "serve_grid": {
                "max_num_seqs": list(range(1, 10)),
                "max_num_batched_tokens": [2**k for k in range(8, 16)],
            }
        },
        "serve_grid",
    ),
    "flag the vLLM version lacks": (
        {"engine_image_tag": "v0.18.0", "serve_grid": {"swap_space": [4]}},
        "serve_grid.swap_space",
    ),
    # serve grid against the experiment: GPUs and the model's context
    "tensor_parallel_size above gpu_count": (
        {"gpu_count": 2, "serve_grid": {"tensor_parallel_size": [1, 2, 4]}},
        "serve_grid.tensor_parallel_size[2]",
    ),
    "tensor x pipeline above gpu_count": (
        {
            "gpu_count": 4,
            "serve_grid": {"tensor_parallel_size": [2, 4], "pipeline_parallel_size": [2]},
        },
        "serve_grid.tensor_parallel_size[1]",
    ),
    "max_model_len beyond the model's context": (
        {"serve_grid": {"max_model_len": [8192, 262_144]}},
        "serve_grid.max_model_len[1]",
    ),
    # workload
    "workload without any level": (
        {"workload": workload(concurrency=[], request_rates=[])},
        "workload.concurrency",
    ),
    "prompt and output beyond the smallest max_model_len": (
        {
            "serve_grid": {"max_model_len": [4096, 512]},
            "workload": workload(dataset=random_dataset(input_len=512, output_len=128)),
        },
        "workload.dataset.input_len",
    ),
    "prompt and output beyond the model's context": (
        {"workload": workload(dataset=random_dataset(input_len=131_000, output_len=128))},
        "workload.dataset.input_len",
    ),
    "prefix prompt beyond the smallest max_model_len": (
        {
            "serve_grid": {"max_model_len": [2048]},
            "workload": workload(
                dataset={"kind": "prefix", "shared_len": 1500, "suffix_len": 500, "output_len": 64}
            ),
        },
        "workload.dataset.shared_len",
    ),
    "unknown key in workload": ({"workload": workload(warmup=5)}, "workload.warmup"),
    "unknown key in dataset": (
        {"workload": workload(dataset=random_dataset(prompt_len=5))},
        "workload.dataset.prompt_len",
    ),
    "unknown dataset kind": (
        {"workload": workload(dataset={"kind": "csv", "input_len": 5})},
        "workload.dataset.kind",
    ),
    "workload without dataset": ({"workload": {"concurrency": [1]}}, "workload.dataset"),
    "string for int in workload": (
        {"workload": workload(concurrency=["8"])},
        "workload.concurrency[0]",
    ),
    "bool for int in workload": (
        {"workload": workload(requests_per_level=True)},
        "workload.requests_per_level",
    ),
    "duplicate concurrency": (
        {"workload": workload(concurrency=[1, 8, 1])},
        "workload.concurrency[2]",
    ),
    "zero request rate": ({"workload": workload(request_rates=[0])}, "workload.request_rates[0]"),
    "input_len out of range": (
        {"workload": workload(dataset=random_dataset(input_len=0))},
        "workload.dataset.input_len",
    ),
    "workload not an object": ({"workload": [1, 8]}, "workload"),
    "sharegpt dataset that does not exist": (
        {"workload": workload(dataset={"kind": "sharegpt", "dataset_id": str(uuid.UUID(int=7))})},
        "workload.dataset.dataset_id",
    ),
    # engine
    "vllm without image tag": ({"engine_image_tag": ""}, "engine_image_tag"),
    "image tag with a shell command": (
        {"engine_image_tag": "v0.11.0; rm -rf /"},
        "engine_image_tag",
    ),
    "image tag starting with a dash": ({"engine_image_tag": "-v0.11.0"}, "engine_image_tag"),
    "image tag too long": ({"engine_image_tag": "v" * 129}, "engine_image_tag"),
    "unknown engine": ({"engine": "tgi"}, "engine"),
    # SLOs
    "negative SLO": ({"slos": {"ttft_ms": -1}}, "slos.ttft_ms"),
    "zero SLO": ({"slos": {"tpot_ms": 0}}, "slos.tpot_ms"),
    "string SLO": ({"slos": {"e2el_ms": "500"}}, "slos.e2el_ms"),
    "unknown SLO": ({"slos": {"p99_ttft_ms": 500}}, "slos.p99_ttft_ms"),
    # plain fields
    "gpu_count above 8": ({"gpu_count": 9}, "gpu_count"),
    "gpu_count zero": ({"gpu_count": 0}, "gpu_count"),
    "unknown GPU type": ({"gpu_type": "NVIDIA GeForce 256"}, "gpu_type"),
    "unknown cloud type": ({"cloud_type": "spot"}, "cloud_type"),
    "zero budget cap": ({"budget_cap_usd": "0"}, "budget_cap_usd"),
    "negative budget cap": ({"budget_cap_usd": "-5"}, "budget_cap_usd"),
    "unknown model": ({"model": str(uuid.UUID(int=7))}, "model"),
    "malformed model id": ({"model": "llama"}, "model"),
    "blank name": ({"name": ""}, "name"),
    # chat sessions (issue 19): the chat endpoint, and the last turn's history fits
    "chat sessions on the completions endpoint": (
        {"workload": workload(dataset=SESSIONS)},
        "workload.endpoint",
    ),
    "chat sessions whose last turn exceeds the context": (
        {"workload": workload(dataset=SESSIONS | {"max_turns": 1000}, endpoint="chat")},
        "workload.dataset.max_turns",
    ),
    "agentic sessions whose last turn exceeds the context": (
        {"workload": workload(dataset={"kind": "agentic", "max_turns": 200})},
        "workload.dataset.max_turns",
    ),
    "an agentic session file that was never uploaded": (
        {"workload": workload(dataset={"kind": "agentic_trace", "dataset_id": str(uuid.uuid4())})},
        "workload.dataset.dataset_id",
    ),
    "chat sessions with fewer max than min turns": (
        {
            "workload": workload(
                dataset=SESSIONS | {"min_turns": 5, "max_turns": 4}, endpoint="chat"
            )
        },
        "workload.dataset.max_turns",
    ),
}


@pytest.fixture
def model(alice):
    return make_model_spec(alice.org)


@pytest.fixture
def experiment(alice, model):
    return make_experiment(alice.org, model=model)


@pytest.mark.parametrize(
    ("changes", "field"), list(EXPERIMENT_CASES.values()), ids=list(EXPERIMENT_CASES)
)
@pytest.mark.parametrize("how", ["create", "validate", "replace"])
def test_it_refuses_invalid_experiments(alice, experiment, model, how, changes, field):
    payload = experiment_payload(model.id, **changes)
    target = {
        "create": ("post", url("experiment-list")),
        "validate": ("post", url("experiment-validate")),
        "replace": ("put", url("experiment-detail", pk=experiment.pk)),
    }[how]
    before = database_state()
    response = getattr(alice.client(), target[0])(target[1], payload, format="json")
    assert_refused(response, field, before)


def test_it_accepts_the_base_payload_of_those_cases(alice, experiment, model):
    # The control: each case above differs from a valid experiment in one respect only.
    response = alice.client().post(
        url("experiment-list"), experiment_payload(model.id), format="json"
    )
    assert response.status_code == 201, response.json()


def test_it_refuses_a_second_experiment_of_the_same_name(alice, experiment, model):
    before = database_state()
    response = alice.client().post(
        url("experiment-list"), experiment_payload(model.id, name=experiment.name), format="json"
    )
    assert_refused(response, "name", before)


def test_it_refuses_another_tenants_sharegpt_dataset(alice, charlie, experiment, model):
    theirs = dataset_upload(
        org=charlie.org, actor=SYSTEM, name="theirs", raw=json.dumps(SHAREGPT).encode()
    )
    client = alice.client()
    answers = []
    for dataset_id in (theirs.id, uuid.uuid4()):
        payload = experiment_payload(
            model.id, workload=workload(dataset={"kind": "sharegpt", "dataset_id": str(dataset_id)})
        )
        before = database_state()
        response = client.post(url("experiment-list"), payload, format="json")
        assert_refused(response, "workload.dataset.dataset_id", before)
        answers.append(response.json())
    assert answers[0] == answers[1]  # "theirs" reads exactly like "none"


def test_it_accepts_chat_sessions_that_fit_and_estimates_them(alice, model):
    sessions = workload(dataset=SESSIONS | {"max_turns": 8, "think_seconds": 2}, endpoint="chat")
    payload = experiment_payload(model.id, workload=sessions)
    response = alice.client().post(url("experiment-list"), payload, format="json")
    assert response.status_code == 201, response.json()
    estimate = alice.client().get(url("experiment-estimate", pk=response.json()["id"]))
    assert estimate.status_code == 200, estimate.content
    assert any("think or tool time" in warning for warning in estimate.json()["warnings"])


def test_it_accepts_agentic_sessions_and_estimates_their_mean_context(alice, model):
    agentic = workload(dataset={"kind": "agentic", "min_turns": 2, "max_turns": 4})
    response = alice.client().post(
        url("experiment-list"), experiment_payload(model.id, workload=agentic), format="json"
    )
    assert response.status_code == 201, response.json()
    estimate = alice.client().get(url("experiment-estimate", pk=response.json()["id"])).json()
    assert any("think or tool time" in warning for warning in estimate["warnings"])


def test_it_accepts_an_own_sharegpt_dataset(alice, model):
    ours = dataset_upload(
        org=alice.org, actor=SYSTEM, name="ours", raw=json.dumps(SHAREGPT).encode()
    )
    payload = experiment_payload(
        model.id, workload=workload(dataset={"kind": "sharegpt", "dataset_id": str(ours.id)})
    )
    response = alice.client().post(url("experiment-list"), payload, format="json")
    assert response.status_code == 201, response.json()


@pytest.fixture
def small_model(alice):
    return make_model_spec(
        alice.org, name="small", hf_repo="Qwen/Qwen2.5-0.5B-Instruct", max_context=4096
    )


@pytest.fixture
def wide_experiment(alice, model):
    """Two GPUs, tensor parallel 2, a long context: several ways for a PATCH to break it."""
    return make_experiment(
        alice.org,
        model=model,
        name="wide",
        gpu_count=2,
        serve_grid={"tensor_parallel_size": [2], "max_model_len": [65_536]},
    )


PATCH_CASES = {
    "fewer GPUs than tensor parallelism": ({"gpu_count": 1}, "serve_grid.tensor_parallel_size[0]"),
    "a model with a shorter context": (None, "serve_grid.max_model_len[0]"),
    "a grid with a wrong type": (
        {"serve_grid": {"max_num_seqs": ["8"]}},
        "serve_grid.max_num_seqs[0]",
    ),
    "no image tag": ({"engine_image_tag": ""}, "engine_image_tag"),
    "no load level": (
        {"workload": workload(concurrency=[], request_rates=[])},
        "workload.concurrency",
    ),
    "a negative SLO": ({"slos": {"itl_ms": -3}}, "slos.itl_ms"),
    "a workload longer than the context": (
        {"workload": workload(dataset=random_dataset(input_len=65_536))},
        "workload.dataset.input_len",
    ),
}


@pytest.mark.parametrize(("changes", "field"), list(PATCH_CASES.values()), ids=list(PATCH_CASES))
def test_it_keeps_an_experiment_intact_when_a_patch_would_break_it(
    alice, wide_experiment, small_model, changes, field
):
    changes = changes if changes is not None else {"model": str(small_model.id)}
    before = database_state()
    response = alice.client().patch(
        url("experiment-detail", pk=wide_experiment.pk), changes, format="json"
    )
    assert_refused(response, field, before)


# ------------------------------------------------------------------------------------------
# Registered models
# ------------------------------------------------------------------------------------------

MODEL_CASES = {
    "repo id with spaces": ({"hf_repo": "meta llama/Llama 3"}, "hf_repo"),
    "repo id without owner": ({"hf_repo": "Llama-3.1-8B"}, "hf_repo"),
    "repo id as a URL": ({"hf_repo": "https://huggingface.co/meta-llama/Llama-3.1-8B"}, "hf_repo"),
    "repo id with '..'": ({"hf_repo": "meta-llama/Llama..8B"}, "hf_repo"),
    "revision escaping": ({"revision": "../../etc"}, "revision"),
    "kv heads not dividing heads": ({"num_kv_heads": 12}, "num_kv_heads"),
    "kv heads above heads": ({"num_kv_heads": 64}, "num_kv_heads"),
    "zero layers": ({"num_layers": 0}, "num_layers"),
    "word for a number": ({"parameter_count": "eight billion"}, "parameter_count"),
    "unknown dtype": ({"dtype": "fp64"}, "dtype"),
    "tiny context": ({"max_context": 8}, "max_context"),
    "blank name": ({"name": ""}, "name"),
}


@pytest.mark.parametrize(("changes", "field"), list(MODEL_CASES.values()), ids=list(MODEL_CASES))
@pytest.mark.parametrize("how", ["create", "replace", "patch"])
def test_it_refuses_invalid_models(alice, model, how, changes, field):
    client = alice.client()
    before = database_state()
    if how == "create":
        payload = MODEL_FIELDS | {"hf_repo": "mistralai/Mistral-7B-v0.3"} | changes
        response = client.post(url("model-list"), payload, format="json")
    elif how == "replace":
        response = client.put(
            url("model-detail", pk=model.pk), MODEL_FIELDS | changes, format="json"
        )
    else:
        response = client.patch(url("model-detail", pk=model.pk), changes, format="json")
    assert_refused(response, field, before)


@pytest.mark.parametrize("how", ["create", "patch"])
def test_it_refuses_a_duplicate_repo_and_revision(alice, model, small_model, how):
    client = alice.client()
    before = database_state()
    if how == "create":
        response = client.post(url("model-list"), MODEL_FIELDS, format="json")
    else:
        response = client.patch(
            url("model-detail", pk=small_model.pk), {"hf_repo": model.hf_repo}, format="json"
        )
    assert_refused(response, "hf_repo", before)
    # Another revision of the same repo is another model.
    other = client.post(url("model-list"), MODEL_FIELDS | {"revision": "v2"}, format="json")
    assert other.status_code == 201, other.json()


def test_it_keeps_a_models_context_above_its_experiments_grids(alice, wide_experiment, model):
    before = database_state()
    response = alice.client().patch(
        url("model-detail", pk=model.pk), {"max_context": 32_768}, format="json"
    )
    assert_refused(response, "max_context", before)


def test_it_keeps_a_models_context_above_its_experiments_workloads(alice, model):
    # No max_model_len in the grid: the model's context is what the workload must fit.
    make_experiment(
        alice.org,
        model=model,
        name="long prompts",
        workload=workload(dataset=random_dataset(input_len=60_000, output_len=1000)),
    )
    before = database_state()
    response = alice.client().patch(
        url("model-detail", pk=model.pk), {"max_context": 32_768}, format="json"
    )
    assert_refused(response, "max_context", before)


def test_it_refuses_to_delete_a_model_in_use(alice, experiment, model):
    before = database_state()
    response = alice.client().delete(url("model-detail", pk=model.pk))
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "conflict"
    assert database_state() == before


# ------------------------------------------------------------------------------------------
# Budgets, tokens, members, GPU prices
# ------------------------------------------------------------------------------------------

BUDGET_CASES = {
    "month not on the first day": ({"month": "2025-07-15", "limit_usd": "10"}, "month"),
    "month not a date": ({"month": "July", "limit_usd": "10"}, "month"),
    "month and experiment": (
        {"month": "2025-07-01", "limit_usd": "10", "experiment": True},
        "month",
    ),
    "negative limit": ({"limit_usd": "-0.01"}, "limit_usd"),
    "no limit": ({"note": "forgot"}, "limit_usd"),
    "limit not a number": ({"limit_usd": "lots"}, "limit_usd"),
    "unknown experiment": ({"limit_usd": "10", "experiment": str(uuid.UUID(int=7))}, "experiment"),
}


@pytest.mark.parametrize(("payload", "field"), list(BUDGET_CASES.values()), ids=list(BUDGET_CASES))
def test_it_refuses_invalid_budgets(alice, experiment, payload, field):
    client = alice.client()
    # A standing budget exists: a refused request must not replace it either.
    assert client.post(url("budget-list"), {"limit_usd": "50"}, format="json").status_code == 201
    if payload.get("experiment") is True:
        payload = payload | {"experiment": str(experiment.pk)}
    before = database_state()
    response = client.post(url("budget-list"), payload, format="json")
    assert_refused(response, field, before)


TOKEN_CASES = {
    "no name": ({}, "name"),
    "blank name": ({"name": ""}, "name"),
    "whitespace name": ({"name": "   "}, "name"),
    "long name": ({"name": "t" * 101}, "name"),
    "user not an e-mail": ({"name": "ci", "user": "bob"}, "user"),
    "user not a member": ({"name": "ci", "user": "nobody@example.com"}, "user"),
}


@pytest.mark.parametrize(("payload", "field"), list(TOKEN_CASES.values()), ids=list(TOKEN_CASES))
def test_it_refuses_invalid_tokens(alice, payload, field):
    before = database_state()
    response = alice.client().post(url("token-list"), payload, format="json")
    assert_refused(response, field, before)


MEMBER_CASES = {
    "unknown role": ({"email": "eve@acme.example", "role": "superuser"}, "role"),
    "no role": ({"email": "eve@acme.example"}, "role"),
    "bad e-mail": ({"email": "eve", "role": "member"}, "email"),
    "already a member": ({"email": "BOB@acme.example", "role": "admin"}, "email"),
}


@pytest.mark.parametrize(("payload", "field"), list(MEMBER_CASES.values()), ids=list(MEMBER_CASES))
def test_it_refuses_invalid_members(alice, bob, payload, field):
    before = database_state()
    response = alice.client().post(url("member-list"), payload, format="json")
    assert_refused(response, field, before)


@pytest.mark.parametrize("role", ["superuser", "", None, 3])
def test_it_refuses_an_unknown_role_change(alice, bob, role):
    membership = Membership.objects.get(user=bob.user)
    before = database_state()
    response = alice.client().patch(
        url("member-detail", pk=membership.pk), {"role": role}, format="json"
    )
    assert_refused(response, "role", before)


PRICE_CASES = {
    "negative price": ({"price_secure_usd_hr": "-1"}, "price_secure_usd_hr"),
    "no price at all": ({"note": "n/a"}, "price_secure_usd_hr"),
    "word for a price": ({"price_community_usd_hr": "cheap"}, "price_community_usd_hr"),
}


@pytest.mark.parametrize(("payload", "field"), list(PRICE_CASES.values()), ids=list(PRICE_CASES))
def test_it_refuses_invalid_gpu_prices(alice, payload, field):
    before = database_state()
    response = alice.client().put(
        url("gpu-type-price", pk="NVIDIA H100 80GB HBM3"), payload, format="json"
    )
    assert_refused(response, field, before)


# ------------------------------------------------------------------------------------------
# Dataset uploads
# ------------------------------------------------------------------------------------------

DATASET_CASES = {
    "invalid JSON": (b'[{"conversations": [', "file"),
    "nested too deep": (b"[" * 100_000 + b"]" * 100_000, "file"),
    "nested too deep in UTF-16": (("[" * 5_000 + "]" * 5_000).encode("utf-16"), "file"),
    "not UTF-8": (b"\xff\xfe[]", "file"),
    "an object, not a list": (b'{"conversations": []}', "file"),
    "an empty list": (b"[]", "file"),
    "items without conversations": (b'[{"turns": []}]', "file"),
    "turns of the wrong shape": (b'[{"conversations": [{"from": "human"}]}]', "file"),
    "no conversation with a reply": (
        json.dumps([{"conversations": [{"from": "human", "value": "Hi"}]}]).encode(),
        "file",
    ),
}


@pytest.mark.parametrize(("raw", "field"), list(DATASET_CASES.values()), ids=list(DATASET_CASES))
def test_it_refuses_invalid_datasets(alice, tmp_path, raw, field):
    before = database_state()
    response = alice.client().post(
        url("dataset-list"),
        {"name": "chats", "file": SimpleUploadedFile("chats.json", raw)},
        format="multipart",
    )
    assert_refused(response, field, before)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []  # no file left behind


def test_it_refuses_datasets_over_the_size_limit(alice, settings, tmp_path):
    settings.DATASET_MAX_BYTES = 1024
    raw = json.dumps(SHAREGPT * 40).encode()
    assert len(raw) > 1024
    before = database_state()
    response = alice.client().post(
        url("dataset-list"),
        {"name": "chats", "file": SimpleUploadedFile("chats.json", raw)},
        format="multipart",
    )
    assert_refused(response, "file", before)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"name": "chats"}, "file"),
        ({"name": "   ", "file": True}, "name"),
        ({"file": True}, "name"),
    ],
    ids=["no file", "blank name", "no name"],
)
def test_it_refuses_incomplete_uploads(alice, payload, field):
    if payload.get("file") is True:
        payload = payload | {"file": SimpleUploadedFile("c.json", json.dumps(SHAREGPT).encode())}
    before = database_state()
    response = alice.client().post(url("dataset-list"), payload, format="multipart")
    assert_refused(response, field, before)


def test_it_refuses_to_delete_a_dataset_in_use(alice, model):
    dataset = dataset_upload(
        org=alice.org, actor=SYSTEM, name="c", raw=json.dumps(SHAREGPT).encode()
    )
    make_experiment(
        alice.org,
        model=model,
        workload=workload(dataset={"kind": "sharegpt", "dataset_id": str(dataset.id)}),
    )
    before = database_state()
    response = alice.client().delete(url("dataset-detail", pk=dataset.pk))
    assert response.status_code == 409
    assert database_state() == before


def test_it_refuses_to_delete_an_experiment_with_runs(alice, experiment):
    Run.objects.create(organization=alice.org, experiment=experiment, **frozen(experiment))
    before = database_state()
    response = alice.client().delete(url("experiment-detail", pk=experiment.pk))
    assert response.status_code == 409
    assert database_state() == before


# ------------------------------------------------------------------------------------------
# Owners: the last one stays, and only owners make owners
# ------------------------------------------------------------------------------------------


def _membership(person) -> Membership:
    return Membership.objects.get(organization__slug="acme", user=person.user)


@pytest.mark.parametrize(
    ("method", "payload"),
    [("patch", {"role": "admin"}), ("patch", {"role": "viewer"}), ("delete", None)],
)
def test_it_keeps_the_last_owner(alice, method, payload):
    before = database_state()
    response = getattr(alice.client(), method)(
        url("member-detail", pk=_membership(alice).pk), payload, format="json"
    )
    assert response.status_code == 409, response.json()
    assert response.json()["error"]["code"] == "conflict"
    assert database_state() == before


def test_it_lets_an_owner_step_down_once_another_owner_exists(alice, bob):
    client = alice.client()
    promoted = client.patch(
        url("member-detail", pk=_membership(bob).pk), {"role": "owner"}, format="json"
    )
    assert promoted.status_code == 200
    response = client.patch(
        url("member-detail", pk=_membership(alice).pk), {"role": "admin"}, format="json"
    )
    assert response.status_code == 200


@pytest.fixture
def admin(mallory):
    membership_change_role(membership=_membership(mallory), role="admin", actor=SYSTEM)
    return mallory


@pytest.mark.parametrize(
    "attempt",
    [
        "promote a member to owner",
        "promote themselves to owner",
        "add a new owner",
        "add an existing user as owner",
        "demote the owner",
        "remove the owner",
        "issue a token acting as the owner",
    ],
)
def test_it_lets_only_owners_grant_or_take_the_owner_role(alice, bob, charlie, admin, attempt):
    request = {
        "promote a member to owner": (
            "patch",
            url("member-detail", pk=_membership(bob).pk),
            {"role": "owner"},
        ),
        "promote themselves to owner": (
            "patch",
            url("member-detail", pk=_membership(admin).pk),
            {"role": "owner"},
        ),
        "add a new owner": (
            "post",
            url("member-list"),
            {"email": "eve@acme.example", "role": "owner"},
        ),
        "add an existing user as owner": (
            "post",
            url("member-list"),
            {"email": charlie.user.email, "role": "owner"},
        ),
        "demote the owner": (
            "patch",
            url("member-detail", pk=_membership(alice).pk),
            {"role": "member"},
        ),
        "remove the owner": ("delete", url("member-detail", pk=_membership(alice).pk), None),
        # A token acting as the owner would hand the admin every owner power.
        "issue a token acting as the owner": (
            "post",
            url("token-list"),
            {"name": "mine now", "user": alice.user.email},
        ),
    }[attempt]
    method, target, payload = request
    before = database_state()
    response = getattr(admin.client(), method)(target, payload, format="json")
    assert response.status_code == 403, response.content
    assert response.json()["error"]["code"] == "permission_denied"
    assert database_state() == before


def test_it_lets_admins_manage_non_owners(alice, bob, admin):
    client = admin.client()
    changed = client.patch(
        url("member-detail", pk=_membership(bob).pk), {"role": "member"}, format="json"
    )
    assert changed.status_code == 200
    added = client.post(
        url("member-list"), {"email": "eve@acme.example", "role": "admin"}, format="json"
    )
    assert added.status_code == 201
    token = client.post(url("token-list"), {"name": "ci", "user": bob.user.email}, format="json")
    assert token.status_code == 201


# ------------------------------------------------------------------------------------------
# Strict types, bounds and lengths on every writable field (issue 14, items 7 and 8)
# ------------------------------------------------------------------------------------------

# Each case breaks one field of an otherwise valid request; each was accepted before (a
# number stored as a string, a string read as a number, a boolean read from "yes", an
# unbounded number or text).
STRICT_EXPERIMENT_CASES = {
    "a number for the name": ({"name": 123}, "name"),
    "a string for gpu_count": ({"gpu_count": "2"}, "gpu_count"),
    "a float for gpu_count": ({"gpu_count": 2.0}, "gpu_count"),
    "a string for container_disk_gb": ({"container_disk_gb": "80"}, "container_disk_gb"),
    "a string for allow_other_cloud": ({"allow_other_cloud": "yes"}, "allow_other_cloud"),
    "a number for allow_other_cloud": ({"allow_other_cloud": 1}, "allow_other_cloud"),
    "a number for the description": ({"description": 5}, "description"),
    "a number for the image tag": ({"engine_image_tag": 11}, "engine_image_tag"),
    "a number for network_volume_id": ({"network_volume_id": 5}, "network_volume_id"),
    "an SLO of 1e308 ms": ({"slos": {"ttft_ms": 1e308}}, "slos.ttft_ms"),
    "an SLO above an hour": ({"slos": {"e2el_ms": 3_600_001}}, "slos.e2el_ms"),
    "a request rate of 1e9": (
        {"workload": workload(request_rates=[1e9])},
        "workload.request_rates[0]",
    ),
    "a request rate near zero": (
        {"workload": workload(request_rates=[1e-9])},
        "workload.request_rates[0]",
    ),
    "a burstiness of 1e6": ({"workload": workload(burstiness=1e6)}, "workload.burstiness"),
    # lengths
    "a description of 10,001 characters": ({"description": "x" * 10_001}, "description"),
    "a description of 500 kB": ({"description": "x" * 500_000}, "description"),
    "a workload with 50,000 unknown keys": (
        {"workload": workload(**{f"k{i}": 1 for i in range(50_000)})},
        "workload",
    ),
    "SLOs with many unknown keys": (
        {"slos": {f"slo_{i}": 1 for i in range(50)}},
        "slos",
    ),
    "a grid with 40,000 keys": (
        {"serve_grid": {f"flag_{i}": [1] for i in range(40_000)}},
        "serve_grid",
    ),
    "a grid flag name of 1 MB": ({"serve_grid": {"x" * 1_000_000: [1]}}, "serve_grid"),
}


@pytest.mark.parametrize(
    ("changes", "field"), list(STRICT_EXPERIMENT_CASES.values()), ids=list(STRICT_EXPERIMENT_CASES)
)
@pytest.mark.parametrize("how", ["create", "patch"])
def test_it_refuses_experiment_fields_of_the_wrong_type_or_size(
    alice, experiment, model, how, changes, field
):
    client = alice.client()
    before = database_state()
    if how == "create":
        response = client.post(
            url("experiment-list"), experiment_payload(model.id, **changes), format="json"
        )
    else:
        response = client.patch(url("experiment-detail", pk=experiment.pk), changes, format="json")
    if field == "serve_grid" and "serve_grid" not in response.json()["error"].get("fields", {}):
        # A grid's unknown flag is reported on its (shortened) path below serve_grid.
        fields = response.json()["error"]["fields"]
        assert response.status_code == 400 and all(f.startswith("serve_grid") for f in fields)
        assert all(len(f) < 100 for f in fields), fields
        assert database_state() == before
    else:
        assert_refused(response, field, before)
    # The error says what it wanted; it never echoes a value at length, nor one per key.
    assert len(response.content) < 2000


def test_it_keeps_values_exactly_at_the_bounds(alice, model):
    payload = experiment_payload(
        model.id,
        name="n" * 200,
        description="d" * 10_000,
        gpu_count=8,
        slos={"ttft_ms": 3_600_000, "tpot_ms": 0.5},
        workload=workload(request_rates=[0.001, 10_000], burstiness=100),
        budget_cap_usd=25,  # a JSON number is a decimal too
    )
    response = alice.client().post(url("experiment-list"), payload, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["budget_cap_usd"] == "25.00"


def test_it_refuses_a_5_mb_description_and_stores_nothing(alice, model):
    # Refused by the body limit (413) or, below it, by the field's own (400).
    before = database_state()
    payload = experiment_payload(model.id, description="x" * 5_000_000)
    response = alice.client().post(url("experiment-list"), payload, format="json")
    assert response.status_code in (400, 413), response.status_code
    assert len(response.content) < 2000
    assert database_state() == before


@pytest.mark.parametrize(
    "grid",
    [
        # Below the 1 MB body limit; the old check took 5 s and answered 49 MB for 5.5 MB.
        {"max_num_seqs": list(range(1, 130_000))},
        {"max_num_seqs": [10**6 + i for i in range(100_000)]},  # each value out of range
        {f"flag_{i}": [1] for i in range(40_000)},  # 40,000 unknown flags
    ],
    ids=["one long axis", "one long axis of bad values", "many unknown flags"],
)
def test_it_refuses_a_huge_grid_briefly(alice, model, grid):
    # What the refusal costs is measured by `make bench-api` (benchmarks/api_latency.py).
    body = json.dumps(experiment_payload(model.id, serve_grid=grid))
    assert 500_000 < len(body) < 1_000_000
    before = database_state()
    response = alice.client().post(url("experiment-list"), body, content_type="application/json")
    assert_refused(response, "serve_grid", before)
    assert len(response.content) < 2000


MODEL_STRICT_CASES = {
    "a string for parameter_count": ({"parameter_count": "8000000000"}, "parameter_count"),
    "a float for num_layers": ({"num_layers": 32.0}, "num_layers"),
    "a number for the name": ({"name": 5}, "name"),
    "a number for the notes": ({"notes": 5}, "notes"),
    "notes of 10,001 characters": ({"notes": "n" * 10_001}, "notes"),
}


@pytest.mark.parametrize(
    ("changes", "field"), list(MODEL_STRICT_CASES.values()), ids=list(MODEL_STRICT_CASES)
)
def test_it_refuses_model_fields_of_the_wrong_type_or_size(alice, model, changes, field):
    before = database_state()
    response = alice.client().patch(url("model-detail", pk=model.pk), changes, format="json")
    assert_refused(response, field, before)


OTHER_STRICT_CASES = {
    "budget: a number for the note": ("budget-list", {"limit_usd": "5", "note": 5}, "note"),
    "token: a number for the name": ("token-list", {"name": 5}, "name"),
}


@pytest.mark.parametrize(
    ("route", "payload", "field"), list(OTHER_STRICT_CASES.values()), ids=list(OTHER_STRICT_CASES)
)
def test_it_refuses_other_fields_of_the_wrong_type_or_size(alice, route, payload, field):
    before = database_state()
    response = alice.client().post(url(route), payload, format="json")
    assert_refused(response, field, before)


def _request_serializers() -> list[type]:
    """Every serializer some endpoint takes a request body with: the request components of
    the API schema (``…Request``), matched to the serializer classes of runs.api and
    runs.inputs."""
    for package in (runs.api, runs.inputs):
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package.__name__}.{module.name}")
    schema = SchemaGenerator().get_schema(request=None, public=True)
    taking_input = {
        name.removesuffix("Request").removeprefix("Patched")
        for name in schema["components"]["schemas"]
        if name.endswith("Request")
    }
    found, pending = [], [serializers.Serializer]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__module__.startswith(("runs.api.", "runs.inputs.")) and (
            cls.__name__.removesuffix("Serializer") in taking_input
        ):
            found.append(cls)
    return sorted(found, key=lambda cls: cls.__name__)


REQUEST_SERIALIZERS = _request_serializers()


def test_it_finds_every_serializer_that_takes_input():
    # The control for the test below: it looks at the serializers that matter.
    assert {cls.__name__ for cls in REQUEST_SERIALIZERS} >= {
        "BudgetSerializer",
        "DatasetUploadSerializer",
        "ExperimentSerializer",
        "GpuPriceSerializer",
        "MemberAddSerializer",
        "MemberRoleSerializer",
        "ModelSpecSerializer",
        "ProviderKeySetSerializer",
        "RunCancelSerializer",
        "RunStartSerializer",
        "TokenCreateSerializer",
    }


def test_it_keeps_every_request_serializer_in_the_input_contract():
    # runs.inputs is the one truth of what a request may carry, shared with the web pages;
    # runs.api keeps only HTTP and the shapes of its answers.
    outside = [cls for cls in REQUEST_SERIALIZERS if not cls.__module__.startswith("runs.inputs.")]
    assert outside == []


@pytest.mark.parametrize("serializer_class", REQUEST_SERIALIZERS, ids=lambda cls: cls.__name__)
def test_it_builds_every_writable_field_strict_and_bounded(db, serializer_class):
    for name, field in serializer_class().fields.items():
        if field.read_only or isinstance(field, serializers.FileField):
            continue  # a file's size is DATASET_MAX_BYTES, checked by the service
        assert is_strict(field), f"{serializer_class.__name__}.{name} is {field!r}"
        if isinstance(field, serializers.CharField):
            assert field.max_length is not None, name
        if isinstance(field, serializers.IntegerField | serializers.DecimalField):
            assert field.min_value is not None and field.max_value is not None, name
        if isinstance(field, serializers.ListField):
            assert field.max_length is not None, name


# ------------------------------------------------------------------------------------------
# Bodies: nesting depth, size, and error answers that never repeat the input at length
# ------------------------------------------------------------------------------------------


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _post_raw(person, path: str, body: str | bytes, method: str = "POST"):
    client = person.client()
    client.raise_request_exception = False  # a 500 is an answer to assert on, not a crash
    return client.generic(method, path, body, content_type="application/json")


@pytest.mark.parametrize("depth", [330, 65, 100_000], ids=["330", "one too deep", "100000"])
@pytest.mark.parametrize(
    ("method", "name"),
    [
        ("POST", "experiment-list"),
        ("POST", "experiment-validate"),
        ("PUT", "experiment-detail"),
        ("POST", "model-list"),
        ("POST", "token-list"),
    ],
)
def test_it_refuses_json_nested_too_deep_with_400(alice, experiment, method, name, depth):
    path = url(name, pk=experiment.pk) if name.endswith("detail") else url(name)
    before = database_state()
    body = '{"serve_grid": ' + _nested(depth - 1) + "}"
    response = _post_raw(alice, path, body, method)
    assert response.status_code == 400, response.content[:500]
    error = response.json()["error"]
    assert error["code"] == "parse_error" and "nested deeper than 64" in error["message"]
    assert database_state() == before


def test_it_reads_json_up_to_the_depth_limit(alice, model):
    # 64 deep in all, the body's own object included: decoded, then refused by validation.
    body = json.dumps(experiment_payload(model.id) | {"serve_grid": json.loads(_nested(63))})
    response = _post_raw(alice, url("experiment-validate"), body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    assert "serve_grid" in response.json()["error"]["fields"]


def test_it_refuses_a_body_over_the_limit_with_413(alice, model, settings):
    # As settings.py has them: one knob for JSON bodies and for Django's own (forms).
    settings.BENCHSITE_MAX_BODY_BYTES = settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024
    before = database_state()
    payload = experiment_payload(model.id, description="x" * (64 * 1024))
    response = alice.client().post(url("experiment-list"), payload, format="json")
    assert response.status_code == 413, response.content[:500]
    assert response.json() == {
        "error": {
            "status": 413,
            "code": "too_large",
            "message": "The request body is larger than 65536 bytes.",
        }
    }
    assert database_state() == before
    # Just under the limit, the same endpoint reads the body (and validation answers).
    payload = experiment_payload(model.id, description="x" * 1000)
    assert alice.client().post(url("experiment-list"), payload, format="json").status_code == 201


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"workload": WORKLOAD | {"k" * 200_000: 1}}, "workload.kkkk"),  # the path holds it
        ({"workload": WORKLOAD | {"dataset": {"kind": "k" * 200_000}}}, "workload.dataset"),
        ({"name": "n" * 500_000}, "name"),
        ({"serve_grid": {"max_num_seqs": ["s" * 200_000]}}, "serve_grid.max_num_seqs"),
    ],
    ids=["a long unknown key", "a long tag", "a long name", "a long value"],
)
def test_it_never_repeats_a_long_input_in_an_error(alice, model, changes, field):
    before = database_state()
    payload = experiment_payload(model.id, **changes)
    response = alice.client().post(url("experiment-list"), payload, format="json")
    assert response.status_code == 400
    assert len(response.content) < 5_000, len(response.content)
    fields = response.json()["error"]["fields"]
    assert any(path.startswith(field) for path in fields), fields
    assert database_state() == before


def test_it_lists_a_bounded_number_of_field_errors():
    from rest_framework.exceptions import ValidationError

    from runs.api.errors import MAX_ERROR_FIELDS, api_exception_handler
    from runs.inputs.errors import MAX_ERROR_TEXT_CHARS

    detail = {f"field_{n}": ["bad " * 1000] for n in range(5_000)}
    # A pydantic error dict that reached DRF as is: its message counts, its input never.
    detail["field_0"] = {"type": "string_type", "loc": ("x",), "msg": "bad", "input": "i" * 10**6}
    body = api_exception_handler(ValidationError(detail), {}).data["error"]
    assert len(body["fields"]) == MAX_ERROR_FIELDS
    assert body["fields"]["field_0"] == ["bad"]
    assert all(len(m) <= MAX_ERROR_TEXT_CHARS + 3 for ms in body["fields"].values() for m in ms)
    assert len(body["message"]) < 2 * MAX_ERROR_TEXT_CHARS
    assert f"{5_000 - MAX_ERROR_FIELDS} more fields" in body["message"]
    assert len(json.dumps(body)) < 50_000


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"name": "nul\x00name"}, "name"),
        ({"serve_grid": {"kv_cache_dtype": ["auto", "fp8\x00"]}}, "serve_grid.kv_cache_dtype[1]"),
        ({"workload": {"dataset": {"kind": "random\x00"}}}, "workload.dataset.kind"),
        ({"description": {"a\x00": 1}}, "description"),
    ],
    ids=["a field", "a grid value", "a nested value", "a key"],
)
def test_it_names_the_field_that_holds_a_null_character(alice, changes, field):
    """PostgreSQL cannot store U+0000: the parser refuses it before anything is decoded into
    a serializer, naming where it is, as every other refusal does."""
    model = make_model_spec(alice.org)
    before = database_state()
    body = json.dumps(experiment_payload(model.id) | changes)
    response = _post_raw(alice, url("experiment-list"), body)
    assert_refused(response, field, before)
    assert "U+0000" in response.json()["error"]["fields"][field][0]
