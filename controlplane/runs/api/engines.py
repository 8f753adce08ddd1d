"""Engines: register, list with live health, change, remove."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.runs import selectors, services
from controlplane.runs.api.inputs import EngineInput
from controlplane.runs.api.runs import ERRORS
from controlplane.runs.api.serializers import EngineSerializer, ErrorSerializer
from controlplane.runs.models import Engine

NOT_FOUND = {404: OpenApiResponse(ErrorSerializer, "no such engine")}
INVALID = {
    400: OpenApiResponse(ErrorSerializer, "field errors"),
    411: OpenApiResponse(ErrorSerializer, "a body sent in chunks, with no Content-Length"),
    413: OpenApiResponse(ErrorSerializer, "body too large"),
}


def _register(body: EngineInput, name: str) -> Engine:
    found = body.validated_data
    instance = body.instance
    try:
        return services.engine_register(
            name=name,
            url=found.get("url", instance.url if instance else ""),
            role=found.get("role", instance.role if instance else "unified"),
            max_num_seqs=found.get("max_num_seqs", instance.max_num_seqs if instance else None),
        )
    except DjangoValidationError as refused:
        raise serializers.ValidationError(refused.message_dict) from None


def _view(engine: Engine) -> dict:
    found = selectors.engine_get(engine.name)
    assert found is not None
    return EngineSerializer(found).data


class EngineListApi(APIView):
    @extend_schema(
        operation_id="engines_list", responses={200: EngineSerializer(many=True), **ERRORS}
    )
    def get(self, request: Request) -> Response:
        return Response(EngineSerializer(selectors.engine_list(), many=True).data)

    @extend_schema(
        operation_id="engines_create",
        request=EngineInput,
        responses={201: EngineSerializer, **ERRORS, **INVALID},
    )
    def post(self, request: Request) -> Response:
        body = EngineInput(data=request.data)
        body.is_valid(raise_exception=True)
        engine = _register(body, body.validated_data["name"])
        return Response(_view(engine), status=status.HTTP_201_CREATED)


class EngineDetailApi(APIView):
    def _engine(self, name: str) -> Engine:
        engine = Engine.objects.filter(name=name).first()
        if engine is None:
            raise Http404
        return engine

    @extend_schema(
        operation_id="engines_retrieve", responses={200: EngineSerializer, **ERRORS, **NOT_FOUND}
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(_view(self._engine(name)))

    @extend_schema(
        operation_id="engines_update",
        request=EngineInput,
        responses={200: EngineSerializer, **ERRORS, **NOT_FOUND, **INVALID},
    )
    def put(self, request: Request, name: str) -> Response:
        return self._change(request, name, partial=False)

    @extend_schema(
        operation_id="engines_partial_update",
        request=EngineInput(partial=True),
        responses={200: EngineSerializer, **ERRORS, **NOT_FOUND, **INVALID},
    )
    def patch(self, request: Request, name: str) -> Response:
        return self._change(request, name, partial=True)

    def _change(self, request: Request, name: str, *, partial: bool) -> Response:
        engine = self._engine(name)
        body = EngineInput(engine, data=request.data, partial=partial)
        body.is_valid(raise_exception=True)
        return Response(_view(_register(body, engine.name)))

    @extend_schema(
        operation_id="engines_destroy",
        responses={
            204: None,
            409: OpenApiResponse(ErrorSerializer, "active runs name it"),
            **ERRORS,
            **NOT_FOUND,
        },
    )
    def delete(self, request: Request, name: str) -> Response:
        engine = self._engine(name)
        services.engine_delete(engine=engine, in_use=selectors.engine_in_use(engine))
        return Response(status=status.HTTP_204_NO_CONTENT)
