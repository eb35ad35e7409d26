"""A model's config.json read from the Hugging Face hub with its organization's token.

Guarantees:

- ``hf_config_fetch`` reads only ``config.json`` of ``hf_repo`` at ``revision``, at most
  ``MAX_HF_CONFIG_BYTES`` (its size is asked before it is downloaded), from
  ``BENCHSITE_HF_ENDPOINT`` (empty: huggingface_hub's own), with the organization's Hugging
  Face token when it has one and with no token otherwise (never one the site's machine
  holds). It writes nothing: the download goes to a temporary folder, removed before it
  returns.
- A refusal is a ``DomainValidationError`` naming the field to change: ``hf_repo`` (not a
  repo id; missing, private or gated where the token cannot read it; no config.json),
  ``revision`` (unknown), ``hf_config`` (not a JSON object, too large), and
  ``hf_config_from_hub`` (the hub cannot be reached, or answered an error). Its messages
  never hold the token, and nothing here logs it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from django.conf import settings
from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from agents.protocol import hf_repo_problem, revision_problem
from runs.errors import DomainValidationError
from runs.model_config import MAX_HF_CONFIG_BYTES, hf_config_from_text
from runs.models import CredentialProvider, Organization
from runs.providers.base import PermanentProviderError
from runs.services.credentials import provider_key_for_run

HF_CONFIG_FROM_HUB_FIELD = "hf_config_from_hub"
CONFIG_FILE = "config.json"
# Seconds for each answer of the hub: a page waits on it.
_HUB_TIMEOUT = 10.0


def hf_config_fetch(*, org: Organization, hf_repo: str, revision: str) -> dict:
    """The config.json of ``hf_repo`` at ``revision``; see the module's guarantees."""
    for field, problem in (
        ("hf_repo", hf_repo_problem(hf_repo)),
        ("revision", revision_problem(revision)),
    ):
        if problem:
            raise DomainValidationError.single(field, problem)
    try:
        token = provider_key_for_run(org, CredentialProvider.HUGGINGFACE)
    except PermanentProviderError as exc:  # a token saved under another encryption key
        raise DomainValidationError.single(HF_CONFIG_FROM_HUB_FIELD, str(exc)) from None
    endpoint = settings.BENCHSITE_HF_ENDPOINT or None
    # False, not None: huggingface_hub would otherwise send a token of the site's machine.
    credential = token or False
    try:
        url = hf_hub_url(hf_repo, CONFIG_FILE, revision=revision, endpoint=endpoint)
        size = get_hf_file_metadata(url, token=credential, timeout=_HUB_TIMEOUT).size
        if size is not None and size > MAX_HF_CONFIG_BYTES:
            raise DomainValidationError.single(
                "hf_config",
                f"{hf_repo}'s {CONFIG_FILE} is {size // 1024} KiB; a config.json is at most "
                f"{MAX_HF_CONFIG_BYTES // 1024} KiB.",
            )
        with tempfile.TemporaryDirectory(prefix="benchsite-hf-config-") as folder:
            path = hf_hub_download(
                hf_repo,
                CONFIG_FILE,
                revision=revision,
                cache_dir=folder,
                token=credential,
                endpoint=endpoint,
                etag_timeout=_HUB_TIMEOUT,
            )
            raw = Path(path).read_bytes()[: MAX_HF_CONFIG_BYTES + 1]
    except DomainValidationError:
        raise
    except Exception as exc:  # the hub's errors, and the transport's (they differ by version)
        raise _refusal(exc, hf_repo=hf_repo, revision=revision, token=token) from None
    return hf_config_from_text(raw)


def _refusal(
    exc: Exception, *, hf_repo: str, revision: str, token: str | None
) -> DomainValidationError:
    """A hub error as the field to change and why; built from the error's kind and HTTP
    status only, never from its text."""
    status = getattr(getattr(exc, "response", None), "status_code", None)
    whose = "the organization's Hugging Face token" if token else "no Hugging Face token"
    if isinstance(exc, GatedRepoError):
        reason = (
            "the organization's Hugging Face token has no access to it: accept its terms on "
            "the hub with the token's account"
            if token
            else "the organization has no Hugging Face token: set one in its settings"
        )
        return DomainValidationError.single("hf_repo", f"{hf_repo} is gated and {reason}.")
    if isinstance(exc, RevisionNotFoundError):
        return DomainValidationError.single(
            "revision", f"{hf_repo} has no revision {revision!r} on the hub."
        )
    if isinstance(exc, RepositoryNotFoundError | HFValidationError) or (
        isinstance(exc, HfHubHTTPError) and status in (401, 403)
    ):
        return DomainValidationError.single(
            "hf_repo",
            f"{hf_repo} does not exist on the hub, or is private and cannot be read with {whose}.",
        )
    if isinstance(exc, RemoteEntryNotFoundError):
        return DomainValidationError.single(
            "hf_repo", f"{hf_repo} has no {CONFIG_FILE} at revision {revision!r}."
        )
    if isinstance(exc, HfHubHTTPError) and status is not None:
        problem = f"the hub answered HTTP {status}"
    else:  # no answer: a connection error, a timeout, or the hub turned off (HF_HUB_OFFLINE)
        problem = f"the hub cannot be reached ({type(exc).__name__})"
    return DomainValidationError.single(
        HF_CONFIG_FROM_HUB_FIELD,
        f"{CONFIG_FILE} of {hf_repo} could not be read: {problem}. Try again, or paste the "
        "config.json instead.",
    )
