"""Engines through the API: registered, changed and removed by operators; listed with the
health the last poll of any run stored, how stale it is, the runs on it, and a warning when a
running run's cap exceeds its engines x max_num_seqs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.runs.models import Engine, RunState
from tests.api.conftest import make_run

pytestmark = pytest.mark.django_db


def test_an_engine_is_created_changed_and_removed(operator_client: APIClient) -> None:
    body = {"name": "gpu-0", "url": "http://10.0.0.5:8000", "role": "decode", "max_num_seqs": 256}
    created = operator_client.post("/api/engines/", body)
    assert created.status_code == 201, created.json()
    assert {k: created.json()[k] for k in body} == body
    assert created.json()["status"] == "unknown" and created.json()["last_seen_at"] is None
    duplicate = operator_client.post("/api/engines/", body)
    assert duplicate.status_code == 400 and "name" in duplicate.json()["errors"]

    patched = operator_client.patch("/api/engines/gpu-0/", {"max_num_seqs": 512})
    assert patched.status_code == 200 and patched.json()["max_num_seqs"] == 512
    assert patched.json()["url"] == "http://10.0.0.5:8000"
    put = operator_client.put("/api/engines/gpu-0/", {"url": "http://10.0.0.6:8000", "name": "x"})
    assert put.status_code == 200
    assert (put.json()["name"], put.json()["url"]) == ("gpu-0", "http://10.0.0.6:8000")
    assert put.json()["role"] == "decode"  # a PUT without a role keeps the role's default
    assert operator_client.delete("/api/engines/gpu-0/").status_code == 204
    assert not Engine.objects.exists()
    assert operator_client.delete("/api/engines/gpu-0/").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "a b", "url": "http://10.0.0.5:8000"}, "name"),
        ({"name": "a/b", "url": "http://10.0.0.5:8000"}, "name"),
        ({"name": "ok", "url": "not a url"}, "url"),
        ({"name": "ok", "url": "http://10.0.0.5:8000", "role": "boss"}, "role"),
        ({"name": "ok", "url": "http://10.0.0.5:8000", "max_num_seqs": 0}, "max_num_seqs"),
        ({"name": "ok", "url": "http://10.0.0.5:8000", "max_num_seqs": "x"}, "max_num_seqs"),
        ({"url": "http://10.0.0.5:8000"}, "name"),
    ],
)
def test_bad_engines_are_field_errors(operator_client: APIClient, body: dict, field: str) -> None:
    response = operator_client.post("/api/engines/", body)
    assert response.status_code == 400
    assert field in response.json()["errors"]
    assert not Engine.objects.exists()


def test_health_staleness_runs_and_the_batch_limit_warning(viewer_client: APIClient) -> None:
    now = timezone.now()
    Engine.objects.create(
        name="e0", url="http://127.0.0.1:8100", max_num_seqs=64,
        last_health={"health": "up", "kv_usage": 0.4}, last_seen_at=now,
    )  # fmt: skip
    Engine.objects.create(
        name="e1", url="http://127.0.0.1:8101", max_num_seqs=64,
        last_health={"health": "up", "kv_usage": 0.1}, last_seen_at=now - timedelta(minutes=5),
    )  # fmt: skip
    Engine.objects.create(name="e2", url="http://127.0.0.1:8102")
    over = make_run(
        state=RunState.RUNNING,
        cap=200,
        config={"name": "r", "engine": [{"name": "e0"}, {"url": "http://127.0.0.1:8101/"}]},
    )
    under = make_run(state=RunState.RUNNING, cap=64, config={"engine": [{"name": "e0"}]})
    unknown = make_run(state=RunState.RUNNING, cap=900, config={"engine": [{"name": "e2"}]})
    make_run(state=RunState.COMPLETED, cap=900, config={"engine": [{"name": "e0"}]})

    rows = {e["name"]: e for e in viewer_client.get("/api/engines/").json()}
    assert rows["e0"]["status"] == "up" and rows["e0"]["staleness_s"] < 5
    assert rows["e0"]["last_health"] == {"health": "up", "kv_usage": 0.4}
    assert rows["e1"]["status"] == "stale" and rows["e1"]["staleness_s"] >= 300
    assert rows["e2"]["status"] == "unknown"
    assert rows["e0"]["runs"] == [over.pk, under.pk]
    assert rows["e1"]["runs"] == [over.pk]  # named by its URL
    assert rows["e2"]["runs"] == [unknown.pk]
    warning = (
        f"run {over.pk}: cap 200 exceeds 2 engines x max_num_seqs = 128: requests queue on "
        "the batch limit before KV fills, hiding KV pressure; raise --max-num-seqs"
    )
    assert rows["e0"]["warnings"] == [warning] and rows["e1"]["warnings"] == [warning]
    assert rows["e2"]["warnings"] == []  # its limit is unknown: no guess
    one = viewer_client.get("/api/engines/e1/").json()
    assert one["warnings"] == [warning]


def test_an_engine_an_active_run_names_cannot_be_removed(operator_client: APIClient) -> None:
    Engine.objects.create(name="e0", url="http://127.0.0.1:8100")
    run = make_run(state=RunState.PAUSED, config={"engine": [{"name": "e0"}]})
    response = operator_client.delete("/api/engines/e0/")
    assert response.status_code == 409
    assert response.json() == {"detail": f"engine e0 is named by active runs: {run.pk}"}
    assert Engine.objects.filter(name="e0").exists()
