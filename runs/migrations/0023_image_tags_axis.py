from collections import defaultdict

from django.db import migrations, models
from django.db.models import F
from django.db.models.fields.json import KeyTextTransform, KeyTransform


def backfill(apps, schema_editor):
    """Runs before image tags were an axis ran one image: their trials and pod ran the
    frozen engine's tag, and every pod they left behind was a resume."""
    Run = apps.get_model("runs", "Run")
    Trial = apps.get_model("runs", "Trial")
    Run.objects.update(pod_attempt=F("resumes"))
    tagged = Run.objects.annotate(
        tag=KeyTextTransform("image_tag", KeyTransform("engine", "job_spec"))
    ).values_list("id", "tag", "pod_id")
    runs_by_tag, pods_by_tag = defaultdict(list), defaultdict(list)
    for run_id, tag, pod_id in tagged:
        if tag:
            runs_by_tag[tag].append(run_id)
            if pod_id:
                pods_by_tag[tag].append(run_id)
    for tag, run_ids in runs_by_tag.items():
        Trial.objects.filter(run_id__in=run_ids).update(image_tag=tag)
    for tag, run_ids in pods_by_tag.items():
        Run.objects.filter(id__in=run_ids).update(pod_image_tag=tag)


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0022_run_resume'),
    ]

    operations = [
        migrations.AddField(
            model_name='experiment',
            name='compare_image_tags',
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name='run',
            name='pod_attempt',
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='run',
            name='pod_image_tag',
            field=models.CharField(blank=True, max_length=128),
        ),
        migrations.AddField(
            model_name='trial',
            name='image_tag',
            field=models.CharField(blank=True, max_length=128),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
