"""Pages for models and experiments (issue 7): who may see and do what, and that a form's
errors are the API's errors, named by the same field paths, with nothing stored."""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client

from agents import protocol
from agents.engines.sim import command as sim_command
from agents.hardware import MODEL_PRESETS, REGISTERED_FACTS, StartRefusal, gpu_profile, start_check
from agents.runner.trial_engine import sim_model_file
from frontend.experiments import builder
from frontend.experiments.fit import FitCell
from frontend.experiments.form_slots import error_slot
from runs.models import AuditEvent, Experiment, ModelSpec, Run

from .conftest import (
    H100,
    WORKLOAD,
    experiment_payload,
    frozen,
    make_experiment,
    make_model,
    signed_in,
)
from .db_state import database_state
from .test_web_runs import answered_run, text_of

pytestmark = pytest.mark.django_db


def builder_form(model, **overrides) -> dict:
    """What the builder posts for a valid experiment (rows editor, random dataset)."""
    form = {
        "name": "web-experiment",
        "description": "",
        "model": str(model.id),
        "gpu_type": H100,
        "gpu_count": "1",
        "cloud_type": "secure",
        "fallback_gpu_types": ["", "", "", ""],
        "container_disk_gb": "80",
        "network_volume_id": "",
        "engine": "vllm",
        "engine_image_tag": "v0.11.0",
        "grid_mode": "rows",
        "grid_flag": ["max_num_seqs", "max_num_batched_tokens", ""],
        "grid_values": ["64, 128", "2048", ""],
        "serve_grid_json": "",
        "dataset_kind": "random",
        "input_len": "512",
        "output_len": "128",
        "range_ratio": "",
        "endpoint": "completions",
        "concurrency": "1, 8, 64",
        "request_rates": "",
        "requests_per_level": "100",
        "warmup_requests": "",
        "burstiness": "",
        "slo_ttft_ms": "500",
        "slo_tpot_ms": "50",
        "slo_itl_ms": "",
        "slo_e2el_ms": "",
        "budget_cap_usd": "25.00",
    }
    return form | overrides


def assert_refused_beside(person, form: dict, path: str, slot: str, message: str) -> None:
    """Saving ``form`` in the builder stores nothing and shows ``message`` beside the input
    ``slot``; the live check names ``path`` alone."""
    client = signed_in(person)
    before = database_state()
    page = client.post(f"/o/{person.org.slug}/experiments/new/", form)
    assert page.status_code == 200
    assert database_state() == before
    checked = client.post(f"/o/{person.org.slug}/experiments/check/", form).json()
    assert list(checked["fields"]) == [path]
    html = page.content.decode()
    errors = html[html.index(f'data-slot="{slot}"') :]
    assert message in errors[: errors.index("</ul>")]


def shown_again(experiment) -> tuple[builder.BuilderForm, dict]:
    """The builder's form showing ``experiment`` and the payload it submits, checked to be
    the same experiment: no form errors, and a workload that validates to the stored one."""
    shown = builder.builder_form_from_experiment(experiment)
    payload, errors = builder.experiment_payload(shown)
    assert errors == {}
    read = protocol.Workload.model_validate
    assert read(payload["workload"]) == read(experiment.workload)
    return shown, payload


def api_fields(person, payload) -> dict:
    """The field errors the API's validate endpoint gives for ``payload`` (or {})."""
    response = person.client().post(
        f"/api/v1/orgs/{person.org.slug}/experiments/validate/", payload, format="json"
    )
    return response.json()["error"]["fields"] if response.status_code == 400 else {}


def page_urls(org, model, experiment) -> dict[str, str]:
    base = f"/o/{org.slug}"
    return {
        "models": f"{base}/models/",
        "model-new": f"{base}/models/new/",
        "model-edit": f"{base}/models/{model.id}/edit/",
        "experiments": f"{base}/experiments/",
        "experiment-new": f"{base}/experiments/new/",
        "experiment-detail": f"{base}/experiments/{experiment.id}/",
        "experiment-edit": f"{base}/experiments/{experiment.id}/edit/",
        "experiment-duplicate": f"{base}/experiments/{experiment.id}/duplicate/",
    }


READ_PAGES = ("models", "experiments", "experiment-detail")
WRITE_PAGES = (
    "model-new",
    "model-edit",
    "experiment-new",
    "experiment-edit",
    "experiment-duplicate",
)


# ---------------------------------------------------------------------------------------------
# Access rules
# ---------------------------------------------------------------------------------------------


def test_it_sends_anonymous_visitors_to_sign_in(alice):
    experiment = make_experiment(alice.org)
    urls = page_urls(alice.org, experiment.model, experiment)
    urls["experiment-start"] = f"{urls['experiment-detail']}start/"
    urls["experiment-check"] = "/o/acme/experiments/check/"
    client = Client()
    for name, url in urls.items():
        method = client.post if name in ("experiment-start", "experiment-check") else client.get
        response = method(url)
        assert response.status_code == 302, name
        assert response.url.startswith("/login/?next="), name


@pytest.mark.slow
def test_it_lets_every_member_read_every_page(alice, bob, mallory):
    experiment = make_experiment(alice.org, name="secret-sauce")
    urls = page_urls(alice.org, experiment.model, experiment)
    for person in (alice, mallory):
        client = signed_in(person)
        for name in (*READ_PAGES, *WRITE_PAGES):
            assert client.get(urls[name]).status_code == 200, (person.user.email, name)
    viewer = signed_in(bob)
    for name in READ_PAGES:
        page = viewer.get(urls[name])
        assert page.status_code == 200, name
    assert b"secret-sauce" in viewer.get(urls["experiments"]).content


def test_it_lets_viewers_only_read(alice, bob):
    experiment = make_experiment(alice.org)
    urls = page_urls(alice.org, experiment.model, experiment)
    viewer = signed_in(bob)
    before = database_state()
    for name in WRITE_PAGES:
        assert viewer.get(urls[name]).status_code == 403, name
    for name in ("model-new", "model-edit"):
        response = viewer.post(urls[name], MODEL_PRESETS["qwen2.5-7b"].registered)
        assert response.status_code == 403, name
    for name in ("experiment-new", "experiment-edit"):
        response = viewer.post(urls[name], builder_form(experiment.model, name="viewer-made"))
        assert response.status_code == 403, name
    started = viewer.post(f"{urls['experiment-detail']}start/", {"reason": "curious"})
    assert started.status_code == 403
    assert database_state() == before
    # The pages a viewer reads offer no button that would only answer 403.
    detail = viewer.get(urls["experiment-detail"]).content.decode()
    assert "Start a run" not in detail and "Duplicate" not in detail
    assert "Register a model" not in viewer.get(urls["models"]).content.decode()


def test_it_hides_other_tenants_models_and_experiments(alice, charlie):
    experiment = make_experiment(alice.org, name="secret-sauce")
    acme = page_urls(alice.org, experiment.model, experiment)
    # The same objects under charlie's own organization's address: still not his.
    globex = page_urls(charlie.org, experiment.model, experiment)
    client = signed_in(charlie)
    before = database_state()
    for name, url in [*acme.items(), *globex.items()]:
        if name in ("models", "experiments", "model-new", "experiment-new") and "globex" in url:
            continue  # charlie's own lists and forms
        response = client.get(url)
        assert response.status_code == 404, url
        assert b"secret-sauce" not in response.content
    for url in (f"{acme['experiment-detail']}start/", f"{globex['experiment-detail']}start/"):
        assert client.post(url, {"reason": "x"}).status_code == 404
    post_edit = client.post(globex["experiment-edit"], builder_form(experiment.model))
    assert post_edit.status_code == 404
    check = client.post(f"{globex['experiment-detail']}check/", builder_form(experiment.model))
    assert check.status_code == 404
    assert database_state() == before
    # charlie's own lists do not show acme's rows, and acme's model cannot be used in his.
    assert b"secret-sauce" not in client.get(globex["experiments"]).content
    assert b"Llama 3.1 8B" not in client.get(globex["models"]).content
    made = client.post(globex["experiment-new"], builder_form(experiment.model, name="stolen"))
    assert made.status_code == 200
    assert "Invalid pk" in made.content.decode() or "does not exist" in made.content.decode()
    assert database_state() == before


def test_it_answers_404_for_a_missing_experiment_or_model(alice):
    client = signed_in(alice)
    missing = uuid.uuid4()
    assert client.get(f"/o/acme/experiments/{missing}/").status_code == 404
    assert client.get(f"/o/acme/models/{missing}/edit/").status_code == 404
    assert client.get("/o/acme/experiments/not-a-uuid/").status_code == 404


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------


def test_it_shows_each_models_kv_bytes_and_which_gpus_hold_it(alice):
    make_model(alice.org)  # Llama 3.1 8B: 2 × 32 layers × 8 KV heads × 128 × 2 bytes
    make_model(alice.org, **MODEL_PRESETS["llama-3.1-70b"].registered)
    page = signed_in(alice).get("/o/acme/models/").content.decode()
    assert "131,072" in page  # both have 8 KV heads of 128; 70B has 80 layers: 327,680
    assert "327,680" in page
    # 8B in bf16 (~15 GiB) fits one RTX 4090 (23.65 GiB usable) with ~47k tokens of KV
    # cache at 0.9, once vLLM 0.11's profile peak and non-torch memory are set aside;
    # 70B (~131 GiB) fits no single 80GB GPU.
    assert "~47k tokens" in page
    assert "✗ no" in page


def test_it_registers_a_model_from_a_preset(alice):
    client = signed_in(alice)
    form = client.get("/o/acme/models/new/?preset=qwen2.5-7b").content.decode()
    assert 'value="Qwen/Qwen2.5-7B-Instruct"' in form
    preset = MODEL_PRESETS["qwen2.5-7b"].registered
    response = client.post("/o/acme/models/new/", preset | {"revision": "main", "notes": ""})
    model = ModelSpec.objects.get(organization=alice.org, hf_repo="Qwen/Qwen2.5-7B-Instruct")
    assert response.status_code == 302
    assert response.url == f"/o/acme/models/{model.id}/edit/"
    assert (model.num_kv_heads, model.max_context, model.created_by) == (4, 32768, alice.user)
    assert AuditEvent.objects.filter(event="model.create", target_id=str(model.id)).exists()
    # The edit page shows what was derived: 2 × 28 × 4 × 128 × 2 bytes per token.
    assert "57,344" in client.get(response.url).content.decode()


def test_it_shows_a_models_errors_like_the_api_and_stores_nothing(alice):
    client = signed_in(alice)
    make_model(alice.org)
    before = database_state()
    bad = MODEL_PRESETS["qwen2.5-7b"].registered | {
        "hf_repo": "not a repo",
        "num_kv_heads": "5",  # does not divide 28 heads
        "head_dim": "many",
    }
    page = client.post("/o/acme/models/new/", bad)
    assert page.status_code == 200
    text = page.content.decode()
    assert "Expected an integer; got a string." in text  # head_dim, the API's serializer
    fixed_types = bad | {"head_dim": "128"}
    page = client.post("/o/acme/models/new/", fixed_types).content.decode()
    assert "Expected a Hugging Face repo id" in page  # the service's messages
    assert "Must divide num_attention_heads" in page
    assert 'value="not a repo"' in page  # what was typed stays in the form
    duplicate = client.post("/o/acme/models/new/", MODEL_PRESETS["llama-3.1-8b"].registered)
    assert "already registered" in duplicate.content.decode()
    assert database_state() == before


def test_it_edits_a_model_and_refuses_a_context_its_experiments_outgrow(alice):
    experiment = make_experiment(alice.org)  # workload: 512 + 128 tokens per request
    model = experiment.model
    client = signed_in(alice)
    form = client.get(f"/o/acme/models/{model.id}/edit/").content.decode()
    assert 'value="meta-llama/Llama-3.1-8B-Instruct"' in form
    fields = MODEL_PRESETS["llama-3.1-8b"].registered | {"revision": "main", "notes": "x"}
    before = database_state()
    page = client.post(f"/o/acme/models/{model.id}/edit/", fields | {"max_context": "600"})
    assert "would not fit" in page.content.decode()
    assert database_state() == before
    done = client.post(f"/o/acme/models/{model.id}/edit/", fields | {"notes": "pinned"})
    assert done.status_code == 302
    model.refresh_from_db()
    assert model.notes == "pinned"


# ---------------------------------------------------------------------------------------------
# The experiment builder
# ---------------------------------------------------------------------------------------------


def test_it_builds_an_experiment_stored_exactly_as_the_api_would(alice):
    model = make_model(alice.org)
    response = signed_in(alice).post("/o/acme/experiments/new/", builder_form(model))
    experiment = Experiment.objects.get(organization=alice.org, name="web-experiment")
    assert response.status_code == 302
    assert response.url == f"/o/acme/experiments/{experiment.id}/"
    via_api = alice.client().post(
        "/api/v1/orgs/acme/experiments/", experiment_payload(model.id), format="json"
    )
    assert via_api.status_code == 201, via_api.json()
    api_row = Experiment.objects.get(id=via_api.json()["id"])
    for field in ("serve_grid", "workload", "slos", "budget_cap_usd", "gpu_type_id", "engine"):
        assert getattr(experiment, field) == getattr(api_row, field), field
    assert AuditEvent.objects.filter(event="experiment.create", actor_via="web").count() == 1


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        (
            {"grid_flag": ["max_num_seq"], "grid_values": ["64"]},
            "serve_grid.max_num_seq",
            "unknown serve flag: vLLM 0.11.0 has no such flag; did you mean max_num_seqs",
        ),
        (
            {"grid_flag": ["max_num_seqs"], "grid_values": ["64, 0"]},
            "serve_grid.max_num_seqs[1]",
            "must be at least 1",
        ),
        (
            {"input_len": "131000"},
            "workload.dataset.input_len",
            "exceed the smallest context served (131072)",
        ),
        ({"concurrency": "1, 8, 8"}, "workload.concurrency[2]", "duplicate of"),
        ({"slo_ttft_ms": "-5"}, "slos.ttft_ms", ""),
        ({"budget_cap_usd": "lots"}, "budget_cap_usd", "A valid number is required."),
        ({"engine_image_tag": ""}, "engine_image_tag", "needs an image tag"),
    ],
    ids=["bad-flag", "bad-value", "too-long-for-context", "duplicate-level", "slo", "cap", "tag"],
)
def test_it_shows_the_apis_field_errors_and_stores_nothing(alice, change, path, message):
    model = make_model(alice.org)
    client = signed_in(alice)
    form = builder_form(model, **change)
    before = database_state()
    page = client.post("/o/acme/experiments/new/", form)
    assert page.status_code == 200
    assert database_state() == before
    text = page.content.decode()
    assert message in text
    # The live check answers with the API's own errors, field by field.
    checked = client.post("/o/acme/experiments/check/", form).json()
    assert checked["ok"] is False
    assert path in checked["fields"], checked["fields"]
    payload = experiment_payload(model.id) | _api_equivalent(change)
    assert checked["fields"][path] == api_fields(alice, payload)[path]
    assert database_state() == before


def _api_equivalent(change: dict) -> dict:
    """The API payload change that matches a form change of the parametrized cases."""
    workload = {
        "dataset": {"kind": "random", "input_len": 512, "output_len": 128},
        "concurrency": [1, 8, 64],
        "requests_per_level": 100,
    }
    if "grid_flag" in change:
        values = [int(v) for v in change["grid_values"][0].split(",")]
        return {"serve_grid": {change["grid_flag"][0]: values}}
    if "input_len" in change:
        workload["dataset"]["input_len"] = int(change["input_len"])
        return {"workload": workload}
    if "concurrency" in change:
        return {"workload": workload | {"concurrency": [1, 8, 8]}}
    if "slo_ttft_ms" in change:
        return {"slos": {"ttft_ms": -5}}
    return change


def test_it_keeps_what_was_typed_when_the_form_has_errors(alice):
    model = make_model(alice.org)
    form = builder_form(model, grid_flag=["max_num_seq"], grid_values=["64, 96"])
    page = signed_in(alice).post("/o/acme/experiments/new/", form).content.decode()
    assert '<option value="max_num_seq" selected>' in page
    assert 'value="64, 96"' in page
    assert "serve_grid.max_num_seq: unknown serve flag" in page


def test_it_takes_the_grid_as_raw_json(alice):
    model = make_model(alice.org)
    client = signed_in(alice)
    broken = builder_form(model, grid_mode="json", serve_grid_json='{"max_num_seqs": [64,')
    before = database_state()
    page = client.post("/o/acme/experiments/new/", broken).content.decode()
    assert "Not valid JSON" in page
    assert database_state() == before
    grid = '{"max_num_seqs": [32, 64], "enable_prefix_caching": [true, false]}'
    response = client.post(
        "/o/acme/experiments/new/", builder_form(model, grid_mode="json", serve_grid_json=grid)
    )
    assert response.status_code == 302
    experiment = Experiment.objects.get(name="web-experiment")
    assert experiment.serve_grid == {
        "max_num_seqs": [32, 64],
        "enable_prefix_caching": [True, False],
    }


def test_it_refuses_a_raw_json_grid_nested_too_deep(alice):
    model = make_model(alice.org)
    client = signed_in(alice)
    client.raise_request_exception = False  # a 500 is an answer to assert on
    deep = "[" * 100_000 + "]" * 100_000
    before = database_state()
    for form in (
        builder_form(model, grid_mode="json", serve_grid_json=deep),
        builder_form(model, grid_flag=["max_num_seqs"], grid_values=[deep]),  # a typed value
    ):
        response = client.post("/o/acme/experiments/new/", form)
        assert response.status_code == 200, response.status_code
        assert database_state() == before


def test_it_checks_and_estimates_a_draft_without_storing_it(alice):
    model = make_model(alice.org)
    client = signed_in(alice)
    before = database_state()
    checked = client.post("/o/acme/experiments/check/", builder_form(model)).json()
    assert checked["ok"] is True and checked["fields"] == {}
    assert checked["trials"] == 2
    api = alice.client().post(
        "/api/v1/orgs/acme/experiments/validate/", experiment_payload(model.id), format="json"
    )
    assert checked["estimate"]["cost_usd"] == api.json()["cost_usd"]
    assert checked["estimate"]["total_seconds"] == api.json()["total_seconds"]
    # Without JavaScript, "Check and estimate" shows the same on the page.
    page = client.post("/o/acme/experiments/new/", builder_form(model, action="check"))
    assert page.status_code == 200
    assert f"${api.json()['cost_usd']}" in page.content.decode()
    # An invalid form still counts its trials.
    three = builder_form(model, grid_values=["1, 2, 3", "2048", ""], name="")
    checked = client.post("/o/acme/experiments/check/", three).json()
    assert (checked["ok"], checked["trials"], checked["estimate"]) == (False, 3, None)
    assert "name" in checked["slots"]
    assert database_state() == before


@pytest.mark.slow
def test_it_predicts_a_draft_on_the_simulator_without_storing_it(alice, bob):
    """The builder's "Predict on the simulator": the same figures as the API's prediction,
    labelled simulated, for a viewer too; without JavaScript the page shows the table."""
    model = make_model(alice.org)
    small = builder_form(model, concurrency="4", requests_per_level="20", slo_tpot_ms="25")
    before = database_state()
    predicted = signed_in(bob).post("/o/acme/experiments/predict/", small).json()
    assert predicted["ok"] is True
    table = predicted["prediction"]
    assert table["simulated"] is True and "Simulated" in table["note"]
    assert [row["label"] for row in table["rows"]] == ["max_num_seqs=64", "max_num_seqs=128"]
    assert sum(row["best"] for row in table["rows"]) == 1
    api = (
        alice.client()
        .post(
            "/api/v1/orgs/acme/experiments/predict/",
            experiment_payload(
                model.id,
                serve_grid={"max_num_seqs": [64, 128], "max_num_batched_tokens": [2048]},
                workload=WORKLOAD | {"concurrency": [4], "requests_per_level": 20},
                slos={"ttft_ms": 500, "tpot_ms": 25},
            ),
            format="json",
        )
        .json()
    )
    assert table["exhaustive_text"] == f"{api['exhaustive_gpu_minutes']:,.1f} GPU-minutes"
    # Without JavaScript the button submits the form and the page shows the same table.
    page = signed_in(alice).post("/o/acme/experiments/new/", small | {"action": "predict"})
    assert page.status_code == 200
    html = page.content.decode()
    assert "Predicted on the simulator (simulated figures)" in html
    assert table["exhaustive_text"] in html
    # Nothing measured yet: the defaults, and the page says so as the panel's JSON does.
    assert table["calibration_text"].startswith("Not calibrated")
    assert table["calibration_text"].replace("'", "&#x27;") in html
    # A form with errors gets them, not a prediction.
    broken = signed_in(alice).post("/o/acme/experiments/predict/", small | {"name": ""}).json()
    assert broken["ok"] is False and broken["prediction"] is None and "name" in broken["slots"]
    assert database_state() == before


def test_it_edits_an_experiment(alice):
    experiment = make_experiment(alice.org)
    client = signed_in(alice)
    form = client.get(f"/o/acme/experiments/{experiment.id}/edit/").content.decode()
    assert 'value="64, 128"' in form  # the grid's values in the row editor
    # The edit's live check validates as an update: the experiment's own name is no clash.
    checked = client.post(
        f"/o/acme/experiments/{experiment.id}/check/",
        builder_form(experiment.model, name="batching"),
    ).json()
    assert checked["ok"] is True, checked["fields"]
    response = client.post(
        f"/o/acme/experiments/{experiment.id}/edit/",
        builder_form(experiment.model, name="batching", grid_values=["32, 64, 128", "2048", ""]),
    )
    assert response.status_code == 302
    experiment.refresh_from_db()
    assert experiment.serve_grid == {
        "max_num_seqs": [32, 64, 128],
        "max_num_batched_tokens": [2048],
    }


def test_it_refuses_an_edit_that_takes_another_experiments_name(alice):
    first = make_experiment(alice.org, name="first")
    second = make_experiment(alice.org, model=first.model, name="second")
    before = database_state()
    page = signed_in(alice).post(
        f"/o/acme/experiments/{second.id}/edit/", builder_form(first.model, name="first")
    )
    assert "An experiment named &#x27;first&#x27; exists." in page.content.decode()
    assert database_state() == before


def test_it_duplicates_an_experiment_into_the_builder(alice):
    experiment = make_experiment(alice.org, slos={"ttft_ms": 250})
    client = signed_in(alice)
    before = database_state()
    page = client.get(f"/o/acme/experiments/{experiment.id}/duplicate/").content.decode()
    assert database_state() == before  # opening the copy stores nothing
    assert 'value="copy of batching"' in page
    assert 'value="250"' in page and 'value="64, 128"' in page
    assert 'action="/o/acme/experiments/new/"' in page
    make_experiment(alice.org, model=experiment.model, name="copy of batching")
    again = client.get(f"/o/acme/experiments/{experiment.id}/duplicate/").content.decode()
    assert 'value="copy of batching (2)"' in again


# ---------------------------------------------------------------------------------------------
# The experiment page and starting runs
# ---------------------------------------------------------------------------------------------


def test_it_shows_the_spec_the_estimate_and_the_runs(alice, bob):
    experiment = make_experiment(alice.org)
    run = Run.objects.create(
        organization=alice.org,
        experiment=experiment,
        started_by=alice.user,
        reason="nightly",
        **frozen(experiment),
    )
    page = signed_in(bob).get(f"/o/acme/experiments/{experiment.id}/").content.decode()
    assert "max_num_seqs" in page and "64, 128" in page
    assert "2 trials" in page
    estimate = alice.client().get(f"/api/v1/orgs/acme/experiments/{experiment.id}/estimate/")
    assert f"${estimate.json()['cost_usd']}" in page
    assert str(run.id)[:8] in page and "nightly" in page


def test_every_page_counts_the_same_trials(alice):
    # The issue's "the builder says 2 trials, the saved experiment 3, the experiments list 3,
    # the CLI 4": a grid of two with vLLM's defaults beside it is three trials everywhere.
    client = signed_in(alice)
    form = builder_form(
        make_model(alice.org),
        grid_flag=["max_num_seqs", "", ""],
        grid_values=["64, 128", "", ""],
        defaults_trial="on",
    )
    checked = client.post("/o/acme/experiments/check/", form).json()
    assert checked["ok"], checked["fields"]
    assert checked["trials"] == checked["estimate"]["trials"] == 3
    blank = client.get("/o/acme/experiments/new/").content.decode()
    assert 'id="live-trials">' in blank
    assert client.post("/o/acme/experiments/new/", form).status_code == 302
    experiment = Experiment.objects.get(organization=alice.org, name="web-experiment")
    detail = client.get(f"/o/acme/experiments/{experiment.id}/").content.decode()
    assert "3 trials" in detail and "3 × " in text_of(detail)
    listed = text_of(client.get("/o/acme/experiments/").content.decode())
    assert "web-experiment" in listed and " 3 " in listed.split("web-experiment", 1)[1][:200]
    api = alice.client().get(f"/api/v1/orgs/acme/experiments/{experiment.id}/estimate/")
    assert api.json()["trials"] == 3


def test_it_labels_simulated_experiments(alice):
    sim = make_experiment(alice.org, name="pretend", engine="sim", engine_image_tag="")
    make_experiment(alice.org, model=sim.model, name="real")
    client = signed_in(alice)
    listing = client.get("/o/acme/experiments/").content.decode()
    assert listing.count("badge-simulated") == 1
    assert "badge-simulated" in client.get(f"/o/acme/experiments/{sim.id}/").content.decode()


def test_it_starts_a_run_from_the_page(alice, mallory):
    experiment = make_experiment(alice.org, engine="sim", engine_image_tag="")
    response = signed_in(mallory).post(
        f"/o/acme/experiments/{experiment.id}/start/", {"reason": "try the new scheduler"}
    )
    run = Run.objects.get(experiment=experiment)
    assert response.status_code == 302
    assert str(run.id) in response.url or response.url.endswith("#runs")
    assert (run.trigger, run.reason, run.started_by) == (
        "ui",
        "try the new scheduler",
        mallory.user,
    )
    assert AuditEvent.objects.filter(event="run.start", target_id=str(run.id)).exists()


def test_it_shows_a_budget_refusal_with_the_apis_message_and_starts_nothing(alice):
    experiment = make_experiment(alice.org, budget_cap_usd=Decimal("0.01"))
    before = database_state()
    page = signed_in(alice).post(
        f"/o/acme/experiments/{experiment.id}/start/", {"reason": "please"}
    )
    assert page.status_code == 200
    api = alice.client().post(
        "/api/v1/orgs/acme/runs/", {"experiment": str(experiment.id)}, format="json"
    )
    assert api.status_code == 400
    message = api.json()["error"]["fields"]["budget"][0]
    assert "exceeds the experiment's cap $0.01" in message
    assert message.replace("'", "&#x27;") in page.content.decode()
    assert 'value="please"' in page.content.decode()  # the reason is kept to try again
    assert database_state() == before


def test_it_refuses_a_reason_too_long_and_starts_nothing(alice):
    experiment = make_experiment(alice.org, engine="sim", engine_image_tag="")
    before = database_state()
    page = signed_in(alice).post(
        f"/o/acme/experiments/{experiment.id}/start/", {"reason": "x" * 501}
    )
    assert "At most 500 characters" in page.content.decode()
    assert database_state() == before


def test_it_only_starts_runs_by_post(alice):
    experiment = make_experiment(alice.org, engine="sim", engine_image_tag="")
    assert signed_in(alice).get(f"/o/acme/experiments/{experiment.id}/start/").status_code == 405
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("path", "slot"),
    [
        ("name", "name"),
        ("serve_grid", "serve_grid"),
        ("serve_grid.max_num_seqs[1]", "serve_grid"),
        ("fallback_gpu_types[2]", "fallback_gpu_types"),
        ("workload", "workload"),
        ("workload.dataset", "dataset_kind"),
        ("workload.dataset.kind", "dataset_kind"),
        ("workload.dataset.dataset_id", "dataset_id"),
        ("workload.concurrency[3]", "concurrency"),
        ("workload.requests_per_level", "requests_per_level"),
        ("workload.surprise", "workload"),
        ("workload.capacity", "capacity"),
        ("workload.capacity.max_probes", "capacity_max_probes"),
        ("workload.capacity.axis", "capacity_axis"),
        ("workload.capacity.surprise", "capacity"),
        ("workload.steady_multiple", "steady_multiple"),
        ("workload.seed", "seed"),
        ("slos.tpot_ms", "slo_tpot_ms"),
        ("slos.ttft_percentile", "slo_ttft_percentile"),
        ("slos.min_attainment_pct", "slo_min_attainment_pct"),
        ("slos.bogus", "slos"),
        ("search", "search"),
        ("search.strategy", "search_strategy"),
        ("search.spend_limit_usd", "search_spend_limit_usd"),
        ("search.surprise", "search"),
        ("budget", "budget"),
        ("non_field_errors", "form"),
        ("something.else", "form"),
    ],
)
def test_it_shows_every_error_path_somewhere_on_the_form(path, slot):
    assert error_slot(path) == slot


def test_it_names_the_missing_dataset_of_a_sharegpt_workload(alice):
    model = make_model(alice.org)
    form = builder_form(model, dataset_kind="sharegpt")
    checked = signed_in(alice).post("/o/acme/experiments/check/", form).json()
    assert "workload.dataset.dataset_id" in checked["fields"]
    assert checked["slots"]["dataset_id"] == checked["fields"]["workload.dataset.dataset_id"]


# Near the edges of the simulator's start check: (model, GPU, count, the one configuration).
_EDGE_CASES = [
    ("8b", H100, 1, {}),
    ("8b", "NVIDIA GeForce RTX 4090", 1, {}),  # the full 131,072-token context does not fit
    ("8b", "NVIDIA GeForce RTX 4090", 1, {"max_model_len": 41152}),
    ("8b", "NVIDIA GeForce RTX 4090", 1, {"max_model_len": 41168}),
    ("8b", "NVIDIA GeForce RTX 4090", 1, {"max_model_len": 4096, "gpu_memory_utilization": 0.7}),
    ("8b", "NVIDIA GeForce RTX 4090", 1, {"max_model_len": 4096, "gpu_memory_utilization": 0.72}),
    ("70b", H100, 2, {"max_model_len": 8192}),  # tensor_parallel_size 1: weights on one GPU
    ("70b", H100, 2, {"max_model_len": 8192, "tensor_parallel_size": 2}),
    (
        "70b",
        H100,
        2,
        {"max_model_len": 8192, "tensor_parallel_size": 2, "gpu_memory_utilization": 0.87},
    ),
    (
        "70b",
        H100,
        2,
        {"max_model_len": 8192, "tensor_parallel_size": 2, "gpu_memory_utilization": 0.88},
    ),
]


def _simulator_starts(model, gpu_type: str, config: dict, workdir) -> bool:
    """Whether the simulator, given what a job gives it, gets past its start-up check."""
    source = protocol.ModelSource(
        served_model_name=model.hf_repo,
        revision=model.revision,
        **{name: getattr(model, name) for name in REGISTERED_FACTS},
    )
    argv = [str(sim_model_file(source, workdir)), "--gpu", gpu_type]
    args = sim_command.argument_parser().parse_args(argv + protocol.serve_args(config))
    try:
        sim_command.build(args)
    except StartRefusal:
        return False
    return True


@pytest.mark.parametrize(("size", "gpu_type", "count", "config"), _EDGE_CASES)
def test_the_builder_says_it_fits_exactly_where_the_simulator_starts(
    alice, tmp_path, size, gpu_type, count, config
):
    presets = {"8b": "llama-3.1-8b", "70b": "llama-3.1-70b"}
    model = make_model(alice.org, **MODEL_PRESETS[presets[size]].registered)
    flags = [*config, ""]
    values = [*(str(value) for value in config.values()), ""]
    form = builder_form(
        model, gpu_type=gpu_type, gpu_count=str(count), grid_flag=flags, grid_values=values
    )
    fit = signed_in(alice).post("/o/acme/experiments/check/", form).json()["fit"]
    assert fit["fits"] is _simulator_starts(model, gpu_type, config, tmp_path), fit["text"]


def test_it_tells_in_the_builder_whether_the_model_fits_the_chosen_gpus(alice, charlie):
    """The live panel and the page without JavaScript both say how the model's weights sit
    in the GPUs' memory and how much KV cache is left (the models page's maths)."""
    model = make_model(alice.org)  # Llama 3.1 8B in bf16: about 15 GiB of weights
    client = signed_in(alice)
    fit = client.post("/o/acme/experiments/check/", builder_form(model)).json()["fit"]
    # The form's grid: max_num_seqs 64 and 128, max_num_batched_tokens 2048; the first.
    first = {"max_num_seqs": 64, "max_num_batched_tokens": 2048}
    _, plan = start_check(model.facts, gpu_profile(H100), first)
    assert fit["fits"] is True and fit["kv_tokens"] == plan.kv_tokens > 0
    assert "GiB of weights on 79.2 GiB (1× H100 SXM 80GB)" in fit["text"]
    assert f"KV cache ≈ {FitCell(1, True, plan.kv_tokens).kv_text}" in fit["text"]
    assert "all 2 configurations start" in fit["text"]

    big = make_model(alice.org, **MODEL_PRESETS["llama-3.1-70b"].registered)
    small_gpu = builder_form(big, gpu_type="NVIDIA GeForce RTX 4090", gpu_count="2")
    fit = client.post("/o/acme/experiments/check/", small_gpu).json()["fit"]
    assert fit["fits"] is False and fit["text"].startswith("Llama")
    assert "does not start on 47.3 GiB (2× RTX 4090 24GB)" in fit["text"]
    assert "the weights do not fit" in fit["text"]
    page = client.post("/o/acme/experiments/new/", small_gpu | {"action": "check"})
    assert 'id="live-fit" class="error"' in page.content.decode()

    # Until the model and GPUs name real ones there is nothing to say.
    for draft in (
        builder_form(model) | {"model": str(uuid.uuid4())},
        builder_form(model, gpu_count="x"),
        builder_form(model, gpu_count="9"),
        # Another organization's model is never described.
        builder_form(make_model(charlie.org)),
    ):
        assert client.post("/o/acme/experiments/check/", draft).json()["fit"] is None


def test_the_builder_says_when_the_kv_cache_cannot_hold_the_heaviest_level(alice):
    model = make_model(alice.org)
    long_prompts = builder_form(model, input_len="100000", output_len="1000", concurrency="1, 64")
    fit = signed_in(alice).post("/o/acme/experiments/check/", long_prompts).json()["fit"]
    assert fit["fits"] is True
    assert "The first configuration's the KV cache holds about" in fit["text"]
    assert "concurrency 64 needs 6,464,000" in fit["kv_short"]
    short = signed_in(alice).post("/o/acme/experiments/check/", builder_form(model)).json()
    assert short["fit"]["kv_short"] is None


# ---------------------------------------------------------------------------------------------
# The experiment page's answer and SLOs (issue 16)
# ---------------------------------------------------------------------------------------------


def test_it_leads_the_experiment_page_with_the_latest_succeeded_runs_answer(alice, bob):
    experiment = make_experiment(
        alice.org,
        slos={"ttft_ms": 500, "ttft_percentile": 95, "tpot_ms": 50, "min_attainment_pct": 90},
    )
    older = answered_run(alice.org, experiment=experiment)
    older.created_at -= timedelta(days=2)
    older.save(update_fields=["created_at"])
    latest = answered_run(alice.org, experiment=experiment, runner_up_ci=(900.0, 4500.0))
    # A later run that failed answers nothing: the page keeps the last answer it has.
    Run.objects.create(
        organization=alice.org, experiment=experiment, state="failed", **frozen(experiment)
    )
    html = signed_in(bob).get(f"/o/acme/experiments/{experiment.id}/").content.decode()
    text = text_of(html)
    assert f"run {str(latest.id)[:8]}" in text[text.index("Latest answer") :][:40]
    assert html.index("Latest answer") < html.index('id="spec-heading"')
    assert "Recommended: trial 1 (max_num_seqs=128)" in text
    assert "concurrency 31 bracket 31–32" in text
    assert "$0.5000 per 1M output tokens (95 % CI $0.4762–$0.5263)" in text
    assert "Tie, within noise : trial 1 (max_num_seqs=128) and trial 0 (max_num_seqs=64)" in text
    assert "--max-num-seqs 128" in html
    # The SLOs in the protocol's own words: percentiles and attainment.
    assert "SLOs ttft:p95<500ms, tpot:p99<50ms, attainment>=90%" in text
    assert "≤ 500 ms" not in text


def test_it_shows_no_answer_before_a_run_has_succeeded(alice):
    experiment = make_experiment(alice.org)
    Run.objects.create(
        organization=alice.org, experiment=experiment, state="failed", **frozen(experiment)
    )
    html = signed_in(alice).get(f"/o/acme/experiments/{experiment.id}/").content.decode()
    assert "Latest answer" not in html
    assert "ttft:p99&lt;500ms" in html


# ---------------------------------------------------------------------------------------------
# The builder's SLO percentiles, attainment, steady levels, seed and capacity search (issue 16)
# ---------------------------------------------------------------------------------------------

NEW_INPUTS = {
    "slo_ttft_percentile": "95",
    "slo_tpot_percentile": "50",
    "slo_min_attainment_pct": "90",
    "slo_confidence_pct": "90",
    "steady_multiple": "6",
    "max_extensions": "1",
    "ramp_up_seconds": "2.5",
    "seed": "1234",
    "capacity_search": "on",
    "capacity_axis": "request_rate",
    "capacity_max_probes": "4",
    "capacity_tolerance_pct": "10",
    "capacity_max_load": "64",
}


def test_it_builds_an_experiment_with_percentiles_attainment_and_a_capacity_search(alice):
    model = make_model(alice.org)
    client = signed_in(alice)
    response = client.post("/o/acme/experiments/new/", builder_form(model, **NEW_INPUTS))
    assert response.status_code == 302
    experiment = Experiment.objects.get(organization=alice.org, name="web-experiment")
    assert experiment.slos == {
        "ttft_ms": 500,
        "tpot_ms": 50,
        "ttft_percentile": 95,
        "tpot_percentile": 50,
        "min_attainment_pct": 90,
        "confidence_pct": 90,
    }
    workload = experiment.workload
    assert workload["max_extensions"] == 1
    assert (workload["steady_multiple"], workload["ramp_up_seconds"], workload["seed"]) == (
        6,
        2.5,
        1234,
    )
    # The bracket's ends are measured again by default (the box is ticked): left out.
    assert workload["capacity"] == {
        "axis": "request_rate",
        "max_probes": 4,
        "tolerance_pct": 10,
        "max_load": 64,
        "repeat_bracket": False,
    }
    # The edit page shows every value again, so saving it unchanged changes nothing.
    page = client.get(f"/o/acme/experiments/{experiment.id}/edit/").content.decode()
    assert '<option value="95" selected>p95</option>' in page
    assert '<option value="50" selected>p50</option>' in page
    assert '<option value="request_rate" selected>' in page
    assert 'name="capacity_search" id="f-capacity_search" checked' in page
    for name in (
        "steady_multiple",
        "ramp_up_seconds",
        "seed",
        "capacity_max_probes",
        "slo_confidence_pct",
        "max_extensions",
    ):
        assert f'name="{name}" inputmode' in page
    assert 'value="1234"' in page and 'value="2.5"' in page


def test_the_builder_round_trip_keeps_every_new_value(alice):
    workload = {
        "dataset": {"kind": "random", "input_len": 512, "output_len": 128},
        "concurrency": [1, 8],
        "requests_per_level": 100,
        "steady_multiple": 2.5,
        "ramp_up_seconds": 3,
        "seed": 7,
        "max_extensions": 0,
        "capacity": {
            "axis": "concurrency",
            "max_probes": 5,
            "tolerance_pct": 2.5,
            "max_load": 256,
            "repeat_bracket": False,
        },
    }
    slos = {"ttft_ms": 300, "ttft_percentile": 90, "e2el_ms": 9000, "min_attainment_pct": 99.5}
    slos["confidence_pct"] = 99
    experiment = make_experiment(alice.org, workload=workload, slos=slos, defaults_trial=True)
    payload, errors = builder.experiment_payload(builder.builder_form_from_experiment(experiment))
    assert errors == {}
    assert payload["defaults_trial"] is True
    experiment.refresh_from_db()
    assert protocol.Workload.model_validate(
        payload["workload"]
    ) == protocol.Workload.model_validate(experiment.workload)
    for name in ("steady_multiple", "ramp_up_seconds", "seed", "max_extensions", "capacity"):
        assert payload["workload"][name] == workload[name], name
    assert payload["slos"] == slos
    # Without a search, none is made up; with the protocol's default, nothing is added.
    plain = make_experiment(alice.org, model=experiment.model, name="plain")
    payload, _ = builder.experiment_payload(builder.builder_form_from_experiment(plain))
    assert "capacity" not in payload["workload"] and payload["slos"] == {"ttft_ms": 500}
    assert payload["defaults_trial"] is False
    blank, _ = builder.experiment_payload(builder.blank_builder_form())
    assert "capacity" not in blank["workload"]


@pytest.mark.parametrize(
    ("change", "path", "slot"),
    [
        (
            {"capacity_search": "on", "capacity_max_probes": "0"},
            "workload.capacity.max_probes",
            "capacity_max_probes",
        ),
        ({"slo_ttft_percentile": "42"}, "slos.ttft_percentile", "slo_ttft_percentile"),
        ({"slo_min_attainment_pct": "150"}, "slos.min_attainment_pct", "slo_min_attainment_pct"),
        ({"seed": "-1"}, "workload.seed", "seed"),
        ({"slo_confidence_pct": "100"}, "slos.confidence_pct", "slo_confidence_pct"),
        ({"max_extensions": "-1"}, "workload.max_extensions", "max_extensions"),
        (
            {"search_strategy": "prune", "search_max_trials": "0"},
            "search.max_trials",
            "search_max_trials",
        ),
        ({"search_strategy": "halving"}, "search.strategy", "search_strategy"),
    ],
    ids=[
        "max-probes",
        "percentile",
        "attainment",
        "seed",
        "confidence",
        "extensions",
        "max-trials",
        "halving-no-capacity",
    ],
)
def test_it_shows_a_new_inputs_error_beside_it_and_stores_nothing(alice, change, path, slot):
    model = make_model(alice.org)
    client = signed_in(alice)
    form = builder_form(model, **change)
    before = database_state()
    page = client.post("/o/acme/experiments/new/", form)
    assert page.status_code == 200
    assert database_state() == before
    checked = client.post("/o/acme/experiments/check/", form).json()
    assert checked["ok"] is False
    assert path in checked["fields"], checked["fields"]
    assert checked["slots"][slot], checked["slots"]
    # On the page, the message sits in that input's own list, not the form's general one.
    html = page.content.decode()
    errors = html[html.index(f'data-slot="{slot}"') :]
    message = checked["fields"][path][0]
    assert message.replace("'", "&#x27;") in errors[: errors.index("</ul>")]


def test_the_builder_adds_vllms_defaults_as_a_trial(alice):
    model = make_model(alice.org)
    client = signed_in(alice)
    page = client.post("/o/acme/experiments/new/", builder_form(model, defaults_trial="on"))
    assert page.status_code == 302, page.content.decode()[:2000]
    experiment = Experiment.objects.get(organization=alice.org)
    assert experiment.defaults_trial is True
    assert (
        "Also measure vLLM"
        in client.get(f"/o/acme/experiments/{experiment.id}/edit/").content.decode()
    )


def test_the_builder_sets_a_search_and_shows_it_again(alice):
    model = make_model(alice.org)
    client = signed_in(alice)
    page = client.get("/o/acme/experiments/new/").content.decode()
    for strategy in protocol.SEARCH_STRATEGIES:
        assert f'<option value="{strategy}"' in page
    form = builder_form(
        model,
        capacity_search="on",
        search_strategy="prune",
        search_spend_limit_gpu_minutes="90",
        search_max_trials="6",
    )
    assert client.post("/o/acme/experiments/new/", form).status_code == 302
    experiment = Experiment.objects.get(organization=alice.org, name="web-experiment")
    assert experiment.search == {
        "strategy": "prune",
        "spend_limit_gpu_minutes": 90.0,
        "max_trials": 6,
    }
    # The API's validation of the same payload agrees, and the edit page shows it again.
    payload, _ = builder.experiment_payload(builder.builder_form_from_experiment(experiment))
    assert payload["search"] == experiment.search
    page = client.get(f"/o/acme/experiments/{experiment.id}/edit/").content.decode()
    assert '<option value="prune" selected>' in page
    assert 'name="search_spend_limit_gpu_minutes" inputmode="decimal" value="90"' in page
    # Blank inputs: exhaustive, stored as nothing.
    blank, _ = builder.experiment_payload(builder.blank_builder_form())
    assert blank["search"] == {}


def test_it_opens_a_new_experiment_on_a_model_that_fits_one_gpu(alice):
    # "Llama 3.1 70B" sorts before "Llama 3.1 8B", and fits no single H100 (issue 35): the
    # form opens on the 8B, with no error to fix before anything else.
    small = make_model(alice.org)
    make_model(alice.org, **MODEL_PRESETS["llama-3.1-70b"].registered)
    page = signed_in(alice).get("/o/acme/experiments/new/").content.decode()
    assert f'<option value="{small.id}" selected' in page
    assert 'class="error"' not in page and "does not start" not in page


def test_it_confirms_a_saved_model_and_experiment(alice):
    client = signed_in(alice)
    preset = MODEL_PRESETS["qwen2.5-7b"].registered | {"revision": "main", "notes": ""}
    page = client.post("/o/acme/models/new/", preset, follow=True).content.decode()
    assert "Registered Qwen2.5 7B Instruct." in text_of(page)
    model = ModelSpec.objects.get(organization=alice.org, hf_repo="Qwen/Qwen2.5-7B-Instruct")
    page = client.post(f"/o/acme/models/{model.id}/edit/", preset, follow=True).content.decode()
    assert "Saved Qwen2.5 7B Instruct." in text_of(page)
    form = builder_form(model)
    page = client.post("/o/acme/experiments/new/", form, follow=True).content.decode()
    assert "Created experiment web-experiment." in text_of(page)
    experiment = Experiment.objects.get(organization=alice.org, name="web-experiment")
    edit = f"/o/acme/experiments/{experiment.id}/edit/"
    page = client.post(edit, form, follow=True).content.decode()
    assert "Saved experiment web-experiment." in text_of(page)
