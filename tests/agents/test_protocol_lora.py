"""LoRA adapters in a job, and how the load generator spreads requests over them.

Runs without Django: ``pytest tests/agents -p no:django``.
"""

from __future__ import annotations

import pydantic
import pytest

from agents.loadgen.config import BenchConfig
from agents.loadgen.lora_spread import lora_requests, request_model
from agents.loadgen.prompts import RandomPrompts
from agents.loadgen.records import RequestRecord
from agents.protocol import LoraAdapter, lora_serve_flags
from tests.agents.test_weights import model_source


def adapter(name: str) -> dict:
    return {"name": name, "hf_repo": "org/adapter", "revision": "main"}


def test_a_job_refuses_an_adapter_named_like_the_model_or_another_adapter():
    source = model_source("org/open").model_dump()
    with pytest.raises(pydantic.ValidationError, match=r"lora_adapters\[1\].name: a is also"):
        type(model_source("org/open")).model_validate(
            source | {"lora_adapters": [adapter("a"), adapter("a")]}
        )
    clash = source | {"served_model_name": "tiny", "lora_adapters": [adapter("tiny")]}
    with pytest.raises(pydantic.ValidationError, match="the served model has this name"):
        type(model_source("org/open")).model_validate(clash)


def test_the_grid_may_set_max_loras_itself():
    adapters = [LoraAdapter(**adapter("a")), LoraAdapter(**adapter("b"))]
    paths = {"a": "/w/a", "b": "/w/b"}
    assert lora_serve_flags(adapters, paths, {"max_loras": 1}) == [
        "--enable-lora",
        "--lora-modules",
        "a=/w/a",
        "b=/w/b",
    ]
    assert lora_serve_flags([], {}, {}) == []


def test_requests_go_to_the_adapters_in_turn_and_the_spread_names_every_adapter():
    config = BenchConfig(
        base_url="http://x",
        model="m",
        source=RandomPrompts(input_len=4, output_len=2),
        levels=({"concurrency": 1},),
        lora_models=("a", "b", "c"),
    )
    assert [request_model(config, key) for key in range(5)] == ["a", "b", "c", "a", "b"]
    records = [RequestRecord(i, 2) for i in range(2)]
    for record in records:
        record.model = request_model(config, record.index)
    assert lora_requests(config, records) == {"a": 1, "b": 1, "c": 0}
    plain = BenchConfig(base_url="http://x", model="m", source=config.source, levels=config.levels)
    assert request_model(plain, 7) == "m" and lora_requests(plain, records) is None
