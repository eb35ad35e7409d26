"""manage.py beat_alive [--within SECONDS] — exit 1 unless beat has sent the reconcile pass
lately: the beat container's health check.

Beat keeps its schedule in the database (django-celery-beat) and writes each entry's
``last_run_at`` back every few minutes while it ticks; reconcile is due every 30 s, so a beat
that ticks keeps that row fresh and a stopped or wedged one lets it age."""

from __future__ import annotations

import datetime

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

# The entry of CELERY_BEAT_SCHEDULE that is due most often.
PROBE_ENTRY = "runs-reconcile"


class Command(BaseCommand):
    help = "Exit 1 unless beat sent the reconcile pass within --within seconds."

    def add_arguments(self, parser):
        parser.add_argument("--within", type=int, default=600, help="seconds (default 600)")

    def handle(self, *args, within: int, **options):
        task = PeriodicTask.objects.filter(name=PROBE_ENTRY).first()
        if task is None or task.last_run_at is None:
            raise CommandError(f"beat has not sent {PROBE_ENTRY} yet")
        age = timezone.now() - task.last_run_at
        if age > datetime.timedelta(seconds=within):
            raise CommandError(f"beat last sent {PROBE_ENTRY} {age.total_seconds():.0f} s ago")
        self.stdout.write(f"beat sent {PROBE_ENTRY} {age.total_seconds():.0f} s ago")
