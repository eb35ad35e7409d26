"""Every installation starts with the GPU catalogue (see runs/gpu_catalogue_seed.py)."""

from django.db import migrations

from runs.gpu_catalogue_seed import seed_gpu_catalogue


def forwards(apps, schema_editor):
    seed_gpu_catalogue(apps.get_model("runs", "GpuType"))


class Migration(migrations.Migration):
    dependencies = [("runs", "0001_initial")]
    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
