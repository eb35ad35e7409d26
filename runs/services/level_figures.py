"""Keeps the level figures of ended runs (``runs.models.TrialLevelFigures``): derived once
by ``runs.selectors.level_figures`` when a run's pod is released, or by the backfill.

Guarantees: only measured trials (succeeded or partial) of ended runs get a row, written
under today's ``level_figures.FIGURES_RULES``; a row of other rules makes way, a row of
today's rules is kept.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction

from runs.models import Measurement, Trial, TrialLevelFigures
from runs.models.runs import MEASURED_OUTCOMES, TERMINAL_RUN_STATES
from runs.selectors import level_figures

# Trials per write: a run has a handful; the backfill goes through thousands.
_BATCH = 500


def trial_level_figures_record(*, run_ids: Iterable | None = None) -> int:
    """Records the ``TrialLevelFigures`` of every measured trial of those runs (of every
    run when None) that have ended and have none under today's rules; returns how many
    trials it derived.

    Idempotent and safe beside a concurrent call (a row already there is kept). A run that
    has not ended gets nothing: its levels may still change.
    """
    trials = Trial.objects.all()
    if run_ids is not None:
        trials = trials.filter(run_id__in=list(run_ids))
    return _record(trials, Measurement, TrialLevelFigures)


def level_figures_backfill(apps, schema_editor) -> None:
    """Migration 0010: the figures of every ended run there already is (historical models)."""
    _record(
        apps.get_model("runs", "Trial").objects.all(),
        apps.get_model("runs", "Measurement"),
        apps.get_model("runs", "TrialLevelFigures"),
    )


def _record(trials, measurement_model, figures_model) -> int:
    trials = trials.filter(
        run__state__in=TERMINAL_RUN_STATES, outcome__in=MEASURED_OUTCOMES
    ).exclude(level_figures__rules=level_figures.FIGURES_RULES)
    owners = dict(trials.values_list("id", "run__organization_id").order_by("id"))
    trial_ids = list(owners)
    # Migration 0010's historical rows predate their organization (migration 0013 fills it).
    owned = any(field.name == "organization" for field in figures_model._meta.fields)
    for start in range(0, len(trial_ids), _BATCH):
        batch = trial_ids[start : start + _BATCH]
        levels = level_figures.levels_of_trials(
            measurement_model.objects.filter(trial_id__in=batch)
        )
        rows = []
        for trial_id in batch:
            figures = level_figures.level_figures(levels.get(trial_id, []))
            rows.append(
                figures_model(
                    trial_id=trial_id,
                    **({"organization_id": owners[trial_id]} if owned else {}),
                    rules=level_figures.FIGURES_RULES,
                    deciding_levels=list(figures.deciding_levels),
                    qualifying=list(figures.qualifying),
                    levels_simulated=figures.levels_simulated,
                )
            )
        with transaction.atomic(using=trials.db):
            # Rows of older rules make way; a row of today's rules written meanwhile stays.
            figures_model.objects.filter(trial_id__in=batch).exclude(
                rules=level_figures.FIGURES_RULES
            ).delete()
            figures_model.objects.bulk_create(rows, ignore_conflicts=True)
    return len(trial_ids)
