"""Protocol 6's level figures on the site (issue 19): an open-loop level's send lateness, a
trace level's replay and a chat-session level's figures by turn are stored as the agent sent
them, carried by the API, and shown on the run page and its live re-read beside the server's
prefix-cache hit rate, and on the compare page (by-turn TTFT and the hit rate compared, the
replay and lateness shown unranked); results without them (older agents) or with them
malformed show the rest, never a 500."""

from __future__ import annotations

import uuid

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from runs.models import Measurement, Run
from runs.services.run_tokens import run_token_issue

from .conftest import frozen, make_experiment, signed_in
from .report_data import add_trial, level
from .test_agent_ingest import RESULT, messages
from .test_web_runs import compare_url, text_of

pytestmark = pytest.mark.django_db

REPLAYED = RESULT | {
    "request_rate": 2.0,
    "send_lateness": {"p50_ms": 0.12, "p99_ms": 0.51, "max_ms": 1.7},
    "replay": {"requests": 24, "trace_rate": 2.4, "time_scale": 1.2},
}
SESSIONS = RESULT | {
    "concurrency": 8,
    "turns": [
        {"turn": 1, "requests": 40, "completed": 40, "mean_prompt_tokens": 302.0,
         "median_ttft_ms": 17.8, "p99_ttft_ms": 36.5, "median_tpot_ms": 7.52},
        {"turn": 2, "requests": 31, "completed": 30, "mean_prompt_tokens": 454.0,
         "median_ttft_ms": 20.4, "p99_ttft_ms": 21.0},  # no TPOT: sent without
    ],
}  # fmt: skip  # a table


def _run(org, experiment=None) -> tuple[Run, str]:
    experiment = experiment or make_experiment(org, name=f"e-{uuid.uuid4()}")
    run = Run.objects.create(organization=org, experiment=experiment, **frozen(experiment))
    return run, run_token_issue(run=run)


def _fed(run, token) -> None:
    """The agent's messages of one trial with a replayed rate level and a session level."""
    hello, started, phase, _, measurement, finished, _ = messages(run.id)
    replayed = measurement | {"level": {"request_rate": 2.0}, "result": REPLAYED}
    sessions = measurement | {"seq": 5, "result": SESSIONS}
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    batch = [hello, started, phase, replayed, sessions, finished | {"seq": 6}]
    response = agent.post(
        f"/api/v1/agent/runs/{run.id}/messages/", {"messages": batch}, format="json"
    )
    assert response.status_code == 200 and response.json()["rejected"] == []


def test_it_stores_and_serves_the_figures_as_the_agent_sent_them(alice):
    run, token = _run(alice.org)
    _fed(run, token)
    stored = {m.concurrency or 0: m.result for m in Measurement.objects.filter(trial__run=run)}
    assert stored == {0: REPLAYED, 8: SESSIONS}
    api = reverse("run-detail", kwargs={"org": "acme", "pk": run.id})
    (trial,) = alice.client().get(api).json()["trials"]
    assert sorted((m["result"] for m in trial["measurements"]), key=lambda r: "turns" in r) == [
        REPLAYED,
        SESSIONS,
    ]


def test_the_run_page_and_its_re_read_show_them(alice):
    run, token = _run(alice.org)
    _fed(run, token)
    client = signed_in(alice)
    page = text_of(client.get(f"/o/acme/runs/{run.id}/").content.decode())
    live = client.get(reverse("run-live", kwargs={"org": "acme", "run_id": run.id})).json()
    for text in (page, text_of(live["trials_html"])):
        assert (
            "Trace replay: 24 requests of the window (its rate 2.40 req/s), sent at its "
            "times × 1.20" in text
        )
        assert "Sends late by p50 / p99 / max 0.12 / 0.51 / 1.70 ms" in text
        # The session level's turns: turn, requests (OK), prompt, TTFT p50 / p99, TPOT p50.
        assert "By turn c=8" in text
        assert "1 40 (40) 302 17.8 / 36.5 7.52" in text
        assert "2 31 (30) 454 20.4 / 21.0 —" in text
    # Each figure on its own level's row: the session level has no replay or lateness.
    assert text.count("Trace replay") == 1 and text.count("Sends late") == 1


def test_results_without_the_figures_or_with_them_malformed_show_the_rest(alice):
    run, _ = _run(alice.org)
    old = level(1, 1111.0, 40.0)  # before protocol 6: none of them
    malformed = level(
        2,
        2222.0,
        40.0,
        send_lateness="soon",
        replay={"requests": "many"},
        turns=[{"turn": "first"}],
    )
    add_trial(run, 0, {"max_num_seqs": 64}, [old, malformed])
    response = signed_in(alice).get(f"/o/acme/runs/{run.id}/")
    assert response.status_code == 200
    text = text_of(response.content.decode())
    assert "c=1 100 / 0" in text and "2222.0" in text
    for absent in ("Trace replay", "Sends late", "By turn"):
        assert absent not in text


def session_run(experiment, ttft_by_turn: tuple[float, float], hit_rate: float) -> Run:
    """A run of one trial with a session level (its turns' TTFT p50) and a replayed rate
    level, the server's prefix-cache hit rate on the session level."""
    run, _ = _run(experiment.organization, experiment)
    turns = [
        turn | {"median_ttft_ms": ttft}
        for turn, ttft in zip(SESSIONS["turns"], ttft_by_turn, strict=True)
    ]
    trial = add_trial(run, 0, {"max_num_seqs": 64}, [SESSIONS | {"turns": turns}])
    sessions = trial.measurements.get()
    sessions.server_metrics = {"prefix_cache_hit_rate": hit_rate, "prefix_cache_hits": 1}
    sessions.save(update_fields=["server_metrics"])
    Measurement.objects.create(
        organization_id=trial.organization_id,
        trial=trial,
        concurrency=None,
        request_rate=2.0,
        result=REPLAYED,
    )
    return run


def test_the_run_page_shows_the_servers_prefix_cache_hit_rate(alice):
    run = session_run(make_experiment(alice.org), (17.8, 20.4), hit_rate=0.625)
    text = text_of(signed_in(alice).get(f"/o/acme/runs/{run.id}/").content.decode())
    assert text.count("Server prefix-cache hits: 62 % of the prompt tokens looked up") == 1


def test_the_compare_page_compares_ttft_by_turn_and_the_hit_rate(alice):
    experiment = make_experiment(alice.org)
    before = session_run(experiment, (17.8, 20.4), hit_rate=0.25)
    after = session_run(experiment, (18.0, 10.2), hit_rate=0.75)  # caching: turn 2 halves
    page = signed_in(alice).get(compare_url(), {"runs": [str(before.id), str(after.id)]})
    assert page.status_code == 200
    html = page.content.decode()
    text = text_of(html[html.index('id="compare-table"') :])
    assert "Prefix-cache hit rate % 25.00 75.00 (+200.0% ▲ better" in text
    assert "Turn 1: TTFT p50 ms 17.80 18.00 (+1.1%)" in text
    assert "Turn 2: TTFT p50 ms 20.40 10.20 (-50.0% ▲ better" in text
    # The load sent is shown, never ranked: the replay and the lateness have no delta.
    replay = "Trace replay 24 requests at the trace's times × 1.20"
    assert f"{replay} 24 requests at the trace's times × 1.20 Sends late" in text
    late = text[text.index("Sends late p99") :][:60]
    assert late.startswith("Sends late p99 / max ms 0.51 / 1.70 0.51 / 1.70") and "%" not in late
    # Only the session level has turns and a hit rate; only the rate level a replay.
    c8 = text[text.index("Level c=8") : text.index("Level rate=2")]
    assert "Turn 2" in c8 and "Trace replay" not in c8
    assert "Turn" not in text[text.index("Level rate=2") :]
