"""manage.py createorg SLUG --owner EMAIL [--name NAME] [--password-env VAR]"""

from __future__ import annotations

import os

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from runs.actors import Actor
from runs.errors import DomainValidationError
from runs.models import User
from runs.services.tenancy import org_create


class Command(BaseCommand):
    help = "Create an organization with its first owner (the user is created when missing)."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--owner", required=True, help="e-mail of the first owner")
        parser.add_argument("--name", default="", help="display name (default: the slug)")
        parser.add_argument(
            "--password-env",
            help="name of an environment variable holding the owner's password "
            "(never pass a password on the command line: it would land in shell history)",
        )

    def handle(self, *args, slug, owner, name, password_env, **options):
        password = None
        if password_env:
            password = os.environ.get(password_env)
            if not password:
                raise CommandError(
                    f"--password-env: the variable {password_env} is not set or empty"
                )
        try:
            with transaction.atomic():
                user = User.objects.filter(email=owner.lower()).first()
                if user is None:
                    user = User.objects.create_user(owner, password)
                elif password:
                    user.set_password(password)
                    user.save(update_fields=["password"])
                org = org_create(
                    slug=slug, name=name, owner=user, actor=Actor.system("manage.py createorg")
                )
        except DomainValidationError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Created organization {org.slug} with owner {user.email}")
