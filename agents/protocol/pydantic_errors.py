"""pydantic's ``ValidationError`` as ``FieldError``s, with the same path style as
``ServeGridError`` (``dataset.input_len``, ``concurrency[2]``) and only the fields a user
wrote (the segments pydantic inserts for union members are dropped)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import NoneType, UnionType
from typing import Annotated, Literal, Union, get_args, get_origin

import pydantic
from pydantic import (
    BaseModel,
    Tag,
)

from agents.protocol.errors import FieldError
from agents.protocol.strict import StrictModel


def _strip_annotated(annotation: object) -> object:
    """Drops ``Annotated[...]`` wrappers and the ``None`` of ``X | None``; pydantic puts no
    location segment for either."""
    while True:
        if get_origin(annotation) is Annotated:
            annotation = get_args(annotation)[0]
            continue
        members = _union_members(annotation)
        if members is not None and len(members) == 1:
            annotation = members[0]
            continue
        return annotation


def _union_members(annotation: object) -> list[object] | None:
    if get_origin(annotation) not in (Union, UnionType):
        return None
    return [member for member in get_args(annotation) if member is not NoneType]


def _is_tag_of(member: object, segment: object) -> bool:
    if get_origin(member) is Annotated and any(
        isinstance(meta, Tag) and meta.tag == segment for meta in get_args(member)[1:]
    ):
        return True
    model = _strip_annotated(member)
    if isinstance(model, type) and issubclass(model, BaseModel):
        if segment == model.__name__:
            return True
        # A discriminated union is tagged by the value of the model's Literal field.
        return any(
            get_origin(field.annotation) is Literal and segment in get_args(field.annotation)
            for field in model.model_fields.values()
        )
    return False


def _descend(annotation: object, segment: object) -> tuple[object, bool]:
    """The type found at ``segment`` below ``annotation``, and whether the segment is a union
    tag that pydantic inserted (and that a user never wrote)."""
    annotation = _strip_annotated(annotation)
    members = _union_members(annotation)
    if members is not None:
        # Below a union, pydantic always names the member it tried: that segment is a tag.
        for member in members:
            if _is_tag_of(member, segment):
                return member, True
        return None, True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        field = annotation.model_fields.get(segment) if isinstance(segment, str) else None
        return (field.annotation if field is not None else None), False
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin in (list, set, frozenset, Sequence) and args:
        return args[0], False
    if origin is tuple and args:
        return (args[0] if len(args) == 2 and args[1] is Ellipsis else None), False
    if origin in (dict, Mapping) and len(args) == 2:
        return args[1], False
    return None, False  # unknown below here: keep segments as they are


def _protocol_models() -> dict[str, type[BaseModel]]:
    found: dict[str, type[BaseModel]] = {}
    pending: list[type[BaseModel]] = [StrictModel]
    while pending:
        model = pending.pop()
        found.setdefault(model.__name__, model)
        pending.extend(model.__subclasses__())
    return found


def join_path(prefix: str, parts: Sequence[object]) -> str:
    path = prefix
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path = f"{path}.{part}" if path else str(part)
    return path


def readable_message(error: Mapping[str, object]) -> str:
    kind = error["type"]
    message = str(error["msg"])
    ctx = error.get("ctx") or {}
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "union_tag_invalid":
        return f"unknown value {ctx.get('tag')!r}; expected one of {ctx.get('expected_tags')}"
    if kind in ("missing", "union_tag_not_found"):
        return "this field is required"
    if kind in ("value_error", "assertion_error"):
        # pydantic prefixes "Value error, "; the field path already says where.
        return message.split(", ", 1)[1] if ", " in message else message
    return message


def pydantic_field_errors(
    exc: pydantic.ValidationError,
    prefix: str = "",
    *,
    model: type[BaseModel] | None = None,
) -> list[FieldError]:
    """Converts a pydantic ``ValidationError`` into ``FieldError``s with the same path style
    as ``ServeGridError``: ``dataset.input_len``, ``concurrency[2]``, prefixed by ``prefix``
    (``prefix="workload"`` gives ``workload.dataset.input_len``).

    The segments pydantic inserts for union members (``('dataset', 'random', 'input_len')``)
    are dropped, so paths only name fields the user wrote; an unknown or missing dataset
    ``kind`` is reported on ``dataset.kind``. The model is found by the error's title among
    this module's models; pass ``model`` for any other model. One ``FieldError`` per pydantic
    error, in pydantic's order.
    """
    root: object = model if model is not None else _protocol_models().get(exc.title)
    result: list[FieldError] = []
    for error in exc.errors(include_url=False):
        parts: list[object] = []
        current = root
        for segment in error["loc"]:
            current, is_tag = _descend(current, segment) if current is not None else (None, False)
            if not is_tag:
                parts.append(segment)
        if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
            # Point at the discriminator field itself; ctx quotes it: "'kind'".
            discriminator = str((error.get("ctx") or {}).get("discriminator", "")).strip("'")
            if discriminator.isidentifier():
                parts.append(discriminator)
        result.append(FieldError(join_path(prefix, parts), readable_message(error)))
    return result
