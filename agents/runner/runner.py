"""Runs a whole job unattended: for each trial, engine up → load levels → engine down.

Guarantees:

- Every fact goes out as a protocol message through ``emit`` (validated against
  ``agents.protocol`` before it leaves): ``hello`` first, then per trial ``trial_started``,
  each ``cold_start_phase`` as the engine reaches it, ``level_progress`` at most every
  ``progress_every`` seconds, one ``measurement`` per finished level (capacity probes
  included), ``engine_restarted`` when self-heal starts a trial's engine again,
  ``trial_finished`` (with the capacity search's result when the workload asks for one);
  ``heartbeat`` every ``heartbeat_every`` seconds throughout; ``run_finished`` last.
- Real vLLM serves weights fetched once per run, before the first trial's engine starts
  (``agents.weights``: only what vLLM loads, into the machine's weights cache), reported as
  the first trial's ``weights_downloaded`` cold-start phase (bytes, seconds, MB/s; 0 bytes
  when the cache had them; the LoRA adapters and speculative draft models fetched with
  them under ``companions``); its tokenizer builds every prompt. Weights that cannot be had
  (no access, unknown model, too little disk) fail that trial with the class saying why
  before any vLLM starts, and end the run ``failed`` (the other trials: skipped).
- A trial whose engine fails to start is recorded with its failure class and log tail, and
  the run goes on with the next trial.
- Self-heal: an engine that dies at any moment of the measuring (during a level, between
  levels, in a level's warm-up, in a metrics scrape) or hangs (no response byte for
  ``hang_seconds`` while requests wait: it is killed) is started again with the same
  configuration, up to ``engine_restarts`` times, after an ``engine_restarted`` message:
  the levels finished before stay reported (each exactly once), the level it cut short runs
  again from its start with the same traffic and is reported only then. With no restart
  left the trial ends ``failed``/``crash`` (or ``hang``): the level it cut short is reported
  as far as it got, no later level runs. A finished level is reported once the next level
  has started on a live server (or the engine's fate is known), so a level a dying server
  failed is never reported as whole. A server the load generator cannot reach while the
  engine process is still running is not a crash: the trial ends ``failed``/``other`` with
  the error and the engine's log tail.
- The job's deadline is enforced here, whatever the site does: ``deadline_margin`` seconds
  before it the level in progress is ended (its finished requests are reported as a partial
  measurement), the engine is stopped, the remaining trials are reported as skipped and the
  run finishes with outcome ``deadline``. ``request_stop`` (cancel from the site, a signal)
  does the same at once with its own outcome; it is safe to call from any thread.
- Beside real vLLM, each GPU of the host is sampled through NVML about every
  ``gpu_period`` seconds while a level runs (``agents.telemetry``): the latest readings go
  out with ``level_progress``, each GPU's mean and max with the level's ``measurement``; a
  host without NVML reports none, and the run goes on as before.
- The engine is always stopped before ``run`` returns, whatever happened.
- The Hugging Face token reaches vLLM's environment and the download only; it is cut out of
  every log tail sent.
- Every trial is sent the same traffic: the load generator is seeded with the job's
  ``seed``, never with the trial.
- A simulated job is computed in the simulator's own time (``agents.runner.offline_sim``):
  its messages' figures are a pure function of the job (its ``seed`` and the engine's
  ``noise_seed``), whatever the host is doing; only ``EngineOptions.sim_over_http`` serves
  the simulator over HTTP in wall time instead (a stand-in for vLLM's process and network).
- A job with a ``search`` measures the trials its search picks, at the effort it asks
  (``agents.runner.search_run``; ``exhaustive``: all, in order, within its limits); every
  other trial is reported skipped with its fate, and ``search_finished`` precedes
  ``run_finished``.
- A job with an ``evaluation`` scores each trial's served configuration on it after its
  levels, on the same server, before ``trial_finished`` (``agents.runner.evaluation_run``:
  ``evaluation`` messages; none on the simulator, which serves no text, and none for a
  search's brief look). A stop or the deadline abandons it unreported.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pydantic

from agents import protocol
from agents.engines.base import EngineFailed, FailureKind
from agents.engines.process import ProcessEngine
from agents.loadgen import (
    CapacityFound,
    LevelFinished,
    LevelStarted,
    RequestDone,
    ServerSample,
    ServerUnreachable,
    TokenizerError,
    config_from_workload,
    load_tokenizer,
    run_bench,
)
from agents.loadgen.activity import Activity
from agents.protocol import JobSpec, ServeGridError
from agents.runner.evaluation_run import EvaluationKeys, trial_evaluation
from agents.runner.hostfacts import agent_version, host_facts, vllm_version_of
from agents.runner.live import LiveLevel
from agents.runner.offline_sim import OfflineSimEngine
from agents.runner.search_run import TrialRecord, run_job_search
from agents.runner.simulated import (
    capacity_in_simulated_time,
    progress_in_simulated_time,
    rate_in_simulated_time,
    result_in_simulated_time,
    slos_for_speed,
    workload_for_speed,
)
from agents.runner.trial_engine import EngineOptions, trial_engine
from agents.search import at_effort
from agents.telemetry import GpuLevels, NvmlGpus, open_gpus
from agents.weights import Weights, WeightsError, weights_fetch

logger = logging.getLogger(__name__)

Emit = Callable[[dict], None]

ENGINE_POLL_SECONDS = 0.5
# A killed engine's port refuses connections a moment before its process can be reaped, and
# vLLM's API server takes a moment to exit after its engine core died: how long an
# unreachable engine is given to show that it died before it is judged alive.
ENGINE_EXIT_GRACE = 5.0
# Request failures that say the server may be gone (``agents.loadgen.http`` kinds).
_LOST_CONNECTION = frozenset({"connection_refused", "connection_error", "stream_ended_early"})
# The messages of one trial's measuring: a brief look of a search (effort < 1) sends none.
_TRIAL_MESSAGES = (
    protocol.TrialStarted,
    protocol.ColdStartPhase,
    protocol.LevelProgress,
    protocol.MeasurementReport,
    protocol.EngineRestarted,
    protocol.EvaluationReport,
    protocol.TrialFinished,
)
LOG_TAIL_LINES = 60


def _link(link: Path, target: Path) -> None:
    """Points ``link`` at ``target``, replacing what it pointed at (an earlier run's commit)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    temporary = link.with_name(f".{link.name}.{os.getpid()}")
    temporary.unlink(missing_ok=True)
    temporary.symlink_to(target, target_is_directory=True)
    temporary.replace(link)


def companion_snapshots(job: protocol.JobSpec) -> list:
    """What a vLLM run fetches beside its model: the LoRA adapters it serves, then the
    speculative draft models its trials name (vLLM reads them from the same cache with the
    hub offline)."""
    configs = (trial.serve_config for trial in job.trials)
    return [*job.model.lora_adapters, *protocol.draft_models(configs)]


@dataclass(frozen=True)
class StopRequest:
    """Why the run is ending early: the ``run_finished`` outcome and a reason for people."""

    outcome: str  # "cancelled", "deadline" or "failed"
    reason: str


@dataclass(frozen=True)
class RunSummary:
    """How the run ended (also sent as ``run_finished``)."""

    outcome: str
    reason: str
    trials_succeeded: int
    trials_failed: int
    trials_skipped: int


def _message(model: type[protocol.AgentMessageBase], run_id, **fields) -> dict:
    """A validated agent message without ``seq`` (the outbox numbers it)."""
    instance = model(run_id=run_id, seq=0, sent_at=time.time(), **fields)
    return instance.model_dump(mode="json", exclude={"seq"})


async def _in_daemon_thread(function: Callable, /, *args, **kwargs):
    """``function(*args, **kwargs)`` in a daemon thread: a download that a stop abandons
    must not keep the agent's process alive when it exits."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(result=None, error: BaseException | None = None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def work() -> None:
        try:
            result = function(*args, **kwargs)
        except BaseException as exc:  # handed to the awaiting coroutine, whatever it is
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(settle, None, exc)
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, result)

    threading.Thread(target=work, name="weights-fetch", daemon=True).start()
    return await future


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


def _tail(lines: list[str]) -> str:
    text = "\n".join(lines[-LOG_TAIL_LINES:])
    return text[-protocol.MAX_LOG_TAIL_CHARS :]


class JobRunner:
    """Runs one ``JobSpec`` (see the module docstring)."""

    def __init__(
        self,
        job: JobSpec,
        *,
        emit: Emit,
        workdir: Path,
        engine_options: EngineOptions | None = None,
        dataset_path: Callable[[str], Path] | None = None,
        evaluation_set: Callable[[str, str], bytes] | None = None,
        deadline_margin: float = 15.0,
        heartbeat_every: float = 10.0,
        progress_every: float = 0.5,
        metrics_period: float = 1.0,
        engine_exit_grace: float = ENGINE_EXIT_GRACE,
        gpu_telemetry: bool | None = None,
        gpu_period: float = 1.0,
    ):
        self.job = job
        self._emit = emit
        self.workdir = Path(workdir)
        self.engine_options = engine_options or EngineOptions()
        self._host: protocol.HostFacts | None = None  # read once, in run()
        self.dataset_path = dataset_path
        # An uploaded evaluation set's file by (id, sha256), checked (session.py); None: none.
        self.evaluation_set = evaluation_set
        self.deadline_margin = deadline_margin
        self.heartbeat_every = heartbeat_every
        self.progress_every = progress_every
        self.metrics_period = metrics_period
        self.engine_exit_grace = engine_exit_grace
        self.current_trial: int | None = None
        # What the current trial's capacity search found (CapacityResult JSON), if it ran.
        self.capacity: dict | None = None
        self._stop_request: StopRequest | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = asyncio.Event()  # set once the run must end
        self._level_stop = asyncio.Event()  # ends the level in progress
        self._engine: ProcessEngine | None = None
        self._engine_starting = False
        # The speed-up of a simulator measured over HTTP in wall time, undone in every figure
        # it reports (None: real hardware, or the simulator in its own time).
        self.sim_speed = (
            job.engine.sim_speed
            if job.engine.kind == "sim" and self.engine_options.sim_over_http
            else None
        )
        # The machine's weights cache (HF_HOME layout) and what was fetched into it.
        self.weights_dir = self.engine_options.weights_dir or self.workdir / "weights"
        self._weights_ready = job.engine.kind != "vllm"
        self.tokenizer = None
        # Where vLLM finds each LoRA adapter, by name: a link to its snapshot, made when the
        # weights are fetched, so every trial's command names it before it exists.
        self.lora_dir = self.weights_dir / "lora"
        # A search's measuring (agents.runner.search_run): the effort of the trial being
        # measured, what it found, and how each trial reported as ended did end.
        self._effort = 1.0
        self._record: TrialRecord | None = None
        self._reported: dict[int, str] = {}
        # This host's GPUs are sampled during levels only beside an engine that runs on them
        # (a simulator's GPU is not this host's); ``gpu_telemetry`` says otherwise in tests.
        self.gpu_telemetry = job.engine.kind == "vllm" if gpu_telemetry is None else gpu_telemetry
        self.gpu_period = gpu_period
        self._gpus: NvmlGpus | None = None  # NVML's handles while the run runs (None: none)

    # -- stopping --------------------------------------------------------------------------

    def request_stop(self, outcome: str, reason: str) -> None:
        """Ends the run as soon as possible (thread-safe; the first request wins)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            self._set_stop(outcome, reason)
            return
        # RuntimeError: the loop has just closed, so nothing is left to stop.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._set_stop, outcome, reason)

    def _set_stop(self, outcome: str, reason: str) -> None:
        if self._stop_request is None:
            logger.warning("stopping the run: %s (%s)", outcome, reason)
            self._stop_request = StopRequest(outcome, reason)
        self._stop.set()
        engine = self._engine
        if engine is not None and self._engine_starting and self._loop is not None:
            # A start-up can take minutes: stopping the engine ends it at once. A serving
            # engine is stopped after the level, so its last metrics can still be read.
            self._loop.run_in_executor(None, engine.stop)

    @property
    def stop_requested(self) -> bool:
        return self._stop_request is not None

    def seconds_to_deadline(self) -> float:
        now = datetime.datetime.now(datetime.UTC)
        return (self.job.deadline - now).total_seconds() - self.deadline_margin

    # -- messages --------------------------------------------------------------------------

    def emit(self, model: type[protocol.AgentMessageBase], **fields) -> None:
        if (
            self._effort < 1
            and model in _TRIAL_MESSAGES
            and fields.get("phase") != protocol.WEIGHTS_PHASE  # the run's fact, not the trial's
        ):
            return  # a search's brief look: not the workload's measurement (search_run)
        if model is protocol.TrialFinished:
            self._reported[fields["trial"]] = fields["outcome"]
        try:
            message = _message(model, self.job.run_id, **fields)
        except pydantic.ValidationError:
            # A bug of ours must not end a paid run: log it and carry on without the message.
            logger.exception("could not build a %s message", model.__name__)
            return
        self._emit(message)

    # -- the run ---------------------------------------------------------------------------

    async def run(self) -> RunSummary:
        """Runs every trial in order; returns how the run ended (``run_finished`` is sent)."""
        self._loop = asyncio.get_running_loop()
        if self._stop_request is not None:
            self._stop.set()
        self._host = host_facts(
            vllm_version=(
                await asyncio.to_thread(vllm_version_of, self.engine_options.vllm_command)
                if self.job.engine.kind == "vllm"
                else None
            )
        )
        self.emit(
            protocol.Hello,
            agent_version=agent_version(),
            # The vLLM actually installed, whatever the job's image tag promised: the site
            # flags a difference.
            host=self._host,
        )
        deadline_timer = self._loop.call_later(
            max(self.seconds_to_deadline(), 0.0),
            self._set_stop,
            "deadline",
            "the run's deadline was reached",
        )
        heartbeat = asyncio.create_task(self._heartbeats())
        outcomes: dict[str, int] = {"succeeded": 0, "failed": 0, "skipped": 0}
        self._gpus = await asyncio.to_thread(open_gpus) if self.gpu_telemetry else None
        try:
            if self.job.search is not None:
                outcomes = await run_job_search(self)
            else:
                for trial in self.job.trials:
                    if self._stop_request is not None:
                        self._skip(trial)
                        outcomes["skipped"] += 1
                        continue
                    outcome = await self._run_trial(trial)
                    outcomes[outcome] += 1
        except Exception as exc:
            logger.exception("the run failed")
            self._set_stop("failed", f"agent error: {type(exc).__name__}: {exc}")
        finally:
            deadline_timer.cancel()
            heartbeat.cancel()
            engine = self._engine
            if engine is not None:
                await asyncio.to_thread(engine.stop)
            if self._gpus is not None:
                self._gpus.close()
        stop = self._stop_request
        summary = RunSummary(
            outcome=stop.outcome if stop else "succeeded",
            reason=stop.reason if stop else "",
            trials_succeeded=outcomes["succeeded"],
            trials_failed=outcomes["failed"],
            trials_skipped=outcomes["skipped"],
        )
        self.emit(
            protocol.RunFinished,
            outcome=summary.outcome,
            reason=summary.reason[:2000],
        )
        return summary

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_every)
            self.emit(protocol.Heartbeat, trial=self.current_trial)

    async def measure_trial(self, trial: protocol.TrialSpec, effort: float) -> TrialRecord:
        """Measures ``trial`` for a search at ``effort`` (1: as any run does, reported; less:
        the workload at that effort, not reported); what it found."""
        self._effort, self._record = effort, TrialRecord()
        try:
            await self._run_trial(trial)
            record = self._record
            record.capacity = self.capacity
            return record
        finally:
            self._effort, self._record = 1.0, None

    def reported_outcome(self, index: int) -> str | None:
        """How trial ``index`` ended as reported (``trial_finished``), or None: not yet."""
        return self._reported.get(index)

    def skip_trial(self, index: int, reason: str) -> None:
        """Reports trial ``index`` skipped, with ``reason`` as its log line."""
        self.emit(
            protocol.TrialFinished,
            trial=index,
            outcome="skipped",
            log_tail=reason,
        )

    def _skip(self, trial: protocol.TrialSpec) -> None:
        stop = self._stop_request
        self.emit(
            protocol.TrialFinished,
            trial=trial.index,
            outcome="skipped",
            failure_class="deadline" if stop and stop.outcome == "deadline" else None,
            log_tail=f"not run: {stop.reason}" if stop else "",
        )

    def _redacted(self, text: str) -> str:
        for secret, name in (
            (self.engine_options.hf_token, "[HF_TOKEN]"),
            (self.engine_options.endpoint_api_key, "[ENDPOINT_API_KEY]"),
            (self.engine_options.judge_api_key, "[JUDGE_API_KEY]"),
        ):
            text = text.replace(secret, name) if secret else text
        return text

    def _finish_trial(
        self, trial: int, outcome: str, failure_class: str | None = None, log_tail: str = ""
    ) -> str:
        log_tail = self._redacted(log_tail)
        if self._record is not None:
            self._record.outcome, self._record.failure_class = outcome, failure_class
        self.emit(
            protocol.TrialFinished,
            trial=trial,
            outcome=outcome,
            failure_class=failure_class,
            log_tail=log_tail,
            capacity=self.capacity,
        )
        return outcome

    def _stopped_outcome(self, trial: int, log_tail: str = "") -> str:
        """The trial was cut short by a stop request: deadline → failed, else skipped."""
        stop = self._stop_request
        assert stop is not None
        if stop.outcome == "deadline":
            return self._finish_trial(trial, "failed", "deadline", log_tail or stop.reason)
        return self._finish_trial(trial, "skipped", None, log_tail or stop.reason)

    def _new_engine(self, trial: protocol.TrialSpec) -> ProcessEngine:
        """A fresh engine for ``trial`` (raises ``ServeGridError`` for a refused config)."""
        return trial_engine(
            self.job,
            trial.serve_config,
            workdir=self.workdir / f"trial-{trial.index}",
            options=self.engine_options,
            weights_dir=None if self.job.model.local_path else self.weights_dir,
            startup_timeout=self.seconds_to_deadline(),
            lora_dir=self.lora_dir,
        )

    async def _run_trial(self, trial: protocol.TrialSpec) -> str:
        index = trial.index
        self.current_trial = index
        self.capacity = None
        try:
            engine = self._new_engine(trial)
        except ServeGridError as exc:
            problems = "; ".join(f"{e.field}: {e.message}" for e in exc.errors)
            self.emit(
                protocol.TrialStarted,
                trial=index,
                serve_config=trial.serve_config,
                command=[],
            )
            return self._finish_trial(index, "failed", "unsupported_flag", problems)
        self.emit(
            protocol.TrialStarted,
            trial=index,
            serve_config=trial.serve_config,
            command=engine.argv,
        )
        # The image's CUDA on this pod's driver: known before the weights are fetched, and the
        # same for every trial of the pod (vLLM's own error on it explains nothing).
        host = self._host
        if self.job.engine.kind == "vllm" and host is not None:
            problem = protocol.cuda_driver_problem(
                image_cuda=host.image_cuda_version, driver=host.driver_version
            )
            if problem is not None:
                return self._finish_trial(index, "failed", protocol.CUDA_DRIVER_TOO_OLD, problem)
        refused = await self._prepare_weights(index)
        if refused is not None:
            failure_class, reason = refused
            self._set_stop("failed", reason)
            return self._finish_trial(index, "failed", failure_class, reason)
        if self._stop_request is not None and not self._weights_ready:
            return self._stopped_outcome(index)
        try:
            return await self._serve_with_restarts(trial, engine)
        finally:
            if self._engine is not None:
                await asyncio.to_thread(self._engine.stop)
            self._engine = None
            self.current_trial = None

    async def _prepare_weights(self, index: int) -> tuple[str, str] | None:
        """Fetches the job's weights once (see the module docstring) and loads their
        tokenizer; ``(failure_class, reason)`` when they cannot be had, else None (also when
        a stop abandoned the download)."""
        if self._weights_ready:
            return None
        model = self.job.model
        # The model's own snapshot (unless it is on disk already), then its companions: LoRA
        # adapters and speculative draft models, which vLLM reads from the same cache.
        wanted = [*([] if model.local_path else [model]), *companion_snapshots(self.job)]
        fetched = []
        for source in wanted:
            weights = await self._fetched(source)
            if weights is None:
                return None  # a stop abandoned the download: the stop's outcome is the trial's
            if isinstance(weights, WeightsError):
                return weights.failure_class, str(weights)
            fetched.append(weights)
        if fetched:
            # The model's download, the others beside it (a model already on disk: the first
            # companion's, as that is what was downloaded first).
            detail = fetched[0].detail()
            if len(fetched) > 1:
                detail["companions"] = [weights.detail() for weights in fetched[1:]]
            self.emit(
                protocol.ColdStartPhase,
                trial=index,
                phase=protocol.WEIGHTS_PHASE,
                seconds=sum(weights.seconds for weights in fetched),
                detail=detail,
            )
        for source, weights in zip(wanted, fetched, strict=True):
            if isinstance(source, protocol.LoraAdapter):
                _link(self.lora_dir / source.name, weights.path)
        folder = Path(model.local_path) if model.local_path else fetched[0].path
        self.tokenizer = self._tokenizer_of(folder)
        self._weights_ready = True
        return None

    async def _fetched(self, source) -> Weights | WeightsError | None:
        """``source``'s snapshot in the weights cache, its refusal, or None when a stop came
        first (the download is abandoned)."""
        options = self.engine_options
        fetch = asyncio.ensure_future(
            _in_daemon_thread(
                weights_fetch,
                source,
                cache_dir=self.weights_dir / "hub",
                token=options.hf_token,
                offline=options.hub_offline,
                endpoint=options.hub_endpoint,
                disk_reserve_bytes=options.disk_reserve_bytes,
            )
        )
        stopped = asyncio.ensure_future(self._stop.wait())
        await asyncio.wait({fetch, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not fetch.done():
            fetch.cancel()
            return None
        try:
            return fetch.result()
        except WeightsError as exc:
            return exc

    @staticmethod
    def _tokenizer_of(folder: Path):
        """The model's own tokenizer from its files, or None (prompts then are estimated in
        length, and the server's counts are reported)."""
        try:
            return load_tokenizer(str(folder))
        except TokenizerError as exc:
            logger.warning("prompts without the model's tokenizer: %s", exc)
            return None

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
