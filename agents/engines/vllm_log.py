"""Reading vLLM's log: start-up phases from its lines, failure classes from its errors.

Guarantees:

- Patterns are taken from vLLM's own log statements (0.8 to 0.32; see docs/engines.md for
  the source lines) and match loosely: case-insensitive, any prefix (``(APIServer pid=…)
  INFO 11-29 …``), singular or plural units, so a reworded line in a new version still
  matches as long as its key words stay. A phase whose line changed beyond recognition is
  reported unknown, never guessed.
- ``classify_failure`` looks at the whole log and picks the most specific class whose
  evidence is there; each class keeps the lines that matched so a report can show them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from agents.engines.base import FailureKind

_NUM = r"([0-9][0-9,]*(?:\.[0-9]+)?)"


def _number(text: str) -> float | int:
    text = text.replace(",", "")
    return float(text) if "." in text else int(text)


@dataclass(frozen=True)
class PhasePattern:
    phase: str
    regex: re.Pattern[str]
    # Names of the captured numbers, in group order, for Phase.detail.
    fields: tuple[str, ...] = ()


PHASE_PATTERNS = (
    # GPU: "Model loading took 15.0 GiB memory and 4.2 seconds" (0.9+; "GB" before).
    PhasePattern(
        "weights_loaded",
        re.compile(
            rf"model (?:weights )?loading took {_NUM} ?gi?b(?: memory)? and {_NUM} ?s", re.I
        ),
        ("weights_gib", "load_seconds"),
    ),
    # V0: "Loading model weights took 14.99 GB".
    PhasePattern(
        "weights_loaded",
        re.compile(rf"loading model weights took {_NUM} ?gi?b", re.I),
        ("weights_gib",),
    ),
    # Every loader, CPU included: "Loading weights took 0.02 seconds".
    PhasePattern(
        "weights_loaded",
        re.compile(rf"loading weights took {_NUM} ?s", re.I),
        ("load_seconds",),
    ),
    # V1: "GPU KV cache size: 1,234,560 tokens" (CPU: "CPU KV cache size: …").
    PhasePattern(
        "kv_cache_sized",
        re.compile(rf"kv cache size: {_NUM} tokens", re.I),
        ("kv_cache_tokens",),
    ),
    # V0: "# GPU blocks: 7124, # CPU blocks: 2048".
    PhasePattern(
        "kv_cache_sized",
        re.compile(rf"# ?gpu blocks: {_NUM}", re.I),
        ("kv_cache_blocks",),
    ),
    PhasePattern(
        "graphs_captured",
        re.compile(rf"graph capturing finished in {_NUM} ?s", re.I),
        ("capture_seconds",),
    ),
    PhasePattern(
        "engine_initialized",
        re.compile(rf"init engine \(profile, create kv cache, warmup model\) took {_NUM}", re.I),
        ("init_seconds",),
    ),
    # "Starting vLLM server on http://…" (0.10+), "Starting vLLM API server on …",
    # "Starting vLLM API server 0 on …", or uvicorn's own line in older versions.
    PhasePattern(
        "server_listening",
        re.compile(r"starting vllm (?:api )?server(?: \d+)? on |uvicorn running on ", re.I),
    ),
)

# Sizes that appear before the phase they belong to: kept as detail of weights_loaded.
_CHECKPOINT_SIZE = re.compile(rf"checkpoint size: {_NUM} ?gi?b", re.I)
_VERSION_PATTERNS = (
    re.compile(r"initializing a v1 llm engine \(v([^)\s]+)\)", re.I),
    re.compile(r"vllm api server version ([0-9][^\s]*)", re.I),
    re.compile(r"version\s+([0-9]+\.[0-9]+\.[0-9][^\s]*)\s*$", re.I),
)


@dataclass
class LogPhases:
    """Feeds log lines one by one; collects the first sighting of each phase."""

    seen: dict[str, dict[str, float | int | str]]
    version: str | None = None
    checkpoint_gib: float | None = None

    def __init__(self) -> None:
        self.seen = {}
        self.version = None
        self.checkpoint_gib = None

    def feed(self, line: str) -> tuple[str, dict[str, float | int | str]] | None:
        """Returns ``(phase, detail)`` when this line is the first sighting of a phase."""
        if self.version is None:
            for pattern in _VERSION_PATTERNS:
                match = pattern.search(line)
                if match:
                    self.version = match.group(1)
                    break
        size = _CHECKPOINT_SIZE.search(line)
        if size:
            self.checkpoint_gib = _number(size.group(1))
        for pattern in PHASE_PATTERNS:
            match = pattern.regex.search(line)
            if not match:
                continue
            detail: dict[str, float | int | str] = {
                name: _number(value)
                for name, value in zip(pattern.fields, match.groups(), strict=False)
            }
            if pattern.phase in self.seen:
                # A later line may add facts to a phase already seen (GPU runners print both
                # "Loading weights took" and "Model loading took …").
                for key, value in detail.items():
                    self.seen[pattern.phase].setdefault(key, value)
                return None
            if pattern.phase == "weights_loaded" and self.checkpoint_gib is not None:
                detail.setdefault("checkpoint_gib", self.checkpoint_gib)
            self.seen[pattern.phase] = detail
            return pattern.phase, detail
        return None


@dataclass(frozen=True)
class FailureRule:
    kind: FailureKind
    regex: re.Pattern[str]
    message: str


# Most specific first: a KV-cache refusal also says "gpu_memory_utilization", and an OOM is
# followed by "Engine core initialization failed" in every case.
FAILURE_RULES = (
    FailureRule(
        FailureKind.KV_CACHE_TOO_SMALL,
        re.compile(
            r"larger than the available KV cache memory"
            r"|is larger than the maximum number of tokens that can be stored in KV cache"
            r"|estimated maximum model length is",
            re.I,
        ),
        "max_model_len is larger than the KV cache can hold",
    ),
    FailureRule(
        FailureKind.OOM_AT_STARTUP,
        re.compile(
            r"out of memory|OutOfMemoryError|No available memory for the cache blocks"
            r"|insufficient memory",
            re.I,
        ),
        "out of memory at start-up",
    ),
    FailureRule(
        FailureKind.UNSUPPORTED_FLAG,
        re.compile(
            r"error: unrecognized arguments|error: argument [-\w/ ]+:|invalid choice:"
            r"|error: ambiguous option|User-specified max_model_len \(\d+\) is greater"
            r"|must be divisible by tensor parallel size"
            r"|max_num_batched_tokens \(\d+\) is smaller than max_model_len",
            re.I,
        ),
        "vLLM refused a command-line flag or value",
    ),
    FailureRule(
        FailureKind.MODEL_NOT_FOUND,
        re.compile(
            r"Invalid repository ID or local directory|Repository Not Found"
            r"|is not a local folder and is not a valid model identifier"
            r"|does not appear to have a file named config\.json"
            r"|No such file or directory: .*config\.json|RepositoryNotFoundError"
            r"|LocalEntryNotFoundError|GatedRepoError"
            # vLLM 0.32 with a folder path that does not exist (seen on this machine).
            r"|HFValidationError: Repo id must be in the form",
            re.I,
        ),
        "the model could not be found",
    ),
)


def classify_failure(
    lines: Iterable[str], *, default: FailureKind = FailureKind.CRASH
) -> tuple[FailureKind, str, list[str]]:
    """The failure class shown by ``lines``, a message, and up to 5 lines of evidence.

    Falls back to ``default`` (with the last error-looking lines as evidence) when no rule
    matches.
    """
    lines = list(lines)
    for rule in FAILURE_RULES:
        evidence = [line for line in lines if rule.regex.search(line)]
        if evidence:
            return rule.kind, rule.message, evidence[:5]
    # Log levels and Python's own words, case-sensitive: vLLM's WARNING lines mention
    # "error" often and would crowd out the real cause.
    errorish = re.compile(
        r"\b(?:ERROR|CRITICAL|FATAL)\b|Traceback|\w+Error\b|\w+Exception\b|Killed"
        r"|Illegal instruction|Segmentation fault|core dumped"
    )
    quiet = re.compile(r"\b(?:WARNING|INFO|DEBUG)\b")
    evidence = [line for line in lines if errorish.search(line) and not quiet.search(line)][-5:]
    return default, "the engine exited", evidence
