"""vLLM's own defaults by version, entry point and GPU (agents.hardware.vllm_defaults), held
against what vLLM's source says (the PRs and tests named in the module's docstring)."""

import pytest

from agents.engines.sim.scheduler import make_scheduler, with_version_defaults
from agents.hardware import MODEL_PRESETS, ServeSettings, gpu_profile
from agents.hardware.vllm_defaults import batch_defaults

H100, H200, A100, B200 = (gpu_profile(n) for n in ("H100", "H200", "A100 80GB", "B200"))
RTX4090, L40S = gpu_profile("RTX 4090"), gpu_profile("L40S")
LLAMA8 = MODEL_PRESETS["llama-3.1-8b"].facts


def defaults(release, gpu, entry="serve"):
    d = batch_defaults(release, gpu, entry)
    return d.max_num_batched_tokens, d.max_num_seqs


def test_it_gives_v0_9_to_v0_27_defaults_by_memory_and_not_a100():
    # vLLM's test_defaults_with_usage_context: 16384/8192 tokens and 1024 seqs on large GPUs,
    # 8192/2048 and 256 elsewhere; PR #17885 keeps A100 on the small ones.
    for release in ((0, 9, 0), (0, 10, 1), (0, 11, 0), (0, 27, 1)):
        assert defaults(release, H100) == (8192, 1024)
        assert defaults(release, H100, "offline") == (16384, 1024)
        assert defaults(release, H200) == (8192, 1024)
        assert defaults(release, B200) == (8192, 1024)
        assert defaults(release, A100) == (2048, 256)
        assert defaults(release, A100, "offline") == (8192, 256)
        assert defaults(release, L40S) == (2048, 256)
        assert defaults(release, RTX4090) == (2048, 256)


def test_it_gives_the_v0_8_name_rule_and_its_max_num_seqs():
    # PR #12369: H100/H200 by device name; V1's max_num_seqs was 1024 everywhere until
    # PR #16158 (0.8.4) put other GPUs back to 256; PR #17073 (0.8.5) went by memory.
    assert defaults((0, 8, 2), H200) == (8192, 1024)
    assert defaults((0, 8, 2), B200) == (2048, 1024)
    assert defaults((0, 8, 2), A100) == (2048, 1024)
    assert defaults((0, 8, 4), A100) == (2048, 256)
    assert defaults((0, 8, 5), A100) == (8192, 1024)
    assert defaults((0, 8, 5), B200) == (8192, 1024)


def test_it_gives_the_160_gib_tier_from_v0_28():
    assert defaults((0, 28, 0), B200) == (16384, 1024)
    assert defaults((0, 28, 0), H200) == (8192, 1024)  # 141 GB: under 160 GiB
    assert defaults(None, B200) == (16384, 1024)  # unknown version: the newest


def test_it_marks_a_v0_version_as_not_modelled():
    old = batch_defaults((0, 6, 0), H100)
    assert not old.modelled and batch_defaults((0, 8, 0), H100).modelled
    assert old.enable_chunked_prefill and old.enable_prefix_caching


def test_it_refuses_an_unknown_entry_point():
    with pytest.raises(ValueError, match="entry point"):
        batch_defaults(None, H100, "grpc")


def test_the_start_check_fills_flags_from_the_table():
    settings = ServeSettings.from_flags({"max_model_len": 4096}, LLAMA8, B200)
    assert (settings.max_num_batched_tokens, settings.max_num_seqs) == defaults(None, B200)
    settings = ServeSettings.from_flags({"max_model_len": 4096}, LLAMA8, A100)
    assert (settings.max_num_batched_tokens, settings.max_num_seqs) == (2048, 256)


def test_the_simulator_uses_the_versions_defaults_where_a_flag_is_not_given():
    flags = {"max_model_len": 4096}
    old = make_scheduler(LLAMA8, B200, flags, vllm_version="0.8.2").settings
    new = make_scheduler(LLAMA8, B200, flags, vllm_version="0.28.0").settings
    assert (old.max_num_batched_tokens, old.max_num_seqs) == (2048, 1024)
    assert (new.max_num_batched_tokens, new.max_num_seqs) == (16384, 1024)
    offline = make_scheduler(LLAMA8, H100, flags, vllm_version="0.11.0", entry_point="offline")
    assert offline.settings.max_num_batched_tokens == 16384
    given = make_scheduler(LLAMA8, B200, {**flags, "max_num_seqs": 8}, vllm_version="0.8.2")
    assert given.settings.max_num_seqs == 8  # a flag given wins
    assert with_version_defaults(H100, {"max_num_seqs": None})["max_num_seqs"] == 1024
    with pytest.raises(ValueError, match="not a vLLM version"):
        with_version_defaults(H100, {}, "nightly")


def test_serve_sim_takes_the_experiments_vllm_version(tmp_path):
    from agents.engines.sim.command import argument_parser, build_scheduler
    from agents.engines.sim.engine import sim_engine

    engine = sim_engine(
        model_spec="llama-3.1-8b",
        gpu="B200",
        config={"max_model_len": 4096},
        workdir=tmp_path,
        vllm_version="0.8.2",
    )
    args = argument_parser().parse_args(engine.argv[3:])
    settings = build_scheduler(args).settings
    assert (settings.max_num_batched_tokens, settings.max_num_seqs) == (2048, 1024)
    newest = build_scheduler(argument_parser().parse_args(engine.argv[3:-2])).settings
    assert newest.max_num_batched_tokens == 16384


def test_a_prediction_fills_the_flags_left_out_as_its_version_does():
    from agents.loadgen import RandomPrompts
    from agents.predict import predict_trial
    from tests.agents.test_predict import closed_loop_config

    config = closed_loop_config(
        source=RandomPrompts(input_len=3000, output_len=16),
        levels=({"concurrency": 1},),
        num_prompts=4,
    )
    flags = {"max_model_len": 4096}
    old, new = (
        predict_trial(LLAMA8, A100, flags, config, vllm_version=v, intervals=False)
        for v in ("0.8.5", "0.11.0")
    )
    # 0.8.5 gives an A100 80GB 8,192 tokens a step, 0.9 on 2,048: a 3,000-token prompt is
    # prefilled in one step, then in two chunks, so its first token comes later.
    assert old.levels[0]["median_ttft_ms"] < new.levels[0]["median_ttft_ms"]
