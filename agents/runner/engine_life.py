"""One trial's engine life (``JobRunner``'s part): start it, measure on it, and self-heal.

Guarantees (the runner's docstring says them for the whole run): an engine that dies or
hangs while measuring is started again with the same configuration up to
``engine_restarts`` times, after an ``engine_restarted`` message, the levels it finished
kept and the one it cut short run again; with no restart left the trial ends ``failed`` with
the failure's class; a server that cannot be reached while its process still runs is not a
crash (``failed``/``other``); a trial's evaluation runs on the same server after its levels.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from dataclasses import dataclass

from agents import protocol
from agents.engines.base import EngineFailed, FailureKind
from agents.engines.process import ProcessEngine
from agents.loadgen import LevelFinished
from agents.loadgen.activity import Activity
from agents.runner.evaluation_run import EvaluationKeys, trial_evaluation

logger = logging.getLogger(__name__)

ENGINE_POLL_SECONDS = 0.5
# A killed engine's port refuses connections a moment before its process can be reaped, and
# vLLM's API server takes a moment to exit after its engine core died: how long an
# unreachable engine is given to show that it died before it is judged alive.
ENGINE_EXIT_GRACE = 5.0
LOG_TAIL_LINES = 60


def _level_of(result: protocol.LevelResult) -> protocol.Level:
    return protocol.Level(concurrency=result.concurrency, request_rate=result.request_rate)


@dataclass(frozen=True)
class TrialEnded:
    """An engine's life ended its trial: ``trial_finished`` was sent with ``outcome``."""

    outcome: str


@dataclass(frozen=True)
class EngineDied:
    """The engine died or hung while measuring; ``cut_short``: the level it cut short."""

    failure: EngineFailed
    cut_short: LevelFinished | None


def _tail(lines: list[str]) -> str:
    text = "\n".join(lines[-LOG_TAIL_LINES:])
    return text[-protocol.MAX_LOG_TAIL_CHARS :]


class EngineLife:
    """The engine's part of ``JobRunner``: uses its ``job``, ``engine_options``, stop events,
    ``emit``, ``evaluation_set``, ``_finish_trial``, ``_stopped_outcome``, ``_new_engine`` and
    ``_measure``."""

    async def _serve_with_restarts(self, trial: protocol.TrialSpec, engine: ProcessEngine) -> str:
        """Serves and measures ``trial``; an engine that dies or hangs mid-measuring is started
        again with the same configuration (up to ``engine_restarts`` times), and the levels
        it finished are kept while the one it cut short runs again from its start."""
        index = trial.index
        measured: list[protocol.LevelResult] = []  # this configuration's finished levels
        for attempt in itertools.count():
            self._engine = engine
            ended = await self._serve_and_measure(index, engine, measured, first=attempt == 0)
            if isinstance(ended, TrialEnded):
                return ended.outcome
            failure, cut_short = ended.failure, ended.cut_short
            failure_class = failure.kind.value
            log_tail = f"{failure.message}\n{_tail(failure.log_tail)}"
            if attempt < self.engine_options.engine_restarts and self._stop_request is None:
                self.emit(
                    protocol.EngineRestarted,
                    trial=index,
                    attempt=attempt + 1,
                    failure_class=failure_class,
                    level=_level_of(cut_short.result) if cut_short else None,
                    requests_lost=cut_short.result.completed + cut_short.result.failed
                    if cut_short
                    else 0,
                    log_tail=self._redacted(log_tail),
                )
                logger.warning("trial %s: engine %s; starting it again", index, failure_class)
                await asyncio.to_thread(engine.stop)
                engine = self._new_engine(trial)
                continue
            if cut_short is not None:  # no restart left: the level as far as it got
                self._measurement(index, cut_short)
            return self._finish_trial(index, "failed", failure_class, log_tail)
        raise AssertionError("unreachable")

    async def _serve_and_measure(
        self,
        index: int,
        engine: ProcessEngine,
        measured: list[protocol.LevelResult],
        *,
        first: bool,
    ) -> TrialEnded | EngineDied:
        """One engine's life: start it, measure the levels ``measured`` lacks. The trial's
        end (``trial_finished`` sent), or the failure of an engine that died or hung while
        measuring, with the level it cut short."""

        def on_phase(phase) -> None:  # called from the engine's log thread
            if not first:
                return  # a restart's start-up is not the trial's cold start
            record = self._record
            if record is not None:
                record.cold_start_s = max(record.cold_start_s, phase.at)
            self.emit(
                protocol.ColdStartPhase,
                trial=index,
                phase=phase.name,
                seconds=max(phase.at, 0.0),
                detail=dict(phase.detail),
            )

        if self._stop_request is not None:
            return TrialEnded(self._stopped_outcome(index))
        self._engine_starting = True
        try:
            await asyncio.to_thread(engine.start, on_phase)
        except EngineFailed as failure:
            if self._stop_request is not None:
                return TrialEnded(self._stopped_outcome(index, _tail(failure.log_tail)))
            evidence = "\n".join(failure.evidence)
            log_tail = f"{failure.message}\n{evidence}\n{_tail(failure.log_tail)}".strip()
            return TrialEnded(self._finish_trial(index, "failed", failure.kind.value, log_tail))
        finally:
            self._engine_starting = False
        # One event ends the level: the run's stop, or the engine dying (or hanging) under it.
        self._level_stop = asyncio.Event()
        if self._stop.is_set():
            self._level_stop.set()
        activity = Activity()
        watcher = asyncio.create_task(self._watch_engine(engine, activity))
        try:
            levels = await self._measure(index, engine, measured, activity)
        finally:
            watcher.cancel()
        # The watcher's finding, if it found one before it was cancelled.
        watched = watcher.done() and not watcher.cancelled() and watcher.exception() is None
        failure = watcher.result() if watched else None
        if failure is None and levels.unreachable is not None:
            failure = await self._death_of(engine)
            if failure is None:
                log_tail = f"{levels.unreachable}\n(the engine was still running: not a crash)\n"
                return TrialEnded(
                    self._finish_trial(
                        index, "failed", "other", log_tail + _tail(list(engine.tail))
                    )
                )
        elif failure is None:
            # A level can finish (every request refused) before the watcher's next look, and
            # before a killed engine can be reaped: lost connections are worth the wait.
            failure = (
                await self._death_of(engine)
                if levels.lost_connections
                else await asyncio.to_thread(engine.exit_status)
            )
        last = levels.last
        if failure is not None:
            if last is not None and levels.suspect:
                return EngineDied(failure, last)  # the level the failure cut short
            if last is not None:
                self._keep(index, measured, last)
            return EngineDied(failure, None)
        if last is not None and last.result.partial:
            self._measurement(index, last)  # a stop (not a failure) ended it: as far as it got
        elif last is not None:
            self._keep(index, measured, last)
        if self._stop_request is not None:
            return TrialEnded(self._stopped_outcome(index))
        await self._evaluate(index, engine)
        if self._stop_request is not None:
            return TrialEnded(self._stopped_outcome(index))
        return TrialEnded(self._finish_trial(index, "succeeded"))

    async def _evaluate(self, index: int, engine: ProcessEngine) -> None:
        """Scores the trial's served configuration on the job's evaluation, if it has one
        (module docstring); a stop ends it unreported."""
        if self.job.evaluation is None or self._effort < 1:
            return
        keys = EvaluationKeys(
            served=self.engine_options.endpoint_api_key
            if self.job.engine.kind == "endpoint"
            else None,
            judge=self.engine_options.judge_api_key,
        )
        evaluation = asyncio.create_task(
            trial_evaluation(
                self.job,
                base_url=engine.base_url,
                keys=keys,
                timeout_s=self.seconds_to_deadline(),
                fetch_set=self.evaluation_set,
                # Sent only where the site checked, as the load generator's traffic is.
                served_addresses=self.engine_options.endpoint_addresses
                if self.job.engine.kind == "endpoint"
                else (),
                judge_addresses=self.engine_options.judge_addresses,
            )
        )
        stopped = asyncio.create_task(self._stop.wait())
        await asyncio.wait({evaluation, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not evaluation.done():
            evaluation.cancel()
            return
        for fields in evaluation.result():
            self.emit(protocol.EvaluationReport, trial=index, **fields)

    async def _watch_engine(self, engine: ProcessEngine, activity: Activity) -> EngineFailed:
        """Ends the level at once when the engine dies under it, or when it has sent nothing
        for ``hang_seconds`` while requests wait (a hung engine is killed: it is not
        measured further); returns that failure."""
        hang_after = self.engine_options.hang_seconds
        while True:
            await asyncio.sleep(ENGINE_POLL_SECONDS)
            # In a thread: reading a dead engine's last log lines can take a moment, and the
            # load generator shares this loop.
            failure = await asyncio.to_thread(engine.exit_status)
            if failure is None and activity.silent_for() > hang_after:
                failure = EngineFailed(
                    FailureKind.HANG,
                    f"no token for {activity.silent_for():.0f} s with "
                    f"{activity.in_flight} requests in flight (hang_seconds {hang_after:g})",
                    log_tail=list(engine.tail),
                )
                engine.kill()
            if failure is not None:
                self._level_stop.set()
                return failure

    async def _death_of(self, engine: ProcessEngine) -> EngineFailed | None:
        """The engine's failure if its process has exited or exits within the grace period;
        None if it is still running then."""
        give_up = time.monotonic() + self.engine_exit_grace
        while True:
            # In a thread: reading a dead engine's last log lines can take a moment.
            failure = await asyncio.to_thread(engine.exit_status)
            if failure is not None or time.monotonic() >= give_up:
                return failure
            await asyncio.sleep(0.05)
