"""Which provider serves a run, holding which organization's key.

Guarantees: a simulated experiment and one of an existing endpoint always run on the local
provider (they need no GPU: the agent runs on a worker host); a vLLM experiment runs where
``BENCHSITE_PROVIDER`` says (``runpod`` unless configured otherwise); a Runpod provider is
built with the run's own organization's key and no other.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from django.conf import settings

from runs.models import Organization
from runs.providers.base import PermanentProviderError, Provider
from runs.providers.local import LocalProvider, default_agent_command


def local_provider() -> LocalProvider:
    """The local provider of this installation (its pods' records under MEDIA_ROOT)."""
    configured = getattr(settings, "BENCHSITE_LOCAL_PODS_DIR", "")
    state_dir = Path(configured) if configured else Path(settings.MEDIA_ROOT) / "pods"
    command = getattr(settings, "BENCHSITE_LOCAL_AGENT_COMMAND", "")
    return LocalProvider(
        state_dir,
        agent_command=shlex.split(command) if command else default_agent_command(),
        extra_env=dict(getattr(settings, "BENCHSITE_LOCAL_AGENT_ENV", {})),
        # An agent that was asked to stop may deliver what it holds for as long as the site
        # still takes it (runs.services.run_tokens).
        delivery_grace=float(getattr(settings, "BENCHSITE_AGENT_DELIVERY_GRACE_SECONDS", 0)),
    )


def provider_for(*, org: Organization, name: str) -> Provider:
    """The provider ``name`` acting for ``org``; raises ``PermanentProviderError`` when the
    organization has no key for it."""
    if name == "local":
        return local_provider()
    if name == "runpod":
        from runs.providers.runpod import RunpodProvider
        from runs.services.credentials import provider_key_for_run

        key = provider_key_for_run(org)
        if not key:
            raise PermanentProviderError(
                "The organization has no Runpod API key; an owner or admin can set one."
            )
        return RunpodProvider(key)
    raise PermanentProviderError(f"unknown provider {name!r}")


def catalogue_price_provider():
    """The provider the GPU price catalogue is refreshed from: Runpod with the operator's own
    key (``BENCHSITE_RUNPOD_PRICE_KEY``), never an organization's; None when none is set."""
    key = getattr(settings, "BENCHSITE_RUNPOD_PRICE_KEY", "")
    if not key:
        return None
    from runs.providers.runpod import RunpodProvider

    return RunpodProvider(key)
