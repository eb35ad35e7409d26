# A GPU type's memory, bandwidth and BF16 TFLOP/s were a stored copy of agents.hardware's
# facts (the seed copied them); every reader now asks GpuType.hardware, so the columns go.
# Undone, they come back filled from agents.hardware again.

from django.db import migrations, models

from runs.gpu_catalogue_seed import RETIRED_PHYSICAL_COLUMNS, retired_physical_columns


def physical_columns_refill(apps, schema_editor) -> None:
    gpu_type = apps.get_model("runs", "GpuType")
    for gpu in gpu_type.objects.all():
        gpu_type.objects.filter(pk=gpu.pk).update(**retired_physical_columns(gpu.pk))


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0014_run_frozen_job"),
    ]

    operations = [
        # Nullable first, so that undoing the removal can add the columns back before the
        # refill and restore NOT NULL after it.
        *[
            migrations.AlterField(
                model_name="gputype", name=name, field=models.PositiveIntegerField(null=True)
            )
            for name in RETIRED_PHYSICAL_COLUMNS
        ],
        migrations.RunPython(migrations.RunPython.noop, physical_columns_refill),
        *[
            migrations.RemoveField(model_name="gputype", name=name)
            for name in RETIRED_PHYSICAL_COLUMNS
        ],
    ]
