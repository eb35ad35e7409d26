"""Serializer fields that take JSON exactly as it was sent, within stated limits.

Guarantees, for every field class here:

- No type coercion: a string field takes only a JSON string (not ``123``), an integer field
  only a JSON integer (not ``"2"``, not ``2.0``, never ``true``), a float field a JSON number
  (an integer is a number; a boolean is not), a boolean field only ``true`` or ``false``
  (not ``"yes"``, not ``1``), a choice, UUID, e-mail or date field only a string. A decimal
  field takes a JSON number or a decimal string: DRF writes decimals as strings, so what a
  GET returns can be sent back.
- Nothing is unbounded: a writable text field needs ``max_length``, a number needs
  ``min_value`` and ``max_value``, a list needs ``max_length`` (checked before its items
  are), and a JSON field holds at most ``MAX_JSON_VALUES`` values in all. A field built
  without its limits raises ``ImproperlyConfigured`` when its serializer is built, so a
  missing limit fails the tests, not a request.
- The error names the field (DRF puts it under the field's path) and says which JSON type
  was expected and which one came, never echoing the value.

``StrictModelSerializer`` builds the fields it generates from model columns out of these
classes, so a column added to a writable serializer is strict without a second thought.
"""

from __future__ import annotations

import math

from django.core.exceptions import ImproperlyConfigured
from rest_framework import serializers

# Descriptions and notes: room for a paragraph or two of context, not for a document.
LONG_TEXT_MAX_CHARS = 10_000
# Far above any valid grid (at most 64 trials), workload (at most 32 levels) or SLO set,
# and small enough that walking a value to refuse it costs next to nothing.
MAX_JSON_VALUES = 10_000


def json_type_name(value: object) -> str:
    """What a parsed JSON value was, in JSON's words ("a string", "a boolean", …)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number with a decimal point"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return "a value of another type"


def _require(field: serializers.Field, **limits: object) -> None:
    # Read-only fields take no input, so only writable ones must say their limits.
    missing = [name for name, value in limits.items() if value is None]
    if missing and not field.read_only:
        raise ImproperlyConfigured(
            f"{type(field).__name__} needs {' and '.join(missing)}: every input is bounded."
        )


class _Typed:
    """Refuses input whose JSON type is not ``accepts`` (``bool`` is never an integer)."""

    accepts: tuple[type, ...] = ()
    expected = ""

    def _check_type(self, data: object) -> None:
        if isinstance(data, bool) and bool not in self.accepts:
            wrong = True
        else:
            wrong = not isinstance(data, self.accepts)
        if wrong:
            raise serializers.ValidationError(
                f"Expected {self.expected}; got {json_type_name(data)}.", code="invalid"
            )

    def to_internal_value(self, data):
        # Before the field's own conversion, which would coerce ("2" → 2, 7 → a UUID).
        self._check_type(data)
        return super().to_internal_value(data)


class StrictCharField(_Typed, serializers.CharField):
    """A JSON string of at most ``max_length`` characters."""

    accepts = (str,)
    expected = "a string"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        _require(self, max_length=self.max_length)


class StrictEmailField(StrictCharField, serializers.EmailField):
    """A JSON string that is an e-mail address."""


class StrictChoiceField(_Typed, serializers.ChoiceField):
    """One of the choices, given as a JSON string. The error lists the choices instead of
    quoting what was sent (which may be long)."""

    accepts = (str,)
    expected = "a string"

    def to_internal_value(self, data):
        self._check_type(data)
        if data == "" and self.allow_blank:
            return ""
        if data not in self.choice_strings_to_values:
            choices = ", ".join(f'"{choice}"' for choice in self.choice_strings_to_values)
            raise serializers.ValidationError(
                f"This is not a valid choice; expected one of {choices}.", code="invalid_choice"
            )
        return self.choice_strings_to_values[data]


class StrictUUIDField(_Typed, serializers.UUIDField):
    """A UUID as a JSON string (DRF would also take the integer 7 as a UUID)."""

    accepts = (str,)
    expected = "a UUID string"


class StrictDateField(_Typed, serializers.DateField):
    """A date as a JSON string, ``YYYY-MM-DD``."""

    accepts = (str,)
    expected = "a date string (YYYY-MM-DD)"


class StrictBooleanField(_Typed, serializers.BooleanField):
    """``true`` or ``false``, nothing that merely reads like one."""

    accepts = (bool,)
    expected = "true or false"

    def to_internal_value(self, data):
        self._check_type(data)
        return data


class StrictIntegerField(_Typed, serializers.IntegerField):
    """A JSON integer within ``[min_value, max_value]``."""

    accepts = (int,)
    expected = "an integer"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        _require(self, min_value=self.min_value, max_value=self.max_value)


class StrictFloatField(_Typed, serializers.FloatField):
    """A finite JSON number within ``[min_value, max_value]``."""

    accepts = (int, float)
    expected = "a number"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        _require(self, min_value=self.min_value, max_value=self.max_value)

    def to_internal_value(self, data):
        self._check_type(data)
        if not math.isfinite(data):
            raise serializers.ValidationError("Expected a finite number.", code="invalid")
        return super().to_internal_value(data)


class StrictDecimalField(_Typed, serializers.DecimalField):
    """A decimal within ``[min_value, max_value]``, as a JSON number or a decimal string."""

    accepts = (int, float, str)
    expected = 'a number or a decimal string such as "25.00"'

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        _require(self, min_value=self.min_value, max_value=self.max_value)


class StrictListField(_Typed, serializers.ListField):
    """A JSON array of at most ``max_length`` items; a longer one is refused before any of
    its items is looked at."""

    accepts = (list,)
    expected = "a list (a JSON array)"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        _require(self, max_length=self.max_length)

    def to_internal_value(self, data):
        self._check_type(data)
        if self.max_length is not None and len(data) > self.max_length:
            self.fail("max_length", max_length=self.max_length)
        return super().to_internal_value(data)


def _json_problem(value: object, limit: int) -> str | None:
    """Why ``value`` cannot be stored as JSON here, or None. Walks without recursion and
    stops at ``limit`` values, so the cost of refusing a huge value is bounded."""
    pending = [value]
    seen = 0
    while pending:
        item = pending.pop()
        seen += 1
        if seen > limit:
            return f"Too large: at most {limit} values in all."
        if isinstance(item, str):
            # PostgreSQL's jsonb cannot store U+0000.
            if "\x00" in item:
                return "Null characters are not allowed."
        elif isinstance(item, float):
            if not math.isfinite(item):
                return 'NaN and infinite numbers are not allowed; use "inf".'
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return None


class StrictJSONField(serializers.JSONField):
    """JSON that PostgreSQL can store: no NUL characters, no NaN or infinities, at most
    ``MAX_JSON_VALUES`` values. ``json_schema`` (an OpenAPI schema object, with the
    components it refers to under ``components``) is what the API schema shows for it;
    ``example`` a valid value."""

    def __init__(self, *, json_schema=None, components=None, example=None, **kwargs):
        self.json_schema = json_schema
        self.json_components = components or {}
        self.json_example = example
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        # Walked first: DRF's own check serializes the whole value once more.
        problem = _json_problem(data, MAX_JSON_VALUES)
        if problem:
            raise serializers.ValidationError(problem, code="invalid")
        return super().to_internal_value(data)


_STRICT_FOR = {
    serializers.CharField: StrictCharField,
    serializers.EmailField: StrictEmailField,
    serializers.BooleanField: StrictBooleanField,
    serializers.DateField: StrictDateField,
    serializers.UUIDField: StrictUUIDField,
}
_STRICT_CLASSES = (
    StrictCharField,
    StrictChoiceField,
    StrictUUIDField,
    StrictDateField,
    StrictBooleanField,
    StrictIntegerField,
    StrictFloatField,
    StrictDecimalField,
    StrictListField,
    StrictJSONField,
)


def is_strict(field: serializers.Field) -> bool:
    """Whether a writable field takes only its own JSON type, within limits: one of the
    classes here, or a reference to a row whose key is one."""
    if isinstance(field, serializers.RelatedField):
        return isinstance(field.pk_field, _STRICT_CLASSES)
    return isinstance(field, _STRICT_CLASSES)


class StrictModelSerializer(serializers.ModelSerializer):
    """A ModelSerializer whose generated fields are the strict ones above. A text column
    without a length (``TextField``) must be given one in ``extra_kwargs``; a writable
    number must be declared with a strict field and bounds that make sense (a column's own
    range does not), and so must a reference to another row."""

    serializer_field_mapping = {
        model_field: _STRICT_FOR.get(field, field)
        for model_field, field in serializers.ModelSerializer.serializer_field_mapping.items()
    }
    serializer_choice_field = StrictChoiceField

    def get_fields(self):
        fields = super().get_fields()
        for name, field in fields.items():
            if not field.read_only and not is_strict(field):
                raise ImproperlyConfigured(
                    f"{type(self).__name__}.{name}: a writable field must be a strict one "
                    "(runs.inputs.strict_fields), with its bounds."
                )
        return fields
