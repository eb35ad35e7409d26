"""``benchsite runs`` as a newcomer reads it (issue 35, point 6): a run is found by the short
id the site shows; the answer names configurations as people write them, never as Python
dicts; a gate against another experiment's run is refused unless asked for, and then said."""

from __future__ import annotations

import json
import uuid

import pytest

from benchsite_cli.runs import _print_answer
from runs.models import Run
from tests.site.conftest import frozen, make_experiment, make_model
from tests.site.live_server import daphne_server
from tests.site.run_answers import config_answer, simulated_answer

from .conftest import benchsite
from .test_cli_runs import THRESHOLDS, seed_run, weak_levels

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_it_prints_the_answer_as_people_read_it(capsys):
    winner = config_answer(0, {"max_num_batched_tokens": 2048})
    defaults = config_answer(2, {}, capacity=14, cost="1.010", image_tag="v0.11.0")
    answer = simulated_answer(winner, defaults, margin_pct=84.6)
    _print_answer(json.loads(json.dumps(answer.as_json())))  # as the API sends it
    printed = capsys.readouterr().out.splitlines()
    assert printed[:2] == [
        "answer (simulated): trial 0 max_num_batched_tokens=2048 carries 99 concurrent "
        "users within ttft:p99<500ms, $0.547 per 1M output tokens",
        "  trial 2 (vLLM defaults) costs 85 % more",
    ]
    assert not any("{" in line for line in printed)


@pytest.fixture
def site():
    with daphne_server() as address:
        yield f"http://{address}"


def test_it_shows_a_run_by_the_short_id_the_site_shows(alice, site):
    experiment = make_experiment(alice.org)

    def run_with_id(run_id: str) -> Run:
        return Run.objects.create(
            id=uuid.UUID(run_id),
            organization=alice.org,
            experiment=experiment,
            **frozen(experiment),
        )

    run_with_id("75bae280-0000-4000-8000-000000000001")
    shown = benchsite("runs", "show", "75bae280", url=site, token=alice.token)
    assert shown.code == 0, shown.text
    assert shown.out.startswith("run 75bae280-0000-4000-8000-000000000001: queued")

    run_with_id("75bae280-0000-4000-8000-000000000002")
    shared = benchsite("runs", "show", "75bae280", url=site, token=alice.token)
    assert shared.code == 2
    assert "run: The id prefix '75bae280' matches 2 runs; give more of the id." in shared.err


def test_it_refuses_to_gate_across_experiments_unless_asked_and_then_says_so(alice, site):
    model = make_model(alice.org)
    ours = make_experiment(alice.org, model=model, name="ours")
    theirs = make_experiment(alice.org, model=model, name="theirs")
    levels = {json.dumps({"max_num_seqs": 64}): weak_levels()}
    new, other = seed_run(ours, levels), seed_run(theirs, levels)
    gate = ("--baseline", str(other.id)[:8], "--max-regression", THRESHOLDS)

    refused = benchsite("runs", "compare", str(new.id), *gate, url=site, token=alice.token)
    assert refused.code == 2
    assert refused.err.strip() == (
        f"error: --baseline: run {other.id} is of experiment {theirs.id}, not {ours.id}; "
        "give --across-experiments to gate against it anyway"
    )

    asked = benchsite(
        "runs", "compare", str(new.id), *gate, "--across-experiments", url=site, token=alice.token
    )
    assert asked.code == 0, asked.text
    assert (
        f"warning: gating across experiments: the baseline run {other.id} is of experiment "
        f"{theirs.id}, the new run of {ours.id}"
    ) in asked.err
    assert f"gate passed: run {new.id} vs run {other.id}" in asked.out
