"""Runs of the organization's experiments, with trials and measurements: starting one (the
budget checked against its estimate first) and cancelling one."""

from __future__ import annotations

import django_filters
from django.db.models import Prefetch
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.response import Response

from runs.access import access_run, scoped
from runs.api.scoping import OrgScopedViewSet
from runs.errors import DomainValidationError
from runs.inputs.runs import RunCancelSerializer, RunStartSerializer
from runs.models import Experiment, Run, Trial
from runs.run_documents import RunDetailSerializer, RunSerializer
from runs.services.run_control import run_cancel
from runs.services.run_start import run_start


class RunFilter(django_filters.FilterSet):
    experiment = django_filters.UUIDFilter(field_name="experiment_id")

    class Meta:
        model = Run
        fields = ["experiment", "state", "trigger"]


class RunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrgScopedViewSet):
    """Runs, newest first; the detail carries every trial and its measurements."""

    model = Run
    filterset_class = RunFilter

    def get_serializer_class(self):
        return RunDetailSerializer if self.action == "retrieve" else RunSerializer

    def get_queryset(self):
        queryset = super().get_queryset().select_related("started_by")
        if self.action == "retrieve" and not getattr(self, "swagger_fake_view", False):
            trials = scoped(self.membership, Trial).prefetch_related("measurements")
            trials = trials.order_by("index")
            queryset = queryset.prefetch_related(Prefetch("trials", queryset=trials))
        return queryset

    def get_object(self):
        """The run by its id or a unique prefix of it (``access_run``), with what
        ``get_queryset`` loads alongside."""
        run = access_run(membership=self.membership, run_id=self.kwargs["pk"])
        return self.get_queryset().get(pk=run.pk)

    @extend_schema(request=RunStartSerializer, responses={201: RunSerializer})
    def create(self, request, org):
        """Starts a run of an experiment: refused (400 on ``budget``, nothing rented) when
        its estimate would break the experiment's or the organization's budget."""
        data = RunStartSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        experiment = (
            scoped(self.membership, Experiment).filter(id=data.validated_data["experiment"]).first()
        )
        if experiment is None:
            raise DomainValidationError.single(
                "experiment", "No such experiment in this organization."
            )
        run = run_start(
            actor=self.actor,
            experiment=experiment,
            reason=data.validated_data["reason"],
            trigger=data.validated_data["trigger"],
            image_tag=data.validated_data["image_tag"],
            noise_seed=data.validated_data["noise_seed"],
        )
        return Response(RunSerializer(run).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=RunCancelSerializer, responses=RunSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, org, pk):
        """Stops the run: a queued run at once, a started one when its agent has stopped
        (until then ``cancel_requested_at`` shows the request). 409 when it has ended."""
        run = access_run(membership=self.membership, run_id=pk)
        data = RunCancelSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run = run_cancel(actor=self.actor, run=run, reason=data.validated_data["reason"])
        return Response(RunSerializer(run).data)
