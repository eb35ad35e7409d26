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
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pydantic

from agents import protocol
from agents.engines.process import ProcessEngine
from agents.protocol import JobSpec, ServeGridError
from agents.runner.engine_life import ENGINE_EXIT_GRACE, EngineLife
from agents.runner.hostfacts import agent_version, host_facts, vllm_version_of
from agents.runner.level_measuring import LevelMeasuring
from agents.runner.run_weights import RunWeights
from agents.runner.search_run import TrialRecord, run_job_search
from agents.runner.trial_engine import EngineOptions, trial_engine
from agents.telemetry import NvmlGpus, open_gpus

logger = logging.getLogger(__name__)

Emit = Callable[[dict], None]

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


class JobRunner(RunWeights, EngineLife, LevelMeasuring):
    """Runs one ``JobSpec`` (see the module docstring). Its parts by job: the run's weights
    (``agents.runner.run_weights``), a trial's engine life (``agents.runner.engine_life``)
    and the measuring of its levels (``agents.runner.level_measuring``)."""

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
