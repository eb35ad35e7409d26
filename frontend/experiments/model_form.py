"""The model registration form, translated to and from the API's model payload: checked by the
API's serializer and written by the catalogue service, so the page gives the API's errors by
its field paths and stores nothing when one is refused."""

from __future__ import annotations

from frontend.experiments.form_text import literal, shown_text
from runs.actors import Actor
from runs.errors import DomainValidationError
from runs.inputs.catalogue import ModelSpecSerializer
from runs.inputs.errors import flatten_errors
from runs.inputs.strict_fields import StrictIntegerField
from runs.models import Membership, ModelSpec
from runs.services.catalogue import MODEL_SPEC_FIELDS, model_spec_create, model_spec_update


def model_form_from_post(data) -> dict[str, str]:
    return {name: data.get(name, "") for name in MODEL_SPEC_FIELDS}


def model_form_from_fields(fields: dict) -> dict[str, str]:
    return {name: shown_text(fields.get(name, "")) for name in MODEL_SPEC_FIELDS}


def model_submit(
    *, values: dict[str, str], membership: Membership, actor: Actor, model: ModelSpec | None
) -> tuple[ModelSpec | None, dict[str, list[str]]]:
    """Registers (or changes) a model through the API's serializer and the catalogue service;
    returns the model, or the errors by field path with nothing stored."""
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
    }
    payload.setdefault("revision", "main")
    for optional in ("licence", "notes"):
        payload.setdefault(optional, "")
    serializer = ModelSpecSerializer(model, data=payload)
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
