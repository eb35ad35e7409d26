"""Cold starts end to end: one run's waterfall, and every run's by (GPU type, image).

Guarantees:
- A run's cold start is read from what was observed, never estimated: the pod requested (the
  create sent, ``Run.pod_started_at``), the pod running (first seen so by the provider,
  ``Run.pod_running_at``), the container up (the agent's first message received), the agent
  ready (its first trial started, ``Run.started_at``), the weights fetched (the agent's
  ``weights_downloaded`` duration, ``Run.weights_fetch``), then the first trial's engine
  phases (seconds since vLLM's process started). A moment that was not observed is left
  out, and the chain goes on from the last one that was.
- ``cold_start_report`` groups an organization's runs by the GPU type their pod got and their
  image tag, with the median and p90 (linear interpolation) of each span over the runs that
  observed it; simulated runs are grouped apart (their engine phases are the simulator's).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import numpy as np
from django.db.models import JSONField, Min, OuterRef, Subquery
from django.db.models.fields.json import KT

from runs.models import AgentMessageRecord, Organization, Run, Trial
from runs.run_as_started import GPU_TYPE_PATH, IMAGE_TAG_PATH, SIMULATED_RUNS

# The engine phase a deployment waits for: the first token (else the health check).
_READY_PHASES = ("first_token", "health_ready")


@dataclass(frozen=True)
class WaterfallStep:
    """One span of a cold start: ``start`` and ``seconds`` after the pod was requested."""

    label: str
    start: float
    seconds: float
    note: str = ""


def _since(moment: datetime.datetime | None, origin: datetime.datetime) -> float | None:
    return None if moment is None else max((moment - origin).total_seconds(), 0.0)


def _weights_note(fetch: dict) -> str:
    if fetch.get("cached"):
        return "found in the weights cache"
    size, rate = fetch.get("bytes"), fetch.get("mb_per_s")
    parts = [f"{size / 1e9:.2f} GB" if isinstance(size, (int, float)) else ""]
    parts.append(f"at {rate:g} MB/s" if isinstance(rate, (int, float)) else "")
    return " ".join(part for part in parts if part)


def _engine_phases(cold_start: dict) -> list[tuple[str, float]]:
    phases = [
        (name, float(seconds))
        for name, seconds in (cold_start or {}).items()
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
    ]
    return sorted(phases, key=lambda item: item[1])


def cold_start_waterfall(
    *,
    requested: datetime.datetime | None,
    running: datetime.datetime | None,
    container_up: datetime.datetime | None,
    agent_ready: datetime.datetime | None,
    weights_fetch: dict,
    engine_phases: dict,
) -> list[WaterfallStep]:
    """The spans of one cold start in order (see the module docstring); empty before the pod
    was requested."""
    if requested is None:
        return []
    steps: list[WaterfallStep] = []
    at = 0.0
    for label, moment in (
        ("Pod requested → running (provider)", running),
        ("Container up (the agent's first message)", container_up),
        ("Agent ready (its first trial starts)", agent_ready),
    ):
        point = _since(moment, requested)
        if point is not None and point >= at:
            steps.append(WaterfallStep(label, at, point - at))
            at = point
    download = weights_fetch.get("seconds")
    if isinstance(download, (int, float)):
        steps.append(
            WaterfallStep("Weights downloaded", at, float(download), _weights_note(weights_fetch))
        )
        at += float(download)
    previous = 0.0
    for name, seconds in _engine_phases(engine_phases):
        steps.append(
            WaterfallStep(f"vLLM: {name.replace('_', ' ')}", at + previous, seconds - previous)
        )
        previous = seconds
    return steps


def run_cold_start(run: Run) -> list[WaterfallStep]:
    """The waterfall of ``run`` (reached through ``runs.access``): its pod, its agent, its
    weights and its first trial's engine."""
    hello = (
        AgentMessageRecord.objects.filter(organization_id=run.organization_id, run=run)
        .filter(type="hello")
        .aggregate(at=Min("received_at"))["at"]
    )
    first = (
        Trial.objects.filter(organization_id=run.organization_id, run=run)
        .exclude(cold_start={})
        .order_by("index")
        .values_list("cold_start", flat=True)
        .first()
    )
    return cold_start_waterfall(
        requested=run.pod_started_at,
        running=run.pod_running_at,
        container_up=hello,
        agent_ready=run.started_at,
        weights_fetch=run.weights_fetch or {},
        engine_phases=first or {},
    )


@dataclass(frozen=True)
class SpanFigures:
    """One span over a group's runs: how many observed it, its median and p90 (seconds)."""

    runs: int
    median: float | None
    p90: float | None


@dataclass(frozen=True)
class ColdStartGroup:
    gpu_type: str
    image_tag: str
    simulated: bool
    runs: int
    spans: dict[str, SpanFigures]


# The spans of the report, in the order of a cold start (each from the pod request).
REPORT_SPANS = (
    "Pod running",
    "Container up",
    "Agent ready",
    "Weights download",
    "vLLM ready",
    "First token",
)


def _figures(values: list[float]) -> SpanFigures:
    if not values:
        return SpanFigures(0, None, None)
    median, p90 = np.percentile(values, [50, 90])
    return SpanFigures(len(values), round(float(median), 1), round(float(p90), 1))


def _run_spans(row: dict) -> dict[str, float]:
    """One run's spans, each in seconds from its pod request (the weights: their own
    duration), as far as they were observed."""
    requested = row["pod_started_at"]
    spans: dict[str, float] = {}
    for name, moment in (
        ("Pod running", row["pod_running_at"]),
        ("Container up", row["hello_at"]),
        ("Agent ready", row["started_at"]),
    ):
        point = _since(moment, requested)
        if point is not None:
            spans[name] = point
    fetch = row["weights_fetch"] or {}
    download = fetch.get("seconds") if not fetch.get("cached") else None
    if isinstance(download, (int, float)):
        spans["Weights download"] = float(download)
    ready = spans.get("Agent ready")
    phases = dict(_engine_phases(row["first_cold_start"] or {}))
    engine_start = None if ready is None else ready + float(fetch.get("seconds") or 0.0)
    if engine_start is not None and "health_ready" in phases:
        spans["vLLM ready"] = engine_start + phases["health_ready"]
    token = next((phases[name] for name in _READY_PHASES if name in phases), None)
    if engine_start is not None and token is not None:
        spans["First token"] = engine_start + token
    return spans


def cold_start_report(*, org: Organization) -> list[ColdStartGroup]:
    """Every run of ``org`` that rented a pod, grouped by (GPU type, image tag, simulated),
    measured groups first, each by its GPU type and tag."""
    hello = (
        AgentMessageRecord.objects.filter(organization=org, run=OuterRef("pk"), type="hello")
        .order_by("received_at")
        .values("received_at")[:1]
    )
    first_trial = (
        Trial.objects.filter(organization=org, run=OuterRef("pk"))
        .exclude(cold_start={})
        .order_by("index")
        .values("cold_start")[:1]
    )
    runs = (
        Run.objects.filter(organization=org, pod_started_at__isnull=False)
        .annotate(
            frozen_gpu=KT(GPU_TYPE_PATH),
            image_tag=KT(IMAGE_TAG_PATH),
            hello_at=Subquery(hello),
            first_cold_start=Subquery(first_trial, output_field=JSONField()),
        )
        .order_by()
    )
    simulated_ids = set(runs.filter(SIMULATED_RUNS).values_list("id", flat=True))
    groups: dict[tuple[str, str, bool], list[dict[str, float]]] = {}
    for row in runs.values(
        "id",
        "pod_gpu_type",
        "frozen_gpu",
        "image_tag",
        "pod_started_at",
        "pod_running_at",
        "hello_at",
        "started_at",
        "weights_fetch",
        "first_cold_start",
    ):
        key = (
            row["pod_gpu_type"] or row["frozen_gpu"] or "",
            row["image_tag"] or "latest",
            row["id"] in simulated_ids,
        )
        groups.setdefault(key, []).append(_run_spans(row))
    report = [
        ColdStartGroup(
            gpu_type=gpu,
            image_tag=tag,
            simulated=simulated,
            runs=len(spans),
            spans={
                name: _figures([run[name] for run in spans if name in run]) for name in REPORT_SPANS
            },
        )
        for (gpu, tag, simulated), spans in groups.items()
    ]
    return sorted(report, key=lambda g: (g.simulated, g.gpu_type, g.image_tag))
