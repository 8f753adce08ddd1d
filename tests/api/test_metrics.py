"""/metrics: Prometheus text read from the database at scrape time, so every web process
answers the same."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from controlplane.runs.models import EngineSample, Override, RunState
from tests.api.conftest import make_decisions, make_run

pytestmark = pytest.mark.django_db


def samples(client: Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    found = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_runs_decisions_engines_and_command_latency_are_exposed(client: Client) -> None:
    from controlplane.runs.models import Engine

    running = make_run(
        state=RunState.RUNNING, cap=48, policy_cap=96, inflight_train=40, inflight_eval=6, step=7
    )
    make_run(state=RunState.QUEUED)
    old = make_run(state=RunState.COMPLETED, finished_at=timezone.now() - timedelta(days=2))
    make_decisions(running, 3)
    make_decisions(running, 1, kind="pin")
    make_decisions(old, 5)
    now = timezone.now()
    Engine.objects.create(
        name="e0", url="http://127.0.0.1:8100", last_health={"health": "up"}, last_seen_at=now
    )
    Engine.objects.create(
        name="e1", url="http://127.0.0.1:8101", last_health={"health": "up"},
        last_seen_at=now - timedelta(minutes=10),
    )  # fmt: skip
    EngineSample.objects.create(
        run=running, at=now, engine_id="e0", role="unified", health="up", kv_usage=0.5,
        num_running=1, num_waiting=0, num_preemptions=0, prefix_cache_hits=0,
        prefix_cache_queries=0, generation_tokens=0, staleness_s=0.75,
    )  # fmt: skip
    for seconds in (0.2, 0.4, 3.0):
        override = Override.objects.create(run=running, mode="pin", cap=8, ttl_s=5.0)
        Override.objects.filter(pk=override.pk).update(
            applied_at=override.created_at + timedelta(seconds=seconds)
        )
    Override.objects.create(run=running, mode="release")  # pending

    found = samples(client)
    run = str(running.pk)
    assert found[("pacer_runs", (("state", "running"),))] == 1
    assert found[("pacer_runs", (("state", "completed"),))] == 1
    assert found[("pacer_runs", (("state", "failed"),))] == 0
    assert found[("pacer_run_cap", (("run", run),))] == 48
    assert found[("pacer_run_policy_cap", (("run", run),))] == 96
    assert found[("pacer_run_inflight", (("kind", "train"), ("run", run)))] == 40
    assert found[("pacer_run_inflight", (("kind", "eval"), ("run", run)))] == 6
    assert found[("pacer_run_step", (("run", run),))] == 7
    assert found[("pacer_run_overrides_pending", (("run", run),))] == 1
    grow = (("cause", "clear"), ("kind", "grow"), ("run", run))
    assert found[("pacer_decisions_total", grow)] == 3
    assert (
        found[("pacer_decisions_total", (("cause", "clear"), ("kind", "pin"), ("run", run)))] == 1
    )
    assert not any(k[0] == "pacer_decisions_total" and ("run", str(old.pk)) in k[1] for k in found)
    assert found[("pacer_engine_up", (("engine", "e0"),))] == 1
    assert found[("pacer_engine_up", (("engine", "e1"),))] == 0
    assert found[("pacer_engine_stale", (("engine", "e1"),))] == 1
    assert found[("pacer_engine_staleness_seconds", (("engine", "e0"), ("run", run)))] == 0.75
    le = lambda bound: ("pacer_control_latency_seconds_bucket", (("le", bound), ("mode", "pin")))  # noqa: E731
    assert found[le("0.25")] == 1 and found[le("0.5")] == 2 and found[le("5.0")] == 3
    assert found[le("+Inf")] == 3
    assert found[("pacer_control_latency_seconds_count", (("mode", "pin"),))] == 3
    assert found[("pacer_control_latency_seconds_sum", (("mode", "pin"),))] == pytest.approx(3.6)
    assert found[("pacer_metrics_collect_seconds", ())] > 0


def test_metrics_ask_for_the_bearer_token_when_one_is_set(client: Client, settings: object) -> None:
    settings.PACER_METRICS_TOKEN = "s3cret"  # type: ignore[attr-defined]
    refused = client.get("/metrics")
    assert refused.status_code == 401 and refused["WWW-Authenticate"] == "Bearer"
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200
