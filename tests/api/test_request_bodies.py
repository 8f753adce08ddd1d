"""Request bodies as the served stack (daphne) receives them: a body sent in chunks, with no
Content-Length, is refused with 411 instead of being read as empty, and one declared larger
than the limit is a 413; neither stores anything."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from controlplane.runs.models import Run
from tests.api.conftest import LiveServer, config_document, make_account

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

MB = 1024 * 1024


def chunks(data: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def test_a_chunked_body_is_411_not_read_as_empty(live_server_api: LiveServer) -> None:
    token = make_account("olga", "operator").token
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    url = f"{live_server_api.url}/api/runs/"
    small = json.dumps(config_document("http://127.0.0.1:9")).encode()
    big = json.dumps({"name": "x" * (10 * MB)}).encode()
    for body in (small, big):
        response = httpx.post(url, content=chunks(body), headers=headers, timeout=60)
        assert response.request.headers.get("transfer-encoding") == "chunked"
        assert response.status_code == 411, response.text
        assert "Content-Length" in response.json()["detail"]
    assert not Run.objects.exists()


def test_a_body_declared_over_the_limit_is_413(live_server_api: LiveServer) -> None:
    token = make_account("olga", "operator").token
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    body = json.dumps({"name": "x" * (2 * MB)}).encode()
    response = httpx.post(f"{live_server_api.url}/api/runs/", content=body, headers=headers)
    assert response.status_code == 413 and "larger than" in response.json()["detail"]
    assert not Run.objects.exists()
