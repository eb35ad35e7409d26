"""What a client may send for a registered model and an organization's GPU prices.

A model is stated by its columns, or by its Hugging Face config.json (``hf_config``, or
``hf_config_from_hub``: read from the hub by the ``hf_config_fetch`` the caller gives in
the context), from which ``runs.model_config`` (``agents.hardware``) reads the columns and
the facts beyond them (``architecture``, read-only). A config and columns at once are
refused; the columns read from a config are held to the same bounds as typed ones, under
``hf_config``.
"""

from __future__ import annotations

from decimal import Decimal

from rest_framework import serializers

from runs.errors import DomainValidationError
from runs.inputs.json_schemas import HF_CONFIG_FIELD, MODEL_ARCHITECTURE_FIELD
from runs.inputs.strict_fields import (
    LONG_TEXT_MAX_CHARS,
    StrictBooleanField,
    StrictCharField,
    StrictDecimalField,
    StrictIntegerField,
    StrictJSONField,
    StrictModelSerializer,
)
from runs.model_config import HF_CONFIG_COLUMNS, model_facts_from_hf_config
from runs.models import GpuPriceOverride, ModelSpec
from runs.models.catalogue import MODEL_SPEC_FIELDS

_MAX_PARAMETERS = 10**14
# Far above any GPU's hourly price; below it, a typo of a few digits is still caught.
_MAX_PRICE_USD_HR = Decimal(1000)


class ModelSpecSerializer(StrictModelSerializer):
    # Required unless hf_config gives them (``validate``).
    parameter_count = StrictIntegerField(min_value=1, max_value=_MAX_PARAMETERS, required=False)
    num_layers = StrictIntegerField(min_value=1, max_value=10_000, required=False)
    hidden_size = StrictIntegerField(min_value=1, max_value=1_000_000, required=False)
    num_attention_heads = StrictIntegerField(min_value=1, max_value=100_000, required=False)
    num_kv_heads = StrictIntegerField(min_value=1, max_value=100_000, required=False)
    head_dim = StrictIntegerField(min_value=1, max_value=65_536, required=False)
    max_context = StrictIntegerField(min_value=16, max_value=100_000_000, required=False)
    architecture = StrictJSONField(
        read_only=True,
        help_text="The facts beyond the columns (vocabulary, FFN, experts, MLA, sliding "
        "windows) as read from the model's config.json; {} for a model stated by its columns.",
        **MODEL_ARCHITECTURE_FIELD,
    )
    hf_config = StrictJSONField(
        write_only=True,
        required=False,
        help_text="The model's Hugging Face config.json as published: the architecture "
        "columns and the facts beyond them are read from it (leave the columns out).",
        **HF_CONFIG_FIELD,
    )
    hf_config_from_hub = StrictBooleanField(
        write_only=True,
        required=False,
        default=False,
        help_text="Read the model's config.json from the Hugging Face hub (hf_repo at "
        "revision) with the organization's token, as if it were given as hf_config.",
    )
    kv_cache_bytes_per_token = serializers.SerializerMethodField()
    weight_bytes = serializers.IntegerField(read_only=True)

    class Meta:
        model = ModelSpec
        fields = [
            "id",
            *MODEL_SPEC_FIELDS,
            "architecture",
            "hf_config",
            "hf_config_from_hub",
            "kv_cache_bytes_per_token",
            "weight_bytes",
            "created_at",
        ]
        read_only_fields = ["id", "created_at"]
        # The column has no length; the input contract gives it one.
        extra_kwargs = {"notes": {"max_length": LONG_TEXT_MAX_CHARS}}
        # Uniqueness is checked by the service, with a message that names the field.
        validators = []

    def get_kv_cache_bytes_per_token(self, model: ModelSpec) -> int:
        return model.kv_cache_bytes_per_token()

    def validate(self, attrs: dict) -> dict:
        from_hub = attrs.pop("hf_config_from_hub", False)
        config = attrs.pop("hf_config", None)
        if config is None and not from_hub:
            # A new model, or one replaced whole (PUT), states every column itself.
            if self.instance is None or not self.partial:
                missing = [
                    name
                    for name in HF_CONFIG_COLUMNS
                    if name not in attrs and not ModelSpec._meta.get_field(name).has_default()
                ]
                if missing:
                    raise serializers.ValidationError(
                        {name: ["This field is required (or give hf_config)."] for name in missing}
                    )
            return attrs
        if config is not None and from_hub:
            raise serializers.ValidationError(
                {"hf_config_from_hub": ["Give hf_config or hf_config_from_hub, not both."]}
            )
        stated = sorted(name for name in HF_CONFIG_COLUMNS if name in self.initial_data)
        if stated:
            raise serializers.ValidationError(
                {name: ["The config.json gives this; leave it out."] for name in stated}
            )
        if from_hub:
            config = self._fetch_hf_config(attrs)
        return attrs | self._read_hf_config(config, attrs)

    def _fetch_hf_config(self, attrs: dict) -> dict:
        """The model's config.json from the hub, by the caller's ``hf_config_fetch`` (the
        organization's, with its token: ``runs.services.hub_config``)."""
        fetch = self.context.get("hf_config_fetch")
        if fetch is None:
            raise serializers.ValidationError(
                {"hf_config_from_hub": ["Not here: give the config.json itself (hf_config)."]}
            )
        repo = attrs.get("hf_repo", getattr(self.instance, "hf_repo", ""))
        revision = attrs.get("revision", getattr(self.instance, "revision", "main"))
        try:
            return fetch(hf_repo=repo, revision=revision)
        except DomainValidationError as exc:
            raise serializers.ValidationError(exc.fields) from None

    def _read_hf_config(self, config: dict, attrs: dict) -> dict:
        """The columns and architecture ``config`` gives, each column checked as if typed."""
        repo = attrs.get("hf_repo") or getattr(self.instance, "hf_repo", None) or "model"
        try:
            read = model_facts_from_hf_config(config, hf_repo=repo)
        except DomainValidationError as exc:
            raise serializers.ValidationError(exc.fields) from None
        problems = []
        for name in HF_CONFIG_COLUMNS:
            try:
                read[name] = self.fields[name].run_validation(read[name])
            except serializers.ValidationError as exc:
                problems += [f"{name} read from it: {message}" for message in exc.detail]
        if problems:
            raise serializers.ValidationError({"hf_config": problems})
        return read


def _price_field() -> StrictDecimalField:
    """A price in USD per GPU-hour, or null for "no price of our own"."""
    return StrictDecimalField(
        max_digits=8,
        decimal_places=4,
        min_value=0,
        max_value=_MAX_PRICE_USD_HR,
        default=None,
        allow_null=True,
    )


class GpuPriceSerializer(serializers.Serializer):
    price_secure_usd_hr = _price_field()
    price_community_usd_hr = _price_field()
    note = StrictCharField(
        max_length=GpuPriceOverride._meta.get_field("note").max_length,
        required=False,
        allow_blank=True,
        default="",
    )
