"""``StrictModel``: the base every protocol model shares (no unknown fields, no coercion,
immutable once validated)."""

from __future__ import annotations

from collections.abc import Mapping

import pydantic
from pydantic import (
    BaseModel,
    ConfigDict,
)
from pydantic_core import PydanticCustomError

from agents.protocol.errors import json_literal


class StrictModel(BaseModel):
    """Base of every protocol model: unknown fields are refused, types are never coerced
    (``"8"`` is not ``8``, ``true`` is not ``1``; an integer is accepted for a float), and an
    instance cannot be changed once validated. An object with more keys than the model has
    fields is refused as a whole, naming a few of the unknown keys, so that its cost and its
    error stay small whatever was sent."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @pydantic.model_validator(mode="before")
    @classmethod
    def _not_too_many_keys(cls, data: object) -> object:
        # The class's own field dict (``model_fields`` is the same dict behind a slower
        # lookup): this runs for every object of every message.
        fields = cls.__pydantic_fields__
        if isinstance(data, Mapping) and len(data) > len(fields):
            unknown = [key for key in data if key not in fields]
            named = ", ".join(json_literal(key) for key in unknown[:3])
            more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
            raise PydanticCustomError(
                "too_many_fields",
                "unknown fields {named}{more}",
                {"named": named, "more": more},
            )
        return data
