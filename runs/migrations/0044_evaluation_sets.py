"""Evaluation sets (issue 38) and the evaluation an experiment names ({} for none)."""


import django.db.models.deletion
import django.utils.timezone
import uuid
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0043_gb200_seeded_price'),
    ]

    operations = [
        migrations.AddField(
            model_name='experiment',
            name='evaluation',
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.CreateModel(
            name='EvaluationSet',
            fields=[
                ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ('name', models.CharField(max_length=200)),
                ('description', models.TextField(blank=True)),
                ('file', models.FileField(upload_to='evaluations/')),
                ('sha256', models.CharField(max_length=64)),
                ('size_bytes', models.BigIntegerField()),
                ('items', models.PositiveIntegerField()),
                ('needs_judge', models.BooleanField(default=False)),
                ('summary', models.JSONField(blank=True, default=dict)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('organization', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='evaluation_sets', to='runs.organization')),
            ],
            options={
                'ordering': ['-created_at', 'id'],
            },
        ),
    ]
