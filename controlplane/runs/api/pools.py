"""Pools: the runs that share engines now, as their hosts claim them (``workers.core.sharing``)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.runs import selectors
from controlplane.runs.api.runs import ERRORS
from controlplane.runs.models import CLAIM_TTL_S
from workers.core.sharing import OVERDUE_GRACE_S


class PoolRunSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="run_id")
    name = serializers.CharField(source="run.name")
    weight = serializers.FloatField(help_text="its concurrency.share")
    priority = serializers.IntegerField(help_text="higher is served first")
    demand = serializers.IntegerField(help_text="episodes it would run now")
    inflight = serializers.IntegerField(help_text="its episodes in flight")
    ceiling = serializers.IntegerField(
        allow_null=True, help_text="its part of the pool's level; null before its first split"
    )
    footprint = serializers.FloatField(
        allow_null=True,
        help_text="KV tokens one of its episodes holds on average (shares are of the KV "
        "cache); null until it has measured some",
    )
    updated_at = serializers.DateTimeField(help_text="when its host last stated its claim")
    overdue = serializers.BooleanField(
        help_text="its host missed a renewal by more than "
        f"{OVERDUE_GRACE_S:g} s and may be dead, its episodes aborted: until the claim is "
        "renewed or left out, the pool's leader neither grows the level nor judges its "
        "throughput"
    )


class PoolSerializer(serializers.Serializer):
    engines = serializers.ListField(child=serializers.CharField(), help_text="base URLs")
    level = serializers.IntegerField(
        help_text="the pool's in-flight level, in episodes: what its leader's controller "
        "sizes, and the runs' parts add up to"
    )
    leader = serializers.IntegerField(
        help_text="the run whose controller sizes the pool: the one hosted on it longest"
    )
    runs = PoolRunSerializer(many=True)


class PoolListApi(APIView):
    @extend_schema(
        operation_id="pools_list",
        description="The pools now: hosted runs whose engines overlap, each run's part of the "
        "pool's level as its host claims it (a claim not renewed for "
        f"{CLAIM_TTL_S:g} s, or a run no longer hosted, is left out). A run alone on its "
        "engines is in no pool.",
        responses={200: PoolSerializer(many=True), **ERRORS},
    )
    def get(self, request: Request) -> Response:
        return Response(PoolSerializer(selectors.pool_list(), many=True).data)
