"""The simulator's calibration table (benchmarks.sim_calibration) is complete and computable.

Checks the table's shape, not its figures: enough published rows from enough sources, each
with its address, an independent set kept apart, and finite errors for every metric family.
"""

from __future__ import annotations

import math

from benchmarks.sim_calibration import FAMILIES, ROWS, calibration_results, mape


def test_it_has_twenty_calibration_rows_from_four_sources_and_five_independent_rows():
    calibration = [row for row in ROWS if not row.independent]
    independent = [row for row in ROWS if row.independent]
    assert len(calibration) >= 20
    assert len({row.source for row in calibration}) >= 4
    assert len(independent) >= 5


def test_it_names_the_address_of_every_row_and_knows_its_metric():
    for row in ROWS:
        assert row.url.startswith("https://"), row
        assert row.metric in FAMILIES, row
        assert row.published > 0, row


def test_it_covers_tensor_parallelism_and_long_prompts():
    assert any(row.flags.get("tensor_parallel_size", 1) > 1 for row in ROWS)
    assert any(row.input_len >= 2048 for row in ROWS)
    assert any(row.concurrency == 1 for row in ROWS)
    assert any(row.concurrency >= 16 for row in ROWS)


def test_it_computes_finite_errors_for_every_row_and_every_family():
    results = calibration_results()
    assert len(results) == len(ROWS)
    assert all(math.isfinite(result.simulated) and result.simulated > 0 for result in results)
    for independent in (False, True):
        errors = mape([result for result in results if result.row.independent is independent])
        assert {"throughput", "TPOT/ITL", "TTFT", "all"} <= set(errors)
        assert all(math.isfinite(value) and value >= 0 for value in errors.values())
