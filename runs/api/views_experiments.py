"""Experiments (with validation and cost estimates), datasets and budgets."""

from __future__ import annotations

from dataclasses import asdict

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response

from runs.access import Need, access_budget, access_dataset, access_experiment
from runs.api.filters import ExperimentFilter
from runs.api.pagination import cursor_pagination
from runs.api.scoping import OrgScopedViewSet
from runs.api.serializers_experiments import (
    DatasetDetailSerializer,
    DatasetSerializer,
    EstimateSerializer,
    PredictionSerializer,
)
from runs.api.serializers_schedules import ScheduleSerializer
from runs.inputs.experiments import BudgetSerializer, DatasetUploadSerializer, ExperimentSerializer
from runs.inputs.schedules import SchedulePauseSerializer, ScheduleSetSerializer
from runs.models import Budget, Experiment, WorkloadDataset
from runs.schedule_spec import schedule_spec
from runs.selectors.estimates import experiment_estimate
from runs.selectors.model_choice import model_choice, model_choice_json
from runs.selectors.predictions import experiment_prediction
from runs.selectors.schedules import experiment_schedule, schedule_state
from runs.services.budgets import budget_delete, budget_set
from runs.services.experiments import (
    dataset_delete,
    dataset_file_read,
    dataset_upload,
    experiment_create,
    experiment_delete,
    experiment_draft_check,
    experiment_file_check,
    experiment_update,
)
from runs.services.schedules import schedule_delete, schedule_pause, schedule_set

# The model choice's ranked and simulated lists in the API: the head of each (totals given).
MODEL_CHOICE_LISTED = 50


class ExperimentViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrgScopedViewSet):
    """Experiments: model × GPUs × engine × serve grid × workload × SLOs × budget cap."""

    model = Experiment
    serializer_class = ExperimentSerializer
    filterset_class = ExperimentFilter
    read_only_actions = ("validate", "predict")

    def get_queryset(self):
        return super().get_queryset().select_related("created_by")

    def create(self, request, org):
        data = self.get_serializer(data=request.data)
        data.is_valid(raise_exception=True)
        experiment = experiment_create(org=self.org, actor=self.actor, **data.validated_data)
        return Response(self.get_serializer(experiment).data, status=status.HTTP_201_CREATED)

    def update(self, request, org, pk, partial=False):
        experiment = access_experiment(membership=self.membership, experiment_id=pk)
        data = self.get_serializer(experiment, data=request.data, partial=partial)
        data.is_valid(raise_exception=True)
        experiment = experiment_update(
            experiment=experiment, actor=self.actor, **data.validated_data
        )
        return Response(self.get_serializer(experiment).data)

    def partial_update(self, request, org, pk):
        return self.update(request, org, pk, partial=True)

    def destroy(self, request, org, pk):
        experiment = access_experiment(membership=self.membership, experiment_id=pk)
        experiment_delete(experiment=experiment, actor=self.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(responses=EstimateSerializer)
    @action(detail=True, methods=["get"])
    def estimate(self, request, org, pk):
        """Cost and duration before running: trials × (cold start + sweep) × $/s."""
        experiment = access_experiment(membership=self.membership, experiment_id=pk)
        return Response(EstimateSerializer(asdict(experiment_estimate(experiment=experiment))).data)

    @extend_schema(request=ExperimentSerializer, responses=EstimateSerializer)
    @action(detail=False, methods=["post"])
    def validate(self, request, org):
        """Checks a draft as create would and returns its estimate; stores nothing, records
        nothing and locks nothing. A name in use is no error (the same file is validated on
        every push): a warning says so, and in which fields the draft differs."""
        data = self.get_serializer(data=request.data)
        data.is_valid(raise_exception=True)
        draft, notes = experiment_file_check(org=self.org, actor=self.actor, **data.validated_data)
        estimate = experiment_estimate(experiment=draft)
        return Response(
            EstimateSerializer(asdict(estimate) | {"warnings": notes + estimate.warnings}).data
        )

    @extend_schema(responses=PredictionSerializer)
    @action(detail=True, methods=["get"])
    def prediction(self, request, org, pk):
        """Every configuration run on the vLLM simulator offline (simulated; nothing is
        rented or stored): capacity at the SLOs, cost per 1M output tokens there, and the
        GPU-minutes an exhaustive run would spend."""
        experiment = access_experiment(membership=self.membership, experiment_id=pk)
        return Response(
            PredictionSerializer(asdict(experiment_prediction(experiment=experiment))).data
        )

    @extend_schema(request=ExperimentSerializer, responses=PredictionSerializer)
    @action(detail=False, methods=["post"])
    def predict(self, request, org):
        """A draft checked exactly as create would, then predicted on the simulator; stores
        nothing, records nothing."""
        data = self.get_serializer(data=request.data)
        data.is_valid(raise_exception=True)
        draft = experiment_draft_check(org=self.org, actor=self.actor, **data.validated_data)
        return Response(PredictionSerializer(asdict(experiment_prediction(experiment=draft))).data)

    @extend_schema(responses=OpenApiTypes.OBJECT)
    @action(detail=True, methods=["get"], url_path="model-choice", url_name="choice")
    def model_choice(self, request, org, pk):
        """The model choice for the experiment's workload and SLOs (docs/quality.md): its
        recommendation, the measured configurations ranked by cost at the SLOs (the first
        ``MODEL_CHOICE_LISTED``), each model's best, and the configurations excluded for
        quality by their run's floor or ranked without a score, each with the reason."""
        experiment = access_experiment(membership=self.membership, experiment_id=pk)
        choice = model_choice(experiment=experiment)
        return Response(model_choice_json(choice, listed=MODEL_CHOICE_LISTED))

    @extend_schema(methods=["PUT"], request=ScheduleSetSerializer, responses=ScheduleSerializer)
    @extend_schema(methods=["PATCH"], request=SchedulePauseSerializer, responses=ScheduleSerializer)
    @extend_schema(methods=["GET"], responses=ScheduleSerializer)
    @extend_schema(methods=["DELETE"], responses={204: None})
    @action(detail=True, methods=["get", "put", "patch", "delete"])
    def schedule(self, request, org, pk):
        """The experiment's schedule (docs/operating.md, "Schedules"): GET it with its
        firings, PUT to set it (you become its owner: its runs start as you), PATCH
        ``{"paused": true|false}`` to pause or resume it, DELETE to remove it."""
        experiment = access_experiment(membership=self.membership, experiment_id=pk)
        schedule = experiment_schedule(experiment)
        if request.method == "PUT":
            data = ScheduleSetSerializer(data=request.data)
            data.is_valid(raise_exception=True)
            fields = dict(data.validated_data)
            paused = fields.pop("paused")
            schedule = schedule_set(
                actor=self.actor,
                experiment=experiment,
                spec=schedule_spec(**fields),
                paused=paused,
            )
        elif schedule is None:
            raise NotFound("This experiment has no schedule.")
        elif request.method == "PATCH":
            data = SchedulePauseSerializer(data=request.data)
            data.is_valid(raise_exception=True)
            schedule_pause(
                actor=self.actor, schedule=schedule, paused=data.validated_data["paused"]
            )
        elif request.method == "DELETE":
            schedule_delete(actor=self.actor, schedule=schedule)
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(ScheduleSerializer(schedule_state(experiment_schedule(experiment))).data)


class DatasetViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrgScopedViewSet):
    """Files for workloads: ShareGPT conversations or request traces (multipart upload:
    name, format, file). One dataset's detail carries a trace's summary."""

    model = WorkloadDataset
    serializer_class = DatasetSerializer
    parser_classes = [MultiPartParser, FormParser]

    def get_serializer_class(self):
        return DatasetDetailSerializer if self.action == "retrieve" else DatasetSerializer

    @extend_schema(request=DatasetUploadSerializer, responses={201: DatasetDetailSerializer})
    def create(self, request, org):
        data = DatasetUploadSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        dataset = dataset_upload(
            org=self.org,
            actor=self.actor,
            name=data.validated_data["name"],
            raw=dataset_file_read(data.validated_data["file"]),
            dataset_format=data.validated_data["format"],
        )
        return Response(DatasetDetailSerializer(dataset).data, status=status.HTTP_201_CREATED)

    def destroy(self, request, org, pk):
        dataset_delete(
            dataset=access_dataset(membership=self.membership, dataset_id=pk), actor=self.actor
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class BudgetViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrgScopedViewSet):
    """Spending caps: standing monthly, one month, or one experiment. Owners and admins set
    them; every member can read them."""

    model = Budget
    serializer_class = BudgetSerializer
    write_need = Need.MANAGE
    pagination_class = cursor_pagination("-updated_at", "-pk")

    def get_queryset(self):
        return super().get_queryset().select_related("experiment")

    def create(self, request, org):
        """Sets the cap of a scope, replacing the one already there."""
        data = self.get_serializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        budget = budget_set(
            org=self.org,
            actor=self.actor,
            limit_usd=values["limit_usd"],
            month=values.get("month"),
            experiment=values.get("experiment"),
            note=values.get("note", ""),
        )
        return Response(self.get_serializer(budget).data, status=status.HTTP_201_CREATED)

    def destroy(self, request, org, pk):
        budget_delete(
            budget=access_budget(membership=self.membership, budget_id=pk), actor=self.actor
        )
        return Response(status=status.HTTP_204_NO_CONTENT)
