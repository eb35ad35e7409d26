"""The serve-flag schema: grid validation, expansion, argv rendering and the published schema.

Runs without Django: ``pytest tests/agents -p no:django``.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from agents.protocol import (
    MAX_GRID_TRIALS,
    SERVE_FLAGS,
    SERVE_FLAGS_SCHEMA_VERSION,
    FieldError,
    FlagSpec,
    ServeGridError,
    expand_serve_grid,
    parse_vllm_version,
    serve_args,
    serve_flags_json_schema,
    validate_serve_grid,
)
from agents.protocol.flag_tables import SUPPORTED_VLLM_VERSIONS

REPO = Path(__file__).resolve().parents[2]


def refused(grid, **kwargs) -> list[FieldError]:
    """The errors validate_serve_grid reports for ``grid`` (which must be refused)."""
    kwargs.setdefault("gpu_count", 16)
    with pytest.raises(ServeGridError) as caught:
        validate_serve_grid(grid, **kwargs)
    return caught.value.errors


TP_0_AND_2 = ["tensor_parallel_size[0]", "tensor_parallel_size[2]"]


def fields_of(errors: list[FieldError]) -> list[str]:
    return [error.field for error in errors]


# --- the flag table --------------------------------------------------------------------------


def test_it_covers_the_flags_the_site_offers():
    assert SERVE_FLAGS_SCHEMA_VERSION == 1
    assert MAX_GRID_TRIALS == 64
    assert list(SERVE_FLAGS) == [
        "max_num_batched_tokens",
        "max_num_seqs",
        "max_model_len",
        "gpu_memory_utilization",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "data_parallel_size",
        "enable_expert_parallel",
        "decode_context_parallel_size",
        "enable_prefix_caching",
        "enable_chunked_prefill",
        "kv_cache_dtype",
        "dtype",
        "quantization",
        "block_size",
        "enforce_eager",
        "swap_space",
    ]
    for name, spec in SERVE_FLAGS.items():
        assert spec.name == name
        assert spec.cli == "--" + name.replace("_", "-")
        assert spec.help


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kind": "text"},
        {"kind": "choice"},
        {"kind": "bool", "minimum": 0},
        {"kind": "int", "negative_cli": "--no-x"},
        {"kind": "bool", "negative_since": "0.9.0"},
        {"kind": "int", "since": "soon"},
    ],
)
def test_it_refuses_a_malformed_flag_spec(kwargs):
    with pytest.raises(ValueError):
        FlagSpec(name="x", cli="--x", help="x", **kwargs)


# --- accepted values -------------------------------------------------------------------------


def test_it_accepts_an_empty_grid_as_one_default_trial():
    assert validate_serve_grid({}, gpu_count=1) == {}
    assert expand_serve_grid({}) == [{}]


def test_it_returns_a_normalised_copy_in_schema_order():
    grid = {
        "swap_space": [4],
        "enable_prefix_caching": [True, False],
        "max_num_seqs": [256, 8],
        "gpu_memory_utilization": [1, 0.5],
    }
    checked = validate_serve_grid(grid, gpu_count=1)
    assert checked == {
        "max_num_seqs": [256, 8],
        "gpu_memory_utilization": [1.0, 0.5],
        "enable_prefix_caching": [True, False],
        "swap_space": [4.0],
    }
    assert list(checked) == [
        "max_num_seqs",
        "gpu_memory_utilization",
        "enable_prefix_caching",
        "swap_space",
    ]
    # Integers given for float flags come back as floats; integer flags stay integers.
    assert [type(v) for v in checked["gpu_memory_utilization"]] == [float, float]
    assert type(checked["swap_space"][0]) is float
    assert [type(v) for v in checked["max_num_seqs"]] == [int, int]
    assert grid["swap_space"] == [4]  # the input is not modified


@pytest.mark.parametrize(
    ("flag", "value", "normalised"),
    [
        ("max_num_batched_tokens", 16, 16),
        ("max_num_batched_tokens", 2_097_152, 2_097_152),
        ("max_num_seqs", 1, 1),
        ("max_num_seqs", 16_384, 16_384),
        ("max_model_len", 16, 16),
        ("max_model_len", 10_485_760, 10_485_760),
        ("gpu_memory_utilization", 1e-9, 1e-9),
        ("gpu_memory_utilization", 1.0, 1.0),
        ("gpu_memory_utilization", 1, 1.0),
        ("tensor_parallel_size", 1, 1),
        ("tensor_parallel_size", 2, 2),
        ("tensor_parallel_size", 4, 4),
        ("tensor_parallel_size", 8, 8),
        ("tensor_parallel_size", 16, 16),
        ("pipeline_parallel_size", 1, 1),
        ("pipeline_parallel_size", 16, 16),
        ("enable_prefix_caching", True, True),
        ("enable_prefix_caching", False, False),
        ("enable_chunked_prefill", False, False),
        ("enforce_eager", True, True),
        ("kv_cache_dtype", "auto", "auto"),
        ("kv_cache_dtype", "fp8", "fp8"),
        ("kv_cache_dtype", "fp8_e4m3", "fp8_e4m3"),
        ("kv_cache_dtype", "fp8_e5m2", "fp8_e5m2"),
        ("dtype", "auto", "auto"),
        ("dtype", "half", "half"),
        ("dtype", "float16", "float16"),
        ("dtype", "bfloat16", "bfloat16"),
        ("dtype", "float", "float"),
        ("dtype", "float32", "float32"),
        ("quantization", None, None),
        ("quantization", "awq", "awq"),
        ("quantization", "compressed-tensors", "compressed-tensors"),
        ("quantization", "gptq_marlin", "gptq_marlin"),
        ("quantization", "fp8", "fp8"),
        ("quantization", "modelopt", "modelopt"),
        ("quantization", "modelopt_fp4", "modelopt_fp4"),
        ("quantization", "mxfp4", "mxfp4"),
        ("block_size", 1, 1),
        ("block_size", 8, 8),
        ("block_size", 128, 128),
        ("swap_space", 0, 0.0),
        ("swap_space", 1024, 1024.0),
    ],
)
def test_it_accepts_values_at_the_edges(flag, value, normalised):
    checked = validate_serve_grid({flag: [value]}, gpu_count=16)
    assert checked == {flag: [normalised]}
    assert type(checked[flag][0]) is type(normalised)


# --- refused values: one exact path and a message that says why ------------------------------


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        # strict types: no coercion, and bool is not a number
        ("max_num_seqs", True, "expected an integer, got boolean true"),
        ("max_num_seqs", "8", 'expected an integer, got string "8"'),
        ("max_num_seqs", 8.0, "expected an integer, got number 8.0"),
        ("max_num_seqs", None, "expected an integer, got null"),
        ("gpu_memory_utilization", True, "expected a number, got boolean true"),
        ("gpu_memory_utilization", "0.9", 'expected a number, got string "0.9"'),
        ("gpu_memory_utilization", float("nan"), "expected a finite number"),
        ("swap_space", float("inf"), "expected a finite number"),
        ("enable_prefix_caching", 1, "expected true or false, got number 1"),
        ("enforce_eager", "true", 'expected true or false, got string "true"'),
        ("kv_cache_dtype", 8, "expected a string, got number 8"),
        ("quantization", False, "expected a string, got boolean false"),
        # ranges name the bound
        ("max_num_batched_tokens", 15, "must be at least 16; got 15"),
        ("max_num_batched_tokens", 2_097_153, "must be at most 2097152; got 2097153"),
        ("max_num_seqs", 0, "must be at least 1; got 0"),
        ("max_num_seqs", 16_385, "must be at most 16384; got 16385"),
        ("max_model_len", 15, "must be at least 16; got 15"),
        ("max_model_len", 10_485_761, "must be at most 10485760; got 10485761"),
        ("gpu_memory_utilization", 0, "must be greater than 0.0; got 0.0"),
        ("gpu_memory_utilization", -0.5, "must be greater than 0.0; got -0.5"),
        ("gpu_memory_utilization", 1.01, "must be at most 1.0; got 1.01"),
        ("pipeline_parallel_size", 0, "must be at least 1; got 0"),
        ("pipeline_parallel_size", 17, "must be at most 16; got 17"),
        ("swap_space", -1, "must be at least 0.0 GiB; got -1.0"),
        ("swap_space", 1024.5, "must be at most 1024.0 GiB; got 1024.5"),
        # choices
        ("tensor_parallel_size", 3, "must be one of 1, 2, 4, 8, 16; got 3"),
        ("tensor_parallel_size", 32, "must be one of 1, 2, 4, 8, 16; got 32"),
        ("tensor_parallel_size", 0, "must be one of 1, 2, 4, 8, 16; got 0"),
        ("block_size", 2, "must be one of 1, 8, 16, 32, 64, 128; got 2"),
        ("block_size", 256, "must be one of 1, 8, 16, 32, 64, 128; got 256"),
        ("kv_cache_dtype", "fp16", 'must be one of "auto", "fp8", "fp8_e4m3", "fp8_e5m2"'),
        ("kv_cache_dtype", None, 'must be one of "auto", "fp8", "fp8_e4m3", "fp8_e5m2"; got null'),
        ("dtype", "int8", 'must be one of "auto", "half", "float16", "bfloat16"'),
        ("quantization", "int4", 'must be one of null, "awq", "gptq", "fp8"'),
        ("quantization", "AWQ", 'got "AWQ"'),
    ],
)
def test_it_refuses_a_bad_value_on_its_own_index(flag, value, message):
    errors = refused({flag: [value]})
    assert fields_of(errors) == [f"{flag}[0]"]
    assert message in errors[0].message


def test_it_points_at_the_index_of_the_bad_value():
    errors = refused({"max_num_seqs": [8, 64, "128", 256, 0]})
    assert fields_of(errors) == ["max_num_seqs[2]", "max_num_seqs[4]"]


def test_it_refuses_a_bare_scalar_where_a_list_is_expected():
    errors = refused({"max_num_seqs": 256})
    assert errors == [
        FieldError("max_num_seqs", "expected a list of values, e.g. [256]; got number 256")
    ]


@pytest.mark.parametrize("scalar", ["auto", True, None, {"a": 1}])
def test_it_refuses_any_non_list(scalar):
    errors = refused({"kv_cache_dtype": scalar})
    assert fields_of(errors) == ["kv_cache_dtype"]
    assert "expected a list of values" in errors[0].message


def test_it_refuses_an_empty_list():
    errors = refused({"max_model_len": []})
    assert fields_of(errors) == ["max_model_len"]
    assert "at least one value" in errors[0].message


@pytest.mark.parametrize(
    ("flag", "values", "field", "first"),
    [
        ("max_num_seqs", [8, 16, 8], "max_num_seqs[2]", "max_num_seqs[0]"),
        ("gpu_memory_utilization", [0.9, 1, 1.0], "gpu_memory_utilization[2]", "[1]"),
        ("enable_prefix_caching", [True, False, True], "enable_prefix_caching[2]", "[0]"),
        ("quantization", [None, "awq", None], "quantization[2]", "quantization[0]"),
    ],
)
def test_it_refuses_duplicates_within_a_list(flag, values, field, first):
    errors = refused({flag: values})
    assert fields_of(errors) == [field]
    assert "duplicate of" in errors[0].message
    assert first in errors[0].message


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("max_num_seq", "did you mean max_num_seqs"),
        ("max-num-seqs", "did you mean max_num_seqs"),
        ("--gpu-memory-utilization", "did you mean gpu_memory_utilization"),
        ("enable_prefix_cache", "did you mean enable_prefix_caching"),
    ],
)
def test_it_refuses_an_unknown_flag_naming_close_ones(name, suggestion):
    errors = refused({name: [1]})
    assert fields_of(errors) == [name]
    assert "unknown serve flag" in errors[0].message
    assert suggestion in errors[0].message


def test_it_refuses_an_unknown_flag_with_nothing_close():
    errors = refused({"bogus_flag": [1]})
    assert errors == [
        FieldError(
            "bogus_flag",
            "unknown serve flag; see the serve-flag schema for the flags Benchsite can vary",
        )
    ]


def test_it_refuses_a_grid_that_is_not_an_object():
    errors = refused([{"max_num_seqs": [1]}])
    assert fields_of(errors) == [""]


def test_it_collects_every_error_instead_of_stopping_at_the_first():
    grid = {
        "max_num_seqs": [True, 8, "16", 8],
        "bogus_flag": [1],
        "gpu_memory_utilization": 0.9,
        "dtype": [],
        "tensor_parallel_size": [1, 3, 4],
        "max_model_len": [4096, 65536],
        "swap_space": [1, 2],
        "block_size": [16, 32],
    }
    errors = refused(grid, gpu_count=2, max_context=32768, max_trials=8)
    assert fields_of(errors) == [
        "max_num_seqs[0]",
        "max_num_seqs[2]",
        "max_num_seqs[3]",
        "bogus_flag",
        "gpu_memory_utilization",
        "dtype",
        "tensor_parallel_size[1]",
        "tensor_parallel_size[2]",
        "max_model_len[1]",
        "",
    ]
    assert errors[-1].message == (
        "the grid expands to 96 trials (max_num_seqs 4 x tensor_parallel_size 3 x "
        "max_model_len 2 x swap_space 2 x block_size 2); at most 8 are allowed"
    )


# --- rules across flags and against the experiment -------------------------------------------


@pytest.mark.parametrize(
    ("grid", "gpu_count", "fields"),
    [
        ({"tensor_parallel_size": [1, 2]}, 2, []),
        ({"tensor_parallel_size": [1, 2, 4]}, 2, ["tensor_parallel_size[2]"]),
        ({"tensor_parallel_size": [8, 1, 16]}, 4, TP_0_AND_2),
        ({"tensor_parallel_size": [2], "pipeline_parallel_size": [2]}, 4, []),
        # every combination runs, so tp 2 is refused because of pp 2 (2 x 2 > 2 GPUs)
        (
            {"tensor_parallel_size": [1, 2], "pipeline_parallel_size": [1, 2]},
            2,
            ["tensor_parallel_size[1]"],
        ),
        ({"pipeline_parallel_size": [1, 2, 4]}, 2, ["pipeline_parallel_size[2]"]),
        ({"pipeline_parallel_size": [3]}, 3, []),
    ],
)
def test_it_refuses_more_parallelism_than_gpus(grid, gpu_count, fields):
    if not fields:
        assert validate_serve_grid(grid, gpu_count=gpu_count) == grid
        return
    errors = refused(grid, gpu_count=gpu_count)
    assert fields_of(errors) == fields
    assert f"the experiment has {gpu_count}" in errors[0].message


def test_it_names_both_sizes_when_tensor_and_pipeline_exceed_together():
    errors = refused({"tensor_parallel_size": [4], "pipeline_parallel_size": [1, 2]}, gpu_count=4)
    assert errors == [
        FieldError(
            "tensor_parallel_size[0]",
            "tensor_parallel_size 4 x pipeline_parallel_size 2 needs 8 GPUs; the experiment has 4",
        )
    ]


def test_it_refuses_a_context_longer_than_the_model_supports():
    grid = {"max_model_len": [4096, 8192, 8193]}
    errors = refused(grid, max_context=8192)
    assert errors == [
        FieldError("max_model_len[2]", "8193 is above the model's context length (8192)")
    ]
    # Without a known context, only the flag's own range applies.
    assert validate_serve_grid(grid, gpu_count=1) == grid


def test_it_allows_exactly_the_trial_limit_and_no_more():
    at_limit = {
        "max_num_seqs": list(range(1, 9)),
        "max_num_batched_tokens": [16 * i for i in range(1, 9)],
    }
    assert len(expand_serve_grid(validate_serve_grid(at_limit, gpu_count=1))) == 64
    over = {**at_limit, "enforce_eager": [True, False]}
    errors = refused(over)
    assert fields_of(errors) == [""]
    assert "128 trials" in errors[0].message
    assert "at most 64" in errors[0].message
    # The limit is the caller's to set (the site reads it from settings).
    assert fields_of(refused({"max_num_seqs": [1, 2, 3]}, max_trials=2)) == [""]
    assert validate_serve_grid({"max_num_seqs": [1, 2]}, gpu_count=1, max_trials=2)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"gpu_count": 0},
        {"gpu_count": True},
        {"gpu_count": "2"},
        {"gpu_count": 1, "max_trials": 0},
        {"gpu_count": 1, "vllm_version": "latest"},
    ],
)
def test_it_raises_a_plain_value_error_for_bad_arguments(kwargs):
    with pytest.raises(ValueError) as caught:
        validate_serve_grid({}, **kwargs)
    assert not isinstance(caught.value, ServeGridError)


# --- vLLM versions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("0.6.6", "0.7.0"),
        ("0.9.2", "0.10.0"),  # numeric, not text, comparison
        ("0.9.0rc1", "0.9.0"),
        ("0.9.0a1", "0.9.0b1"),
        ("0.9.0b2", "0.9.0rc1"),
        ("0.9.0.dev3", "0.9.0rc1"),
        ("0.9.0", "0.9.0.post1"),
        ("0.6.4.post2.dev157+g2f0a0a17", "0.6.4.post2"),
        ("0.17.1", "0.18.0"),
    ],
)
def test_it_orders_vllm_versions_like_pep_440(older, newer):
    assert parse_vllm_version(older) < parse_vllm_version(newer)


@pytest.mark.parametrize(
    ("left", "right"),
    [("0.9", "0.9.0"), ("v0.11.0", "0.11.0"), ("0.32.0+cpu", "0.32.0"), ("1", "1.0.0")],
)
def test_it_treats_spellings_of_one_release_as_equal(left, right):
    assert parse_vllm_version(left) == parse_vllm_version(right)


@pytest.mark.parametrize("text", ["latest", "nightly", "", "0.x", "0.9.0-cu128", None])
def test_it_refuses_what_is_not_a_version(text):
    with pytest.raises(ValueError):
        parse_vllm_version(text)


@pytest.mark.parametrize(
    ("grid", "version", "fields"),
    [
        ({"swap_space": [4]}, None, []),
        ({"swap_space": [4]}, "0.17.1", []),
        ({"swap_space": [4]}, "0.18.0", ["swap_space"]),
        ({"swap_space": [4]}, "0.29.0", ["swap_space"]),
        ({"enable_chunked_prefill": [True, False]}, "0.9.0", []),
        ({"enable_chunked_prefill": [True, False]}, "0.8.5", ["enable_chunked_prefill[1]"]),
        ({"enable_chunked_prefill": [True]}, "0.8.5", []),
        ({"enable_prefix_caching": [False, True]}, "0.6.6", ["enable_prefix_caching[0]"]),
        ({"enable_prefix_caching": [False]}, "0.7.0", []),
        ({"enable_prefix_caching": [False]}, None, []),
        # store_true flags have no negative form: false is always fine (the flag is left out)
        ({"enforce_eager": [False]}, "0.5.0", []),
    ],
)
def test_it_refuses_flags_the_vllm_version_does_not_accept(grid, version, fields):
    if not fields:
        assert validate_serve_grid(grid, gpu_count=1, vllm_version=version) == grid
        return
    errors = refused(grid, vllm_version=version)
    assert fields_of(errors) == fields


def test_it_says_which_version_removed_a_flag():
    errors = refused({"swap_space": [4]}, vllm_version="0.18.0")
    assert errors == [FieldError("swap_space", "--swap-space was removed in vLLM 0.18.0")]


def test_it_says_from_which_version_false_can_be_passed():
    errors = refused({"enable_chunked_prefill": [False]}, vllm_version="0.8.5")
    assert "false needs vLLM 0.9.0 or later (--no-enable-chunked-prefill)" in errors[0].message


def test_it_honours_since_and_renamed_to(monkeypatch):
    monkeypatch.setitem(
        SERVE_FLAGS,
        "max_num_seqs",
        FlagSpec(
            name="max_num_seqs",
            kind="int",
            cli="--max-num-seqs",
            help="test",
            minimum=1,
            since="0.5.0",
            removed_in="0.20.0",
            renamed_to="max_running_requests",
        ),
    )
    grid = {"max_num_seqs": [8]}
    assert validate_serve_grid(grid, gpu_count=1, vllm_version="0.5.0") == grid
    assert validate_serve_grid(grid, gpu_count=1, vllm_version="0.19.9") == grid
    assert refused(grid, vllm_version="0.4.3") == [
        FieldError("max_num_seqs", "--max-num-seqs needs vLLM 0.5.0 or later")
    ]
    assert refused(grid, vllm_version="0.20.0") == [
        FieldError(
            "max_num_seqs",
            "--max-num-seqs was removed in vLLM 0.20.0; use max_running_requests instead",
        )
    ]


# --- expansion -------------------------------------------------------------------------------


def test_it_expands_with_the_first_flag_varying_slowest():
    grid = {"max_num_seqs": [8, 64], "enable_prefix_caching": [True, False], "dtype": ["auto"]}
    assert expand_serve_grid(grid) == [
        {"max_num_seqs": 8, "enable_prefix_caching": True, "dtype": "auto"},
        {"max_num_seqs": 8, "enable_prefix_caching": False, "dtype": "auto"},
        {"max_num_seqs": 64, "enable_prefix_caching": True, "dtype": "auto"},
        {"max_num_seqs": 64, "enable_prefix_caching": False, "dtype": "auto"},
    ]


def test_it_expands_in_schema_order_whatever_the_key_order():
    # A JSON column may hand the keys back in another order; trial i must not change.
    forwards = {"max_num_batched_tokens": [512, 1024], "max_num_seqs": [8, 64, 128]}
    backwards = dict(reversed(list(forwards.items())))
    assert expand_serve_grid(forwards) == expand_serve_grid(backwards)
    assert [list(config) for config in expand_serve_grid(backwards)] == [
        ["max_num_batched_tokens", "max_num_seqs"]
    ] * 6
    assert expand_serve_grid(backwards)[1] == {"max_num_batched_tokens": 512, "max_num_seqs": 64}


def test_it_refuses_to_expand_an_unknown_flag():
    with pytest.raises(ServeGridError) as caught:
        expand_serve_grid({"bogus_flag": [1]})
    assert fields_of(caught.value.errors) == ["bogus_flag"]


# --- argv ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "argv"),
    [
        ({}, []),
        ({"max_num_seqs": 256}, ["--max-num-seqs", "256"]),
        ({"max_model_len": 10_485_760}, ["--max-model-len", "10485760"]),
        ({"gpu_memory_utilization": 0.9}, ["--gpu-memory-utilization", "0.9"]),
        ({"gpu_memory_utilization": 1}, ["--gpu-memory-utilization", "1.0"]),
        ({"swap_space": 1e-05}, ["--swap-space", "1e-05"]),
        ({"tensor_parallel_size": 2}, ["--tensor-parallel-size", "2"]),
        ({"enable_prefix_caching": True}, ["--enable-prefix-caching"]),
        ({"enable_prefix_caching": False}, ["--no-enable-prefix-caching"]),
        ({"enable_chunked_prefill": True}, ["--enable-chunked-prefill"]),
        ({"enable_chunked_prefill": False}, ["--no-enable-chunked-prefill"]),
        ({"enforce_eager": True}, ["--enforce-eager"]),
        ({"enforce_eager": False}, []),
        ({"kv_cache_dtype": "fp8_e4m3"}, ["--kv-cache-dtype", "fp8_e4m3"]),
        ({"dtype": "bfloat16"}, ["--dtype", "bfloat16"]),
        ({"quantization": "awq_marlin"}, ["--quantization", "awq_marlin"]),
        ({"quantization": None}, []),
        ({"block_size": 16}, ["--block-size", "16"]),
    ],
)
def test_it_renders_each_kind_of_flag(config, argv):
    assert serve_args(config) == argv


def test_it_renders_flags_in_schema_order():
    config = {
        "enforce_eager": True,
        "quantization": None,
        "max_num_seqs": 64,
        "enable_prefix_caching": False,
        "max_num_batched_tokens": 8192,
        "gpu_memory_utilization": 0.85,
    }
    assert serve_args(config, vllm_version="0.11.0") == [
        "--max-num-batched-tokens",
        "8192",
        "--max-num-seqs",
        "64",
        "--gpu-memory-utilization",
        "0.85",
        "--no-enable-prefix-caching",
        "--enforce-eager",
    ]


def test_it_renders_every_trial_of_a_checked_grid():
    grid = validate_serve_grid(
        {"max_num_seqs": [8, 64], "enable_chunked_prefill": [True, False]}, gpu_count=1
    )
    assert [serve_args(config) for config in expand_serve_grid(grid)] == [
        ["--max-num-seqs", "8", "--enable-chunked-prefill"],
        ["--max-num-seqs", "8", "--no-enable-chunked-prefill"],
        ["--max-num-seqs", "64", "--enable-chunked-prefill"],
        ["--max-num-seqs", "64", "--no-enable-chunked-prefill"],
    ]


@pytest.mark.parametrize(
    ("config", "version", "errors"),
    [
        ({"max_num_seqs": "8"}, None, [("max_num_seqs", "expected an integer")]),
        ({"max_num_seqs": True}, None, [("max_num_seqs", "got boolean true")]),
        ({"max_num_seqs": [8]}, None, [("max_num_seqs", "expected a single value")]),
        ({"gpu_memory_utilization": 0}, None, [("gpu_memory_utilization", "greater than 0.0")]),
        ({"dtype": "int8"}, None, [("dtype", "must be one of")]),
        ({"bogus_flag": 1}, None, [("bogus_flag", "unknown serve flag")]),
        ({"swap_space": 4}, "0.18.0", [("swap_space", "removed in vLLM 0.18.0")]),
        ({"enable_chunked_prefill": False}, "0.8.5", [("enable_chunked_prefill", "0.9.0")]),
        (
            {"max_num_seqs": 0, "bogus_flag": 1, "enforce_eager": 1},
            None,
            [
                ("max_num_seqs", "at least 1"),
                ("bogus_flag", "unknown"),
                ("enforce_eager", "true or false"),
            ],
        ),
    ],
)
def test_it_checks_a_config_before_rendering_it(config, version, errors):
    with pytest.raises(ServeGridError) as caught:
        serve_args(config, vllm_version=version)
    got = caught.value.errors
    assert [error.field for error in got] == [field for field, _ in errors]
    for error, (_, fragment) in zip(got, errors, strict=True):
        assert fragment in error.message


# --- the published schema --------------------------------------------------------------------


def test_it_publishes_a_json_schema_of_the_flags():
    schema = serve_flags_json_schema()
    assert json.loads(json.dumps(schema)) == schema  # plain JSON data
    assert schema["x-schema-version"] == SERVE_FLAGS_SCHEMA_VERSION
    assert schema["x-max-trials"] == MAX_GRID_TRIALS
    assert serve_flags_json_schema(max_trials=12)["x-max-trials"] == 12
    assert schema["additionalProperties"]["type"] == "array"  # another flag of the version
    assert schema["x-vllm-versions"] == list(SUPPORTED_VLLM_VERSIONS)
    assert list(schema["properties"]) == list(SERVE_FLAGS)
    assert [flag["name"] for flag in schema["x-flags"]] == list(SERVE_FLAGS)
    seqs = schema["properties"]["max_num_seqs"]
    assert seqs["minItems"] == 1 and seqs["uniqueItems"] is True
    assert seqs["items"] == {"type": "integer", "minimum": 1, "maximum": 16_384}
    assert schema["properties"]["gpu_memory_utilization"]["items"] == {
        "type": "number",
        "exclusiveMinimum": 0.0,
        "maximum": 1.0,
    }
    assert schema["properties"]["tensor_parallel_size"]["items"] == {
        "type": "integer",
        "enum": [1, 2, 4, 8, 16],
    }
    assert schema["properties"]["quantization"]["items"]["type"] == ["string", "null"]
    assert None in schema["properties"]["quantization"]["items"]["enum"]
    assert schema["properties"]["enforce_eager"]["items"] == {"type": "boolean"}
    flags = {flag["name"]: flag for flag in schema["x-flags"]}
    assert flags["enable_prefix_caching"]["cli"] == "--enable-prefix-caching"
    assert flags["enable_prefix_caching"]["negative_cli"] == "--no-enable-prefix-caching"
    assert flags["swap_space"]["removed_in"] == "0.18.0"
    assert flags["max_num_seqs"]["help"] == SERVE_FLAGS["max_num_seqs"].help
    # Each call is a fresh copy: a caller cannot corrupt the next answer.
    schema["properties"].clear()
    assert serve_flags_json_schema()["properties"]


def test_it_publishes_a_schema_that_agrees_with_the_validator():
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(serve_flags_json_schema())
    good = {"max_num_seqs": [8, 64], "gpu_memory_utilization": [0.9], "quantization": [None]}
    assert validate_serve_grid(good, gpu_count=1)
    assert list(validator.iter_errors(good)) == []
    for bad in (
        {"max_num_seqs": [0]},
        {"max_num_seqs": [8, 8]},
        {"max_num_seqs": []},
        {"gpu_memory_utilization": [0]},
        {"tensor_parallel_size": [3]},
        {"bogus_flag": []},
    ):
        assert list(validator.iter_errors(bad)), bad
        with pytest.raises(ServeGridError):
            validate_serve_grid(bad, gpu_count=16)


# --- the error type --------------------------------------------------------------------------


def test_it_renders_and_pickles_the_error():
    error = ServeGridError(
        [FieldError("max_num_seqs[1]", "must be at least 1; got 0"), FieldError("", "too big")]
    )
    assert isinstance(error, ValueError)
    assert str(error) == "max_num_seqs[1]: must be at least 1; got 0\n(grid): too big"
    copy = pickle.loads(pickle.dumps(error))
    assert copy.errors == error.errors
    assert str(copy) == str(error)


def test_it_imports_nothing_from_the_site():
    forbidden = ["django", "rest_framework", "celery", "channels", "runs", "benchsite"]
    code = (
        "import sys, agents.protocol; "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {forbidden!r}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
