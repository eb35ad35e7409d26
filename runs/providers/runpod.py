"""Runpod, through its official SDK (``runpod`` 1.x, GraphQL), behind the provider interface.

Guarantees, on top of those of ``runs.providers.base``:
- The SDK takes its key from the module global ``runpod.api_key``. Every SDK call runs under
  one process-wide lock that sets this provider's key for that call only and clears it after:
  two organizations' keys are never in the SDK at once, and no call goes out with another
  organization's key (nor with one the SDK read from ``~/.runpod/config.toml`` at import).
- The SDK writes values into its GraphQL documents without escaping them. Every such value is
  checked before anything is sent; one that could leave its string (a quote, a backslash, a
  line break) is refused with ``PermanentProviderError``. The job travels as one base64 env
  value, which never needs escaping.
- SDK failures become ``TransientProviderError`` / ``PermanentProviderError``. Their messages
  hold neither the key nor any env value, and the SDK's exception is never chained (its
  ``query`` attribute carries the env, hence the run token).
- What the SDK returns is normalised into ``PodInfo``: SDK 2.0 moves to REST with other
  shapes, and only this module has to change then.

The SDK has no retries and a fixed 30-second timeout per request; retrying is the caller's
decision, driven by the error class.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

import requests
import runpod
import runpod.error

from runs.providers.base import (
    PermanentProviderError,
    PodInfo,
    PodSpec,
    PodState,
    ProviderError,
    TransientProviderError,
    pod_name,
    run_id_of_pod,
)

# One lock per process for the SDK's one global key.
_SDK_LOCK = threading.Lock()
# The SDK loads a key from ~/.runpod/config.toml when it is imported: never use that one.
runpod.api_key = None

CLOUD_TYPES = frozenset({"SECURE", "COMMUNITY", "ALL"})
_POD_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}")
_GPU_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._()+-]{0,99}")
_PORTS = re.compile(r"\d{1,5}/(?:http|tcp)(?:,\d{1,5}/(?:http|tcp))*")
_VOLUME_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_RESUME_SUFFIX = re.compile(r"-r[1-9][0-9]{0,2}")
# What would end a GraphQL string early or change its meaning.
_UNSAFE_IN_STRING = re.compile(r'["\\\x00-\x1f\x7f]')

# Runpod tells capacity failures apart only by their text.
_NO_CAPACITY = re.compile(
    r"no longer any instances|no instances? (?:currently )?available|not enough free gpus"
    r"|out of stock|insufficient capacity|no gpus? (?:are )?available",
    re.IGNORECASE,
)
_TRANSIENT = re.compile(
    r"too many requests|rate.?limit|try again later|something went wrong|internal server error"
    r"|timed? ?out|temporarily|service unavailable|bad gateway",
    re.IGNORECASE,
)
_AUTH = re.compile(r"unauthori[sz]ed|forbidden|invalid api key|api key", re.IGNORECASE)
_NOT_FOUND = re.compile(r"not found|does not exist|no pod", re.IGNORECASE)
_MESSAGE_LIMIT = 300


@dataclass(frozen=True)
class ListedGpuType:
    """A GPU type as Runpod lists it: its id, display name and memory (the product's GB)."""

    id: str
    display_name: str
    memory_gb: int


@contextmanager
def _sdk_key(api_key: str):
    with _SDK_LOCK:
        runpod.api_key = api_key
        try:
            yield
        finally:
            runpod.api_key = None


def _scrub(message: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret:
            message = message.replace(secret, "[redacted]")
    if len(message) > _MESSAGE_LIMIT:
        message = message[:_MESSAGE_LIMIT] + "…"
    return message


def _money(value) -> Decimal | None:
    """A price or rate from the API as an exact Decimal; None when absent or not positive."""
    if value is None or isinstance(value, bool):
        return None
    try:
        amount = Decimal(str(value))  # via str: 2.69 stays 2.69, not its binary neighbour
    except InvalidOperation:
        return None
    return amount if amount.is_finite() and amount > 0 else None


def _pod_state(desired: str, runtime) -> PodState:
    if desired == "RUNNING":
        # The container runs once Runpod reports a runtime; before that the pod is starting.
        return PodState.RUNNING if runtime else PodState.PENDING
    if desired in {"EXITED", "DEAD", "PAUSED"}:
        return PodState.EXITED
    if desired == "TERMINATED":
        return PodState.TERMINATED
    return PodState.PENDING  # CREATED, RESTARTING, or anything new


def _pod_info(raw: dict) -> PodInfo:
    desired = str(raw.get("desiredStatus") or "").upper()
    gpu_count = raw.get("gpuCount")
    return PodInfo(
        pod_id=str(raw["id"]),
        name=str(raw.get("name") or ""),
        state=_pod_state(desired, raw.get("runtime")),
        cost_per_hr=_money(raw.get("costPerHr")),
        gpu_count=gpu_count if isinstance(gpu_count, int) else None,
        raw_status=desired,
    )


_STATE_PREFERENCE = [PodState.RUNNING, PodState.PENDING, PodState.EXITED, PodState.TERMINATED]


def _check(condition: bool, field: str, rule: str) -> None:
    if not condition:
        raise PermanentProviderError(f"Refused before calling Runpod: {field} {rule}")


def _check_pod_id(pod_id: str) -> None:
    _check(isinstance(pod_id, str) and bool(_POD_ID.fullmatch(pod_id)), "pod id", "is malformed")


def _check_gpu_type(gpu_type_id: str) -> None:
    _check(
        isinstance(gpu_type_id, str) and bool(_GPU_TYPE.fullmatch(gpu_type_id)),
        "gpu_type_id",
        "must be letters, digits, spaces and . _ ( ) + -",
    )


def _check_spec(spec: PodSpec) -> None:
    run_id = run_id_of_pod(spec.name) if isinstance(spec.name, str) else None
    try:
        canonical = run_id is not None and str(uuid.UUID(run_id)) == run_id
    except ValueError:
        canonical = False
    # What follows the run's id is nothing, or which replacement pod this is ("-r2").
    suffix = spec.name.removeprefix(pod_name(run_id)) if canonical else "?"
    canonical = suffix == "" or bool(_RESUME_SUFFIX.fullmatch(suffix))
    _check(canonical, "name", "must be 'bench-' and a run's UUID (and '-r<n>' when resumed)")
    _check(
        isinstance(spec.image, str) and bool(_IMAGE.fullmatch(spec.image)),
        "image",
        "must be a container image reference",
    )
    _check_gpu_type(spec.gpu_type_id)
    _check(spec.cloud_type in CLOUD_TYPES, "cloud_type", "must be SECURE, COMMUNITY or ALL")
    for field, value, low in (
        ("gpu_count", spec.gpu_count, 1),
        ("container_disk_gb", spec.container_disk_gb, 1),
        ("volume_gb", spec.volume_gb, 0),
    ):
        _check(
            isinstance(value, int) and not isinstance(value, bool) and low <= value <= 100_000,
            field,
            f"must be a whole number from {low}",
        )
    _check(
        spec.ports == "" or bool(_PORTS.fullmatch(spec.ports)),
        "ports",
        "must look like '8000/http,22/tcp'",
    )
    _check(
        spec.network_volume_id is None or bool(_VOLUME_ID.fullmatch(spec.network_volume_id)),
        "network_volume_id",
        "is malformed",
    )
    for key, value in spec.env.items():
        _check(
            isinstance(key, str) and bool(_ENV_KEY.fullmatch(key)),
            "an env name",
            "must be letters, digits and underscores",
        )
        # The value itself is never named: it may be the run token.
        _check(
            isinstance(value, str) and not _UNSAFE_IN_STRING.search(value),
            f"env {key}",
            "must not contain quotes, backslashes or control characters",
        )


# SDK calls that answer "gone" for a pod or GPU type that does not exist, instead of failing.


def _get_pod_or_none(pod_id: str):
    try:
        return runpod.get_pod(pod_id)
    except runpod.error.QueryError as exc:
        if _NOT_FOUND.search(str(exc)):
            return None
        raise


def _terminate_pod_if_present(pod_id: str) -> None:
    try:
        runpod.terminate_pod(pod_id)
    except runpod.error.QueryError as exc:
        if not _NOT_FOUND.search(str(exc)):
            raise


def _get_gpu_or_none(gpu_type_id: str):
    try:
        return runpod.get_gpu(gpu_type_id)
    except requests.exceptions.JSONDecodeError:
        raise
    except ValueError:  # the SDK's "No GPU found with the specified ID"
        return None


class RunpodProvider:
    """One organization's Runpod account, reached with that organization's key only."""

    name = "runpod"

    def __init__(self, api_key: str):
        if not api_key:
            raise PermanentProviderError("The organization has no Runpod API key.")
        self._api_key = api_key

    def __repr__(self) -> str:
        return "RunpodProvider(<key hidden>)"

    # -- the interface --------------------------------------------------------------------

    def find_by_name(self, name: str) -> PodInfo | None:
        matches = [info for info in self._pods() if info.name == name]
        if not matches:
            return None
        # Names are not unique at Runpod: prefer the pod that is furthest along.
        return min(matches, key=lambda info: _STATE_PREFERENCE.index(info.state))

    def create(self, spec: PodSpec) -> PodInfo:
        _check_spec(spec)
        raw = self._call(
            f"creating pod {spec.name}",
            runpod.create_pod,
            name=spec.name,
            image_name=spec.image,
            gpu_type_id=spec.gpu_type_id,
            cloud_type=spec.cloud_type,
            gpu_count=spec.gpu_count,
            volume_in_gb=spec.volume_gb,
            container_disk_in_gb=spec.container_disk_gb,
            ports=spec.ports or None,
            env=dict(spec.env),
            network_volume_id=spec.network_volume_id,
            secrets=spec.env.values(),
            unknown_gpu=spec.gpu_type_id,
        )
        if not isinstance(raw, dict) or not raw.get("id"):
            # A create may still have left a pod: the caller looks it up by name again.
            raise TransientProviderError(f"Runpod returned no pod for {spec.name}")
        return PodInfo(
            pod_id=str(raw["id"]),
            name=spec.name,
            state=PodState.PENDING,
            gpu_type_id=spec.gpu_type_id,
            gpu_count=spec.gpu_count,
            raw_status="CREATED",
        )

    def status(self, pod_id: str) -> PodInfo | None:
        _check_pod_id(pod_id)
        raw = self._call(f"reading pod {pod_id}", _get_pod_or_none, pod_id)
        return _pod_info(raw) if raw else None

    def terminate(self, pod_id: str) -> None:
        _check_pod_id(pod_id)
        try:
            self._call(f"terminating pod {pod_id}", _terminate_pod_if_present, pod_id)
        except ProviderError:
            # Terminating a pod that is already gone may fail in other words: gone is done.
            info = self.status(pod_id)
            if info is not None and info.state is not PodState.TERMINATED:
                raise

    def list_bench_pods(self) -> list[PodInfo]:
        return [info for info in self._pods() if run_id_of_pod(info.name) is not None]

    def price(self, gpu_type_id: str, cloud_type: str) -> Decimal | None:
        _check(cloud_type in CLOUD_TYPES, "cloud_type", "must be SECURE, COMMUNITY or ALL")
        listed = self.prices(gpu_type_id)
        if listed is None:
            return None
        secure, community = listed
        if cloud_type == "SECURE":
            return secure
        if cloud_type == "COMMUNITY":
            return community
        # ALL may land in either cloud: budget with the dearer of the two.
        offered = [price for price in (secure, community) if price is not None]
        return max(offered) if offered else None

    def prices(self, gpu_type_id: str) -> tuple[Decimal | None, Decimal | None] | None:
        """(secure, community) USD per GPU-hour as Runpod lists them now, each None where that
        cloud offers none; None when Runpod has no such GPU type. One call."""
        _check_gpu_type(gpu_type_id)
        raw = self._call(f"reading the price of {gpu_type_id}", _get_gpu_or_none, gpu_type_id)
        if not raw:
            return None
        return _money(raw.get("securePrice")), _money(raw.get("communityPrice"))

    def gpu_types(self) -> list[ListedGpuType]:
        """Every GPU type Runpod lists now, without prices (``prices`` asks for one type's).
        Entries whose id could not be sent back safely, or without a memory size, are left
        out. One call."""
        raw = self._call("listing GPU types", runpod.get_gpus)
        if not isinstance(raw, list):
            raise TransientProviderError("Runpod answered listing GPU types in an unexpected shape")
        listed = []
        for entry in raw:
            if not isinstance(entry, dict):
                continue
            gpu_id, memory = entry.get("id"), entry.get("memoryInGb")
            if not (isinstance(gpu_id, str) and _GPU_TYPE.fullmatch(gpu_id)):
                continue
            if isinstance(memory, bool) or not isinstance(memory, int | float) or not memory > 0:
                continue
            name = entry.get("displayName")
            name = name.strip()[:80] if isinstance(name, str) and name.strip() else gpu_id
            listed.append(ListedGpuType(gpu_id, name, round(memory)))
        return listed

    # -- the SDK, under the lock, with errors classified ----------------------------------

    def _pods(self) -> list[PodInfo]:
        raw = self._call("listing pods", runpod.get_pods)
        if not isinstance(raw, list):
            raise TransientProviderError("Runpod answered listing pods in an unexpected shape")
        return [_pod_info(pod) for pod in raw if isinstance(pod, dict) and pod.get("id")]

    def _call(
        self,
        what: str,
        function: Callable,
        *args,
        secrets: Iterable[str] = (),
        unknown_gpu: str | None = None,
        **kwargs,
    ):
        hidden = [self._api_key, *secrets]
        try:
            with _sdk_key(self._api_key):
                return function(*args, **kwargs)
        except runpod.error.AuthenticationError:
            raise PermanentProviderError("Runpod refused the API key") from None
        except runpod.error.QueryError as exc:
            raise _classify(what, _scrub(str(exc.message or ""), hidden)) from None
        except requests.exceptions.JSONDecodeError:
            # Rate limits and gateway errors come back as HTML; the SDK only tries to parse.
            raise TransientProviderError(
                f"Runpod answered {what} with a page that is not JSON (rate limit or 5xx)"
            ) from None
        except requests.exceptions.Timeout:
            raise TransientProviderError(f"Runpod did not answer {what} in time") from None
        except requests.exceptions.ConnectionError:
            raise TransientProviderError(f"Could not reach Runpod when {what}") from None
        except requests.exceptions.RequestException as exc:
            raise TransientProviderError(
                f"Request to Runpod failed when {what} ({type(exc).__name__})"
            ) from None
        except ValueError:
            if unknown_gpu is not None:  # create_pod checks the GPU type first
                raise PermanentProviderError(f"Runpod has no GPU type {unknown_gpu!r}") from None
            raise PermanentProviderError(f"Runpod refused {what}: invalid request") from None
        except (KeyError, TypeError, IndexError):
            # The SDK indexes into the answer without checking it (e.g. {"data": null}).
            raise TransientProviderError(f"Runpod answered {what} in an unexpected shape") from None


def _classify(what: str, message: str) -> ProviderError:
    """A GraphQL error's first message → the error class it belongs to."""
    if _NO_CAPACITY.search(message):
        return TransientProviderError(
            f"Runpod has no capacity when {what}: {message}", no_capacity=True
        )
    if _TRANSIENT.search(message):
        return TransientProviderError(f"Runpod failed temporarily when {what}: {message}")
    if _AUTH.search(message):
        return PermanentProviderError("Runpod refused the API key")
    return PermanentProviderError(f"Runpod refused {what}: {message}")
