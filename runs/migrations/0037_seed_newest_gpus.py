"""Installations seeded before B300, GB200 and GB300 were in the catalogue get them now,
without the operator's Runpod key (runs/gpu_catalogue_seed.py); existing rows are left as
they are, refreshed or edited."""

from django.db import migrations

from runs.gpu_catalogue_seed import seed_gpu_catalogue


def forwards(apps, schema_editor):
    seed_gpu_catalogue(apps.get_model("runs", "GpuType"))


class Migration(migrations.Migration):
    dependencies = [("runs", "0036_experiment_trust_remote_code")]
    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
