"""A run as the API answers it: the response shapes of runs, their trials and measurements
(read-only: the orchestration and the agent write them; a request to start or stop a run is
parsed by ``runs.inputs.runs``).

They stand below the API because a schedule's gate (``runs.services.schedule_gate``) reads
a run through them too: it compares exactly the document the CLI's gate reads from the API.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from runs.inputs.json_schemas import FROZEN_JOB_FIELD
from runs.inputs.strict_fields import StrictJSONField
from runs.models import Measurement, Run, Trial
from runs.run_as_started import run_cost_is_known
from runs.selectors.run_answer import run_answer
from runs.selectors.run_search import run_search_state
from runs.selectors.vllm_versions import vllm_version_mismatch


class MeasurementSerializer(serializers.ModelSerializer):
    class Meta:
        model = Measurement
        fields = [
            "id",
            "concurrency",
            "request_rate",
            "request_rate_infinite",
            "result",
            "server_metrics",
            "gpus",
            "created_at",
        ]
        read_only_fields = fields


class TrialSerializer(serializers.ModelSerializer):
    measurements = MeasurementSerializer(many=True, read_only=True)

    class Meta:
        model = Trial
        fields = [
            "index",
            "serve_config",
            "image_tag",
            "command",
            "cold_start",
            "outcome",
            "failure_class",
            "log_tail",
            "capacity",
            "started_at",
            "finished_at",
            "measurements",
        ]
        read_only_fields = fields


class RunSerializer(serializers.ModelSerializer):
    started_by = serializers.EmailField(source="started_by.email", read_only=True, default=None)
    # Null when unknown (an existing endpoint without a price), never a made-up zero.
    cost_usd = serializers.SerializerMethodField()

    @extend_schema_field(serializers.DecimalField(max_digits=12, decimal_places=4, allow_null=True))
    def get_cost_usd(self, run: Run) -> str | None:
        if not run_cost_is_known(run):
            return None
        return serializers.DecimalField(max_digits=12, decimal_places=4).to_representation(
            run.cost_usd
        )

    class Meta:
        model = Run
        fields = [
            "id",
            "experiment",
            "state",
            "trigger",
            "reason",
            "started_by",
            "provider",
            "pod_id",
            "pod_image_tag",
            "price_usd_hr",
            "billed_seconds",
            "cost_usd",
            "failure_reason",
            "cancel_requested_at",
            "cancel_reason",
            "agent_conflicts",
            "agent_conflict_last",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class RunDetailSerializer(RunSerializer):
    # What the run does, as it was started (runs.run_as_started): the truth, not the experiment now.
    job_spec = StrictJSONField(read_only=True, **FROZEN_JOB_FIELD)
    trials = TrialSerializer(many=True, read_only=True)
    # The run's answer: capacity at the SLOs per configuration, the cost per 1M output tokens
    # there and the recommendation (runs.selectors.run_answer).
    answer = serializers.SerializerMethodField()
    # The vLLM the pod really ran when it is not the one its image tag names, else "".
    vllm_version_mismatch = serializers.SerializerMethodField()
    # What the run's search made of its grid (runs.selectors.run_search); null without one.
    search = serializers.SerializerMethodField()

    class Meta(RunSerializer.Meta):
        fields = [
            *RunSerializer.Meta.fields,
            "job_spec",
            "experiment_snapshot",
            "answer",
            "search",
            "vllm_version_mismatch",
            "trials",
        ]
        read_only_fields = fields

    def get_vllm_version_mismatch(self, run: Run) -> str:
        return vllm_version_mismatch(run)

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_search(self, run: Run) -> dict | None:
        return run_search_state(run=run)

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_answer(self, run: Run) -> dict:
        return run_answer(run=run).as_json()
