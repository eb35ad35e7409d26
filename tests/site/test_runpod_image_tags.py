"""vLLM version as an axis (issue 17): one experiment, two image tags — through the whole path:
the real ``runpod`` SDK against the fake Runpod API, a pod per tag one after another (Daphne's
ingest moves the run on, a real Celery worker releases the first pod and rents the next),
each pod's real agent (the simulator standing in for vLLM) streaming into Daphne, and the
run's results split by tag."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections import Counter

import pytest

from runs.models import AuditEvent, Measurement, Run, Trial
from runs.providers.base import pod_name
from runs.services.reconcile import runs_reconcile
from tests.polling import wait_for

from .conftest import make_experiment, make_model, signed_in
from .live_server import celery_worker
from .runpod_setup import post_run, runpod_site

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

KEY = "rpa_images_00000000000000000000dddd"
TAGS = ("v0.11.0", "v0.12.0")
GRID = [8, 4]
LEVELS = [1, 4]


def job_of(pod) -> dict:
    return json.loads(base64.b64decode(pod.env["BENCHSITE_JOB"]))


class PodWatch:
    """Every pod the fake account has held, and the most it held at once (polled)."""

    def __init__(self, fake):
        self.fake, self.seen, self.most_at_once = fake, {}, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            pods = self.fake.pods(KEY)  # the live ones: a terminated pod is gone
            self.most_at_once = max(self.most_at_once, len(pods))
            for pod in pods:
                self.seen.setdefault(pod.id, pod)
            time.sleep(0.02)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


@pytest.mark.needs_redis
def test_two_image_tags_run_on_two_pods_one_after_another_and_split_the_results(
    alice, settings, monkeypatch, tmp_path, own_broker_queue
):
    with (
        runpod_site(
            alice, KEY, monkeypatch=monkeypatch, settings=settings, tmp_path=tmp_path
        ) as fake,
        celery_worker(
            tmp_path / "worker.log",
            env={"BENCHSITE_PUBLIC_URL": settings.BENCHSITE_PUBLIC_URL},
            timeout=120,
        ),
    ):
        experiment = make_experiment(
            alice.org,
            model=make_model(alice.org),
            engine_image_tag=TAGS[0],
            compare_image_tags=[TAGS[1]],
            serve_grid={"max_num_seqs": GRID},
            workload={
                "dataset": {"kind": "random", "input_len": 64, "output_len": 16},
                "concurrency": LEVELS,
                "requests_per_level": 8,
            },
            # Judged at p50, which a level of 8 requests can judge (a p99 needs 299).
            slos={"ttft_ms": 2000, "ttft_percentile": 50},
        )
        with PodWatch(fake) as watch:
            response = post_run(alice, experiment, "which vLLM?")
            assert response.status_code == 201, response.json()
            run = Run.objects.get(id=response.json()["id"])
            (first,) = fake.pods(KEY)
            job = job_of(first)
            assert first.name == pod_name(run.id) and first.image.endswith(f":{TAGS[0]}")
            assert job["engine"]["image_tag"] == TAGS[0]
            assert job["engine"]["vllm_version"] == "0.11.0"
            assert [trial["index"] for trial in job["trials"]] == [0, 1]

            def ended():
                run.refresh_from_db()
                return run.state in ("succeeded", "failed")

            wait_for(ended, 240, "both pods' agents to finish the run")
        second = watch.seen[next(pod for pod in watch.seen if pod != first.id)]
        log = second.log_path.read_text() if second.log_path else ""
        assert run.state == "succeeded", (run.failure_reason, log[-3000:])
        # One pod per tag, one after another: never two at once, the second under the next
        # idempotency name, running the second tag's trials on its image.
        assert len(watch.seen) == 2 and watch.most_at_once == 1
        assert second.name == pod_name(run.id, 1) and second.image.endswith(f":{TAGS[1]}")
        job = job_of(second)
        assert job["engine"]["image_tag"] == TAGS[1]
        assert job["engine"]["vllm_version"] == "0.12.0"
        assert [trial["index"] for trial in job["trials"]] == [2, 3]

        # Every (trial, level) once; each trial knows the image it ran on.
        stored = Counter(
            Measurement.objects.filter(trial__run=run).values_list("trial__index", "concurrency")
        )
        assert stored == Counter({(t, c): 1 for t in range(2 * len(GRID)) for c in LEVELS})
        assert dict(Trial.objects.filter(run=run).values_list("index", "image_tag")) == {
            0: TAGS[0],
            1: TAGS[0],
            2: TAGS[1],
            3: TAGS[1],
        }
        assert set(Trial.objects.filter(run=run).values_list("outcome", flat=True)) == {"succeeded"}

        # The move is audited and kept in the run's pod history and cost.
        (left,) = run.pod_history
        assert (left["pod_id"], left["kind"], left["image_tag"]) == (
            first.id,
            "next_image",
            TAGS[0],
        )
        event = AuditEvent.objects.get(organization=alice.org, event="run.next_image")
        assert event.after == {"left_pod": first.id, "image_tag": TAGS[0], "next": TAGS[1]}
        assert run.resumes == 0  # a planned move is not a resume
        runs_reconcile()  # releases the second pod
        assert fake.pods(KEY) == []  # no pod left

        # Split by tag on the run's page and in its API answer.
        detail = alice.client().get(f"/api/v1/orgs/acme/runs/{run.id}/").json()
        assert [trial["image_tag"] for trial in detail["trials"]] == [
            *[TAGS[0]] * 2,
            *[TAGS[1]] * 2,
        ]
        page = signed_in(alice).get(f"/o/acme/runs/{run.id}/").content.decode()
        for tag in TAGS:
            assert f"{tag} · max_num_seqs=8" in page
