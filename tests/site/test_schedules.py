"""Experiment schedules (issue 20): what a schedule accepts, beat's own rows, each firing
started as the owner under the budget check and audited, the gate of a scheduled run against
the promoted baseline with the regression notified, and a real beat firing one."""

from __future__ import annotations

import datetime
import json
import zoneinfo
from decimal import Decimal

import pytest
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from runs.actors import Actor
from runs.errors import DomainValidationError
from runs.models import (
    AuditEvent,
    ExperimentSchedule,
    GateVerdict,
    Membership,
    Notification,
    Run,
    ScheduleFiring,
)
from runs.models.runs import RunState, RunTrigger
from runs.schedule_spec import schedule_spec
from runs.selectors.schedules import schedule_settings
from runs.services.notifications.hooks import hook_create
from runs.services.run_end import run_end_settle
from runs.services.schedule_firing import schedule_fire
from runs.services.schedule_gate import schedule_run_gate
from runs.services.schedules import schedule_delete, schedule_pause, schedule_set
from tests.polling import wait_for

from .conftest import SYSTEM, WAITING_AGENT, make_experiment, make_model, signed_in
from .db_state import database_state
from .report_data import add_trial, build_history, level
from .test_promotions import approve, propose

THRESHOLDS = "p99_ttft_ms=10%,output_throughput=-5%"
SIM = {"engine": "sim", "engine_image_tag": "", "serve_grid": {"max_num_seqs": [8]}}


def spec(**fields):
    return schedule_spec(**({"thresholds": THRESHOLDS} | fields))


def actor(person) -> Actor:
    return Actor(user=person.user, via="web", ip="127.0.0.1")


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"cron": "0 6 * *"}, "cron", "five fields"),
        ({"cron": "61 6 * * *"}, "cron", "cron expression"),
        ({"cron": "0 6 * * 1-9"}, "cron", "cron expression"),
        ({"cron": "0 6 * * *", "daily_at": "06:00"}, "cron", "not both"),
        ({}, "cron", "either"),
        ({"daily_at": "25:00"}, "daily_at", "HH:MM"),
        ({"daily_at": "6pm"}, "daily_at", "HH:MM"),
        ({"cron": "0 6 * * *", "timezone": "Mars/Olympus"}, "timezone", "Mars/Olympus"),
        ({"cron": "0 6 * * *", "thresholds": "p99_ttft_ms=10"}, "thresholds", "%"),
        ({"cron": "0 6 * * *", "thresholds": "speed=10%"}, "thresholds", "not a metric"),
        ({"cron": "0 6 * * *", "thresholds": ""}, "thresholds", "no thresholds"),
    ],
)
def test_a_bad_schedule_is_refused_by_field(fields, field, words):
    with pytest.raises(DomainValidationError) as refused:
        spec(**fields)
    assert field in refused.value.fields
    assert words in " ".join(refused.value.fields[field])


# Cron fields whose closest firings are fewer minutes apart than the minimum (15 by default),
# each with that gap: within an hour, across an hour, across midnight, across 28/29 February.
TOO_OFTEN = {
    "every minute": ("* * * * *", 1),
    "every ten minutes": ("*/10 * * * *", 10),
    "at :00 and :50": ("0,50 * * * *", 10),
    "23:55 and 00:00": ("0,55 0,23 * * *", 5),
    "28 and 29 February": ("0,55 0,23 28,29 2 *", 5),
}


@pytest.mark.parametrize(("cron", "gap"), TOO_OFTEN.values(), ids=list(TOO_OFTEN))
def test_a_schedule_firing_more_often_than_the_minimum_is_refused(cron, gap):
    with pytest.raises(DomainValidationError) as refused:
        spec(cron=cron)
    assert refused.value.fields == {
        "cron": [
            f"Fires {gap} minute{'s' if gap > 1 else ''} apart at the closest; a schedule "
            "fires at most every 15 minutes."
        ]
    }


@pytest.mark.parametrize(
    "cron",
    ["*/15 * * * *", "0,45 * * * *", "0,55 0,23 * * 1", "0 6 * * 1-5", "0,55 0,23 28 2 *"],
)
def test_a_schedule_firing_at_most_every_minimum_is_accepted(cron):
    assert spec(cron=cron).cron_text == cron


def test_the_minimum_is_a_setting(settings):
    settings.SCHEDULE_MIN_INTERVAL_MINUTES = 2 * 24 * 60
    with pytest.raises(DomainValidationError) as refused:
        spec(daily_at="06:00")
    assert refused.value.fields == {
        "daily_at": [
            "Fires 1440 minutes apart at the closest; a schedule fires at most every 2880 minutes."
        ]
    }
    settings.SCHEDULE_MIN_INTERVAL_MINUTES = 1
    assert spec(cron="* * * * *").cron_text == "* * * * *"


@pytest.mark.django_db
def test_the_api_and_the_page_refuse_a_schedule_too_often_and_write_nothing(alice):
    experiment = make_experiment(alice.org)
    before = database_state()
    api = alice.client().put(
        f"/api/v1/orgs/acme/experiments/{experiment.id}/schedule/",
        {"cron": "* * * * *", "thresholds": THRESHOLDS},
        format="json",
    )
    assert api.status_code == 400
    (message,) = api.json()["error"]["fields"]["cron"]
    assert message.startswith("Fires 1 minute apart at the closest")
    page = signed_in(alice).post(
        f"/o/acme/experiments/{experiment.id}/schedule/",
        {"cron": "* * * * *", "timezone": "UTC", "thresholds": THRESHOLDS},
    )
    assert f'data-slot="cron"><li>{message}' in page.content.decode()
    assert database_state() == before
    assert not PeriodicTask.objects.exists()


def test_daily_at_is_cron_in_the_zone():
    daily = spec(daily_at="06:30", timezone="Europe/Berlin")
    assert (daily.cron_text, daily.timezone) == ("30 6 * * *", "Europe/Berlin")
    assert spec(cron=" 0  */4 * * 1-5 ").cron_text == "0 */4 * * 1-5"


@pytest.mark.django_db
def test_setting_pausing_and_removing_write_beats_own_row_and_the_audit(alice, mallory):
    experiment = make_experiment(alice.org)
    schedule = schedule_set(
        actor=actor(alice),
        experiment=experiment,
        spec=spec(cron="0 6 * * 1-5", timezone="Europe/Berlin"),
    )
    task = PeriodicTask.objects.get(pk=schedule.periodic_task_id)
    assert task.task == "runs.tasks.schedule_fire" and task.enabled
    assert json.loads(task.kwargs) == {"schedule_id": str(schedule.id)}
    crontab = task.crontab
    assert (crontab.minute, crontab.hour, crontab.day_of_week) == ("0", "6", "1-5")
    assert str(crontab.timezone) == "Europe/Berlin"
    assert schedule.owner == alice.user
    # Set again by another member: one schedule, one beat row, the new owner.
    again = schedule_set(actor=actor(mallory), experiment=experiment, spec=spec(daily_at="07:15"))
    assert again.id == schedule.id and again.owner == mallory.user
    assert PeriodicTask.objects.filter(task="runs.tasks.schedule_fire").count() == 1
    assert PeriodicTask.objects.get(pk=task.pk).crontab.hour == "7"
    schedule_pause(actor=actor(alice), schedule=again, paused=True)
    assert not PeriodicTask.objects.get(pk=task.pk).enabled
    schedule_pause(actor=actor(alice), schedule=again, paused=False)
    assert PeriodicTask.objects.get(pk=task.pk).enabled
    schedule_delete(actor=actor(alice), schedule=again)
    assert not PeriodicTask.objects.filter(pk=task.pk).exists()
    assert not ExperimentSchedule.objects.exists()
    events = AuditEvent.objects.filter(organization=alice.org, event__startswith="schedule.")
    assert [e.event for e in events.order_by("seq")] == [
        "schedule.set",
        "schedule.set",
        "schedule.pause",
        "schedule.resume",
        "schedule.delete",
    ]
    second = events.order_by("seq")[1]
    assert second.before["owner"] == "alice@acme.example"
    assert second.after == {
        "cron": "15 7 * * *",
        "timezone": "UTC",
        "thresholds": THRESHOLDS,
        "paused": False,
        "owner": "mallory@acme.example",
    }


@pytest.fixture
def every_quarter(alice, mallory):
    """A simulated experiment of alice's, scheduled by mallory every 15 minutes."""
    experiment = make_experiment(alice.org, **SIM)
    return schedule_set(actor=actor(mallory), experiment=experiment, spec=spec(cron="*/15 * * * *"))


@pytest.mark.django_db
def test_a_firing_starts_one_run_as_the_owner_and_a_second_delivery_adds_nothing(
    alice, mallory, every_quarter, waiting_local_pods
):
    schedule = every_quarter
    experiment = schedule.experiment
    now = timezone.now()
    firing = schedule_fire(schedule_id=str(schedule.id), now=now)
    assert firing.run is not None and not firing.refused
    assert firing.verdict == GateVerdict.PENDING
    run = firing.run
    assert (run.started_by, run.trigger) == (mallory.user, RunTrigger.SCHEDULE)
    assert run.reason == "scheduled: */15 * * * * (UTC)"
    start = AuditEvent.objects.get(organization=alice.org, event="run.start", target_id=str(run.id))
    assert (start.actor_label, start.actor_via) == ("mallory@acme.example", "schedule")
    # The same minute again (beat's tick delivered twice): nothing more.
    assert schedule_fire(schedule_id=str(schedule.id), now=now + datetime.timedelta(seconds=20))
    assert Run.objects.filter(experiment=experiment).count() == 1
    # The next firing, with that run still under way: refused, and said why.
    later = schedule_fire(schedule_id=str(schedule.id), now=now + datetime.timedelta(minutes=15))
    assert later.run is None and "still under way" in later.refused
    refused = AuditEvent.objects.get(organization=alice.org, event="schedule.refused")
    assert refused.actor_via == "schedule" and "still under way" in refused.after["why"]
    # Paused: beat would not send it; a tick already in flight starts nothing.
    schedule_pause(actor=actor(alice), schedule=schedule, paused=True)
    assert (
        schedule_fire(schedule_id=str(schedule.id), now=now + datetime.timedelta(minutes=30))
        is None
    )
    assert ScheduleFiring.objects.filter(schedule=schedule).count() == 2


@pytest.mark.django_db
def test_a_refusal_repeated_for_the_same_reason_is_recorded_once(
    alice, mallory, every_quarter, waiting_local_pods
):
    schedule = every_quarter
    experiment = schedule.experiment
    start = timezone.now().replace(second=0, microsecond=0)

    def fire(quarters: int, seconds: int = 0) -> ScheduleFiring:
        at = start + datetime.timedelta(minutes=15 * quarters, seconds=seconds)
        return schedule_fire(schedule_id=str(schedule.id), now=at)

    started = fire(0)
    first = fire(1)
    assert "still under way" in first.refused
    # Three more firings refused for the same reason, one tick delivered twice: the first
    # refusal counts them and says when the last was; no row nor audit event of their own.
    for quarter in (2, 3, 4):
        assert fire(quarter).pk == first.pk
    assert fire(4, seconds=20).pk == first.pk
    first.refresh_from_db()
    assert (first.repeats, first.last_fired_at) == (3, start + datetime.timedelta(minutes=60))
    assert ScheduleFiring.objects.filter(schedule=schedule).count() == 2
    assert AuditEvent.objects.filter(event="schedule.refused").count() == 1
    shown = alice.client().get(f"/api/v1/orgs/acme/experiments/{experiment.id}/schedule/")
    newest = shown.json()["firings"][0]
    assert (newest["repeats"], newest["last_fired_at"]) == (
        3,
        (start + datetime.timedelta(minutes=60)).isoformat().replace("+00:00", "Z"),
    )
    page = signed_in(alice).get(f"/o/acme/experiments/{experiment.id}/").content.decode()
    assert "and 3 more times, the last at" in page
    # Another reason is recorded on its own, as is the same one after a run started.
    Membership.objects.filter(user=mallory.user).update(role="viewer")
    other = fire(5)
    assert other.pk != first.pk and "may not start runs" in other.refused
    assert AuditEvent.objects.filter(event="schedule.refused").count() == 2
    Membership.objects.filter(user=mallory.user).update(role="member")
    Run.objects.filter(pk=started.run_id).update(state=RunState.FAILED)
    assert fire(6).run is not None
    assert fire(7).pk not in (first.pk, other.pk)
    assert AuditEvent.objects.filter(event="schedule.refused").count() == 3


@pytest.mark.django_db
def test_a_firing_is_refused_when_the_owner_may_no_longer_start_runs(mallory, every_quarter):
    schedule = every_quarter
    Membership.objects.filter(user=mallory.user).update(role="viewer")
    firing = schedule_fire(schedule_id=str(schedule.id))
    assert firing.run is None
    assert firing.refused == "mallory@acme.example's role (viewer) may not start runs."
    Membership.objects.filter(user=mallory.user).delete()
    gone = schedule_fire(
        schedule_id=str(schedule.id), now=timezone.now() + datetime.timedelta(minutes=15)
    )
    assert gone.refused == "mallory@acme.example is no longer a member; set the schedule again."
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_a_firing_is_held_to_the_budget_like_any_start(alice):
    experiment = make_experiment(alice.org, budget_cap_usd=Decimal("0.01"))
    schedule = schedule_set(actor=actor(alice), experiment=experiment, spec=spec(cron="0 * * * *"))
    firing = schedule_fire(schedule_id=str(schedule.id))
    assert firing.run is None and "exceeds the experiment's cap $0.01" in firing.refused
    assert not Run.objects.exists()
    assert AuditEvent.objects.filter(event="schedule.refused").count() == 1


@pytest.fixture
def history(alice):
    return build_history(alice.org)


@pytest.fixture
def scheduled(history, alice, mallory, settings):
    """The small experiment scheduled, its max_num_seqs=128 trial promoted, and a webhook hook
    for regressions (its notification is recorded in the transaction; never sent here)."""
    settings.BENCHSITE_OUTBOUND_PRIVATE_HOSTS = ["127.0.0.1"]
    approve(alice, propose(mallory, history.t128))
    schedule = schedule_set(
        actor=actor(alice), experiment=history.small, spec=spec(cron="0 6 * * *")
    )
    hook_create(
        org=alice.org,
        actor=SYSTEM,
        name="alerts",
        kind="webhook",
        events=["regression.detected"],
        url="http://127.0.0.1:9/benchsite",
    )
    return schedule


def ended(run: Run) -> None:
    """``run``'s end settled, then its gate as the task enqueued after that commit runs it
    (the notices it records stay unsent: their tasks wait for a commit that never comes)."""
    run_end_settle(run=run, reason="")
    schedule_run_gate(run_id=run.id)


def scheduled_run(schedule, levels, *, state=RunState.SUCCEEDED, minute=0) -> ScheduleFiring:
    """A run the schedule started (``minute`` minutes on), measured with ``levels`` at
    max_num_seqs=128, then ended."""
    now = timezone.now() + datetime.timedelta(minutes=minute)
    firing = schedule_fire(schedule_id=str(schedule.id), now=now)
    run = firing.run
    add_trial(run, 1, {"max_num_seqs": 128}, levels)
    Run.objects.filter(pk=run.pk).update(state=state)
    run.refresh_from_db()
    ended(run)
    firing.refresh_from_db()
    return firing


SAME = [level(8, 2100.0, 140.0), level(64, 5000.0, 400.0), level(192, 7000.0, 900.0)]


@pytest.mark.django_db
def test_a_scheduled_run_like_the_baseline_passes(scheduled, waiting_local_pods):
    firing = scheduled_run(scheduled, SAME)
    assert firing.verdict == GateVerdict.PASSED
    assert firing.gate["regressions"] == [] and firing.gate["rows"] == 6
    assert firing.gate["baseline_trial"] == 1
    assert not Notification.objects.filter(event="regression.detected").exists()


@pytest.mark.django_db
def test_a_regressed_scheduled_run_is_notified_once(scheduled, waiting_local_pods):
    slower = [level(8, 2100.0, 140.0), level(64, 5000.0, 600.0), level(192, 7000.0, 900.0)]
    firing = scheduled_run(scheduled, slower)
    assert firing.verdict == GateVerdict.REGRESSION
    [row] = firing.gate["regressions"]
    assert (row["metric"], row["level"]) == ("p99_ttft_ms", "concurrency=64")
    assert row["change"] == "worse by 50 % (no interval)"
    [notice] = Notification.objects.filter(event="regression.detected")
    assert (
        "regressed against the promoted baseline: p99_ttft_ms at max_num_seqs=128 "
        "concurrency=64, worse by 50 % (no interval)" in notice.summary
    )
    assert notice.data["gate"]["baseline_run"] == str(
        scheduled.experiment.runs.earliest("created_at").id
    )
    # The same end reported again gates nothing twice.
    ended(firing.run)
    assert Notification.objects.filter(event="regression.detected").count() == 1


@pytest.mark.django_db
def test_a_stopped_configuration_is_a_regression(scheduled, waiting_local_pods):
    firing = scheduled_run(scheduled, [level(8, 2100.0, 140.0)])
    assert firing.verdict == GateVerdict.REGRESSION
    assert {row["level"] for row in firing.gate["regressions"]} == {
        "concurrency=64",
        "concurrency=192",
    }


@pytest.mark.django_db
def test_a_sandbox_gates_against_its_simulated_promotion_and_says_so(
    history, alice, mallory, waiting_local_pods
):
    """The demo's walk: a simulated trial promoted in a sandbox, then a scheduled run of the
    simulated experiment gated against it; the verdict names the baseline simulated."""
    type(alice.org).objects.filter(pk=alice.org.pk).update(sandbox=True)
    history.tsim.run.organization.refresh_from_db()
    promotion = approve(alice, propose(mallory, history.tsim))
    schedule = schedule_set(actor=actor(alice), experiment=history.sim, spec=spec(cron="0 6 * * *"))
    firing = schedule_fire(schedule_id=str(schedule.id), now=timezone.now())
    simulated = level(64, 9000.0, 100.0, simulated={"speed": 1.0})
    add_trial(firing.run, 0, {"max_num_seqs": 64}, [simulated])
    Run.objects.filter(pk=firing.run.pk).update(state=RunState.SUCCEEDED)
    firing.run.refresh_from_db()
    ended(firing.run)
    firing.refresh_from_db()
    assert firing.verdict == GateVerdict.PASSED
    assert firing.gate["promotion"] == str(promotion.id)
    assert firing.gate["promotion_simulated"] is True
    shown = signed_in(alice).get(f"/o/acme/experiments/{history.sim.id}/").content.decode()
    assert "simulated baseline</span>" in shown


@pytest.mark.django_db
def test_a_failed_or_unpromoted_run_is_not_called_passed(history, alice, waiting_local_pods):
    schedule = schedule_set(
        actor=actor(alice), experiment=history.small, spec=spec(cron="0 6 * * *")
    )
    firing = scheduled_run(schedule, SAME)
    assert firing.verdict == GateVerdict.NO_BASELINE
    assert firing.gate == {"why": "the experiment has no approved promotion"}
    failed = scheduled_run(schedule, [], state=RunState.FAILED, minute=1)
    assert failed.verdict == GateVerdict.NOT_GATED
    assert failed.gate == {"why": "the run ended failed"}


@pytest.mark.django_db
def test_the_gate_runs_after_the_commit_that_ended_the_run(
    history, alice, waiting_local_pods, django_capture_on_commit_callbacks
):
    schedule = schedule_set(
        actor=actor(alice), experiment=history.small, spec=spec(cron="0 6 * * *")
    )
    firing = schedule_fire(schedule_id=str(schedule.id), now=timezone.now())
    Run.objects.filter(pk=firing.run.pk).update(state=RunState.FAILED)
    firing.run.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        run_end_settle(run=firing.run, reason="")
        firing.refresh_from_db()
        assert firing.verdict == GateVerdict.PENDING  # nothing gated in the ending transaction
    firing.refresh_from_db()
    assert (firing.verdict, firing.gate) == (GateVerdict.NOT_GATED, {"why": "the run ended failed"})
    # The task delivered again (acks_late) changes nothing.
    assert schedule_run_gate(run_id=firing.run.id) == GateVerdict.NOT_GATED


@pytest.mark.django_db(transaction=True)
@pytest.mark.needs_redis
@pytest.mark.slow
def test_a_real_beat_fires_the_schedule_and_a_worker_starts_the_run(
    alice, own_broker_queue, waiting_local_pods, tmp_path
):
    """django-celery-beat's scheduler in a real ``celery beat`` reads the schedule from the
    database and sends its tick at the minute; a real worker starts the run."""
    from .live_server import celery_beat, celery_worker

    experiment = make_experiment(alice.org, model=make_model(alice.org), **SIM)
    env = {
        "BENCHSITE_PROVIDER": "local",
        "BENCHSITE_LOCAL_PODS_DIR": str(tmp_path / "pods"),
        "BENCHSITE_LOCAL_AGENT_COMMAND": WAITING_AGENT,
    }
    with (
        celery_worker(tmp_path / "worker.log", env=env),
        celery_beat(tmp_path / "beat.log", env=env),
    ):
        # Beat reads a new schedule within its 5 s loop: set it for the next minute that is
        # at least 10 s away, in a zone that is not UTC (the crontab carries its zone).
        zone = zoneinfo.ZoneInfo("Asia/Kolkata")
        due = (timezone.now() + datetime.timedelta(seconds=70)).astimezone(zone)
        schedule = schedule_set(
            actor=actor(alice),
            experiment=experiment,
            spec=spec(cron=f"{due.minute} {due.hour} * * *", timezone="Asia/Kolkata"),
        )
        firing = wait_for(
            lambda: ScheduleFiring.objects.filter(schedule=schedule).first(), 150, "the firing"
        )
        fired = firing.fired_at.astimezone(zone)
        assert (fired.hour, fired.minute) == (due.hour, due.minute)
        assert firing.run is not None, firing.refused
        assert firing.run.trigger == RunTrigger.SCHEDULE


@pytest.mark.django_db
def test_the_api_sets_shows_pauses_and_removes_a_schedule(alice, bob):
    experiment = make_experiment(alice.org)
    url = f"/api/v1/orgs/acme/experiments/{experiment.id}/schedule/"
    client = alice.client()
    assert client.get(url).status_code == 404
    bad = client.put(
        url,
        {"cron": "0 6 * * 1-5", "timezone": "Mars/Olympus", "thresholds": "speed=10%"},
        format="json",
    )
    assert bad.status_code == 400
    assert set(bad.json()["error"]["fields"]) == {"timezone", "thresholds"}
    assert (
        not ExperimentSchedule.objects.exists()
        and not AuditEvent.objects.filter(event__startswith="schedule.").exists()
    )
    assert bob.client().put(url, {"daily_at": "06:30"}, format="json").status_code == 403
    now = timezone.now()
    set_ = client.put(url, {"daily_at": "06:30", "timezone": "Europe/Berlin"}, format="json")
    assert set_.status_code == 200, set_.json()
    body = set_.json()
    assert (body["cron"], body["timezone"], body["owner"]) == (
        "30 6 * * *",
        "Europe/Berlin",
        "alice@acme.example",
    )
    assert body["thresholds"] == "p99_ttft_ms=10%,output_throughput=-5%"
    assert "06:30" in body["description"] and body["firings"] == []
    due = datetime.datetime.fromisoformat(body["next_fire_at"])
    berlin = due.astimezone(zoneinfo.ZoneInfo("Europe/Berlin"))
    assert (berlin.hour, berlin.minute) == (6, 30)
    assert now < due <= now + datetime.timedelta(days=1)
    assert bob.client().get(url).json() == client.get(url).json()  # a viewer reads it
    paused = client.patch(url, {"paused": True}, format="json").json()
    assert paused["paused"] is True and paused["next_fire_at"] is None
    assert client.delete(url).status_code == 204
    assert client.get(url).status_code == 404


@pytest.mark.django_db
def test_the_experiment_page_sets_pauses_and_shows_the_history(
    scheduled, alice, bob, waiting_local_pods
):
    experiment = scheduled.experiment
    page = f"/o/acme/experiments/{experiment.id}/"
    web = signed_in(alice)
    refused = web.post(
        page + "schedule/", {"cron": "0 25 * * *", "timezone": "UTC", "thresholds": THRESHOLDS}
    )
    assert refused.status_code == 200
    assert 'data-slot="cron"><li>Not a cron expression beat can read' in refused.content.decode()
    assert schedule_settings(ExperimentSchedule.objects.get())["cron"] == "0 6 * * *"
    saved = web.post(
        page + "schedule/",
        {"daily_at": "07:45", "timezone": "Asia/Tokyo", "thresholds": "p99_ttft_ms=20%"},
    )
    assert saved.status_code == 302 and saved["Location"].endswith("#schedule")
    shown = web.get(page).content.decode()
    assert "<code>45 7 * * *</code> in Asia/Tokyo" in shown and "next run" in shown
    assert "<code>p99_ttft_ms=20%</code> against the promoted configuration" in shown
    web.post(page + "schedule/state/", {"action": "pause"})
    assert '<span class="badge">paused</span>' in web.get(page).content.decode()
    # A paused schedule changed stays paused.
    web.post(page + "schedule/", {"cron": "0 5 * * 1", "timezone": "UTC", "thresholds": THRESHOLDS})
    assert schedule_settings(ExperimentSchedule.objects.get())["paused"] is True
    schedule_pause(actor=actor(alice), schedule=ExperimentSchedule.objects.get(), paused=False)
    slower = [level(8, 2100.0, 140.0), level(64, 5000.0, 600.0), level(192, 7000.0, 900.0)]
    firing = scheduled_run(ExperimentSchedule.objects.get(), slower)
    history = web.get(page).content.decode()
    assert f'href="/o/acme/runs/{firing.run_id}/"' in history
    assert "Regression" in history
    assert "p99_ttft_ms at max_num_seqs=128 concurrency=64: worse by 50 % (no interval)" in history
    run_page = web.get(f"/o/acme/runs/{firing.run_id}/").content.decode()
    assert (
        "Started by <a href=" in run_page
        and ">Regression</span> — p99_ttft_ms at "
        "max_num_seqs=128 concurrency=64: worse by 50 % (no interval)</p>"
        in run_page
    )
    by_hand = web.get(f"/o/acme/runs/{scheduled.experiment.runs.earliest('created_at').id}/")
    assert 'id="schedule-gate"' not in by_hand.content.decode()
    # A viewer sees the schedule and its history, not the forms, and cannot post them.
    viewer = signed_in(bob)
    seen = viewer.get(page).content.decode()
    assert "45 7 * * *" not in seen and "0 5 * * 1" in seen and "Save the schedule" not in seen
    assert viewer.post(page + "schedule/state/", {"action": "delete"}).status_code == 403
    web.post(page + "schedule/state/", {"action": "delete"})
    assert "Not scheduled" in web.get(page).content.decode()
    assert not PeriodicTask.objects.filter(task="runs.tasks.schedule_fire").exists()


@pytest.mark.django_db
def test_beat_alive_is_healthy_only_while_beat_writes_back_its_reconcile_pass():
    from django.core.management import CommandError, call_command
    from django_celery_beat.models import IntervalSchedule

    with pytest.raises(CommandError, match="has not sent runs-reconcile yet"):
        call_command("beat_alive")
    every = IntervalSchedule.objects.create(every=30, period=IntervalSchedule.SECONDS)
    task = PeriodicTask.objects.create(
        name="runs-reconcile",
        task="runs.tasks.runs_reconcile",
        interval=every,
        last_run_at=timezone.now() - datetime.timedelta(seconds=100),
    )
    call_command("beat_alive", within=600)
    PeriodicTask.objects.filter(pk=task.pk).update(
        last_run_at=timezone.now() - datetime.timedelta(seconds=700)
    )
    with pytest.raises(CommandError, match=r"beat last sent runs-reconcile 70[0-9] s ago"):
        call_command("beat_alive", within=600)
