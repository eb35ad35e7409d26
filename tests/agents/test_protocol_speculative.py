"""Speculative decoding as a grid axis: ``speculative_config`` values checked for their meaning
(method, tokens to propose, draft model) per vLLM version, and rendered as vLLM reads them.

Runs without Django: ``pytest tests/agents -p no:django``.
"""

from __future__ import annotations

import json

import pytest

from agents.protocol import ServeGridError, serve_args, validate_serve_grid


def errors_of(values, **kwargs) -> dict[str, str]:
    kwargs.setdefault("gpu_count", 8)
    with pytest.raises(ServeGridError) as caught:
        validate_serve_grid({"speculative_config": values}, **kwargs)
    return {error.field: error.message for error in caught.value.errors}


def test_it_accepts_each_method_with_what_it_needs():
    grid = validate_serve_grid(
        {
            "speculative_config": [
                {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4},
                {"method": "mtp", "num_speculative_tokens": 1},
                {
                    "num_speculative_tokens": 3,
                    "method": "eagle3",
                    "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                    "revision": "main",
                },
                '{"method": "eagle", "num_speculative_tokens": 2, "model": "a/b", '
                '"revision": "v1"}',
            ]
        },
        gpu_count=1,
        vllm_version="0.13.0",
    )
    values = grid["speculative_config"]
    # One spelling per setting: objects with sorted keys, JSON text read as its object.
    assert list(values[2]) == ["method", "model", "num_speculative_tokens", "revision"]
    assert values[3] == {
        "method": "eagle",
        "model": "a/b",
        "num_speculative_tokens": 2,
        "revision": "v1",
    }


def test_it_refuses_each_missing_or_wrong_part_on_its_own_path():
    errors = errors_of(
        [
            {"method": "medusa2", "num_speculative_tokens": 2},
            {"method": "eagle3", "num_speculative_tokens": 0},
            {"method": "ngram", "num_speculative_tokens": 2, "model": "a/b", "speed": 1},
            {"method": "mtp", "prompt_lookup_max": 3},
            {
                "method": "eagle",
                "num_speculative_tokens": 2,
                "model": "not a repo",
                "revision": "..",
            },
            {
                "method": "ngram",
                "num_speculative_tokens": 2,
                "prompt_lookup_min": 5,
                "prompt_lookup_max": 3,
            },
            "fast",
            7,
        ]
    )
    assert errors["speculative_config[0].method"].startswith('must be one of "ngram", "eagle"')
    assert "medusa2" in errors["speculative_config[0].method"]
    assert errors["speculative_config[1].num_speculative_tokens"] == "must be 1 to 32; got 0"
    assert "needs its draft model" in errors["speculative_config[1].model"]
    assert "pin the draft model" in errors["speculative_config[1].revision"]
    assert errors["speculative_config[2].model"] == "ngram loads no draft model; leave model out"
    assert "not a speculative_config key" in errors["speculative_config[2].speed"]
    assert errors["speculative_config[3].prompt_lookup_max"] == (
        "only the ngram method takes prompt_lookup_max"
    )
    assert "how many tokens" in errors["speculative_config[3].num_speculative_tokens"]
    assert "Hugging Face repo id" in errors["speculative_config[4].model"]
    assert "branch, tag or commit" in errors["speculative_config[4].revision"]
    assert (
        "must not exceed prompt_lookup_max (3)" in errors["speculative_config[5].prompt_lookup_min"]
    )
    assert errors["speculative_config[6]"] == "expected a JSON object, got text that is not JSON"
    assert errors["speculative_config[7]"].startswith("expected an object, array or string")


def test_it_refuses_a_method_the_version_cannot_run():
    draft = {
        "method": "draft_model",
        "num_speculative_tokens": 4,
        "model": "Qwen/Qwen3-0.6B",
        "revision": "main",
    }
    errors = errors_of([draft], vllm_version="0.13.0")
    assert errors == {
        "speculative_config[0].method": "draft_model needs vLLM 0.32.0 or later",
    }
    assert validate_serve_grid({"speculative_config": [draft]}, gpu_count=1, vllm_version="0.32.0")


def test_two_spellings_of_one_setting_are_duplicates():
    errors = errors_of(
        [
            {"method": "mtp", "num_speculative_tokens": 2},
            '{"num_speculative_tokens": 2, "method": "mtp"}',
        ]
    )
    assert list(errors) == ["speculative_config[1]"]
    assert errors["speculative_config[1]"].startswith("duplicate of speculative_config[0]")


def test_it_renders_the_checked_object_as_vllm_reads_it():
    argv = serve_args(
        {"speculative_config": {"num_speculative_tokens": 2, "method": "mtp"}},
        vllm_version="0.13.0",
    )
    assert argv[0] == "--speculative-config"
    assert json.loads(argv[1]) == {"method": "mtp", "num_speculative_tokens": 2}
    with pytest.raises(ServeGridError, match="must be one of"):
        serve_args({"speculative_config": {"method": "nope", "num_speculative_tokens": 2}})
