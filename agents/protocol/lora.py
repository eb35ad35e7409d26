"""LoRA adapters named in an experiment: served beside the model, requests spread over them.

Guarantees:

- ``LoraAdapter`` is one adapter as a job carries it: the name requests ask for (the
  ``model`` field), its Hugging Face repository and the revision it is pinned to; a name,
  repository or revision the hub could not have is refused when it is read.
- ``lora_adapters_problems`` is the experiment's check (the site's builder, API and pages
  share it): every problem a ``FieldError`` on its own path (``[1].name``), names distinct
  and never the served model's own.
- ``lora_serve_flags`` is the one place the adapters become ``vllm serve`` arguments:
  ``--enable-lora``, ``--lora-modules NAME=PATH…`` and, unless the grid sets ``max_loras``,
  ``--max-loras`` with every adapter (vLLM's default, 1, would serve them one at a time).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from pydantic import Field, model_validator

from agents.protocol.errors import FieldError, got_value
from agents.protocol.hub_names import hf_repo_problem, revision_problem
from agents.protocol.strict import StrictModel

MAX_LORA_ADAPTERS = 16
# A served name: what a request's ``model`` field says; vLLM reads "NAME=PATH".
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_NAME_RULE = "1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"


class LoraAdapter(StrictModel):
    """One adapter: ``name`` (what requests ask for), ``hf_repo`` at ``revision``."""

    name: str = Field(max_length=64)
    hf_repo: str = Field(max_length=200)
    revision: str = Field(max_length=100)

    @property
    def trust_remote_code(self) -> bool:
        """Always false: ``weights_fetch`` downloads an adapter as it does a model, and never
        any code of its own."""
        return False

    @model_validator(mode="after")
    def _servable(self) -> LoraAdapter:
        # The experiment's own check, so a job refuses exactly what the site refuses.
        for error in lora_adapters_problems([self.model_dump()], served_model_name=None):
            raise ValueError(f"{error.field.removeprefix('[0].')}: {error.message}")
        return self


def lora_adapters_problems(adapters: object, *, served_model_name: str | None) -> list[FieldError]:
    """Why ``adapters`` (a list of ``{name, hf_repo, revision}``) cannot be served; [] if it
    can. Paths are relative to the list (``[0].hf_repo``)."""
    if not isinstance(adapters, list):
        return [FieldError("", f"expected a list of adapters, {got_value(adapters)}")]
    if len(adapters) > MAX_LORA_ADAPTERS:
        return [FieldError("", f"at most {MAX_LORA_ADAPTERS} adapters; got {len(adapters)}")]
    errors: list[FieldError] = []
    seen: dict[str, int] = {}
    for index, adapter in enumerate(adapters):
        path = f"[{index}]"
        if not isinstance(adapter, Mapping):
            errors.append(FieldError(path, f"expected an object, {got_value(adapter)}"))
            continue
        for key in adapter:
            if key not in ("name", "hf_repo", "revision"):
                errors.append(FieldError(f"{path}.{key}", "not an adapter field"))
        name, repo, revision = (adapter.get(k) for k in ("name", "hf_repo", "revision"))
        if not isinstance(name, str) or not _NAME.match(name):
            errors.append(FieldError(f"{path}.name", f"expected {_NAME_RULE}"))
        elif name in seen:
            errors.append(FieldError(f"{path}.name", f"{name} is also adapter [{seen[name]}]"))
        elif name == served_model_name:
            errors.append(FieldError(f"{path}.name", "the served model has this name"))
        else:
            seen[name] = index
        if problem := hf_repo_problem(repo):
            errors.append(FieldError(f"{path}.hf_repo", problem))
        if revision is None:
            errors.append(FieldError(f"{path}.revision", "pin the adapter to a revision"))
        elif problem := revision_problem(revision):
            errors.append(FieldError(f"{path}.revision", problem))
    return errors


def lora_serve_flags(
    adapters: Sequence[LoraAdapter], paths: Mapping[str, str], config: Mapping[str, object]
) -> list[str]:
    """The ``vllm serve`` arguments serving ``adapters`` from ``paths`` (by adapter name: a
    local snapshot, or the repo id in a recipe); none without adapters."""
    if not adapters:
        return []
    modules = [f"{adapter.name}={paths[adapter.name]}" for adapter in adapters]
    flags = ["--enable-lora", "--lora-modules", *modules]
    if "max_loras" not in config:
        flags += ["--max-loras", str(len(adapters))]
    return flags
