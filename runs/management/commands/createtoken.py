"""manage.py createtoken SLUG EMAIL [--name NAME] — prints the token once, nothing else."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from runs.actors import Actor
from runs.errors import DomainValidationError
from runs.models import Organization, User
from runs.services.tenancy import token_create


class Command(BaseCommand):
    help = "Create an API token for a member; the token alone is printed on stdout (for scripts)."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("email")
        parser.add_argument("--name", default="cli")

    def handle(self, *args, slug, email, name, **options):
        org = Organization.objects.filter(slug=slug).first()
        user = User.objects.filter(email=email.lower()).first()
        if org is None:
            raise CommandError(f"No organization {slug!r}")
        if user is None:
            raise CommandError(f"No user {email!r}")
        try:
            issued = token_create(
                org=org, user=user, name=name, actor=Actor.system("manage.py createtoken")
            )
        except DomainValidationError as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write(
            f"Token {issued.token.prefix}… for {user.email} in {org.slug}; shown once."
        )
        self.stdout.write(issued.raw)
