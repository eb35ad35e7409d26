"""The model registration form, translated to and from the API's model payload: checked by the
API's serializer and written by the catalogue service, so the page gives the API's errors by
its field paths and stores nothing when one is refused.

A model is typed (its columns) or read from its config.json: pasted, uploaded, or read from
the hub with the organization's token, as the API's ``hf_config`` and ``hf_config_from_hub``.
With a config the typed columns are left out of the payload: the config gives them.
"""

from __future__ import annotations

import functools

from frontend.experiments.form_text import literal, shown_text
from runs.actors import Actor
from runs.errors import DomainValidationError
from runs.inputs.catalogue import ModelSpecSerializer
from runs.inputs.errors import flatten_errors
from runs.inputs.strict_fields import StrictIntegerField
from runs.model_config import HF_CONFIG_COLUMNS, MAX_HF_CONFIG_BYTES, hf_config_from_text
from runs.models import Membership, ModelSpec
from runs.services.catalogue import MODEL_SPEC_FIELDS, model_spec_create, model_spec_update
from runs.services.hub_config import hf_config_fetch

# The form's inputs beside the columns: a pasted config.json and "read it from the hub".
CONFIG_INPUTS = ("hf_config", "hf_config_from_hub")


def model_form_from_post(data) -> dict[str, str]:
    return {name: data.get(name, "") for name in (*MODEL_SPEC_FIELDS, *CONFIG_INPUTS)}


def model_form_from_fields(fields: dict) -> dict[str, str]:
    return {name: shown_text(fields.get(name, "")) for name in MODEL_SPEC_FIELDS}


def _config_source(values: dict[str, str], upload) -> dict:
    """The payload's config part: ``hf_config`` read from the pasted or uploaded text,
    ``hf_config_from_hub``, or nothing (the columns are typed); at most one of them."""
    pasted = values.get("hf_config", "").strip()
    from_hub = bool(values.get("hf_config_from_hub"))
    if sum((bool(pasted), upload is not None, from_hub)) > 1:
        raise DomainValidationError.single(
            "hf_config", "Give one config.json: pasted, uploaded or read from the hub."
        )
    if from_hub:
        return {"hf_config_from_hub": True}
    if upload is not None:
        # One byte past the limit is enough to refuse it; the rest is never read.
        return {"hf_config": hf_config_from_text(upload.read(MAX_HF_CONFIG_BYTES + 1))}
    if pasted:
        return {"hf_config": hf_config_from_text(pasted)}
    return {}


def model_submit(
    *,
    values: dict[str, str],
    membership: Membership,
    actor: Actor,
    model: ModelSpec | None,
    upload=None,
) -> tuple[ModelSpec | None, dict[str, list[str]]]:
    """Registers (or changes) a model through the API's serializer and the catalogue service;
    returns the model, or the errors by field path with nothing stored. ``upload``: an
    uploaded config.json (a file), or None."""
    try:
        config = _config_source(values, upload)
    except DomainValidationError as exc:
        return None, exc.fields
    # The API takes numbers as JSON numbers: typed text becomes one where it reads as one.
    numbers = {
        name
        for name, field_ in ModelSpecSerializer().fields.items()
        if isinstance(field_, StrictIntegerField)
    }
    payload = {
        name: literal(value.strip()) if name in numbers else value
        for name, value in values.items()
        if value != ""
        and name in MODEL_SPEC_FIELDS
        # A config gives the architecture columns: what is typed there is not sent.
        and not (config and name in HF_CONFIG_COLUMNS)
    }
    payload.setdefault("revision", "main")
    for optional in ("licence", "notes"):
        payload.setdefault(optional, "")
    fetch = functools.partial(hf_config_fetch, org=membership.organization)
    serializer = ModelSpecSerializer(
        model, data=payload | config, context={"hf_config_fetch": fetch}
    )
    if not serializer.is_valid():
        return None, flatten_errors(serializer.errors)
    try:
        if model is None:
            saved = model_spec_create(
                org=membership.organization, actor=actor, **serializer.validated_data
            )
        else:
            saved = model_spec_update(model=model, actor=actor, **serializer.validated_data)
    except DomainValidationError as exc:
        return None, exc.fields
    return saved, {}
