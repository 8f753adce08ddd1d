"""Alert rules over the REST API: list, create, change, remove; and what they did (episodes,
deliveries with their answers). Reading needs a sign-in, writing the operator role, as the
rest of the API."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, serializers
from rest_framework.request import Request

from controlplane.alerts.conditions import AlertKind
from controlplane.alerts.models import KIND_CHOICES, AlertEpisode, AlertRule, Delivery
from controlplane.runs.api.runs import ERRORS
from controlplane.runs.api.serializers import ErrorSerializer
from controlplane.runs.models import Run

LISTED = 200  # newest episodes or deliveries per answer: what a person reads on one page
NOT_FOUND = {404: OpenApiResponse(ErrorSerializer, "no such rule")}
INVALID = {400: OpenApiResponse(ErrorSerializer, "field errors")}


class AlertRuleSerializer(serializers.ModelSerializer):
    run = serializers.PrimaryKeyRelatedField(
        queryset=Run.objects.all(),
        required=False,
        allow_null=True,
        help_text="only this run's conditions; null: every run",
    )
    kinds = serializers.ListField(
        child=serializers.ChoiceField(choices=KIND_CHOICES),
        allow_empty=False,
        required=False,
        help_text="the conditions it fires on; every one when left out",
    )
    created_by = serializers.SerializerMethodField()

    class Meta:
        model = AlertRule
        fields = [
            "id",
            "name",
            "url",
            "body_format",
            "run",
            "kinds",
            "enabled",
            "storm_preemptions_per_s",
            "storm_polls",
            "engine_down_s",
            "pin_expiring_s",
            "idle_s",
            "created_by",
            "created_at",
        ]
        read_only_fields = ["id", "created_by", "created_at"]

    def get_created_by(self, rule: AlertRule) -> str | None:
        return None if rule.created_by is None else rule.created_by.get_username()

    def validate_kinds(self, kinds: list[str]) -> list[str]:
        return sorted(set(kinds), key=[k.value for k in AlertKind].index)


class AlertEpisodeSerializer(serializers.ModelSerializer):
    class Meta:
        model = AlertEpisode
        fields = [
            "id",
            "rule",
            "run",
            "kind",
            "key",
            "summary",
            "engines",
            "figures",
            "opened_at",
            "resolved_at",
        ]


class DeliverySerializer(serializers.ModelSerializer):
    rule = serializers.IntegerField(source="episode.rule_id")
    run = serializers.IntegerField(source="episode.run_id")
    kind = serializers.CharField(source="episode.kind")

    class Meta:
        model = Delivery
        fields = [
            "id",
            "episode",
            "rule",
            "run",
            "kind",
            "event",
            "url",
            "body",
            "state",
            "attempts",
            "created_at",
            "last_attempt_at",
            "status_code",
            "answer",
            "delivered_at",
        ]


class AlertRuleListApi(generics.ListCreateAPIView):
    serializer_class = AlertRuleSerializer
    queryset = AlertRule.objects.select_related("created_by")
    pagination_class = None

    @extend_schema(
        operation_id="alert_rules_list", responses={200: AlertRuleSerializer(many=True), **ERRORS}
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        return super().get(request, *args, **kwargs)

    @extend_schema(
        operation_id="alert_rules_create",
        responses={201: AlertRuleSerializer, **ERRORS, **INVALID},
    )
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        return super().post(request, *args, **kwargs)

    def perform_create(self, serializer: AlertRuleSerializer) -> None:
        serializer.save(created_by=self.request.user)


@extend_schema(responses={**ERRORS, **NOT_FOUND, **INVALID})
class AlertRuleDetailApi(generics.RetrieveUpdateDestroyAPIView):
    serializer_class = AlertRuleSerializer
    queryset = AlertRule.objects.select_related("created_by")
    lookup_url_kwarg = "rule_id"


def _filtered(query: QuerySet, request: Request, fields: dict[str, str]) -> QuerySet:
    """``?rule=N&run=N``: integers, or a 400 naming the parameter."""
    for name, lookup in fields.items():
        value = request.query_params.get(name)
        if value is None:
            continue
        if not value.isdigit() or len(value) > 18:
            raise serializers.ValidationError(
                {name: [f"must be a positive integer, got {value!r}"]}
            )
        query = query.filter(**{lookup: int(value)})
    return query


FILTERS = [
    OpenApiParameter("rule", int, description="only this rule's"),
    OpenApiParameter("run", int, description="only this run's"),
]


class AlertEpisodeListApi(generics.ListAPIView):
    serializer_class = AlertEpisodeSerializer
    pagination_class = None

    @extend_schema(
        operation_id="alert_episodes_list",
        parameters=FILTERS,
        responses={200: AlertEpisodeSerializer(many=True), **ERRORS, **INVALID},
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet:
        query = _filtered(
            AlertEpisode.objects.all(), self.request, {"rule": "rule_id", "run": "run_id"}
        )
        return query[:LISTED]


class DeliveryListApi(generics.ListAPIView):
    serializer_class = DeliverySerializer
    pagination_class = None

    @extend_schema(
        operation_id="alert_deliveries_list",
        parameters=FILTERS,
        responses={200: DeliverySerializer(many=True), **ERRORS, **INVALID},
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet:
        query = _filtered(
            Delivery.objects.select_related("episode"),
            self.request,
            {"rule": "episode__rule_id", "run": "episode__run_id"},
        )
        return query[:LISTED]
