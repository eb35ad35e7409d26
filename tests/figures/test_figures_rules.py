"""The shared rules (``figures``): the same sum and the same words whichever side calls them,
and the package stands alone (no Django, nothing else of the project)."""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal, localcontext
from pathlib import Path

import pytest

from figures.costs import usd_per_million_output_tokens
from figures.gpu_share import GpuShare
from figures.levels import level_name, load_key
from figures.margins import margin_interval_words, margin_words

ROOT = Path(__file__).resolve().parents[2]


def test_it_prices_a_token_the_same_in_decimals_and_in_floats():
    with localcontext() as context:
        context.prec = 34
        exact = usd_per_million_output_tokens(Decimal("3.99"), Decimal("2000"))
    assert isinstance(exact, Decimal)
    assert exact.quantize(Decimal("0.0001")) == Decimal("0.5542")
    assert usd_per_million_output_tokens(3.99, 2000.0) == pytest.approx(0.554166, rel=1e-5)


def test_a_share_keeps_its_rates_type():
    share = GpuShare.of({"tensor_parallel_size": 2}, pod_gpus=8)
    assert share.rate_for(Decimal("16")) == Decimal("4")
    assert share.rate_for(16.0) == 4.0


@pytest.mark.parametrize(
    ("pct", "ci", "tie", "said"),
    [
        (89.2, (88.6, 90.1), False, "trial 2 costs 89 % more (95 % CI 89–90 %)"),
        (73.0, (-0.3, 112.0), False, "trial 2 costs 73 % more (95 % CI 0–112 %)"),
        (3.0, (-1.0, 7.0), True, "tie, within noise, with trial 2: 3 % apart (95 % CI -1–7 %)"),
        (20.0, None, False, "trial 2 costs 20 % more"),
    ],
)
def test_it_says_the_margin_as_the_others_extra_cost(pct, ci, tie, said):
    interval = margin_interval_words(ci)
    words = margin_words(pct, tie=tie, other="trial 2")
    assert words + (f" ({interval})" if interval else "") == said


def test_it_says_a_margin_to_a_pages_decimals():
    assert margin_words(33.44, tie=False, other="vLLM's defaults", plural=True, places=1) == (
        "vLLM's defaults cost 33.4 % more"
    )
    assert margin_interval_words([-0.04, 12.0], places=1) == "95 % CI 0.0–12.0 %"


@pytest.mark.parametrize(
    ("level", "name", "key"),
    [
        ({"concurrency": 8}, "c=8", "concurrency=8"),
        ({"request_rate": 2.0}, "rate=2", "request_rate=2.0"),
        ({"request_rate": "2.500"}, "rate=2.5", "request_rate=2.500"),
        ({"request_rate": "inf"}, "rate=inf", "request_rate=inf"),
        ({"request_rate": None, "infinite": True}, "rate=inf", "request_rate=inf"),
    ],
)
def test_it_names_a_level_one_way_per_form(level, name, key):
    assert level_name(**level) == name
    assert load_key(**level) == key


def test_it_imports_without_django_or_the_project():
    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in {'django', 'runs', 'benchsite', 'frontend',\n"
        "                                  'agents', 'benchsite_cli', 'httpx'}:\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import figures.costs, figures.gpu_share, figures.levels, figures.margins\n"
        "import figures.model_size\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", blocker], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
