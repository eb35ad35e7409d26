"""Optional tokenizers: exact prompt lengths when ``tokenizers`` or ``transformers`` is present.

Guarantees:

- Nothing here is required: without a tokenizer the load generator builds approximate prompts
  and reports the server's ``usage.prompt_tokens``.
- ``load_tokenizer`` reads local files only (a ``tokenizer.json`` file or a model folder) and
  never downloads; it raises ``TokenizerError`` with a clear reason otherwise.
  ``cached_model_folder`` finds a model's folder in the local Hugging Face cache, offline.
- Anything with ``encode``, ``decode`` and ``vocab_size`` (the ``Tokenizer`` protocol) works;
  ``special_tokens`` (default 0) counts what the server adds to a completion prompt (a BOS
  token: vLLM tokenizes completions with special tokens), so prompts can be built that many
  tokens shorter and reach the server at exactly the requested length, as
  ``vllm bench serve``'s random dataset does.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Protocol


class TokenizerError(RuntimeError):
    """The tokenizer named on the command line cannot be loaded."""


class Tokenizer(Protocol):
    """What prompt building needs from a tokenizer (no special tokens added)."""

    vocab_size: int
    special_tokens: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class _FastTokenizer:
    """A ``tokenizers.Tokenizer`` read from ``tokenizer.json``."""

    def __init__(self, path: Path):
        from tokenizers import Tokenizer as HfTokenizer

        self._tokenizer = HfTokenizer.from_file(str(path))
        self.vocab_size = self._tokenizer.get_vocab_size(with_added_tokens=False)
        processor = self._tokenizer.post_processor  # adds BOS/EOS when encoding with them
        self.special_tokens = 0 if processor is None else processor.num_special_tokens_to_add(False)

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=True)


class _TransformersTokenizer:
    """A ``transformers`` tokenizer read from a local model folder."""

    def __init__(self, path: Path):
        from transformers import AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self.vocab_size = len(self._tokenizer)
        self.special_tokens = self._tokenizer.num_special_tokens_to_add()

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=True)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _hub_cache() -> Path:
    """The Hugging Face hub cache, where ``huggingface_hub`` puts it."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache.expanduser() / "huggingface" / "hub"


def cached_model_folder(model: str) -> Path | None:
    """``model`` as a local folder: the folder itself, or the snapshot the local Hugging
    Face cache holds of that repository id (its ``main`` revision, else its only snapshot);
    None when there is none. Reads the disk only, never the network."""
    folder = Path(model).expanduser()
    if folder.is_dir():
        return folder
    if model.count("/") != 1 or any(part in ("", ".", "..") for part in model.split("/")):
        return None  # not a repository id
    repository = _hub_cache() / f"models--{model.replace('/', '--')}"
    main = repository / "refs" / "main"
    if main.is_file():
        snapshot = repository / "snapshots" / main.read_text().strip()
        return snapshot if snapshot.is_dir() else None
    snapshots = [s for s in (repository / "snapshots").glob("*") if s.is_dir()]
    return snapshots[0] if len(snapshots) == 1 else None


def load_tokenizer(path: str | None) -> Tokenizer | None:
    """The tokenizer at ``path`` (``None`` or ``"none"``: no tokenizer)."""
    if path is None or path.lower() == "none":
        return None
    location = Path(path).expanduser()
    if not location.exists():
        raise TokenizerError(f"tokenizer path {path!r} does not exist (local paths only)")
    tokenizer_json = location if location.is_file() else location / "tokenizer.json"
    try:
        if _installed("transformers") and location.is_dir():
            return _TransformersTokenizer(location)
        if _installed("tokenizers") and tokenizer_json.is_file():
            return _FastTokenizer(tokenizer_json)
    except Exception as exc:  # each library has its own error types
        raise TokenizerError(f"cannot load tokenizer from {path!r}: {exc}") from exc
    if not (_installed("tokenizers") or _installed("transformers")):
        raise TokenizerError(
            "--tokenizer needs the optional 'tokenizers' or 'transformers' package; "
            "install one, or pass --tokenizer none for approximate prompt lengths"
        )
    raise TokenizerError(f"no tokenizer.json at {str(tokenizer_json)!r}")
