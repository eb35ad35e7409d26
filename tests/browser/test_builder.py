"""The experiment builder in a real browser: the trial count, estimate and field errors follow
the form live; the experiment is saved; a run of it starts on the local provider with the
simulator and ends with its measurements."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from runs.models import Endpoint, Experiment, Measurement, Run
from runs.models.runs import TERMINAL_RUN_STATES
from runs.providers.base import pod_name
from runs.providers.registry import local_provider
from runs.services.provisioning import run_provision
from tests.polling import wait_for
from tests.site.conftest import make_model

PREDICTION_TIMEOUT_MS = 60_000

RUN_SECONDS = 240  # two simulated trials of two short levels, on two busy shared cores


@pytest.fixture
def local_pods(settings, live_site, tmp_path):
    """Runs provisioned by this test go to the local provider: the real agent, as a child
    process, reporting to the live site. Every pod is gone afterwards."""
    settings.BENCHSITE_PROVIDER = "local"
    settings.BENCHSITE_LOCAL_PODS_DIR = tmp_path / "pods"
    settings.BENCHSITE_PUBLIC_URL = live_site
    settings.BENCHSITE_SIM_SPEED = 20
    yield tmp_path / "pods"
    provider = local_provider()
    for pod in provider.list_bench_pods():
        provider.terminate(pod.pod_id)


def grid_row(page, index: int):
    return page.locator("#grid-rows .grid-row").nth(index)


def test_it_builds_an_experiment_live_and_runs_it_on_the_simulator(
    page, sign_in, screenshot, alice, local_pods
):
    make_model(alice.org)
    sign_in(page, alice)
    page.goto("/o/acme/models/")
    page.get_by_text("Which GPUs hold Llama 3.1 8B Instruct?").click()
    expect(page.locator(".fit-table").first).to_be_visible()
    screenshot(page, "models")
    page.goto("/o/acme/experiments/new/")
    trials = page.locator("#live-trials")
    expect(trials).to_have_text("2")  # the starting grid: max_num_seqs 64, 256

    page.get_by_label("Name", exact=True).fill("Llama 8B: max_num_seqs, simulated")
    page.get_by_label("Engine", exact=True).select_option("sim")
    expect(page.locator("h1 .badge-simulated")).to_be_visible()
    expect(page.get_by_label("vLLM image tag")).to_be_hidden()

    # The grid editor: each change re-counts the trials and re-estimates.
    grid_row(page, 0).locator("input").fill("64, 128, 256")
    expect(trials).to_have_text("3")
    page.get_by_role("button", name="Add a flag").click()
    grid_row(page, 1).locator("select").select_option("max_num_batched_tokens")
    grid_row(page, 1).locator("input").fill("2048, 8192")
    expect(trials).to_have_text("6")
    expect(page.locator("#live-cost")).to_have_text("$0")  # the simulator rents no GPU
    # A simulated run takes what computing it takes here: seconds, or minutes for a big one.
    expect(page.locator("#live-duration")).to_have_text(re.compile(r"\d+ (h|min|s)"))
    expect(page.locator("#live-status")).to_have_text("Valid: ready to save.")

    # The raw JSON editor holds the same grid.
    page.get_by_role("radio", name="Raw JSON").check()
    grid_json = page.get_by_label("Grid as JSON")
    expect(grid_json).to_be_visible()
    expect(grid_json).to_have_value(re.compile(r'"max_num_batched_tokens": \[\s*2048,\s*8192'))
    page.get_by_role("radio", name="Flags and values").check()
    expect(grid_row(page, 1).locator("input")).to_have_value("2048, 8192")

    # Field errors come from the server's validation, as the API names them.
    page.get_by_label("Concurrency levels").fill("1, 4, 4")
    expect(page.locator("#err-concurrency")).to_contain_text("duplicate of concurrency[1]")
    expect(page.locator("#live-status")).to_have_text("1 problem marked in the form.")
    grid_row(page, 0).locator("input").fill("64, 0")
    expect(page.locator("#err-serve_grid")).to_contain_text(
        "serve_grid.max_num_seqs[1]: must be at least 1"
    )
    screenshot(page, "experiment-builder-errors")

    # A small sweep for the run: 2 trials × 2 levels of a few short requests.
    grid_row(page, 1).get_by_role("button", name="Remove row").click()
    grid_row(page, 0).locator("input").fill("64, 128")
    page.get_by_label("Input tokens").fill("256")
    page.get_by_label("Output tokens").fill("32")
    page.get_by_label("Concurrency levels").fill("1, 4")
    page.get_by_label("Requests per level").fill("8")
    expect(trials).to_have_text("2")
    expect(page.locator("#live-status")).to_have_text("Valid: ready to save.")
    expect(page.locator(".field-errors li")).to_have_count(0)

    # Predict before renting: each configuration on the simulator, labelled simulated.
    page.get_by_label("TPOT", exact=True).fill("30")
    page.get_by_role("button", name="Predict on the simulator").click()
    prediction = page.locator("#live-prediction")
    # A grid's prediction simulates every configuration's levels on the server: on two busy
    # cores (the slow tier's five workers beside it) it has taken over 20 s.
    expect(prediction.locator("caption")).to_have_text(
        "Predicted on the simulator (simulated figures)", timeout=PREDICTION_TIMEOUT_MS
    )
    expect(prediction.locator("tbody tr")).to_have_count(2)
    expect(prediction.locator("tbody tr.best")).to_have_count(1)
    expect(prediction.locator("tbody tr").first.locator("td").first).to_have_text(
        re.compile(r"\d+ users")
    )
    expect(page.locator("#prediction-exhaustive")).to_have_text(re.compile(r"[\d.]+ GPU-minutes"))
    screenshot(page, "experiment-builder-prediction")
    page.get_by_label("TPOT", exact=True).fill("")
    expect(page.locator("#live-status")).to_have_text("Valid: ready to save.")
    screenshot(page, "experiment-builder")
    page.set_viewport_size({"width": 390, "height": 844})
    screenshot(page, "experiment-builder-phone")
    page.set_viewport_size({"width": 1280, "height": 900})

    page.get_by_role("button", name="Save experiment").click()
    page.wait_for_url(re.compile(r"/o/acme/experiments/[0-9a-f-]{36}/$"))
    experiment = Experiment.objects.get(organization=alice.org)
    assert experiment.serve_grid == {"max_num_seqs": [64, 128]}
    assert experiment.engine == "sim"
    expect(page.get_by_role("heading", name=experiment.name)).to_be_visible()
    expect(page.locator("h1 .badge-simulated")).to_have_text("simulated")

    page.get_by_label("Why").fill("first look at max_num_seqs")
    page.get_by_role("button", name="Start a run").click()
    page.wait_for_url(re.compile(r"/o/acme/runs/[0-9a-f-]{36}/$"))
    run = Run.objects.get(experiment=experiment)
    assert (run.trigger, run.reason) == ("ui", "first look at max_num_seqs")

    # The worker's part, done here: no worker process serves the live site's broker queue.
    assert run_provision(run_id=run.id, owner="browser-test") == "created"

    def ended() -> bool:
        run.refresh_from_db()
        return run.state in TERMINAL_RUN_STATES

    wait_for(ended, RUN_SECONDS, "the simulated run to end")
    agent_log = local_pods / pod_name(run.id) / "agent.log"
    assert run.state == "succeeded", (run.failure_reason, agent_log.read_text()[-3000:])
    assert Measurement.objects.filter(trial__run=run).count() == 4

    page.goto(f"/o/acme/experiments/{experiment.id}/")
    runs = page.locator("#runs")
    expect(runs.get_by_text("Succeeded")).to_be_visible()
    expect(runs.locator(".badge-simulated")).to_be_visible()
    expect(runs.get_by_role("link", name=str(run.id)[:8])).to_have_attribute(
        "href", f"/o/acme/runs/{run.id}/"
    )
    screenshot(page, "experiment-detail")


def test_choosing_chat_sessions_shows_their_inputs_and_chooses_the_chat_endpoint(
    page, sign_in, alice
):
    make_model(alice.org)
    sign_in(page, alice)
    page.goto("/o/acme/experiments/new/")
    page.get_by_label("Name", exact=True).fill("Llama 8B: chat sessions")
    expect(page.get_by_label("Message tokens")).to_be_hidden()
    expect(page.get_by_label("Endpoint", exact=True)).to_have_value("completions")

    page.get_by_label("Dataset", exact=True).select_option("chat_sessions")
    expect(page.get_by_label("Endpoint", exact=True)).to_have_value("chat")
    expect(page.get_by_label("Input tokens")).to_be_hidden()
    for label in ("Turns per session, at most", "System prompt tokens", "Think time (s)"):
        expect(page.get_by_label(label)).to_be_visible()
    page.get_by_label("Message tokens").fill("100")
    expect(page.locator("#live-status")).to_have_text("Valid: ready to save.")
    # The check refuses sessions on the completions endpoint, beside the endpoint.
    page.get_by_label("Endpoint", exact=True).select_option("completions")
    expect(page.locator("#err-endpoint")).to_contain_text("chat sessions are sent to the chat")
    expect(page.locator("#live-status")).to_have_text("1 problem marked in the form.")


def test_choosing_agentic_sessions_shows_their_inputs_and_their_own_help(page, sign_in, alice):
    make_model(alice.org)
    sign_in(page, alice)
    page.goto("/o/acme/experiments/new/")
    page.get_by_label("Name", exact=True).fill("Llama 8B: agentic sessions")
    expect(page.get_by_label("Tokens per tool result")).to_be_hidden()

    page.get_by_label("Dataset", exact=True).select_option("agentic")
    expect(page.get_by_label("Input tokens")).to_be_hidden()
    expect(page.get_by_label("Message tokens")).to_be_hidden()
    for label in ("Tokens per tool result", "Sub-agent chance per turn", "Block size (tokens)"):
        expect(page.get_by_label(label)).to_be_visible()
    # Inputs shared with chat sessions say what blank means for the kind chosen, only.
    help_text = page.locator("#help-system_len")
    expect(help_text).to_contain_text("Agentic: the system prompt and tool definitions")
    expect(help_text.get_by_text("Chat: blank = none.")).to_be_hidden()
    expect(page.locator("#live-status")).to_have_text("Valid: ready to save.")
    # A refusal shows beside its input.
    page.get_by_label("Sub-agent chance per turn").fill("2")
    expect(page.locator("#err-subagent_probability")).to_contain_text("less than or equal to 1")
    expect(page.locator("#live-status")).to_have_text("1 problem marked in the form.")


def test_choosing_an_existing_endpoint_hides_what_it_does_not_have(page, sign_in, alice):
    make_model(alice.org)
    Endpoint.objects.create(
        organization=alice.org, name="prod", base_url="http://127.0.0.1:9", served_model_name="m"
    )
    sign_in(page, alice)
    page.goto("/o/acme/experiments/new/")
    page.get_by_label("Name", exact=True).fill("prod as it is")
    grid, picker = page.locator("#serve-grid"), page.get_by_label("Existing endpoint")
    expect(grid).to_be_visible()
    expect(picker).to_be_hidden()

    page.get_by_label("Engine", exact=True).select_option("endpoint")
    expect(grid).to_be_hidden()
    expect(page.locator("#search-fieldset")).to_be_hidden()
    expect(page.get_by_label("Container disk (GB)")).to_be_hidden()
    expect(picker).to_be_visible()
    # Not picked yet: the live check says so beside the picker, and nothing hidden refuses.
    expect(page.locator("#err-existing_endpoint")).to_contain_text("names one of the")
    expect(page.locator("#live-status")).to_have_text("1 problem marked in the form.")
    picker.select_option(label="prod (m)")
    expect(page.locator("#live-status")).to_have_text("Valid: ready to save.")
    page.get_by_label("Engine", exact=True).select_option("vllm")
    expect(grid).to_be_visible()
    expect(picker).to_be_hidden()
