"""An organization's existing endpoints: adding one (checked against the operator's allowed
hosts and then asked whether it serves the model), removing one, and its key for a run.

Guarantees:

- ``endpoint_create`` saves nothing until every field is right: the base URL is plain http(s)
  to a host the operator allows (``BENCHSITE_ENDPOINT_HOSTS``; an inward address also needs
  ``BENCHSITE_OUTBOUND_PRIVATE_HOSTS``, ``runs.services.outbound``), the endpoint answers
  ``GET <base>/v1/models`` with the API key as a bearer token, accepts the key, and lists the
  served model name. Each failure is a ``DomainValidationError`` on the field at fault
  (``base_url``, ``api_key``, ``served_model_name``, a price), in words a person can act on.
- The API key is stored encrypted (``runs.secrets``); it is never returned, logged, audited or
  put in an error: only its last four characters (``api_key_fingerprint``) are shown. The
  check asks the address the host resolved to when it was checked, and does not follow
  redirects, so an allowed host cannot send the worker elsewhere; it reads at most
  ``MODEL_LIST_MAX_BYTES`` of the answer.
- ``endpoint_update`` changes what it is given by the same rules (a new key, a new price, a
  new address or model), and asks the endpoint again only when the address, the model or
  the key changed; a refused change saves nothing. A base URL on another host (scheme,
  name or port) needs the key in the same change (refused on ``api_key`` otherwise): the
  stored key is never sent to a host it was not given for. Prices are one choice: giving any price
  field replaces all three (one left out is none). Runs already started keep the price
  frozen in them; a new key is used by runs provisioned from then on.
- Creating, changing and deleting are audited (``endpoint.create``, ``endpoint.update``,
  ``endpoint.delete``) with the name, base URL, model, price and whether there is a key;
  an endpoint that experiments still name is not deleted (``Conflict``).
"""

from __future__ import annotations

import json
import logging
import re
from decimal import Decimal
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.db import IntegrityError, transaction

from runs.actors import Actor
from runs.audit import audit_record
from runs.errors import Conflict, DomainValidationError
from runs.models import Endpoint, Organization
from runs.secrets import decrypt_secret, encrypt_secret
from runs.services.outbound import (
    OutboundRefused,
    OutboundTarget,
    outbound_body,
    outbound_request,
    outbound_target,
)

logger = logging.getLogger(__name__)

CHECK_TIMEOUT_SECONDS = 10
# A model list of about a hundred models (vLLM's lists ~500 bytes each, with LoRA adapters
# one entry each): larger than a hook's answer may be, and still a small bounded read.
MODEL_LIST_MAX_BYTES = 64 * 1024
USER_AGENT = "Benchsite-Endpoint-Check/1"
# Printable ASCII without spaces: a key goes into an HTTP header and must not break out of it.
_API_KEY = re.compile(r"[\x21-\x7e]{1,500}")
_NAME_TAKEN = "An endpoint of this organization has this name already."


def endpoint_base_url(url: str) -> str:
    """The base URL as stored: without a trailing ``/`` or ``/v1`` (the OpenAI paths are
    added to it, as ``vllm serve``'s root takes ``/v1/models``)."""
    url = url.strip().rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def endpoint_target(base_url: str) -> OutboundTarget:
    """``base_url`` resolved once and checked against the hosts the operator allows for
    endpoints (``runs.services.outbound``); raises ``OutboundRefused``."""
    return outbound_target(
        base_url,
        allowed_hosts=settings.BENCHSITE_ENDPOINT_HOSTS,
        allowed_setting="BENCHSITE_ENDPOINT_HOSTS",
    )


def endpoint_url_problem(base_url: str) -> str | None:
    """Why the workers may not send an endpoint's traffic to ``base_url`` (None: they may);
    the same rule when it is saved and before each run."""
    try:
        endpoint_target(base_url)
    except OutboundRefused as refused:
        return str(refused)
    return None


def _served_models(target: OutboundTarget, api_key: str) -> tuple[list[str] | None, str, str]:
    """The model ids ``<base>/v1/models`` lists, or None with the field at fault and why."""
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        with outbound_request(
            target, "GET", path="/v1/models", headers=headers, timeout=CHECK_TIMEOUT_SECONDS
        ) as response:
            body = outbound_body(
                response, limit=MODEL_LIST_MAX_BYTES, timeout=CHECK_TIMEOUT_SECONDS
            )
    except httpx.TimeoutException:
        return None, "base_url", f"The endpoint did not answer within {CHECK_TIMEOUT_SECONDS} s."
    except httpx.HTTPError as exc:
        return None, "base_url", f"Could not connect to the endpoint ({type(exc).__name__})."
    if response.status_code in (401, 403):
        return None, "api_key", f"The endpoint refused the API key (HTTP {response.status_code})."
    if response.status_code != 200:
        return (
            None,
            "base_url",
            (
                f"GET {target.url}/v1/models answered HTTP {response.status_code}; give the "
                "base URL of an OpenAI-compatible API (the part before /v1)."
            ),
        )
    if not body.complete:
        return (
            None,
            "base_url",
            (
                f"GET /v1/models answered a model list larger than {MODEL_LIST_MAX_BYTES // 1024} "
                "KiB; give an endpoint that serves fewer models."
            ),
        )
    try:
        listed = json.loads(body.content)["data"]
        ids = [str(model["id"]) for model in listed]
    except (ValueError, KeyError, TypeError):
        return None, "base_url", "GET /v1/models did not answer an OpenAI model list."
    return ids, "", ""


def _price_problems(prices: dict[str, Decimal | None]) -> dict[str, list[str]]:
    hourly = prices["price_usd_per_hour"] is not None
    per_input = prices["price_usd_per_1m_input_tokens"] is not None
    per_output = prices["price_usd_per_1m_output_tokens"] is not None
    if hourly and (per_input or per_output):
        return {"price_usd_per_hour": ["Price the endpoint per hour or per token, not both."]}
    if per_input != per_output:
        missing = "price_usd_per_1m_output_tokens" if per_input else "price_usd_per_1m_input_tokens"
        return {missing: ["A per-token price needs both the input and the output price."]}
    return {}


def _audited(endpoint: Endpoint) -> dict:
    # Never the key, not even its fingerprint's ciphertext: the name, where, and the price.
    return {
        "name": endpoint.name,
        "base_url": endpoint.base_url,
        "served_model_name": endpoint.served_model_name,
        "api_key": bool(endpoint.encrypted_api_key),
        **endpoint.price_snapshot(),
    }


PRICE_FIELDS = (
    "price_usd_per_hour",
    "price_usd_per_1m_input_tokens",
    "price_usd_per_1m_output_tokens",
)


def _checked(
    *,
    org: Organization,
    name: str,
    base_url: str,
    served_model_name: str,
    api_key: str,
    prices: dict[str, Decimal | None],
    ask: bool,
    other_than: Endpoint | None = None,
) -> None:
    """Raises ``DomainValidationError`` on the fields at fault (see the module docstring);
    ``ask``: then asks the endpoint whether it serves the model with the key."""
    errors: dict[str, list[str]] = {}
    longest = Endpoint._meta.get_field("name").max_length
    if not name or len(name) > longest:
        errors["name"] = [f"Give a name of 1 to {longest} characters."]
    else:
        same_name = Endpoint.objects.filter(organization=org, name=name)
        if other_than is not None:
            same_name = same_name.exclude(pk=other_than.pk)
        if same_name.exists():
            errors["name"] = [_NAME_TAKEN]
    if not served_model_name:
        errors["served_model_name"] = ["Give the model name the endpoint serves."]
    if api_key and not _API_KEY.fullmatch(api_key):
        errors["api_key"] = ["An API key is 1 to 500 printable characters without spaces."]
    errors.update(_price_problems(prices))
    try:
        target = endpoint_target(base_url)
    except OutboundRefused as refused:
        errors["base_url"] = [str(refused)]
    if errors:
        raise DomainValidationError(errors)
    if not ask:
        return
    # Only the address just checked is ever asked; then, whether it serves the model.
    served, field, problem = _served_models(target, api_key)
    if served is None:
        raise DomainValidationError.single(field, problem)
    if served_model_name not in served:
        listed = ", ".join(served[:10]) or "nothing"
        raise DomainValidationError.single(
            "served_model_name",
            f"The endpoint does not serve {served_model_name!r}; it lists {listed}.",
        )


def _key_fields(api_key: str) -> dict[str, str]:
    return {
        "encrypted_api_key": encrypt_secret(api_key) if api_key else "",
        "api_key_fingerprint": api_key[-4:] if api_key else "",
    }


def endpoint_create(
    *,
    org: Organization,
    actor: Actor,
    name: str,
    base_url: str,
    served_model_name: str,
    api_key: str = "",
    price_usd_per_hour: Decimal | None = None,
    price_usd_per_1m_input_tokens: Decimal | None = None,
    price_usd_per_1m_output_tokens: Decimal | None = None,
) -> Endpoint:
    """A new endpoint, checked (see the module docstring); nothing is saved when it fails."""
    name, served_model_name = name.strip(), served_model_name.strip()
    base_url = endpoint_base_url(base_url)
    prices = {
        "price_usd_per_hour": price_usd_per_hour,
        "price_usd_per_1m_input_tokens": price_usd_per_1m_input_tokens,
        "price_usd_per_1m_output_tokens": price_usd_per_1m_output_tokens,
    }
    _checked(
        org=org,
        name=name,
        base_url=base_url,
        served_model_name=served_model_name,
        api_key=api_key,
        prices=prices,
        ask=True,
    )
    endpoint = Endpoint(
        organization=org,
        name=name,
        base_url=base_url,
        served_model_name=served_model_name,
        created_by=actor.user,
        **_key_fields(api_key),
        **prices,
    )
    try:
        with transaction.atomic():
            endpoint.save()
            audit_record(
                org=org,
                actor=actor,
                event="endpoint.create",
                target=endpoint,
                after=_audited(endpoint),
            )
    except IntegrityError:  # another request took the name a moment ago
        raise DomainValidationError.single("name", _NAME_TAKEN) from None
    logger.info("endpoint %s added for %s", endpoint.id, org.slug)
    return endpoint


def _origin(url: str) -> tuple[str, str, int | None] | None:
    """Where a URL's requests go: scheme, host and port (None: not a URL)."""
    try:
        parts = urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError:
        return None
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


def endpoint_update(*, endpoint: Endpoint, actor: Actor, **changes) -> Endpoint:
    """The endpoint with ``changes`` (any of ``endpoint_create``'s fields) made, checked by
    the same rules (see the module docstring); nothing is saved when one is refused."""
    name = changes.get("name", endpoint.name).strip()
    base_url = endpoint_base_url(changes.get("base_url", endpoint.base_url))
    served_model_name = changes.get("served_model_name", endpoint.served_model_name).strip()
    new_key = "api_key" in changes
    # The stored key was given for one host: whoever moves the endpoint elsewhere gives it
    # again, or could send it to a host of their choosing.
    moved = _origin(base_url) != _origin(endpoint.base_url)
    if moved and endpoint.encrypted_api_key and not new_key:
        raise DomainValidationError.single(
            "api_key",
            "The base URL names another host (scheme, name or port): give the API key again "
            "with it, or an empty key to send none.",
        )
    api_key = changes["api_key"] if new_key else endpoint_api_key_for_run(endpoint) or ""
    prices = {field: getattr(endpoint, field) for field in PRICE_FIELDS}
    if any(field in changes for field in PRICE_FIELDS):
        prices = {field: changes.get(field) for field in PRICE_FIELDS}
    reached_otherwise = (base_url, served_model_name) != (
        endpoint.base_url,
        endpoint.served_model_name,
    )
    _checked(
        org=endpoint.organization,
        name=name,
        base_url=base_url,
        served_model_name=served_model_name,
        api_key=api_key,
        prices=prices,
        ask=new_key or reached_otherwise,
        other_than=endpoint,
    )
    before = _audited(endpoint)
    endpoint.name, endpoint.base_url = name, base_url
    endpoint.served_model_name = served_model_name
    for field, value in prices.items():
        setattr(endpoint, field, value)
    if new_key:
        for field, value in _key_fields(api_key).items():
            setattr(endpoint, field, value)
    try:
        with transaction.atomic():
            endpoint.save()
            audit_record(
                org=endpoint.organization,
                actor=actor,
                event="endpoint.update",
                target=endpoint,
                before=before,
                after=_audited(endpoint),
            )
    except IntegrityError:  # another request took the name a moment ago
        raise DomainValidationError.single("name", _NAME_TAKEN) from None
    logger.info("endpoint %s changed", endpoint.id)
    return endpoint


def endpoint_delete(*, endpoint: Endpoint, actor: Actor) -> None:
    """Removes the endpoint; ``Conflict`` while an experiment names it."""
    if endpoint.experiments.exists():
        raise Conflict("Experiments name this endpoint; delete them or change their engine first.")
    with transaction.atomic():
        audit_record(
            org=endpoint.organization,
            actor=actor,
            event="endpoint.delete",
            target=endpoint,
            before=_audited(endpoint),
        )
        endpoint.delete()


def endpoint_api_key_for_run(endpoint: Endpoint) -> str | None:
    """The endpoint's key in clear, for the agent's environment only (None: it takes none)."""
    return decrypt_secret(endpoint.encrypted_api_key) if endpoint.encrypted_api_key else None
