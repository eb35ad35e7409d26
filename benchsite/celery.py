"""The Celery application; broker and limits come from Django settings (CELERY_*)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchsite.settings")

app = Celery("benchsite")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
