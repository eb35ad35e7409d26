"""Existing endpoints (issue 20): an organization's OpenAI-compatible deployment benchmarked
without renting. Saving one asks it (a real server on 127.0.0.1 that checks the bearer key)
whether it serves the model, within the hosts the operator allows; the key is never shown
back; an experiment of it runs end to end through the local provider and is priced at the
endpoint's price."""

from __future__ import annotations

import html
import json
import logging
from decimal import Decimal

import pytest

from agents.engines.process import free_port
from runs.models import AuditEvent, Endpoint, Experiment, Measurement, ModelSpec, Run
from runs.models.runs import TERMINAL_RUN_STATES
from runs.providers.base import pod_name
from runs.services.provisioning import run_release_pod
from tests.agents.fake_openai_server import FakeServer
from tests.polling import wait_for

from .conftest import frozen, make_model, signed_in
from .live_server import daphne_server
from .rebinding import Rebinding
from .test_web_experiments import builder_form

KEY = "sk-endpoint-7f3e9c21"
WORKLOAD = {
    "dataset": {"kind": "random", "input_len": 64, "output_len": 16},
    "concurrency": [1, 2],
    "requests_per_level": 6,
}


@pytest.fixture(scope="module")
def server():
    with FakeServer(api_key=KEY) as running:
        yield running


@pytest.fixture
def allowed(settings):
    """The operator allows endpoints on 127.0.0.1 (a private address: allowed by name too)."""
    settings.BENCHSITE_ENDPOINT_HOSTS = ["127.0.0.1"]
    settings.BENCHSITE_OUTBOUND_PRIVATE_HOSTS = ["127.0.0.1"]
    return settings


def add_endpoint(person, base_url: str, **fields):
    body = {
        "name": "prod vLLM",
        "base_url": base_url,
        "served_model_name": "fake",
        "api_key": KEY,
    } | fields
    return person.client().post(f"/api/v1/orgs/{person.org.slug}/endpoints/", body, format="json")


def endpoint_experiment(person, endpoint_id, **fields):
    # The SLO is judged at p50, which a level of 6 requests can judge: at p99 each level
    # needs 299, and these tests are about reaching and pricing the endpoint, not windows.
    model = ModelSpec.objects.filter(organization=person.org).first() or make_model(person.org)
    body = {
        "name": "prod as it is",
        "model": str(model.id),
        "gpu_type": "NVIDIA H100 80GB HBM3",
        "engine": "endpoint",
        "endpoint": str(endpoint_id),
        "workload": WORKLOAD,
        "slos": {"ttft_ms": 2000, "ttft_percentile": 50},
        "budget_cap_usd": "5.00",
    } | fields
    return person.client().post(f"/api/v1/orgs/{person.org.slug}/experiments/", body, format="json")


@pytest.mark.django_db
def test_it_adds_an_endpoint_it_asked_and_never_shows_the_key_back(alice, server, allowed, caplog):
    caplog.set_level(logging.DEBUG)
    response = add_endpoint(alice, server.base_url + "/v1/", price_usd_per_hour="2.50")
    assert response.status_code == 201, response.json()
    created = response.json()
    assert created["base_url"] == server.base_url  # stored without /v1
    assert created["api_key_fingerprint"] == KEY[-4:]
    assert created["price_usd_per_hour"] == "2.5000"
    listed = alice.client().get(f"/api/v1/orgs/{alice.org.slug}/endpoints/").content.decode()
    detail = alice.client().get(f"/api/v1/orgs/{alice.org.slug}/endpoints/{created['id']}/")
    event = AuditEvent.objects.get(organization=alice.org, event="endpoint.create")
    stored = Endpoint.objects.get(id=created["id"])
    assert stored.encrypted_api_key and KEY not in stored.encrypted_api_key
    page = signed_in(alice).get(f"/orgs/{alice.org.slug}/audit/").content.decode()
    for text in (
        json.dumps(created),
        listed,
        detail.content.decode(),
        caplog.text,
        page,
        json.dumps([event.before, event.after, event.target_repr]),
    ):
        assert KEY not in text
    assert event.after["name"] == "prod vLLM" and event.after["api_key"] is True


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("case", "field", "words"),
    [
        ("unreachable", "base_url", "Could not connect to the endpoint"),
        ("wrong model", "served_model_name", "does not serve 'llama'; it lists fake"),
        ("bad key", "api_key", "refused the API key (HTTP 401)"),
        ("no key", "api_key", "refused the API key (HTTP 401)"),
        ("private address", "base_url", "private, loopback or link-local"),
        ("host not allowed", "base_url", "not one the operator allows here"),
        ("no host allowed", "base_url", "BENCHSITE_ENDPOINT_HOSTS"),
        ("two prices", "price_usd_per_hour", "per hour or per token, not both"),
        ("half a price", "price_usd_per_1m_output_tokens", "both the input and the output"),
    ],
)
def test_saving_an_endpoint_names_the_field_at_fault_and_stores_nothing(
    alice, server, allowed, case, field, words
):
    url, fields = server.base_url, {}
    if case == "unreachable":
        url = f"http://127.0.0.1:{free_port()}"
    elif case == "wrong model":
        fields = {"served_model_name": "llama"}
    elif case == "bad key":
        fields = {"api_key": "sk-not-the-key"}
    elif case == "no key":
        fields = {"api_key": ""}
    elif case == "private address":
        allowed.BENCHSITE_OUTBOUND_PRIVATE_HOSTS = []
    elif case == "host not allowed":
        allowed.BENCHSITE_ENDPOINT_HOSTS = ["*.example.com"]
    elif case == "no host allowed":
        allowed.BENCHSITE_ENDPOINT_HOSTS = []
    elif case == "two prices":
        fields = {
            "price_usd_per_hour": "1",
            "price_usd_per_1m_input_tokens": "0.1",
            "price_usd_per_1m_output_tokens": "0.2",
        }
    elif case == "half a price":
        fields = {"price_usd_per_1m_input_tokens": "0.1"}
    before = server.auth()
    response = add_endpoint(alice, url, **fields)
    assert response.status_code == 400, response.json()
    assert words in " ".join(response.json()["error"]["fields"][field]), response.json()
    assert not Endpoint.objects.exists()
    assert not AuditEvent.objects.filter(event="endpoint.create").exists()
    if case in ("private address", "host not allowed", "no host allowed"):
        assert server.auth() == before  # a refused address is never asked


@pytest.mark.django_db
def test_it_hides_other_tenants_endpoints_and_only_managers_add_them(
    alice, bob, charlie, server, allowed
):
    created = add_endpoint(alice, server.base_url).json()
    assert charlie.client().get(f"/api/v1/orgs/{alice.org.slug}/endpoints/").status_code == 404
    own = charlie.client().get(f"/api/v1/orgs/{charlie.org.slug}/endpoints/{created['id']}/")
    assert own.status_code == 404
    assert add_endpoint(bob, server.base_url, name="bob's").status_code == 403  # a viewer
    assert bob.client().get(f"/api/v1/orgs/{alice.org.slug}/endpoints/").status_code == 200


@pytest.mark.django_db
def test_an_endpoint_experiment_refuses_a_serve_grid_by_field(alice, server, allowed):
    endpoint = add_endpoint(alice, server.base_url).json()
    response = endpoint_experiment(
        alice,
        endpoint["id"],
        serve_grid={"max_num_seqs": [8, 16]},
        defaults_trial=True,
        engine_image_tag="v0.11.0",
    )
    assert response.status_code == 400
    errors = response.json()["error"]["fields"]
    assert "not ours to change" in errors["serve_grid"][0]
    assert set(errors) == {"serve_grid", "defaults_trial", "engine_image_tag"}
    missing = endpoint_experiment(alice, endpoint["id"], endpoint=None)
    assert (
        "names one of the organization's endpoints"
        in missing.json()["error"]["fields"]["endpoint"][0]
    )
    other = endpoint_experiment(alice, endpoint["id"], engine="vllm", engine_image_tag="v0.11.0")
    assert (
        "Only an experiment with engine 'endpoint'"
        in other.json()["error"]["fields"]["endpoint"][0]
    )
    assert not Experiment.objects.exists()
    ok = endpoint_experiment(alice, endpoint["id"])
    assert ok.status_code == 201, ok.json()
    assert ok.json()["trials"] == 1
    # An endpoint an experiment names stays.
    gone = alice.client().delete(f"/api/v1/orgs/{alice.org.slug}/endpoints/{endpoint['id']}/")
    assert gone.status_code == 409 and Endpoint.objects.exists()


@pytest.mark.django_db
def test_a_run_of_an_endpoint_without_a_price_has_an_unknown_cost(alice, server, allowed):
    endpoint = add_endpoint(alice, server.base_url).json()
    experiment = Experiment.objects.get(id=endpoint_experiment(alice, endpoint["id"]).json()["id"])
    run = Run.objects.create(organization=alice.org, experiment=experiment, **frozen(experiment))
    answer = alice.client().get(f"/api/v1/orgs/{alice.org.slug}/runs/{run.id}/").json()
    assert answer["cost_usd"] is None
    assert answer["job_spec"]["engine"] == {
        **answer["job_spec"]["engine"],
        "kind": "endpoint",
        "base_url": server.base_url,
    }
    assert KEY not in json.dumps(answer)
    page = signed_in(alice).get(f"/o/{alice.org.slug}/runs/{run.id}/").content.decode()
    assert '<output id="spend">unknown</output>' in page and "its cost is unknown" in page
    assert KEY not in page
    # The tables that list runs say so too, never $0.00.
    for listing in ("runs/", f"experiments/{experiment.id}/"):
        listing = f"/o/{alice.org.slug}/{listing}"
        page = signed_in(alice).get(listing).content.decode()
        row = page[page.index(str(run.id)[:8]) :].split("</tr>")[0]
        assert '<td class="num">unknown</td>' in row and "$0.00" not in row, listing


@pytest.mark.django_db(transaction=True)
@pytest.mark.needs_redis
@pytest.mark.parametrize("pricing", ["per_token", "per_hour"])
@pytest.mark.slow
def test_an_endpoint_experiment_runs_end_to_end_and_is_priced_at_the_endpoint(
    alice, server, allowed, own_broker_queue, tmp_path, pricing
):
    allowed.BENCHSITE_PROVIDER = "runpod"  # an endpoint runs on the local provider anyway
    allowed.BENCHSITE_LOCAL_PODS_DIR = tmp_path / "pods"
    prices = (
        {"price_usd_per_1m_input_tokens": "3", "price_usd_per_1m_output_tokens": "15"}
        if pricing == "per_token"
        else {"price_usd_per_hour": "36"}
    )
    endpoint = add_endpoint(alice, server.base_url, **prices).json()
    experiment_id = endpoint_experiment(alice, endpoint["id"]).json()["id"]
    before = server.auth()
    with daphne_server() as address:
        allowed.BENCHSITE_PUBLIC_URL = f"http://{address}"
        started = alice.client().post(
            f"/api/v1/orgs/{alice.org.slug}/runs/", {"experiment": experiment_id}, format="json"
        )
        assert started.status_code == 201, started.json()
        run = Run.objects.get(id=started.json()["id"])

        def ended():
            run.refresh_from_db()
            return run.state in ("succeeded", "failed", "cancelled", "over_budget")

        wait_for(ended, 120, "the run to end", every=0.2)
        agent_log = tmp_path / "pods" / pod_name(run.id) / "agent.log"
        assert run.state == "succeeded", (run.failure_reason, agent_log.read_text()[-3000:])
        assert run.provider == "local"
        run_release_pod(run_id=run.id)
    run.refresh_from_db()
    trial = run.trials.get()
    assert (trial.outcome, trial.command, trial.cold_start) == ("succeeded", [], {})
    levels = list(Measurement.objects.filter(trial=trial).order_by("concurrency"))
    assert [level.concurrency for level in levels] == [1, 2]
    # The agent sent the key as a bearer token on every request; none went without it.
    after = server.auth()
    assert after["refused"] == before["refused"] and after["accepted"] - before["accepted"] >= 12
    assert KEY not in agent_log.read_text()
    if pricing == "per_token":
        tokens_in = sum(level.result["total_input_tokens"] for level in levels)
        tokens_out = sum(level.result["total_output_tokens"] for level in levels)
        assert tokens_in > 0 and tokens_out > 0
        expected = (Decimal(tokens_in) * 3 + Decimal(tokens_out) * 15) / Decimal(1_000_000)
        assert run.price_usd_hr is None
        assert run.cost_usd == expected.quantize(Decimal("0.0001"))
    else:
        # $36/h is $0.01/s over the agent's whole run (its wall time, seconds rounded up).
        assert run.price_usd_hr == Decimal("36")
        assert run.cost_usd == (Decimal(str(run.billed_seconds)) * Decimal("0.01")).quantize(
            Decimal("0.0001")
        )
        assert run.billed_seconds >= 1
    answer = alice.client().get(f"/api/v1/orgs/{alice.org.slug}/runs/{run.id}/").json()
    assert Decimal(answer["cost_usd"]) == run.cost_usd


@pytest.mark.django_db
def test_the_settings_page_adds_an_endpoint_and_never_renders_the_key(
    alice, mallory, server, allowed
):
    url = f"/o/{alice.org.slug}/settings/endpoints/"
    form = {
        "name": "prod vLLM",
        "base_url": server.base_url,
        "served_model_name": "llama",
        "api_key": KEY,
        "price_usd_per_hour": "2.5",
    }
    # A price the API refuses is refused on the page by the same rule, under its field.
    for price in ("two", "-1", "100001", "0.00001"):
        api_error = add_endpoint(alice, server.base_url, price_usd_per_hour=price).json()
        page = signed_in(alice).post(url, form | {"price_usd_per_hour": price}).content.decode()
        (message,) = api_error["error"]["fields"]["price_usd_per_hour"]
        assert html.escape(message) in page, (price, message)
        assert 'aria-invalid="true" aria-describedby="id_price-help' in page
    refused = signed_in(alice).post(url, form)
    assert refused.status_code == 200
    page = refused.content.decode()
    assert "does not serve &#x27;llama&#x27;" in page and KEY not in page
    assert not Endpoint.objects.exists()
    added = signed_in(alice).post(url, form | {"served_model_name": "fake"}, follow=True)
    page = added.content.decode()
    assert "Added the endpoint" in page and f"…{KEY[-4:]}" in page and KEY not in page
    assert "$2.50/h" in page
    # A member sees the list, not the form, and cannot add one.
    listed = signed_in(mallory).get(url).content.decode()
    assert "prod vLLM" in listed and "Add an endpoint" not in listed
    assert signed_in(mallory).post(url, form | {"name": "other"}).status_code == 403
    endpoint = Endpoint.objects.get()
    deleted = signed_in(alice).post(f"{url}{endpoint.id}/delete/", follow=True)
    assert "Deleted the endpoint" in deleted.content.decode() and not Endpoint.objects.exists()


@pytest.mark.django_db
@pytest.mark.slow
def test_the_builder_picks_an_endpoint_and_sends_nothing_it_hides(alice, charlie, server, allowed):
    endpoint = add_endpoint(alice, server.base_url).json()
    model = make_model(alice.org)
    client = signed_in(alice)
    page = client.get(f"/o/{alice.org.slug}/experiments/new/").content.decode()
    assert f'<option value="{endpoint["id"]}">prod vLLM (fake)</option>' in page
    # The grid rows, the image tag and the search are the page's defaults for vLLM, hidden
    # for an endpoint: what the page hides is not sent, so it does not refuse the experiment.
    form = builder_form(
        model,
        name="prod as it is",
        engine="endpoint",
        search_strategy="prune",
        fallback_gpu_types=["NVIDIA A100 80GB PCIe", "", "", ""],
    )
    unpicked = client.post(f"/o/{alice.org.slug}/experiments/new/", form)
    assert unpicked.status_code == 200 and not Experiment.objects.exists()
    html = unpicked.content.decode()
    errors = html[html.index('data-slot="existing_endpoint"') :]
    assert "names one of the organization" in errors[: errors.index("</ul>")]
    saved = client.post(
        f"/o/{alice.org.slug}/experiments/new/", form | {"existing_endpoint": endpoint["id"]}
    )
    assert saved.status_code == 302, saved.content.decode()[-2000:]
    experiment = Experiment.objects.get()
    assert (experiment.engine, str(experiment.endpoint_id)) == ("endpoint", endpoint["id"])
    assert (experiment.serve_grid, experiment.engine_image_tag, experiment.search) == ({}, "", {})
    edit = client.get(f"/o/{alice.org.slug}/experiments/{experiment.id}/edit/").content.decode()
    assert f'<option value="{endpoint["id"]}" selected>' in edit
    # Another organization's endpoint is neither offered nor taken.
    other = signed_in(charlie).get(f"/o/{charlie.org.slug}/experiments/new/").content.decode()
    assert endpoint["id"] not in other


@pytest.mark.django_db
def test_an_endpoint_takes_a_new_key_and_price_checked_like_a_new_one(
    alice, mallory, server, allowed, caplog
):
    endpoint = add_endpoint(alice, server.base_url, price_usd_per_hour="2").json()
    url = f"/api/v1/orgs/{alice.org.slug}/endpoints/{endpoint['id']}/"

    def change(person, **body):
        return person.client().patch(url, body, format="json")

    stored = Endpoint.objects.get()
    # A key the endpoint refuses is refused on its field, and nothing changes.
    refused = change(alice, api_key="sk-wrong-9999")
    assert refused.status_code == 400
    assert "refused the API key" in refused.json()["error"]["fields"]["api_key"][0]
    assert Endpoint.objects.get().encrypted_api_key == stored.encrypted_api_key
    # The right one (the server's only key) is taken after the endpoint is asked again, and
    # shown only by its last four characters.
    asked = server.auth()["accepted"]
    with caplog.at_level(logging.DEBUG):
        rotated = change(alice, api_key=KEY)
    assert server.auth()["accepted"] == asked + 1
    assert rotated.status_code == 200, rotated.content
    assert rotated.json()["api_key_fingerprint"] == KEY[-4:]
    assert KEY not in rotated.content.decode() + caplog.text
    # Any price replaces the whole choice: per token now, the hourly price gone; the
    # endpoint is not asked again for a price.
    asked = server.auth()["accepted"]
    priced = change(alice, price_usd_per_1m_input_tokens="3", price_usd_per_1m_output_tokens="15")
    assert priced.status_code == 200, priced.content
    assert server.auth()["accepted"] == asked
    assert (
        priced.json()["price_usd_per_hour"],
        priced.json()["price_usd_per_1m_input_tokens"],
    ) == (
        None,
        "3.0000",
    )
    half = change(alice, price_usd_per_1m_input_tokens="3")
    assert "both the input and the output" in str(half.json()["error"]["fields"])
    # A member may not; the audit log has the change without the key.
    assert change(mallory, name="mine").status_code == 403
    events = AuditEvent.objects.filter(event="endpoint.update").order_by("created_at")
    assert [e.after["api_key"] for e in events] == [True, True]
    assert KEY not in json.dumps([[e.before, e.after] for e in events])
    assert Endpoint.objects.get().name == "prod vLLM"


@pytest.mark.django_db
def test_the_settings_page_replaces_a_key_only_with_one_the_endpoint_takes(
    alice, mallory, server, allowed
):
    endpoint = Endpoint.objects.get(id=add_endpoint(alice, server.base_url).json()["id"])
    key_url = f"/o/{alice.org.slug}/settings/endpoints/{endpoint.id}/key/"
    before = endpoint.encrypted_api_key
    refused = signed_in(alice).post(key_url, {"api_key": "sk-wrong-9999"}, follow=True)
    page = refused.content.decode()
    assert "the key was not replaced" in page and "refused the API key" in page
    assert "sk-wrong-9999" not in page
    assert Endpoint.objects.get().encrypted_api_key == before
    assert signed_in(mallory).post(key_url, {"api_key": KEY}).status_code == 403
    empty = signed_in(alice).post(key_url, {"api_key": " "}, follow=True).content.decode()
    assert "give the new API key" in empty
    assert Endpoint.objects.get().encrypted_api_key == before  # an empty box removes nothing
    taken = signed_in(alice).post(key_url, {"api_key": KEY}, follow=True).content.decode()
    assert "Replaced the API key" in taken and KEY not in taken
    assert Endpoint.objects.get().encrypted_api_key != before  # encrypted afresh
    assert AuditEvent.objects.filter(event="endpoint.update").count() == 1


@pytest.mark.django_db
def test_a_new_host_for_an_endpoint_needs_its_key_again(alice, server, allowed):
    """The stored key goes only where it was given for (issue 32, finding 6): a base URL on
    another host (scheme, name or port) is refused on ``api_key`` unless the same change
    gives the key; another path on the same host keeps it."""
    allowed.BENCHSITE_ENDPOINT_HOSTS = ["127.0.0.1", "localhost"]
    allowed.BENCHSITE_OUTBOUND_PRIVATE_HOSTS = ["127.0.0.1", "localhost"]
    endpoint = add_endpoint(alice, server.base_url).json()
    url = f"/api/v1/orgs/{alice.org.slug}/endpoints/{endpoint['id']}/"
    elsewhere = f"http://localhost:{server.port}"  # the same server, under another name
    stored = Endpoint.objects.get()
    before = server.auth()
    refused = alice.client().patch(url, {"base_url": elsewhere}, format="json")
    assert refused.status_code == 400, refused.content
    (message,) = refused.json()["error"]["fields"]["api_key"]
    assert "give the API key again" in message and KEY not in message
    assert server.auth() == before  # the stored key was sent nowhere
    assert Endpoint.objects.get().base_url == stored.base_url
    assert not AuditEvent.objects.filter(event="endpoint.update").exists()
    # Another port is another host too.
    other_port = alice.client().patch(
        url, {"base_url": f"http://127.0.0.1:{free_port()}"}, format="json"
    )
    assert list(other_port.json()["error"]["fields"]) == ["api_key"]
    # With the key in the same change, the new host is asked with it and taken.
    moved = alice.client().patch(url, {"base_url": elsewhere, "api_key": KEY}, format="json")
    assert moved.status_code == 200, moved.content
    assert moved.json()["base_url"] == elsewhere
    assert server.auth()["accepted"] == before["accepted"] + 1
    # Another path on the same host keeps the key (and is asked with it).
    path = alice.client().patch(url, {"base_url": f"{elsewhere}/api"}, format="json")
    assert "api_key" not in path.json()["error"]["fields"]
    assert "answered HTTP 404" in path.json()["error"]["fields"]["base_url"][0]


@pytest.mark.django_db(transaction=True)
@pytest.mark.needs_redis
@pytest.mark.slow
def test_the_agent_reaches_the_endpoint_only_at_the_address_the_site_checked(
    alice, server, allowed, own_broker_queue, tmp_path, monkeypatch
):
    """The site resolves the endpoint's name once before the agent starts, checks that
    address and hands it to the agent, which connects there (issue 32, finding 1): the name
    here resolves in this process only (``.invalid`` resolves nowhere else), so a run that
    measures proves the agent never looked it up."""
    name = "llm.endpoint.invalid"
    allowed.BENCHSITE_ENDPOINT_HOSTS = allowed.BENCHSITE_OUTBOUND_PRIVATE_HOSTS = [name]
    allowed.BENCHSITE_LOCAL_PODS_DIR = tmp_path / "pods"
    Rebinding(name, "127.0.0.1", "127.0.0.1").patch(monkeypatch)
    endpoint = add_endpoint(alice, f"http://{name}:{server.port}", price_usd_per_hour="36")
    assert endpoint.status_code == 201, endpoint.json()
    experiment_id = endpoint_experiment(alice, endpoint.json()["id"]).json()["id"]
    with daphne_server() as address:
        allowed.BENCHSITE_PUBLIC_URL = f"http://{address}"
        started = alice.client().post(
            f"/api/v1/orgs/{alice.org.slug}/runs/", {"experiment": experiment_id}, format="json"
        )
        run = Run.objects.get(id=started.json()["id"])
        wait_for(
            lambda: Run.objects.get(id=run.id).state in TERMINAL_RUN_STATES,
            120,
            "the run to end",
            every=0.2,
        )
        run.refresh_from_db()
        agent_log = (tmp_path / "pods" / pod_name(run.id) / "agent.log").read_text()
        assert run.state == "succeeded", (run.failure_reason, agent_log[-3000:])
        run_release_pod(run_id=run.id)
    levels = Measurement.objects.filter(trial__run=run).order_by("concurrency")
    assert [(level.concurrency, level.result["failed"]) for level in levels] == [(1, 0), (2, 0)]
