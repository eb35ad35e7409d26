"""A fake Runpod GraphQL API for tests, spoken to by the real ``runpod`` SDK (1.12).

The SDK reads ``RUNPOD_API_BASE_URL`` on every call and posts to ``$RUNPOD_API_BASE_URL/graphql``
with ``Authorization: Bearer <key>``; ``FakeRunpodApi.point_sdk_at_me`` sets the variable. The
fake answers exactly the documents the SDK sends for ``get_gpus``/``get_gpu`` (``gpuTypes``),
``create_pod`` (``gpuTypes`` first, then ``podFindAndDeployOnDemand``; ``myself`` with network
volumes when a volume is named), ``get_pod`` (``pod``), ``get_pods`` (``myself { pods }``),
``terminate_pod`` (``podTerminate``) and ``stop_pod`` (``podStop``). It parses the mutation's
input like a GraphQL server would, so a value that breaks out of its string is a syntax error.

What it keeps: one account per API key (a key sees only its own pods; an unknown key gets
401), every request in ``requests`` (key, operation, arguments, status), and, when
``agent_command`` is set, one subprocess per created pod running that command with the pod's
env (``BENCHSITE_JOB``, ``BENCHSITE_TOKEN``, … plus ``RUNPOD_POD_ID``). A pod reports a
``runtime`` once its process has started, and ``EXITED`` once the process has ended.

Faults, injected per test with ``inject(kind, …)`` (each for ``times`` matching requests,
``None`` for every one until ``clear_faults``):

- ``no_capacity`` — create answers Runpod's "no longer any instances available" error;
- ``rate_limited`` — HTTP 429 with a GraphQL error "Too Many Requests";
- ``bad_gateway`` — HTTP 502 with an HTML page (the SDK fails parsing it as JSON);
- ``slow`` — the answer comes ``seconds`` late (the client's timeout fires first);
- ``invalid`` — HTTP 400 with a GraphQL validation error (``message``);
- ``create_leaves_pod`` — create makes the pod, then answers an HTML 502;
- ``never_running`` — the created pod never gets a runtime (its agent never starts);
- ``dies_after`` — the created pod's process is killed and the pod exits ``seconds`` after
  it started (``exit_pod`` does the same at once; ``crash_pod`` too, but with SIGKILL, so
  its agent cannot report on its way out).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import secrets
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from runs.providers.process_tree import kill_tree


@dataclass(frozen=True)
class FakeGpuType:
    id: str
    display_name: str
    memory_gb: int
    secure_price: Decimal | None
    community_price: Decimal | None
    max_gpu_count: int = 8

    def price_for(self, cloud_type: str) -> Decimal:
        secure, community = self.secure_price or Decimal(0), self.community_price or Decimal(0)
        if cloud_type == "SECURE":
            return secure
        if cloud_type == "COMMUNITY":
            return community
        return community or secure  # ALL lands on the cheaper cloud that has the GPU

    def as_json(self, gpu_count: int = 1) -> dict:
        secure = float(self.secure_price) if self.secure_price else 0.0
        community = float(self.community_price) if self.community_price else 0.0
        lowest = min(p for p in (secure, community) if p) if (secure or community) else None
        return {
            "maxGpuCount": self.max_gpu_count,
            "id": self.id,
            "displayName": self.display_name,
            "manufacturer": "Nvidia",
            "memoryInGb": self.memory_gb,
            "cudaCores": 0,
            "secureCloud": bool(secure),
            "communityCloud": bool(community),
            "securePrice": secure,
            "communityPrice": community,
            "oneMonthPrice": None,
            "threeMonthPrice": None,
            "oneWeekPrice": None,
            "communitySpotPrice": None,
            "secureSpotPrice": None,
            "lowestPrice": {
                "minimumBidPrice": None,
                "uninterruptablePrice": lowest * gpu_count if lowest else None,
            },
        }


# Seed prices of REFERENCE.md (USD per GPU-hour); one listed price is the secure one.
DEFAULT_GPU_TYPES = (
    FakeGpuType("NVIDIA H100 80GB HBM3", "H100 SXM", 80, Decimal("3.99"), Decimal("2.69")),
    FakeGpuType("NVIDIA A100-SXM4-80GB", "A100 SXM", 80, Decimal("1.79"), Decimal("1.39")),
    FakeGpuType("NVIDIA H200", "H200 SXM", 141, Decimal("4.59"), None),
    FakeGpuType("NVIDIA B200", "B200", 180, Decimal("6.79"), Decimal("5.98")),
    FakeGpuType("NVIDIA L40S", "L40S", 48, Decimal("0.99"), None),
    FakeGpuType("NVIDIA GeForce RTX 4090", "RTX 4090", 24, Decimal("0.44"), Decimal("0.31")),
)

NO_CAPACITY_MESSAGE = (
    "There are no longer any instances available with the requested specifications. "
    "Please refresh and try again."
)
_HTML_502 = (
    b"<html><head><title>502 Bad Gateway</title></head>"
    b"<body><center><h1>502 Bad Gateway</h1></center><hr><center>cloudflare</center>"
    b"</body></html>"
)
FAULT_KINDS = {
    "no_capacity",
    "rate_limited",
    "bad_gateway",
    "slow",
    "invalid",
    "create_leaves_pod",
    "never_running",
    "dies_after",
}
# Faults about creating a pod apply to the create mutation unless told otherwise.
_CREATE_FAULTS = {"no_capacity", "create_leaves_pod", "never_running", "dies_after"}
CREATE = "podFindAndDeployOnDemand"


# ------------------------------------------------------------------------------------------
# Just enough GraphQL: which operation, and the value of its `input` argument
# ------------------------------------------------------------------------------------------


class GraphQLSyntaxError(ValueError):
    pass


_OPERATIONS = [
    (CREATE, re.compile(r"\bpodFindAndDeployOnDemand\s*\(")),
    ("podTerminate", re.compile(r"\bpodTerminate\s*\(")),
    ("podStop", re.compile(r"\bpodStop\s*\(")),
    ("pod", re.compile(r"\bpod\s*\(")),
    ("gpuTypes", re.compile(r"\bgpuTypes\b")),
    ("myself", re.compile(r"\bmyself\s*\{")),
]
_NAME = re.compile(r"[_A-Za-z][_0-9A-Za-z]*")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class _ValueParser:
    """GraphQL input values (strings, numbers, booleans, null, enums, lists, objects)."""

    def __init__(self, text: str, pos: int):
        self.text, self.pos = text, pos

    def _skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n,":
            self.pos += 1

    def _peek(self) -> str:
        self._skip()
        if self.pos >= len(self.text):
            raise GraphQLSyntaxError("Syntax Error: Unexpected <EOF>.")
        return self.text[self.pos]

    def _expect(self, char: str) -> None:
        if self._peek() != char:
            found = self.text[self.pos]
            raise GraphQLSyntaxError(f'Syntax Error: Expected "{char}", found "{found}".')
        self.pos += 1

    def name(self) -> str:
        self._skip()
        match = _NAME.match(self.text, self.pos)
        if not match:
            found = self.text[self.pos : self.pos + 1] or "<EOF>"
            raise GraphQLSyntaxError(f'Syntax Error: Expected Name, found "{found}".')
        self.pos = match.end()
        return match.group()

    def value(self):
        char = self._peek()
        if char == '"':
            return self._string()
        if char == "{":
            self.pos += 1
            obj = {}
            while self._peek() != "}":
                key = self.name()
                self._expect(":")
                obj[key] = self.value()
            self.pos += 1
            return obj
        if char == "[":
            self.pos += 1
            items = []
            while self._peek() != "]":
                items.append(self.value())
            self.pos += 1
            return items
        match = _NUMBER.match(self.text, self.pos)
        if match:
            self.pos = match.end()
            number = match.group()
            return float(number) if any(c in number for c in ".eE") else int(number)
        word = self.name()
        return {"true": True, "false": False, "null": None}.get(word, word)

    def _string(self) -> str:
        self.pos += 1
        out = []
        while True:
            if self.pos >= len(self.text):
                raise GraphQLSyntaxError("Syntax Error: Unterminated string.")
            char = self.text[self.pos]
            if char == '"':
                self.pos += 1
                return "".join(out)
            if char in "\r\n":
                raise GraphQLSyntaxError("Syntax Error: Unterminated string.")
            if char == "\\":
                code = self.text[self.pos + 1 : self.pos + 2]
                if code == "u":
                    out.append(chr(int(self.text[self.pos + 2 : self.pos + 6], 16)))
                    self.pos += 6
                    continue
                if code not in _ESCAPES:
                    raise GraphQLSyntaxError(f"Syntax Error: Invalid character escape \\{code}.")
                out.append(_ESCAPES[code])
                self.pos += 2
                continue
            out.append(char)
            self.pos += 1


def parse_document(query: str) -> tuple[str, dict | None]:
    """The operation a document performs and its ``input`` argument (None without one)."""
    for operation, pattern in _OPERATIONS:
        match = pattern.search(query)
        if not match:
            continue
        if operation == "myself" and re.search(r"\bpods\s*\{", query):
            operation = "pods"
        rest = query[match.end() :]
        arguments = re.match(r"\s*\(?\s*input\s*:", rest)
        if not arguments:
            return operation, None
        parser = _ValueParser(query, match.end() + arguments.end())
        value = parser.value()
        parser._expect(")")  # the argument list must close right after the input object
        if not isinstance(value, dict):
            raise GraphQLSyntaxError("Expected an input object.")
        return operation, value
    raise GraphQLSyntaxError("Cannot query this operation on the fake Runpod API.")


# ------------------------------------------------------------------------------------------
# State
# ------------------------------------------------------------------------------------------


@dataclass
class FakePod:
    id: str
    api_key: str
    name: str
    image: str
    gpu: FakeGpuType
    gpu_count: int
    cloud_type: str
    env: dict[str, str] = field(repr=False)
    container_disk_gb: int
    volume_gb: int
    ports: str | None
    network_volume_id: str | None
    created_at: datetime.datetime
    desired_status: str = "RUNNING"
    runtime: bool = False
    process: subprocess.Popen | None = None
    log_path: Path | None = None

    @property
    def cost_per_hr(self) -> Decimal:
        return self.gpu.price_for(self.cloud_type) * self.gpu_count

    def as_json(self) -> dict:
        uptime = (datetime.datetime.now(datetime.UTC) - self.created_at).total_seconds()
        return {
            "id": self.id,
            "containerDiskInGb": self.container_disk_gb,
            "costPerHr": float(self.cost_per_hr),
            "desiredStatus": self.desired_status,
            "dockerArgs": "",
            "dockerId": None,
            "env": [f"{key}={value}" for key, value in self.env.items()],
            "gpuCount": self.gpu_count,
            "imageName": self.image,
            "lastStatusChange": f"Rented by User: {self.created_at:%a %b %d %Y %H:%M:%S} GMT",
            "machineId": f"m{self.id[:10]}",
            "memoryInGb": 125,
            "name": self.name,
            "podType": "RESERVED",
            "port": None,
            "ports": self.ports,
            "uptimeSeconds": int(uptime) if self.runtime else 0,
            "vcpuCount": 16,
            "volumeInGb": self.volume_gb,
            "volumeMountPath": "/runpod-volume",
            "runtime": (
                {
                    "ports": [
                        {
                            "ip": "127.0.0.1",
                            "isIpPublic": False,
                            "privatePort": 8000,
                            "publicPort": 8000,
                            "type": "http",
                        }
                    ]
                }
                if self.runtime
                else None
            ),
            "machine": {"gpuDisplayName": self.gpu.display_name},
        }


@dataclass(frozen=True)
class RecordedRequest:
    """One request the fake received (``api_key`` None when none was sent)."""

    api_key: str | None
    operation: str
    arguments: dict | None
    status: int
    pod_id: str | None  # the pod the request was about, or the pod it created
    fault: str | None
    query: str = field(repr=False)


@dataclass
class _Fault:
    kind: str
    operation: str | None
    remaining: int | None
    api_key: str | None
    seconds: float
    message: str


class _Answer(Exception):
    """Ends a request with this HTTP status and body."""

    def __init__(self, status: int, body: bytes, content_type: str = "application/json"):
        self.status, self.body, self.content_type = status, body, content_type


def _graphql_error(status: int, message: str) -> _Answer:
    return _Answer(status, json.dumps({"errors": [{"message": message}]}).encode())


class FakeRunpodApi:
    """The fake server. Use as a context manager, or ``start()`` and ``stop()``."""

    def __init__(
        self,
        api_keys=("rpa_fake_key_alpha_0001",),
        *,
        gpu_types=DEFAULT_GPU_TYPES,
        agent_command: list[str] | None = None,
        agent_env: dict[str, str] | None = None,
        latency: float = 0.0,
        log_dir: Path | None = None,
    ):
        self.gpu_types = {gpu.id: gpu for gpu in gpu_types}
        self.agent_command = agent_command
        self.agent_env = dict(agent_env or {})
        # Every answer is this late: widens the window in which concurrent callers overlap.
        self.latency = latency
        self.requests: list[RecordedRequest] = []
        self.network_volumes: dict[str, list[dict]] = {}
        self._accounts: dict[str, dict[str, FakePod]] = {key: {} for key in api_keys}
        self._faults: list[_Fault] = []
        self._timers: list[threading.Timer] = []
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._log_dir = log_dir
        self._own_log_dir: tempfile.TemporaryDirectory | None = None
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the fake first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeRunpodApi:
        if self._log_dir is None:
            self._own_log_dir = tempfile.TemporaryDirectory(prefix="fake-runpod-")
            self._log_dir = Path(self._own_log_dir.name)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="fake-runpod", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # cuts short any "slow" answer still waiting
        for timer in self._timers:
            timer.cancel()
        self.stop_agents()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._own_log_dir is not None:
            self._own_log_dir.cleanup()
            self._own_log_dir = None

    def __enter__(self) -> FakeRunpodApi:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def point_sdk_at_me(self, monkeypatch) -> None:
        """Makes the real SDK talk to this fake (it reads the variable on every call)."""
        monkeypatch.setenv("RUNPOD_API_BASE_URL", self.url)

    # -- what tests arrange ---------------------------------------------------------------

    def add_account(self, api_key: str) -> None:
        with self._lock:
            self._accounts.setdefault(api_key, {})

    def inject(
        self,
        kind: str,
        *,
        operation: str | None = None,
        times: int | None = 1,
        api_key: str | None = None,
        seconds: float = 0.0,
        message: str = 'Variable "$input" got invalid value; gpuCount must be at most 8.',
    ) -> None:
        """Makes the next ``times`` matching requests fail (see the module docstring)."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; one of {sorted(FAULT_KINDS)}")
        if operation is None and kind in _CREATE_FAULTS:
            operation = CREATE
        with self._lock:
            self._faults.append(_Fault(kind, operation, times, api_key, seconds, message))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def pods(self, api_key: str) -> list[FakePod]:
        """The account's pods as the fake holds them (terminated ones are gone)."""
        with self._lock:
            for pod in self._accounts[api_key].values():
                self._refresh(pod)
            return list(self._accounts[api_key].values())

    def all_pods(self) -> list[FakePod]:
        with self._lock:
            return [pod for key in self._accounts for pod in self.pods(key)]

    def add_pod(self, api_key: str, name: str, **overrides) -> FakePod:
        """A pod that exists in the account without a create call (e.g. made by hand)."""
        gpu = self.gpu_types[overrides.pop("gpu_type_id", DEFAULT_GPU_TYPES[0].id)]
        pod = FakePod(
            id=_pod_id(),
            api_key=api_key,
            name=name,
            image=overrides.pop("image", "runpod/pytorch:latest"),
            gpu=gpu,
            gpu_count=overrides.pop("gpu_count", 1),
            cloud_type=overrides.pop("cloud_type", "SECURE"),
            env=overrides.pop("env", {}),
            container_disk_gb=20,
            volume_gb=0,
            ports=None,
            network_volume_id=None,
            created_at=datetime.datetime.now(datetime.UTC),
            runtime=overrides.pop("runtime", True),
            **overrides,
        )
        with self._lock:
            self._accounts[api_key][pod.id] = pod
        return pod

    def exit_pod(self, pod_id: str) -> None:
        """The pod's container dies: its process is killed and the pod reads EXITED."""
        with self._lock:
            pod = self._find(pod_id)
            if pod is None:
                return
            _kill(pod)
            pod.desired_status, pod.runtime = "EXITED", False

    def crash_pod(self, pod_id: str) -> None:
        """The pod's host dies: its process is killed at once (SIGKILL, so nothing in it gets
        to report) and the pod reads EXITED."""
        with self._lock:
            pod = self._find(pod_id)
            if pod is None:
                return
            if pod.process is not None and pod.process.poll() is None:
                # The whole container goes: the agent's engines (own sessions) with it.
                kill_tree(pod.process.pid, signal.SIGKILL)
                pod.process.wait(timeout=5)
            pod.desired_status, pod.runtime = "EXITED", False

    def stop_agents(self) -> None:
        """Kills every agent process the fake started (their pods read EXITED after)."""
        with self._lock:
            for key in self._accounts:
                for pod in self._accounts[key].values():
                    _kill(pod)

    def agent_log(self, pod_id: str) -> str:
        """What the pod's agent printed so far."""
        with self._lock:
            pod = self._find(pod_id)
            path = pod.log_path if pod else None
        return path.read_text(errors="replace") if path and path.exists() else ""

    def requests_with(self, api_key: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.api_key == api_key]

    def operations(self) -> list[str]:
        with self._lock:
            return [r.operation for r in self.requests]

    # -- answering ------------------------------------------------------------------------

    def handle(self, api_key: str | None, body: bytes) -> tuple[int, bytes, str]:
        if self.latency:
            self._stopping.wait(self.latency)
        operation, arguments, pod_id, fault = "?", None, None, None
        query = body.decode(errors="replace")
        try:
            try:
                query = json.loads(body)["query"]
                operation, arguments = parse_document(query)
            except (ValueError, KeyError, TypeError) as exc:
                message = str(exc) if isinstance(exc, GraphQLSyntaxError) else "Bad request"
                raise _graphql_error(400, message) from None
            with self._lock:
                if api_key not in self._accounts:
                    raise _graphql_error(401, "Unauthorized")
                fault = self._take_fault(api_key, operation)
            pod_id = (arguments or {}).get("podId")
            if fault is not None and fault.kind == "slow":
                self._stopping.wait(fault.seconds)
            self._answer_fault_before(fault)
            with self._lock:
                data, pod_id = self._perform(api_key, operation, arguments, fault, pod_id)
            if fault is not None and fault.kind == "create_leaves_pod":
                raise _Answer(502, _HTML_502, "text/html")
            answer = _Answer(200, json.dumps({"data": data}).encode())
        except _Answer as exc:
            answer = exc
        with self._lock:
            self.requests.append(
                RecordedRequest(
                    api_key=api_key,
                    operation=operation,
                    arguments=arguments,
                    status=answer.status,
                    pod_id=pod_id,
                    fault=fault.kind if fault else None,
                    query=query,
                )
            )
        return answer.status, answer.body, answer.content_type

    def _take_fault(self, api_key: str, operation: str) -> _Fault | None:
        for fault in self._faults:
            if fault.operation not in (None, operation) or fault.api_key not in (None, api_key):
                continue
            if fault.remaining is not None:
                fault.remaining -= 1
                if fault.remaining == 0:
                    self._faults.remove(fault)
            return fault
        return None

    @staticmethod
    def _answer_fault_before(fault: _Fault | None) -> None:
        if fault is None:
            return
        if fault.kind == "no_capacity":
            raise _graphql_error(200, NO_CAPACITY_MESSAGE)
        if fault.kind == "rate_limited":
            raise _graphql_error(429, "Too Many Requests")
        if fault.kind == "bad_gateway":
            raise _Answer(502, _HTML_502, "text/html")
        if fault.kind == "invalid":
            raise _graphql_error(400, fault.message)

    def _perform(self, api_key, operation, arguments, fault, pod_id):
        account = self._accounts[api_key]
        arguments = arguments or {}
        if operation == "gpuTypes":
            if "id" not in arguments:
                return {"gpuTypes": [g.as_json() for g in self.gpu_types.values()]}, None
            gpu = self.gpu_types.get(arguments["id"])
            return {"gpuTypes": [gpu.as_json()] if gpu else []}, None
        if operation == "pods":
            for pod in account.values():
                self._refresh(pod)
            return {"myself": {"pods": [pod.as_json() for pod in account.values()]}}, None
        if operation == "myself":
            return {
                "myself": {
                    "id": f"user-{api_key[-4:]}",
                    "pubKey": "",
                    "networkVolumes": self.network_volumes.get(api_key, []),
                }
            }, None
        if operation == "pod":
            pod = account.get(pod_id)
            if pod is not None:
                self._refresh(pod)
            return {"pod": pod.as_json() if pod else None}, pod_id
        if operation == "podTerminate":
            pod = account.pop(pod_id, None)
            if pod is None:
                raise _graphql_error(200, "Pod not found.")
            _kill(pod)
            return {"podTerminate": None}, pod_id
        if operation == "podStop":
            pod = account.get(pod_id)
            if pod is None:
                raise _graphql_error(200, "Pod not found.")
            _kill(pod)
            pod.desired_status, pod.runtime = "EXITED", False
            return {"podStop": {"id": pod.id, "desiredStatus": "EXITED"}}, pod_id
        if operation == CREATE:
            pod = self._create(api_key, arguments, fault)
            return {
                CREATE: {
                    "id": pod.id,
                    "imageName": pod.image,
                    "env": [f"{key}={value}" for key, value in pod.env.items()],
                    "machineId": f"m{pod.id[:10]}",
                    "machine": {"podHostId": f"{pod.id}-64410065"},
                }
            }, pod.id
        raise _graphql_error(400, f"Cannot query field {operation!r} on the fake Runpod API.")

    def _create(self, api_key: str, arguments: dict, fault: _Fault | None) -> FakePod:
        gpu = self.gpu_types.get(arguments.get("gpuTypeId"))
        if gpu is None:
            raise _graphql_error(400, "Invalid gpuTypeId.")
        gpu_count = arguments.get("gpuCount", 1)
        if not isinstance(gpu_count, int) or not 1 <= gpu_count <= gpu.max_gpu_count:
            raise _graphql_error(400, f"gpuCount must be between 1 and {gpu.max_gpu_count}.")
        cloud_type = arguments.get("cloudType")
        if cloud_type not in {"SECURE", "COMMUNITY", "ALL"}:
            raise _graphql_error(400, f'Value "{cloud_type}" does not exist in "CloudTypeEnum".')
        if not gpu.price_for(cloud_type):
            raise _graphql_error(200, NO_CAPACITY_MESSAGE)
        env = {item["key"]: item["value"] for item in arguments.get("env") or []}
        pod = FakePod(
            id=_pod_id(),
            api_key=api_key,
            name=arguments.get("name", ""),
            image=arguments.get("imageName", ""),
            gpu=gpu,
            gpu_count=gpu_count,
            cloud_type=cloud_type,
            env=env,
            container_disk_gb=arguments.get("containerDiskInGb", 10),
            volume_gb=arguments.get("volumeInGb", 0),
            ports=arguments.get("ports"),
            network_volume_id=arguments.get("networkVolumeId"),
            created_at=datetime.datetime.now(datetime.UTC),
        )
        self._accounts[api_key][pod.id] = pod
        if fault is not None and fault.kind == "never_running":
            return pod
        self._start_agent(pod)
        pod.runtime = True
        if fault is not None and fault.kind == "dies_after":
            timer = threading.Timer(fault.seconds, self.exit_pod, args=(pod.id,))
            timer.daemon = True
            self._timers.append(timer)
            timer.start()
        return pod

    def _start_agent(self, pod: FakePod) -> None:
        if not self.agent_command:
            return
        assert self._log_dir is not None
        pod.log_path = self._log_dir / f"{pod.name or pod.id}-{pod.id}.log"
        env = os.environ | self.agent_env | pod.env | {"RUNPOD_POD_ID": pod.id}
        with pod.log_path.open("wb") as log:
            pod.process = subprocess.Popen(
                self.agent_command,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: killed with its children
            )

    @staticmethod
    def _refresh(pod: FakePod) -> None:
        # A container whose process has ended has exited.
        if pod.process is not None and pod.process.poll() is not None and pod.runtime:
            pod.desired_status, pod.runtime = "EXITED", False

    def _find(self, pod_id: str) -> FakePod | None:
        for account in self._accounts.values():
            if pod_id in account:
                return account[pod_id]
        return None


def _pod_id() -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(secrets.choice(alphabet) for _ in range(14))


def _kill(pod: FakePod) -> None:
    process = pod.process
    if process is None or process.poll() is not None:
        return
    # A real pod's container takes everything with it: so do the agent's engines here.
    below = kill_tree(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)
    kill_tree(process.pid, signal.SIGKILL, below=below, include_root=process.poll() is None)
    process.wait(timeout=5)


def _handler_for(fake: FakeRunpodApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            path, _, query_string = self.path.partition("?")
            if path != "/graphql":
                self._send(404, b"Not Found", "text/plain")
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            auth = self.headers.get("Authorization", "")
            api_key = auth[len("Bearer ") :] if auth.startswith("Bearer ") else None
            if api_key is None:  # the older ?api_key= form
                match = re.search(r"(?:^|&)api_key=([^&]+)", query_string)
                api_key = match.group(1) if match else None
            status, payload, content_type = fake.handle(api_key, body)
            self._send(status, payload, content_type)

        def _send(self, status: int, payload: bytes, content_type: str) -> None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        def log_message(self, format, *args):  # tests read `requests`, not stderr
            pass

    return Handler
