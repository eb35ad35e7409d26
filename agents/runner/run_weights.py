"""The run's weights (``JobRunner``'s part): the model and its companions fetched once, into
the machine's weights cache, before the first trial's engine starts.

Guarantees (the runner's docstring says them for the whole run): only what vLLM loads is
fetched (``agents.weights``), reported as the first trial's ``weights_downloaded`` phase; a
model that cannot be had is refused with its failure class before any vLLM starts; a stop
abandons the download in its daemon thread, which never keeps the agent's process alive;
every LoRA adapter is linked under its name for the trials' commands; the model's own
tokenizer builds every prompt when its files have one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from agents import protocol
from agents.loadgen import TokenizerError, load_tokenizer
from agents.weights import Weights, WeightsError, weights_fetch

logger = logging.getLogger(__name__)


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


class RunWeights:
    """The weights' part of ``JobRunner``: uses its ``job``, ``engine_options``,
    ``weights_dir``, ``lora_dir``, ``emit`` and stop event, and sets ``tokenizer`` and
    ``_weights_ready``."""

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
