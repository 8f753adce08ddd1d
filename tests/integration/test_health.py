"""The health endpoint reports the real database and the real Redis."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client, override_settings

from tests.conftest import free_port

pytestmark = [pytest.mark.django_db, pytest.mark.integration]


def test_health_is_ok_against_real_postgresql_and_redis(client: Client) -> None:
    response = client.get("/api/health/")
    body = response.json()
    assert response.status_code == 200, body
    assert body["status"] == "ok"
    assert body["database"] == {"ok": True, "detail": "postgresql"}
    assert body["redis"] == {"ok": True, "detail": "pong"}
    assert connection.vendor == "postgresql"


def test_health_is_503_and_names_redis_when_redis_is_unreachable(client: Client) -> None:
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0"):
        response = client.get("/api/health/")
    body = response.json()
    assert response.status_code == 503
    assert body["status"] == "degraded"
    assert body["database"]["ok"] is True
    assert body["redis"]["ok"] is False
    assert "ConnectionError" in body["redis"]["detail"]
