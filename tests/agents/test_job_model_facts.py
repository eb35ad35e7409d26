"""A job carries its model's facts beyond the dense columns (``ModelSource.architecture``,
issue 18): the agent's simulator and its search predict with the MoE, MLA and sliding-window
facts the site registered, and a job without them reads exactly as before."""

from __future__ import annotations

import json
import types

import pydantic
import pytest

from agents import protocol
from agents.hardware import REGISTERED_FACTS, ModelFacts, load_model_facts
from agents.runner.search_run import RunnerTrials
from agents.runner.trial_engine import sim_model_file
from tests.agents.test_hf_configs import DEEPSEEK_V3, GEMMA_2_9B, LLAMA_3_1_8B, MIXTRAL_8X7B
from tests.agents.test_runner import make_job

CONFIGS = {
    "deepseek-ai/DeepSeek-V3": DEEPSEEK_V3,
    "mistralai/Mixtral-8x7B-v0.1": MIXTRAL_8X7B,
    "google/gemma-2-9b": GEMMA_2_9B,
    "meta-llama/Llama-3.1-8B": LLAMA_3_1_8B,
}


def source_of(facts: ModelFacts) -> protocol.ModelSource:
    """The job's model source as the site builds it from a model registered with ``facts``."""
    columns = facts.to_registered()
    return protocol.ModelSource(
        served_model_name=columns["hf_repo"],
        **columns,
        architecture=protocol.ModelArchitecture(**facts.to_architecture()),
    )


def job_with(source: protocol.ModelSource) -> protocol.JobSpec:
    return make_job([{}]).model_copy(update={"model": source})


@pytest.mark.parametrize("repo", sorted(CONFIGS))
def test_a_jobs_model_source_gives_the_registered_models_full_facts(repo):
    facts = ModelFacts.from_hf_config(CONFIGS[repo], name=repo)
    job = job_with(source_of(facts))
    # As the agent reads it: the job's JSON, parsed strictly.
    read = protocol.JobSpec.model_validate_json(job.model_dump_json())
    assert read.model.facts() == facts
    assert read.model.facts().kv_bytes_per_token() == facts.kv_bytes_per_token()


@pytest.mark.parametrize("repo", sorted(CONFIGS))
def test_the_simulator_and_the_search_use_the_jobs_facts(repo, tmp_path):
    facts = ModelFacts.from_hf_config(CONFIGS[repo], name=repo)
    job = protocol.JobSpec.model_validate_json(job_with(source_of(facts)).model_dump_json())
    # The simulator reads the file the trial engine writes (serve-sim --model-spec FILE).
    assert load_model_facts(str(sim_model_file(job.model, tmp_path))) == facts
    runner = types.SimpleNamespace(job=job, dataset_path=None)
    assert RunnerTrials(runner, loop=None).model == facts


def test_a_moe_jobs_simulator_sees_its_experts_not_a_dense_model(tmp_path):
    facts = ModelFacts.from_hf_config(MIXTRAL_8X7B, name="mistralai/Mixtral-8x7B-v0.1")
    job = job_with(source_of(facts))
    simulated = load_model_facts(str(sim_model_file(job.model, tmp_path)))
    assert simulated.num_experts == MIXTRAL_8X7B["num_local_experts"]
    assert simulated.num_experts_per_token == MIXTRAL_8X7B["num_experts_per_tok"]
    assert simulated.parameters_per_token == facts.active_parameters < facts.parameters
    # Without the architecture the same columns describe a dense model of all its weights.
    dense = job.model.model_copy(update={"architecture": None}).facts()
    assert dense.num_experts == 0 and dense.parameters_per_token == facts.parameters


def test_a_job_without_architecture_reads_and_simulates_as_before(tmp_path):
    job = make_job([{}])
    document = json.loads(job.model_dump_json())
    assert "architecture" not in document["model"]
    before = ModelFacts.from_registered(**job.model.model_dump(include=REGISTERED_FACTS))
    assert job.model.facts() == before
    assert load_model_facts(str(sim_model_file(job.model, tmp_path))) == before


def test_it_leaves_out_the_facts_a_dense_model_does_not_state():
    facts = ModelFacts.from_hf_config(LLAMA_3_1_8B, name="meta-llama/Llama-3.1-8B")
    document = json.loads(job_with(source_of(facts)).model_dump_json())
    assert document["model"]["architecture"] == {
        "vocab_size": LLAMA_3_1_8B["vocab_size"],
        "intermediate_size": LLAMA_3_1_8B["intermediate_size"],
    }


@pytest.mark.parametrize(
    ("architecture", "problem"),
    [
        ({"num_experts": 8}, "num_experts_per_token must be in 1..num_experts"),
        ({"sliding_window": 4096}, "sliding_window and sliding_window_layers go together"),
        ({"qk_rope_head_dim": 64}, "qk_rope_head_dim is an MLA fact"),
    ],
)
def test_it_refuses_an_architecture_that_contradicts_the_columns(architecture, problem):
    document = json.loads(make_job([{}]).model_dump_json())
    document["model"]["architecture"] = architecture
    with pytest.raises(pydantic.ValidationError) as refused:
        protocol.JobSpec.model_validate_json(json.dumps(document))
    assert problem in str(refused.value)
    assert protocol.pydantic_field_errors(refused.value)[0].field == "model"


@pytest.mark.parametrize(
    ("architecture", "field"),
    [
        ({"vocab_size": "128256"}, "model.architecture.vocab_size"),
        ({"vocab_size": 0}, "model.architecture.vocab_size"),
        ({"sliding_window_layers": [1.5]}, "model.architecture.sliding_window_layers[0]"),
        ({"num_routed_experts": 8}, "model.architecture.num_routed_experts"),
    ],
)
def test_it_refuses_a_fact_of_the_wrong_type_by_its_path(architecture, field):
    document = json.loads(make_job([{}]).model_dump_json())
    document["model"]["architecture"] = architecture
    with pytest.raises(pydantic.ValidationError) as refused:
        protocol.JobSpec.model_validate_json(json.dumps(document))
    assert [error.field for error in protocol.pydantic_field_errors(refused.value)] == [field]


def test_the_wire_names_every_architecture_fact_of_the_hardware_side():
    from agents.hardware import ARCHITECTURE_FACTS

    assert set(protocol.ModelArchitecture.model_fields) == ARCHITECTURE_FACTS


def test_it_refuses_a_name_that_is_no_architecture_fact():
    facts = ModelFacts.from_hf_config(LLAMA_3_1_8B, name="meta-llama/Llama-3.1-8B")
    with pytest.raises(TypeError, match="num_routed_experts"):
        ModelFacts.from_registered(**facts.to_registered(), architecture={"num_routed_experts": 8})
