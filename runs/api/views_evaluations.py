"""Evaluation sets: uploaded JSONL items an experiment's configurations are scored on."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response

from runs.access import access_evaluation_set
from runs.api.scoping import OrgScopedViewSet
from runs.api.serializers_evaluations import EvaluationSetSerializer
from runs.inputs.evaluations import EvaluationSetUploadSerializer
from runs.models import EvaluationSet
from runs.services.evaluations import evaluation_set_delete, evaluation_set_upload
from runs.services.experiments import dataset_file_read


class EvaluationSetViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrgScopedViewSet):
    """Evaluation sets (multipart upload: name, description, file). Refused files name the
    line and field at fault; nothing is stored then."""

    model = EvaluationSet
    serializer_class = EvaluationSetSerializer
    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(request=EvaluationSetUploadSerializer, responses={201: EvaluationSetSerializer})
    def create(self, request, org):
        data = EvaluationSetUploadSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        evaluation_set = evaluation_set_upload(
            org=self.org,
            actor=self.actor,
            name=data.validated_data["name"],
            description=data.validated_data["description"],
            raw=dataset_file_read(data.validated_data["file"]),
        )
        return Response(
            EvaluationSetSerializer(evaluation_set).data, status=status.HTTP_201_CREATED
        )

    def destroy(self, request, org, pk):
        evaluation_set_delete(
            evaluation_set=access_evaluation_set(membership=self.membership, evaluation_set_id=pk),
            actor=self.actor,
        )
        return Response(status=status.HTTP_204_NO_CONTENT)
