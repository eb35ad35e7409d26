"""A registered model's facts from its Hugging Face config.json, as ``agents.hardware``
reads it: the one truth of what a config says (nothing is derived here).

Guarantees:

- ``model_facts_from_hf_config`` gives, for any JSON value, the ``ModelSpec`` columns
  ``agents.hardware`` reads (``REGISTERED_FACTS`` less the repo) and ``architecture``
  (``ModelFacts.to_architecture``, checked by the protocol's ``ModelArchitecture``, which
  the job carries), or raises ``DomainValidationError`` on ``hf_config`` whose message names
  the config's key: a model type the simulator cannot describe, a missing or mistyped key, a
  fact beyond what a job can carry. It raises nothing else.
- ``hf_config_from_text`` reads a pasted or uploaded config.json: a JSON object of at most
  ``MAX_HF_CONFIG_BYTES``, bounded in depth before it is decoded, or a
  ``DomainValidationError`` on ``hf_config``.
- ``model_facts_problem`` says why a model about to be stored (its columns and its
  architecture) would not give ``ModelFacts``, or None: the check that keeps
  ``ModelSpec.facts`` and the job's ``ModelSource`` from ever failing on a stored model.
"""

from __future__ import annotations

from collections.abc import Mapping

import pydantic

from agents import protocol
from agents.hardware import REGISTERED_FACTS, ModelFacts
from runs.errors import DomainValidationError

HF_CONFIG_FIELD = "hf_config"
# Published config.json files are a few kilobytes (a multimodal wrapper's some ten).
MAX_HF_CONFIG_BYTES = 256 * 1024
# The columns a config.json gives: every registered fact but the repo, which is the team's.
HF_CONFIG_COLUMNS = tuple(sorted(REGISTERED_FACTS - {"hf_repo"}))


def _refused(message: str) -> DomainValidationError:
    return DomainValidationError.single(HF_CONFIG_FIELD, message)


def hf_config_from_text(text: str | bytes) -> dict:
    """A config.json as pasted or uploaded; see the module's guarantees."""
    size = len(text.encode() if isinstance(text, str) else text)
    if size > MAX_HF_CONFIG_BYTES:
        raise _refused(
            f"A config.json is at most {MAX_HF_CONFIG_BYTES // 1024} KiB; this one is "
            f"{size // 1024} KiB."
        )
    try:
        config = protocol.json_loads_bounded(text)
    except ValueError as exc:  # JSONDecodeError, JsonTooDeep, UnicodeDecodeError
        raise _refused(f"Not valid JSON: {exc}.") from None
    if not isinstance(config, dict):
        raise _refused("A config.json is a JSON object ({…}).")
    return config


def _whole(value: float, what: str) -> int:
    # A config may state its parameter count as a float (7.2e9); a column holds a whole one.
    if isinstance(value, float):
        if not value.is_integer():
            raise _refused(f"config.json: {what} must be a whole number, got {value:g}.")
        return int(value)
    return value


def model_facts_from_hf_config(config: object, *, hf_repo: str = "model") -> dict:
    """The columns and ``architecture`` of a model whose config.json is ``config``; see the
    module's guarantees (``hf_repo`` only names the model in messages)."""
    try:
        facts = ModelFacts.from_hf_config(config, name=hf_repo)
    except ValueError as exc:
        raise _refused(str(exc)) from None
    columns = facts.to_registered()
    columns["parameter_count"] = _whole(columns["parameter_count"], "the parameter count")
    architecture = facts.to_architecture()
    if "active_parameters" in architecture:
        architecture["active_parameters"] = _whole(
            architecture["active_parameters"], "the active parameter count"
        )
    try:
        protocol.ModelArchitecture.model_validate(architecture)
    except pydantic.ValidationError as exc:
        problems = protocol.pydantic_field_errors(exc, model=protocol.ModelArchitecture)
        raise _refused(
            "; ".join(f"{problem.field}: {problem.message}" for problem in problems)
        ) from None
    return {name: columns[name] for name in HF_CONFIG_COLUMNS} | {"architecture": architecture}


def model_facts_problem(spec: Mapping) -> str | None:
    """Why ``spec`` (a model's ``REGISTERED_FACTS`` columns and ``architecture``) gives no
    ``ModelFacts``, or None when it does."""
    architecture = spec.get("architecture") or {}
    try:
        protocol.ModelArchitecture.model_validate(architecture)
        ModelFacts.from_registered(
            **{name: spec[name] for name in REGISTERED_FACTS}, architecture=architecture
        )
    except pydantic.ValidationError as exc:
        problems = protocol.pydantic_field_errors(exc, model=protocol.ModelArchitecture)
        return "; ".join(f"{problem.field}: {problem.message}" for problem in problems)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None
