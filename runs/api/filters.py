"""Query filters of the list endpoints (django-filter)."""

from __future__ import annotations

import datetime

import django_filters
from django.core.exceptions import ValidationError
from django_filters.fields import IsoDateTimeField

from runs.models import Experiment, ModelSpec

# Real time zones lie within UTC-12:00 … UTC+14:00; PostgreSQL refuses offsets much beyond.
_MAX_OFFSET = datetime.timedelta(hours=15)


class RealisticDateTimeField(IsoDateTimeField):
    """An ISO 8601 date-time whose UTC offset a database can store."""

    def to_python(self, value):
        parsed = super().to_python(value)
        offset = parsed.utcoffset() if parsed is not None else None
        if offset is not None and abs(offset) > _MAX_OFFSET:
            raise ValidationError("The UTC offset is out of range (at most ±15:00).")
        return parsed


class DateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = RealisticDateTimeField


class ModelSpecFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains")
    hf_repo = django_filters.CharFilter()

    class Meta:
        model = ModelSpec
        fields = ["name", "hf_repo", "dtype"]


class ExperimentFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains")
    model = django_filters.UUIDFilter(field_name="model_id")
    gpu_type = django_filters.CharFilter(field_name="gpu_type_id")
    created_after = DateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = DateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = Experiment
        fields = ["name", "model", "gpu_type", "engine", "engine_image_tag", "cloud_type"]
