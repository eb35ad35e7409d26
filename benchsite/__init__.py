"""Benchsite's Django project: settings, routes, the ASGI app and the Celery app."""

from benchsite.celery import app as celery_app

__all__ = ["celery_app"]
