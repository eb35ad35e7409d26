"""Measuring a trial's load levels on a live engine (``JobRunner``'s part).

Guarantees (the runner's docstring says them for the whole run): a finished level is
reported once the next level has started on a live server, or by the caller once the
engine's fate is known, so a level a dying server failed is never reported as whole; every
trial is sent the same traffic (the job's ``seed``); a simulator measured over HTTP has its
speed-up undone in every figure it reports; each GPU's readings of a level go out with it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from agents import protocol
from agents.engines.process import ProcessEngine
from agents.loadgen import (
    CapacityFound,
    LevelFinished,
    LevelStarted,
    RequestDone,
    ServerSample,
    ServerUnreachable,
    config_from_workload,
    run_bench,
)
from agents.loadgen.activity import Activity
from agents.runner.live import LiveLevel
from agents.runner.offline_sim import OfflineSimEngine
from agents.runner.simulated import (
    capacity_in_simulated_time,
    progress_in_simulated_time,
    rate_in_simulated_time,
    result_in_simulated_time,
    slos_for_speed,
    workload_for_speed,
)
from agents.search import at_effort
from agents.telemetry import GpuLevels

# Request failures that say the server may be gone (``agents.loadgen.http`` kinds).
_LOST_CONNECTION = frozenset({"connection_refused", "connection_error", "stream_ended_early"})


@dataclass(frozen=True)
class LevelsMeasured:
    """How measuring on one engine ended: its last finished level, not yet reported (it
    stands once the engine's fate is known), whether that level is ``suspect`` (cut short,
    or it lost connections: a dying server's level), whether any request or scrape lost its
    connection, and the error of a server that could not be reached before a level."""

    last: LevelFinished | None = None
    suspect: bool = False
    lost_connections: bool = False
    unreachable: ServerUnreachable | None = None


class LevelMeasuring:
    """The levels' part of ``JobRunner``: uses its ``job``, ``engine_options``, stop events,
    ``sim_speed``, ``tokenizer``, GPUs, search effort and record, and ``emit``."""

    async def _measure(
        self,
        index: int,
        engine: ProcessEngine,
        measured: list[protocol.LevelResult],
        activity: Activity,
    ) -> LevelsMeasured:
        """Runs the workload's levels on ``engine`` (those in ``measured`` are taken as they
        were). A finished level is kept (reported, and added to ``measured``) once the next
        level has started on a live server; the last one is left to the caller, who knows
        whether the engine failed and the level runs again. A lost connection is a request
        or a metrics scrape refused, reset or closed early: what a dying server does."""
        job = self.job
        uploaded = getattr(job.workload.dataset, "dataset_id", None)
        config = config_from_workload(
            workload_for_speed(job.workload, self.sim_speed) if self.sim_speed else job.workload,
            base_url=engine.base_url,
            model=job.model.served_model_name,
            slos=slos_for_speed(job.slos, self.sim_speed) if self.sim_speed else job.slos,
            dataset_path=(
                self.dataset_path(str(uploaded)) if uploaded and self.dataset_path else None
            ),
            metrics_url="auto",
            metrics_period=self.metrics_period,
            tokenizer=self.tokenizer,
            # The run's seed, not the trial's: every configuration sees the same traffic.
            seed=job.seed,
            # An existing endpoint's key, as a bearer token (None: none is sent).
            api_key=self.engine_options.endpoint_api_key if job.engine.kind == "endpoint" else None,
            # ... sent only to the addresses the site checked for its host.
            connect_addresses=(
                self.engine_options.endpoint_addresses if job.engine.kind == "endpoint" else ()
            ),
            # vLLM and the simulator take it; an endpoint's check found whether it does.
            ignore_eos=engine.accepts_ignore_eos,
            resume_results=tuple(measured),
            activity=activity,
            # Only vLLM serves the adapters (the site refuses them for other engines).
            lora_models=tuple(a.name for a in job.model.lora_adapters)
            if job.engine.kind == "vllm"
            else (),
        )
        if self._effort < 1:
            config = at_effort(config, self._effort)
        relay = asyncio.create_task(self._relay_stop())
        live: LiveLevel | None = None
        # ``live`` is read when a sample comes: the level in progress's.
        gpu_levels = (
            None
            if self._gpus is None
            else GpuLevels(self._gpus, period=self.gpu_period, on_sample=lambda r: live.gpu(r))
        )
        level: dict = {}
        held: LevelFinished | None = None
        suspect = lost_connections = level_lost = False
        try:
            events = (
                engine.bench_events(config, self._level_stop)
                if isinstance(engine, OfflineSimEngine)
                else run_bench(config, stop=self._level_stop)
            )
            async for event in events:
                if gpu_levels is not None:
                    event = await gpu_levels.observe(event)
                if isinstance(event, LevelStarted):
                    if held is not None:  # the server took the next level: the last one stands
                        self._keep(index, measured, held)
                        held = None
                    level = event.level
                    live = LiveLevel(event.total, every=self.progress_every)
                    level_lost = False
                elif isinstance(event, RequestDone) and live is not None:
                    live.add(event.record)
                    lost = event.record.error_kind in _LOST_CONNECTION
                    level_lost |= lost
                    lost_connections |= lost
                    if live.due():
                        self._progress(index, level, live)
                elif isinstance(event, ServerSample) and live is not None:
                    live.server(event.kv_cache_usage, event.num_requests_waiting)
                elif isinstance(event, CapacityFound):
                    capacity = event.result
                    if self.sim_speed:
                        capacity = capacity_in_simulated_time(capacity, self.sim_speed)
                    self.capacity = capacity
                elif isinstance(event, LevelFinished):
                    # "<kind>: <message>" (``agents.loadgen.server_metrics``).
                    scrape_error = (event.server or {}).get("last_scrape_error")
                    kind = (scrape_error or "").partition(":")[0]
                    level_lost |= kind in _LOST_CONNECTION
                    lost_connections |= level_lost
                    held, suspect = event, bool(event.result.partial) or level_lost
        except ServerUnreachable as exc:
            return LevelsMeasured(held, suspect, lost_connections, unreachable=exc)
        finally:
            relay.cancel()
            if gpu_levels is not None:  # a level the engine's failure cut short: not reported
                await gpu_levels.close()
        return LevelsMeasured(held, suspect, lost_connections)

    async def _relay_stop(self) -> None:
        await self._stop.wait()
        self._level_stop.set()

    def _progress(self, index: int, level: dict, live: LiveLevel) -> None:
        figures = live.figures()
        if self.sim_speed:
            figures = progress_in_simulated_time(figures, self.sim_speed)
            if "request_rate" in level:
                rate = rate_in_simulated_time(level["request_rate"], self.sim_speed)
                level = {"request_rate": rate}
        self.emit(
            protocol.LevelProgress,
            trial=index,
            level=protocol.Level(**level),
            **figures,
        )

    def _keep(self, index: int, measured: list[protocol.LevelResult], level: LevelFinished) -> None:
        """A level that stands: reported, and never measured again on this configuration."""
        measured.append(level.result)
        self._measurement(index, level)

    def _measurement(self, index: int, finished: LevelFinished) -> None:
        # The result as JSON, its server's figures in it: as the search reads a level.
        result = finished.result.model_dump() | {"server": finished.server}
        if self.sim_speed:
            result = result_in_simulated_time(result, self.sim_speed)
        elif self.job.engine.kind == "sim":  # in the simulator's own time: labelled so
            result = {**result, "simulated": {"speed": 1.0, "clock": "simulated"}}
        gpus = finished.gpus
        if self._record is not None:
            self._record.levels.append(result | ({} if gpus is None else {"gpus": gpus}))
        result = dict(result)
        server = result.pop("server", None) or {}
        level = {key: result[key] for key in ("concurrency", "request_rate") if key in result}
        self.emit(
            protocol.MeasurementReport,
            trial=index,
            level=protocol.Level(**level),
            result=result,
            server=server,
            gpus=gpus,
        )
