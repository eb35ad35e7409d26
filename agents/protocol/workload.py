"""What every trial of a run sends (datasets, ``Workload``, its levels) and the latency
objectives it is judged by (``Slos``): pydantic models that forbid unknown fields, never
coerce types and accept both ``model_validate`` on parsed JSON and ``model_validate_json``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal
from uuid import UUID

import pydantic
from pydantic import (
    Field,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from agents.protocol.errors import json_literal
from agents.protocol.strict import StrictModel

MAX_INPUT_LEN = 1_048_576
MAX_OUTPUT_LEN = 262_144
MAX_CONCURRENCY = 16_384
MAX_LOAD_LEVELS = 32
# Open-loop rates from one request per 1000 s to 10,000 per second ("inf" sends all at once).
REQUEST_RATE_RANGE = (0.001, 10_000.0)
# Gamma shape of the gaps between requests: 0.01 is burstier than any real traffic, 100 as
# steady as a metronome.
BURSTINESS_RANGE = (0.01, 100.0)
# An objective above an hour says nothing a benchmark could measure.
MAX_SLO_MS = 3_600_000.0


InputLen = Annotated[int, Field(ge=1, le=MAX_INPUT_LEN)]
OutputLen = Annotated[int, Field(ge=1, le=MAX_OUTPUT_LEN)]
# JSON has no infinity; "inf" is spelled as a string where it is meaningful (request rates).
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
RequestRateNumber = Annotated[
    float, Field(ge=REQUEST_RATE_RANGE[0], le=REQUEST_RATE_RANGE[1], allow_inf_nan=False)
]
SloMs = Annotated[float, Field(gt=0, le=MAX_SLO_MS, allow_inf_nan=False)]


class RandomDataset(StrictModel):
    """Synthetic prompts of random tokens, as ``vllm bench serve --dataset-name random``.

    Lengths are drawn from ``[len x (1 - range_ratio), len x (1 + range_ratio)]``; a ratio
    below 1 keeps every length at least one token.
    """

    kind: Literal["random"] = "random"
    input_len: InputLen
    output_len: OutputLen
    range_ratio: float = Field(default=0.0, ge=0.0, lt=1.0, allow_inf_nan=False)


class ShareGptDataset(StrictModel):
    """Conversations from a ShareGPT-format file uploaded to the site, referenced by id.

    ``output_len``, when given, replaces each conversation's own reply length.
    """

    kind: Literal["sharegpt"] = "sharegpt"
    # Lax on purpose: parsed JSON carries a UUID as a string, which strict mode would refuse.
    dataset_id: UUID = Field(strict=False)
    output_len: OutputLen | None = None


class PrefixDataset(StrictModel):
    """Prompts sharing one of ``num_prefixes`` common prefixes, then a unique suffix: the
    workload that shows what prefix caching is worth."""

    kind: Literal["prefix"] = "prefix"
    shared_len: InputLen
    suffix_len: InputLen
    output_len: OutputLen
    num_prefixes: int = Field(default=1, ge=1, le=1024)


Dataset = Annotated[RandomDataset | ShareGptDataset | PrefixDataset, Field(discriminator="kind")]


def _request_rate(value: object, handler: ValidatorFunctionWrapHandler) -> float | str:
    try:
        return handler(value)
    except pydantic.ValidationError:
        # One message for the whole union instead of one per member ("should be 'inf'"...).
        raise PydanticCustomError(
            "request_rate",
            'expected a number from {low} to {high} or "inf"; got {value}',
            {
                "value": json_literal(value),
                "low": f"{REQUEST_RATE_RANGE[0]:g}",
                "high": f"{REQUEST_RATE_RANGE[1]:g}",
            },
        ) from None


RequestRate = Annotated[RequestRateNumber | Literal["inf"], WrapValidator(_request_rate)]


def _duplicates_error(
    title: str, field: str, values: Sequence[object]
) -> pydantic.ValidationError | None:
    first: dict[object, int] = {}
    details: list[InitErrorDetails] = []
    for index, value in enumerate(values):
        if value in first:
            details.append(
                InitErrorDetails(
                    type=PydanticCustomError(
                        "duplicate_level",
                        "duplicate of {field}[{first}] ({value})",
                        {"field": field, "first": first[value], "value": json_literal(value)},
                    ),
                    loc=(index,),
                    input=value,
                )
            )
        else:
            first[value] = index
    if not details:
        return None
    # A ValidationError raised in a field validator keeps its locations, relative to the
    # field: the duplicate is reported on its own index.
    return pydantic.ValidationError.from_exception_data(title, details)


class Workload(StrictModel):
    """The load applied to every trial: a dataset, an endpoint and the load levels.

    Levels are the ``concurrency`` values (requests in flight, capped) followed by the
    ``request_rates`` (requests per second with gamma-distributed gaps of shape
    ``burstiness``; ``"inf"`` sends all at once); at least one level, at most
    ``MAX_LOAD_LEVELS`` in all, no value twice in a list. Each level sends
    ``requests_per_level`` requests after ``warmup_requests`` unmeasured ones.
    """

    dataset: Dataset
    endpoint: Literal["completions", "chat"] = "completions"
    # Declared before `concurrency` because the concurrency validator reads it.
    request_rates: list[RequestRate] = Field(default_factory=list, max_length=MAX_LOAD_LEVELS)
    concurrency: list[Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)]] = Field(
        default_factory=list, max_length=MAX_LOAD_LEVELS, validate_default=True
    )
    burstiness: float = Field(
        default=1.0, ge=BURSTINESS_RANGE[0], le=BURSTINESS_RANGE[1], allow_inf_nan=False
    )
    requests_per_level: int = Field(default=200, ge=1, le=1_000_000)
    warmup_requests: int = Field(default=0, ge=0, le=100_000)

    @field_validator("request_rates")
    @classmethod
    def _rates_distinct(cls, rates: list[float | str]) -> list[float | str]:
        error = _duplicates_error(cls.__name__, "request_rates", rates)
        if error is not None:
            raise error
        return rates

    @field_validator("concurrency")
    @classmethod
    def _concurrency_levels(cls, concurrency: list[int], info: ValidationInfo) -> list[int]:
        error = _duplicates_error(cls.__name__, "concurrency", concurrency)
        if error is not None:
            raise error
        # Absent when request_rates itself was refused: its own error says enough.
        if "request_rates" in info.data:
            rates = info.data["request_rates"]
            if not concurrency and not rates:
                raise PydanticCustomError(
                    "no_load_levels",
                    "give at least one load level: a concurrency or a request rate",
                )
            if len(concurrency) + len(rates) > MAX_LOAD_LEVELS:
                raise PydanticCustomError(
                    "too_many_load_levels",
                    "concurrency and request_rates list {count} levels together; "
                    "at most {limit} are allowed",
                    {"count": len(concurrency) + len(rates), "limit": MAX_LOAD_LEVELS},
                )
        return concurrency


class Slos(StrictModel):
    """Service-level objectives in milliseconds, each optional, applied to p99 and to goodput
    (a request counts when it meets every objective given). Names follow ``vllm bench
    serve``: TTFT, TPOT, ITL and E2EL."""

    ttft_ms: SloMs | None = None
    tpot_ms: SloMs | None = None
    itl_ms: SloMs | None = None
    e2el_ms: SloMs | None = None


def workload_levels(workload: Workload) -> list[dict[str, int | float | str]]:
    """The load levels of a workload in the order they run: ``{"concurrency": n}`` for each
    concurrency as given, then ``{"request_rate": r}`` for each rate (``"inf"`` stays the
    string ``"inf"``, so a level is always plain JSON)."""
    levels: list[dict[str, int | float | str]] = [
        {"concurrency": concurrency} for concurrency in workload.concurrency
    ]
    levels.extend({"request_rate": rate} for rate in workload.request_rates)
    return levels
