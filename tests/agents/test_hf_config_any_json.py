"""Any JSON where a config.json is expected (issue 18): ``ModelFacts.from_hf_config`` gives
facts or a ValueError naming the key, never another exception, so the site can refuse a
pasted, uploaded or fetched config by its field instead of failing."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.hardware import ModelFacts
from tests.agents.test_hf_configs import ALL_CONFIGS

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
# The keys the reader looks at, each of which may arrive holding any JSON value.
READ_KEYS = sorted(
    {key for config in ALL_CONFIGS.values() for key in config}
    | {
        "text_config",
        "is_encoder_decoder",
        "layer_types",
        "mlp_only_layers",
        "decoder_sparse_step",
        "num_experts",
        "shared_expert_intermediate_size",
        "use_sliding_window",
        "max_window_layers",
        "sliding_window_pattern",
        "num_parameters",
        "dtype",
    }
)
QUANTIZATIONS = st.fixed_dictionaries(
    {"quant_method": st.sampled_from(["fp8", "awq", "gptq", "compressed-tensors", "bitsandbytes"])},
    optional={
        "bits": JSON,
        "config_groups": JSON
        | st.dictionaries(st.text(max_size=4), st.dictionaries(st.sampled_from(["weights"]), JSON)),
        "load_in_4bit": JSON,
    },
)


def _read(config) -> None:
    untouched = copy.deepcopy(config)
    try:
        ModelFacts.from_hf_config(config)
    except ValueError as refused:
        assert str(refused).startswith("config.json") or "model spec" in str(refused)
    assert config == untouched


@pytest.mark.parametrize("base", sorted(ALL_CONFIGS))
@pytest.mark.slow
def test_any_value_under_any_key_gives_facts_or_a_value_error(base):
    @settings(
        max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    @given(key=st.sampled_from(READ_KEYS), value=JSON)
    def read(key, value):
        _read({**ALL_CONFIGS[base], key: value})

    read()


def test_any_quantization_config_gives_facts_or_a_value_error():
    @settings(
        max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    @given(quantization=QUANTIZATIONS | JSON)
    def read(quantization):
        _read({**ALL_CONFIGS["llama-3.1-8b"], "quantization_config": quantization})

    read()


@pytest.mark.parametrize("config", [[], "config", 7, None, {"text_config": {"model_type": []}}])
def test_a_document_that_is_no_config_is_a_value_error(config):
    with pytest.raises(ValueError, match=r"config\.json"):
        ModelFacts.from_hf_config(config)


def test_it_refuses_more_layers_than_any_decoder_has_before_walking_them():
    config = {**ALL_CONFIGS["mixtral-8x7b"], "num_hidden_layers": 2**60}
    with pytest.raises(ValueError, match="num_hidden_layers must be at most"):
        ModelFacts.from_hf_config(config)
