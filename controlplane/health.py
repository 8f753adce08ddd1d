"""Whether the web process can reach what Pacer depends on: the database and Redis."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import redis
from django.conf import settings
from django.db import connection
from drf_spectacular.utils import extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

# A health check must answer fast even when Redis hangs; 2 s is well under a probe's period.
REDIS_TIMEOUT_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class Check:
    ok: bool
    detail: str


def check_database() -> Check:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as error:  # any driver error means "not reachable", with its text
        return Check(ok=False, detail=f"{type(error).__name__}: {error}")
    return Check(ok=True, detail=connection.vendor)


def check_redis() -> Check:
    client = redis.Redis.from_url(
        settings.REDIS_URL,
        socket_timeout=REDIS_TIMEOUT_SECONDS,
        socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
    )
    try:
        client.ping()
    except redis.RedisError as error:
        return Check(ok=False, detail=f"{type(error).__name__}: {error}")
    finally:
        client.close()
    return Check(ok=True, detail="pong")


class HealthApi(APIView):
    """Answers 200 when every dependency is reachable, 503 otherwise, with each one's status."""

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]

    @extend_schema(responses={200: dict, 503: dict})
    def get(self, request: Request) -> Response:
        checks = {"database": check_database(), "redis": check_redis()}
        healthy = all(check.ok for check in checks.values())
        body = {
            "status": "ok" if healthy else "degraded",
            **{name: asdict(check) for name, check in checks.items()},
        }
        return Response(body, status=200 if healthy else 503)
