"""A trial's cost per 1M output tokens, priced as its run was started."""

from __future__ import annotations

from decimal import Decimal

from runs.costs import (
    DEFAULT_SERVING_WINDOW_SECONDS,
    GpuShare,
    TrialCost,
    trial_cost_per_million_output_tokens,
)
from runs.models import GpuType, Measurement, Run, Trial
from runs.run_as_started import (
    run_cloud_type,
    run_endpoint,
    run_endpoint_price,
    run_engine,
    run_is_simulated,
)
from runs.selectors.prices import gpu_price, pod_rate_from_price


def _level_of(measurement: Measurement) -> dict:
    # The stored columns are authoritative for the level; the result's own keys may repeat it.
    level = {
        k: v for k, v in measurement.result.items() if k not in ("concurrency", "request_rate")
    }
    if measurement.concurrency is not None:
        level["concurrency"] = measurement.concurrency
    else:
        level["request_rate"] = (
            "inf" if measurement.request_rate_infinite else measurement.request_rate
        )
    return level


def trial_gpu_share(trial: Trial) -> GpuShare | None:
    """The GPUs of its run's pod the trial's configuration uses (``runs.costs.GpuShare``),
    what its cost per token is priced for; None for an existing endpoint's run (priced as a
    whole, it rents no GPUs)."""
    return run_gpu_share(trial.run, trial.serve_config)


def run_gpu_share(run: Run, serve_config: dict) -> GpuShare | None:
    """``trial_gpu_share`` of a trial of ``run`` configured with ``serve_config``."""
    if run_endpoint(run) is not None:
        return None
    return GpuShare.of(serve_config, pod_gpus=run_engine(run).gpu_count)


def trial_costs(
    *, trial: Trial, serving_window_seconds: Decimal = DEFAULT_SERVING_WINDOW_SECONDS
) -> TrialCost:
    """The trial's $ per 1M output tokens at its best level under the SLOs, steady and with
    cold start amortized (``runs.costs.trial_cost_per_million_output_tokens``).

    Priced at the pod's billed rate when the provider gave one (``Run.price_usd_hr``), else
    at the organization's price for the GPUs × their count the run was started with; an
    existing endpoint's run at the endpoint's price per hour (none when it is priced per
    token or not at all). The cost per token counts only the GPUs the trial uses
    (``trial_gpu_share``). Reads only rows of the trial's own organization.
    """
    run = trial.run
    rate: Decimal | None
    endpoint = run_endpoint(run)
    if endpoint is not None:
        # Its own price, never a GPU's: per hour as a pod's rate; per token or none, no rate.
        price = run_endpoint_price(run)
        rate = price.usd_per_hour if price else None
        source = (
            f"endpoint {endpoint['name']}'s price per hour"
            if rate is not None
            else f"endpoint {endpoint['name']} is priced per token (see the run's cost)"
            if price
            else f"endpoint {endpoint['name']} has no price"
        )
    elif run.price_usd_hr is not None:
        rate, source = run.price_usd_hr, "the pod's billed rate"
    else:
        engine = run_engine(run)
        price = gpu_price(
            org=run.organization,
            gpu_type=GpuType.objects.get(id=engine.gpu_type),
            cloud_type=run_cloud_type(run),
        )
        rate, source = pod_rate_from_price(price, engine.gpu_count)
    return trial_cost_per_million_output_tokens(
        [_level_of(measurement) for measurement in trial.measurements.all()],
        pod_usd_per_hr=rate,
        cold_start=trial.cold_start,
        price_source=source,
        serving_window_seconds=serving_window_seconds,
        simulated=run_is_simulated(run),
        share=trial_gpu_share(trial),
    )
