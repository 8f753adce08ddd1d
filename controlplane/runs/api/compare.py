"""Runs side by side: each one's summary and the fields in which their configs differ."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.runs.api.exceptions import NamedNotFound
from controlplane.runs.api.inputs import CompareFilters
from controlplane.runs.api.runs import ERRORS
from controlplane.runs.api.serializers import ComparisonSerializer, ErrorSerializer
from controlplane.runs.compare import Comparison, NoSuchRuns, compare_runs
from controlplane.runs.config_diff import ABSENT, Difference


def comparison(run_ids: list[int]) -> Comparison:
    """The runs compared; a 404 naming those that do not exist."""
    try:
        return compare_runs(run_ids)
    except NoSuchRuns as missing:
        raise NamedNotFound(str(missing)) from None


class RunCompareApi(APIView):
    @extend_schema(
        operation_id="runs_compare",
        description="Two to four runs: each one's summary (with links to its samples, steps "
        "and decisions, which give its series) and the fields in which their configs differ, "
        "as dotted paths with each run's value (`present: false` where a config lacks it).",
        parameters=[CompareFilters],
        responses={
            200: ComparisonSerializer,
            400: OpenApiResponse(ErrorSerializer, "not 2 to 4 distinct run ids"),
            404: OpenApiResponse(ErrorSerializer, "a run that does not exist, named"),
            **ERRORS,
        },
    )
    def get(self, request: Request) -> Response:
        filters = CompareFilters(data=request.query_params.dict())
        filters.is_valid(raise_exception=True)
        found = comparison(filters.validated_data["runs"])
        body = ComparisonSerializer(
            {"runs": found.runs, "differences": [_row(found, d) for d in found.differences]},
            context={"request": request},
        ).data
        return Response(body)


def _row(found: Comparison, difference: Difference) -> dict[str, Any]:
    values = zip(found.runs, difference.values, strict=True)
    return {
        "path": difference.path,
        "values": [
            {"run": run.pk, "present": v is not ABSENT, "value": None if v is ABSENT else v}
            for run, v in values
        ],
    }
