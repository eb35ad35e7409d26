# Trials, measurements, agent messages and level figures carry their run's organization, so
# a tenant's read of them filters by it instead of joining the run. Added nullable, filled
# from each row's run, then made non-null.

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import OuterRef, Subquery

# Model → the path from it to its run's organization.
_OWNER_PATHS = {
    "Trial": "run__organization_id",
    "Measurement": "trial__run__organization_id",
    "AgentMessageRecord": "run__organization_id",
    "TrialLevelFigures": "trial__run__organization_id",
}


def organization_backfill(apps, schema_editor) -> None:
    for name, path in _OWNER_PATHS.items():
        model = apps.get_model("runs", name)
        owner = model.objects.filter(pk=OuterRef("pk")).values(path)[:1]
        model.objects.filter(organization__isnull=True).update(organization_id=Subquery(owner))


def _organization(null: bool):
    return models.ForeignKey(
        null=null,
        on_delete=django.db.models.deletion.CASCADE,
        related_name="+",
        to="runs.organization",
    )


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0012_agent_message_epochs"),
    ]

    operations = [
        *[
            migrations.AddField(
                model_name=name.lower(), name="organization", field=_organization(null=True)
            )
            for name in _OWNER_PATHS
        ],
        migrations.RunPython(organization_backfill, migrations.RunPython.noop, elidable=True),
        *[
            migrations.AlterField(
                model_name=name.lower(), name="organization", field=_organization(null=False)
            )
            for name in _OWNER_PATHS
        ],
    ]
