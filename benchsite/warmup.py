"""What a web process loads before it takes its first request, so that request is as quick
as any later one: the URLconf with every view module it imports, Django's reverse map, and
every template of the site compiled into the cached loader (templates are cached only when
DEBUG is off, as in production).

Guarantee: ``warm_up`` only loads what the first request would load anyway, reads no
database row and changes no state a request could see; after it, ``gc.freeze()`` moves the
objects of the loaded code out of the cyclic garbage collector's reach, so later collections
do not walk tens of thousands of long-lived objects in every request that triggers one.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

from django.apps import apps
from django.template import TemplateDoesNotExist, TemplateSyntaxError
from django.template.loader import get_template
from django.urls import get_resolver


def _site_templates() -> list[str]:
    """The names of the templates in every installed app of this project (not in packages)."""
    names = []
    root = Path(__file__).resolve().parents[1]
    for app in apps.get_app_configs():
        folder = Path(app.path) / "templates"
        # The project's own apps: not installed packages (a virtualenv may sit in the root).
        if folder.is_dir() and folder.is_relative_to(root) and "site-packages" not in folder.parts:
            names += [p.relative_to(folder).as_posix() for p in folder.rglob("*.html")]
    return sorted(names)


def warm_up() -> float:
    """Loads the URLconf, its reverse map and the site's templates; then freezes the garbage
    collector's view of them. Returns the seconds it took."""
    start = time.perf_counter()
    resolver = get_resolver()
    resolver.url_patterns  # noqa: B018 — imports every view module
    resolver.reverse_dict  # noqa: B018 — the map {% url %} and redirects read
    for name in _site_templates():
        try:
            get_template(name)
        except (TemplateDoesNotExist, TemplateSyntaxError):
            # A template that does not compile fails its own page, with its own error; the
            # process must still start.
            continue
    gc.collect()
    gc.freeze()
    return time.perf_counter() - start
