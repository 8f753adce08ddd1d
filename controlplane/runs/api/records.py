"""What a run leaves behind: decisions, engine samples, steps (and the trainer's
acknowledgements of them), evaluation waves, and exports of decisions and steps."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.runs import sample_series, selectors, services
from controlplane.runs.api.export import export_response
from controlplane.runs.api.inputs import (
    AckInput,
    DecisionFilters,
    ExportFilters,
    SampleFilters,
    StepFilters,
)
from controlplane.runs.api.pagination import ByStep, ByWave, OldestFirst
from controlplane.runs.api.runs import (
    COMMAND_ERRORS,
    READ_ERRORS,
    get_run,
    paginated,
)
from controlplane.runs.api.serializers import (
    AckResultSerializer,
    DecisionSerializer,
    ErrorSerializer,
    EvalSerializer,
    SampleSeriesSerializer,
    StepSerializer,
)

FILTER_ERRORS = {**READ_ERRORS, 400: OpenApiResponse(ErrorSerializer, "bad query parameters")}


class DecisionListApi(APIView):
    pagination_class = OldestFirst

    @extend_schema(
        operation_id="runs_decisions_list",
        description="The run's decisions, oldest first (newest last), a page at a time.",
        parameters=[DecisionFilters],
        responses={200: DecisionSerializer(many=True), **FILTER_ERRORS},
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = get_run(run_id)
        filters = DecisionFilters(data=request.query_params.dict())
        filters.is_valid(raise_exception=True)
        since = filters.validated_data.get("since")
        decisions = selectors.decision_list(
            run,
            kinds=filters.validated_data.get("kind", []),
            since=None if isinstance(since, int) else since,
            after_id=since if isinstance(since, int) else None,
        )
        return paginated(self, request, decisions, DecisionSerializer)


class SampleSeriesApi(APIView):
    @extend_schema(
        operation_id="runs_samples",
        description="Each engine's samples, downsampled in bins of `step_s` by the database: "
        "gauges averaged (KV usage, running, waiting), deltas summed (preemptions, generated "
        "tokens, prefix-cache hits and queries), with the rates they make. Raw samples older "
        "than the retention are kept in bins of 60 s, 10 min and 1 h only: a step that is no "
        "multiple of 60 s over such a range is a 400 saying so.",
        parameters=[SampleFilters],
        responses={200: SampleSeriesSerializer, **FILTER_ERRORS},
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = get_run(run_id)
        filters = SampleFilters(data=request.query_params.dict())
        filters.is_valid(raise_exception=True)
        found: dict[str, Any] = filters.validated_data
        try:
            series = sample_series.sample_series(
                run,
                engines=found.get("engine", []),
                since=found.get("since"),
                until=found.get("until"),
                step_s=found.get("step_s"),
            )
        except (sample_series.TooManyPoints, sample_series.SamplesPruned) as refused:
            raise serializers.ValidationError({"step_s": [str(refused)]}) from None
        # Plain values, not the serializer (which documents them): a chart's few thousand
        # points cost more in DRF's per-field machinery than in the database.
        return Response(
            {
                "step_s": series.step_s,
                "since": _iso(series.since),
                "until": _iso(series.until),
                "points": [{**p, "at": _iso(p["at"])} for p in series.points],
            }
        )


def _iso(moment: datetime | None) -> str | None:
    """As DRF's DateTimeField writes UTC times: ``2026-11-30T12:00:00Z``."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


class StepListApi(APIView):
    pagination_class = ByStep

    @extend_schema(
        operation_id="runs_steps_list",
        parameters=[StepFilters],
        responses={200: StepSerializer(many=True), **FILTER_ERRORS},
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = get_run(run_id)
        filters = StepFilters(data=request.query_params.dict())
        filters.is_valid(raise_exception=True)
        steps = selectors.step_list(run, after=filters.validated_data.get("after"))
        return paginated(self, request, steps, StepSerializer)


class StepAckApi(APIView):
    """For trainer mode ``external``: the trainer has trained on the step and serves
    ``policy_version`` now, with its weights in ``checkpoint`` (optional: a trainer may send
    none back). A checkpoint that is not a loadable model folder inside the run's checkpoint
    root is a 400 at ``checkpoint``, nothing stored. Idempotent: the same acknowledgement
    again is a 200 that changes nothing; one for a step not written yet, or with another
    version or checkpoint, is a 409."""

    @extend_schema(
        operation_id="runs_steps_ack",
        request=AckInput,
        responses={200: AckResultSerializer, **COMMAND_ERRORS},
    )
    def post(self, request: Request, run_id: int, step: int) -> Response:
        run = get_run(run_id)
        body = AckInput(data=request.data)
        body.is_valid(raise_exception=True)
        record, changed = services.step_acknowledge(
            run=run,
            step=step,
            policy_version=body.validated_data["policy_version"],
            checkpoint=body.validated_data.get("checkpoint"),
        )
        return Response({"acknowledged": changed, "step": StepSerializer(record).data})


@extend_schema(exclude=True)
class StepAckNoSlashApi(StepAckApi):
    """``.../ack`` as a trainer may write it; the schema lists ``.../ack/`` only."""


class EvalListApi(APIView):
    pagination_class = ByWave

    @extend_schema(
        operation_id="runs_evals_list", responses={200: EvalSerializer(many=True), **FILTER_ERRORS}
    )
    def get(self, request: Request, run_id: int) -> Response:
        return paginated(self, request, selectors.eval_list(get_run(run_id)), EvalSerializer)


class _CsvRenderer(BaseRenderer):
    """Lets ``Accept: text/csv`` through negotiation; the body is streamed, not rendered."""

    media_type = "text/csv"
    format = "csv"

    def render(self, data: Any, accepted_media_type: str | None = None, **kwargs: Any) -> Any:
        return data


class ExportApi(APIView):
    renderer_classes = [JSONRenderer, _CsvRenderer]

    def handle_exception(self, exc: Exception) -> Response:
        """Errors are JSON, whatever the client accepts for the export itself."""
        self.request.accepted_renderer = JSONRenderer()
        self.request.accepted_media_type = JSONRenderer.media_type
        return super().handle_exception(exc)

    @extend_schema(
        operation_id="runs_export",
        description="Every decision (oldest first) or step of the run as CSV (a header line, "
        "then a line per row; figures as JSON text) or as one JSON array, streamed.",
        parameters=[
            ExportFilters,
            OpenApiParameter("table", str, OpenApiParameter.PATH, enum=["decisions", "steps"]),
        ],
        responses={
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, "CSV"),
            (200, "application/json"): OpenApiResponse(OpenApiTypes.ANY, "a JSON array"),
            **{(code, "application/json"): r for code, r in FILTER_ERRORS.items()},
        },
    )
    def get(self, request: Request, run_id: int, table: str) -> Any:
        if table not in ("decisions", "steps"):
            raise Http404
        run = get_run(run_id)
        filters = ExportFilters(data=request.query_params.dict())
        filters.is_valid(raise_exception=True)
        return export_response(request._request, table, filters.validated_data["format"], run.pk)
