"""The simulator as a trial's engine, in its own time: a simulated trial is a pure function of
its job and its seeds, whatever the host computing it is doing.

Guarantees:

- The configuration is checked and built exactly as the simulator's server builds it (the
  same argv, parsed by ``agents.engines.sim.command``): the same refusals in vLLM's words,
  classified by the rules that classify real vLLM's log.
- Start-up phases are the simulator's own durations (``cold_start_seconds``) in simulated
  seconds, in the order and with the details the server's log would give at speed 1; the
  first-token probe is one single-token request through the trial's scheduler.
- Levels run on ``agents.predict.OfflineBench`` in simulated time on the engine's one
  scheduler (its prefix cache and KV blocks carry over between levels), with the step noise of
  the job's noise seed when it has one. Nothing reads the host's clock.
- A level is computed in a worker thread, one at a time; a stop takes effect between levels.
- What the simulator's server would log at start-up is kept in ``tail`` and, like an engine
  process's log, in ``sim.log`` in the trial's work folder.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path

from agents.engines.base import EngineFailed, FailureKind, Phase, PhaseCallback, StartReport
from agents.engines.sim.command import SimSetup, argument_parser, build_scheduler
from agents.engines.sim.completions import SIM_VERSION
from agents.engines.sim.scheduler import SimRequest, simulate
from agents.engines.sim.startup import cold_start_seconds
from agents.engines.vllm_log import classify_failure
from agents.hardware import GIB, StartRefusal
from agents.loadgen.config import BenchConfig
from agents.loadgen.events import Event
from agents.predict import OFFLINE_URL, OfflineBench

# The simulator's server argv starts with ``python -m agents.engines.sim``.
_MODULE_ARGS = 3


def _reported_argv(argv: list[str]) -> list[str]:
    words = argv[_MODULE_ARGS:]
    model_spec, rest = Path(words[0]).name, words[1:]
    kept: list[str] = []
    skip = False
    for word in rest:
        if skip:
            skip = False
        elif word in ("--host", "--port"):
            skip = True
        else:
            kept.append(word)
    return ["benchsite-agent", "serve-sim", model_spec, *kept]


class OfflineSimEngine:
    """One trial's simulator, started and measured in simulated time (module docstring)."""

    name = "sim"
    simulated = True
    accepts_ignore_eos = True
    base_url = OFFLINE_URL

    def __init__(self, *, argv: list[str], workdir: Path):
        """``argv``: the simulator server's command (``agents.engines.sim.engine``), whose
        arguments say what to simulate; nothing is executed. ``self.argv`` is that command
        as the trial reports it: no address (nothing listens) and the model file by name,
        so that it is the same wherever the run is computed."""
        self._server_argv = list(argv)
        self.argv = _reported_argv(argv)
        self.workdir = Path(workdir)
        self.tail: deque[str] = deque(maxlen=60)
        self._setup: SimSetup | None = None
        self._probe_end = 0.0

    # -- the engine's life ---------------------------------------------------------------

    def start(self, on_phase: PhaseCallback | None = None) -> StartReport:
        """Builds the trial's scheduler and reports its simulated start-up; raises
        ``EngineFailed`` where vLLM would refuse the configuration."""
        args = argument_parser().parse_args(self._server_argv[_MODULE_ARGS:])
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "sim.log").write_text("", encoding="utf-8")  # this start's log only
        self._log(f"SIMULATED vLLM ({SIM_VERSION}) in simulated time; GPU={args.gpu}")
        try:
            setup = build_scheduler(args)
        except StartRefusal as refusal:
            lines = [
                "Traceback (most recent call last):",
                *str(refusal).splitlines(),
                "RuntimeError: Engine core initialization failed. See root cause above.",
            ]
            self._log(*lines)
            kind, message, evidence = classify_failure(lines, default=FailureKind.CRASH)
            raise EngineFailed(
                kind, f"{message} (exit code 1)", evidence=evidence, exit_code=1, log_tail=lines
            ) from None
        self._setup = setup
        phases = self._phases(setup)
        for phase in phases:
            self._log(f"[{phase.at:9.3f} s simulated] {phase.name} {phase.detail or ''}".rstrip())
            if on_phase is not None:
                on_phase(phase)
        return StartReport(
            engine=self.name,
            argv=self.argv,
            base_url=self.base_url,
            phases=phases,
            simulated=True,
            version=SIM_VERSION,
        )

    def _log(self, *lines: str) -> None:
        self.tail.extend(lines)
        with (self.workdir / "sim.log").open("a", encoding="utf-8") as log:
            log.writelines(f"{line}\n" for line in lines)

    def _phases(self, setup: SimSetup) -> list[Phase]:
        model, settings, scheduler = setup.model, setup.settings, setup.scheduler
        plan = scheduler.step_model.plan
        seconds = cold_start_seconds(model, settings)
        probe = simulate(scheduler, [SimRequest(0, 1, 1)])
        self._probe_end = probe.requests[0].token_times[-1]
        at = 0.0
        phases = [Phase("process_start", 0.0, {})]
        at += seconds["init"] + seconds["weights"]
        phases.append(
            Phase(
                "weights_loaded",
                at,
                {"weights_gib": plan.weight_bytes / GIB, "load_seconds": seconds["weights"]},
            )
        )
        at += seconds["profile"]
        phases.append(Phase("kv_cache_sized", at, {"kv_cache_tokens": plan.kv_tokens}))
        if not settings.enforce_eager:
            at += seconds["graphs"]
            phases.append(Phase("graphs_captured", at, {"capture_seconds": seconds["graphs"]}))
        init = seconds["profile"] + seconds["graphs"]
        phases.append(Phase("engine_initialized", at, {"init_seconds": init}))
        at += seconds["api"]
        phases.append(Phase("server_listening", at, {}))
        phases.append(Phase("health_ready", at, {}))
        phases.append(
            Phase("first_token", at + self._probe_end, {"probe_ttft_ms": 1000 * self._probe_end})
        )
        return phases

    def stop(self) -> None:
        """Nothing runs between levels: there is nothing to stop."""

    def kill(self) -> None:
        """As ``stop``."""

    def exit_status(self) -> EngineFailed | None:
        """Never fails once started: the simulator cannot crash under load."""
        return None

    # -- measuring -----------------------------------------------------------------------

    async def bench_events(self, config: BenchConfig, stop: asyncio.Event) -> AsyncIterator[Event]:
        """``config``'s levels as ``agents.loadgen.run_bench`` reports them, in simulated
        time; ``stop`` ends it before the next level."""
        if self._setup is None:
            raise RuntimeError("start() first")
        bench = OfflineBench(config, self._setup.scheduler)
        bench.now = self._probe_end
        events = bench.events()
        while not stop.is_set():
            event = await asyncio.to_thread(next, events, None)
            if event is None:
                return
            yield event
