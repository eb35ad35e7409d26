"""The site's REST API over httpx, with every failure turned into one clear ``CliError``.

Guarantees: the token travels only in the ``Authorization`` header and appears in no message
this module builds; reads (GET) are retried on network errors and 5xx, writes never (a
started run must not be started twice); an API error keeps the site's field names
(``{"error": {"fields": {"workload.concurrency[0]": […]}}}``) so the caller can print them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

READ_ATTEMPTS = 3


class CliError(Exception):
    """Something stopped the command; ``str()`` is the one line to print (exit code 2)."""

    def __init__(self, message: str, fields: dict[str, list[str]] | None = None):
        super().__init__(message)
        self.fields = fields or {}


class ApiClient:
    """One organization's API at ``base_url`` (``https://bench.example.com``)."""

    def __init__(
        self,
        *,
        base_url: str,
        token: str,
        org: str,
        timeout: float = 30.0,
        log: Callable[[str], None] | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.org = org
        self._log = log or (lambda line: None)
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout,
            follow_redirects=False,
        )

    def close(self) -> None:
        self._http.close()

    def org_path(self, path: str) -> str:
        return f"/api/v1/orgs/{self.org}/{path.lstrip('/')}"

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self._request("GET", self.org_path(path), params=params).json()

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self._request("POST", self.org_path(path), json=body).json()

    def list_all(self, path: str, params: dict[str, Any] | None = None) -> Iterator[dict]:
        """Every row of a cursor-paginated list, following ``next``."""
        page = self.get(path, params)
        while True:
            if isinstance(page, list):
                yield from page
                return
            yield from page.get("results", [])
            if not page.get("next"):
                return
            page = self._request("GET", page["next"]).json()

    def stream_to(self, path: str, params: dict[str, Any], write: Callable[[bytes], Any]) -> None:
        """A streamed download (the audit export), chunk by chunk into ``write``."""
        url = self.org_path(path)
        try:
            with self._http.stream("GET", url, params=params) as response:
                self._log(f"GET {response.request.url} → {response.status_code}")
                if response.status_code >= 400:
                    response.read()
                    raise _api_error(response)
                for chunk in response.iter_bytes():
                    write(chunk)
        except httpx.HTTPError as exc:
            raise _transport_error(self.base_url, exc) from None

    def _request(self, method: str, url: str, **kwargs) -> httpx.Response:
        attempts = READ_ATTEMPTS if method == "GET" else 1
        for attempt in range(1, attempts + 1):
            try:
                response = self._http.request(method, url, **kwargs)
            except httpx.HTTPError as exc:
                self._log(f"{method} {url} failed: {type(exc).__name__}")
                if attempt == attempts or not isinstance(exc, httpx.TransportError):
                    raise _transport_error(self.base_url, exc) from None
                time.sleep(0.5 * attempt)
                continue
            self._log(f"{method} {response.request.url} → {response.status_code}")
            if response.status_code >= 500 and attempt < attempts:
                time.sleep(0.5 * attempt)
                continue
            if response.status_code >= 400:
                raise _api_error(response)
            return response
        raise AssertionError("unreachable")  # the loop returns or raises


def _transport_error(base_url: str, exc: httpx.HTTPError) -> CliError:
    # httpx's message names the URL at most, never the headers; still, say it our way.
    if isinstance(exc, httpx.TimeoutException):
        return CliError(f"{base_url} did not answer in time ({type(exc).__name__})")
    if isinstance(exc, httpx.ConnectError | httpx.NetworkError):
        return CliError(f"cannot reach {base_url}: {exc}")
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.InvalidURL):
        return CliError(f"bad site URL {base_url!r}: {exc}")
    return CliError(f"talking to {base_url} failed: {type(exc).__name__}: {exc}")


def _api_error(response: httpx.Response) -> CliError:
    status = response.status_code
    try:
        error = response.json().get("error") or {}
    except (ValueError, AttributeError):
        error = {}
    message = str(error.get("message") or response.reason_phrase or "error")
    fields = error.get("fields") or {}
    if status == 401:
        return CliError(
            f"the site refused the token (401: {message}); check BENCHSITE_TOKEN and that it "
            "belongs to this organization"
        )
    if status == 403:
        return CliError(f"not allowed (403): {message}")
    if status == 404:
        return CliError(f"not found (404): {response.request.url.path}")
    if 300 <= status < 400:
        return CliError(f"the site redirected ({status}); is the URL right (https://…)?")
    return CliError(f"the site answered {status}: {message}", fields=fields)
