"""``runs.access`` promises that every read bypassing its scope is named ``unscoped_*``.

These tests read the site's source: a read of a tenant's rows keyed by a secret (the token
lookups, made before any tenant is known), and — outside the access layer, the services and
the tasks, which act for the system on rows they were handed — any read of a tenant's rows
that filters on no organization, must sit in a function named ``unscoped_*``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.apps import apps

ROOT = Path(__file__).resolve().parents[2]
TENANT_MODELS = frozenset(
    model.__name__
    for model in apps.get_app_config("runs").get_models()
    if any(field.name == "organization" for field in model._meta.fields)
)
# They act for the system (ingest, provisioning, reconcile, the operator's commands and the
# demo one of them runs on its own database) on rows reached by id.
SYSTEM_CODE = (
    "runs/access.py",
    "runs/services/",
    "runs/tasks.py",
    "runs/migrations/",
    "runs/management/",
    "runs/demo/",
)
WRITES = {"create", "bulk_create", "update", "bulk_update", "delete"}
# A write that reads every tenant's ended trials to derive their figures (a service that
# lives beside the figures it derives); its reads never leave it.
SYSTEM_WRITES = {"trial_level_figures_record"}


@dataclass(frozen=True)
class Read:
    """One ``<TenantModel>.objects…`` chain in a function."""

    where: str
    function: str
    methods: tuple[str, ...]
    keywords: frozenset[str]

    @property
    def scoped_to_an_organization(self) -> bool:
        owners = ("organization", "organization_id")
        return any(key.split("__")[0] in owners for key in self.keywords)

    @property
    def by_secret(self) -> bool:
        return any(key.split("__")[-1].endswith("token_hash") for key in self.keywords)

    @property
    def is_a_read(self) -> bool:
        return self.methods[-1:] != ("none",) and not WRITES & set(self.methods[-1:])


def reads_in(source: str, where: str) -> Iterator[Read]:
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if not (
                isinstance(node, ast.Attribute)
                and node.attr == "objects"
                and isinstance(node.value, ast.Name)
                and node.value.id in TENANT_MODELS
            ):
                continue
            methods, keywords, link = [], set(), node
            # Climb the chain: Model.objects.filter(...).order_by(...).first()
            while (parent := parents.get(link)) is not None and (
                (isinstance(parent, ast.Attribute) and parent.value is link)
                or (isinstance(parent, ast.Call) and parent.func is link)
            ):
                if isinstance(parent, ast.Attribute):
                    methods.append(parent.attr)
                else:
                    keywords |= {keyword.arg for keyword in parent.keywords if keyword.arg}
                link = parent
            yield Read(f"{where}:{node.lineno}", function.name, tuple(methods), frozenset(keywords))


def site_reads() -> Iterator[tuple[str, Read]]:
    for path in sorted([*ROOT.glob("runs/**/*.py"), *ROOT.glob("frontend/**/*.py")]):
        relative = path.relative_to(ROOT).as_posix()
        yield from ((relative, read) for read in reads_in(path.read_text(), relative))


def named_unscoped(read: Read) -> bool:
    return read.function.startswith("unscoped_")


@pytest.mark.slow
def test_it_names_every_lookup_by_secret_unscoped():
    found = [read for _, read in site_reads() if read.by_secret and read.is_a_read]
    assert found, "the token lookups were not found: the scan is void"
    assert [read.where for read in found if not named_unscoped(read)] == []


def test_it_names_every_read_that_filters_on_no_organization_unscoped():
    unnamed = [
        read.where
        for path, read in site_reads()
        if not path.startswith(SYSTEM_CODE)
        and read.is_a_read
        and not read.scoped_to_an_organization
        and not named_unscoped(read)
        and read.function not in SYSTEM_WRITES
    ]
    assert unnamed == []


def test_the_scan_sees_a_read_of_every_tenant_and_tells_scoped_from_unscoped():
    # Guard against a scan that finds nothing (the tests above would then be void).
    source = (
        "def unscoped_run(raw):\n"
        "    return Run.objects.filter(run_token_hash=raw).first()\n"
        "def runs_of(org):\n"
        "    Run.objects.filter(pk=1).update(state='x')\n"
        "    return Run.objects.filter(organization=org).order_by('id')\n"
        "def everyone():\n"
        "    return list(Trial.objects.all())\n"
    )
    reads = list(reads_in(source, "probe"))
    assert [(r.function, r.by_secret, r.is_a_read, r.scoped_to_an_organization) for r in reads] == [
        ("unscoped_run", True, True, False),
        ("runs_of", False, False, False),
        ("runs_of", False, True, True),
        ("everyone", False, True, False),
    ]
