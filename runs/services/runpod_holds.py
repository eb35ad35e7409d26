"""Which runs hold a Runpod pod the site has not released: the pods an organization's Runpod
key must stay for, because only that key can find and terminate them.

Guarantee: a run holds its pod from the create that may rent it (``pod_started_at`` is
written before each create) until the pod's termination is recorded (``pod_terminated_at``),
in whatever state the run is meanwhile: queued for a retry, benchmarking, or ended with its
release still to come.
"""

from __future__ import annotations

from django.db.models import Q, QuerySet
from django.db.models.fields.json import KT

from runs.models import Run
from runs.models.experiments import Engine
from runs.models.runs import TERMINAL_RUN_STATES
from runs.providers.names import provider_name_for
from runs.run_as_started import ENGINE_KIND_PATH


def runs_holding_runpod_pods() -> QuerySet[Run]:
    """Every organization's runs that hold an unreleased Runpod pod (callers filter by
    organization)."""
    recorded = Q(provider="runpod", pod_terminated_at__isnull=True) & ~Q(pod_id="")
    holding = recorded
    if provider_name_for(engine=Engine.VLLM) == "runpod":
        # A create sent but its pod not recorded yet (in flight, or its worker died): the
        # pod may exist, and only a look-up by name with this key finds it.
        renting = Q(pod_id="", pod_started_at__isnull=False, engine_kind=Engine.VLLM) & ~Q(
            state__in=TERMINAL_RUN_STATES
        )
        holding |= renting
    return Run.objects.annotate(engine_kind=KT(ENGINE_KIND_PATH)).filter(holding)
