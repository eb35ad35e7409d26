"""REST endpoints for agents, authenticated by a run token (``Authorization: Bearer bsr_…``).

A run token reaches only these endpoints and only its own run: the user API does not know
run tokens, and a token of run A gets the same 401 on run B as on a missing run.
"""

from __future__ import annotations

import pydantic
from django.http import FileResponse, Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.response import Response
from rest_framework.views import APIView

from agents import protocol
from runs.access import access_run_evaluation_set
from runs.api.parsers import AgentBatchParser
from runs.consumers.notices import notify_run_watchers
from runs.inputs.json_schemas import AGENT_MESSAGES_FIELD, JobSpecBody, protocol_body
from runs.inputs.strict_fields import StrictJSONField
from runs.models import Run, WorkloadDataset
from runs.placement import recorded_placement
from runs.pod_job import run_job_spec
from runs.run_as_started import run_workload
from runs.services.agent_epochs import agent_epoch_issue
from runs.services.agent_messages import agent_message_parse
from runs.services.ingest import agent_messages_ingest
from runs.services.run_control import run_stop_request
from runs.services.run_tokens import RUN_TOKEN_PREFIX, unscoped_run_for_token

BatchAnswerBody = protocol_body("AgentBatchAnswer", protocol.BatchAnswer)


class RunAgent:
    """The request's principal when an agent calls: not a user, bound to one run."""

    is_authenticated = True
    is_active = True

    def __init__(self, run: Run):
        self.run = run


class RunTokenAuthentication(BaseAuthentication):
    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if len(parts) != 2 or parts[0].lower() != b"bearer":
            return None
        raw = parts[1].decode("latin-1")
        if not raw.startswith(RUN_TOKEN_PREFIX):
            raise AuthenticationFailed("Not a run token.")
        run_id = request.parser_context["kwargs"].get("run_id")
        # Only a view that stores messages stays open for an ended run's delivery grace.
        delivering = getattr(request.parser_context.get("view"), "delivers", False)
        run = unscoped_run_for_token(run_id=run_id, raw=raw, delivering=delivering)
        if run is None:
            # Wrong run, ended run or unknown token: one answer for all.
            raise AuthenticationFailed("Invalid run token for this run, or the run has ended.")
        return RunAgent(run), run

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="agent"'


class AgentMessagesView(APIView):
    """Batch upload of agent messages (the fallback when the WebSocket cannot be reopened).
    Each message is stored once; the answer lists what is acknowledged and what is refused,
    and carries the run's cancel request (``null`` while there is none)."""

    authentication_classes = [RunTokenAuthentication]
    parser_classes = [AgentBatchParser]
    delivers = True  # an ended run's agent may still deliver for the grace (run_tokens)

    @extend_schema(
        request=inline_serializer(
            "AgentBatch", {"messages": StrictJSONField(**AGENT_MESSAGES_FIELD)}
        ),
        responses=BatchAnswerBody,
    )
    def post(self, request, run_id):
        run: Run = request.auth
        try:
            batch = protocol.BatchRequest.model_validate(request.data)
        except pydantic.ValidationError as exc:
            raise serializers.ValidationError(
                {
                    error.field or "non_field_errors": [error.message]
                    for error in protocol.pydantic_field_errors(exc)
                }
            ) from None
        refusals: list[protocol.BatchRefusal] = []
        valid: list[tuple[int, protocol.AgentMessage]] = []
        for index, content in enumerate(batch.messages):
            parsed = agent_message_parse(content, run_id=run.id)
            if isinstance(parsed, protocol.Rejected):
                refusals.append(
                    protocol.BatchRefusal(index=index, seq=parsed.seq, reason=parsed.reason)
                )
            else:
                valid.append((index, parsed))
        outcomes = agent_messages_ingest(run_id=run.id, messages=[m for _, m in valid])
        acked = []
        for (index, _), outcome in zip(valid, outcomes, strict=True):
            if outcome.refused:
                refusals.append(
                    protocol.BatchRefusal(index=index, seq=outcome.seq, reason=outcome.refused)
                )
            else:
                acked.append(outcome.seq)
        notify_run_watchers(run.id, outcomes)
        # Read after the ingest: a cancel requested while the batch was on its way is included.
        run.refresh_from_db(fields=["cancel_requested_at", "cancel_reason", "state"])
        stop = run_stop_request(run)  # a cancel, or an ended run still delivering
        answer = protocol.BatchAnswer(
            acked=acked,
            rejected=sorted(refusals, key=lambda refusal: refusal.index),
            cancel=protocol.Cancel(reason=stop) if stop is not None else None,
        )
        return Response(answer.model_dump(mode="json"), status=status.HTTP_200_OK)


class AgentJobView(APIView):
    """The run's job (``JobSpec``), for an agent that was started with only its run id and
    token. The WebSocket URL is derived from the request's own host and scheme."""

    authentication_classes = [RunTokenAuthentication]

    @extend_schema(responses=JobSpecBody)
    def get(self, request, run_id):
        ws_url, rest_url = protocol.agent_site_urls(request.build_absolute_uri("/"), run_id=run_id)
        job = run_job_spec(
            request.auth,
            ws_url=ws_url,
            rest_url=rest_url,
            placement=recorded_placement(request.auth),
        )
        return Response(job.model_dump(mode="json"))


class AgentEpochView(APIView):
    """A new sequence space (``EpochGrant``) for an agent that starts without its spool: it
    numbers its messages from 0 within it, so nothing an earlier agent of the run stored
    under the same numbers can shadow them. Each call issues a new, larger epoch."""

    authentication_classes = [RunTokenAuthentication]

    @extend_schema(
        request=None,
        responses=protocol_body("AgentEpochGrant", protocol.EpochGrant),
    )
    def post(self, request, run_id):
        grant = protocol.EpochGrant(epoch=agent_epoch_issue(run_id=request.auth.id))
        return Response(grant.model_dump(), status=status.HTTP_200_OK)


def _dataset_of_run(run: Run, dataset_id) -> WorkloadDataset:
    """The dataset ``dataset_id`` when the run's workload names it; else ``Http404`` (the same
    for a dataset that exists but is not the run's as for one that does not exist)."""
    named = run_workload(run).dataset  # as the run was started, whatever was edited since
    uploaded = isinstance(
        named, protocol.ShareGptDataset | protocol.TraceDataset | protocol.AgenticTraceDataset
    )
    if not uploaded or str(named.dataset_id) != str(dataset_id):
        raise Http404
    dataset = WorkloadDataset.objects.filter(
        organization_id=run.organization_id, pk=dataset_id
    ).first()
    if dataset is None:
        raise Http404
    return dataset


# What each format's file is served as (its bytes are the upload's, whatever the type).
_CONTENT_TYPES = {
    "sharegpt": "application/json",
    "mooncake": "application/jsonl",
    "agentic_trace": "application/jsonl",
}


class AgentDatasetView(APIView):
    """The uploaded file (ShareGPT conversations, a trace or a session file) the run's
    workload names,
    exactly as uploaded; no other dataset."""

    authentication_classes = [RunTokenAuthentication]

    @extend_schema(
        responses={
            (200, "application/json"): OpenApiTypes.BINARY,
            (200, "application/jsonl"): OpenApiTypes.BINARY,
            (200, "text/csv"): OpenApiTypes.BINARY,
        }
    )
    def get(self, request, run_id, dataset_id):
        dataset = _dataset_of_run(request.auth, dataset_id)
        return FileResponse(
            dataset.file.open("rb"), content_type=_CONTENT_TYPES.get(dataset.format, "text/csv")
        )


class AgentEvaluationSetView(APIView):
    """The uploaded evaluation set (JSONL) the run's job names by id, exactly as uploaded;
    no other set. The agent uses it only when its sha256 is the job's."""

    authentication_classes = [RunTokenAuthentication]

    @extend_schema(responses={(200, "application/jsonl"): OpenApiTypes.BINARY})
    def get(self, request, run_id, set_id):
        evaluation_set = access_run_evaluation_set(run=request.auth, evaluation_set_id=set_id)
        return FileResponse(evaluation_set.file.open("rb"), content_type="application/jsonl")
