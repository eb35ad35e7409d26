"""vLLM version as an axis (issue 17) in the reports and on the compare page: one serve
configuration measured on two images is two rows (two columns), each naming its image, on the
page and in its CSV export alike."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from html import unescape

import pytest

from runs.models import Trial

from .conftest import make_experiment, make_model, signed_in
from .report_data import add_run, add_trial, level
from .test_web_reports import as_dicts, csv_rows, page_tables
from .test_web_runs import compare_url

OLD, NEW = "v0.11.0", "v0.12.0"
CONFIG = {"max_num_seqs": 64}


def add_image_trial(run, index: int, image_tag: str, levels: list[dict]) -> Trial:
    """A succeeded trial of ``run`` on ``image_tag`` with a measurement per level."""
    return add_trial(run, index, CONFIG, levels, image_tag=image_tag)


def versions_run(experiment, *, created_at=datetime(2025, 3, 1, tzinfo=UTC), old_tput=4000.0):
    """A run of one configuration on two images, tag-major: trial 0 on v0.11.0, trial 1 on
    v0.12.0 (the newer serves 5000 tok/s at c=64, the older ``old_tput``), billed $3.99/h."""
    run = add_run(experiment, created_at=created_at, price="3.99")
    add_image_trial(run, 0, OLD, [level(8, 2000.0, 150.0), level(64, old_tput, 420.0)])
    add_image_trial(run, 1, NEW, [level(8, 2200.0, 140.0), level(64, 5000.0, 400.0)])
    return run


@pytest.fixture
def experiment(alice):
    return make_experiment(
        alice.org,
        model=make_model(alice.org),
        name="versions",
        serve_grid={"max_num_seqs": [64]},
        compare_image_tags=[NEW],
    )


@pytest.fixture
def run(experiment):
    return versions_run(experiment)


def test_it_ranks_each_image_of_a_model_and_gpu_in_its_own_row_of_the_costs(run, web):
    response = web.get("/o/acme/reports/costs/")
    measured = as_dicts(page_tables(response)["measured"])
    # $3.99/h ÷ 3600 ÷ 5000 tok/s × 1e6 = 0.2217; at 4000 tok/s 0.2771.
    assert [
        (row["Image"], row["Best config"], row["USD / 1M output tokens"], row["Run · trial"])
        for row in measured
    ] == [
        (NEW, "max_num_seqs=64", "0.2217", f"{str(run.id)[:8]} #1"),
        (OLD, "max_num_seqs=64", "0.2771", f"{str(run.id)[:8]} #0"),
    ]
    assert all(row["Trials priced / compared"] == "1 / 1" for row in measured)
    assert as_dicts(csv_rows(web.get("/o/acme/reports/costs/", {"csv": "measured"}))) == measured
    chart = re.search(
        r'<script id="cost-chart-data" type="application/json">(.*?)</script>',
        response.content.decode(),
    )
    # Each image a bar of its own, named.
    labels = [bar["label"] for bar in json.loads(chart.group(1))]
    assert [label.rsplit(" · ", 1)[-1] for label in labels] == [NEW, OLD]


def test_it_lists_both_images_of_a_config_as_candidates_of_the_model_choice(run, web):
    path = f"/o/acme/reports/choice/{run.experiment_id}/"
    response = web.get(path)
    tables = page_tables(response)
    recommended, runner_up = as_dicts(tables["recommended"]), as_dicts(tables["runners-up"])
    assert [(row["Image"], row["Config"]) for row in recommended] == [(NEW, "max_num_seqs=64")]
    assert [(row["Image"], row["Config"]) for row in runner_up] == [(OLD, "max_num_seqs=64")]
    html = response.content.decode()
    assert f"<code>max_num_seqs=64</code> on vLLM image <code>{NEW}</code>" in html
    assert as_dicts(csv_rows(web.get(path, {"csv": "runners-up"}))) == runner_up


def test_it_names_the_image_of_a_models_cheapest_configuration(run, web):
    (row,) = as_dicts(page_tables(web.get("/o/acme/reports/models/"))["measured"])
    assert (row["Image"], row["Best config"], row["USD / 1M output tokens"]) == (
        NEW,
        "max_num_seqs=64",
        "0.2217",
    )


def test_a_simulated_trial_has_no_image_to_name(alice, web):
    experiment = make_experiment(alice.org, name="sim", engine="sim", engine_image_tag="")
    sim = add_run(experiment, created_at=datetime(2025, 3, 2, tzinfo=UTC))
    add_image_trial(sim, 0, "", [level(8, 2000.0, 150.0, simulated={"speed": 1.0})])
    (row,) = as_dicts(page_tables(web.get("/o/acme/reports/costs/"))["simulated"])
    assert row["Image"] == "" and row["Source"] == "simulated"


# --- the compare page ------------------------------------------------------------------------


def setup_row(html: str, name: str) -> tuple[str, list[str]]:
    """The class and cell texts of the compare table's setup row ``name``."""
    found = re.search(rf'<tr class="([^"]*)"><th scope="row">{name}</th>(.*?)</tr>', html)
    return found.group(1), re.findall(r"<td>(.*?)</td>", found.group(2))


def column_heads(html: str) -> list[str]:
    """The compare table's column heads as text (the first, "Trial", left out)."""
    head = html[html.index('id="compare-table"') : html.index("</thead>")]
    cells = re.findall(r'<th scope="col">(.*?)</th>', head, flags=re.DOTALL)[1:]
    return [" ".join(unescape(re.sub(r"<[^>]+>", " ", cell)).split()) for cell in cells]


def test_it_compares_one_config_on_two_images_as_two_named_columns(alice, run):
    run.pod_image_tag = NEW
    run.agent_info = {"vllm_version": "0.12.0"}
    run.pod_history = [{"pod_id": "pod-1", "image_tag": OLD, "vllm_version": "0.11.0"}]
    run.save(update_fields=["pod_image_tag", "agent_info", "pod_history"])
    trials = [f"{run.id}:0", f"{run.id}:1"]
    html = signed_in(alice).get(compare_url(), {"trials": trials}).content.decode()
    first, second = column_heads(html)
    assert f"{OLD} · max_num_seqs=64" in first and "baseline" in first
    assert f"{NEW} · max_num_seqs=64" in second and "vs column 1" in second
    assert setup_row(html, "Image") == ("differs", [OLD, NEW])
    # Each trial's vLLM as reported by the agent of the pod that ran its image.
    assert setup_row(html, "vLLM reported") == ("differs", ["0.11.0", "0.12.0"])
    assert setup_row(html, "Engine") == ("", ["vLLM", "vLLM"])


def test_it_compares_each_image_with_the_same_image_of_an_earlier_run(alice, experiment, run):
    later = versions_run(experiment, created_at=datetime(2025, 3, 8, tzinfo=UTC), old_tput=3000.0)
    html = (
        signed_in(alice).get(compare_url(), {"runs": [str(run.id), str(later.id)]}).content.decode()
    )
    heads = column_heads(html)
    assert [re.search(r"(v0\.1\d\.0) · max_num_seqs=64", head)[1] for head in heads] == [
        OLD,
        NEW,
        OLD,
        NEW,
    ]
    # The later v0.12.0 column against the earlier v0.12.0 one, not against column 1.
    assert [re.search(r"(baseline|vs column \d)$", head)[1] for head in heads] == [
        "baseline",
        "vs column 1",
        "vs column 1",
        "vs column 2",
    ]
