"""The OpenAPI schema describes every endpoint with its bodies and errors, and Swagger UI is
served from Pacer's own static files (no CDN is reachable from a browser here)."""

from __future__ import annotations

import pytest
import yaml
from django.contrib.staticfiles import finders
from django.test import Client

pytestmark = pytest.mark.django_db

PATHS = {
    "/api/runs/": {"get", "post"},
    "/api/runs/compare/": {"get"},
    "/api/runs/{run_id}/": {"get"},
    "/api/runs/{run_id}/stop/": {"post"},
    "/api/runs/{run_id}/pause/": {"post"},
    "/api/runs/{run_id}/resume/": {"post"},
    "/api/runs/{run_id}/override/": {"post"},
    "/api/runs/{run_id}/overrides/": {"get"},
    "/api/runs/{run_id}/overrides/{override_id}/": {"get"},
    "/api/runs/{run_id}/decisions/": {"get"},
    "/api/runs/{run_id}/samples/": {"get"},
    "/api/runs/{run_id}/steps/": {"get"},
    "/api/runs/{run_id}/steps/{step}/ack/": {"post"},
    "/api/runs/{run_id}/evals/": {"get"},
    "/api/runs/{run_id}/export/{table}/": {"get"},
    "/api/engines/": {"get", "post"},
    "/api/engines/{name}/": {"get", "put", "patch", "delete"},
}


def test_the_schema_has_every_endpoint_with_its_bodies_and_errors(client: Client) -> None:
    schema = yaml.safe_load(client.get("/api/schema/").content)
    for path, methods in PATHS.items():
        assert methods <= set(schema["paths"][path]), path
    create = schema["paths"]["/api/runs/"]["post"]
    assert set(create["requestBody"]["content"]) == {"application/json", "application/toml"}
    assert {"201", "400", "401", "403", "413"} <= set(create["responses"])
    override = schema["paths"]["/api/runs/{run_id}/override/"]["post"]
    assert {"202", "400", "401", "403", "404", "409", "413", "429"} <= set(override["responses"])
    body = schema["components"]["schemas"]["OverrideInputRequest"]
    assert body["required"] == ["mode"] and body["properties"]["ttl_s"]["maximum"] == 604800.0
    decisions = schema["paths"]["/api/runs/{run_id}/decisions/"]["get"]
    names = {p["name"] for p in decisions["parameters"]}
    assert {"cursor", "page_size", "kind", "since"} <= names
    listed = decisions["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert listed.endswith("PaginatedDecisionList")
    export = schema["paths"]["/api/runs/{run_id}/export/{table}/"]["get"]["responses"]["200"]
    assert set(export["content"]) == {"text/csv", "application/json"}
    schemes = schema["components"]["securitySchemes"]
    assert schemes["tokenAuth"]["in"] == "header" and "cookieAuth" in schemes


def test_swagger_ui_is_served_from_local_static_files(client: Client) -> None:
    page = client.get("/api/docs/").content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in page
    assert "cdn" not in page.lower() and "unpkg" not in page.lower()
    assert finders.find("drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")
