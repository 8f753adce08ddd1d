"""Every error the API answers has one shape: ``{"detail": sentence, "errors": {field:
[messages]}}`` (``errors`` on 400s), so a client (the ``pacer`` CLI) prints field errors the
same way whatever refused them; 429s add ``retry_after_s``.

Also the body limit: a request declaring more than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` bytes is
answered 413 by the middleware before anything reads it, and one sent in chunks (no
Content-Length) 411: DRF reads a body only as long as Content-Length says, so a chunked one
would be taken as empty and answered as if the client had sent nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from controlplane.runs.api.exceptions import (
    Conflict,
    IdempotencyKeyReused,
    NamedNotFound,
    PayloadTooLarge,
    too_large_text,
)
from controlplane.runs.services import CommandRefused, IdempotencyConflict, InvalidCommand
from workers.core.config.fields import ConfigError


def field_errors(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error detail as {dotted path: [messages]}, like ConfigError.by_field()."""
    found: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = "body" if key == "non_field_errors" and not prefix else str(key)
            path = f"{prefix}.{name}" if prefix else name
            for inner, messages in field_errors(value, path).items():
                found.setdefault(inner, []).extend(messages)
    elif isinstance(detail, list) and detail and all(isinstance(d, dict | list) for d in detail):
        for index, value in enumerate(detail):
            for inner, messages in field_errors(value, f"{prefix}[{index}]").items():
                found.setdefault(inner, []).extend(messages)
    elif isinstance(detail, list):
        found[prefix or "body"] = [str(d) for d in detail]
    else:
        found[prefix or "body"] = [str(detail)]
    return found


def exception_handler(error: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(error, ConfigError):
        return Response(
            {"detail": "the run config is refused", "errors": error.by_field()},
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(error, InvalidCommand):
        error = exceptions.ValidationError({error.field: [str(error)]})
    elif isinstance(error, CommandRefused):
        error = Conflict(str(error))
    elif isinstance(error, IdempotencyConflict):
        error = IdempotencyKeyReused(str(error))
    elif isinstance(error, RequestDataTooBig):
        error = PayloadTooLarge()
    response = drf_exception_handler(error, context)
    if response is None:
        return None
    if isinstance(error, exceptions.ValidationError):
        response.data = {"detail": "the request is invalid", "errors": field_errors(error.detail)}
    elif isinstance(error, exceptions.ParseError):
        response.data = {"detail": str(error.detail), "errors": {"body": [str(error.detail)]}}
    elif isinstance(error, exceptions.Throttled):
        wait = int(error.wait) if error.wait is not None else 1
        response.data = {
            "detail": f"too many commands: try again in {wait} s",
            "retry_after_s": wait,
        }
    elif isinstance(error, NamedNotFound):
        response.data = {"detail": str(error.detail)}
    elif isinstance(error, Http404 | exceptions.NotFound):
        response.data = {"detail": "not found"}
    elif isinstance(error, PermissionDenied):
        response.data = {"detail": "you may not do this"}
    elif isinstance(response.data, dict) and "detail" in response.data:
        response.data = {"detail": str(response.data["detail"])}
    return response


class BodySizeLimitMiddleware:
    """413 with a JSON error for a body declared larger than the limit, before it is read;
    411 for a body of no declared length."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if "HTTP_TRANSFER_ENCODING" in request.META and not request.META.get("CONTENT_LENGTH"):
            response = JsonResponse(
                {"detail": "send the body with a Content-Length, not in chunks"}, status=411
            )
            response["Connection"] = "close"
            return response
        declared = request.META.get("CONTENT_LENGTH") or "0"
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            length = int(declared)
        except ValueError:
            return JsonResponse({"detail": "Content-Length is not a number"}, status=400)
        if limit is not None and length > limit:
            response = JsonResponse({"detail": too_large_text()}, status=413)
            response["Connection"] = "close"  # the unread body must not be taken as a request
            return response
        return self.get_response(request)
