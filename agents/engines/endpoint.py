"""An existing OpenAI-compatible endpoint as a trial's engine: nothing is started or stopped.

Guarantees:

- ``start`` is a check, not a start: ``GET <base>/v1/models`` (with the API key as a bearer
  token when there is one) must answer 200 with an OpenAI model list naming the served model.
  Otherwise it raises ``EngineFailed``: ``ENDPOINT_UNREACHABLE`` (no connection, a timeout, an
  unexpected status or body, a redirect — never followed), ``MODEL_ACCESS_DENIED`` (401 or
  403) or ``MODEL_NOT_FOUND`` (the list lacks the model, with what it lists). No cold-start phase is
  reported: there is none.
- The check also asks the endpoint for one token on the workload's route with vLLM's
  ``ignore_eos``, the way every measured request asks: an endpoint that refuses it (a 400 or
  422 that a request without it does not get, as hosted APIs answer unknown fields) is
  measured without it (``accepts_ignore_eos`` False; the load generator's report then says
  when replies came back shorter than asked). Any other answer leaves it on: the levels
  report what the endpoint does with the requests.
- With ``addresses`` (what the site resolved the base URL's host to and checked) every
  request connects to those only, in turn, with the host name kept as the Host header and
  the TLS server name: the name is never looked up here, so it cannot answer elsewhere.
- The API key is never in an error, a log line or a report (``repr`` hides it).
- ``stop`` and ``kill`` do nothing (the endpoint is not ours); ``exit_status`` is always None,
  so an endpoint that stops answering mid-level is reported as unreachable, never as a crash.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable
from urllib.parse import urlsplit

from agents.engines.base import EngineFailed, FailureKind, PhaseCallback, StartReport

CHECK_TIMEOUT_SECONDS = 15.0
# An answer that refuses a request's fields (OpenAI: 400 "Unrecognized request argument").
_REFUSED_FIELDS = (400, 422)


def _pinned_connection(addresses: tuple[str, ...]) -> Callable[..., socket.socket]:
    """``socket.create_connection`` to ``addresses`` in turn, whatever host it is given."""

    def create_connection(address, timeout=None, source_address=None) -> socket.socket:
        error: OSError | None = None
        for ip in addresses:
            try:
                return socket.create_connection((ip, address[1]), timeout, source_address)
            except OSError as failed:  # nothing was sent: the next address may answer
                error = failed
        raise error or OSError("no address to connect to")

    return create_connection


class _Unreachable(Exception):
    """A request to the endpoint got no HTTP answer (the message says why, without the key)."""


class EndpointEngine:
    """The endpoint at ``base_url`` (its API base, before ``/v1``) serving ``model``."""

    name = "endpoint"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        route: str = "completions",
        timeout: float = CHECK_TIMEOUT_SECONDS,
        addresses: tuple[str, ...] = (),
    ):
        self._base_url = base_url.rstrip("/")
        self._addresses = tuple(addresses)
        self.model = model
        self._api_key = api_key
        self._route = route  # the workload's: "completions" or "chat"
        self.timeout = timeout
        # Whether measured requests send vLLM's ignore_eos (known after ``start``).
        self.accepts_ignore_eos = True
        self.argv: list[str] = []  # nothing is started
        self.tail: deque[str] = deque(maxlen=20)  # what the check saw, for reports

    def __repr__(self) -> str:
        return f"EndpointEngine({self._base_url!r}, model={self.model!r})"

    @property
    def base_url(self) -> str:
        return self._base_url

    def start(self, on_phase: PhaseCallback | None = None) -> StartReport:
        """Checks the endpoint answers and serves the model (see the module docstring)."""
        served = self._served_models()
        if self.model not in served:
            listed = ", ".join(served[:10]) or "nothing"
            raise self._failed(
                FailureKind.MODEL_NOT_FOUND,
                f"the endpoint does not serve {self.model!r}; it lists {listed}",
            )
        self.tail.append(f"GET {self._base_url}/v1/models: serves {self.model!r}")
        self.accepts_ignore_eos = not self._refuses_ignore_eos()
        if not self.accepts_ignore_eos:
            self.tail.append(
                "the endpoint refuses vLLM's ignore_eos: measured without it (replies may end "
                "before the workload's output length)"
            )
        return StartReport(
            engine=self.name, argv=[], base_url=self._base_url, phases=[], simulated=False
        )

    def _failed(self, kind: FailureKind, message: str) -> EngineFailed:
        self.tail.append(message)
        return EngineFailed(kind, message, log_tail=list(self.tail))

    def _refuses_ignore_eos(self) -> bool:
        """Whether a one-token request is refused with ``ignore_eos`` and taken without."""
        path = "/v1/chat/completions" if self._route == "chat" else "/v1/completions"
        body: dict = {"model": self.model, "max_tokens": 1, "stream": False}
        if self._route == "chat":
            body["messages"] = [{"role": "user", "content": "Hello"}]
        else:
            body["prompt"] = "Hello"
        try:
            with_it, _ = self._call("POST", path, body | {"ignore_eos": True})
            if with_it not in _REFUSED_FIELDS:
                return False
            without_it, _ = self._call("POST", path, body)
        except _Unreachable:
            return False  # unreachable now: the levels will say so (not the check's tail)
        return without_it not in _REFUSED_FIELDS

    def _call(self, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
        """``method`` on ``<base><path>`` with the key: the status and the body's first MB."""
        parts = urlsplit(self._base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise _Unreachable("not an http(s) base URL")
        connection_class = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        extra = {"context": ssl.create_default_context()} if parts.scheme == "https" else {}
        connection = connection_class(parts.hostname, parts.port, timeout=self.timeout, **extra)
        if self._addresses:
            # http.client opens its socket through this attribute, then (https) wraps it for
            # the host name: only where the socket goes changes.
            connection._create_connection = _pinned_connection(self._addresses)
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        started = time.monotonic()
        try:
            connection.request(
                method, f"{parts.path.rstrip('/')}{path}", body=payload, headers=headers
            )
            response = connection.getresponse()
            return response.status, response.read(1_000_000)
        except (OSError, http.client.HTTPException) as exc:
            raise _Unreachable(
                f"cannot reach {self._base_url} ({type(exc).__name__}) after "
                f"{time.monotonic() - started:.1f} s"
            ) from None
        finally:
            connection.close()

    def _served_models(self) -> list[str]:
        try:
            status, body = self._call("GET", "/v1/models")
        except _Unreachable as exc:
            raise self._failed(FailureKind.ENDPOINT_UNREACHABLE, str(exc)) from None
        if status in (401, 403):
            raise self._failed(
                FailureKind.MODEL_ACCESS_DENIED,
                f"the endpoint refused the API key (HTTP {status})",
            )
        if status != 200:
            raise self._failed(
                FailureKind.ENDPOINT_UNREACHABLE,
                f"GET {self._base_url}/v1/models answered HTTP {status}",
            )
        try:
            return [str(model["id"]) for model in json.loads(body)["data"]]
        except (ValueError, KeyError, TypeError):
            raise self._failed(
                FailureKind.ENDPOINT_UNREACHABLE, "GET /v1/models did not answer a model list"
            ) from None

    def stop(self) -> None:
        """Nothing to stop: the endpoint is not ours."""

    def kill(self) -> None:
        """Nothing to kill: the endpoint is not ours."""

    def exit_status(self) -> EngineFailed | None:
        return None  # never "exited": an endpoint that stops answering is unreachable
