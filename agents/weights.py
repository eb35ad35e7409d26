"""A model's weights on this machine: fetched once from the Hugging Face hub into a cache,
then served offline by every trial.

Guarantees:

- ``weights_fetch`` asks the hub what the revision holds, picks only what vLLM loads
  (``vllm_files``: config, tokenizer and generation files, and one weight format: the
  safetensors when the repository has them, never the duplicate ``.bin``/``.pth`` copies or
  sub-folders such as ``original/``; the model's code files, ``*.py``, only when the job
  trusts its remote code), checks the free space of the cache's disk against the
  bytes still missing plus a reserve, and only then downloads (``huggingface_hub``: parallel,
  resumable, retried on network errors). Files already in the cache are not fetched again.
- Every refusal is a ``WeightsError`` whose ``failure_class`` is the protocol's
  (``model_access_denied`` for a gated or private repository the token cannot read,
  ``model_not_found`` for an unknown repository or revision, ``disk_too_small`` with the
  numbers, ``other`` for a hub that cannot be reached) and whose message names the
  repository and never holds the token.
- The cache is the hub's own layout (``cache_dir``), so ``vllm serve REPO --revision REV``
  finds the snapshot there with the hub offline: the command served is the command a
  deployment runs.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import HfApi, snapshot_download, try_to_load_from_cache
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import disable_progress_bars

from agents.protocol import HUB_OFFLINE_ENV, ModelSource

# What vLLM reads besides the weights: configs (any *.json at the top), tokenizers of every
# kind, and chat templates.
_SUPPORT_PATTERNS = (
    "*.json",
    "tokenizer.model",
    "*.tiktoken",
    "vocab.txt",
    "merges.txt",
    "*.jinja",
)
# With trust_remote_code, the model's own code as well: its modelling and tokenizer modules
# (``*.py``, which ``auto_map`` in config.json names) and the tokenizer files such code loads
# (Kimi's ``tiktoken.model``).
_CODE_PATTERNS = ("*.py", "*.model", "*.tiktoken")
# Weight formats in vLLM's order of preference: the first one the repository has is taken.
_WEIGHT_PATTERNS = (("*.safetensors",), ("*.bin",), ("*.pt", "*.pth"))
# Kept free beside the weights by default: vLLM's compile cache, logs and the trial's scratch.
DEFAULT_DISK_RESERVE_BYTES = 2 * 1024**3
DOWNLOAD_ATTEMPTS = 3


class WeightsError(RuntimeError):
    """The weights cannot be had; ``failure_class`` is the protocol's trial failure class."""

    def __init__(self, failure_class: str, message: str):
        super().__init__(message)
        self.failure_class = failure_class


@dataclass(frozen=True)
class Weights:
    """A snapshot on this machine and how it got there."""

    repo_id: str
    revision: str
    commit: str | None  # the revision's commit, when the hub was asked
    path: Path  # the snapshot folder (config.json, tokenizer, weights)
    files: int
    bytes_total: int
    bytes_downloaded: int
    seconds: float

    def detail(self) -> dict:
        """The ``weights_downloaded`` cold-start phase's detail (JSON)."""
        rate = self.bytes_downloaded / self.seconds / 1e6 if self.seconds > 0 else None
        return {
            "repo": self.repo_id,
            "revision": self.revision,
            "commit": self.commit,
            "files": self.files,
            "bytes": self.bytes_downloaded,
            "bytes_total": self.bytes_total,
            "seconds": round(self.seconds, 3),
            "mb_per_s": None if rate is None or not self.bytes_downloaded else round(rate, 1),
            "cached": self.bytes_downloaded == 0,
        }


def vllm_files(names: Iterable[str], *, code: bool = False) -> list[str]:
    """The repository files vLLM loads, in name order (see the module docstring); with
    ``code``, the model's own code files too (``trust_remote_code``), never without."""
    top = [name for name in names if "/" not in name]

    def matching(patterns: Iterable[str]) -> list[str]:
        return [name for name in top if any(fnmatch.fnmatch(name, p) for p in patterns)]

    chosen = set(matching(_SUPPORT_PATTERNS + (_CODE_PATTERNS if code else ())))
    for patterns in _WEIGHT_PATTERNS:
        weights = matching(patterns)
        if weights:
            chosen.update(weights)
            break
    return sorted(chosen)


def _human(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(count) < 1000 or unit == "TB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    raise AssertionError("unreachable")


def _access_error(
    repo_id: str, revision: str, exc: Exception, *, token: str | None
) -> WeightsError:
    """A hub refusal as the trial failure it is (messages never hold the token)."""
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, GatedRepoError):
        reason = (
            "is gated and no Hugging Face token was given"
            if token is None
            else "is gated and the organization's Hugging Face token has no access to it"
        )
        return WeightsError(
            "model_access_denied",
            f"{repo_id} {reason}: accept its terms on the hub with the token's account and "
            "set the token in the organization's settings",
        )
    if isinstance(exc, RevisionNotFoundError):
        return WeightsError("model_not_found", f"{repo_id}: the revision {revision} does not exist")
    if isinstance(exc, RepositoryNotFoundError) and status == 404:
        return WeightsError("model_not_found", f"{repo_id} does not exist on the hub")
    if isinstance(exc, RepositoryNotFoundError) or status in (401, 403):
        reason = "no Hugging Face token was given" if token is None else "the token cannot read it"
        return WeightsError(
            "model_access_denied",
            f"{repo_id} is private or does not exist, and {reason}",
        )
    return WeightsError("other", f"{repo_id}: the hub answered HTTP {status}")


def _cached(repo_id: str, name: str, *, commit: str, cache_dir: Path) -> bool:
    found = try_to_load_from_cache(repo_id, name, cache_dir=str(cache_dir), revision=commit)
    return isinstance(found, str)


def _repo_folder(cache_dir: Path, repo_id: str) -> Path:
    return cache_dir / ("models--" + repo_id.replace("/", "--"))


def _offline_snapshot(model: ModelSource, cache_dir: Path) -> Weights:
    """The cached snapshot when the hub may not be asked (``HF_HUB_OFFLINE``): the commit
    ``refs/<revision>`` names (or the revision itself, a commit), holding a ``config.json``."""
    started = time.monotonic()
    folder = _repo_folder(cache_dir, model.hf_repo)
    ref = folder / "refs" / model.revision
    commit = ref.read_text().strip() if ref.is_file() else model.revision
    path = folder / "snapshots" / commit
    if not (path / "config.json").is_file():
        raise WeightsError(
            "model_not_found",
            f"{model.hf_repo} (revision {model.revision}) is not in the weights cache "
            f"{cache_dir}, and the hub is offline ({HUB_OFFLINE_ENV}=1)",
        )
    files = [p for p in path.iterdir() if p.is_file()]
    return Weights(
        repo_id=model.hf_repo,
        revision=model.revision,
        commit=commit,
        path=path,
        files=len(files),
        bytes_total=sum(p.stat().st_size for p in files),
        bytes_downloaded=0,
        seconds=time.monotonic() - started,
    )


def weights_fetch(
    model: ModelSource,
    *,
    cache_dir: Path,
    token: str | None,
    offline: bool = False,
    endpoint: str | None = None,
    disk_reserve_bytes: int = DEFAULT_DISK_RESERVE_BYTES,
    free_bytes: Callable[[Path], int] = lambda path: shutil.disk_usage(path).free,
) -> Weights:
    """The snapshot of ``model`` (its ``hf_repo`` at its ``revision``) in ``cache_dir``,
    downloaded when missing; raises ``WeightsError`` (see the module docstring)."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    # Progress bars are for terminals: in a pod's log they are thousands of redrawn lines.
    disable_progress_bars()
    if offline:
        return _offline_snapshot(model, cache_dir)
    repo_id = model.hf_repo
    started = time.monotonic()
    api = HfApi(endpoint=endpoint, token=token)
    try:
        info = api.model_info(repo_id, revision=model.revision, files_metadata=True)
    except (GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError, HfHubHTTPError) as exc:
        raise _access_error(repo_id, model.revision, exc, token=token) from None
    except Exception as exc:  # the transport's errors differ between hub versions
        raise WeightsError(
            "other", f"{repo_id}: the hub cannot be reached ({type(exc).__name__}: {exc})"
        ) from None
    commit = info.sha
    sizes = {sibling.rfilename: sibling.size or 0 for sibling in info.siblings or []}
    wanted = vllm_files(sizes, code=model.trust_remote_code)
    if not any(name.endswith((".safetensors", ".bin", ".pt", ".pth")) for name in wanted):
        raise WeightsError(
            "model_not_found", f"{repo_id} (revision {model.revision}) holds no weights vLLM loads"
        )
    missing = [n for n in wanted if not _cached(repo_id, n, commit=commit, cache_dir=cache_dir)]
    needed = sum(sizes[name] for name in missing)
    free = free_bytes(cache_dir)
    if needed and needed + disk_reserve_bytes > free:
        raise WeightsError(
            "disk_too_small",
            f"{repo_id} needs {_human(needed)} more on {cache_dir} ({len(missing)} files) and "
            f"{_human(disk_reserve_bytes)} kept free beside them, but the disk has "
            f"{_human(free)} free: give the pod a larger disk or a network volume",
        )
    path = (
        _download(
            model, commit=commit, files=wanted, cache_dir=cache_dir, token=token, endpoint=endpoint
        )
        if missing
        else None
    )
    if path is None:  # everything was cached: the snapshot folder of that commit
        path = Path(
            snapshot_download(
                repo_id,
                revision=model.revision,
                cache_dir=str(cache_dir),
                allow_patterns=wanted,
                local_files_only=True,
            )
        )
        _write_ref(cache_dir, repo_id, model.revision, commit)
    return Weights(
        repo_id=repo_id,
        revision=model.revision,
        commit=commit,
        path=path,
        files=len(wanted),
        bytes_total=sum(sizes[name] for name in wanted),
        bytes_downloaded=needed,
        seconds=time.monotonic() - started,
    )


def _download(
    model: ModelSource,
    *,
    commit: str,
    files: list[str],
    cache_dir: Path,
    token: str | None,
    endpoint: str | None,
) -> Path:
    """Downloads ``files``, resuming what an earlier attempt left; the snapshot folder."""
    for attempt in range(1, DOWNLOAD_ATTEMPTS + 1):
        try:
            path = snapshot_download(
                model.hf_repo,
                # The branch or tag as given, so its ref is written and vLLM resolves it
                # offline exactly as `--revision` names it.
                revision=model.revision,
                cache_dir=str(cache_dir),
                allow_patterns=files,
                token=token,
                endpoint=endpoint,
            )
            return Path(path)
        except (GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError) as exc:
            raise _access_error(model.hf_repo, model.revision, exc, token=token) from None
        except HfHubHTTPError as exc:
            status = getattr(getattr(exc, "response", None), "status_code", None)
            if status in (401, 403):
                raise _access_error(model.hf_repo, model.revision, exc, token=token) from None
            error: Exception = exc
        except OSError as exc:
            if exc.errno == 28:  # ENOSPC: the disk filled up while downloading
                raise WeightsError(
                    "disk_too_small", f"{model.hf_repo}: the disk {cache_dir} filled up"
                ) from None
            error = exc
        except Exception as exc:  # network errors differ between hub versions
            error = exc
        if attempt < DOWNLOAD_ATTEMPTS:
            time.sleep(2.0 * attempt)
    raise WeightsError(
        "other",
        f"{model.hf_repo}: the download failed {DOWNLOAD_ATTEMPTS} times "
        f"({type(error).__name__}); what arrived is kept and resumed next time",
    )


def _write_ref(cache_dir: Path, repo_id: str, revision: str, commit: str) -> None:
    """Points ``refs/<revision>`` at ``commit`` (a branch may have moved since the cache was
    filled), so vLLM's offline look-up finds the snapshot that was checked."""
    if revision == commit:
        return
    target = _repo_folder(cache_dir, repo_id) / "refs" / revision
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{os.getpid()}")
    temporary.write_text(commit)
    temporary.replace(target)
