"""Runs: create, list, show; operator commands (stop, pause, resume, cap overrides) and the
overrides they leave. Views only read input, call a selector or a service, and answer."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.runs import selectors, services
from controlplane.runs.api.inputs import (
    IDEMPOTENCY_HEADER,
    IDEMPOTENCY_KEY_PATTERN,
    CommandInput,
    OverrideInput,
    RunFilters,
    check_storable,
    idempotency_key,
)
from controlplane.runs.api.pagination import ByCreation, NewestFirst
from controlplane.runs.api.parsers import BoundedJSONParser, TOMLParser
from controlplane.runs.api.serializers import (
    ErrorSerializer,
    OverrideSerializer,
    RunListSerializer,
    RunSerializer,
    ThrottledSerializer,
)
from controlplane.runs.api.throttles import CommandRateThrottle
from controlplane.runs.models import Override, OverrideMode, Run

ERRORS = {
    401: OpenApiResponse(ErrorSerializer, "not signed in"),
    403: OpenApiResponse(ErrorSerializer, "a viewer may not write"),
}
READ_ERRORS = {**ERRORS, 404: OpenApiResponse(ErrorSerializer, "no such run")}
WRITE_ERRORS = {
    **READ_ERRORS,
    400: OpenApiResponse(ErrorSerializer, "field errors"),
    411: OpenApiResponse(ErrorSerializer, "a body sent in chunks, with no Content-Length"),
    413: OpenApiResponse(ErrorSerializer, "body too large"),
}
COMMAND_ERRORS = {
    **WRITE_ERRORS,
    409: OpenApiResponse(ErrorSerializer, "the run's state does not allow it"),
    429: OpenApiResponse(ThrottledSerializer, "too many commands; see Retry-After"),
}

# Says that a create's answer is an earlier create's (Stripe's name for it).
REPLAYED_HEADER = "Idempotent-Replayed"


def get_run(run_id: int) -> Run:
    run = selectors.run_get(run_id)
    if run is None:
        raise Http404
    return run


def paginated(view: APIView, request: Request, rows: Any, serializer: type) -> Response:
    """One page of ``rows`` by the view's ``pagination_class`` (which the schema reads too)."""
    pages = view.pagination_class()  # type: ignore[attr-defined]
    page = pages.paginate_queryset(rows, request, view=view)
    return pages.get_paginated_response(
        serializer(page, many=True, context={"request": request}).data
    )


class RunListApi(APIView):
    parser_classes = [BoundedJSONParser, TOMLParser]
    pagination_class = NewestFirst

    @extend_schema(
        operation_id="runs_list",
        parameters=[RunFilters],
        responses={200: RunListSerializer(many=True), 400: ErrorSerializer, **READ_ERRORS},
    )
    def get(self, request: Request) -> Response:
        filters = RunFilters(data=request.query_params.dict())
        filters.is_valid(raise_exception=True)
        found = filters.validated_data
        runs = selectors.run_list(
            states=found.get("state", []),
            name=found.get("name"),
            created_after=found.get("created_after"),
            created_before=found.get("created_before"),
        )
        return paginated(self, request, runs, RunListSerializer)

    @extend_schema(
        operation_id="runs_create",
        description="A run config as a JSON object, or as TOML text with `Content-Type: "
        "application/toml`; checked by the runtime's schema and against the engines (they "
        "must answer and serve the model) before it is stored and queued. With an "
        "`Idempotency-Key`, a create can be retried safely: the same key with the same body "
        "answers 201 with the run the first create stored (and `Idempotent-Replayed: true`), "
        "the same key with another body 422.",
        parameters=[
            OpenApiParameter(
                IDEMPOTENCY_HEADER,
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="a key of the client's own for this create (a UUID, say), up to "
                "255 printable ASCII characters; one run per key and user",
                pattern=IDEMPOTENCY_KEY_PATTERN,
            ),
            OpenApiParameter(
                REPLAYED_HEADER,
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="`true` when the key named an earlier create: its run, as it is",
                response=[201],
            ),
        ],
        request={"application/json": OpenApiTypes.OBJECT, "application/toml": OpenApiTypes.STR},
        responses={
            201: RunSerializer,
            422: OpenApiResponse(ErrorSerializer, "the Idempotency-Key was used with another body"),
            **WRITE_ERRORS,
        },
        examples=[
            OpenApiExample(
                "a small run",
                value={
                    "name": "demo",
                    "batch_size": 16,
                    "group_size": 4,
                    "env": [{"name": "arithmetic"}],
                    "engine": [{"name": "sim-engine-0"}],
                },
                request_only=True,
            )
        ],
    )
    def post(self, request: Request) -> Response:
        key = idempotency_key(request.headers)
        document = request.data
        check_storable(document)
        replayed = False
        if key is None:
            run = services.run_create(document=document, created_by=request.user)
        else:
            run, replayed = services.run_create_once(
                document=document, created_by=request.user, idempotency_key=key
            )
        body = RunSerializer(run, context={"request": request}).data
        headers = {"Location": body["url"]}
        if replayed:
            headers[REPLAYED_HEADER] = "true"
        return Response(body, status=status.HTTP_201_CREATED, headers=headers)


class RunDetailApi(APIView):
    @extend_schema(operation_id="runs_retrieve", responses={200: RunSerializer, **READ_ERRORS})
    def get(self, request: Request, run_id: int) -> Response:
        return Response(RunSerializer(get_run(run_id), context={"request": request}).data)


def accepted(request: Request, override: Override) -> Response:
    body = OverrideSerializer(override, context={"request": request}).data
    return Response(body, status=status.HTTP_202_ACCEPTED, headers={"Location": body["url"]})


class RunCommandApi(APIView):
    """Stop, pause or resume. Stored as an override; a hosted run's worker acts on it (stop
    after the step being written), a run without a worker changes state here at once."""

    mode: str = ""
    throttle_classes = [CommandRateThrottle]

    @extend_schema(
        request=CommandInput,
        responses={202: OverrideSerializer, **COMMAND_ERRORS},
    )
    def post(self, request: Request, run_id: int) -> Response:
        run = get_run(run_id)
        body = CommandInput(data=request.data)
        body.is_valid(raise_exception=True)
        override = services.override_create(
            run=run,
            created_by=request.user,
            mode=self.mode,
            reason=body.validated_data["reason"],
        )
        return accepted(request, override)


class RunStopApi(RunCommandApi):
    mode = OverrideMode.STOP


class RunPauseApi(RunCommandApi):
    mode = OverrideMode.PAUSE


class RunResumeApi(RunCommandApi):
    mode = OverrideMode.RESUME


class RunOverrideApi(APIView):
    throttle_classes = [CommandRateThrottle]

    @extend_schema(
        operation_id="runs_override",
        description="Pin the cap (`cap`, `ttl_s`), set it once (`cap`), or release a pin. "
        "Answers 202 while the run's worker has not acted on it yet: poll the override's URL "
        "until its status is applied (its decision is then in the run's decisions) or error.",
        request=OverrideInput,
        responses={202: OverrideSerializer, **COMMAND_ERRORS},
        examples=[
            OpenApiExample(
                "pin 64 for 10 minutes",
                value={"mode": "pin", "cap": 64, "ttl_s": 600, "reason": "KV tests"},
                request_only=True,
            )
        ],
    )
    def post(self, request: Request, run_id: int) -> Response:
        run = get_run(run_id)
        context = {"cap_bounds": selectors.run_cap_bounds(run)}
        body = OverrideInput(data=request.data, context=context)
        body.is_valid(raise_exception=True)
        found: dict[str, Any] = body.validated_data
        override = services.override_create(
            run=run,
            created_by=request.user,
            mode=found["mode"],
            cap=found.get("cap"),
            ttl_s=found.get("ttl_s"),
            reason=found["reason"],
        )
        return accepted(request, override)


class OverrideListApi(APIView):
    pagination_class = ByCreation

    @extend_schema(
        operation_id="runs_overrides_list",
        responses={200: OverrideSerializer(many=True), 400: ErrorSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, run_id: int) -> Response:
        rows = selectors.override_list(get_run(run_id))
        return paginated(self, request, rows, OverrideSerializer)


class OverrideDetailApi(APIView):
    @extend_schema(
        operation_id="runs_overrides_retrieve",
        responses={200: OverrideSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, run_id: int, override_id: int) -> Response:
        override = selectors.override_get(get_run(run_id), override_id)
        if override is None:
            raise Http404
        return Response(OverrideSerializer(override, context={"request": request}).data)
