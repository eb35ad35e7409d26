"""The derived memory facts of a model, and the pre-run cost estimate."""

from __future__ import annotations

from decimal import Decimal

import pytest

from agents.hardware import gpu_profile, start_check
from frontend.experiments.estimate_panel import duration_text
from runs.models import Experiment, GpuType, Run
from runs.selectors.estimates import Assumptions, experiment_estimate
from runs.services.catalogue import gpu_price_set

from .conftest import H100, SYSTEM, experiment_payload, frozen, make_experiment, make_model


def test_it_derives_kv_cache_bytes_per_token_from_the_architecture(alice):
    model = make_model(alice.org)  # Llama 3.1 8B: 32 layers, 8 KV heads of 128, bf16
    assert model.kv_cache_bytes_per_token() == 2 * 32 * 8 * 128 * 2 == 131_072
    assert model.kv_cache_bytes_per_token(kv_cache_dtype="fp8") == 65_536
    response = alice.client().get(f"/api/v1/orgs/acme/models/{model.id}/")
    assert response.json()["kv_cache_bytes_per_token"] == 131_072
    assert response.json()["weight_bytes"] == 8_030_261_248 * 2


def test_it_grows_with_the_number_of_trials(alice):
    model = make_model(alice.org)
    one = experiment_estimate(experiment=make_experiment(alice.org, model=model, serve_grid={}))
    grid = {"max_num_seqs": [8, 16, 32, 64]}
    four = experiment_estimate(
        experiment=make_experiment(alice.org, model=model, name="four", serve_grid=grid)
    )
    assert (one.trials, four.trials) == (1, 4)
    assert four.cold_start_seconds == pytest.approx(4 * one.cold_start_seconds, rel=1e-3)
    assert four.cost_usd > one.cost_usd


def test_it_counts_one_download_per_run_and_none_from_a_warm_volume(alice):
    model = make_model(alice.org)
    grid = {"max_num_seqs": [8, 16, 32]}
    experiment = make_experiment(alice.org, model=model, serve_grid=grid, network_volume_id="v1")
    cold = experiment_estimate(experiment=experiment)
    # 16 GB of weights at 500 MB/s, once for the run however many trials it has.
    assert cold.weights_download_seconds == pytest.approx(model.weight_bytes / 500e6, abs=0.1)
    assert cold.provisioning_seconds == pytest.approx(300 + cold.weights_download_seconds, abs=0.1)
    # A run on this volume fetched the weights: the next one finds them there.
    Run.objects.create(
        organization=alice.org,
        experiment=experiment,
        weights_fetch={"bytes": model.weight_bytes, "seconds": 40.0},
        **frozen(experiment),
    )
    warm = experiment_estimate(experiment=experiment)
    assert warm.weights_download_seconds == 0 and warm.provisioning_seconds == 300
    assert warm.total_seconds == pytest.approx(
        cold.total_seconds - cold.weights_download_seconds, abs=0.2
    )  # each rounded to 0.1 s
    # Another volume, or another revision of the model, is cold again.
    other = make_experiment(
        alice.org, model=model, name="other", serve_grid=grid, network_volume_id="v2"
    )
    assert experiment_estimate(experiment=other).weights_download_seconds > 0
    assert (
        experiment_estimate(
            experiment=make_experiment(alice.org, model=model, name="none", serve_grid=grid)
        ).weights_download_seconds
        > 0
    )


def test_it_prices_with_the_organizations_own_rate(alice):
    experiment = make_experiment(alice.org)
    catalogue = experiment_estimate(experiment=experiment)
    assert catalogue.price_usd_per_gpu_hour == Decimal("3.99")
    gpu_price_set(
        org=alice.org,
        gpu_type=GpuType.objects.get(id=H100),
        actor=SYSTEM,
        price_secure_usd_hr=Decimal("1.995"),
        price_community_usd_hr=None,
        note="reserved",
    )
    own = experiment_estimate(experiment=experiment)
    assert own.price_usd_per_gpu_hour == Decimal("1.995")
    assert "reserved" in own.price_source
    assert own.total_seconds == catalogue.total_seconds
    assert own.cost_usd == pytest.approx(catalogue.cost_usd / 2, abs=Decimal("0.01"))


def test_it_costs_nothing_on_the_simulator(alice):
    estimate = experiment_estimate(experiment=make_experiment(alice.org, engine="sim"))
    assert estimate.cost_usd == 0
    assert estimate.total_seconds > 0


def test_a_simulated_run_takes_what_computing_it_here_takes(alice):
    # The "the estimate said 26 min for a run that took 2 min 52 s": a simulated run
    # is computed in the simulator's own time, in seconds, not in the modelled GPU's.
    experiment = make_experiment(alice.org, engine="sim")
    estimate = experiment_estimate(experiment=experiment)
    a = Assumptions()
    levels = estimate.trials * estimate.levels_per_trial
    bare = Assumptions(sim_step_seconds=0, sim_sequence_step_seconds=0)
    fixed = experiment_estimate(experiment=experiment, assumptions=bare).total_seconds
    assert fixed == pytest.approx(
        a.sim_run_seconds + estimate.trials * a.sim_trial_seconds + levels * a.sim_level_seconds,
        abs=0.1,
    )
    assert estimate.total_seconds > fixed  # and each step and sequence in a step
    # What the modelled GPU would take is kept beside it, and is far longer.
    assert estimate.gpu_seconds > 10 * estimate.total_seconds
    assert duration_text(estimate.total_seconds).endswith(" s")

    def variant(name: str, **workload) -> Experiment:
        return make_experiment(
            alice.org,
            model=experiment.model,
            engine="sim",
            name=name,
            workload=experiment.workload | workload,
        )

    # More requests per level: more to compute.
    longer = variant("longer", requests_per_level=2000)
    assert experiment_estimate(experiment=longer).total_seconds > estimate.total_seconds
    # Timed levels are computed too: a minute of simulated time per level is more work.
    timed = variant("timed", level_seconds=60)
    bare_timed = experiment_estimate(experiment=timed, assumptions=bare).total_seconds
    assert experiment_estimate(experiment=timed).total_seconds > bare_timed


def test_a_local_pod_starts_in_seconds_and_fetches_nothing(alice, settings):
    # The ENGINE=vllm demo's 59 s run was estimated at 349 s: a Runpod pod's 300 s start.
    settings.BENCHSITE_PROVIDER = "local"
    estimate = experiment_estimate(experiment=make_experiment(alice.org))
    assert estimate.weights_download_seconds == 0
    assert estimate.provisioning_seconds == Assumptions().local_pod_start_seconds
    assert estimate.gpu_seconds == estimate.total_seconds


def test_it_warns_when_the_weights_cannot_fit(alice):
    huge = make_model(
        alice.org,
        name="405B",
        hf_repo="meta-llama/Llama-3.1-405B",
        parameter_count=405_000_000_000,
        num_layers=126,
        hidden_size=16384,
        num_attention_heads=128,
        num_kv_heads=8,
    )
    estimate = experiment_estimate(experiment=make_experiment(alice.org, model=huge))
    assert any("do not fit" in warning for warning in estimate.warnings)


def test_it_saturates_at_high_concurrency(alice):
    # Twice the requests at a concurrency far above max_num_seqs: waves of max_num_seqs, so
    # the sweep time roughly doubles instead of staying flat.
    model = make_model(alice.org)

    def sweep(requests):
        workload = {
            "dataset": {"kind": "random", "input_len": 512, "output_len": 128},
            "concurrency": [1024],
            "requests_per_level": requests,
            # The window holds exactly `requests`; the ramp and the drain add 2 x 1024.
            "steady_multiple": 0,
        }
        experiment = make_experiment(
            alice.org,
            model=model,
            name=f"sat-{requests}",
            workload=workload,
            serve_grid={"max_num_seqs": [64]},
        )
        return experiment_estimate(experiment=experiment).sweep_seconds

    low, middle, high = sweep(640), sweep(1280), sweep(2560)
    # Twice the extra requests, twice the extra time.
    assert high - middle == pytest.approx(2 * (middle - low), rel=0.02)


def test_it_counts_steady_windows_and_the_capacity_searchs_probes(alice):
    model = make_model(alice.org)

    def estimate(name, slos=None, **workload):
        base = {
            "dataset": {"kind": "random", "input_len": 512, "output_len": 128},
            "concurrency": [1, 128],
            "requests_per_level": 32,
        }
        experiment = make_experiment(
            alice.org,
            model=model,
            name=name,
            workload=base | workload,
            **({"slos": slos} if slos else {}),
        )
        return experiment_estimate(experiment=experiment)

    # The SLOs' p99 TTFT needs 299 requests in a window to be judged: every window holds them.
    short = estimate("short", steady_multiple=0)
    steady = estimate("steady")  # a window of 4 x 128 requests at concurrency 128
    judged_at_p90 = estimate("p90", slos={"ttft_ms": 500, "ttft_percentile": 90})
    searching = estimate("search", capacity={"max_probes": 3})
    repeated = estimate("repeated", repeats=2)
    timed = estimate("timed", level_seconds=600)
    assert steady.sweep_seconds > short.sweep_seconds
    # A p90 needs 29: the c=1 window holds the workload's 32 requests, not 299.
    assert judged_at_p90.sweep_seconds < steady.sweep_seconds
    # 2 fixed levels + 3 probes + the bracket's 2 repeats + 2 more of a load too close to call.
    assert (steady.levels_per_trial, searching.levels_per_trial) == (2, 9)
    assert repeated.levels_per_trial == 4
    assert repeated.sweep_seconds == pytest.approx(2 * steady.sweep_seconds, abs=0.2)  # rounding
    # Two trials of two levels of 600 s each, and their drains.
    assert 2400 < timed.sweep_seconds < 2600
    assert searching.sweep_seconds > steady.sweep_seconds


def test_it_is_shown_by_the_api_and_flags_the_budget(alice):
    experiment = make_experiment(alice.org, budget_cap_usd=Decimal("0.01"))
    body = alice.client().get(f"/api/v1/orgs/acme/experiments/{experiment.id}/estimate/").json()
    assert body["trials"] == 2 and body["levels_per_trial"] == 3
    assert body["within_budget"] is False
    assert Decimal(body["cost_usd"]) > Decimal("0.01")
    assert "bandwidth_efficiency" in body["assumptions"]


def test_it_accepts_an_empty_grid_as_one_trial_on_vllm_defaults(alice):
    model = make_model(alice.org)
    response = alice.client().post(
        "/api/v1/orgs/acme/experiments/", experiment_payload(model.id, serve_grid={}), format="json"
    )
    assert response.status_code == 201, response.json()
    assert response.json()["serve_grid"] == {} and response.json()["trials"] == 1


def test_it_warns_when_the_kv_cache_cannot_hold_the_heaviest_level(alice):
    # Long context (issue 19): 64 requests of 100k + 1k tokens in flight need 6.5M tokens of
    # KV cache; one H100 holds about 0.4M for Llama 3.1 8B.
    model = make_model(alice.org)
    long_context = {
        "dataset": {"kind": "random", "input_len": 100_000, "output_len": 1_000},
        "concurrency": [1, 64],
        "requests_per_level": 10,
    }
    experiment = make_experiment(
        alice.org, model=model, name="long", workload=long_context, serve_grid={}
    )
    (warning,) = [w for w in experiment_estimate(experiment=experiment).warnings if "KV" in w]
    _, plan = start_check(model.facts, gpu_profile(H100), {})
    assert warning.startswith("Trial 1: the KV cache holds about ")
    assert (
        f"{plan.kv_tokens:,} tokens, {plan.kv_tokens // 101_000:,} requests of 101,000" in warning
    )
    assert "concurrency 64 needs 6,464,000" in warning
    # The same workload at a concurrency the cache holds: no warning.
    fits = make_experiment(
        alice.org,
        model=model,
        name="fits",
        workload=long_context | {"concurrency": [1, plan.kv_tokens // 101_000]},
        serve_grid={},
    )
    assert not [w for w in experiment_estimate(experiment=fits).warnings if "KV" in w]
