"""The compare page says how a figure moved with its 95 % interval (issue 16): "better by
20 % (CI 11–29 %)" where the change's interval lies on one side of 0, "within noise" (and no
highlight, whatever the threshold) where it holds 0, and today's delta where a level has no
interval on both sides (results stored before them)."""

from __future__ import annotations

import re

from runs.models import Measurement

from .conftest import signed_in
from .test_web_runs import compare_url, new_experiment, seed_run


def with_intervals(run, intervals: dict) -> None:
    """Every level of ``run`` carries ``intervals`` as its ``ci95``."""
    for measurement in Measurement.objects.filter(trial__run=run):
        measurement.result = measurement.result | {
            "ci95": {name: {"low": low, "high": high} for name, (low, high) in intervals.items()}
        }
        measurement.save(update_fields=["result"])


def compared_table(alice, before, after) -> str:
    page = signed_in(alice).get(compare_url(), {"runs": [str(before.id), str(after.id)]})
    assert page.status_code == 200
    html = page.content.decode()
    return html[html.index('id="compare-table"') :]


def test_it_says_better_or_within_noise_with_the_interval(alice):
    experiment = new_experiment(alice.org, name="bump")
    before = seed_run(alice.org, experiment=experiment, ttft=100.0, throughput=1000.0)
    after = seed_run(alice.org, experiment=experiment, ttft=80.0, throughput=900.0)
    # p99 TTFT 200 → 160, clearly; median TTFT 100 → 80 inside wide intervals.
    with_intervals(before, {"p99_ttft_ms": (190.0, 210.0), "median_ttft_ms": (80.0, 120.0)})
    with_intervals(
        after,
        # p99 TPOT has an interval on this side only: no interval to compare, today's delta.
        {
            "p99_ttft_ms": (150.0, 170.0),
            "median_ttft_ms": (70.0, 105.0),
            "p99_tpot_ms": (1.0, 30.0),
        },
    )
    table = compared_table(alice, before, after)
    assert re.search(
        r'data-verdict="better">160\.00 <span class="delta interval">better by 20 % '
        r"\(CI 11–29 %\)</span>",
        table,
    )
    # −20 % at the point would be highlighted as better; inside the noise it is not.
    assert re.search(
        r'data-verdict="same">80\.00 <span class="delta interval">within noise '
        r"\(CI −42–\+31 %\)</span>",
        table,
    )
    assert 'data-verdict="better">80.00' not in table
    # Throughput carries no interval here: today's delta, against the same baseline.
    assert re.search(r'data-verdict="worse">900\.00 <span class="delta">\(-10\.0% ▼ worse', table)
    tpot = table[table.index("TPOT p99") :].split("</tr>")[0]
    assert "CI " not in tpot and 'data-verdict="same">22.00 <span class="delta">(0.0%)' in tpot
