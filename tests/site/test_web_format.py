"""The template filters that format numbers for people (frontend/templatetags/numbers.py)."""

from __future__ import annotations

import pytest
from django.template import Context, Template

from figures.model_size import parameter_count_text


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (7_000_000_000, "7.0 B"),
        (7_615_616_512, "7.6 B"),
        (8_030_261_248, "8.0 B"),
        (70_553_706_496, "71 B"),
        (70_000_000_000, "70 B"),
        (1_100_048_384, "1.1 B"),
        (405_000_000_000, "405 B"),
        (125_000_000, "125 M"),
        (1_500_000_000_000, "1.5 T"),
        (12_345, "12 K"),
        (999, "999"),
        (0, "0"),
    ],
)
def test_it_shows_a_parameter_count_with_its_unit(count, shown):
    assert parameter_count_text(count) == shown


def test_it_carries_a_count_rounding_up_to_the_next_unit():
    # 999.6 M rounds to 1000 M, which people write 1.0 B.
    assert parameter_count_text(999_600_000) == "1.0 B"
    assert parameter_count_text(9_960_000_000) == "10 B"


def test_it_rounds_half_to_even_like_the_money():
    assert parameter_count_text(7_050_000_000) == "7.0 B"
    assert parameter_count_text(7_150_000_000) == "7.2 B"


def test_it_leaves_what_is_not_a_count_alone():
    assert parameter_count_text(None) == ""
    assert parameter_count_text("") == ""
    assert parameter_count_text("n/a") == "n/a"
    assert parameter_count_text("7000000000") == "7.0 B"


def test_it_is_a_template_filter():
    rendered = Template("{% load numbers %}{{ n|params }}").render(Context({"n": 70_000_000_000}))
    assert rendered == "70 B"
