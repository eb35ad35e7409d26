"""Run answers built by hand, for tests of how an answer is printed (the demo's terminal,
``benchsite runs show``): one configuration at capacity, and the answer that holds them."""

from __future__ import annotations

from decimal import Decimal

from runs.selectors.run_answer import ConfigAnswer, Margin, RunAnswer


def config_answer(
    trial: int,
    serve_config: dict,
    *,
    command: str = "vllm serve m --max-num-batched-tokens 2048",
    capacity: float = 99,
    cost: str = "0.547",
    image_tag: str = "",
    output_throughput: float = 2026.0,
) -> ConfigAnswer:
    """Trial ``trial`` bracketed at [capacity, capacity + 6) in four probes, at ``cost`` USD
    per 1M output tokens there."""
    return ConfigAnswer(
        trial=trial,
        serve_config=serve_config,
        image_tag=image_tag,
        serve_command=command,
        axis="concurrency",
        capacity=capacity,
        bracket_low=capacity,
        bracket_high=capacity + 6,
        probes=4,
        bracket_high_verdict="missed",
        stop_reason="bracketed",
        output_throughput=output_throughput,
        output_throughput_ci95=None,
        usd_per_million_output_tokens=Decimal(cost),
        usd_per_million_ci95=None,
    )


def simulated_answer(
    winner: ConfigAnswer,
    *others: ConfigAnswer,
    margin_pct: float | None = None,
    margin_ci95_pct: tuple[float, float] | None = None,
    defaults: ConfigAnswer | None = None,
    over_defaults: Margin | None = None,
) -> RunAnswer:
    """A simulated run's answer at the demo's SLOs and H100 price: ``winner`` recommended,
    the first of ``others`` its runner-up (not a tie)."""
    return RunAnswer(
        simulated=True,
        slos="ttft:p99<500ms",
        pod_usd_per_hr=Decimal("3.99"),
        configs=[winner, *others],
        winner=winner,
        runner_up=others[0] if others else None,
        tie=False,
        margin_pct=margin_pct,
        margin_ci95_pct=margin_ci95_pct,
        defaults=defaults,
        over_defaults=over_defaults,
    )
