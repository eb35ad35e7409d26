"""The Runpod adapter, through the real ``runpod`` SDK, against the fake Runpod API.

Nothing here touches the database: the provider holds a key, the fake holds the accounts.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import types
import uuid
from decimal import Decimal

import pytest
import requests
import runpod
import runpod.api.graphql

from runs.providers.base import (
    PermanentProviderError,
    PodSpec,
    PodState,
    ProviderError,
    TransientProviderError,
    pod_name,
)
from runs.providers.runpod import RunpodProvider
from tests.fakes.runpod_api import FakeRunpodApi
from tests.polling import wait_for

KEY_A = "rpa_ACME7f3a9c2e41d8b6a5c0e9f2d4b7a1c3e5aaaa"
KEY_B = "rpa_GLOBEX0d1e2f3a4b5c6d7e8f9a0b1c2d3e4fbbbb"
H100 = "NVIDIA H100 80GB HBM3"
JOB = "eyJydW4iOiAiLi4uIn0="  # base64 JSON, as the site sends it
RUN_TOKEN = "bsr_run-token-0123456789abcdef"
SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]  # an agent that waits


@pytest.fixture
def fake(monkeypatch):
    with FakeRunpodApi([KEY_A, KEY_B]) as api:
        api.point_sdk_at_me(monkeypatch)
        yield api


def spec(**overrides) -> PodSpec:
    fields = dict(
        name=pod_name(uuid.uuid4()),
        image="ghcr.io/benchsite/agent:vllm-v0.11.0",
        gpu_type_id=H100,
        gpu_count=2,
        cloud_type="SECURE",
        env={"BENCHSITE_JOB": JOB, "BENCHSITE_TOKEN": RUN_TOKEN},
        ports="8000/http",
    )
    return PodSpec(**(fields | overrides))


def assert_no_secrets(error: BaseException, *secrets: str) -> None:
    text = f"{error} {error!r}"
    for secret in (KEY_A, KEY_B, RUN_TOKEN, JOB, *secrets):
        assert secret not in text
    assert error.__cause__ is None and error.__suppress_context__  # the SDK's query is dropped


# ------------------------------------------------------------------------------------------
# The whole life of a pod
# ------------------------------------------------------------------------------------------


def test_it_rents_finds_watches_and_terminates_a_pod(fake):
    provider = RunpodProvider(KEY_A)
    fake.add_pod(KEY_A, "my-notebook")  # the account's own pod, not ours
    other = fake.add_pod(KEY_B, pod_name(uuid.uuid4()))  # another organization's bench pod
    wanted = spec()

    created = provider.create(wanted)

    assert created.name == wanted.name and created.state is PodState.PENDING
    [create] = [r for r in fake.requests if r.operation == "podFindAndDeployOnDemand"]
    assert create.api_key == KEY_A
    sent = create.arguments
    assert sent["name"] == wanted.name and sent["gpuTypeId"] == H100 and sent["gpuCount"] == 2
    assert sent["cloudType"] == "SECURE" and sent["ports"] == "8000/http"
    # The job reaches the pod only as env values, exactly as given.
    assert sent["env"] == [
        {"key": "BENCHSITE_JOB", "value": JOB},
        {"key": "BENCHSITE_TOKEN", "value": RUN_TOKEN},
    ]

    found = provider.find_by_name(wanted.name)
    assert found.pod_id == created.pod_id
    status = provider.status(created.pod_id)
    assert status.state is PodState.RUNNING and status.raw_status == "RUNNING"
    assert status.cost_per_hr == Decimal("7.98")  # 2 × H100 at 3.99 (secure)
    assert status.gpu_count == 2

    listed = provider.list_bench_pods()
    assert [pod.pod_id for pod in listed] == [created.pod_id]
    assert other.id not in {pod.pod_id for pod in listed}

    provider.terminate(created.pod_id)
    assert provider.status(created.pod_id) is None
    assert provider.find_by_name(wanted.name) is None
    provider.terminate(created.pod_id)  # gone already: fine
    assert provider.list_bench_pods() == []
    assert {r.api_key for r in fake.requests} == {KEY_A}
    assert runpod.api_key is None  # the SDK's global key is cleared after every call


def test_it_reads_prices_per_cloud(fake):
    provider = RunpodProvider(KEY_A)
    assert provider.price(H100, "SECURE") == Decimal("3.99")
    assert provider.price(H100, "COMMUNITY") == Decimal("2.69")
    assert provider.price(H100, "ALL") == Decimal("3.99")  # the dearer: budgets stay safe
    assert provider.price("NVIDIA H200", "COMMUNITY") is None  # not offered there
    assert provider.price("NVIDIA GeForce 256", "SECURE") is None  # no such GPU type


def test_it_reports_a_pod_without_runtime_as_pending_and_an_exited_one_as_exited(fake):
    provider = RunpodProvider(KEY_A)
    fake.inject("never_running")
    starting = provider.create(spec())
    assert provider.status(starting.pod_id).state is PodState.PENDING
    assert provider.status(starting.pod_id).raw_status == "RUNNING"

    dying = provider.create(spec())
    assert provider.status(dying.pod_id).state is PodState.RUNNING
    fake.exit_pod(dying.pod_id)
    assert provider.status(dying.pod_id).state is PodState.EXITED
    assert provider.find_by_name(provider.status(dying.pod_id).name).state is PodState.EXITED


def test_it_finds_the_pod_that_a_failed_create_left_behind(fake):
    provider = RunpodProvider(KEY_A)
    wanted = spec()
    fake.inject("create_leaves_pod")

    with pytest.raises(TransientProviderError) as raised:
        provider.create(wanted)

    assert_no_secrets(raised.value)
    found = provider.find_by_name(wanted.name)
    assert found is not None and found.state is PodState.RUNNING
    assert [pod.id for pod in fake.pods(KEY_A)] == [found.pod_id]  # one pod, found again


def test_it_places_a_pod_beside_its_network_volume(fake):
    fake.network_volumes[KEY_A] = [
        {"id": "vol4weights", "name": "hf-cache", "size": 200, "dataCenterId": "EU-RO-1"}
    ]
    RunpodProvider(KEY_A).create(spec(network_volume_id="vol4weights"))
    assert fake.operations() == ["gpuTypes", "myself", "podFindAndDeployOnDemand"]
    sent = fake.requests[-1].arguments
    assert (sent["networkVolumeId"], sent["dataCenterId"]) == ("vol4weights", "EU-RO-1")


def test_the_fake_answers_the_sdks_stop_and_gpu_list(fake):
    pod = fake.add_pod(KEY_A, pod_name(uuid.uuid4()))
    runpod.api_key = KEY_A
    try:
        assert runpod.stop_pod(pod.id) == {"id": pod.id, "desiredStatus": "EXITED"}
        assert H100 in {gpu["id"] for gpu in runpod.get_gpus()}
    finally:
        runpod.api_key = None
    assert RunpodProvider(KEY_A).status(pod.id).state is PodState.EXITED


def test_it_prefers_the_live_pod_when_names_repeat(fake):
    provider = RunpodProvider(KEY_A)
    name = pod_name(uuid.uuid4())
    fake.add_pod(KEY_A, name, desired_status="EXITED", runtime=False)
    live = fake.add_pod(KEY_A, name)
    assert provider.find_by_name(name).pod_id == live.id


# ------------------------------------------------------------------------------------------
# Faults: each maps to the class that tells the caller whether to retry
# ------------------------------------------------------------------------------------------

CALLS = {
    "create": lambda provider: provider.create(spec()),
    "find_by_name": lambda provider: provider.find_by_name(pod_name(uuid.uuid4())),
    "status": lambda provider: provider.status("abcdefghijklmn"),
    "terminate": lambda provider: provider.terminate("abcdefghijklmn"),
    "list_bench_pods": lambda provider: provider.list_bench_pods(),
    "price": lambda provider: provider.price(H100, "SECURE"),
}


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("fault", ["rate_limited", "bad_gateway"])
def test_it_calls_rate_limits_and_gateway_errors_transient(fake, fault, call):
    fake.inject(fault, times=None)
    with pytest.raises(TransientProviderError) as raised:
        CALLS[call](RunpodProvider(KEY_A))
    assert raised.value.no_capacity is False
    assert_no_secrets(raised.value)
    assert fake.requests and all(r.fault == fault for r in fake.requests)


def test_it_calls_no_capacity_transient_and_says_so(fake):
    fake.inject("no_capacity")
    with pytest.raises(TransientProviderError) as raised:
        RunpodProvider(KEY_A).create(spec())
    assert raised.value.no_capacity is True
    assert "no longer any instances available" in str(raised.value)
    assert_no_secrets(raised.value)
    assert fake.pods(KEY_A) == []


def test_it_calls_a_gpu_missing_from_the_cloud_no_capacity(fake):
    with pytest.raises(TransientProviderError) as raised:
        RunpodProvider(KEY_A).create(spec(gpu_type_id="NVIDIA H200", cloud_type="COMMUNITY"))
    assert raised.value.no_capacity is True


def test_it_calls_a_timeout_transient(fake, monkeypatch):
    # The SDK waits 30 s per request; the same code path with a short wait keeps this quick.
    def post(*args, **kwargs):
        return requests.post(*args, **(kwargs | {"timeout": 0.5}))

    monkeypatch.setattr(
        runpod.api.graphql, "requests", types.SimpleNamespace(post=post, exceptions=requests)
    )
    fake.inject("slow", seconds=10)
    started = time.monotonic()
    with pytest.raises(TransientProviderError) as raised:
        RunpodProvider(KEY_A).status("abcdefghijklmn")
    assert time.monotonic() - started < 5
    assert "in time" in str(raised.value)
    assert_no_secrets(raised.value)


def test_it_calls_an_unreachable_api_transient(monkeypatch):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("RUNPOD_API_BASE_URL", f"http://127.0.0.1:{port}")
    with pytest.raises(TransientProviderError) as raised:
        RunpodProvider(KEY_A).list_bench_pods()
    assert_no_secrets(raised.value)


@pytest.mark.parametrize("call", sorted(CALLS))
def test_it_calls_a_refused_key_permanent(fake, call):
    wrong = "rpa_WRONG00000000000000000000000000000000zzzz"
    with pytest.raises(PermanentProviderError) as raised:
        CALLS[call](RunpodProvider(wrong))
    assert str(raised.value) == "Runpod refused the API key"
    assert_no_secrets(raised.value, wrong)
    assert fake.pods(KEY_A) == fake.pods(KEY_B) == []


def test_it_calls_a_validation_error_permanent(fake):
    fake.inject("invalid", message='Variable "$input" got invalid value; gpuCount is invalid.')
    with pytest.raises(PermanentProviderError) as raised:
        RunpodProvider(KEY_A).create(spec())
    assert "gpuCount is invalid" in str(raised.value)
    assert_no_secrets(raised.value)


def test_it_calls_requests_runpod_refuses_permanent(fake):
    provider = RunpodProvider(KEY_A)
    with pytest.raises(PermanentProviderError) as too_many:
        provider.create(spec(gpu_count=9))  # the fake's H100 hosts hold 8
    assert "gpuCount" in str(too_many.value)
    with pytest.raises(PermanentProviderError) as unknown:
        provider.create(spec(gpu_type_id="NVIDIA GeForce 256"))
    assert "no GPU type 'NVIDIA GeForce 256'" in str(unknown.value)
    for raised in (too_many, unknown):
        assert_no_secrets(raised.value)
    assert fake.pods(KEY_A) == []


def test_it_keeps_a_key_that_leaks_into_an_error_out_of_the_message(fake):
    fake.inject("invalid", message=f"Key {KEY_A} may not deploy {RUN_TOKEN}")
    with pytest.raises(PermanentProviderError) as raised:
        RunpodProvider(KEY_A).create(spec())
    assert_no_secrets(raised.value)
    assert "[redacted]" in str(raised.value)


# ------------------------------------------------------------------------------------------
# What the SDK would interpolate unescaped is refused before anything is sent
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {"env": {"BENCHSITE_JOB": 'x" }, { key: "EVIL", value: "1', "BENCHSITE_TOKEN": RUN_TOKEN}},
        {"env": {"BENCHSITE_JOB": "a\\u0022b"}},
        {"env": {"BENCHSITE_JOB": "line\nbreak"}},
        {"env": {'BAD"NAME': "x"}},
        {"env": {"BAD NAME": "x"}},
        {"name": 'bench-"'},
        {"name": "bench-not-a-uuid"},
        # Fixed ids: they name tests, which every parallel worker must collect alike.
        {"name": "bench-24A615FF-D7F1-488C-A3AA-4C99ED54E04D"},
        {"name": "notebook-c727fc32-5c0d-440a-9215-d00503180d8d"},
        {"image": 'agent" }'},
        {"gpu_type_id": 'NVIDIA H100" , gpuCount: 64 #'},
        {"cloud_type": "SECURE, gpuCount: 64"},
        {"ports": '8000/http"'},
        {"network_volume_id": 'vol"'},
        {"gpu_count": 0},
        {"gpu_count": True},
    ],
    ids=repr,
)
def test_it_refuses_values_that_would_break_the_query_before_sending(fake, overrides):
    with pytest.raises(PermanentProviderError) as raised:
        RunpodProvider(KEY_A).create(spec(**overrides))
    assert fake.requests == []
    assert "Refused before calling Runpod" in str(raised.value)
    for value in overrides.get("env", {}).values():
        assert value not in str(raised.value)


@pytest.mark.parametrize("pod_id", ['abc"', "abc def", "", "a" * 65, "abc\n"])
def test_it_refuses_malformed_pod_ids_before_sending(fake, pod_id):
    provider = RunpodProvider(KEY_A)
    for call in (provider.status, provider.terminate):
        with pytest.raises(PermanentProviderError):
            call(pod_id)
    assert fake.requests == []


# ------------------------------------------------------------------------------------------
# Two organizations, one process: each call carries its own key only
# ------------------------------------------------------------------------------------------


def test_it_never_mixes_two_organizations_keys_across_threads(monkeypatch):
    rounds = 6
    with FakeRunpodApi([KEY_A, KEY_B], latency=0.005) as fake:
        fake.point_sdk_at_me(monkeypatch)
        seen: dict[str, list] = {KEY_A: [], KEY_B: []}
        failures: list[BaseException] = []
        start = threading.Barrier(2)

        def work(key: str) -> None:
            provider = RunpodProvider(key)
            try:
                start.wait()
                for _ in range(rounds):
                    created = provider.create(spec())
                    seen[key].append(("listed", [p.pod_id for p in provider.list_bench_pods()]))
                    seen[key].append(("status", provider.status(created.pod_id)))
                    provider.terminate(created.pod_id)
                    seen[key].append(("created", created.pod_id))
            except BaseException as exc:  # reported below, in the test's thread
                failures.append(exc)

        threads = [threading.Thread(target=work, args=(key,)) for key in (KEY_A, KEY_B)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert failures == []

    assert runpod.api_key is None
    owner = {r.pod_id: r.api_key for r in fake.requests if r.operation.startswith("podFind")}
    assert sorted(owner.values()) == sorted([KEY_A] * rounds + [KEY_B] * rounds)
    for request in fake.requests:
        assert request.status == 200, request
        if request.pod_id is not None:
            assert owner[request.pod_id] == request.api_key, request
    for key in (KEY_A, KEY_B):
        mine = {pod_id for pod_id, holder in owner.items() if holder == key}
        for kind, value in seen[key]:
            if kind == "listed":
                assert set(value) <= mine and value
            elif kind == "status":
                assert value is not None and value.pod_id in mine


# ------------------------------------------------------------------------------------------
# The fake starts the agent command in the pod's environment
# ------------------------------------------------------------------------------------------


def test_it_starts_the_agent_with_the_pods_env_and_stops_it_on_terminate(monkeypatch, tmp_path):
    report = tmp_path / "env.json"
    agent = (
        "import json, os, pathlib, time\n"
        "names = ['BENCHSITE_JOB', 'BENCHSITE_TOKEN', 'RUNPOD_POD_ID']\n"
        "values = {n: os.environ[n] for n in names}\n"
        "pathlib.Path(os.environ['REPORT']).write_text(json.dumps(values))\n"
        "time.sleep(120)\n"
    )
    with FakeRunpodApi(
        [KEY_A], agent_command=[sys.executable, "-c", agent], agent_env={"REPORT": str(report)}
    ) as fake:
        fake.point_sdk_at_me(monkeypatch)
        provider = RunpodProvider(KEY_A)
        created = provider.create(spec())
        env = json.loads(wait_for(lambda: report.exists() and report.read_text(), 20))
        assert env == {
            "BENCHSITE_JOB": JOB,
            "BENCHSITE_TOKEN": RUN_TOKEN,
            "RUNPOD_POD_ID": created.pod_id,
        }
        [pod] = fake.pods(KEY_A)
        assert provider.status(created.pod_id).state is PodState.RUNNING
        provider.terminate(created.pod_id)
        assert pod.process.poll() is not None  # killed with its pod


def test_it_reports_a_pod_whose_agent_ended_as_exited(monkeypatch):
    with FakeRunpodApi([KEY_A], agent_command=[sys.executable, "-c", "print('done')"]) as fake:
        fake.point_sdk_at_me(monkeypatch)
        provider = RunpodProvider(KEY_A)
        created = provider.create(spec())
        wait_for(lambda: provider.status(created.pod_id).state is PodState.EXITED, 20)
        assert "done" in fake.agent_log(created.pod_id)


def test_it_kills_a_pod_that_dies_later(monkeypatch):
    with FakeRunpodApi([KEY_A], agent_command=SLEEPER) as fake:
        fake.point_sdk_at_me(monkeypatch)
        provider = RunpodProvider(KEY_A)
        fake.inject("dies_after", seconds=0.2)
        created = provider.create(spec())
        wait_for(lambda: provider.status(created.pod_id).state is PodState.EXITED, 20)
        assert fake.pods(KEY_A)[0].process.poll() is not None


def test_it_stops_every_agent_on_request(monkeypatch):
    with FakeRunpodApi([KEY_A], agent_command=SLEEPER) as fake:
        fake.point_sdk_at_me(monkeypatch)
        provider = RunpodProvider(KEY_A)
        pods = [provider.create(spec()) for _ in range(2)]
        fake.stop_agents()
        for created in pods:
            assert provider.status(created.pod_id).state is PodState.EXITED


def test_it_hides_the_key_from_repr():
    assert KEY_A not in repr(RunpodProvider(KEY_A))
    with pytest.raises(ProviderError):
        RunpodProvider("")
