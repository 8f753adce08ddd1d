"""The alerts API, included under /api/alerts/ with the namespace ``alerts-api``."""

from __future__ import annotations

from django.urls import path

from controlplane.alerts import api

app_name = "alerts-api"

urlpatterns = [
    path("rules/", api.AlertRuleListApi.as_view(), name="rule-list"),
    path("rules/<int:rule_id>/", api.AlertRuleDetailApi.as_view(), name="rule-detail"),
    path("episodes/", api.AlertEpisodeListApi.as_view(), name="episode-list"),
    path("deliveries/", api.DeliveryListApi.as_view(), name="delivery-list"),
]
