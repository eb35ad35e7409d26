"""``bench`` against Benchsite's simulator (``serve-sim``): figures in the modelled GPU's
time, marked simulated.

The simulator at ``--speed S`` runs S times faster than the GPU it models and says so at
``/version`` (``{"simulated": true, "speed": S}``). Guarantees: ``simulator_speed`` finds S
there, and None for any other server (vLLM answers ``/version`` without ``simulated``; an API
that has no such route, or does not answer it, is not the simulator); ``config_in_wall_time``
is the benchmark the sped-up client must run to apply the asked-for load in the modelled
time (open-loop rates, a rate search's bound, a level's duration and ramp in wall time; the
SLOs judged against targets S times shorter), as the agent's runner does for a simulated
trial (``agents.runner.simulated``), whose functions turn the results back.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.request

from agents.loadgen import BenchConfig, BenchFinished, CapacityFound, LevelFinished
from agents.loadgen.events import LevelStarted, RequestDone
from agents.loadgen.levels import typed_level_result
from agents.protocol import LevelResult
from agents.runner.simulated import (
    capacity_in_simulated_time,
    result_in_simulated_time,
    slos_for_speed,
)


def simulator_speed(base_url: str, *, timeout: float = 5.0) -> float | None:
    """S when ``base_url`` is Benchsite's simulator at ``--speed S``; None for any other."""
    # No proxy: the server is the one the benchmark reaches directly.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{base_url.rstrip('/')}/version", timeout=timeout) as response:
            version = json.loads(response.read(65536))
    except (OSError, ValueError):
        return None
    if not (isinstance(version, dict) and version.get("simulated") is True):
        return None
    speed = version.get("speed")
    return float(speed) if isinstance(speed, int | float) and speed > 0 else None


def config_in_wall_time(config: BenchConfig, speed: float) -> BenchConfig:
    """``config`` (its loads and times in the modelled GPU's time) as the sped-up client runs
    it: concurrencies stay, everything per second is S times more, every span S times less."""
    levels = tuple(
        {"request_rate": level["request_rate"] * speed}
        if isinstance(level.get("request_rate"), int | float)
        else level
        for level in config.levels
    )
    capacity = config.capacity
    if capacity is not None and capacity.axis == "request_rate" and capacity.max_load:
        capacity = capacity.model_copy(update={"max_load": capacity.max_load * speed})
    return dataclasses.replace(
        config,
        levels=levels,
        capacity=capacity,
        slos=None if config.slos is None else slos_for_speed(config.slos, speed),
        duration=None if config.duration is None else config.duration / speed,
        ramp_up_seconds=config.ramp_up_seconds / speed,
    )


def event_in_simulated_time(event, speed: float):
    """A benchmark's event with its figures in the modelled GPU's time, labelled (a level's
    result and a capacity search's carry ``simulated``; a request's elapsed time is S
    times, so its live tok/s is the modelled GPU's)."""
    if isinstance(event, LevelStarted):
        level = event.level
        if isinstance(level.get("request_rate"), int | float):
            level = {**level, "request_rate": level["request_rate"] / speed}
        duration = None if event.duration is None else event.duration * speed
        return dataclasses.replace(event, level=level, duration=duration)
    if isinstance(event, RequestDone):
        return dataclasses.replace(event, elapsed=event.elapsed * speed)
    if isinstance(event, LevelFinished):
        figures = result_in_simulated_time(
            event.result.model_dump() | {"server": event.server}, speed
        )
        result, server = typed_level_result(figures)
        return dataclasses.replace(event, result=result, server=server)
    if isinstance(event, CapacityFound):
        return CapacityFound(_capacity(event.result, speed))
    if isinstance(event, BenchFinished):
        return dataclasses.replace(
            event,
            levels=[
                LevelResult.model_validate(result_in_simulated_time(level.model_dump(), speed))
                for level in event.levels
            ],
            capacity=None if event.capacity is None else _capacity(event.capacity, speed),
        )
    return event


def _capacity(capacity: dict, speed: float) -> dict:
    return capacity_in_simulated_time(capacity, speed) | {"simulated": {"speed": speed}}
