"""One agent session: a job, its runner, its outbox, signals and the final summary.

Guarantees:
- With a site in the job (``report.ws_url`` / ``report.rest_url``) every message is spooled
  on disk and delivered (socket, else REST batch); without one, the messages are written to
  ``<workdir>/messages.jsonl`` (the results folder) and nothing is sent anywhere. Either way
  the journal holds every message the agent produced.
- A cancel from the site, SIGTERM or SIGINT stops the run within seconds (the engine is
  stopped, ``run_finished`` says why); a site that refuses the run token stops it too, so no
  GPU keeps running for a run nobody will read.
- After the run the agent keeps delivering for up to ``drain_timeout`` seconds, SIGTERM
  notwithstanding; what is still undelivered stays in ``<workdir>/spool``
  (``benchsite-agent flush`` sends it later).
"""

from __future__ import annotations

import hashlib
import logging
import signal
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from agents import protocol
from agents.evaluation import EvaluationSetError
from agents.loadgen import event_loop_runner
from agents.protocol import JobSpec
from agents.runner.outbox import DeliveryReport, Outbox, SiteEndpoints
from agents.runner.runner import JobRunner, RunSummary
from agents.runner.trial_engine import EngineOptions

logger = logging.getLogger(__name__)

JOURNAL = "messages.jsonl"
SPOOL = "spool"

EXIT_OK = 0
EXIT_STOPPED = 3  # cancelled, deadline, or the run failed as a whole
EXIT_UNDELIVERED = 4  # messages are left in the spool


class SessionError(RuntimeError):
    """The session cannot start (e.g. a site to report to but no run token)."""


@dataclass(frozen=True)
class SessionResult:
    summary: RunSummary
    delivery: DeliveryReport
    journal: Path

    @property
    def exit_code(self) -> int:
        if self.delivery.pending:
            return EXIT_UNDELIVERED
        return EXIT_OK if self.summary.outcome == "succeeded" else EXIT_STOPPED


def site_endpoints(job: JobSpec, token: str | None) -> SiteEndpoints | None:
    """Where the job reports, or None for a results folder only."""
    if not (job.report.ws_url or job.report.rest_url):
        return None
    if not token:
        raise SessionError(
            "the job reports to a site but BENCHSITE_TOKEN (the run token) is not set"
        )
    if not job.report.rest_url:
        raise SessionError(
            "the job reports to a site but has no report.rest_url: the agent gets its epoch "
            "(its sequence space) there"
        )
    return SiteEndpoints(
        run_id=str(job.run_id),
        token=token,
        ws_url=job.report.ws_url,
        rest_url=job.report.rest_url,
    )


def _site_file(site: SiteEndpoints, route: str, *, what: str, accept: str, **parts: str) -> bytes:
    """The run's file at ``route`` on the site, with the run token; ``SessionError`` naming
    ``what`` and the HTTP status when the site does not answer 200."""
    url = protocol.agent_route(site.rest_url, route, run_id=site.run_id, **parts)
    response = httpx.get(
        url, headers={"Authorization": f"Bearer {site.token}", "Accept": accept}, timeout=60
    )
    if response.status_code != 200:
        raise SessionError(f"{what}: the site answered {response.status_code}")
    return response.content


def _keep(target: Path, raw: bytes) -> None:
    """Writes ``target`` whole or not at all (a file cut short is never found later)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    partial.write_bytes(raw)
    partial.replace(target)


def dataset_fetcher(
    site: SiteEndpoints | None, workdir: Path, local_dir: Path | None
) -> Callable[[str], Path]:
    """Finds an uploaded dataset's file (ShareGPT or a trace, kept as uploaded):
    ``<local_dir>/<id>.json`` when given, else downloaded once from the site into
    ``<workdir>/datasets``."""

    def path_of(dataset_id: str) -> Path:
        if local_dir is not None:
            return Path(local_dir) / f"{dataset_id}.json"
        target = workdir / "datasets" / f"{dataset_id}.json"
        if target.exists():
            return target
        if site is None or not site.rest_url:
            raise SessionError(f"dataset {dataset_id}: no --dataset-dir and no site to fetch from")
        raw = _site_file(
            site,
            protocol.AGENT_DATASET_ROUTE,
            what=f"dataset {dataset_id}",
            accept="application/json",
            dataset_id=dataset_id,
        )
        _keep(target, raw)
        return target

    return path_of


def evaluation_set_fetcher(
    site: SiteEndpoints | None, workdir: Path
) -> Callable[[str, str], bytes]:
    """Fetches an uploaded evaluation set's file from the site, once (kept in
    ``<workdir>/evaluation-sets``), and gives it only when its sha256 is the one the job
    names: a file that differs is refused (``EvaluationSetError`` saying so) and not kept,
    as is a set the site does not serve."""

    def fetch(set_id: str, sha256: str) -> bytes:
        target = workdir / "evaluation-sets" / f"{set_id}.jsonl"
        if target.exists():
            kept = target.read_bytes()
            if hashlib.sha256(kept).hexdigest() == sha256:
                return kept
        if site is None or not site.rest_url:
            raise EvaluationSetError(f"set {set_id}: no site to fetch it from")
        try:
            raw = _site_file(
                site,
                protocol.AGENT_EVALUATION_SET_ROUTE,
                what=f"set {set_id}",
                accept="application/jsonl",
                set_id=set_id,
            )
        except SessionError as error:
            raise EvaluationSetError(str(error)) from None
        except httpx.HTTPError as error:
            raise EvaluationSetError(f"set {set_id}: {type(error).__name__}") from None
        found = hashlib.sha256(raw).hexdigest()
        if found != sha256:
            raise EvaluationSetError(
                f"set {set_id}: the site's file has sha256 {found}, the job names {sha256}"
            )
        _keep(target, raw)
        return raw

    return fetch


@contextmanager
def _stop_on_signals(runner: JobRunner):
    """SIGTERM (the pod is being stopped) and SIGINT end the run cleanly."""

    def handler(signum, frame):
        runner.request_stop("cancelled", f"the agent received {signal.Signals(signum).name}")

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run_session(
    job: JobSpec,
    *,
    token: str | None,
    workdir: Path,
    engine_options: EngineOptions | None = None,
    dataset_dir: Path | None = None,
    drain_timeout: float = 600.0,
    deadline_margin: float = 15.0,
    connect=None,
    request_epoch=None,
    handle_signals: bool = True,
    runner_options: dict | None = None,
) -> SessionResult:
    """Runs ``job`` to its end and delivers its messages (see the module docstring)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    site = site_endpoints(job, token)
    runner: JobRunner | None = None

    def on_cancel(reason: str) -> None:
        if runner is not None:
            runner.request_stop("cancelled", f"cancelled from the site: {reason}".strip())

    def on_refused(reason: str) -> None:
        if runner is not None:
            runner.request_stop("failed", f"the site no longer accepts this run: {reason}")

    outbox = Outbox(
        run_id=str(job.run_id),
        spool_dir=workdir / SPOOL,
        journal_path=workdir / JOURNAL,
        site=site,
        on_cancel=on_cancel,
        on_refused=on_refused,
        **({"connect": connect} if connect is not None else {}),
        request_epoch=request_epoch,
    )
    runner = JobRunner(
        job,
        emit=outbox.emit,
        workdir=workdir,
        engine_options=engine_options,
        dataset_path=dataset_fetcher(site, workdir, dataset_dir),
        evaluation_set=evaluation_set_fetcher(site, workdir),
        deadline_margin=deadline_margin,
        **(runner_options or {}),
    )
    outbox.start()
    try:
        signals = _stop_on_signals(runner) if handle_signals else _no_context()
        with signals, event_loop_runner() as loop:
            summary = loop.run(runner.run())
    finally:
        with _deliver_through_sigterm() if handle_signals else _no_context():
            delivery = outbox.close(drain_timeout=drain_timeout if site else 0)
    return SessionResult(summary=summary, delivery=delivery, journal=workdir / JOURNAL)


@contextmanager
def _deliver_through_sigterm():
    """Once the run is over, SIGTERM (the pod is being stopped, the run has ended) no longer
    ends the agent: it keeps delivering what it holds until the drain timeout, and whoever
    stops it gives it time to (the local provider waits the site's delivery grace before it
    kills). SIGINT still interrupts: a person at a terminal means it."""

    def handler(signum, frame):
        logger.warning("SIGTERM while delivering the run's last messages: delivering first")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def _no_context():
    yield
