"""manage.py report_figures_backfill — derive the level figures of every ended run lacking
them (after ``runs.selectors.level_figures.FIGURES_RULES`` was bumped, or runs imported by hand)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from runs.services.level_figures import trial_level_figures_record


class Command(BaseCommand):
    help = "Derive the kept level figures of every ended run's trials that lack them."

    def handle(self, *args, **options):
        derived = trial_level_figures_record()
        self.stdout.write(f"level figures derived for {derived} trial(s)")
