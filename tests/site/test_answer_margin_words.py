"""The answer's margin in words, in the demo and in ``benchsite runs show``: the other
configuration's extra cost in % of the winner's, said as such (``figures.margins``, as the
run page says it) — an 89 % margin is the winner at 53 % of the other's cost, which
"cheaper by 89 %" misread."""

from __future__ import annotations

from benchsite_cli import runs as cli_runs
from runs.demo.answer import _margin_line
from runs.selectors.run_answer import Margin


def test_the_demo_says_how_much_more_the_other_costs():
    line = _margin_line(Margin(89.2, (88.6, 90.1), False), "batched=8192", "its", 19)
    assert line == "  batched=8192 costs 89 % more (95 % CI 89–90 %) at its capacity 19."
    defaults = _margin_line(Margin(20.0, None, False), "vLLM's defaults", "their", 12)
    assert defaults == "  vLLM's defaults cost 20 % more at their capacity 12."
    tie = _margin_line(Margin(3.0, (-1.0, 7.0), True), "seqs=64", "its", 30)
    assert (
        tie == "  tie, within noise, with seqs=64: 3 % apart (95 % CI -1–7 %) at its capacity 30."
    )
    # A bound just under 0 reads 0, never "-0" (the demo printed "95 % CI -0–112 %").
    near = _margin_line(Margin(73.0, (-0.3, 112.0), True), "batched=16384", "its", 17)
    assert "(95 % CI 0–112 %)" in near


def test_the_cli_says_it_the_same_way(monkeypatch):
    said: list[str] = []
    monkeypatch.setattr(cli_runs, "out", said.append)
    winner = {
        "trial": 0,
        "serve_config": {"max_num_batched_tokens": 2048},
        "capacity": 106,
        "axis": "concurrency",
        "usd_per_million_output_tokens": "0.529",
        "serve_command": "vllm serve m --max-num-batched-tokens 2048",
    }
    answer = {
        "winner": winner,
        "slos": "ttft:p99<500ms",
        "runner_up": {"trial": 2, "serve_config": {}},
    }
    cli_runs._print_answer(answer | {"margin_pct": 89.2, "margin_ci95_pct": [88.6, 90.1]})
    assert "  trial 2 (vLLM defaults) costs 89 % more (95 % CI 89–90 %)" in said
    said.clear()
    cli_runs._print_answer(answer | {"margin_pct": 73.0, "margin_ci95_pct": [-0.3, 112.0]})
    assert "  trial 2 (vLLM defaults) costs 73 % more (95 % CI 0–112 %)" in said
    said.clear()
    cli_runs._print_answer(answer | {"margin_pct": 3.0, "margin_ci95_pct": None, "tie": True})
    assert "  tie, within noise, with trial 2 (vLLM defaults): 3 % apart" in said
