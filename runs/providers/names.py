"""Which provider serves a run of each engine: a pure reading of the settings, so that the
estimate (a selector) knows it without the providers' services (``runs.providers.registry``
builds them)."""

from __future__ import annotations

from django.conf import settings


def provider_name_for(*, engine: str) -> str:
    """The provider of a run whose frozen engine is of kind ``engine``: a simulated run and
    one of an existing endpoint need no GPU and run on the local provider; a vLLM run runs
    where ``BENCHSITE_PROVIDER`` says (``runpod`` unless configured otherwise)."""
    if engine != "vllm":
        return "local"
    return getattr(settings, "BENCHSITE_PROVIDER", "runpod")
