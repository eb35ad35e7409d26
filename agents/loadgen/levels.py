"""What one level sends and how its result is read, whatever drives it: the live engine
(``agents.loadgen.driver``, over HTTP) or the simulator offline (``agents.predict``).

Guarantees:

- ``level_rngs``: a level's prompts and send times come from two generators seeded by the
  benchmark's seed, the level's key (``level_key``: its kind and load, never its display
  label) and how many times the level ran before, never its position: every driver and
  every trial sends the same traffic at a level.
- ``level_prompt_count``: how many prompts a level builds before its clock starts.
- ``replays``/``send_offsets``: an open-loop level of a trace sends the trace's requests,
  each once, at the trace's times scaled to the level's mean rate (no steady window: the
  trace's own shape is what is measured); an open-loop session level (chat or agentic)
  starts its sessions at gamma gaps or a session file's scaled start times, measured whole;
  any other open-loop level sends at gamma gaps, ramped when it is steady.
- ``level_wants_more``: the one rule for whether a level sends another request (its count,
  deadline and window), live and offline.
- ``fixed_levels``: each of the configuration's levels ``repeats`` times in a row;
  ``extension_due``: the one rule for measuring a level again while its SLO verdict is too
  close to call (up to ``max_extensions``), live and offline.
- ``steady_result``: a steady level's headline figures come from its window, with the whole
  level's beside them (``whole_level``); failures anywhere in the level count.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable

from agents.loadgen.agentic_prompts import AgenticPrompts
from agents.loadgen.arrivals import arrival_offsets
from agents.loadgen.confidence import confidence_intervals
from agents.loadgen.config import BenchConfig
from agents.loadgen.lora_spread import lora_requests
from agents.loadgen.prompts import TracePrompts
from agents.loadgen.records import RequestRecord
from agents.loadgen.results import level_result
from agents.loadgen.session_prompts import SessionPrompts
from agents.loadgen.stats import percentile
from agents.loadgen.steady import ClosedLoopWindow, OpenLoopWindow, ramped_offsets, split_window
from agents.protocol import LevelFigures, LevelResult, steady_window_requests
from agents.protocol.slo_verdicts import TOO_CLOSE, load_verdict

# In duration mode a level cycles through this many pre-built prompts at most.
DURATION_PROMPT_POOL = 2000
# The figures a steady level also reports over all of its requests (``whole_level``).
WHOLE_LEVEL_KEYS = tuple(LevelFigures.model_fields)


def level_load(level: dict) -> tuple[int | None, float | None]:
    """A level's (concurrency, request rate): one of them is None; rate ``"inf"`` is
    ``math.inf``."""
    concurrency = level.get("concurrency")
    if concurrency is not None:
        return concurrency, None
    rate = level["request_rate"]
    return None, math.inf if rate == "inf" else float(rate)


def level_key(level: dict) -> str:
    """A level's identity: what seeds its traffic (``level_rngs``) and counts its runs.
    Data, not presentation: these exact strings seeded every level measured so far, so a
    level's traffic stays that of its earlier runs; ``events.level_label`` is free to change."""
    if "concurrency" in level:
        return f"concurrency {level['concurrency']}"
    return f"rate {level['request_rate']} req/s"


def level_rngs(seed: int, key: str, repeat: int) -> tuple[random.Random, random.Random]:
    """The generators of a level's prompts and of its send times (two, so that neither
    shifts the other), from its ``level_key``. Sampling for a benchmark, not secrecy:
    seeded and reproducible."""
    prompts = random.Random(f"{seed}:{key}:{repeat}")  # noqa: S311
    arrivals = random.Random(f"{seed}:{key}:{repeat}:arrivals")  # noqa: S311
    return prompts, arrivals


def replays(config: BenchConfig, rate: float | None) -> bool:
    """Whether a level replays a trace at its times: an open-loop level of a trace."""
    return rate is not None and isinstance(config.source, TracePrompts)


def send_offsets(
    config: BenchConfig, rate: float, arrivals_rng: random.Random, *, steady: bool
) -> Iterable[float]:
    """When an open-loop level sends its requests (a session level: starts its sessions),
    in seconds from its start: a trace's or a session file's times scaled to ``rate`` (all
    of them, once), else endless gamma gaps (ramped up over ``ramp_up_seconds`` when the
    level is steady and the rate finite)."""
    if isinstance(config.source, TracePrompts):
        return config.source.offsets(rate)
    if isinstance(config.source, AgenticPrompts) and config.source.trace is not None:
        return config.source.session_offsets(rate)
    offsets = arrival_offsets(rate, config.burstiness, arrivals_rng)
    if steady and not math.isinf(rate):
        offsets = ramped_offsets(offsets, config.ramp_up_seconds)
    return offsets


def level_wants_more(
    sent: int,
    moment: float,
    count: int | None,
    deadline: float | None,
    window: ClosedLoopWindow | OpenLoopWindow | None,
) -> bool:
    """Whether a level sends another request at ``moment``: fewer than ``count`` sent, its
    ``deadline`` not reached and its window not draining (each None when it has none)."""
    return not (
        (count is not None and sent >= count)
        or (deadline is not None and moment >= deadline)
        or (window is not None and window.draining)
    )


def level_send_limit(config: BenchConfig, rate: float | None) -> int | None:
    """How many requests a level sends before it ends: a replayed trace all of its requests
    (a timed level stops it earlier), a classic level ``num_prompts``; None when its steady
    window or its duration ends it."""
    if replays(config, rate):
        return len(config.source)
    if config.duration is not None or is_steady(config, rate):
        return None
    return config.num_prompts


def level_prompt_count(config: BenchConfig, concurrency: int | None, rate: float | None) -> int:
    """How many prompts a level builds before its clock starts (a timed level: a pool of
    ``DURATION_PROMPT_POOL`` it cycles through; a replayed trace: its requests)."""
    if replays(config, rate):
        return len(config.source)
    if config.duration is not None:
        return DURATION_PROMPT_POOL
    if config.steady_multiple is None or rate == math.inf:
        return config.num_prompts
    target = steady_window_requests(
        config.num_prompts, config.steady_multiple, concurrency, config.slos
    )
    # The window's requests, the ramp's and the drain's: a steady level sends more than its
    # window holds; beyond these prompts it cycles through them again.
    return target + 2 * (concurrency or config.max_concurrency or 0) + target // 2


def window_target(config: BenchConfig, concurrency: int | None, rate: float | None) -> int | None:
    """How many requests a steady level's window holds (None: not a steady level, or a timed
    one, whose window closes when sending stops)."""
    if not is_steady(config, rate) or config.duration is not None:
        return None
    return steady_window_requests(
        config.num_prompts, config.steady_multiple, concurrency, config.slos
    )


def is_steady(config: BenchConfig, rate: float | None) -> bool:
    """Whether a level has a steady window (an unbounded rate has no steady state; a
    replayed trace and sessions arriving open loop are measured whole)."""
    whole = rate is not None and isinstance(
        config.source, TracePrompts | SessionPrompts | AgenticPrompts
    )
    return config.steady_multiple is not None and rate != math.inf and not whole


def fixed_levels(config: BenchConfig) -> list[dict]:
    """The configuration's levels, each ``repeats`` times in a row (fresh prompts each)."""
    return [level for level in config.levels for _ in range(config.repeats)]


def extension_due(config: BenchConfig, level: dict, results: list[LevelResult]) -> int:
    """Whether ``level`` is measured once more because the measurements of its load so far
    (those in ``results``) are too close to call at the SLOs' confidence: the number of
    that extension (1, 2, …), or 0 — no SLOs, decided, or ``max_extensions`` used up."""
    if config.slos is None or not config.slos.given or not config.max_extensions:
        return 0
    key = level_key(level)
    # Verdicts read results as JSON, the way the site reads what it stored.
    mine = [result.model_dump() for result in results if result_key(result) == key]
    done = sum(1 for result in mine if result.get("extension"))
    if done >= config.max_extensions or load_verdict(mine) != TOO_CLOSE:
        return 0
    return done + 1


def result_key(result: LevelResult) -> str:
    """The ``level_key`` of the level ``result`` measured."""
    return level_key(result.model_dump(include={"concurrency", "request_rate"}, exclude_none=True))


def typed_level_result(result: dict) -> tuple[LevelResult, dict | None]:
    """A level's result as the protocol types it, and the server's metrics it held."""
    figures = dict(result)
    server = figures.pop("server", None)
    return LevelResult.model_validate(figures), server


def shown_level(config: BenchConfig, level: dict) -> dict:
    """The level as its result names it (an open-loop level with its burstiness)."""
    shown = dict(level)
    if "request_rate" in shown:
        shown["burstiness"] = config.burstiness
    return shown


def steady_result(
    config: BenchConfig,
    level: dict,
    whole: dict,
    records: list[RequestRecord],
    start: float,
    window: ClosedLoopWindow | OpenLoopWindow,
    server: dict | None,
    *,
    intervals: bool = True,
) -> dict:
    """The level's result with the window's figures as its headline and the whole level's
    beside them; the whole level's alone when no window formed. ``intervals``: False leaves
    ``ci95`` None (bootstrapping is most of a simulated level's cost)."""
    end = window.end
    if end is None and config.duration is not None:
        # A timed level: its window closes when sending stops, before the drain.
        end = start + config.duration
    split = split_window(
        records,
        window.start,
        end,
        schedule_origin=window.origin if isinstance(window, OpenLoopWindow) else None,
    )
    whole_figures = {key: whole[key] for key in WHOLE_LEVEL_KEYS}
    if split is None:
        return whole | {
            "whole_level": whole_figures,
            "ci95": confidence_intervals(
                records,
                records,
                start=start,
                end=start + whole["duration"],
                slos=config.slos,
                figures=whole,
            )
            if intervals
            else None,
        }
    result = level_result(
        level,
        split.measured,
        duration=split.end - split.start,
        slos=config.slos,
        server=server,
        throughput_records=split.ended_inside,
    )
    # Failures anywhere in the level count: a level that lost requests does not pass.
    result["failed"] = whole["failed"]
    result["errors"] = whole["errors"]
    result["whole_level"] = whole_figures
    result["ci95"] = (
        confidence_intervals(
            split.measured,
            split.ended_inside,
            start=split.start,
            end=split.end,
            slos=config.slos,
            figures=result,
        )
        if intervals
        else None
    )
    result["window"] = {
        "start_s": split.start - start,
        "end_s": split.end - start,
        "requests": len(split.measured),
        "ramp_requests": split.ramp,
        "drain_requests": split.drain,
    }
    return result


def finished_level_result(
    config: BenchConfig,
    level: dict,
    records: list[RequestRecord],
    *,
    start: float,
    end: float,
    window: ClosedLoopWindow | OpenLoopWindow | None,
    server: dict | None,
    intervals: bool = True,
) -> dict:
    """A measured level's result: the whole level's figures, or the steady window's with
    them beside (``steady_result``); ``intervals``: as there."""
    shown = shown_level(config, level)
    result = level_result(shown, records, duration=end - start, slos=config.slos, server=server)
    if window is not None:
        result = steady_result(
            config, shown, result, records, start, window, server, intervals=intervals
        )
    else:
        result["ci95"] = (
            confidence_intervals(
                records, records, start=start, end=end, slos=config.slos, figures=result
            )
            if intervals
            else None
        )
    spread = lora_requests(config, records)
    if spread is not None:
        result["lora_requests"] = spread
    return result | _schedule_figures(config, level, records, start)


def _schedule_figures(
    config: BenchConfig, level: dict, records: list[RequestRecord], start: float
) -> dict:
    """An open-loop level's ``send_lateness`` (actual send minus scheduled, over the requests
    that were sent), a trace level's ``replay`` and a session level's ``turns``; none of
    them for what has none."""
    figures: dict = {}
    lateness = sorted(
        (record.start - start - record.scheduled) * 1000
        for record in records
        if record.scheduled is not None and record.start >= start  # sent, not cut off
    )
    if lateness:
        figures["send_lateness"] = {
            "p50_ms": percentile(lateness, 50),
            "p99_ms": percentile(lateness, 99),
            "max_ms": lateness[-1],
        }
    turns = _turn_figures(records)
    if turns:
        figures["turns"] = turns
    source = config.source
    if isinstance(source, TracePrompts):
        _, rate = level_load(level)
        trace_rate = source.trace.mean_rate
        figures["replay"] = {
            "requests": len(source),
            "trace_rate": None if math.isinf(trace_rate) else trace_rate,
            "time_scale": None if rate is None else source.time_scale(rate),
        }
    return figures


def _turn_figures(records: list[RequestRecord]) -> list[dict]:
    """Per turn index of a chat-session level (its requests carry one), over every request
    of the level: counts, mean prompt tokens, TTFT median/p99, TPOT median."""
    by_turn: dict[int, list[RequestRecord]] = {}
    for record in records:
        if record.turn is not None:
            by_turn.setdefault(record.turn, []).append(record)
    figures = []
    for turn in sorted(by_turn):
        done = [record for record in by_turn[turn] if record.success]
        ttfts = sorted(record.ttft * 1000 for record in done)
        tpots = sorted(record.tpot * 1000 for record in done if record.tpot is not None)
        figures.append(
            {
                "turn": turn,
                "requests": len(by_turn[turn]),
                "completed": len(done),
                "mean_prompt_tokens": math.fsum(r.input_tokens for r in done) / len(done)
                if done
                else None,
                "median_ttft_ms": percentile(ttfts, 50) if ttfts else None,
                "p99_ttft_ms": percentile(ttfts, 99) if ttfts else None,
                "median_tpot_ms": percentile(tpots, 50) if tpots else None,
            }
        )
    return figures
