"""One JSON shape for every API error:

    {"error": {"status": 400, "code": "invalid", "message": "…",
               "fields": {"serve_grid.max_num_seqs[1]": ["…"]}}}

``fields`` is present for validation errors and names each offending field by its path.

An error answer says what is wrong and never repeats the input at length: ``error_body``
bounds every text in it (message, field paths, which carry the keys a client sent, and their
messages) to ``MAX_ERROR_TEXT_CHARS`` and lists at most ``MAX_ERROR_FIELDS`` fields, however
large the refused input was. The bound (``clip_text``) and the field paths
(``flatten_errors``) come from ``runs.inputs.errors``.
"""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError
from django.http import Http404, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from runs.errors import Conflict, DomainValidationError, RateLimited
from runs.inputs.errors import clip_text, flatten_errors

logger = logging.getLogger(__name__)

MAX_ERROR_FIELDS = 50
MAX_MESSAGES_PER_FIELD = 5


def error_body(status_code: int, code: str, message: str, fields: dict | None = None) -> dict:
    """The one error shape, every text in it bounded (see the module's docstring)."""
    message = clip_text(message)
    if fields and len(fields) > MAX_ERROR_FIELDS:
        message += f" ({len(fields) - MAX_ERROR_FIELDS} more fields are not listed.)"
    body = {"status": status_code, "code": code, "message": message}
    if fields:
        body["fields"] = {}
        for field, messages in list(fields.items())[:MAX_ERROR_FIELDS]:
            messages = messages if isinstance(messages, list | tuple) else [messages]
            clipped = [clip_text(m) for m in messages[:MAX_MESSAGES_PER_FIELD]]
            body["fields"].setdefault(clip_text(field), []).extend(clipped)
    return {"error": body}


def _validation_response(fields: dict[str, list[str]]) -> Response:
    first_field = next(iter(fields), "")
    message = (
        f"Invalid input: {first_field}: {fields[first_field][0]}" if fields else "Invalid input."
    )
    return Response(error_body(400, "invalid", message, fields), status=status.HTTP_400_BAD_REQUEST)


def api_exception_handler(exc, context):
    """DRF's handler with our domain errors added and every answer in the one shape."""
    if isinstance(exc, DomainValidationError):
        return _validation_response(exc.fields)
    if isinstance(exc, DjangoValidationError):
        fields = (
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
        return _validation_response(fields)
    if isinstance(exc, Conflict):
        return Response(error_body(409, "conflict", str(exc)), status=status.HTTP_409_CONFLICT)
    if isinstance(exc, RateLimited):
        response = Response(error_body(429, "rate_limited", str(exc)), status=429)
        response["Retry-After"] = str(exc.retry_after)
        return response
    if isinstance(exc, IntegrityError):
        # A concurrent write won a uniqueness race; nothing of this request was stored.
        logger.info("integrity error answered as 409: %s", type(exc).__name__)
        message = "The request conflicts with data written at the same time; try again."
        return Response(error_body(409, "conflict", message), status=status.HTTP_409_CONFLICT)
    if isinstance(exc, exceptions.ValidationError):
        return _validation_response(flatten_errors(exc.detail))
    if isinstance(exc, RequestDataTooBig):
        # Django's own limit (DATA_UPLOAD_MAX_MEMORY_SIZE: forms, multipart fields).
        message = "The request body is larger than this site accepts."
        return Response(error_body(413, "too_large", message), status=413)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound("Not found.")
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or "You may not do this.")
    response = exception_handler(exc, context)
    if response is None:
        return None  # a real bug: let Django's 500 handler answer (in JSON, see below)
    detail = response.data.get("detail", "") if isinstance(response.data, dict) else response.data
    code = getattr(detail, "code", None) or "error"
    response.data = error_body(response.status_code, str(code), str(detail))
    return response


def json_not_found(request, exception=None):
    return JsonResponse(error_body(404, "not_found", "Not found."), status=404)


def json_server_error(request):
    return JsonResponse(
        error_body(500, "server_error", "Internal error; it has been logged."), status=500
    )
