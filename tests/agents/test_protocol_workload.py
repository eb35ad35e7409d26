"""Workload and SLO models, load levels, and pydantic errors as field paths.

Runs without Django: ``pytest tests/agents -p no:django``.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal
from uuid import UUID

import pydantic
import pytest
from pydantic import BaseModel, Field

from agents.protocol import (
    MAX_LOAD_LEVELS,
    FieldError,
    PrefixDataset,
    RandomDataset,
    ShareGptDataset,
    Slos,
    StrictModel,
    Workload,
    pydantic_field_errors,
    workload_levels,
)

DATASET_ID = "0b7e6c1e-3f1a-4d8e-9a53-5d2f6a1b9c0d"
RANDOM = {"kind": "random", "input_len": 1024, "output_len": 128}


def workload(**overrides) -> dict:
    """A valid workload as parsed JSON, with ``overrides`` applied."""
    return {"dataset": dict(RANDOM), "concurrency": [1, 8], **overrides}


def errors_of(data: object, model: type[BaseModel] = Workload, prefix: str = "") -> list:
    with pytest.raises(pydantic.ValidationError) as caught:
        model.model_validate(data)
    return pydantic_field_errors(caught.value, prefix)


def fields_of(errors: list[FieldError]) -> list[str]:
    return [error.field for error in errors]


# --- valid workloads -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dataset", "model"),
    [
        (RANDOM, RandomDataset),
        ({**RANDOM, "range_ratio": 0.5}, RandomDataset),
        ({"kind": "sharegpt", "dataset_id": DATASET_ID}, ShareGptDataset),
        ({"kind": "sharegpt", "dataset_id": DATASET_ID, "output_len": 256}, ShareGptDataset),
        (
            {"kind": "prefix", "shared_len": 2000, "suffix_len": 100, "output_len": 64},
            PrefixDataset,
        ),
    ],
)
def test_it_accepts_each_dataset_from_parsed_json_and_from_json_text(dataset, model):
    data = workload(dataset=dataset)
    for parsed in (Workload.model_validate(data), Workload.model_validate_json(json.dumps(data))):
        assert type(parsed.dataset) is model
        # What the site stores is exactly what the agent reads back.
        assert Workload.model_validate(parsed.model_dump(mode="json")) == parsed


def test_it_reads_a_dataset_id_string_as_a_uuid():
    parsed = Workload.model_validate(
        workload(dataset={"kind": "sharegpt", "dataset_id": DATASET_ID})
    )
    assert parsed.dataset.dataset_id == UUID(DATASET_ID)
    assert parsed.model_dump(mode="json")["dataset"]["dataset_id"] == DATASET_ID


def test_it_fills_the_defaults():
    parsed = Workload.model_validate({"dataset": RANDOM, "request_rates": [4]})
    assert parsed.endpoint == "completions"
    assert parsed.concurrency == []
    assert parsed.burstiness == 1.0
    assert parsed.requests_per_level == 200
    assert parsed.warmup_requests == 0
    assert parsed.dataset.range_ratio == 0.0
    assert PrefixDataset(shared_len=1, suffix_len=1, output_len=1).num_prefixes == 1
    assert ShareGptDataset(dataset_id=UUID(DATASET_ID)).output_len is None


def test_it_accepts_integers_for_float_fields_as_floats():
    parsed = Workload.model_validate(
        workload(dataset={**RANDOM, "range_ratio": 0}, burstiness=2, request_rates=[3])
    )
    assert type(parsed.burstiness) is float
    assert type(parsed.dataset.range_ratio) is float
    assert parsed.request_rates == [3.0]
    assert type(parsed.request_rates[0]) is float


def test_it_cannot_be_changed_once_built():
    parsed = Workload.model_validate(workload())
    with pytest.raises(pydantic.ValidationError):
        parsed.requests_per_level = 5
    with pytest.raises(pydantic.ValidationError):
        parsed.dataset.input_len = 5


# --- refused workloads: exact paths ----------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        # dataset fields (the union tag pydantic inserts is not in the path)
        ({"dataset": {**RANDOM, "input_len": 0}}, "dataset.input_len"),
        ({"dataset": {**RANDOM, "input_len": 1_048_577}}, "dataset.input_len"),
        ({"dataset": {**RANDOM, "input_len": "8"}}, "dataset.input_len"),
        ({"dataset": {**RANDOM, "input_len": True}}, "dataset.input_len"),
        ({"dataset": {**RANDOM, "input_len": 8.0}}, "dataset.input_len"),
        ({"dataset": {**RANDOM, "output_len": 0}}, "dataset.output_len"),
        ({"dataset": {**RANDOM, "output_len": 262_145}}, "dataset.output_len"),
        ({"dataset": {**RANDOM, "range_ratio": -0.1}}, "dataset.range_ratio"),
        ({"dataset": {**RANDOM, "range_ratio": 1.0}}, "dataset.range_ratio"),
        ({"dataset": {**RANDOM, "range_ratio": "0.1"}}, "dataset.range_ratio"),
        ({"dataset": {**RANDOM, "extra": 1}}, "dataset.extra"),
        ({"dataset": {"kind": "sharegpt", "dataset_id": "nope"}}, "dataset.dataset_id"),
        ({"dataset": {"kind": "sharegpt", "dataset_id": 7}}, "dataset.dataset_id"),
        ({"dataset": {"kind": "sharegpt"}}, "dataset.dataset_id"),
        (
            {"dataset": {"kind": "sharegpt", "dataset_id": DATASET_ID, "output_len": 0}},
            "dataset.output_len",
        ),
        (
            {"dataset": {"kind": "prefix", "shared_len": 0, "suffix_len": 1, "output_len": 1}},
            "dataset.shared_len",
        ),
        (
            {"dataset": {"kind": "prefix", "shared_len": 1, "suffix_len": 0, "output_len": 1}},
            "dataset.suffix_len",
        ),
        (
            {
                "dataset": {
                    "kind": "prefix",
                    "shared_len": 1,
                    "suffix_len": 1,
                    "output_len": 1,
                    "num_prefixes": 1025,
                }
            },
            "dataset.num_prefixes",
        ),
        ({"dataset": {"kind": "bogus", "input_len": 1}}, "dataset.kind"),
        ({"dataset": {"input_len": 1, "output_len": 1}}, "dataset.kind"),
        ({"dataset": "random"}, "dataset"),
        # workload fields
        ({"endpoint": "embeddings"}, "endpoint"),
        ({"concurrency": [1, 0]}, "concurrency[1]"),
        ({"concurrency": [16_385]}, "concurrency[0]"),
        ({"concurrency": [1, True]}, "concurrency[1]"),
        ({"concurrency": [1, "4"]}, "concurrency[1]"),
        ({"concurrency": [1, 8, 8]}, "concurrency[2]"),
        ({"concurrency": 8}, "concurrency"),
        ({"request_rates": [0]}, "request_rates[0]"),
        ({"request_rates": [1, -2]}, "request_rates[1]"),
        ({"request_rates": [1, "fast"]}, "request_rates[1]"),
        ({"request_rates": [1, "2"]}, "request_rates[1]"),
        ({"request_rates": [True]}, "request_rates[0]"),
        ({"request_rates": [None]}, "request_rates[0]"),
        ({"request_rates": [float("inf")]}, "request_rates[0]"),
        ({"request_rates": [2, 2.0]}, "request_rates[1]"),
        ({"request_rates": ["inf", "inf"]}, "request_rates[1]"),
        ({"burstiness": 0}, "burstiness"),
        ({"burstiness": float("nan")}, "burstiness"),
        ({"requests_per_level": 0}, "requests_per_level"),
        ({"requests_per_level": 1_000_001}, "requests_per_level"),
        ({"requests_per_level": 20.0}, "requests_per_level"),
        ({"warmup_requests": -1}, "warmup_requests"),
        ({"warmup_requests": 100_001}, "warmup_requests"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_it_refuses_a_bad_field_on_its_exact_path(overrides, field):
    assert fields_of(errors_of(workload(**overrides))) == [field]


@pytest.mark.parametrize(
    "overrides",
    [
        ({"dataset": {**RANDOM, "input_len": 1_048_576, "output_len": 262_144}}),
        ({"dataset": {**RANDOM, "range_ratio": 0.999}}),
        ({"concurrency": [16_384, 1]}),  # any order
        ({"request_rates": ["inf", 0.001]}),
        ({"requests_per_level": 1_000_000, "warmup_requests": 100_000}),
        ({"endpoint": "chat"}),
    ],
)
def test_it_accepts_values_at_the_edges(overrides):
    assert Workload.model_validate(workload(**overrides))


def test_it_says_what_is_wrong_in_plain_words():
    errors = errors_of(
        workload(
            dataset={**RANDOM, "input_len": 0, "extra": 1},
            concurrency=[1, 1],
            request_rates=[-1],
        )
    )
    assert errors == [
        FieldError("dataset.input_len", "Input should be greater than or equal to 1"),
        FieldError("dataset.extra", "unknown field"),
        FieldError("request_rates[0]", 'expected a number from 0.001 to 10000 or "inf"; got -1'),
        FieldError("concurrency[1]", "duplicate of concurrency[0] (1)"),
    ]


def test_it_names_the_expected_dataset_kinds():
    errors = errors_of(workload(dataset={"kind": "bogus"}))
    assert errors == [
        FieldError(
            "dataset.kind",
            "unknown value 'bogus'; expected one of 'random', 'sharegpt', 'prefix', "
            "'mooncake', 'burstgpt', 'azure', 'chat_sessions', 'agentic', 'agentic_trace'",
        )
    ]
    assert errors_of(workload(dataset={"input_len": 1})) == [
        FieldError("dataset.kind", "this field is required")
    ]


def test_it_requires_at_least_one_load_level():
    errors = errors_of({"dataset": RANDOM})
    assert errors == [
        FieldError(
            "concurrency",
            "give at least one load level: a concurrency or a request rate (or a capacity search)",
        )
    ]
    assert fields_of(errors_of({"dataset": RANDOM, "concurrency": [], "request_rates": []})) == [
        "concurrency"
    ]
    assert Workload.model_validate({"dataset": RANDOM, "concurrency": [1]})
    assert Workload.model_validate({"dataset": RANDOM, "request_rates": ["inf"]})


def test_it_reports_the_missing_levels_alongside_other_errors():
    errors = errors_of({"dataset": {**RANDOM, "output_len": 0}})
    assert fields_of(errors) == ["dataset.output_len", "concurrency"]


def test_it_does_not_claim_missing_levels_when_the_rates_were_refused():
    assert fields_of(errors_of({"dataset": RANDOM, "request_rates": [0]})) == ["request_rates[0]"]


def test_it_caps_the_number_of_load_levels():
    half = MAX_LOAD_LEVELS // 2
    concurrency = list(range(1, half + 1))
    rates = [float(rate) for rate in range(1, MAX_LOAD_LEVELS - half + 1)]
    assert Workload.model_validate(workload(concurrency=concurrency, request_rates=rates))
    errors = errors_of(workload(concurrency=concurrency, request_rates=[*rates, "inf"]))
    assert errors == [
        FieldError(
            "concurrency",
            f"concurrency and request_rates list {MAX_LOAD_LEVELS + 1} levels together; "
            f"at most {MAX_LOAD_LEVELS} are allowed",
        )
    ]
    too_long = list(range(1, MAX_LOAD_LEVELS + 2))
    assert fields_of(errors_of(workload(concurrency=too_long))) == ["concurrency"]
    assert fields_of(errors_of(workload(request_rates=too_long))) == ["request_rates"]


# --- load levels -----------------------------------------------------------------------------


def test_it_lists_concurrency_levels_first_in_the_given_order():
    parsed = Workload.model_validate(
        workload(concurrency=[64, 1, 8], request_rates=[2, "inf", 0.5])
    )
    assert workload_levels(parsed) == [
        {"concurrency": 64},
        {"concurrency": 1},
        {"concurrency": 8},
        {"request_rate": 2.0},
        {"request_rate": "inf"},
        {"request_rate": 0.5},
    ]
    json.dumps(workload_levels(parsed), allow_nan=False)  # plain JSON, no Infinity


def test_it_lists_only_rates_when_there_is_no_concurrency():
    parsed = Workload.model_validate({"dataset": RANDOM, "request_rates": [1]})
    assert workload_levels(parsed) == [{"request_rate": 1.0}]


# --- SLOs ------------------------------------------------------------------------------------


def test_it_accepts_any_subset_of_slos():
    assert Slos.model_validate({}) == Slos()
    slos = Slos.model_validate({"ttft_ms": 200, "e2el_ms": 1500.5})
    assert slos.ttft_ms == 200.0
    assert type(slos.ttft_ms) is float
    assert slos.tpot_ms is None and slos.itl_ms is None
    assert slos.model_dump(mode="json", exclude_none=True) == {"ttft_ms": 200.0, "e2el_ms": 1500.5}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"ttft_ms": 0}, "ttft_ms"),
        ({"tpot_ms": -1}, "tpot_ms"),
        ({"itl_ms": "50"}, "itl_ms"),
        ({"e2el_ms": True}, "e2el_ms"),
        ({"e2el_ms": float("inf")}, "e2el_ms"),
        ({"p99_ttft_ms": 100}, "p99_ttft_ms"),
    ],
)
def test_it_refuses_a_bad_slo(data, field):
    assert fields_of(errors_of(data, model=Slos)) == [field]


# --- pydantic errors as field paths ----------------------------------------------------------


def test_it_prefixes_paths():
    errors = errors_of(
        workload(dataset={**RANDOM, "input_len": 0}, concurrency=[1, 0]), prefix="workload"
    )
    assert fields_of(errors) == ["workload.dataset.input_len", "workload.concurrency[1]"]
    assert fields_of(errors_of({"ttft_ms": 0}, model=Slos, prefix="slos")) == ["slos.ttft_ms"]


def test_it_reports_a_non_object_input_on_the_prefix_itself():
    assert fields_of(errors_of([1], prefix="workload")) == ["workload"]
    assert fields_of(errors_of([1])) == [""]


class Envelope(StrictModel):
    """A model defined outside the protocol module that nests a workload in a list."""

    workloads: list[Workload]


def test_it_finds_paths_through_models_nested_in_lists():
    data = {"workloads": [workload(), workload(dataset={**RANDOM, "input_len": 0})]}
    assert fields_of(errors_of(data, model=Envelope)) == ["workloads[1].dataset.input_len"]


class Cat(BaseModel):
    kind: Literal["cat"] = "cat"
    lives: int = Field(ge=1, le=9)


class Dog(BaseModel):
    kind: Literal["dog"] = "dog"
    good: bool


class Pets(BaseModel):
    """Not a protocol model: its unions are only understood when passed as ``model``."""

    pets: list[Annotated[Cat | Dog, Field(discriminator="kind")]]
    favourite: int | str


def test_it_drops_union_tags_for_any_model_it_is_given():
    with pytest.raises(pydantic.ValidationError) as caught:
        Pets.model_validate(
            {
                "pets": [{"kind": "dog", "good": True}, {"lives": 0}, {"kind": "cat", "lives": 10}],
                "favourite": None,
            }
        )
    assert fields_of(pydantic_field_errors(caught.value, model=Pets)) == [
        "pets[1].kind",
        "pets[2].lives",
        "favourite",
        "favourite",
    ]
    # Without the model the path is still produced, but the tags pydantic added remain.
    assert fields_of(pydantic_field_errors(caught.value)) == [
        "pets[1].kind",
        "pets[2].cat.lives",
        "favourite.int",
        "favourite.str",
    ]
