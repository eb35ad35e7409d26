"""An existing endpoint as the agent's engine (issue 20): its "start" is a check that it answers
and serves the model, its traffic carries the key as a bearer token, and the key never shows."""

from __future__ import annotations

import json

import pytest

from agents import protocol
from agents.engines.base import EngineFailed, FailureKind
from agents.engines.endpoint import EndpointEngine
from agents.engines.process import free_port
from agents.runner.trial_engine import EngineOptions
from tests.agents.fake_openai_server import FakeServer

from .test_runner import make_job, run

KEY = "sk-endpoint-secret-4f2a"


@pytest.fixture(scope="module")
def server():
    with FakeServer(api_key=KEY) as running:
        yield running


def endpoint_job(base_url: str, *, model: str = "fake", trials=({},)) -> protocol.JobSpec:
    job = make_job(list(trials), concurrency=(1, 2), requests=6)
    engine = protocol.EngineSpec(kind="endpoint", gpu_type="H100", gpu_count=1, base_url=base_url)
    return job.model_copy(
        update={
            "engine": engine,
            "model": job.model.model_copy(update={"served_model_name": model}),
        }
    )


def test_it_checks_the_endpoint_serves_the_model_with_the_key(server):
    report = EndpointEngine(base_url=server.base_url + "/", model="fake", api_key=KEY).start()
    assert (report.engine, report.argv, report.phases, report.simulated) == (
        "endpoint",
        [],
        [],
        False,
    )
    assert report.base_url == server.base_url


@pytest.mark.parametrize(
    ("url", "model", "key", "kind", "words"),
    [
        (
            "server",
            "fake",
            "sk-wrong",
            FailureKind.MODEL_ACCESS_DENIED,
            "refused the API key (HTTP 401)",
        ),
        ("server", "fake", None, FailureKind.MODEL_ACCESS_DENIED, "refused the API key (HTTP 401)"),
        (
            "server",
            "llama",
            KEY,
            FailureKind.MODEL_NOT_FOUND,
            "does not serve 'llama'; it lists fake",
        ),
        ("closed", "fake", KEY, FailureKind.ENDPOINT_UNREACHABLE, "cannot reach"),
    ],
)
def test_it_fails_with_a_class_and_never_shows_the_key(server, url, model, key, kind, words):
    base = server.base_url if url == "server" else f"http://127.0.0.1:{free_port()}"
    engine = EndpointEngine(base_url=base, model=model, api_key=key)
    with pytest.raises(EngineFailed) as failed:
        engine.start()
    assert failed.value.kind is kind and words in failed.value.message
    assert KEY not in str(failed.value.as_dict()) + "".join(failed.value.log_tail) + repr(engine)


def test_a_job_is_refused_without_its_base_url_or_with_one_for_another_engine():
    with pytest.raises(ValueError, match="base_url"):
        protocol.EngineSpec(kind="endpoint", gpu_type="H100", gpu_count=1)
    with pytest.raises(ValueError, match="base_url"):
        protocol.EngineSpec(kind="vllm", gpu_type="H100", gpu_count=1, base_url="http://x")


@pytest.mark.slow
def test_a_run_measures_the_endpoint_sending_the_key_as_a_bearer_token(server, tmp_path):
    before = server.auth()
    job = endpoint_job(server.base_url)
    options = EngineOptions(endpoint_api_key=KEY)
    summary, recorder, _ = run(job, tmp_path, engine_options=options)
    assert (summary.outcome, summary.trials_succeeded) == ("succeeded", 1)
    measured = recorder.of("measurement")
    assert [m["level"]["concurrency"] for m in measured] == [1, 2]
    assert all(m["result"]["completed"] >= 6 and m["result"]["failed"] == 0 for m in measured)
    # Nothing was started: no command, no cold-start phase.
    assert recorder.of("trial_started")[0]["command"] == []
    assert recorder.of("cold_start_phase") == []
    after = server.auth()
    assert after["refused"] == before["refused"]
    # The check, the load generator's preflight and 2 levels × (6 requests + warm-up none).
    assert after["accepted"] - before["accepted"] >= 12
    assert KEY not in json.dumps(recorder.messages)


@pytest.mark.parametrize("route", ["completions", "chat"])
@pytest.mark.slow
def test_an_endpoint_that_refuses_ignore_eos_is_measured_without_it(tmp_path, route):
    with FakeServer(api_key=KEY, refuse_fields=("ignore_eos",)) as strict:
        engine = EndpointEngine(base_url=strict.base_url, model="fake", api_key=KEY, route=route)
        engine.start()
        assert engine.accepts_ignore_eos is False
        assert "refuses vLLM's ignore_eos" in " ".join(engine.tail)
        job = endpoint_job(strict.base_url)
        job = job.model_copy(
            update={"workload": job.workload.model_copy(update={"endpoint": route})}
        )
        summary, recorder, _ = run(
            job, tmp_path, engine_options=EngineOptions(endpoint_api_key=KEY)
        )
    assert (summary.outcome, summary.trials_succeeded) == ("succeeded", 1)
    measured = recorder.of("measurement")
    assert measured and all(m["result"]["failed"] == 0 for m in measured)


def test_an_endpoint_that_takes_ignore_eos_gets_it(server):
    engine = EndpointEngine(base_url=server.base_url, model="fake", api_key=KEY)
    engine.start()
    assert engine.accepts_ignore_eos is True


def test_a_run_with_a_wrong_key_fails_its_trial_as_access_denied(server, tmp_path):
    options = EngineOptions(endpoint_api_key="sk-wrong-key-9999")
    _, recorder, _ = run(endpoint_job(server.base_url), tmp_path, engine_options=options)
    finished = recorder.of("trial_finished")[0]
    assert (finished["outcome"], finished["failure_class"]) == ("failed", "model_access_denied")
    assert "refused the API key (HTTP 401)" in finished["log_tail"]
    assert "sk-wrong-key-9999" not in json.dumps(recorder.messages)
    assert recorder.of("measurement") == []


def test_the_key_comes_from_the_environment_only():
    options = EngineOptions.from_environment({"BENCHSITE_ENDPOINT_API_KEY": KEY})
    assert options.endpoint_api_key == KEY and KEY not in repr(options)
    assert EngineOptions.from_environment({}).endpoint_api_key is None


@pytest.mark.slow
def test_the_endpoint_is_reached_at_the_addresses_the_site_checked(server, tmp_path):
    """The name is never looked up (``.invalid`` resolves nowhere): the check and the load go
    to the addresses given, in turn (the first refuses)."""
    base = f"http://llm.endpoint.invalid:{server.port}"
    refusing = "127.0.0.2"  # nothing listens there: the next address is tried
    engine = EndpointEngine(
        base_url=base, model="fake", api_key=KEY, addresses=(refusing, "127.0.0.1")
    )
    assert engine.start().base_url == base
    with pytest.raises(EngineFailed, match="cannot reach"):
        EndpointEngine(base_url=base, model="fake", api_key=KEY).start()
    options = EngineOptions(endpoint_api_key=KEY, endpoint_addresses=(refusing, "127.0.0.1"))
    summary, recorder, _ = run(endpoint_job(base), tmp_path, engine_options=options)
    assert (summary.outcome, summary.trials_succeeded) == ("succeeded", 1)
    assert all(m["result"]["failed"] == 0 for m in recorder.of("measurement"))


def test_the_checked_addresses_come_from_the_environment():
    variable = "BENCHSITE_ENDPOINT_ADDRESSES"
    options = EngineOptions.from_environment({variable: "192.0.2.7, 2001:db8::1"})
    assert options.endpoint_addresses == ("192.0.2.7", "2001:db8::1")
    assert EngineOptions.from_environment({}).endpoint_addresses == ()
    with pytest.raises(ValueError, match=variable):
        EngineOptions.from_environment({variable: "llm.example.com"})
