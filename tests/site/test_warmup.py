"""A web process loads its views and templates before it serves (``benchsite.warmup``)."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest
from django.template import engines
from django.test import override_settings

from benchsite.warmup import _site_templates, warm_up

from .live_server import ROOT


def test_it_finds_the_sites_own_templates_only():
    names = _site_templates()
    assert "frontend/base.html" in names and "frontend/reports/costs.html" in names
    assert not any(name.startswith("admin/") for name in names)  # Django's own, not ours


def test_it_compiles_every_site_template_into_the_cached_loader():
    # The cached loader is built only with DEBUG off, as in production.
    with override_settings(DEBUG=False):
        engine = engines["django"].engine
        engine.template_loaders[0].reset()
        try:
            warm_up()
        finally:
            gc.unfreeze()
        cached = engine.template_loaders[0].get_template_cache
        assert set(_site_templates()) <= set(cached)


@pytest.mark.slow
def test_the_asgi_application_is_warm_when_it_is_imported():
    probe = (
        "import gc, benchsite.asgi;"
        "print(gc.get_freeze_count() > 0, 'frontend.reports.views' in __import__('sys').modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={"DEBUG": "true", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["True", "True"]
