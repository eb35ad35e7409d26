"""manage.py addmember SLUG EMAIL --role ROLE"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from runs.actors import Actor
from runs.errors import DomainValidationError
from runs.models import Organization, Role, User
from runs.services.tenancy import membership_add


class Command(BaseCommand):
    help = "Add a user (created without a password when missing) to an organization."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("email")
        parser.add_argument("--role", required=True, choices=Role.values)

    def handle(self, *args, slug, email, role, **options):
        org = Organization.objects.filter(slug=slug).first()
        if org is None:
            raise CommandError(f"No organization {slug!r}")
        try:
            with transaction.atomic():
                user = User.objects.filter(email=email.lower()).first() or User.objects.create_user(
                    email
                )
                membership_add(
                    org=org, user=user, role=role, actor=Actor.system("manage.py addmember")
                )
        except DomainValidationError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Added {user.email} to {org.slug} as {role}")
