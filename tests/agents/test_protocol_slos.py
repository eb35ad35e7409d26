"""SLOs name their percentile and may ask for an attainment; their text form reads back."""

from __future__ import annotations

import pydantic
import pytest

from agents.protocol import Slos, parse_slos


def test_the_text_form_names_percentiles_units_and_attainment():
    slos = parse_slos("ttft:p95<300ms, tpot<50ms, e2el:p90<10s, attainment>=95%")
    assert slos == Slos(
        ttft_ms=300,
        ttft_percentile=95,
        tpot_ms=50,
        e2el_ms=10_000,
        e2el_percentile=90,
        min_attainment_pct=95,
    )
    assert slos.percentile("tpot") == 99  # not named: p99, as before
    assert slos.describe() == "ttft:p95<300ms, tpot:p99<50ms, e2el:p90<10000ms, attainment>=95%"
    assert parse_slos(slos.describe()).describe() == slos.describe()


def test_the_key_value_form_of_earlier_versions_still_reads():
    assert parse_slos("ttft_ms=500,tpot_ms=50") == Slos(ttft_ms=500, tpot_ms=50)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("ttft:p97<300ms", "ttft_percentile"),
        ("foo<3ms", "'foo<3ms'"),
        ("attainment<95", "'attainment<95'"),
        ("ttft>3ms", "'ttft>3ms'"),
        ("ttft_ms=fast", "'ttft_ms=fast'"),
        ("attainment>=101%", "min_attainment_pct"),
    ],
)
def test_a_bad_objective_is_refused_naming_it(text, names):
    with pytest.raises((ValueError, pydantic.ValidationError)) as caught:
        parse_slos(text)
    assert names in str(caught.value)


def test_scaling_keeps_percentiles_and_attainment():
    slos = parse_slos("ttft:p95<300ms, attainment>=95%").scaled(0.5)
    assert (slos.ttft_ms, slos.ttft_percentile, slos.min_attainment_pct) == (150, 95, 95)
