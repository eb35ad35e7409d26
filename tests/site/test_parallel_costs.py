"""Fair cost across parallelism: a trial's cost per 1M output tokens counts the GPUs its
configuration uses (tensor × pipeline × data parallel sizes), not the whole pod, and every
page that shows the cost says what it is priced for (docs/costs.md, "Parallelism")."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from runs.costs import GpuShare, level_cost_per_million_output_tokens
from runs.selectors.run_answer import run_answer
from runs.selectors.trial_costs import trial_costs

from .conftest import signed_in
from .report_data import add_run, add_trial
from .test_web_runs import (
    capacity_found,
    compare_url,
    detail_url,
    new_experiment,
    steady_level,
    text_of,
)

# $14.40 an hour for the 4-GPU pod: $3.60 per GPU-hour, $0.001 per GPU-second.
POD_PRICE = "14.40"


def test_it_counts_tensor_pipeline_and_data_parallel_sizes():
    assert GpuShare.of({}, pod_gpus=4) == GpuShare(used=1, pod=4)
    # A grid's numbers come back as floats from its JSON column.
    assert GpuShare.of({"tensor_parallel_size": 2.0}, pod_gpus=4).used == 2
    assert (
        GpuShare.of({"tensor_parallel_size": 2, "pipeline_parallel_size": 2}, pod_gpus=4).used == 4
    )
    assert GpuShare.of({"tensor_parallel_size": 2, "data_parallel_size": 4}, pod_gpus=8).used == 8
    # A product above the pod's GPUs cannot have run on it: capped at the pod.
    assert GpuShare.of({"tensor_parallel_size": 8}, pod_gpus=4) == GpuShare(used=4, pod=4)
    assert GpuShare(used=1, pod=4).describe() == "priced for 1 of 4 GPUs"
    assert GpuShare(used=4, pod=4).describe() == "priced for all 4 GPUs"
    assert GpuShare(used=1, pod=1).describe() == "priced for its 1 GPU"
    for used, pod in [(0, 4), (5, 4), (1, 0)]:
        with pytest.raises(ValueError):
            GpuShare(used=used, pod=pod)


def test_it_prices_a_level_for_the_gpus_it_uses():
    rate = Decimal(POD_PRICE)
    whole = level_cost_per_million_output_tokens(output_throughput_tok_s=1000, pod_usd_per_hr=rate)
    quarter = level_cost_per_million_output_tokens(
        output_throughput_tok_s=1000, pod_usd_per_hr=rate, share=GpuShare(used=1, pod=4)
    )
    assert (whole, quarter) == (Decimal("4.0000"), Decimal("1.0000"))


def tp_run(org):
    """A 4-GPU pod running TP=1 (1,000 tok/s at capacity) beside TP=4 (3,000 tok/s)."""
    experiment = new_experiment(org, gpu_count=4, serve_grid={"tensor_parallel_size": [1, 4]})
    run = add_run(experiment, created_at=timezone.now(), price=POD_PRICE)
    for index, (tp, throughput) in enumerate([(1, 1000.0), (4, 3000.0)]):
        ci = (throughput * 0.99, throughput * 1.01)
        trial = add_trial(
            run, index, {"tensor_parallel_size": tp}, [steady_level(16, throughput, ci)]
        )
        trial.capacity = capacity_found(16, throughput, high=17)
        trial.save(update_fields=["capacity"])
    return run


@pytest.mark.django_db
def test_a_tp1_and_a_tp4_trial_on_one_pod_compare_per_gpu_used(alice):
    run = tp_run(alice.org)
    answer = run_answer(run=run)
    by_trial = {config.trial: config for config in answer.configs}
    # TP=1: 1 of 4 GPUs, $3.60/h ÷ 1,000 tok/s = $1.00 per 1M. Priced for the whole pod it
    # would be $4.00 and lose to TP=4 ($14.40/h ÷ 3,000 tok/s = $1.3333), though it serves
    # 1,000 tok/s per GPU against TP=4's 750.
    assert by_trial[0].usd_per_million_output_tokens == Decimal("1.0000")
    assert by_trial[1].usd_per_million_output_tokens == Decimal("1.3333")
    assert answer.winner.trial == 0 and answer.pod_usd_per_hr == Decimal(POD_PRICE)
    assert (by_trial[0].priced_for, by_trial[1].priced_for) == (
        "priced for 1 of 4 GPUs",
        "priced for all 4 GPUs",
    )
    # The fixed level's cost follows the same rule, and says so in its notes.
    cost = trial_costs(trial=run.trials.get(index=0))
    assert cost.usd_per_million_output_tokens == Decimal("1.0000")
    assert cost.pod_usd_per_hr == Decimal("14.4000") and cost.usd_per_hr == Decimal("3.6000")
    assert any("the pod's rate × 1/4" in note for note in cost.notes)


@pytest.mark.django_db
def test_the_run_and_compare_pages_say_what_a_cost_is_priced_for(alice):
    run = tp_run(alice.org)
    client = signed_in(alice)
    text = text_of(client.get(detail_url(run)).content.decode())
    assert "$1.0000 per 1M output tokens (95 % CI" in text
    assert "priced for 1 of 4 GPUs" in text and "priced for all 4 GPUs" in text
    html = client.get(compare_url(), {"trials": [f"{run.id}:0", f"{run.id}:1"]}).content
    table = html.decode()[html.decode().index('id="compare-table"') :]
    row = text_of(table[table.index("GPUs the cost counts") :].split("</tr>")[0])
    assert row == "GPUs the cost counts priced for 1 of 4 GPUs priced for all 4 GPUs", row
