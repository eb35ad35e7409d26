"""manage.py audit_verify [--org SLUG] — exit 1 and name the first broken row of any chain.

The full verification the audit log page relies on (``runs.audit``): run it periodically
(cron or a beat entry). Each run is recorded on the organization's checkpoint, so a break it
finds stays on the page until a later run verifies the whole chain again."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from runs.audit import audit_chain_verify_full
from runs.models import AuditEvent, Organization


class Command(BaseCommand):
    help = "Verify the hash chain of every organization's audit log (or of one)."

    def add_arguments(self, parser):
        parser.add_argument("--org", help="slug of one organization")

    def handle(self, *args, org=None, **options):
        orgs = Organization.objects.order_by("slug")
        if org:
            orgs = orgs.filter(slug=org)
            if not orgs.exists():
                raise CommandError(f"No organization {org!r}")
        broken = 0
        for organization in orgs:
            chain_break = audit_chain_verify_full(org=organization)
            count = AuditEvent.objects.filter(organization=organization).count()
            if chain_break is None:
                self.stdout.write(f"{organization.slug}: ok ({count} events)")
            else:
                broken += 1
                self.stdout.write(
                    f"{organization.slug}: BROKEN at event #{chain_break.seq} "
                    f"(id {chain_break.event_id}): {chain_break.reason}"
                )
        if broken:
            raise CommandError(f"{broken} audit chain(s) broken")
