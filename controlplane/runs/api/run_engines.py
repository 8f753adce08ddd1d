"""A run's engines: list them, add one to a running run, take one out (it drains first), and
change its share of engines other runs share.

Views only read input, call a service, and answer; adding and removing are operator commands
(overrides), answered 202 like the cap commands while the run's worker has not acted yet.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.runs import engine_commands
from controlplane.runs.api.inputs import EngineAddInput, EngineRemoveInput, ShareInput
from controlplane.runs.api.runs import COMMAND_ERRORS, READ_ERRORS, accepted, get_run
from controlplane.runs.api.serializers import OverrideSerializer
from controlplane.runs.api.throttles import CommandRateThrottle


class RunEngineSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="as the run names it: registered name or host:port")
    url = serializers.CharField()


class RunEnginesApi(APIView):
    throttle_classes = [CommandRateThrottle]

    def get_throttles(self) -> list[CommandRateThrottle]:
        """Only adding is a command; reading the list is not counted against the rate."""
        return super().get_throttles() if self.request.method == "POST" else []

    @extend_schema(
        operation_id="runs_engines_list",
        description="The engines in the run's stored config (what a worker starts it with).",
        responses={200: RunEngineSerializer(many=True), **READ_ERRORS},
    )
    def get(self, request: Request, run_id: int) -> Response:
        rows = engine_commands.run_engines(get_run(run_id))
        return Response(RunEngineSerializer(rows, many=True).data)

    @extend_schema(
        operation_id="runs_engines_add",
        description="Add an engine (a registered name or a URL) to the run. It must answer "
        "and serve the run's model. A hosted run routes new groups to it at once and rescales "
        "the cap for its KV capacity (a `rescale` decision) once a poll reports it.",
        request=EngineAddInput,
        responses={202: OverrideSerializer, **COMMAND_ERRORS},
        examples=[
            OpenApiExample(
                "a registered engine", value={"engine": "sim-engine-2"}, request_only=True
            )
        ],
    )
    def post(self, request: Request, run_id: int) -> Response:
        body = EngineAddInput(data=request.data)
        body.is_valid(raise_exception=True)
        found = body.validated_data
        override = engine_commands.engine_add(
            run=get_run(run_id),
            created_by=request.user,
            engine=found["engine"],
            reason=found["reason"],
        )
        return accepted(request, override)


class RunEngineRemoveApi(APIView):
    throttle_classes = [CommandRateThrottle]

    @extend_schema(
        operation_id="runs_engines_remove",
        description="Take an engine out of the run. A hosted run sends it no new group; the "
        "episodes on it have `drain_s` seconds to finish, then the rest are cancelled "
        "(counted in the `engine-leave` decision). The cap is rescaled for the smaller pool "
        "at once.",
        request=EngineRemoveInput,
        responses={202: OverrideSerializer, **COMMAND_ERRORS},
    )
    def post(self, request: Request, run_id: int, name: str) -> Response:
        body = EngineRemoveInput(data=request.data)
        body.is_valid(raise_exception=True)
        found = body.validated_data
        override = engine_commands.engine_remove(
            run=get_run(run_id),
            created_by=request.user,
            engine=name,
            drain_s=found.get("drain_s"),
            reason=found["reason"],
        )
        return accepted(request, override)


class RunShareApi(APIView):
    throttle_classes = [CommandRateThrottle]

    @extend_schema(
        operation_id="runs_share",
        description="Change the run's `share` (weight) and/or `priority` among the runs "
        "sharing its engines. Written into its stored config; a hosted run's worker states "
        "it at its next look, and every run of the pool is split anew (`share` decisions).",
        request=ShareInput,
        responses={202: OverrideSerializer, **COMMAND_ERRORS},
    )
    def post(self, request: Request, run_id: int) -> Response:
        body = ShareInput(data=request.data)
        body.is_valid(raise_exception=True)
        found = body.validated_data
        override = engine_commands.share_set(
            run=get_run(run_id),
            created_by=request.user,
            share=found.get("share"),
            priority=found.get("priority"),
            reason=found["reason"],
        )
        return accepted(request, override)
