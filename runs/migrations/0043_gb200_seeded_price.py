"""GB200 rows seeded without a price get the seeded on-demand rate
(runs/gpu_catalogue_seed.py, ``GB200_PRICE_NOTE``); a row the refresh or an operator has
priced or re-sourced since is left as it is."""

from django.db import migrations

from runs.gpu_catalogue_seed import (
    GB200_PRICE_NOTE,
    GB200_UNPRICED_NOTE,
    GPU_CATALOGUE,
    PRICE_SOURCE,
)


def forwards(apps, schema_editor):
    secure = next(row[2] for row in GPU_CATALOGUE if row[0] == "NVIDIA GB200")
    apps.get_model("runs", "GpuType").objects.filter(
        id="NVIDIA GB200",
        price_secure_usd_hr__isnull=True,
        price_source=f"{PRICE_SOURCE}; {GB200_UNPRICED_NOTE}",
    ).update(price_secure_usd_hr=secure, price_source=f"{PRICE_SOURCE}; {GB200_PRICE_NOTE}")


class Migration(migrations.Migration):
    dependencies = [("runs", "0042_sandbox_simulated_promotions")]
    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
