"""manage.py seed_demo — a demo organization with users, models, experiments and a budget.

The demo organization is a sandbox (``Organization.sandbox``): a simulated trial may be
promoted there, labelled simulated, so the promotion flow can be tried without a GPU. This
command is the only thing that makes an organization a sandbox.

Idempotent: running it again keeps the data, gives alice a fresh password and a fresh token,
and prints both (the demo is local; nothing here is for production).
"""

from __future__ import annotations

import secrets
from decimal import Decimal

from django.core.management.base import BaseCommand
from django.db import transaction

from agents.hardware import MODEL_PRESETS
from runs.actors import Actor
from runs.inputs.json_schemas import EXAMPLE_SERVE_GRID, EXAMPLE_SLOS, EXAMPLE_WORKLOAD
from runs.models import ApiToken, Budget, Experiment, GpuType, ModelSpec, Organization, User
from runs.services.budgets import budget_set
from runs.services.catalogue import model_spec_create
from runs.services.experiments import experiment_create
from runs.services.tenancy import membership_add, org_create, token_create, token_revoke

DEMO_SLUG = "demo"
PEOPLE = [
    ("alice@demo.example", "owner"),
    ("bob@demo.example", "member"),
    ("vera@demo.example", "viewer"),
]
MODELS = [MODEL_PRESETS[key].registered for key in ("llama-3.1-8b", "qwen2.5-7b", "llama-3.1-70b")]


class Command(BaseCommand):
    help = "Seed (or refresh) the demo organization and print how to sign in."

    def add_arguments(self, parser):
        parser.add_argument(
            "--base-url", default="http://127.0.0.1:8000", help="where the site is served"
        )

    def handle(self, *args, base_url: str, **options):
        base_url = base_url.rstrip("/")
        actor = Actor.system("manage.py seed_demo")
        password = secrets.token_urlsafe(9)
        with transaction.atomic():
            users = {}
            for email, _role in PEOPLE:
                user = User.objects.filter(email=email).first() or User.objects.create_user(email)
                user.set_password(password)
                user.save(update_fields=["password"])
                users[email] = user
            alice = users["alice@demo.example"]
            org = Organization.objects.filter(slug=DEMO_SLUG).first()
            if org is None:
                org = org_create(slug=DEMO_SLUG, name="Demo Team", owner=alice, actor=actor)
                for email, role in PEOPLE[1:]:
                    membership_add(org=org, user=users[email], role=role, actor=actor)
                self._seed_content(org, actor)
            # The demo organization is a sandbox: its runs are simulated, and its people can
            # walk the promotion flow on them (each promotion labelled simulated).
            Organization.objects.filter(pk=org.pk, sandbox=False).update(sandbox=True)
            for old in ApiToken.objects.filter(
                organization=org, name="demo", revoked_at__isnull=True
            ):
                token_revoke(token=old, actor=actor)
            issued = token_create(org=org, user=alice, name="demo", actor=actor)
        self.stdout.write(
            "\nBenchsite demo is ready.\n"
            f"  Sign in:  {base_url}/login/\n"
            f"  E-mail:   alice@demo.example (owner; bob@ member, vera@ viewer)\n"
            f"  Password: {password} (same for all three)\n"
            f"  API:      curl -H 'Authorization: Bearer {issued.raw}' "
            f"{base_url}/api/v1/orgs/demo/experiments/\n"
            f"  API docs: {base_url}/api/v1/docs/\n"
        )

    def _seed_content(self, org: Organization, actor: Actor) -> None:
        models = [model_spec_create(org=org, actor=actor, **spec) for spec in MODELS]
        h100 = GpuType.objects.get(id="NVIDIA H100 80GB HBM3")
        experiment_create(
            org=org,
            actor=actor,
            name="Llama 8B on H100: batching limits",
            model=models[0],
            gpu_type=h100,
            gpu_count=1,
            engine="vllm",
            engine_image_tag="v0.11.0",
            # The API schema's examples: what the docs show is what the demo runs.
            serve_grid=EXAMPLE_SERVE_GRID,
            workload=EXAMPLE_WORKLOAD,
            slos=EXAMPLE_SLOS,
            budget_cap_usd=Decimal(40),
        )
        experiment_create(
            org=org,
            actor=actor,
            name="Qwen 7B: prefix caching (simulated)",
            model=models[1],
            gpu_type=h100,
            gpu_count=1,
            engine="sim",
            serve_grid={"enable_prefix_caching": [True, False]},
            workload={
                "dataset": {
                    "kind": "prefix",
                    "shared_len": 1024,
                    "suffix_len": 128,
                    "output_len": 128,
                },
                "concurrency": [1, 8, 64],
                "requests_per_level": 100,
            },
            slos={"ttft_ms": 300},
            budget_cap_usd=Decimal(5),
        )
        if not Budget.objects.filter(organization=org).exists():
            budget_set(org=org, actor=actor, limit_usd=Decimal(2000), note="demo standing budget")
        assert Experiment.objects.filter(organization=org).count() == 2
        assert ModelSpec.objects.filter(organization=org).count() == len(MODELS)
