"""A trial's load levels and serve configuration as the run pages show them: the live run
page and the comparison read a measurement, name its level and label its config here.

Guarantees:
- a measurement's figures are read from its result as the protocol's ``LevelResult``
  (``runs.selectors.level_results``): a result stored before the result was typed, or one
  with a figure of another shape, shows that figure as absent, never fails the page;
- a simulated level always says so (``simulated``), so no page ranks it against a measured
  one;
- a level's name (``c=8``, ``rate=2.5``, ``rate=inf``) is made and ordered here only;
- a level's headline figures are its steady window's (``window``: where it lay, how many
  requests it held); the figures over every request of the level (``whole_level``, as
  ``vllm bench serve`` computes them) come beside them, never in their place; a capacity
  search's levels say so (``probe``, ``repeat``);
- protocol 6's figures come as sent, None where a level has none (an older agent's, a
  closed-loop level's, a level of another dataset): an open-loop level's ``send_lateness``,
  a trace level's ``replay`` and a chat-session level's ``turns``; protocol 7's ``gpus``
  (each GPU's NVML mean and max over the level) likewise.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pydantic

from agents import protocol
from agents.protocol import VERDICT_WORDS, check_verdict, combined_verdict, load_verdict
from figures.levels import level_name
from runs.models import Measurement
from runs.selectors.level_results import stored_level_result

LOWER, HIGHER = "lower", "higher"


@dataclass(frozen=True)
class Metric:
    """A figure of a load level: how it is read from the result and which way is better."""

    key: str
    label: str
    read: Callable[[protocol.LevelResult], float | None]
    better: str
    unit: str


METRICS = (
    Metric("ttft_p50", "TTFT p50", lambda result: result.median_ttft_ms, LOWER, "ms"),
    Metric("ttft_p99", "TTFT p99", lambda result: result.p99_ttft_ms, LOWER, "ms"),
    Metric("itl_p50", "ITL p50", lambda result: result.median_itl_ms, LOWER, "ms"),
    Metric("itl_p99", "ITL p99", lambda result: result.p99_itl_ms, LOWER, "ms"),
    Metric("tpot_p50", "TPOT p50", lambda result: result.median_tpot_ms, LOWER, "ms"),
    Metric("tpot_p99", "TPOT p99", lambda result: result.p99_tpot_ms, LOWER, "ms"),
    Metric(
        "output_throughput",
        "Output tokens/s",
        lambda result: result.output_throughput,
        HIGHER,
        "tok/s",
    ),
)


def number(value: Any) -> float | None:
    """``value`` as a float when it is a number (not a bool), else None."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _gauge(server: dict, name: str, part: str = "max") -> float | None:
    entry = server.get(name)
    return number(entry.get(part)) if isinstance(entry, dict) else None


def level_key(measurement: Measurement) -> str:
    """``c=8``, ``rate=2.5`` or ``rate=inf``: how the page names (and dedupes) a level
    (``figures.levels.level_name``)."""
    return level_name(
        concurrency=measurement.concurrency,
        request_rate=measurement.request_rate,
        infinite=measurement.request_rate_infinite,
    )


def level_sort_key(key: str) -> tuple:
    """Closed-loop levels first by concurrency, then request rates (inf last)."""
    kind, _, value = key.partition("=")
    load = float("inf") if value == "inf" else float(value)
    return (0 if kind == "c" else 1, load)


def _figures(figures: protocol.LevelFigures) -> dict:
    row = {"completed": figures.completed, "failed": figures.failed}
    for metric in METRICS:
        row[metric.key] = number(metric.read(figures))
    return row


def _window(window: protocol.SteadyWindow | None) -> dict | None:
    if window is None:
        return None
    return {
        "start_s": window.start_s,
        "end_s": window.end_s,
        "requests": window.requests,
        "ramp_requests": window.ramp_requests,
        "drain_requests": window.drain_requests,
    }


def _slo_checks(result: protocol.LevelResult) -> list[dict]:
    """Each objective the agent judged the level by, with its verdict at the SLOs'
    confidence: ``ttft p99 612 ms > 500 ms: 9 of 300 beyond, missed``."""
    checks = []
    for name, check in (result.slo or {}).items():
        verdict = check_verdict(check.model_dump())
        value = check.value if check.value is not None else check.p99
        if name == "attainment":
            text = f"attainment {value:g}% (≥ {check.target:g}%)" if value is not None else ""
        else:
            metric = name.removesuffix("_ms")
            percentile = check.percentile or 99
            shown = f"{value:.1f} ms" if value is not None else "?"
            within = value is not None and value <= check.target
            text = f"{metric} p{percentile} {shown} ({'≤' if within else '>'} {check.target:g} ms)"
        if check.judged is not None:
            text += f": {check.beyond} of {check.judged} beyond, {VERDICT_WORDS[verdict]}"
        checks.append({"name": name, "met": verdict == "met", "verdict": verdict, "text": text})
    return checks


def level_row(measurement: Measurement) -> dict:
    """One measurement as the pages show it: the level, every ``METRICS`` figure (of its
    steady window), how many requests completed or failed, the server's KV-cache and queue
    peaks, prefix-cache hit rate and speculative acceptance rate, the labels, the window and
    the whole level's figures, the SLO checks."""
    result, server = stored_level_result(measurement.result), measurement.server_metrics or {}
    checks = _slo_checks(result)
    row = {
        "key": level_key(measurement),
        "concurrency": measurement.concurrency,
        "request_rate": "inf" if measurement.request_rate_infinite else measurement.request_rate,
        "completed": result.completed,
        "failed": result.failed,
        "partial": bool(result.partial),
        "simulated": result.simulated is not None,
        "kv_cache_max": _gauge(server, "kv_cache_usage_perc"),
        "waiting_max": _gauge(server, "num_requests_waiting"),
        "preemptions": number(server.get("num_preemptions")),
        # Share of the prompt tokens looked up in the server's prefix cache that it held,
        # over the whole level (None: the server reported no lookups, or no such counter).
        "prefix_cache_hit_rate": number(server.get("prefix_cache_hit_rate")),
        # Share of the speculatively proposed tokens the model accepted over the whole level,
        # and tokens per draft step (None: no speculative decoding, or the simulator).
        "spec_decode_acceptance_rate": number(server.get("spec_decode_acceptance_rate")),
        "spec_decode_mean_acceptance_length": number(
            server.get("spec_decode_mean_acceptance_length")
        ),
        "probe": bool(result.probe),
        "repeat": result.repeat or 0,
        "window": _window(result.window),
        "whole_level": _figures(result.whole_level) if result.whole_level else None,
        "output_throughput_ci95": _interval(result, "output_throughput"),
        "slo": checks,
        "slo_met": all(check["met"] for check in checks) if checks else None,
        "slo_verdict": combined_verdict(check["verdict"] for check in checks),
        "extension": result.extension or 0,
        "send_lateness": _every_field(result.send_lateness),
        "replay": _every_field(result.replay),
        "turns": [_every_field(turn) for turn in result.turns or ()] or None,
        # Requests of the level sent to each LoRA adapter (None: the run served none).
        "lora_requests": dict(result.lora_requests) if result.lora_requests else None,
        "gpus": _gpus(measurement.gpus),
    }
    for metric in METRICS:
        row[metric.key] = number(metric.read(result))
    return row


def level_rows(measurements: Iterable[Measurement]) -> list[dict]:
    """Each measurement's ``level_row``, in order; a load measured several times (repeats,
    a search's probes, a level too close to call measured again) shows on each of its rows
    the verdict of all its measurements pooled (``load_verdict``), as the capacity search
    and the answer judge it, and how many windows were pooled."""
    measured = list(measurements)
    rows = [level_row(measurement) for measurement in measured]
    by_load: dict[str, list[dict]] = defaultdict(list)
    for measurement, row in zip(measured, rows, strict=True):
        by_load[row["key"]].append(measurement.result)
    for row in rows:
        results = by_load[row["key"]]
        if len(results) > 1 and row["slo_verdict"] is not None:
            row["slo_verdict"] = load_verdict(results)
            row["slo_met"] = row["slo_verdict"] == "met"
            row["windows"] = len(results)
    return rows


def _gpus(stored: object) -> list[dict] | None:
    """Each GPU's telemetry over the level (None: none was sent); a stored entry the protocol
    no longer reads is left out, never fails the page."""
    gpus = []
    for entry in stored if isinstance(stored, list) else ():
        try:
            gpus.append(protocol.GpuLevelFigures.model_validate(entry))
        except pydantic.ValidationError:
            continue
    return [gpu.model_dump(mode="json") for gpu in gpus] or None


def _every_field(part: protocol.StrictModel | None) -> dict | None:
    """A part of a result with every field it has, None where it was not sent: a page reads
    each figure by name, present or not."""
    return None if part is None else {name: getattr(part, name) for name in type(part).model_fields}


def _interval(result: protocol.LevelResult, name: str) -> list[float] | None:
    bounds = (result.ci95 or {}).get(name)
    return None if bounds is None else [bounds.low, bounds.high]


def config_text(value: Any) -> str:
    """A serve flag's value as the pages print it (JSON, a string as it is)."""
    return json.dumps(value) if not isinstance(value, str) else value


def flags_in_order(configs: list[dict]) -> list[str]:
    """Every serve flag ``configs`` set: the protocol's in schema order, then others sorted."""
    names = {name for config in configs for name in config}
    ordered = [name for name in protocol.SERVE_FLAGS if name in names]
    return ordered + sorted(names - set(ordered))


def varying_flags(configs: list[dict]) -> list[str]:
    """The serve flags whose value differs between ``configs`` (in schema order)."""
    return [
        name
        for name in flags_in_order(configs)
        if len({config_text(config.get(name, "(default)")) for config in configs}) > 1
    ]


def planned_trial_labels(planned: list) -> dict[int, str]:
    """Each planned trial's label by index (``runs.experiment_spec.PlannedTrial``), by
    ``image_config_labels``'s rule."""
    return dict(enumerate(image_config_labels(planned)))


def image_config_labels(trials: list) -> list[str]:
    """The labels of trials of one run or several (anything with ``image_tag`` and
    ``serve_config``: ``Trial`` rows, planned trials), in order: the flags that tell their
    configurations apart, after the image when they ran on several
    (``v0.12.0 · max_num_seqs=64``). A trial without an image (the simulator's) names none
    and does not count as one, so a simulated column beside a measured one reads plainly."""
    flags = varying_flags([trial.serve_config or {} for trial in trials])
    several_images = len({trial.image_tag for trial in trials if trial.image_tag}) > 1
    return [
        (f"{trial.image_tag} · " if several_images and trial.image_tag else "")
        + config_label(trial.serve_config or {}, flags)
        for trial in trials
    ]


def config_label(config: dict, flags: list[str]) -> str:
    """``max_num_seqs=64, enable_prefix_caching=true``: the flags that tell configs apart."""
    shown = [
        f"{name}={config_text(config[name])}" if name in config else f"{name} at vLLM's default"
        for name in flags
    ]
    if shown:
        return ", ".join(shown)
    return ", ".join(f"{k}={config_text(v)}" for k, v in config.items()) or "vLLM defaults"
