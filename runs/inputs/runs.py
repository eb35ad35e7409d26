"""What a client may send to start a run or to stop one."""

from __future__ import annotations

from rest_framework import serializers

from agents.protocol import MAX_SEED
from runs.inputs.strict_fields import (
    StrictCharField,
    StrictChoiceField,
    StrictIntegerField,
    StrictUUIDField,
)
from runs.models import Experiment, Run
from runs.models.runs import RunTrigger


class RunStartSerializer(serializers.Serializer):
    experiment = StrictUUIDField(help_text="The experiment to run (of this organization).")
    reason = StrictCharField(
        max_length=Run._meta.get_field("reason").max_length,
        allow_blank=True,
        default="",
        help_text="Why it runs, e.g. a commit; shown with the run.",
    )
    trigger = StrictChoiceField(
        choices=RunTrigger.choices,
        default=RunTrigger.API,
        help_text="Who asked: a person's script (api), a CI pipeline (ci) or the web UI (ui).",
    )
    image_tag = StrictCharField(
        max_length=Experiment._meta.get_field("engine_image_tag").max_length,
        allow_blank=True,
        default="",
        help_text="Run a vLLM experiment on this image tag instead of its own, for this run "
        "only (e.g. a CI job gating a vLLM bump against the promoted baseline).",
    )
    noise_seed = StrictIntegerField(
        min_value=0,
        max_value=MAX_SEED,
        allow_null=True,
        default=None,
        help_text="A simulated experiment only: the simulator's noise seed. The same noise and "
        "traffic seeds give the same figures; left out, the run draws its own (a realistic "
        "re-run), shown with the run.",
    )


class RunCancelSerializer(serializers.Serializer):
    reason = StrictCharField(
        max_length=Run._meta.get_field("cancel_reason").max_length,
        allow_blank=True,
        default="",
        help_text="Why the run is stopped; shown with the run and told to its agent.",
    )
